//! A real memcached 1.6.18 on a free loopback port, for the differential tests.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for memcached to accept connections or to answer a step.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

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
    pub fn start(extra: &[&str]) -> Memcached {
        let port = free_port();
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
            .stderr(Stdio::null())
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
        while TcpStream::connect(addr).is_err() {
            if let Ok(Some(status)) = memcached.child.try_wait() {
                panic!("memcached exited ({status}) with flags {extra:?}");
            }
            assert!(
                Instant::now() < deadline,
                "memcached did not start on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        memcached
    }
}
