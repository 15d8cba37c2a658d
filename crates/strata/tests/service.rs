//! Running as a systemd service: the unit file in `packaging/systemd/` passes
//! `systemd-analyze verify` without a warning, and the server speaks the readiness protocol its
//! `Type=notify` relies on (`READY=1` once serving, `STOPPING=1` at a clean shutdown).

mod harness;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use harness::{resp_command, Client, Server};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_unit_file_passes_systemd_analyze_verify() {
    let root = repository();
    let unit = std::fs::read_to_string(root.join("packaging/systemd/strata.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/strata serve --config /etc/strata/strata.toml"));
    // Verified against this build and this repository's config file (verify checks that the
    // command exists).
    let config = root.join("config/strata.toml");
    let unit = unit
        .replace("/usr/local/bin/strata", env!("CARGO_BIN_EXE_strata"))
        .replace("/etc/strata/strata.toml", config.to_str().unwrap());
    let dir = std::env::temp_dir().join(format!("strata-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("strata.service");
    std::fs::write(&path, unit).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package; scripts/test.sh installs it)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(output.status.success(), "{stderr}");
    // An unknown or misspelt key is only a warning to systemd: none may be printed.
    assert!(stderr.trim().is_empty(), "{stderr}");
}

#[test]
fn the_server_notifies_systemd_when_ready_and_when_stopping() {
    let path = std::env::temp_dir().join(format!("strata-notify-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut server = Server::launch(&[], &[], &[("NOTIFY_SOCKET", path.to_str().unwrap())]);
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("READY=1 within 30 s");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "READY=1"), "{message:?}");
    // Ready means serving: the startup line is out and a client is answered.
    assert!(server.log().contains("strata ready"), "{}", server.log());
    server.await_ready();
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&resp_command(&[b"PING"])), "+PONG\r\n");
    server.signal("TERM");
    let n = socket.recv(&mut buf).expect("STOPPING=1 within 30 s");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(message.lines().any(|l| l == "STOPPING=1"), "{message:?}");
    assert!(server.wait_exit().success());
    let _ = std::fs::remove_file(&path);
}

/// A `NOTIFY_SOCKET` that names nothing (a unit file's typo, a socket gone) costs a warning,
/// never the service: the server starts, serves and stops cleanly as without one.
#[test]
fn a_notify_socket_that_names_nothing_is_a_warning_not_a_failure() {
    let missing =
        std::env::temp_dir().join(format!("strata-no-notify-{}.sock", std::process::id()));
    let mut server = Server::launch(&[], &[], &[("NOTIFY_SOCKET", missing.to_str().unwrap())]);
    server.await_ready();
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&resp_command(&[b"PING"])), "+PONG\r\n");
    assert!(
        server
            .log()
            .contains("could not notify the service manager"),
        "{}",
        server.log()
    );
    server.signal("TERM");
    assert!(server.wait_exit().success());
}
