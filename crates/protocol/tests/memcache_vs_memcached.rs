//! Differential test: for inputs the parser rejects, the reply it prescribes must be byte for
//! byte what a real memcached sends, and a close must be a close.
//!
//! Starts `memcached` (from `$MEMCACHED` or `PATH`) on a free loopback port; when it is not
//! installed the test prints a note and passes, so machines without memcached still build.
//! Each input goes on a fresh connection followed by `mn\r\n`, and the bytes up to memcached's
//! `MN\r\n` are compared with the parser's reply (empty under `noreply`). Inputs are chosen so
//! their answer does not depend on stored data.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use strata_protocol::memcache::{parse, Limits, ParseError, Request};

struct Memcached {
    child: Child,
    port: u16,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real memcached on a free port. A port can be taken between the probe that found it and
/// memcached's bind (tests run in parallel): memcached then exits and another port is tried.
fn start_memcached() -> Option<Memcached> {
    (0..10).find_map(|_| try_start_memcached())
}

fn try_start_memcached() -> Option<Memcached> {
    let binary = std::env::var("MEMCACHED").unwrap_or_else(|_| "memcached".to_string());
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    // `-u nobody` is needed only when running as root and ignored otherwise.
    let child = Command::new(binary)
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
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut server = Memcached { child, port };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            // Ours must still run: another test's memcached may hold the port.
            std::thread::sleep(Duration::from_millis(50));
            return matches!(server.child.try_wait(), Ok(None)).then_some(server);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Sends `input` then `mn`, returns what came back before `MN\r\n`, or `None` if the server
/// closed the connection first.
fn exchange(port: u16, input: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to memcached");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(input).unwrap();
    if stream.write_all(b"mn\r\n").is_err() {
        return None;
    }
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if received.ends_with(b"MN\r\n") {
            received.truncate(received.len() - 4);
            return Some(received);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(len) => received.extend_from_slice(&chunk[..len]),
        }
    }
}

fn rejected_inputs() -> Vec<Vec<u8>> {
    let long_key = "k".repeat(251);
    let mut inputs: Vec<Vec<u8>> = [
        "GET a\r\n",
        "get\r\n",
        "gat\r\n",
        "gat x a\r\n",
        "foo\r\n",
        "\r\n",
        "g\r\n",
        "set a 0 0\r\n",
        "set a 0 0 1 noreply extra\r\n",
        "set a x 0 1\r\n",
        "set a -1 0 1\r\n",
        "set a 0 0 -1\r\n",
        "set a 0 0 -1 noreply\r\n",
        "set a 0 0 1x\r\n",
        "cas a 0 0 1\r\n",
        "cas a 0 0 1 x\r\n",
        "set a 0 0 2\r\nxyz\r\n",
        "set a 0 0 2 noreply\r\nxyz\r\n",
        "delete\r\n",
        "delete a 1\r\n",
        "delete a 0 x\r\n",
        "delete a 1 noreply\r\n",
        "delete a 0 0 0\r\n",
        "incr a\r\n",
        "incr a x\r\n",
        "incr a -1\r\n",
        "decr a 18446744073709551616\r\n",
        "incr a x noreply\r\n",
        "touch a\r\n",
        "touch a x\r\n",
        "flush_all x\r\n",
        "flush_all 0 noreply x\r\n",
        "verbosity\r\n",
        "verbosity x\r\n",
        "verbosity noreply\r\n",
        "verbosity 1 2 3\r\n",
        "mg\r\n",
        "ms\r\n",
        "ms a\r\n",
        "ms a x\r\n",
        "me\r\n",
        "me a b\r\n",
        "mg a v v\r\n",
        "mg a zz\r\n",
        "mg a Tx\r\n",
        "mg a Fx Tx\r\n",
        "mg a F\r\n",
        "mg a D\r\n",
        "mg a J\r\n",
        "mg a M\r\n",
        "mg a \u{ff}\r\n",
        "mg a O12345678901234567890123456789012 v\r\n",
        "mg YQ b v\r\n",
        "mg ==== b\r\n",
        "md a Cx\r\n",
        "ma a Dx\r\n",
        "ma a MX\r\n",
        "ma a Mi\r\n",
        "md a O123456789012345678901234567890123\r\n",
        "ms a 1 Tx\r\nx\r\n",
        "ms a 1 MX\r\nx\r\n",
        "ms a 1 MXX\r\nx\r\n",
        "ms a 2 q\r\nxyz\r\n",
        "mg a c f h k l q s t u v C1 D1 F1 I J1 L M1 N1\r\n",
        "md a c f h k l q s t u v C1 D1 F1 I J1 L M1 N1\r\n",
        "ms a 1 c f h k l q s t u v C1 D1 F1 I J1 L M1\r\n",
    ]
    .iter()
    .map(|input| input.as_bytes().to_vec())
    .collect();
    for template in [
        "set {} 0 0 1\r\n",
        "get a {}\r\n",
        "delete {}\r\n",
        "mg {} v\r\n",
        "touch {} 1\r\n",
    ] {
        inputs.push(template.replace("{}", &long_key).into_bytes());
    }
    inputs
}

#[test]
fn rejections_match_real_memcached() {
    let Some(server) = start_memcached() else {
        panic!("memcached did not start: scripts/test.sh installs it (apt-get install memcached)");
    };
    let limits = Limits::default();
    for input in rejected_inputs() {
        let (reply, line_end) = match parse(&input, &limits) {
            Err(ParseError::Reply {
                reply,
                consumed,
                swallow_len,
            }) => (reply, consumed + swallow_len),
            other => panic!(
                "{:?} should be rejected, got {other:?}",
                String::from_utf8_lossy(&input)
            ),
        };
        // Only the rejected bytes are sent: memcached would read anything after them as the
        // next command.
        let got = exchange(server.port, &input[..line_end.min(input.len())]);
        assert_eq!(
            got.as_deref().map(String::from_utf8_lossy),
            Some(String::from_utf8_lossy(reply)),
            "input {:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn long_lines_close_like_real_memcached() {
    let Some(server) = start_memcached() else {
        panic!("memcached did not start: scripts/test.sh installs it (apt-get install memcached)");
    };
    let limits = Limits::default();
    // A line without a newline in memcached's 16 KiB read buffer: closed without a reply.
    let mut set = b"set ".to_vec();
    set.resize(20_000, b'a');
    assert_eq!(parse(&set, &limits), Err(ParseError::Close));
    assert_eq!(exchange(server.port, &set), None, "memcached closes");
    // A line that fills the buffer exactly is processed, whatever its length; one more byte
    // and it is closed.
    let mut version = vec![b' '; 16_375];
    version.extend_from_slice(b"version\r\n");
    assert!(parse(&version, &limits).is_ok());
    let reply = exchange(server.port, &version).expect("memcached answers");
    assert!(reply.starts_with(b"VERSION "), "{}", reply.escape_ascii());
    version.insert(0, b' ');
    assert_eq!(parse(&version, &limits), Err(ParseError::Close));
    assert_eq!(exchange(server.port, &version), None, "memcached closes");
    // A multiget may be longer, with any number of keys.
    let mut get = b"get".to_vec();
    while get.len() < 30_000 {
        get.extend_from_slice(b" ab");
    }
    assert_eq!(parse(&get, &limits), Err(ParseError::Incomplete));
    get.extend_from_slice(b"\r\n");
    assert!(parse(&get, &limits).is_ok());
    assert_eq!(
        exchange(server.port, &get).as_deref(),
        Some(&b"END\r\n"[..])
    );
}

#[test]
fn too_large_stores_swallow_like_real_memcached() {
    let Some(server) = start_memcached() else {
        panic!("memcached did not start: scripts/test.sh installs it (apt-get install memcached)");
    };
    let limits = Limits::default();
    for line in [
        &b"set a 0 0 2000000\r\n"[..],
        b"add a 0 0 2000000 noreply\r\n",
        b"ms a 2000000 q\r\n",
    ] {
        let parsed = parse(line, &limits).expect("too-large header parses");
        let Request::TooLarge(too_large) = parsed.request else {
            panic!("{:?} should be too large", String::from_utf8_lossy(line));
        };
        assert_eq!(parsed.consumed, line.len());
        // Whatever the swallowed bytes are, memcached skips exactly `swallow_len` of them.
        let mut input = line.to_vec();
        input.resize(line.len() + too_large.swallow_len, b'y');
        let got = exchange(server.port, &input);
        assert_eq!(
            got.as_deref(),
            Some(too_large.reply),
            "{:?}",
            String::from_utf8_lossy(line)
        );
    }
}
