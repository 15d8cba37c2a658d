//! The read → process → write cycle on real loopback sockets, with a line-echo session.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream as StdStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_engine::{Engine, EngineConfig};

use super::*;
use crate::context::{Processed, Settings};

/// Answers each line with `reply_bytes` bytes (or the line itself when 0); counts its calls.
struct LineSession {
    calls: Arc<AtomicUsize>,
    reply_bytes: usize,
}

impl Session for LineSession {
    fn process(&mut self, input: &[u8], _ctx: &ServerContext, out: &mut Vec<u8>) -> Processed {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut consumed = 0;
        while let Some(end) = input[consumed..].iter().position(|&b| b == b'\n') {
            let line = &input[consumed..=consumed + end];
            if line == b"quit\n" {
                return Processed {
                    consumed: consumed + end + 1,
                    close: true,
                };
            }
            if self.reply_bytes == 0 {
                out.extend_from_slice(line);
            } else {
                out.resize(out.len() + self.reply_bytes, b'x');
            }
            consumed += end + 1;
        }
        Processed {
            consumed,
            close: false,
        }
    }
}

struct Fixture {
    ctx: ServerContext,
    limits: Limits,
    latency: LatencyHistogram,
    traffic: Traffic,
    connection: Connection,
    client: StdStream,
    calls: Arc<AtomicUsize>,
}

fn fixture(limits: Limits, reply_bytes: usize) -> Fixture {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = StdStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("non-blocking");
    let calls = Arc::new(AtomicUsize::new(0));
    let session = Box::new(LineSession {
        calls: Arc::clone(&calls),
        reply_bytes,
    });
    let config = EngineConfig {
        memory_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::open(config).expect("engine"));
    Fixture {
        ctx: ServerContext::new(engine, Settings::default()),
        limits,
        latency: LatencyHistogram::default(),
        traffic: Traffic::default(),
        connection: Connection::new(TcpStream::from_std(server), session, Instant::now()),
        client,
        calls,
    }
}

impl Fixture {
    fn pass(&mut self) -> Status {
        let mut pass = PassContext {
            ctx: &self.ctx,
            limits: &self.limits,
            latency: &self.latency,
            traffic: &mut self.traffic,
            now: Instant::now(),
            defer_flush: false,
        };
        self.connection.pass(&mut pass)
    }

