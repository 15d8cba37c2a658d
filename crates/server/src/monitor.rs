//! MONITOR: every command any Redis client runs, sent as a line to each monitoring connection,
//! as Redis sends it (`+1700000000.123456 [0 127.0.0.1:50000] "set" "k" "v"`).
//!
//! The cost when nobody monitors is one relaxed load per command ([`Monitors::active`]). With
//! monitors, the worker that runs a command formats its line once and appends it to each
//! monitor's backlog ([`Sink`]); a backlog going from empty to not empty wakes the monitor's
//! worker (`Clients::push`), which moves it into the connection's output and writes it
//! (`Session::take_pushed`). A monitor that reads slower than the server runs commands is
//! closed once its backlog passes [`BACKLOG_BYTES_MAX`] (as Redis closes a client over its
//! output limit): it never grows memory without bound, and no worker ever waits for it.
//!
//! Shown, as in Redis 7: Redis commands once they ran (past their arity and authentication
//! checks), those an EXEC runs before the EXEC's own line, as the client spelled them; not
//! admin commands (CONFIG, SHUTDOWN, DEBUG, MONITOR...); AUTH's arguments and HELLO's AUTH
//! username and password read `"(redacted)"`. memcached commands are not shown.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::clients::{Client, Clients};

/// The most bytes of lines a monitor may have waiting before it is closed.
pub const BACKLOG_BYTES_MAX: usize = 8 << 20;

/// One monitoring connection's backlog.
#[derive(Debug)]
pub struct Sink {
    client: Arc<Client>,
    backlog: Mutex<Vec<u8>>,
    overflowed: AtomicBool,
    /// Its connection closed: the next feed forgets it.
    gone: AtomicBool,
}

impl Sink {
    /// Its connection closed (the session's drop): nothing more is sent to it.
    pub fn close(&self) {
        self.gone.store(true, Ordering::Relaxed);
    }

    /// Moves the waiting lines to the end of `out`; returns whether there were any.
    pub fn drain_into(&self, out: &mut Vec<u8>) -> bool {
        let mut backlog = self.backlog.lock().unwrap_or_else(PoisonError::into_inner);
        let any = !backlog.is_empty();
        out.extend_from_slice(&backlog);
        backlog.clear();
        if backlog.capacity() > 64 << 10 {
            backlog.shrink_to(64 << 10);
        }
        any
    }
}

/// The monitors of a server.
#[derive(Debug, Default)]
pub struct Monitors {
    attached: AtomicUsize,
    sinks: Mutex<Vec<Arc<Sink>>>,
}

impl Monitors {
    /// Whether any connection monitors (a relaxed load: a command run just as the first
    /// monitor attaches may not be shown, as in Redis).
    pub fn active(&self) -> bool {
        self.attached.load(Ordering::Relaxed) > 0
    }

    /// Makes `client`'s connection a monitor.
    pub fn attach(&self, client: Arc<Client>) -> Arc<Sink> {
        let sink = Arc::new(Sink {
            client,
            backlog: Mutex::new(Vec::new()),
            overflowed: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        });
        let mut sinks = self.lock();
        sinks.push(Arc::clone(&sink));
        self.attached.store(sinks.len(), Ordering::Relaxed);
        sink
    }

    /// Stops sending to `sink` (RESET, or the connection closed).
    pub fn detach(&self, sink: &Arc<Sink>) {
        let mut sinks = self.lock();
        sinks.retain(|s| !Arc::ptr_eq(s, sink));
        self.attached.store(sinks.len(), Ordering::Relaxed);
    }

