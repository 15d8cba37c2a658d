//! Differential test against a real Redis: inline requests built from quoting-heavy bytes are
//! sent to the server and to `parse_command`, and both must agree on the arguments (read back with
//! `LRANGE`) or on the exact protocol error.
//!
//! Runs only when `STRATA_REDIS_ADDR` names a disposable server, e.g.
//! `redis-server --port 21399 --save '' --appendonly no --daemonize yes` and
//! `STRATA_REDIS_ADDR=127.0.0.1:21399 cargo test -p strata-protocol --test resp_redis_diff`.
//! It uses the key `strata:resp:diff`. Last run against redis-server 7.0.15.

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

#[test]
fn inline_requests_match_redis() {
    let Ok(addr) = std::env::var("STRATA_REDIS_ADDR") else {
        eprintln!("STRATA_REDIS_ADDR is not set: skipping the differential test");
        return;
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
