//! Differential test against a real Redis: inline requests built from quoting-heavy bytes are
//! sent to the server and to `parse_command`, and both must agree on the arguments (read back with
//! `LRANGE`) or on the exact protocol error.
//!
//! Starts a disposable `redis-server` of its own on a free port (scripts/test.sh installs it), or
//! uses the one `STRATA_REDIS_ADDR` names. It uses the key `strata:resp:diff`. Last run against
//! redis-server 7.0.15.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use strata_protocol::resp::{
    encode_command, parse_command, parse_reply, Args, Limits, ParseError, Reply, ReplyError,
};

const KEY: &[u8] = b"strata:resp:diff";
const CASES_COUNT: usize = 500;
const ALPHABET: &[u8] = b"ab  \"'\\x4fn\t\x0b\x0c\r\xc3";

/// Reads until one whole reply arrived, the server closed, or a short timeout passed.
fn read_reply(stream: &mut TcpStream) -> Option<Reply> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match parse_reply(&buf) {
            Ok((reply, _)) => return Some(reply),
            Err(ReplyError::Incomplete) => {}
            Err(error) => panic!("server sent invalid RESP: {error}"),
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect to STRATA_REDIS_ADDR");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    stream
}

fn call(stream: &mut TcpStream, args: &[&[u8]]) -> Option<Reply> {
    let mut out = Vec::new();
    encode_command(&mut out, args);
    stream.write_all(&out).unwrap();
    read_reply(stream)
}

/// A `redis-server` this test started, killed on drop.
struct RedisServer(std::process::Child);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a disposable redis-server on a free port; panics if it cannot (a test that passes
/// without its reference server would prove nothing).
fn start_redis() -> (RedisServer, String) {
    // A free port is only free when asked: another test's server may bind it first, and then
    // this Redis exits while the connect below reaches the other server. Start again on another
    // port until the Redis that answers is ours.
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect(
                "redis-server runs (scripts/test.sh installs it: apt-get install redis-server)",
            );
        let mut server = RedisServer(child);
        let addr = format!("127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(&addr).is_err() && matches!(server.0.try_wait(), Ok(None)) {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        if matches!(server.0.try_wait(), Ok(None)) {
            return (server, addr);
        }
    }
    panic!("redis-server could not bind a port five times")
}

#[test]
fn inline_requests_match_redis() {
    let (_server, addr) = match std::env::var("STRATA_REDIS_ADDR") {
        Ok(addr) => (None, addr),
        Err(_) => {
            let (server, addr) = start_redis();
            (Some(server), addr)
        }
    };
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut args = Args::new();
    let mut errors_count = 0;
    for _ in 0..CASES_COUNT {
        let mut request = b"RPUSH strata:resp:diff ".to_vec();
        let len = 1 + next() % 12;
        request.extend((0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize]));
        request.extend_from_slice(b"\r\n");
        let ours = parse_command(&request, &Limits::default(), &mut args);

        let mut stream = connect(&addr);
        stream.write_all(&request).unwrap();
        let theirs = read_reply(&mut stream);
        let label = request.escape_ascii().to_string();
        match ours {
            Err(ParseError::Protocol(error)) => {
                errors_count += 1;
                let mut expected = Vec::new();
                error.encode(&mut expected);
                let expected = parse_reply(&expected).unwrap().0;
                assert_eq!(theirs, Some(expected), "{label}");
            }
            Ok(_) if args.len() < 3 => {
                assert!(matches!(theirs, Some(Reply::Error(ref e)) if e.starts_with(b"ERR wrong")));
            }
            Ok(_) => {
                let pushed = call(&mut stream, &[b"LRANGE", KEY, b"0", b"-1"]);
                call(&mut stream, &[b"DEL", KEY]);
                let ours = args
                    .iter(&request)
                    .skip(2)
                    .map(|a| Reply::Bulk(a.to_vec()))
                    .collect();
                assert_eq!(pushed, Some(Reply::Array(ours)), "{label}");
            }
            Err(error) => panic!("{label}: {error}"),
        }
    }
    eprintln!("{CASES_COUNT} requests agreed, {errors_count} of them protocol errors");
}
