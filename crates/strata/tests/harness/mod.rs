//! Starts the real `strata` binary on free loopback ports and talks to it.
//!
//! Waits are bounded loops on a condition (a port accepting, a metric moving), never fixed
//! sleeps that assume how fast the machine is. The child is killed when the guard drops.

#![allow(dead_code)] // Each test file uses a different part of the harness.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for the server to start, a condition to hold, or the process to exit.
pub const WAIT_MAX: Duration = Duration::from_secs(60);
/// Pause between two checks of a condition.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Small settings for tests, for each flag that `extra` does not set itself. The listeners take
/// loopback ports the kernel picks; the harness reads their addresses from the startup line,
/// logged at `info` in text.
fn defaults(extra: &[&str]) -> Vec<&'static str> {
    [
        ["--memcache-listen", "127.0.0.1:0"],
        ["--resp-listen", "127.0.0.1:0"],
        ["--admin-listen", "127.0.0.1:0"],
        ["--memory", "16MiB"],
        ["--threads", "2"],
        ["--log-level", "info"],
        ["--log-format", "text"],
    ]
    .into_iter()
    .filter(|[flag, _]| !extra.contains(flag))
    .flatten()
    .collect()
}

/// Runs the binary with `args`, waits for it to exit, returns its status and standard error.
pub fn run_to_exit(args: &[&str]) -> (ExitStatus, String) {
    let (status, _, stderr) = run_output(args);
    (status, stderr)
}

/// Runs the binary with `args` to its exit: status, standard output, standard error.
pub fn run_output(args: &[&str]) -> (ExitStatus, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status, text(&output.stdout), text(&output.stderr))
}

/// A running `strata serve`, killed on drop.
pub struct Server {
    child: Option<Child>,
    /// memcached listener (`127.0.0.1:0` when it is off).
    pub memcache: SocketAddr,
    /// RESP listener (`127.0.0.1:0` when it is off).
    pub resp: SocketAddr,
    /// Admin HTTP listener.
    pub admin: SocketAddr,
    log: PathBuf,
}