    /// Passes until `done` holds (input sent on loopback may take a moment to be readable).
    fn pass_until(&mut self, done: impl Fn(&Self, Status) -> bool) -> Status {
        for _ in 0..1000 {
            let status = self.pass();
            if done(self, status) {
                return status;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("condition not reached");
    }

    fn read_exact(&mut self, len: usize) -> Vec<u8> {
        let mut reply = vec![0; len];
        self.client.read_exact(&mut reply).expect("reply");
        reply
    }
}

fn limits() -> Limits {
    Limits::new(64 << 10, 0)
}

#[test]
fn pipelined_requests_are_processed_in_one_call_and_answered_together() {
    let mut f = fixture(limits(), 0);
    f.client.write_all(b"one\ntwo\nthree\n").expect("send");
    f.pass_until(|f, _| f.traffic.read_bytes == 14);
    assert_eq!(f.calls.load(Ordering::Relaxed), 1);
    assert_eq!(f.read_exact(14), b"one\ntwo\nthree\n");
    assert_eq!(f.traffic.written_bytes, 14);
}

#[test]
fn a_request_split_across_reads_is_completed() {
    let mut f = fixture(limits(), 0);
    f.client.write_all(b"hel").expect("send");
    f.pass_until(|f, _| f.traffic.read_bytes == 3);
    f.client.write_all(b"lo\n").expect("send");
    f.pass_until(|f, _| f.traffic.read_bytes == 6);
    assert_eq!(f.read_exact(6), b"hello\n");
}

#[test]
fn a_request_larger_than_the_initial_buffer_grows_it() {
    let mut f = fixture(limits(), 0);
    let line = [vec![b'a'; 40 << 10], vec![b'\n']].concat();
    f.client.write_all(&line).expect("send");
    f.pass_until(|f, _| f.traffic.written_bytes == line.len() as u64);
    assert_eq!(f.read_exact(line.len()), line);
}

#[test]
fn a_request_over_the_limit_closes_the_connection() {
    let mut f = fixture(limits(), 0);
    f.client.write_all(&vec![b'a'; 80 << 10]).expect("send");
    let status = f.pass_until(|_, status| status != Status::Open && status != Status::Again);
    assert_eq!(status, Status::Closed(CloseReason::RequestTooLarge));
}

#[test]
fn quit_closes_after_the_replies_before_it() {
    let mut f = fixture(limits(), 0);
    f.client.write_all(b"a\nquit\nb\n").expect("send");
    let status = f.pass_until(|_, status| status != Status::Open);
    assert_eq!(status, Status::Closed(CloseReason::Session));
    assert_eq!(f.read_exact(2), b"a\n");
}

#[test]
fn peer_close_is_reported() {
    let mut f = fixture(limits(), 0);
    f.client
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let status = f.pass_until(|_, status| status != Status::Open);
    assert_eq!(status, Status::Closed(CloseReason::PeerClosed));
}

#[test]
fn a_client_that_does_not_read_is_not_processed_past_the_soft_limit() {
    let mut limits = limits();
    limits.output_pending_bytes_soft = 1 << 20;
    limits.output_pending_bytes_hard = 64 << 20;
    // 32 MiB per reply: far more than loopback socket buffers absorb.
    let mut f = fixture(limits, 32 << 20);
    f.client.write_all(b"a\n").expect("send");
    f.pass_until(|f, _| f.calls.load(Ordering::Relaxed) == 1);
    assert!(f.connection.output_pending_bytes() > 1 << 20);
    f.client.write_all(b"b\n").expect("send");
    for _ in 0..10 {
        assert_eq!(f.pass(), Status::Open);
    }
    assert_eq!(
        f.calls.load(Ordering::Relaxed),
        1,
        "input waits while output is pending"
    );
}

#[test]
fn output_past_the_hard_limit_closes_the_connection() {
    let mut limits = limits();
    limits.output_pending_bytes_soft = 1 << 20;
    limits.output_pending_bytes_hard = 4 << 20;
    let mut f = fixture(limits, 32 << 20);
    f.client.write_all(b"a\n").expect("send");
    let status = f.pass_until(|_, status| status != Status::Open);
    assert_eq!(status, Status::Closed(CloseReason::OutputTooLarge));
}

#[test]
fn a_flooding_client_yields_the_worker_after_a_bounded_number_of_rounds() {
    let mut f = fixture(limits(), 1);
    let mut writer = f.client.try_clone().expect("clone");
    let flood = std::thread::spawn(move || {
        let line = [vec![b'a'; 1023], vec![b'\n']].concat();
        for _ in 0..4096 {
            if writer.write_all(&line).is_err() {
                return;
            }
        }
    });
    // 4 MiB of input, one byte of output per 1 KiB line: some pass must stop at the round
    // limit with input still waiting and ask to be run again.
    let status = f.pass_until(|_, status| status == Status::Again);
    assert_eq!(status, Status::Again);
    drop(f);
    let _ = flood.join();
}

#[test]
fn a_pipeline_of_large_replies_stops_at_the_soft_limit_with_its_input_kept() {
    const REQUESTS: usize = 2000;
    const REPLY_BYTES: usize = 32 << 10;
    let mut limits = limits();
    limits.output_pending_bytes_soft = 1 << 20;
    limits.output_pending_bytes_hard = 256 << 20;
    // Two-byte requests with 32 KiB replies: 62.5 MiB if built at once.
    let mut f = fixture(limits, REPLY_BYTES);
    f.client.write_all(&b"x\n".repeat(REQUESTS)).expect("send");
    f.pass_until(|f, _| f.traffic.read_bytes == 2 * REQUESTS as u64);
    let pending = f.connection.output_pending_bytes();
    assert!(
        pending > 1 << 20,
        "stopped only past the soft limit: {pending}"
    );
    let first_chunk_bytes = (PROCESS_CHUNK_BYTES_INITIAL / 2) * REPLY_BYTES;
    assert!(
        pending <= (1 << 20) + first_chunk_bytes,
        "built too much: {pending}"
    );
    // The client reads everything: every request is answered, in the end.
    let mut reader = f.client.try_clone().expect("clone");
    let drain = std::thread::spawn(move || {
        let mut reply = vec![0u8; REQUESTS * REPLY_BYTES];
        reader
            .read_exact(&mut reply)
            .map(|()| reply.iter().all(|&b| b == b'x'))
    });
    f.pass_until(|f, _| f.traffic.written_bytes == (REQUESTS * REPLY_BYTES) as u64);
    assert!(drain.join().expect("reader").expect("read all replies"));
}

#[test]
fn input_left_at_the_output_limit_is_processed_once_the_output_drains() {
    let mut limits = limits();
    // A soft limit below what the socket takes at once: the output drains within the pass.
    limits.output_pending_bytes_soft = 1024;
    let mut f = fixture(limits, 600);
    // Four 700-byte requests span several chunks: processing pauses past 1 KiB of output
    // with a request left, and the flush that follows drains the output.
    let line = [vec![b'a'; 699], vec![b'\n']].concat();
    f.client.write_all(&line.repeat(4)).expect("send");
    let mut reader = f.client.try_clone().expect("clone");
    let drain = std::thread::spawn(move || {
        let mut reply = vec![0u8; 4 * 600];
        reader.read_exact(&mut reply).map(|()| reply.len())
    });
    // No writable event will come once the output is drained: the pass that read the input
    // must answer all of it.
    f.pass_until(|f, _| f.traffic.read_bytes == 4 * 700);
    assert_eq!(
        f.traffic.written_bytes,
        4 * 600,
        "all answered in the pass that read them"
    );
    assert_eq!(drain.join().expect("reader").expect("replies"), 4 * 600);
}
