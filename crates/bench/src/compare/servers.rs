//! Starting and stopping the servers under test: memcached, Redis and strata, each on free
//! loopback ports, pinned with `taskset` to the server core.
//!
//! A server command is a template with `{memcache_port}`, `{resp_port}`, `{threads}`,
//! `{memory_mib}` and `{target_dir}` (`$CARGO_TARGET_DIR` or `target`) placeholders, run as `sh -c "exec taskset -c CPU <command>"`: `exec` keeps
//! the PID, so the PID we hold is the server's own, for `/proc/PID/stat` and `/proc/PID/status`.
//!
//! Invariant: a [`ServerProcess`] owns its child; dropping it kills and reaps the child, so a
//! failing run or test never leaves a server behind.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::protocol::Protocol;

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Gap between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// How long a readiness probe waits for the no-op's reply.
const NO_OP_TIMEOUT: Duration = Duration::from_secs(1);
/// How many times [`ServerProcess::start`] starts a server whose port was taken.
const START_ATTEMPTS: u32 = 3;

/// memcached 1.6 as Debian ships it (`-u nobody` lets it start as root; it is ignored otherwise).
pub const MEMCACHED_COMMAND: &str =
    "memcached -u nobody -t {threads} -m {memory_mib} -p {memcache_port} -U 0 -l 127.0.0.1 -c 4096";
/// Redis 7 with persistence off and an LRU memory cap.
pub const REDIS_COMMAND: &str = "redis-server --port {resp_port} --bind 127.0.0.1 --save '' \
     --appendonly no --maxmemory {memory_mib}mb --maxmemory-policy allkeys-lru --io-threads 1";
/// strata's server, as the `strata` binary will offer it.
pub const STRATA_COMMAND: &str = "{target_dir}/release/strata serve \
     --memcache-listen 127.0.0.1:{memcache_port} --resp-listen 127.0.0.1:{resp_port} \
     --admin-listen off --threads {threads} --memory {memory_mib}MiB";

/// memcached's extstore (1.5.4+), with its defaults for everything but the file: `{flash_path}`
/// and `{flash_mib}` are filled in by the flash scenarios.
pub const MEMCACHED_FLASH_ARGS: &str = "-o ext_path={flash_path}:{flash_mib}m";
/// strata's flash tier (issue 11), its defaults otherwise (admission `all`, like extstore); a
/// strata built before the tier refuses the flags and is reported as "not run".
pub const STRATA_FLASH_ARGS: &str = "--flash {flash_path} --flash-size {flash_mib}MiB";

/// One server to compare.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// Its name in reports.
    pub name: String,
    /// The command template.
    pub command: String,
    /// The protocols it speaks.
    pub protocols: Vec<Protocol>,
    /// True for the reference servers strata is compared against.
    pub is_peer: bool,
    /// The flags that add a flash tier (with `{flash_path}` and `{flash_mib}`), for servers
    /// that have one; flash scenarios skip the others.
    pub flash_args: Option<String>,
}

/// Resources every server gets.
#[derive(Debug, Clone, Copy)]
pub struct ServerResources {
    /// Worker threads.
    pub threads: usize,
    /// Memory budget, MiB.
    pub memory_mib: u64,
    /// The CPU the server is pinned to.
    pub cpu: usize,
}

/// A running server; killed when dropped.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// Its PID (the server itself, not a wrapper).
    pub pid: u32,
    /// The memcache-protocol port.
    pub memcache_port: u16,
    /// The RESP port.
    pub resp_port: u16,
}

impl ServerProcess {
    /// Starts `spec` and waits until each port it serves answers its protocol's no-op.
    ///
    /// A port picked by [`free_port`] can be taken by another process before the server binds
    /// it; a server that exits saying so is started again on fresh ports, up to
    /// [`START_ATTEMPTS`] times.
    ///
    /// # Errors
    /// When the program is missing, exits early, or does not answer within the timeout.
    pub fn start(
        spec: &ServerSpec,
        resources: ServerResources,
        log: &Path,
    ) -> Result<Self, BenchError> {
        let mut attempt = 1;
        loop {
            let mut server = Self::spawn(spec, resources, log)?;
            let ready = server.wait_ready(&spec.protocols);
            let detail = match ready {
                Ok(()) => return Ok(server),
                Err(detail) => detail,
            };
            let port_taken = server.exited().is_some()
                && std::fs::read_to_string(log)
                    .is_ok_and(|text| text.contains("Address already in use"));
            if !port_taken || attempt == START_ATTEMPTS {
                return Err(BenchError::Server {
                    server: spec.name.clone(),
                    detail: format!("{detail}; see {}", log.display()),
                });
            }
            attempt += 1;
        }
    }