impl Server {
    /// Starts `strata serve` on ports the kernel picks (port 0) with `extra` flags, reads the
    /// bound addresses from its startup line, and waits until every listener accepts.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_wrapped(&[], extra)
    }

    /// Like [`Server::start`], run through `wrapper` (a command that runs the rest of its
    /// arguments, such as `prlimit --nofile=64`).
    ///
    /// Binding port 0 in the server, rather than picking a free port here and passing it,
    /// leaves no window in which a parallel test's client socket could take the port.
    pub fn start_wrapped(wrapper: &[&str], extra: &[&str]) -> Server {
        let mut server = Self::launch(wrapper, extra, &[]);
        server.await_ready();
        server
    }

    /// Starts `strata serve` like [`Server::start_wrapped`] with extra environment variables,
    /// without waiting for it to serve: call [`Server::await_ready`] for that. For tests that
    /// act while it opens its pool (a `kill -9` during recovery).
    pub fn launch(wrapper: &[&str], extra: &[&str], env: &[(&str, &str)]) -> Server {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let log = std::env::temp_dir().join(format!(
            "strata-test-{}-{}.log",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let binary = env!("CARGO_BIN_EXE_strata");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        let child = command
            .arg("serve")
            .args(defaults(extra))
            .args(extra)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn strata");
        let unbound = SocketAddr::from(([127, 0, 0, 1], 0));
        Server {
            child: Some(child),
            memcache: unbound,
            resp: unbound,
            admin: unbound,
            log,
        }
    }

    /// Waits for the startup line, reads the bound addresses from it, and waits until every
    /// listener accepts.
    pub fn await_ready(&mut self) {
        self.wait_until(|s| s.log().contains("strata ready"), "the startup line");
        let unbound = SocketAddr::from(([127, 0, 0, 1], 0));
        let log = self.log();
        let ready = log
            .lines()
            .find(|line| line.contains("strata ready"))
            .expect("ready line");
        let bound = |name: &str| -> SocketAddr {
            ready
                .split(' ')
                .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
                .and_then(|addr| {
                    if addr == "off" {
                        Some(unbound)
                    } else {
                        addr.parse().ok()
                    }
                })
                .unwrap_or_else(|| panic!("no {name} address in: {ready}"))
        };
        (self.memcache, self.resp, self.admin) = (bound("memcache"), bound("resp"), bound("admin"));
        // The admin endpoint answers only once every listener is bound and every worker runs;
        // probing the client listeners instead would count connections in the metrics.
        self.wait_until(
            |s| s.try_http_get("/health").is_some(),
            "the admin endpoint answers",
        );
    }

    /// The server's standard error so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Checks `condition` until it holds; panics with the server log after [`WAIT_MAX`].
    pub fn wait_until(&mut self, mut condition: impl FnMut(&mut Self) -> bool, what: &str) {
        let deadline = Instant::now() + WAIT_MAX;
        while !condition(self) {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "strata exited ({status}) waiting for: {what}\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: {what}\n{}",
                self.log()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Sends SIGTERM (through kill(1): no unsafe code in tests).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT_MAX;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "strata did not exit\n{}",
                self.log()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Sends SIGTERM and checks that the server exits 0.
    pub fn terminate(&mut self) {
        self.signal("TERM");
        assert_eq!(self.wait_exit().code(), Some(0), "{}", self.log());
    }

    /// Checks that the server's log holds `text`.
    pub fn assert_logged(&self, text: &str) {
        let log = self.log();
        assert!(log.contains(text), "{text:?} not in the log:\n{log}");
    }

    /// `GET path` on the admin listener: status code and body.
    pub fn http_get(&self, path: &str) -> (u16, String) {
        self.try_http_get(path).expect("admin endpoint answers")
    }

    /// `GET path`, or `None` if the endpoint does not answer.
    pub fn try_http_get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(self.admin).ok()?;
        stream.set_read_timeout(Some(WAIT_MAX)).ok()?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split(' ').nth(1)?.parse().ok()?;
        let body = response
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        Some((status, body))
    }

    /// The value of the sample `name` (with labels, exactly as exposed) in /metrics.
    pub fn metric(&self, name: &str) -> u64 {
        let (status, body) = self.http_get("/metrics");
        assert_eq!(status, 200);
        body.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no sample {name} in:\n{body}"))
            .parse()
            .expect("integer sample")
    }

    /// Waits until the sample `name` satisfies `ok`.
    pub fn wait_metric(&mut self, name: &str, ok: impl Fn(u64) -> bool) {
        self.wait_until(|server| ok(server.metric(name)), name);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A client connection with a read timeout, reading CRLF-terminated lines.
pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    /// Connects to `addr`.
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(WAIT_MAX)).expect("timeout");
        Client {
            reader: BufReader::new(stream),
        }
    }

    /// Sends raw bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("send");
    }

    /// Reads one line, CRLF included (empty at end of stream).
    pub fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read line");
        line
    }

    /// Sends `request` and reads one reply line.
    pub fn call(&mut self, request: &[u8]) -> String {
        self.send(request);
        self.line()
    }

    /// Reads exactly `len` bytes (through the line buffer).
    pub fn read_bytes(&mut self, len: usize) -> Vec<u8> {
        let mut data = vec![0; len];
        self.reader.read_exact(&mut data).expect("read bytes");
        data
    }

    /// Reads a RESP bulk reply and returns its payload (`None` for a null bulk).
    pub fn bulk(&mut self) -> Option<Vec<u8>> {
        let header = self.line();
        if header == "$-1\r\n" {
            return None;
        }
        let len: usize = header
            .strip_prefix('$')
            .and_then(|h| h.trim_end().parse().ok())
            .unwrap_or_else(|| panic!("not a bulk: {header}"));
        let mut payload = vec![0; len + 2];
        self.reader.read_exact(&mut payload).expect("bulk payload");
        assert!(
            payload.ends_with(b"\r\n"),
            "bulk of {len} bytes not ended by CRLF"
        );
        payload.truncate(len);
        Some(payload)
    }

    /// Reads until the server closes: the bytes it sent before closing (EOF or reset), or
    /// `None` when the connection stayed open (a read timed out).
    pub fn bytes_until_closed(&mut self) -> Option<usize> {
        let mut sink = [0u8; 64 << 10];
        let mut received = 0;
        loop {
            match self.reader.read(&mut sink) {
                Ok(0) => return Some(received),
                Ok(n) => received += n,
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Some(received)
                }
                Err(_) => return None,
            }
        }
    }

    /// Reads until the server closes; true when it did (EOF or reset), false on a timeout.
    pub fn closed_by_server(&mut self) -> bool {
        self.bytes_until_closed().is_some()
    }

    /// The underlying stream.
    pub fn stream(&mut self) -> &mut TcpStream {
        self.reader.get_mut()
    }
}

