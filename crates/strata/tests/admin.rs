//! The admin endpoint under clients that starve a blocking server (issue 10, finding 6): silent
//! connections, a client sending a byte a second, more connections than it keeps; and its
//! HTTP replies, status line by status line.
//!
//! Before the endpoint became an event loop, ten silent connections made `GET /health` wait
//! 20 s (two seconds of read timeout each, one after the other) and a client trickling one
//! byte a second held it for as long as it liked. A health probe that hangs reads as a dead
//! server, so these tests ask for an answer within [`PROBE_TIME_MAX`], a deadline that only a
//! hang misses (an answer takes well under a millisecond).

mod harness;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::Server;

/// Longest a probe may take while the endpoint is crowded: far above the fraction of a
/// millisecond an answer takes, far below the seconds a blocked endpoint makes a probe wait.
const PROBE_TIME_MAX: Duration = Duration::from_secs(1);
/// The server's `ADMIN_CONNECTIONS_MAX`.
const ADMIN_CONNECTIONS_MAX: usize = 64;
/// The server's `ADMIN_HEAD_TIMEOUT`.
const ADMIN_HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `request`, reads the reply until the server closes, within [`PROBE_TIME_MAX`].
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(PROBE_TIME_MAX))
        .expect("timeout");
    stream.write_all(request).expect("send");
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap_or_else(|err| {
        panic!("no whole reply within {PROBE_TIME_MAX:?}: {err}; got {reply:?}")
    });
    assert!(
        started.elapsed() < PROBE_TIME_MAX,
        "took {:?}",
        started.elapsed()
    );
    String::from_utf8(reply).expect("text reply")
}

/// Whether the server still holds `stream` open: no EOF and no reset waiting to be read.
fn still_open(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let open = matches!(stream.read(&mut byte), Err(err) if err.kind() == ErrorKind::WouldBlock);
    stream.set_nonblocking(false).expect("blocking");
    open
}

/// A client that sends a request head one byte a second until told to stop.
fn slow_writer(addr: SocketAddr, stop: Arc<AtomicBool>, started: Arc<AtomicBool>) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    for byte in b"GET /health HTTP/1.1\r\nHost: slow\r\n\r\n".iter().cycle() {
        if stop.load(Ordering::Relaxed) || stream.write_all(&[*byte]).is_err() {
            return;
        }
        started.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn health_and_metrics_answer_promptly_while_silent_and_slow_clients_hold_connections() {
    let server = Server::start(&[]);
    let mut silent: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(server.admin).expect("connect"))
        .collect();
    let (stop, started) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let writer = {
        let (addr, stop, started) = (server.admin, Arc::clone(&stop), Arc::clone(&started));
        std::thread::spawn(move || slow_writer(addr, stop, started))
    };
    while !started.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..3 {
        let reply = exchange(server.admin, b"GET /health HTTP/1.1\r\nHost: probe\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(reply.ends_with("\r\n\r\nOK\n"), "{reply}");
    }
    let reply = exchange(server.admin, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.contains("\nstrata_uptime_seconds "), "{reply}");
    // The probes were answered while the crowd was still there, not after it was sent away.
    assert!(
        silent.iter_mut().all(still_open),
        "silent clients were closed early"
    );
    assert!(!writer.is_finished(), "the slow writer was cut off");
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("slow writer");
}

#[test]
fn a_client_that_never_completes_its_request_is_closed_at_the_head_deadline() {
    let server = Server::start(&[]);
    let connected = Instant::now();
    let mut stream = TcpStream::connect(server.admin).expect("connect");
    stream.write_all(b"GET /health HTTP/1.1\r\n").expect("send");
    stream
        .set_read_timeout(Some(harness::WAIT_MAX))
        .expect("timeout");
    let mut reply = Vec::new();
    stream
        .read_to_end(&mut reply)
        .expect("the server closes the connection");
    assert!(reply.is_empty(), "no reply to half a request: {reply:?}");
    // The deadline runs from the accept, which came after `connected`.
    assert!(
        connected.elapsed() >= ADMIN_HEAD_TIMEOUT,
        "{:?}",
        connected.elapsed()
    );
}

#[test]
fn past_the_connection_limit_the_oldest_connection_makes_room() {
    let server = Server::start(&[]);
    let mut idle: Vec<TcpStream> = (0..ADMIN_CONNECTIONS_MAX)
        .map(|_| TcpStream::connect(server.admin).expect("connect"))
        .collect();
    // Every slot is taken: this probe closes the oldest connection, the first one.
    let reply = exchange(server.admin, b"GET /health HTTP/1.0\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(harness::WAIT_MAX))
        .expect("timeout");
    let mut sink = Vec::new();
    first
        .read_to_end(&mut sink)
        .expect("the oldest connection is closed");
    assert!(sink.is_empty());
    // The others are younger and well within their deadline: still open.
    assert!(idle[1..].iter_mut().all(still_open));
}

#[test]
fn replies_have_exact_status_lines() {
    let server = Server::start(&[]);
    let status_line = |request: &[u8]| {
        let reply = exchange(server.admin, request);
        let (line, _) = reply.split_once("\r\n").expect("a status line");
        (line.to_string(), reply)
    };
    let cases: &[(&[u8], &str)] = &[
        (b"GET /health HTTP/1.0\r\n\r\n", "HTTP/1.1 200 OK"),
        (
            b"GET /health?verbose HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1 200 OK",
        ),
        (b"GET /metrics HTTP/1.0\n\n", "HTTP/1.1 200 OK"),
        (b"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (b"GET /healthz HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (
            b"POST /health HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
            "HTTP/1.1 405 Method Not Allowed",
        ),
        (
            b"DELETE /metrics HTTP/1.1\r\n\r\n",
            "HTTP/1.1 405 Method Not Allowed",
        ),
        (
            b"GET /health HTTP/2.0\r\n\r\n",
            "HTTP/1.1 505 HTTP Version Not Supported",
        ),
        (b"hello there\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ];
    for (request, want) in cases {
        let (line, reply) = status_line(request);
        assert_eq!(line, *want, "{}\n{reply}", request.escape_ascii());
    }
    let (_, reply) = status_line(b"PUT /health HTTP/1.1\r\n\r\n");
    assert!(reply.contains("\r\nAllow: GET, HEAD\r\n"), "{reply}");
    let mut huge = b"GET /health HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b"X-Filler: 0123456789abcdef\r\n", 400).flatten());
    huge.extend_from_slice(b"\r\n");
    let (line, _) = status_line(&huge);
    assert_eq!(line, "HTTP/1.1 431 Request Header Fields Too Large");
}

#[test]
fn head_requests_get_the_headers_of_a_get_without_its_body() {
    let server = Server::start(&[]);
    let reply = exchange(server.admin, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"));
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Length: "))
        .expect("a length")
        .parse()
        .expect("a number");
    assert!(length > 1000, "the length of the GET body: {length}");
    assert_eq!(body, "", "no body");
}
