//! `strata block` (issue 12) with the real binary, in every cache mode: libnbd's own tools
//! (`nbdinfo`, `nbdcopy`, and python3-libnbd with its client-side checks off, so that bad
//! requests reach the server) and a raw-socket client for what no well-behaved client sends:
//! malformed handshakes and requests, a client that vanishes mid-write, one that stays silent.
//! fio's NBD engine with `verify=crc32c` for write-back. `scripts/test.sh` installs libnbd-bin,
//! python3-libnbd and fio; these tests fail, not skip, without.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]
// NBD is big-endian on the wire (the workspace denies big-endian conversions elsewhere).
#![allow(clippy::big_endian_bytes)]

mod harness;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::WAIT_MAX;
use strata_block::nbd;

/// A directory of the test's own (a backing file and the socket), removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        // On the disk, not tmpfs: the backing store is opened with O_DIRECT there.
        let dir = std::env::temp_dir().join(format!("strata-block-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `strata block`, killed on drop.
struct Block {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Block {
    /// Serves `exports` (`name`, backing path) in pass-through on a Unix socket in `dir`.
    fn start(dir: &Dir, exports: &[(&str, &Path)]) -> Block {
        Self::start_with(dir, exports, &["--mode", "pt"])
    }

    /// Serves `exports` with `flags` (the cache's) on a Unix socket in `dir`.
    fn start_with(dir: &Dir, exports: &[(&str, &Path)], flags: &[&str]) -> Block {
        let socket = dir.0.join("nbd.sock");
        let log = dir.0.join("block.log");
        let mut args = vec!["block".to_string()];
        args.extend(flags.iter().map(|f| f.to_string()));
        for (name, path) in exports {
            args.push("--export".into());
            args.push(format!("{name}={}", path.display()));
        }
        args.push("--nbd-listen".into());
        args.push(format!("unix:{}", socket.display()));
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start strata block");
        let block = Block { child, socket, log };
        let started = Instant::now();
        while UnixStream::connect(&block.socket).is_err() {
            assert!(
                started.elapsed() < WAIT_MAX,
                "no socket; log:\n{}",
                block.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        block
    }

    /// Sends `signal` (`-TERM`, `-KILL`) and waits for the process to exit.
    fn stop(&mut self, signal: &str) -> std::process::ExitStatus {
        let kill = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(started.elapsed() < WAIT_MAX, "did not stop on {signal}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A raw client past the handshake (`NBD_OPT_GO` for `export`).
    fn connect(&self, export: &str) -> Raw {
        let mut raw = Raw::handshake(&self.socket);
        raw.go(export).expect("export served");
        raw
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A backing file of `len` bytes of a known pattern.
fn backing_file(dir: &Dir, name: &str, len: usize) -> PathBuf {
    let path = dir.0.join(name);
    let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A client that speaks the protocol byte by byte.
struct Raw(UnixStream);

impl Raw {
    /// Connects, reads the greeting, sends fixed-newstyle + no-zeroes client flags.
    fn handshake(socket: &Path) -> Raw {
        let mut raw = Raw::greeted(socket);
        raw.send(&3u32.to_be_bytes());
        raw
    }

    /// Connects and reads the greeting only.
    fn greeted(socket: &Path) -> Raw {
        let stream = UnixStream::connect(socket).expect("connect");
        stream.set_read_timeout(Some(WAIT_MAX)).unwrap();
        let mut raw = Raw(stream);
        let greeting = raw.read(18);
        assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
        raw
    }

    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).expect("send");
    }

    fn read(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        self.0.read_exact(&mut out).expect("read");
        out
    }

    /// Whether the server closed the connection (end of stream, or a reset).
    fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.0.read(&mut byte), Ok(0) | Err(_))
    }

    fn option(&mut self, option: u32, data: &[u8]) {
        let mut out = Vec::new();
        out.extend_from_slice(&nbd::OPTION_MAGIC.to_be_bytes());
        out.extend_from_slice(&option.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
        self.send(&out);
    }

    /// Reads one option reply: (option, type, data).
    fn option_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let header = self.read(20);
        assert_eq!(&header[0..8], &nbd::OPTION_REPLY_MAGIC.to_be_bytes());
        let be32 = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
        let length = be32(&header[16..20]) as usize;
        (
            be32(&header[8..12]),
            be32(&header[12..16]),
            self.read(length),
        )
    }

    /// `NBD_OPT_GO`: `Ok(size)`, or the error reply type.
    fn go(&mut self, export: &str) -> Result<u64, u32> {
        let mut data = Vec::new();
        data.extend_from_slice(&(export.len() as u32).to_be_bytes());
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        self.option(nbd::OPT_GO, &data);
        let mut size = None;
        loop {
            let (option, reply, data) = self.option_reply();
            assert_eq!(option, nbd::OPT_GO);
            match reply {
                nbd::REP_INFO if data[0..2] == nbd::INFO_EXPORT.to_be_bytes() => {
                    size = Some(u64::from_be_bytes(data[2..10].try_into().unwrap()));
                }
                nbd::REP_INFO => {}
                nbd::REP_ACK => return Ok(size.expect("NBD_INFO_EXPORT before the ACK")),
                error => return Err(error),
            }
        }
    }

    /// Sends a request (and a write's payload); returns the reply's error and a read's data.
    fn request(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> (u32, Vec<u8>) {
        let cookie = 0x5157_0000_0000_0000 | u64::from(command);
        self.send(&nbd::encode_request(&nbd::Request {
            flags,
            command,
            cookie,
            offset,
            length,
        }));
        self.send(payload);
        let header = self.read(16);
        assert_eq!(&header[0..4], &nbd::SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(
            &header[8..16],
            &cookie.to_be_bytes(),
            "the cookie comes back"
        );
        let error = u32::from_be_bytes(header[4..8].try_into().unwrap());
        let data = if command == nbd::CMD_READ && error == 0 {
            self.read(length as usize)
        } else {
            Vec::new()
        };
        (error, data)
    }
}

/// Runs a Python script with libnbd's bindings (Debian's python3-libnbd, for /usr/bin/python3).
fn python_libnbd(script: &str) -> String {
    let output = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .output()
        .expect("/usr/bin/python3 (scripts/test.sh installs python3-libnbd)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "python3-libnbd script failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn nbdinfo_lists_every_export_with_its_size_and_features() {
    let dir = Dir::new("info");
    let a = backing_file(&dir, "a.img", 1 << 20);
    let b = backing_file(&dir, "b.img", 3 << 20);
    let block = Block::start(&dir, &[("first", &a), ("second", &b)]);
    let output = Command::new("nbdinfo")
        .args(["--list", "--json", &block.uri("")])
        .output()
        .expect("nbdinfo (scripts/test.sh installs libnbd-bin)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = String::from_utf8_lossy(&output.stdout);
    let compact: String = json.split_whitespace().collect();
    for expected in [
        "\"export-name\":\"first\"",
        "\"export-size\":1048576",
        "\"export-name\":\"second\"",
        "\"export-size\":3145728",
        "\"can_flush\":true",
        "\"can_fua\":true",
        "\"can_trim\":true",
        "\"can_zero\":true",
        "\"can_multi_conn\":true",
        "\"block_size_maximum\":33554432",
    ] {
        assert!(compact.contains(expected), "{expected} missing from {json}");
    }
}

#[test]
fn nbdcopy_writes_and_reads_back_through_the_export_to_the_backing_file() {
    let dir = Dir::new("copy");
    let backing = backing_file(&dir, "disk.img", 8 << 20);
    let source = dir.0.join("source");
    // Not a multiple of 4 KiB: the tail goes through read-modify-write.
    let data: Vec<u8> = (0..(5 << 20) + 1234)
        .map(|i: usize| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&source, &data).unwrap();
    let block = Block::start(&dir, &[("disk", &backing)]);
    let copy_in = Command::new("nbdcopy")
        .arg(&source)
        .arg(block.uri("disk"))
        .status()
        .unwrap();
    assert!(copy_in.success());
    let back = dir.0.join("back");
    let copy_out = Command::new("nbdcopy")
        .arg(block.uri("disk"))
        .arg(&back)
        .status()
        .unwrap();
    assert!(copy_out.success());
    let back = std::fs::read(&back).unwrap();
    assert_eq!(back.len(), 8 << 20);
    assert!(
        back[..data.len()] == data[..],
        "the export reads back what was copied in"
    );
    let on_disk = std::fs::read(&backing).unwrap();
    assert!(
        on_disk[..data.len()] == data[..],
        "the backing file holds it"
    );
    // Past the copy, the file's own bytes are untouched.
    let tail = data.len();
    assert_eq!(on_disk[tail], (tail * 31 % 253) as u8);
    assert_eq!(back[tail..], on_disk[tail..]);
}

#[test]
fn libnbd_requests_get_the_protocol_s_answers() {
    let dir = Dir::new("libnbd");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start(&dir, &[("disk", &backing)]);
    let script = format!(
        r#"
import nbd
h = nbd.NBD()
h.set_strict_mode(0)  # send out-of-range requests: the server must refuse them itself
h.connect_uri("{uri}")
size = h.get_size()
h.pwrite(b"hello", 3, nbd.CMD_FLAG_FUA)
print("read", h.pread(8, 0).hex())
h.zero(8192, 8192, nbd.CMD_FLAG_NO_HOLE)
print("zeroed", set(h.pread(8192, 8192)))
h.zero(4096, 65536)
print("punched", set(h.pread(4096, 65536)))
h.trim(4096, 131072)
h.cache(4096, 0)
h.flush()
def error(f):
    try:
        f()
        return "ok"
    except nbd.Error as e:
        return e.errno
print("read past end", error(lambda: h.pread(10, size - 5)))
print("write past end", error(lambda: h.pwrite(b"x" * 10, size - 5)))
print("trim past end", error(lambda: h.trim(10, size - 5)))
print("zero past end", error(lambda: h.zero(10, size - 5)))
print("offset overflow", error(lambda: h.pread(10, 2**64 - 5)))
print("still serving", h.pread(5, 3))
h.shutdown()
h2 = nbd.NBD()
print("unknown export", error(lambda: h2.connect_uri("{unknown}")))
"#,
        uri = block.uri("disk"),
        unknown = block.uri("nosuch")
    );
    let out = python_libnbd(&script);
    let expect = [
        "read ".to_string() + &hex_of_prefix_with_hello(),
        "zeroed {0}".into(),
        "punched {0}".into(),
        "read past end EINVAL".into(),
        "write past end ENOSPC".into(),
        "trim past end EINVAL".into(),
        "zero past end ENOSPC".into(),
        "offset overflow EINVAL".into(),
        "still serving bytearray(b'hello')".into(),
    ];
    for line in expect {
        assert!(
            out.lines().any(|l| l == line),
            "{line:?} missing from:\n{out}"
        );
    }
    assert!(out.contains("unknown export"), "{out}");
    assert!(!out.contains("unknown export ok"), "{out}");
    let on_disk = std::fs::read(&backing).unwrap();
    assert_eq!(&on_disk[3..8], b"hello");
    assert!(on_disk[8192..16384].iter().all(|&b| b == 0));
    assert!(on_disk[65536..69632].iter().all(|&b| b == 0));
    assert_eq!(
        on_disk[16384],
        (16384 * 31 % 253) as u8,
        "bytes next to the zeroes kept"
    );
}

/// The first eight bytes of the pattern file with "hello" written at 3, as hex.
fn hex_of_prefix_with_hello() -> String {
    let mut bytes: Vec<u8> = (0..8).map(|i: usize| (i * 31 % 253) as u8).collect();
    bytes[3..8].copy_from_slice(b"hello");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn bad_requests_get_einval_and_the_session_goes_on() {
    let dir = Dir::new("badreq");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start(&dir, &[("disk", &backing)]);
    let mut raw = block.connect("disk");
    // Unknown command, unknown flag, a flag the command does not take, a read over the
    // payload limit: EINVAL, nothing written.
    assert_eq!(raw.request(42, 0, 0, 512, &[]).0, nbd::EINVAL);
    assert_eq!(
        raw.request(nbd::CMD_READ, 1 << 7, 0, 512, &[]).0,
        nbd::EINVAL
    );
    assert_eq!(
        raw.request(nbd::CMD_WRITE, nbd::CMD_FLAG_NO_HOLE, 0, 4, b"abcd")
            .0,
        nbd::EINVAL
    );
    assert_eq!(
        raw.request(nbd::CMD_READ, 0, 0, (32 << 20) + 1, &[]).0,
        nbd::EINVAL
    );
    // A write past the end: its payload is read and dropped, ENOSPC, and the stream stays in step.
    assert_eq!(
        raw.request(nbd::CMD_WRITE, 0, (1 << 20) - 2, 4, b"wxyz").0,
        nbd::ENOSPC
    );
    let (error, data) = raw.request(nbd::CMD_READ, 0, 0, 4, &[]);
    assert_eq!(error, 0);
    let original: Vec<u8> = (0..4).map(|i: usize| (i * 31 % 253) as u8).collect();
    assert_eq!(data, original, "refused writes changed nothing");
    // A zero-length read is answered with no data.
    assert_eq!(raw.request(nbd::CMD_READ, 0, 100, 0, &[]), (0, Vec::new()));
    assert_eq!(std::fs::read(&backing).unwrap()[..4], original[..]);
}

#[test]
fn malformed_handshakes_and_requests_end_only_their_own_session() {
    let dir = Dir::new("malformed");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start(&dir, &[("disk", &backing)]);
    let mut bystander = block.connect("disk");

    // Unknown client flags: the server closes.
    let mut raw = Raw::greeted(&block.socket);
    raw.send(&0x80u32.to_be_bytes());
    assert!(raw.closed_by_server());
    // An option without its magic.
    let mut raw = Raw::handshake(&block.socket);
    raw.send(&[0u8; 16]);
    assert!(raw.closed_by_server());
    // NBD_OPT_EXPORT_NAME has no reply but the export's size and flags: a name over the option
    // limit closes the connection, as an unknown name does (an old-style client would read an
    // option reply's bytes as the size).
    let mut raw = Raw::handshake(&block.socket);
    raw.option(nbd::OPT_EXPORT_NAME, &vec![b'd'; 64 << 10]);
    assert!(raw.closed_by_server());
    let mut raw = Raw::handshake(&block.socket);
    raw.option(nbd::OPT_EXPORT_NAME, b"nosuch");
    assert!(raw.closed_by_server());
    // Option data over the limit: NBD_REP_ERR_TOO_BIG, the data dropped, haggling goes on.
    let mut raw = Raw::handshake(&block.socket);
    raw.option(99, &vec![7u8; 64 << 10]);
    assert_eq!(raw.option_reply().1, nbd::REP_ERR_TOO_BIG);
    // An unknown option, a malformed GO, an unknown export: errors, haggling goes on.
    raw.option(99, &[]);
    assert_eq!(raw.option_reply().1, nbd::REP_ERR_UNSUP);
    raw.option(nbd::OPT_GO, &[0, 0, 1, 0, b'x']);
    assert_eq!(raw.option_reply().1, nbd::REP_ERR_INVALID);
    assert_eq!(raw.go("nosuch"), Err(nbd::REP_ERR_UNKNOWN));
    raw.option(nbd::OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(raw.option_reply().1, nbd::REP_ERR_UNSUP);
    assert_eq!(
        raw.go(""),
        Ok(1 << 20),
        "the empty name is the first export"
    );
    // A request with a bad magic: the stream is out of step, the server closes.
    raw.send(&[0xAB; nbd::REQUEST_BYTES]);
    assert!(raw.closed_by_server());
    // An option length no server should read: closed.
    let mut raw = Raw::handshake(&block.socket);
    let mut header = nbd::OPTION_MAGIC.to_be_bytes().to_vec();
    header.extend_from_slice(&1u32.to_be_bytes());
    header.extend_from_slice(&u32::MAX.to_be_bytes());
    raw.send(&header);
    assert!(raw.closed_by_server());
    // A write announcing more than the payload limit: closed.
    let mut raw = block.connect("disk");
    raw.send(&nbd::encode_request(&nbd::Request {
        flags: 0,
        command: nbd::CMD_WRITE,
        cookie: 1,
        offset: 0,
        length: u32::MAX,
    }));
    assert!(raw.closed_by_server());
    // NBD_OPT_ABORT: acknowledged, then closed.
    let mut raw = Raw::handshake(&block.socket);
    raw.option(nbd::OPT_ABORT, &[]);
    assert_eq!(raw.option_reply().1, nbd::REP_ACK);
    assert!(raw.closed_by_server());

    // Through all of it the first client was served, and the data is as it was.
    let (error, data) = bystander.request(nbd::CMD_READ, 0, 0, 8, &[]);
    assert_eq!(error, 0);
    let original: Vec<u8> = (0..8).map(|i: usize| (i * 31 % 253) as u8).collect();
    assert_eq!(data, original);
    assert!(
        block.log().contains("protocol:"),
        "the ends are logged:\n{}",
        block.log()
    );
}

#[test]
fn a_client_that_vanishes_mid_write_or_stays_silent_harms_no_one() {
    let dir = Dir::new("vanish");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start(&dir, &[("disk", &backing)]);
    // Silent in the handshake: holds its own thread only.
    let _silent = UnixStream::connect(&block.socket).unwrap();
    // Half a write's payload, then gone.
    let mut raw = block.connect("disk");
    raw.send(&nbd::encode_request(&nbd::Request {
        flags: 0,
        command: nbd::CMD_WRITE,
        cookie: 7,
        offset: 4096,
        length: 8192,
    }));
    raw.send(&[0xEE; 3000]);
    drop(raw);
    // Another client is served, and the half-sent write left nothing behind.
    let mut other = block.connect("disk");
    let (error, data) = other.request(nbd::CMD_READ, 0, 4096, 8192, &[]);
    assert_eq!(error, 0);
    let original: Vec<u8> = (4096..4096 + 8192)
        .map(|i: usize| (i * 31 % 253) as u8)
        .collect();
    assert!(
        data == original,
        "a vanished client's partial write was applied"
    );
    assert_eq!(
        other
            .request(nbd::CMD_WRITE, nbd::CMD_FLAG_FUA, 4096, 4, b"done")
            .0,
        0
    );
    assert_eq!(&std::fs::read(&backing).unwrap()[4096..4100], b"done");
}

#[test]
fn sigterm_flushes_removes_the_socket_and_exits_zero() {
    let dir = Dir::new("stop");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let mut block = Block::start(&dir, &[("disk", &backing)]);
    let mut raw = block.connect("disk");
    assert_eq!(raw.request(nbd::CMD_WRITE, 0, 0, 4, b"kept").0, 0);
    let status = block.stop("-TERM");
    assert!(status.success(), "{status:?}\n{}", block.log());
    assert!(!block.socket.exists(), "the socket is removed");
    assert_eq!(&std::fs::read(&backing).unwrap()[0..4], b"kept");
    assert!(block.log().contains("flushing every export"));
}

#[test]
fn bad_flags_are_refused_at_start_with_a_clear_message() {
    let dir = Dir::new("flags");
    let backing = backing_file(&dir, "disk.img", 4096);
    let export = format!("disk={}", backing.display());
    let missing = format!("disk={}", dir.0.join("nope").display());
    let socket = format!("unix:{}", dir.0.join("s.sock").display());
    let pool = dir.0.join("cache.pool").display().to_string();
    let other = format!("other={}", backing_file(&dir, "other.img", 4096).display());
    for (args, code, says) in [
        (
            vec!["block", "--export", &export, "--nbd-listen", &socket],
            2,
            "give the cache's DRAM with --cache-size",
        ),
        (
            vec![
                "block",
                "--mode",
                "wb",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "--mode wb: give the cache's DRAM with --cache-size",
        ),
        (
            vec![
                "block",
                "--mode",
                "xx",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "expected wt, wb, wa, wi or pt",
        ),
        (
            vec![
                "block",
                "--cache",
                &pool,
                "--cache-size",
                "1MiB",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            1,
            "a cache pool holds at least 16 MiB",
        ),
        (
            vec![
                "block",
                "--cache",
                &pool,
                "--cache-size",
                "64MiB",
                "--export",
                &export,
                "--export",
                &other,
                "--nbd-listen",
                &socket,
            ],
            2,
            "a cache pool serves one export",
        ),
        (
            vec![
                "block",
                "--cache-size",
                "1MiB",
                "--cache-line-size",
                "3KiB",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "a multiple of 4KiB",
        ),
        (
            vec![
                "block",
                "--cache-size",
                "lots",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "expected a size",
        ),
        (
            vec![
                "block",
                "--cache-size",
                "1MiB",
                "--promote-after",
                "0",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "expected 1 or more",
        ),
        (
            vec![
                "block",
                "--cache-size",
                "1MiB",
                "--seq-cutoff",
                "big",
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "--seq-cutoff big",
        ),
        (
            vec![
                "block",
                "--mode",
                "pt",
                "--export",
                "disk",
                "--nbd-listen",
                &socket,
            ],
            2,
            "expected NAME=PATH",
        ),
        (
            vec![
                "block",
                "--mode",
                "pt",
                "--export",
                &export,
                "--export",
                &export,
                "--nbd-listen",
                &socket,
            ],
            2,
            "given twice",
        ),
        (
            vec![
                "block",
                "--mode",
                "pt",
                "--export",
                &missing,
                "--nbd-listen",
                &socket,
            ],
            1,
            "No such file",
        ),
        (
            vec![
                "block",
                "--mode",
                "pt",
                "--export",
                &format!("d={}", dir.0.display()),
                "--nbd-listen",
                &socket,
            ],
            1,
            "Is a directory",
        ),
    ] {
        let (status, stderr) = harness::run_to_exit(&args);
        assert_eq!(status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn pipelined_requests_on_one_connection_are_all_answered_by_cookie() {
    let dir = Dir::new("pipelined");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start(&dir, &[("disk", &backing)]);
    let mut raw = block.connect("disk");
    // 64 writes sent back to back (aligned and not), then 64 reads of the same ranges.
    let range = |i: u64| (i * 12_288 + (i % 3) * 100, 4096 + (i % 5) as u32 * 1000);
    let fill = |i: u64| vec![(i as u8).wrapping_mul(37) | 1; range(i).1 as usize];
    for i in 0..64u64 {
        let (offset, length) = range(i);
        let flags = if i % 8 == 0 { nbd::CMD_FLAG_FUA } else { 0 };
        raw.send(&nbd::encode_request(&nbd::Request {
            flags,
            command: nbd::CMD_WRITE,
            cookie: i,
            offset,
            length,
        }));
        raw.send(&fill(i));
    }
    let mut answered = std::collections::HashSet::new();
    for _ in 0..64 {
        let header = raw.read(16);
        assert_eq!(&header[4..8], &[0, 0, 0, 0], "a write failed");
        let cookie = u64::from_be_bytes(header[8..16].try_into().unwrap());
        assert!(
            cookie < 64 && answered.insert(cookie),
            "cookie {cookie} unknown or twice"
        );
    }
    for i in 0..64u64 {
        let (offset, length) = range(i);
        raw.send(&nbd::encode_request(&nbd::Request {
            flags: 0,
            command: nbd::CMD_READ,
            cookie: 1000 + i,
            offset,
            length,
        }));
    }
    for _ in 0..64 {
        let header = raw.read(16);
        assert_eq!(&header[4..8], &[0, 0, 0, 0], "a read failed");
        let i = u64::from_be_bytes(header[8..16].try_into().unwrap()) - 1000;
        let data = raw.read(range(i).1 as usize);
        assert!(data == fill(i), "read {i} did not return its write");
    }
    let on_disk = std::fs::read(&backing).unwrap();
    for i in 0..64u64 {
        let (offset, length) = range(i);
        assert!(on_disk[offset as usize..(offset + u64::from(length)) as usize] == fill(i)[..]);
    }
    // 40 small writes into one block, all in flight at once: each is a read-modify-write of
    // the same block, and none may undo another.
    let base = 900 * 1024;
    for j in 0..40u64 {
        raw.send(&nbd::encode_request(&nbd::Request {
            flags: 0,
            command: nbd::CMD_WRITE,
            cookie: 5000 + j,
            offset: base + j * 100,
            length: 100,
        }));
        raw.send(&[j as u8 + 1; 100]);
    }
    for _ in 0..40 {
        assert_eq!(&raw.read(16)[4..8], &[0, 0, 0, 0]);
    }
    let (error, data) = raw.request(nbd::CMD_READ, 0, base, 4000, &[]);
    assert_eq!(error, 0);
    for j in 0..40usize {
        assert!(
            data[j * 100..(j + 1) * 100]
                .iter()
                .all(|&b| b == j as u8 + 1),
            "write {j} lost"
        );
    }
}

#[test]
fn a_write_through_cache_serves_what_nbdcopy_wrote_and_counts_its_hits() {
    let dir = Dir::new("wt");
    let backing = backing_file(&dir, "disk.img", 8 << 20);
    let mut block = Block::start_with(
        &dir,
        &[("disk", &backing)],
        &[
            "--mode",
            "wt",
            "--cache-size",
            "4MiB",
            "--cache-line-size",
            "8KiB",
        ],
    );
    let source = dir.0.join("source");
    let data: Vec<u8> = (0..(6 << 20) + 777)
        .map(|i: usize| (i.wrapping_mul(40503) >> 7) as u8)
        .collect();
    std::fs::write(&source, &data).unwrap();
    assert!(Command::new("nbdcopy")
        .arg(&source)
        .arg(block.uri("disk"))
        .status()
        .unwrap()
        .success());
    // Read twice: the second pass finds lines the first (and the writes) left in the cache.
    for pass in 0..2 {
        let back = dir.0.join(format!("back{pass}"));
        assert!(Command::new("nbdcopy")
            .arg(block.uri("disk"))
            .arg(&back)
            .status()
            .unwrap()
            .success());
        let back = std::fs::read(&back).unwrap();
        assert!(
            back[..data.len()] == data[..],
            "pass {pass}: the export reads back what was written"
        );
    }
    assert!(
        std::fs::read(&backing).unwrap()[..data.len()] == data[..],
        "write-through: the store has it"
    );
    block.stop("-TERM");
    let log = block.log();
    let hits: u64 = log
        .split("read_hits=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no cache counters at stop:\n{log}"));
    assert!(hits > 0, "the second read hit nothing:\n{log}");
}

/// Sends one HTTP request to the admin port; returns (status, body).
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("admin port");
    stream.set_read_timeout(Some(WAIT_MAX)).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

/// The admin address the server logged.
fn admin_addr(block: &Block) -> String {
    let started = Instant::now();
    loop {
        let log = block.log();
        if let Some(rest) = log.split("admin=").nth(1) {
            return rest.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            started.elapsed() < WAIT_MAX,
            "no admin listener in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `name=` in the admin port's `/stats`.
fn stat(addr: &str, name: &str) -> u64 {
    let (status, body) = http(addr, "GET", "/stats");
    assert_eq!(status, 200);
    body.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from {body}"))
}

#[test]
fn the_admin_port_reports_counters_and_switches_modes_without_stale_lines() {
    let dir = Dir::new("admin");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let plain = backing_file(&dir, "plain.img", 1 << 20);
    let block = Block::start_with(
        &dir,
        &[("disk", &backing), ("plain", &plain)],
        &[
            "--mode",
            "wt",
            "--cache-size",
            "2MiB",
            "--admin-listen",
            "127.0.0.1:0",
        ],
    );
    let admin = admin_addr(&block);
    assert_eq!(http(&admin, "GET", "/health"), (200, "ok\n".to_string()));
    let mut raw = block.connect("disk");
    assert_eq!(raw.request(nbd::CMD_WRITE, 0, 0, 4096, &[1u8; 4096]).0, 0);
    for _ in 0..2 {
        assert_eq!(
            raw.request(nbd::CMD_READ, 0, 0, 4096, &[]),
            (0, vec![1u8; 4096])
        );
    }
    let hits = stat(&admin, "read_hits");
    assert!(hits >= 2, "write-through keeps the written line: {hits}");
    let (status, metrics) = http(&admin, "GET", "/metrics");
    assert_eq!(status, 200);
    for expected in [
        "strata_block_mode{export=\"disk\",mode=\"wt\"} 1",
        "strata_block_cache_read_hits_total{export=\"disk\"}",
        "strata_block_export_size_bytes{export=\"plain\"} 1048576",
    ] {
        assert!(metrics.contains(expected), "{expected} missing:\n{metrics}");
    }

    // Pass-through: reads skip the cache; a write still invalidates its line, so switching back
    // cannot serve the line the cache held before it.
    let (status, body) = http(&admin, "POST", "/exports/disk/mode/pt");
    assert_eq!((status, body.as_str()), (200, "disk wt -> pt\n"));
    assert_eq!(
        raw.request(nbd::CMD_READ, 0, 0, 4096, &[]),
        (0, vec![1u8; 4096])
    );
    assert_eq!(
        stat(&admin, "read_hits"),
        hits,
        "pass-through read the cache"
    );
    assert_eq!(raw.request(nbd::CMD_WRITE, 0, 0, 4096, &[2u8; 4096]).0, 0);
    assert_eq!(http(&admin, "POST", "/exports/disk/mode/wt").0, 200);
    assert_eq!(
        raw.request(nbd::CMD_READ, 0, 0, 4096, &[]),
        (0, vec![2u8; 4096]),
        "a stale line"
    );
    assert!(block.log().contains("cache mode switched"));

    assert_eq!(http(&admin, "POST", "/exports/disk/mode/xx").0, 400);
    assert_eq!(http(&admin, "POST", "/exports/nosuch/mode/wt").0, 404);
    assert_eq!(http(&admin, "GET", "/exports/disk/mode/wt").0, 405);
    assert_eq!(
        http(&admin, "POST", "/exports/disk/flush"),
        (200, "flushed: 0 dirty lines written back\n".to_string())
    );
    assert_eq!(http(&admin, "GET", "/nothing").0, 404);
    // A request over 8 KiB is refused; the port goes on answering.
    let mut stream = std::net::TcpStream::connect(&admin).unwrap();
    stream.set_read_timeout(Some(WAIT_MAX)).unwrap();
    write!(
        stream,
        "GET /stats HTTP/1.1\r\nX-Filler: {}\r\n",
        "x".repeat(10_000)
    )
    .unwrap();
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
    assert_eq!(http(&admin, "GET", "/health").0, 200);
}

#[test]
fn an_export_started_without_a_cache_cannot_switch_to_one() {
    let dir = Dir::new("nocache");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start_with(
        &dir,
        &[("disk", &backing)],
        &["--mode", "pt", "--admin-listen", "127.0.0.1:0"],
    );
    let admin = admin_addr(&block);
    let (status, body) = http(&admin, "POST", "/exports/disk/mode/wt");
    assert_eq!(status, 400);
    assert!(body.contains("without a cache"), "{body}");
}

#[test]
fn a_long_sequential_read_bypasses_the_cache_past_the_cutoff_and_promotion_waits_for_misses() {
    let dir = Dir::new("seq");
    let backing = backing_file(&dir, "disk.img", 8 << 20);
    let block = Block::start_with(
        &dir,
        &[("disk", &backing)],
        &[
            "--mode",
            "wt",
            "--cache-size",
            "16MiB",
            "--seq-cutoff",
            "1MiB",
            "--admin-listen",
            "127.0.0.1:0",
        ],
    );
    let admin = admin_addr(&block);
    let mut raw = block.connect("disk");
    // 4 MiB read front to back in 64 KiB requests: only the first MiB fills the cache.
    for i in 0..64u64 {
        let (error, data) = raw.request(nbd::CMD_READ, 0, i * 65536, 65536, &[]);
        assert_eq!(error, 0);
        assert_eq!(data[0], ((i * 65536) as usize * 31 % 253) as u8);
    }
    assert_eq!(stat(&admin, "fills"), 256, "1 MiB of 4 KiB lines");
    assert_eq!(stat(&admin, "seq_cutoff_bypasses"), 768);
    // Random reads are no run: they fill.
    assert_eq!(raw.request(nbd::CMD_READ, 0, 7 << 20, 4096, &[]).0, 0);
    assert_eq!(stat(&admin, "fills"), 257);
    drop(block);

    let dir = Dir::new("promote");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start_with(
        &dir,
        &[("disk", &backing)],
        &[
            "--mode",
            "wt",
            "--cache-size",
            "4MiB",
            "--promote-after",
            "2",
            "--admin-listen",
            "127.0.0.1:0",
        ],
    );
    let admin = admin_addr(&block);
    let mut raw = block.connect("disk");
    for (read, fills) in [(1, 0), (2, 1), (3, 1)] {
        assert_eq!(raw.request(nbd::CMD_READ, 0, 8192, 4096, &[]).0, 0);
        assert_eq!(stat(&admin, "fills"), fills, "after read {read}");
    }
    assert_eq!(stat(&admin, "read_hits"), 1);
    assert_eq!(stat(&admin, "fills_deferred"), 1);
}

#[test]
fn a_config_file_s_block_table_configures_the_exports() {
    let dir = Dir::new("config");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let file = dir.0.join("strata.toml");
    std::fs::write(
        &file,
        format!(
            "[block]\nexport = [\"fromfile={}\"]\nmode = \"wa\"\ncache-size = \"1MiB\"\n",
            backing.display()
        ),
    )
    .unwrap();
    let config = file.display().to_string();
    let block = Block::start_with(
        &dir,
        &[],
        &["--config", &config, "--admin-listen", "127.0.0.1:0"],
    );
    let admin = admin_addr(&block);
    let (_, stats) = http(&admin, "GET", "/stats");
    assert!(stats.starts_with("export=fromfile mode=wa "), "{stats}");
    let mut raw = block.connect("fromfile");
    assert_eq!(raw.request(nbd::CMD_READ, 0, 0, 4, &[]).0, 0);

    std::fs::write(&file, "[block]\nmode = 7\n").unwrap();
    let (status, stderr) = harness::run_to_exit(&["block", "--config", &config]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mode"), "{stderr}");
    std::fs::write(&file, "[block]\nmode = \"wt\"\n").unwrap();
    let (status, stderr) = harness::run_to_exit(&["block", "--config", &config]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no export"), "{stderr}");
}

#[test]
fn a_cache_pool_restarts_warm_after_sigterm_and_kill_9_and_refuses_another_store() {
    let dir = Dir::new("warm");
    let backing = backing_file(&dir, "disk.img", 4 << 20);
    let pool_file = harness::PoolFile::on_tmpfs("block-warm");
    let pool = PathBuf::from(pool_file.path());
    let pool_arg = pool.display().to_string();
    let flags = [
        "--mode",
        "wt",
        "--cache-size",
        "16MiB",
        "--cache",
        &pool_arg,
        "--admin-listen",
        "127.0.0.1:0",
    ];
    let mut block = Block::start_with(&dir, &[("disk", &backing)], &flags);
    let mut raw = block.connect("disk");
    for i in 0..32u64 {
        assert_eq!(
            raw.request(nbd::CMD_WRITE, 0, i * 4096, 4096, &[i as u8 + 1; 4096])
                .0,
            0
        );
    }
    drop(raw);
    for signal in ["-TERM", "-KILL"] {
        block.stop(signal);
        drop(block);
        block = Block::start_with(&dir, &[("disk", &backing)], &flags);
        assert!(
            block.log().contains("recovered_lines=32"),
            "{signal}:\n{}",
            block.log()
        );
        let admin = admin_addr(&block);
        let mut raw = block.connect("disk");
        for i in 0..32u64 {
            assert_eq!(
                raw.request(nbd::CMD_READ, 0, i * 4096, 4096, &[]),
                (0, vec![i as u8 + 1; 4096])
            );
        }
        assert_eq!(
            stat(&admin, "read_hits"),
            32,
            "{signal}: served warm from the pool"
        );
        assert_eq!(stat(&admin, "read_misses"), 0);
    }
    block.stop("-TERM");
    drop(block);
    // The same pool in front of another store: refused, the pool left as it was.
    let other = backing_file(&dir, "other.img", 4 << 20);
    let before = std::fs::read(&pool).unwrap();
    let export = format!("disk={}", other.display());
    let socket = format!("unix:{}", dir.0.join("x.sock").display());
    let (status, stderr) = harness::run_to_exit(&[
        "block",
        "--mode",
        "wt",
        "--cache-size",
        "16MiB",
        "--cache",
        &pool_arg,
        "--export",
        &export,
        "--nbd-listen",
        &socket,
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("made for another backing store"),
        "{stderr}"
    );
    assert!(
        std::fs::read(&pool).unwrap() == before,
        "a refused pool was changed"
    );
}

#[test]
fn strata_block_stats_mode_and_flush_talk_to_a_running_server() {
    let dir = Dir::new("cli");
    let backing = backing_file(&dir, "disk.img", 1 << 20);
    let block = Block::start_with(
        &dir,
        &[("disk", &backing)],
        &[
            "--mode",
            "wt",
            "--cache-size",
            "1MiB",
            "--admin-listen",
            "127.0.0.1:0",
        ],
    );
    let admin = admin_addr(&block);
    let (status, stdout, stderr) = harness::run_output(&["block", "stats", "--admin", &admin]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.starts_with("export=disk mode=wt "), "{stdout}");
    let (status, stdout, _) =
        harness::run_output(&["block", "mode", "--admin", &admin, "disk", "wi"]);
    assert!(status.success());
    assert_eq!(stdout, "disk wt -> wi\n");
    let (status, _, stderr) =
        harness::run_output(&["block", "mode", "--admin", &admin, "disk", "xx"]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("400"), "{stderr}");
    let (status, stdout, _) =
        harness::run_output(&["block", "mode", "--admin", &admin, "disk", "wb"]);
    assert!(status.success());
    assert_eq!(stdout, "disk wi -> wb\n");
    let (status, stdout, _) = harness::run_output(&["block", "flush", "--admin", &admin, "disk"]);
    assert!(status.success());
    assert_eq!(stdout, "flushed: 0 dirty lines written back\n");
    let (status, stdout, _) = harness::run_output(&["block", "detach", "--admin", &admin, "disk"]);
    assert!(status.success());
    assert!(stdout.starts_with("disk detached: "), "{stdout}");
    assert!(block.log().contains("cache detached"));
    let (status, _, stderr) = harness::run_output(&["block", "stats", "--admin", "127.0.0.1:1"]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("admin port 127.0.0.1:1"), "{stderr}");
}

#[test]
fn a_full_file_system_under_a_sparse_store_gets_enospc_and_the_session_goes_on() {
    // A sparse 64 MiB store on an 8 MiB tmpfs of the test's own (root, as CI has: without the
    // right to mount the test fails and says so).
    let dir = Dir::new("full");
    let mount = dir.0.join("fs");
    std::fs::create_dir_all(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mount)
        .status()
        .expect("run mount");
    assert!(
        mounted.success(),
        "cannot mount a tmpfs on {} (this test needs root)",
        mount.display()
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount.clone());
    // Write-through hits the full disk in the write; write-back when the cleaner, then a write
    // needing room, writes lines back (the cache is 1 MiB: 256 lines).
    for flags in [
        &["--mode", "wt", "--cache-size", "1MiB"][..],
        &[
            "--mode",
            "wb",
            "--cache-size",
            "1MiB",
            "--clean-staleness",
            "0",
        ][..],
    ] {
        let store = mount.join("sparse.img");
        let _ = std::fs::remove_file(&store);
        std::fs::File::create(&store)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let mut block = Block::start_with(&dir, &[("disk", &store)], flags);
        let mut raw = block.connect("disk");
        // The writes answered (in write-back one may succeed after a refusal: writing lines
        // back for room freed some).
        let mut written = Vec::new();
        let mut refused = 0;
        for i in 0..4096u64 {
            match raw
                .request(nbd::CMD_WRITE, 0, i * 16384, 16384, &[i as u8 | 1; 16384])
                .0
            {
                0 => written.push(i),
                error => {
                    assert_eq!(
                        error,
                        nbd::ENOSPC,
                        "{flags:?}: a full disk is ENOSPC, not {error}"
                    );
                    refused += 1;
                    if refused > 8 {
                        break;
                    }
                }
            }
        }
        assert!(
            refused > 0 && written.len() > 100,
            "{flags:?}: written {}, refused {refused}",
            written.len()
        );
        // The session goes on, and what was written reads back.
        let last = written.len() - 1;
        for i in [written[0], written[last / 2], written[last]] {
            let (error, data) = raw.request(nbd::CMD_READ, 0, i * 16384, 16384, &[]);
            assert_eq!(error, 0);
            assert!(
                data.iter().all(|&b| b == i as u8 | 1),
                "{flags:?}: block {i}"
            );
        }
        assert!(
            block.log().contains("write failed"),
            "{flags:?}: the failure is logged"
        );
        drop(raw);
        block.stop("-KILL");
    }
}

#[test]
fn a_client_that_never_reads_its_replies_holds_up_no_one_else() {
    let dir = Dir::new("slow");
    let backing = backing_file(&dir, "disk.img", 8 << 20);
    let block = Block::start_with(
        &dir,
        &[("disk", &backing)],
        &["--mode", "wt", "--cache-size", "16MiB"],
    );
    // 400 reads of 1 MiB sent, no reply read: the server's writes to it fill the socket and stop.
    // They go from a thread of their own: once its replies back up, the server stops reading
    // this connection's requests too, and a send of the rest would block this test for ever.
    let slow = block.connect("disk");
    let mut requests = Vec::new();
    for i in 0..400u64 {
        requests.extend_from_slice(&nbd::encode_request(&nbd::Request {
            flags: 0,
            command: nbd::CMD_READ,
            cookie: i,
            offset: (i % 8) << 20,
            length: 1 << 20,
        }));
    }
    let mut sender = slow.0.try_clone().expect("clone the slow socket");
    let sending = std::thread::spawn(move || {
        let _ = sender.write_all(&requests); // Ends with an error at the shutdown below.
    });
    // Another client is served at once, reads and writes.
    let mut other = block.connect("disk");
    let started = Instant::now();
    for i in 0..50u64 {
        assert_eq!(
            other
                .request(nbd::CMD_WRITE, 0, i * 4096, 4096, &[7; 4096])
                .0,
            0
        );
        assert_eq!(
            other.request(nbd::CMD_READ, 0, i * 4096, 4096, &[]),
            (0, vec![7; 4096])
        );
    }
    assert!(
        started.elapsed() < WAIT_MAX,
        "the other client waited on the slow one"
    );
    let _ = slow.0.shutdown(std::net::Shutdown::Both);
    sending.join().expect("the sending thread");
    drop(slow);
    assert_eq!(other.request(nbd::CMD_FLUSH, 0, 0, 0, &[]).0, 0);
}

/// Runs nbdcopy from `from` to `to`; panics when it fails.
fn nbdcopy(from: &str, to: &str) {
    let status = Command::new("nbdcopy").arg(from).arg(to).status().unwrap();
    assert!(status.success(), "nbdcopy {from} {to}");
}

#[test]
fn write_back_keeps_writes_in_the_cache_pool_across_kill_9_until_a_flush_writes_them_back() {
    let dir = Dir::new("wb");
    let backing = backing_file(&dir, "disk.img", 8 << 20);
    let original = std::fs::read(&backing).unwrap();
    let pool_file = harness::PoolFile::on_tmpfs("block-wb");
    let pool = pool_file.path().to_string();
    let flags = [
        "--mode",
        "wb",
        "--cache-size",
        "16MiB",
        "--cache",
        &pool,
        "--clean-staleness",
        "3600",
        "--admin-listen",
        "127.0.0.1:0",
    ];
    let mut block = Block::start_with(&dir, &[("disk", &backing)], &flags);
    let source = dir.0.join("source");
    let data: Vec<u8> = (0..(3 << 20) + 4096)
        .map(|i: usize| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    std::fs::write(&source, &data).unwrap();
    nbdcopy(source.to_str().unwrap(), &block.uri("disk"));
    let admin = admin_addr(&block);
    assert!(stat(&admin, "dirty_lines") >= (3 << 20) / 4096);
    assert!(
        std::fs::read(&backing).unwrap() == original,
        "write-back wrote the store before its staleness time"
    );
    // A kill -9: the dirty lines are in the pool, and the restart serves them.
    block.stop("-KILL");
    let mut block = Block::start_with(&dir, &[("disk", &backing)], &flags);
    assert!(
        block.log().contains("recovered_dirty_lines=769"),
        "{}",
        block.log()
    );
    let back = dir.0.join("back");
    nbdcopy(&block.uri("disk"), back.to_str().unwrap());
    assert!(std::fs::read(&back).unwrap()[..data.len()] == data[..]);
    // An explicit flush writes every dirty line back.
    let admin = admin_addr(&block);
    let (status, body) = http(&admin, "POST", "/exports/disk/flush");
    assert_eq!(
        (status, body.as_str()),
        (200, "flushed: 769 dirty lines written back\n")
    );
    assert_eq!(stat(&admin, "dirty_lines"), 0);
    assert!(std::fs::read(&backing).unwrap()[..data.len()] == data[..]);
    // Dirty again, then a switch to write-through writes them back first.
    let second: Vec<u8> = data.iter().map(|b| b ^ 0x5a).collect();
    std::fs::write(&source, &second).unwrap();
    nbdcopy(source.to_str().unwrap(), &block.uri("disk"));
    assert!(stat(&admin, "dirty_lines") > 0);
    assert_eq!(http(&admin, "POST", "/exports/disk/mode/wt").0, 200);
    assert_eq!(stat(&admin, "dirty_lines"), 0);
    assert!(std::fs::read(&backing).unwrap()[..second.len()] == second[..]);
    assert!(block
        .log()
        .contains("dirty lines written back before leaving write-back"));
    // A detach writes dirty lines back and leaves nothing cached.
    assert_eq!(http(&admin, "POST", "/exports/disk/mode/wb").0, 200);
    std::fs::write(&source, &data).unwrap();
    nbdcopy(source.to_str().unwrap(), &block.uri("disk"));
    assert!(stat(&admin, "dirty_lines") >= 769);
    let (status, body) = http(&admin, "POST", "/exports/disk/detach");
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("disk detached: ") && body.ends_with(" lines dropped, now pt\n"));
    assert_eq!(
        (stat(&admin, "cache_lines"), stat(&admin, "dirty_lines")),
        (0, 0)
    );
    assert!(std::fs::read(&backing).unwrap()[..data.len()] == data[..]);
    // Dirty lines left by a write-back run are written back before a write-through start
    // serves.
    assert_eq!(http(&admin, "POST", "/exports/disk/mode/wb").0, 200);
    nbdcopy(source.to_str().unwrap(), &block.uri("disk"));
    let third = data.clone();
    std::fs::write(&source, &third).unwrap();
    nbdcopy(source.to_str().unwrap(), &block.uri("disk"));
    assert!(block.stop("-TERM").success());
    let wt_flags = [&["--mode", "wt"], &flags[2..]].concat();
    let block = Block::start_with(&dir, &[("disk", &backing)], &wt_flags);
    assert!(
        block
            .log()
            .contains("dirty lines from the last run written back before serving"),
        "{}",
        block.log()
    );
    assert!(std::fs::read(&backing).unwrap()[..third.len()] == third[..]);
}

#[test]
fn fio_verifies_random_writes_in_every_mode_and_through_write_back_with_a_cache_far_smaller() {
    let dir = Dir::new("fio");
    let backing = backing_file(&dir, "disk.img", 32 << 20);
    let pool_file = harness::PoolFile::on_tmpfs("block-fio-wb");
    let pool = pool_file.path().to_string();
    let small = ["--cache-size", "1MiB"];
    for (label, mode, flags) in [
        ("pt", "pt", vec![]),
        ("wt", "wt", small.to_vec()),
        ("wa", "wa", small.to_vec()),
        ("wi", "wi", small.to_vec()),
        ("wb dram", "wb", small.to_vec()),
        (
            "wb pool",
            "wb",
            vec![
                "--cache-size",
                "16MiB",
                "--cache-line-size",
                "64KiB",
                "--cache",
                &pool,
            ],
        ),
    ] {
        let mut all = vec![
            "--mode",
            mode,
            "--clean-staleness",
            "0",
            "--admin-listen",
            "127.0.0.1:0",
        ];
        all.extend(flags);
        let block = Block::start_with(&dir, &[("disk", &backing)], &all);
        let output = Command::new("fio")
            .current_dir(&dir.0) // fio leaves its verify state file in its working directory.
            .args([
                "--name=wb",
                "--ioengine=nbd",
                &format!("--uri={}", block.uri("disk")),
                "--rw=randwrite",
                "--bs=4k",
                "--size=32m",
                "--iodepth=8",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--do_verify=1",
                "--fsync=64",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).to_string()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{label}: fio failed:\n{text}");
        assert!(!text.contains("verify: bad"), "{label}: {text}");
        if mode == "wb" {
            let admin = admin_addr(&block);
            assert!(stat(&admin, "dirty_writes") >= 8192, "{label}");
            let full = stat(&admin, "room_waits") > 0;
            assert!(full || label == "wb pool", "{label}: never full");
        }
        drop(block);
    }
}