    /// Starts `spec` without waiting for it to listen.
    ///
    /// # Errors
    /// When the program is missing or cannot be spawned.
    pub fn spawn(
        spec: &ServerSpec,
        resources: ServerResources,
        log: &Path,
    ) -> Result<Self, BenchError> {
        let fail = |detail: String| BenchError::Server {
            server: spec.name.clone(),
            detail,
        };
        let memcache_port = free_port()?;
        let resp_port = free_port()?;
        let command = expand(&spec.command, resources, memcache_port, resp_port);
        let program = command
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        if !program_exists(&program) {
            return Err(fail(format!(
                "`{program}` not found (build it or install it)"
            )));
        }
        let log_file = File::create(log).map_err(|source| BenchError::File {
            path: log.to_path_buf(),
            source,
        })?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec taskset -c {} {command}", resources.cpu))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .spawn()
            .map_err(|e| fail(format!("spawn failed: {e}")))?;
        Ok(ServerProcess {
            pid: child.id(),
            child,
            memcache_port,
            resp_port,
        })
    }

    /// Sends signal `name` (`TERM`, `USR1`, `KILL`...) through kill(1).
    ///
    /// # Errors
    /// When kill(1) fails (the process is gone).
    pub fn signal(&self, name: &str) -> Result<(), String> {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.pid.to_string()])
            .status()
            .map_err(|e| format!("kill -{name}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -{name} {}: {status}", self.pid))
        }
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `timeout` for the process to exit.
    ///
    /// # Errors
    /// When it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<std::process::ExitStatus, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(format!("still running {timeout:?} after the stop signal"));
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
    }

    /// The port serving `protocol`.
    #[must_use]
    pub fn port(&self, protocol: Protocol) -> u16 {
        match protocol {
            Protocol::MemcacheText | Protocol::MemcacheMeta => self.memcache_port,
            Protocol::Resp => self.resp_port,
        }
    }

    /// Waits until the port of each of `protocols` answers that protocol's no-op (`PING`,
    /// `version`). Accepting a connection is not enough: the port could be another process's
    /// (it was free a moment before the server started).
    ///
    /// # Errors
    /// When the process exits first, or after the start timeout.
    pub fn wait_ready(&mut self, protocols: &[Protocol]) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        for &protocol in protocols {
            let port = self.port(protocol);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            loop {
                if let Some(status) = self.exited() {
                    return Err(format!("exited during start-up ({status})"));
                }
                if answers_no_op(protocol, addr) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "port {port} not answering {} after {START_TIMEOUT:?}",
                        protocol.name()
                    ));
                }
                std::thread::sleep(PROBE_INTERVAL);
            }
        }
        Ok(())
    }
}

/// True when a server speaking `protocol` answers its no-op at `addr`: `+PONG` to `PING`,
/// `VERSION ...` to `version`.
fn answers_no_op(protocol: Protocol, addr: SocketAddr) -> bool {
    let (request, expected): (&[u8], &[u8]) = match protocol {
        Protocol::Resp => (b"PING\r\n", b"+PONG\r\n"),
        Protocol::MemcacheText | Protocol::MemcacheMeta => (b"version\r\n", b"VERSION "),
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, PROBE_INTERVAL) else {
        return false;
    };
    let mut exchange = || -> std::io::Result<bool> {
        stream.set_read_timeout(Some(NO_OP_TIMEOUT))?;
        stream.set_write_timeout(Some(NO_OP_TIMEOUT))?;
        stream.write_all(request)?;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 256];
        while reply.len() < expected.len() {
            let read = stream.read(&mut chunk)?;
            if read == 0 {
                break;
            }
            reply.extend_from_slice(&chunk[..read]);
        }
        Ok(reply.starts_with(expected))
    };
    exchange().unwrap_or(false)
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Kill by our own child's PID only; errors mean it already exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Fills the placeholders of a command template.
#[must_use]
pub fn expand(
    template: &str,
    resources: ServerResources,
    memcache_port: u16,
    resp_port: u16,
) -> String {
    template
        .replace("{memcache_port}", &memcache_port.to_string())
        .replace("{resp_port}", &resp_port.to_string())
        .replace("{threads}", &resources.threads.to_string())
        .replace("{memory_mib}", &resources.memory_mib.to_string())
        .replace("{target_dir}", &target_dir())
}

