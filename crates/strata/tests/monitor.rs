//! MONITOR against the real binary: the lines for commands run on every worker, beside a real
//! redis-server running the same commands (timestamps and addresses aside), and a monitor that
//! does not read being closed while the server goes on serving.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::{resp_command, Client, Server};

fn command(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    resp_command(&args)
}

/// A redis-server on a free port, killed on drop.
struct Redis(Child, u16);

impl Redis {
    fn start() -> Redis {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server (scripts/test.sh installs it)");
            let mut redis = Redis(child, port);
            let deadline = Instant::now() + Duration::from_secs(10);
            let stream = loop {
                if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                    break stream;
                }
                assert!(Instant::now() < deadline, "redis-server did not start");
                std::thread::sleep(Duration::from_millis(20));
            };
            // The port was free when picked, not reserved: another test's server may have
            // taken it first (ours then exits). Only a server reporting our child's pid is ours.
            if serves_as(&stream, redis.0.id()) && matches!(redis.0.try_wait(), Ok(None)) {
                return redis;
            }
        }
        panic!("redis-server did not start on a free port");
    }
}

/// Whether the Redis server behind `stream` is the process `pid` (`INFO server`'s
/// `process_id`).
fn serves_as(stream: &TcpStream, pid: u32) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if (&*stream).write_all(&command(&["INFO", "server"])).is_err() {
        return false;
    }
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 0) {
        if let Some(id) = line.trim_end().strip_prefix("process_id:") {
            return id == pid.to_string();
        }
        line.clear();
    }
    false
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The commands whose lines are compared, one client each in turn.
const SCRIPT: &[&[&str]] = &[
    &["SET", "k", "v"],
    &["set", "lower", "case"],
    &["HSET", "h", "a\"b\\c", "x\r\ny\t\u{1}"],
    &["AUTH", "secret"],
    &["MULTI"],
    &["INCR", "n"],
    &["EXEC"],
    &["CONFIG", "GET", "maxmemory"],
    &["GET"],
    &["NOSUCHCOMMAND"],
    &["PING"],
];

/// Runs [`SCRIPT`] against `port` on new connections, while a monitor on `port` watches;
/// returns the monitor's lines without their timestamp and client address.
fn monitored(port: u16) -> Vec<String> {
    let monitor = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    monitor
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(monitor.try_clone().unwrap());
    (&monitor).write_all(&command(&["MONITOR"])).unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    for args in SCRIPT {
        let mut client = Client::connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        client.call(&command(args));
    }
    // A marker command, so the reads stop at a known line.
    let mut client = Client::connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    client.call(&command(&["ECHO", "end"]));
    let mut lines = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let (_, rest) = line.split_once("] ").expect("a MONITOR line");
        let rest = rest.trim_end().to_owned();
        if rest == "\"ECHO\" \"end\"" {
            return lines;
        }
        // redis-cli style clients send COMMAND DOCS; none here, but skip any COMMAND.
        if !rest.starts_with("\"COMMAND\"") {
            lines.push(rest);
        }
    }
}

#[test]
fn monitor_lines_match_redis() {
    let redis = Redis::start();
    let server = Server::start(&["--threads", "2"]);
    let expected = monitored(redis.1);
    let found = monitored(server.resp.port());
    assert_eq!(found, expected);
    assert!(found.len() >= 7, "{found:?}");
}

/// A monitor that never reads is closed once its backlog passes 8 MiB; the client writing
/// meanwhile gets every reply, and other monitors are not affected.
#[test]
fn a_monitor_that_does_not_read_is_closed_and_the_server_goes_on() {
    let mut server = Server::start(&["--threads", "2"]);
    let stalled = TcpStream::connect(server.resp).expect("connect");
    (&stalled).write_all(&command(&["MONITOR"])).unwrap();
    let mut reader = BufReader::new(stalled.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    // 400 SETs of 64 KiB values: about 26 MiB of lines (each byte is quoted once).
    let value = "v".repeat(64 << 10);
    let mut writer = Client::connect(server.resp);
    for i in 0..400 {
        assert_eq!(
            writer.call(&command(&["SET", &format!("k{i}"), &value])),
            "+OK\r\n"
        );
    }
    server.wait_until(
        |s| s.log().contains("a MONITOR connection read too slowly"),
        "the stalled monitor to be closed",
    );
    // What the socket held, then the end of the connection.
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sink = Vec::new();
    let read = reader.read_to_end(&mut sink);
    assert!(read.is_ok(), "the monitor's connection ends: {read:?}");
    assert!(sink.len() < 24 << 20, "read {} bytes", sink.len());
    assert_eq!(writer.call(&command(&["PING"])), "+PONG\r\n");
}
