//! The read → process → write cycle on real loopback sockets, with a line-echo session.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream as StdStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_engine::{Engine, EngineConfig};

use super::*;
use crate::context::{OutputLimits, Processed, Settings};

/// Answers each line with `reply_bytes` bytes (or the line itself when 0); counts its calls.
/// With `pauses`, it asks to be paused rather than closed over the output budget.
struct LineSession {
    calls: Arc<AtomicUsize>,
    reply_bytes: usize,
    pauses: bool,
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
                    ..Processed::default()
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
            ..Processed::default()
        }
    }

    fn pauses_over_budget(&self) -> bool {
        self.pauses
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

fn fixture(output: OutputLimits, reply_bytes: usize) -> Fixture {
    let session = |calls| {
        Box::new(LineSession {
            calls,
            reply_bytes,
            pauses: false,
        }) as Box<dyn Session>
    };
    fixture_with(output, session)
}

/// A fixture whose connection runs the session `session` makes (given the call counter).
fn fixture_with(
    output: OutputLimits,
    session: impl FnOnce(Arc<AtomicUsize>) -> Box<dyn Session>,
) -> Fixture {
    let settings = Settings {
        output,
        ..Settings::default()
    };
    fixture_settings(settings, session)
}

/// A fixture with `settings` whose connection runs the session `session` makes.
fn fixture_settings(
    settings: Settings,
    session: impl FnOnce(Arc<AtomicUsize>) -> Box<dyn Session>,
) -> Fixture {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = StdStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("non-blocking");
    let calls = Arc::new(AtomicUsize::new(0));
    let session = session(Arc::clone(&calls));
    let config = EngineConfig {
        memory_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::open(config).expect("engine"));
    Fixture {
        ctx: ServerContext::new(engine, settings),
        limits: Limits::new(64 << 10),
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

/// The default output limits.
fn limits() -> OutputLimits {
    Settings::default().output
}

/// Output limits of `soft` and `hard` bytes.
fn output(soft: usize, hard: usize) -> OutputLimits {
    OutputLimits {
        buffered_bytes_soft: soft,
        buffered_bytes_hard: hard,
    }
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
    let limits = output(1 << 20, 64 << 20);
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
    let mut f = fixture(output(1 << 20, 4 << 20), 32 << 20);
    f.client.write_all(b"a\n").expect("send");
    let status = f.pass_until(|_, status| status != Status::Open);
    assert_eq!(status, Status::Closed(CloseReason::OutputTooLarge));
    assert_eq!(f.traffic.written_bytes, 0, "nothing of it is written");
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
    let limits = output(1 << 20, 256 << 20);
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
    // A soft limit below what the socket takes at once: the output drains within the pass.
    let limits = output(1024, 256 << 20);
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

/// Bytes of each piece [`StreamSession`] writes.
const STREAM_PIECE_BYTES: usize = 16 << 10;

/// Answers one line `<count>\n` per call with `count` pieces of [`STREAM_PIECE_BYTES`] (piece
/// `i` all `b'a' + i % 26`). Before each piece but the first of a resumed reply it stops once
/// the buffer holds more than the soft limit, leaving the line unconsumed, and resumes there in
/// the next call: what a memcached multiget does.
struct StreamSession {
    calls: Arc<AtomicUsize>,
    soft: usize,
    done: usize,
}

impl Session for StreamSession {
    fn process(&mut self, input: &[u8], _ctx: &ServerContext, out: &mut Vec<u8>) -> Processed {
        self.calls.fetch_add(1, Ordering::Relaxed);
        assert!(
            out.len() <= self.soft,
            "called with the buffer past the soft limit"
        );
        let Some(end) = input.iter().position(|&b| b == b'\n') else {
            return Processed::default();
        };
        let count: usize = std::str::from_utf8(&input[..end])
            .expect("digits")
            .parse()
            .expect("a count");
        let resumed_at = self.done;
        while self.done < count {
            let progressed = resumed_at == 0 || self.done > resumed_at;
            if progressed && out.len() > self.soft {
                return Processed::default();
            }
            let byte = b'a' + u8::try_from(self.done % 26).expect("small");
            out.resize(out.len() + STREAM_PIECE_BYTES, byte);
            self.done += 1;
        }
        self.done = 0;
        Processed {
            consumed: end + 1,
            close: false,
            ..Processed::default()
        }
    }
}

#[test]
fn a_reply_that_stops_at_the_soft_limit_inside_a_request_resumes_as_the_client_reads() {
    const PIECES: usize = 200;
    const SOFT: usize = 64 << 10;
    // 3.2 MiB of reply to one request, over a 1 MiB hard limit: streamed, never closed.
    let limits = output(SOFT, 1 << 20);
    let mut f = fixture_with(limits, |calls| {
        Box::new(StreamSession {
            calls,
            soft: SOFT,
            done: 0,
        })
    });
    f.client.write_all(b"200\n").expect("send");
    let mut reader = f.client.try_clone().expect("clone");
    let drain = std::thread::spawn(move || {
        let mut reply = vec![0u8; PIECES * STREAM_PIECE_BYTES];
        reader.read_exact(&mut reply).map(|()| {
            reply
                .chunks(STREAM_PIECE_BYTES)
                .enumerate()
                .all(|(i, piece)| piece.iter().all(|&b| usize::from(b - b'a') == i % 26))
        })
    });
    // The session checks that it is never called with more than the soft limit buffered, so
    // the buffer never holds more than that plus one piece.
    let status = f.pass_until(|f, status| {
        assert!(f.connection.output_buffered_bytes() <= SOFT + STREAM_PIECE_BYTES);
        matches!(status, Status::Closed(_))
            || f.traffic.written_bytes == (PIECES * STREAM_PIECE_BYTES) as u64
    });
    assert_eq!(status, Status::Open);
    assert!(
        f.calls.load(Ordering::Relaxed) > 1,
        "the reply was built in parts"
    );
    assert!(drain.join().expect("reader").expect("read the reply"));
}

/// The end of input is read only once no input waits, so a reply stopped at the output limit
/// is finished before the connection closes.
#[test]
fn a_client_that_closes_its_side_after_sending_still_gets_a_reply_stopped_at_the_limit() {
    const PIECES: usize = 100;
    const SOFT: usize = 64 << 10;
    let mut f = fixture_with(output(SOFT, 1 << 20), |calls| {
        Box::new(StreamSession {
            calls,
            soft: SOFT,
            done: 0,
        })
    });
    f.client.write_all(b"100\n").expect("send");
    f.client
        .shutdown(std::net::Shutdown::Write)
        .expect("shutdown");
    let mut reader = f.client.try_clone().expect("clone");
    let drain = std::thread::spawn(move || {
        let mut reply = Vec::new();
        reader.read_to_end(&mut reply).map(|_| reply.len())
    });
    let status = f.pass_until(|_, status| matches!(status, Status::Closed(_)));
    assert_eq!(status, Status::Closed(CloseReason::PeerClosed));
    drop(f);
    let received = drain.join().expect("reader").expect("read to the end");
    assert_eq!(received, PIECES * STREAM_PIECE_BYTES);
}

/// Settings with a 256 MiB hard output limit per connection and `budget` bytes for all
/// connections together.
fn budget_settings(budget: usize) -> Settings {
    Settings {
        output: output(64 << 20, 256 << 20),
        client_output_bytes_max: budget,
        ..Settings::default()
    }
}

/// A fixture whose line session answers each line with `reply_bytes` bytes, paused rather than
/// closed over the budget when `pauses`.
fn budget_fixture(budget: usize, reply_bytes: usize, pauses: bool) -> Fixture {
    fixture_settings(budget_settings(budget), |calls| {
        Box::new(LineSession {
            calls,
            reply_bytes,
            pauses,
        })
    })
}

#[test]
fn the_connection_holding_the_most_output_is_closed_past_the_budget() {
    // 32 MiB of reply, under the 256 MiB per-connection limit but over the 4 MiB budget.
    let mut f = budget_fixture(4 << 20, 32 << 20, false);
    f.client.write_all(b"a\n").expect("send");
    let status = f.pass_until(|_, status| status != Status::Open);
    assert_eq!(status, Status::Closed(CloseReason::OutputBudget));
    assert_eq!(f.traffic.written_bytes, 0, "nothing of it is written");
    let held = f.ctx.output_budget.held_bytes();
    assert!(
        held >= (32 << 20) - BUFFER_BYTES_INITIAL,
        "published until removed: {held}"
    );
    f.connection.release_output(&f.ctx.output_budget);
    assert_eq!(f.ctx.output_budget.held_bytes(), 0);
}

#[test]
fn past_the_budget_the_worker_of_a_larger_connection_is_asked_to_close_it() {
    let mut f = budget_fixture(4 << 20, 32 << 20, false);
    // Another connection of worker 0 holds more than this one will.
    f.ctx.output_budget.publish(0, 64 << 20);
    f.ctx.output_budget.publish_largest(0, 64 << 20);
    f.client.write_all(b"a\n").expect("send");
    let status = f.pass_until(|f, _| f.calls.load(Ordering::Relaxed) == 1);
    assert_eq!(status, Status::Open, "this connection goes on");
    assert!(f.connection.output_pending_bytes() > 0);
    assert!(
        f.ctx.output_budget.take_eviction_request(0),
        "worker 0 is asked"
    );
    assert!(!f.ctx.output_budget.take_eviction_request(0), "once");
}

#[test]
fn a_pausing_session_past_the_budget_reads_no_more_until_its_output_drains() {
    const REPLY_BYTES: usize = 32 << 20;
    // The reply is under the 64 MiB soft limit: only the budget pauses the connection.
    let mut f = budget_fixture(4 << 20, REPLY_BYTES, true);
    f.client.write_all(b"a\n").expect("send");
    f.pass_until(|f, _| f.calls.load(Ordering::Relaxed) == 1);
    f.client.write_all(b"b\n").expect("send");
    for _ in 0..10 {
        assert_eq!(f.pass(), Status::Open, "paused, not closed");
    }
    assert_eq!(f.calls.load(Ordering::Relaxed), 1, "input waits");
    // Once the client has read the first reply, the second is built.
    let mut reader = f.client.try_clone().expect("clone");
    let drain = std::thread::spawn(move || {
        let mut reply = vec![0u8; 2 * REPLY_BYTES];
        reader.read_exact(&mut reply).map(|()| reply.len())
    });
    f.pass_until(|f, _| f.traffic.written_bytes == 2 * REPLY_BYTES as u64);
    assert_eq!(f.calls.load(Ordering::Relaxed), 2);
    assert_eq!(
        drain.join().expect("reader").expect("replies"),
        2 * REPLY_BYTES
    );
}

#[test]
fn a_drained_buffer_is_kept_a_sweep_then_gives_its_memory_back_to_the_budget() {
    let mut f = drain_large_reply(256 << 20);
    let held = f.connection.output_held_bytes();
    assert!(
        held >= DRAINED_REPLY_BYTES - BUFFER_BYTES_INITIAL,
        "kept for the next one"
    );
    assert_eq!(f.ctx.output_budget.held_bytes(), held);
    assert!(
        f.connection.release_unused_buffers(&f.ctx),
        "needed since the last sweep"
    );
    assert_eq!(f.connection.output_held_bytes(), held);
    assert!(
        !f.connection.release_unused_buffers(&f.ctx),
        "not needed since"
    );
    assert_eq!(
        f.connection.output_held_bytes(),
        0,
        "shrunk after a sweep unused"
    );
    assert_eq!(f.ctx.output_budget.held_bytes(), 0);
}

#[test]
fn a_drained_buffer_near_the_budget_gives_its_memory_back_at_once() {
    // The 32 MiB buffer is past half of a 48 MiB budget.
    let f = drain_large_reply(48 << 20);
    assert_eq!(f.connection.output_held_bytes(), 0, "shrunk after draining");
    assert_eq!(f.ctx.output_budget.held_bytes(), 0);
}

/// More than loopback socket buffers take at once, so the first pass leaves some pending.
const DRAINED_REPLY_BYTES: usize = 32 << 20;

/// A connection under a budget of `budget_bytes` that built a reply of
/// [`DRAINED_REPLY_BYTES`], wrote it in several passes and has drained it.
fn drain_large_reply(budget_bytes: usize) -> Fixture {
    const REPLY_BYTES: usize = DRAINED_REPLY_BYTES;
    let mut f = budget_fixture(budget_bytes, REPLY_BYTES, false);
    f.client.write_all(b"a\n").expect("send");
    f.pass_until(|f, _| f.calls.load(Ordering::Relaxed) == 1);
    assert!(f.connection.output_pending_bytes() > 0);
    assert_eq!(
        f.ctx.output_budget.held_bytes(),
        f.connection.output_held_bytes()
    );
    assert!(f.connection.output_held_bytes() >= REPLY_BYTES - BUFFER_BYTES_INITIAL);
    let mut reader = f.client.try_clone().expect("clone");
    let drain = std::thread::spawn(move || {
        let mut reply = vec![0u8; REPLY_BYTES];
        reader.read_exact(&mut reply).map(|()| reply.len())
    });
    f.pass_until(|f, _| f.traffic.written_bytes == REPLY_BYTES as u64);
    assert_eq!(drain.join().expect("reader").expect("reply"), REPLY_BYTES);
    assert_eq!(f.connection.output_pending_bytes(), 0);
    f
}

/// Echoes lines; a line `wait` waits for flash once (`Processed::flash_wait`), then echoes.
struct WaitingSession {
    staged: bool,
}

impl Session for WaitingSession {
    fn process(&mut self, input: &[u8], _ctx: &ServerContext, out: &mut Vec<u8>) -> Processed {
        let mut consumed = 0;
        while let Some(end) = input[consumed..].iter().position(|&b| b == b'\n') {
            let line = &input[consumed..=consumed + end];
            if line == b"wait\n" && !self.staged {
                return Processed {
                    consumed,
                    flash_wait: true,
                    ..Processed::default()
                };
            }
            self.staged = false;
            out.extend_from_slice(line);
            consumed += end + 1;
        }
        Processed::open(consumed)
    }

    fn take_flash_locations(&mut self) -> Option<Vec<u64>> {
        Some(vec![1])
    }

    fn flash_keys_staged(&mut self) {
        self.staged = true;
    }
}

/// The replies before a request that waits for flash are held and written with the replies
/// from it on, once its reads are done: one write for the batch, not one before the wait and
/// another after it.
#[test]
fn replies_before_a_flash_wait_are_written_with_the_waiting_requests() {
    let mut f = fixture_with(limits(), |_| {
        Box::new(WaitingSession { staged: false }) as Box<dyn Session>
    });
    f.client.write_all(b"a\nb\nwait\nc\n").unwrap();
    let mut waiting = false;
    for _ in 0..1000 {
        f.pass();
        waiting = f.connection.take_flash_locations().is_some();
        if waiting {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(waiting, "the request waits for flash");
    f.client.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        f.client.read(&mut byte).map_err(|e| e.kind()),
        Err(io::ErrorKind::WouldBlock),
        "nothing is written while the request waits"
    );
    assert_eq!(f.traffic.written_bytes, 0);
    f.connection
        .flash_staged(&f.ctx.engine, strata_engine::ReadAhead::default());
    assert_eq!(f.pass(), Status::Open);
    f.client.set_nonblocking(false).unwrap();
    assert_eq!(f.read_exact(11), b"a\nb\nwait\nc\n");
}

/// A client that closes its side while its request waits for flash still gets every reply,
/// the held ones included, before the connection closes.
#[test]
fn a_client_gone_quiet_while_its_request_waits_gets_every_reply_then_the_close() {
    let mut f = fixture_with(limits(), |_| {
        Box::new(WaitingSession { staged: false }) as Box<dyn Session>
    });
    f.client.write_all(b"a\nwait\n").unwrap();
    f.client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut waiting = false;
    for _ in 0..1000 {
        assert!(
            !matches!(f.pass(), Status::Closed(_)),
            "closed while waiting"
        );
        waiting = f.connection.take_flash_locations().is_some();
        if waiting {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(waiting, "the request waits for flash");
    f.connection
        .flash_staged(&f.ctx.engine, strata_engine::ReadAhead::default());
    let status = f.pass_until(|_, status| matches!(status, Status::Closed(_)));
    assert_eq!(status, Status::Closed(CloseReason::PeerClosed));
    assert_eq!(f.read_exact(7), b"a\nwait\n");
}