/// Cargo's target directory: `$CARGO_TARGET_DIR`, or `target` under the current directory.
fn target_dir() -> String {
    std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned())
}

/// A loopback port that was free a moment ago.
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// True when `program` is a path to an existing file, or a name found on `PATH`.
#[must_use]
pub fn program_exists(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The version line a server prints, for the report.
#[must_use]
pub fn version(program: &str, flag: &str) -> String {
    Command::new(program)
        .arg(flag)
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(
            || "unknown".to_owned(),
            |text| text.lines().next().unwrap_or("").to_owned(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_templates() {
        let resources = ServerResources {
            threads: 2,
            memory_mib: 64,
            cpu: 0,
        };
        let command = expand(MEMCACHED_COMMAND, resources, 1111, 2222);
        assert!(command.contains("-t 2 -m 64 -p 1111"), "{command}");
        let command = expand(STRATA_COMMAND, resources, 1111, 2222);
        assert!(command.contains("127.0.0.1:1111") && command.contains("127.0.0.1:2222"));
        assert!(command.contains("--memory 64MiB"));
    }

    #[test]
    fn finds_programs() {
        assert!(program_exists("sh"));
        assert!(!program_exists("no-such-program-strata"));
        assert!(!program_exists("/no/such/path"));
        assert!(free_port().unwrap() > 0);
    }

    /// Why [`ServerProcess::start`] fails for a RESP server named `name` run as `command`.
    fn start_error(name: &str, command: &str) -> String {
        let spec = ServerSpec {
            name: name.into(),
            command: command.into(),
            protocols: vec![Protocol::Resp],
            is_peer: false,
            flash_args: None,
        };
        let resources = ServerResources {
            threads: 1,
            memory_mib: 16,
            cpu: 0,
        };
        let log = std::env::temp_dir().join(format!("strata-bench-{name}.log"));
        let error = ServerProcess::start(&spec, resources, &log).unwrap_err();
        error.to_string()
    }

    #[test]
    fn missing_server_is_reported_not_started() {
        let error = start_error("ghost", "/no/such/server --port {resp_port}");
        assert!(error.contains("not found"), "{error}");
    }

    #[test]
    fn early_exit_is_reported() {
        let error = start_error("quitter", "true {resp_port}");
        assert!(error.contains("exited"), "{error}");
    }

    /// A listener that answers every connection's first request with `reply`.
    fn answering(reply: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = [0u8; 64];
                if stream.read(&mut request).is_ok() {
                    let _ = stream.write_all(reply);
                }
            }
        });
        addr
    }

    #[test]
    fn only_the_protocols_own_answer_is_ready() {
        let redis_like = answering(b"+PONG\r\n");
        let memcached_like = answering(b"VERSION 1.6.18\r\n");
        assert!(answers_no_op(Protocol::Resp, redis_like));
        assert!(!answers_no_op(Protocol::MemcacheText, redis_like));
        assert!(answers_no_op(Protocol::MemcacheMeta, memcached_like));
        assert!(!answers_no_op(Protocol::Resp, memcached_like));
        assert!(!answers_no_op(
            Protocol::Resp,
            answering(b"-ERR unknown\r\n")
        ));
        let closed = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
        assert!(!answers_no_op(Protocol::Resp, closed));
    }

    #[test]
    fn a_taken_port_is_retried_on_fresh_ports_and_other_exits_are_not() {
        let starts =
            std::env::temp_dir().join(format!("strata-bench-starts-{}", std::process::id()));
        let count = |command: &str| {
            std::fs::remove_file(&starts).ok();
            let error = start_error("busy", command);
            assert!(error.contains("exited"), "{error}");
            std::fs::read_to_string(&starts).unwrap().lines().count()
        };
        let path = starts.display();
        let taken = format!(
            "sh -c 'echo {{resp_port}} >> {path}; echo bind: Address already in use; exit 1'"
        );
        assert_eq!(count(&taken), START_ATTEMPTS as usize);
        let broken = format!("sh -c 'echo {{resp_port}} >> {path}; echo bad flag; exit 1'");
        assert_eq!(count(&broken), 1);
        std::fs::remove_file(&starts).ok();
    }
}
