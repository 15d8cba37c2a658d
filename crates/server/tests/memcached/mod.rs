//! A real memcached 1.6.18 on a free loopback port, for the differential tests.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for memcached to accept connections or to answer a step.
pub const WAIT_MAX: Duration = Duration::from_secs(20);
/// Free ports tried before giving up.
const START_ATTEMPTS_MAX: usize = 10;

/// A memcached child process, killed on drop.
pub struct Memcached {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().expect("local addr").port()
}

impl Memcached {
    /// Starts memcached with one thread, TCP only, and `extra` flags; waits until it accepts.
    /// A free port can be taken between the probe that found it and memcached's bind (tests run
    /// in parallel, each with its memcached): then memcached exits, and another port is tried.
    pub fn start(extra: &[&str]) -> Memcached {
        for _ in 0..START_ATTEMPTS_MAX {
            if let Some(memcached) = Self::try_start(free_port(), extra) {
                return memcached;
            }
        }
        panic!("memcached did not start on any of {START_ATTEMPTS_MAX} free ports");
    }

    fn try_start(port: u16, extra: &[&str]) -> Option<Memcached> {
        // `-u nobody` is needed only when running as root and ignored otherwise.
        let child = Command::new("memcached")
            .args([
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-l",
                "127.0.0.1",
                "-t",
                "1",
                "-u",
                "nobody",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run memcached ({error}): the differential tests need memcached \
                     1.6.18; run ./scripts/test.sh, which installs it"
                )
            });
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut memcached = Memcached { child, addr };
        let deadline = Instant::now() + WAIT_MAX;
        loop {
            // Ours must still run once something accepts: another test's memcached may hold the
            // port, and ours then exits, unable to bind.
            if let Ok(Some(status)) = memcached.child.try_wait() {
                let mut said = String::new();
                if let Some(mut stderr) = memcached.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
                }
                assert!(
                    said.contains("listen"),
                    "memcached exited ({status}) with flags {extra:?}: {said}"
                );
                return None;
            }
            if TcpStream::connect(addr).is_ok() {
                std::thread::sleep(Duration::from_millis(50));
                return match memcached.child.try_wait() {
                    Ok(None) => Some(memcached),
                    _ => None,
                };
            }
            assert!(
                Instant::now() < deadline,
                "memcached did not start on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
