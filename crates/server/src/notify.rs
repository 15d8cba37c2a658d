//! systemd's readiness protocol (`sd_notify(3)`), for `Type=notify` units: the server says
//! `READY=1` once its listeners are bound and the engine is open, and `STOPPING=1` when it
//! begins a clean shutdown. The service manager passes a datagram socket in `NOTIFY_SOCKET` (a
//! path, or an abstract name written `@name`); without it these do nothing. Errors are logged,
//! never fatal: a server that cannot tell systemd it is ready still serves.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Environment variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Tells the service manager the server is ready to serve.
pub fn ready() {
    send("READY=1\nSTATUS=serving");
}

/// Tells the service manager the server is shutting down.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=finishing requests in flight");
}

fn send(state: &str) {
    let Some(target) = std::env::var_os(NOTIFY_SOCKET_ENV) else {
        return;
    };
    let target = target.to_string_lossy().into_owned();
    let result = address(&target).and_then(|addr| {
        let socket = UnixDatagram::unbound()?;
        socket.send_to_addr(state.as_bytes(), &addr)
    });
    if let Err(error) = result {
        tracing::warn!(%error, socket = %target, state, "could not notify the service manager");
    }
}

/// The socket address `NOTIFY_SOCKET` names: a path, or `@name` for an abstract socket.
fn address(target: &str) -> std::io::Result<SocketAddr> {
    match target.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_and_an_abstract_name_are_both_addresses() {
        let path = address("/run/systemd/notify").unwrap();
        assert_eq!(
            path.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        let abstract_name = address("@strata-notify").unwrap();
        assert_eq!(
            abstract_name.as_abstract_name(),
            Some(&b"strata-notify"[..])
        );
    }
}