/// A RESP command as a multibulk request.
pub fn resp_command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Runs `tests/python/<script>` with Debian's python3 (scripts/test.sh installs python3-redis)
/// against the Redis port `port`; asserts it succeeded and printed `done`; returns its output.
pub fn run_python(script: &str, port: u16, done: &str) -> String {
    let path = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("/usr/bin/python3")
        .args([&path, &port.to_string()])
        .output()
        .expect("/usr/bin/python3 (scripts/test.sh installs python3-redis)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script} failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(done), "{stdout}");
    stdout
}

/// Most transaction logs a test server's pool gets beside `<pool>.txlog` (one per logged
/// transaction running at once; a test runs a few workers).
pub const WORKER_THREADS_MAX_IN_TESTS: usize = 8;

/// A pool file for a test, removed on drop with what the server keeps beside it
/// (`<pool>.sidecar`, `<pool>.index/`).
pub struct PoolFile(PathBuf);

impl PoolFile {
    /// `strata-<name>-<pid>.pool` in the system's temporary directory.
    pub fn new(name: &str) -> PoolFile {
        Self::in_dir(&std::env::temp_dir(), name)
    }

    /// `strata-<name>-<pid>.pool` in `dir`.
    pub fn in_dir(dir: &Path, name: &str) -> PoolFile {
        PoolFile(dir.join(format!("strata-{name}-{}.pool", std::process::id())))
    }

    /// `strata-<name>-<pid>.pool` on `/dev/shm` where there is one (the PMem stand-in: it
    /// survives `kill -9`), else in the system's temporary directory.
    pub fn on_tmpfs(name: &str) -> PoolFile {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            Self::in_dir(shm, name)
        } else {
            Self::new(name)
        }
    }

    /// The path, as `--pool` and `strata pool` take it.
    pub fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(format!("{}.sidecar", self.path()));
        let _ = std::fs::remove_file(format!("{}.txlog", self.path()));
        for lane in 1..=WORKER_THREADS_MAX_IN_TESTS {
            let _ = std::fs::remove_file(format!("{}.txlog.{lane}", self.path()));
        }
        let _ = std::fs::remove_dir_all(format!("{}.index", self.path()));
    }
}

/// `kill -9` under load: starts `writers` threads running `writer(addr, i, stop)` against the
/// server's RESP port, waits until `done()` (what: what it waits for), kills the server with
/// SIGKILL, waits for it to exit, then tells the writers to stop and joins them.
pub fn kill_9_under_writers(
    server: &mut Server,
    writers: usize,
    writer: impl Fn(SocketAddr, usize, std::sync::Arc<std::sync::atomic::AtomicBool>)
        + Send
        + Sync
        + 'static,
    mut done: impl FnMut() -> bool,
    what: &str,
) {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = Arc::new(writer);
    let addr = server.resp;
    let threads: Vec<_> = (0..writers)
        .map(|i| {
            let (writer, stop) = (Arc::clone(&writer), Arc::clone(&stop));
            std::thread::spawn(move || writer(addr, i, stop))
        })
        .collect();
    server.wait_until(|_| done(), what);
    server.signal("KILL");
    server.wait_exit();
    stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().expect("writer");
    }
}

/// One memcached `stats` line's value, asked over `client` (a memcached connection).
pub fn stat(client: &mut Client, name: &str) -> u64 {
    client.send(b"stats\r\n");
    let mut value = None;
    loop {
        let line = client.line();
        if line == "END\r\n" || line.is_empty() {
            break;
        }
        if let Some(rest) = line.strip_prefix(&format!("STAT {name} ")) {
            value = rest.trim_end().parse().ok();
        }
    }
    value.unwrap_or_else(|| panic!("no stat {name}"))
}

/// A directory for a test's flash medium on the VM disk (the test removes it).
pub fn flash_dir(name: &str) -> std::path::PathBuf {
    // The VM disk, so direct I/O is used where the file system allows it.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("flash-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("flash dir");
    dir
}

/// A test's flash directory (the test removes it at its end) and the path of the tier's
/// medium in it.
pub fn tier_medium(name: &str) -> (std::path::PathBuf, String) {
    let dir = flash_dir(name);
    let medium = dir.join("tier.flash").to_str().expect("utf-8").to_owned();
    (dir, medium)
}