    /// Appends `line` to every monitor's backlog: wakes the worker of each that was empty, and
    /// has a monitor whose backlog would pass [`BACKLOG_BYTES_MAX`] closed instead.
    pub fn feed(&self, line: &[u8], clients: &Clients) {
        let mut sinks = self.lock();
        if sinks.iter().any(|sink| sink.gone.load(Ordering::Relaxed)) {
            sinks.retain(|sink| !sink.gone.load(Ordering::Relaxed));
            self.attached.store(sinks.len(), Ordering::Relaxed);
        }
        for sink in sinks.iter() {
            if sink.overflowed.load(Ordering::Relaxed) {
                continue;
            }
            let mut backlog = sink.backlog.lock().unwrap_or_else(PoisonError::into_inner);
            if backlog.len() + line.len() > BACKLOG_BYTES_MAX {
                sink.overflowed.store(true, Ordering::Relaxed);
                drop(backlog);
                tracing::warn!(
                    client = sink.client.id,
                    backlog_bytes_max = BACKLOG_BYTES_MAX,
                    "a MONITOR connection read too slowly: closed"
                );
                clients.kill(&sink.client);
                continue;
            }
            let was_empty = backlog.is_empty();
            backlog.extend_from_slice(line);
            drop(backlog);
            if was_empty {
                clients.push(sink.client.worker);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Sink>>> {
        self.sinks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Formats the MONITOR line of a command: `+secs.micros [0 addr] "arg" ...\r\n`, each argument
/// quoted as Redis's `sdscatrepr` quotes it; `redacted` arguments (by position) read
/// `"(redacted)"`.
pub fn line(
    out: &mut Vec<u8>,
    unix_us: u64,
    addr: &str,
    args: impl Iterator<Item = (bool, impl AsRef<[u8]>)>,
) {
    use std::io::Write;
    let _ = write!(
        out,
        "+{}.{:06} [0 {addr}]",
        unix_us / 1_000_000,
        unix_us % 1_000_000
    );
    for (redacted, arg) in args {
        out.push(b' ');
        if redacted {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            quote(out, arg.as_ref());
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `bytes` in double quotes, escaped as Redis's `sdscatrepr` does.
fn quote(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &byte in bytes {
        match byte {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', byte]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7E => out.push(byte),
            _ => {
                let _ = std::io::Write::write_fmt(out, format_args!("\\x{byte:02x}"));
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_quote_as_redis_does_and_redact() {
        let mut out = Vec::new();
        let args: Vec<(bool, &[u8])> = vec![
            (false, b"set"),
            (false, b"k\"\\"),
            (false, b"a\r\n\t\x07\x08\x00\xff z"),
            (true, b"secret"),
        ];
        line(
            &mut out,
            1_700_000_000_000_042,
            "127.0.0.1:5000",
            args.into_iter(),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "+1700000000.000042 [0 127.0.0.1:5000] \"set\" \"k\\\"\\\\\" \
             \"a\\r\\n\\t\\a\\b\\x00\\xff z\" \"(redacted)\"\r\n"
        );
    }

    #[test]
    fn a_backlog_past_its_bound_closes_its_monitor_and_spares_the_others() {
        let clients = Clients::new(1);
        let client = |id| Arc::new(Client::new(id, (None, None), (0, 0), 0));
        let monitors = Monitors::default();
        assert!(!monitors.active());
        let (slow, fast) = (client(1), client(2));
        let slow_sink = monitors.attach(Arc::clone(&slow));
        let fast_sink = monitors.attach(Arc::clone(&fast));
        assert!(monitors.active());
        let line = vec![b'x'; 64 << 10];
        let mut drained = Vec::new();
        for _ in 0..(BACKLOG_BYTES_MAX / line.len() + 1) {
            monitors.feed(&line, &clients);
            fast_sink.drain_into(&mut drained);
            drained.clear();
        }
        assert!(
            slow.killed.load(Ordering::Acquire),
            "the slow monitor is closed"
        );
        assert!(!fast.killed.load(Ordering::Acquire));
        assert!(slow_sink.backlog.lock().unwrap().len() <= BACKLOG_BYTES_MAX);
        monitors.detach(&slow_sink);
        monitors.detach(&fast_sink);
        assert!(!monitors.active());
    }
}
