//! The admin endpoint: `GET /metrics` (Prometheus text format) and `GET /health` over HTTP/1.x.
//!
//! It runs on its own thread as a small non-blocking event loop (mio), so that no client can
//! hold it: a probe must answer within milliseconds while other clients connect and send
//! nothing, or send a byte a second. Each connection carries one request and gets one reply,
//! then the server closes it (`Connection: close`; scrapes come seconds apart, so keep-alive
//! would save nothing worth its state).
//!
//! ```text
//!   accept ──► Head: read until the empty line ──► Reply: write ──► Linger: read and drop
//!     │          (≤ ADMIN_REQUEST_BYTES_MAX,          (≤ ADMIN_REPLY_TIMEOUT)  until the client
//!     │           ≤ ADMIN_HEAD_TIMEOUT from accept)                            closes (≤ ADMIN_
//!     └─ at ADMIN_CONNECTIONS_MAX: the oldest connection is closed first       LINGER_TIMEOUT)
//! ```
//!
//! Invariants:
//! - At most [`ADMIN_CONNECTIONS_MAX`] connections are open; a new one closes the oldest
//!   (accepted first), which is the one closest to its deadline, so a crowd of idle clients
//!   makes room for a probe rather than locking it out.
//! - Every connection has a deadline and is closed once it passes: the request head must
//!   arrive within [`ADMIN_HEAD_TIMEOUT`] of the accept, the reply must be taken within
//!   [`ADMIN_REPLY_TIMEOUT`]. A client trickling bytes costs one slot for that long.
//! - A request head larger than [`ADMIN_REQUEST_BYTES_MAX`] gets 431 and is not read further.
//! - After the reply the server shuts down its side and reads (and drops) what the client
//!   still sends until the client closes or [`ADMIN_LINGER_TIMEOUT`] passes: closing a socket
//!   with unread input sends a reset, which can destroy the reply before the client reads it.
//! - The loop never blocks on a client: sockets are non-blocking and edge-triggered, and each
//!   readiness event is handled until `WouldBlock`.
//!
//! `/health` answers 200 `OK` only when everything serves (see [`crate::health::check`]);
//! otherwise 503 with one line per reason.

mod http;

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use self::http::{HeadError, Resource, Status};
use crate::context::ServerContext;
use crate::health;
use crate::metrics::{self, Metrics};

/// Most admin connections open at once.
pub const ADMIN_CONNECTIONS_MAX: usize = 64;
/// Longest time from accepting a connection to receiving its whole request head.
pub const ADMIN_HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest time a client may take to read its reply.
pub const ADMIN_REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait, after the reply, for the client to close its side.
pub const ADMIN_LINGER_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest request head read (request line and headers).
pub const ADMIN_REQUEST_BYTES_MAX: usize = 8 << 10;
/// Readiness events handled per poll.
const EVENTS_MAX: usize = 128;
/// The listener's token (connection tokens are slot indexes).
const LISTENER_TOKEN: Token = Token(usize::MAX);
/// After a failed accept (out of file descriptors), retry this much later: the edge-triggered
/// listener raises no new event for connections already waiting in the backlog.
const ACCEPT_RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// Bytes read per system call.
const READ_CHUNK_BYTES: usize = 4 << 10;

const _: () = assert!(
    ADMIN_CONNECTIONS_MAX >= 2,
    "room for a probe beside an idle client"
);
const _: () = assert!(READ_CHUNK_BYTES <= ADMIN_REQUEST_BYTES_MAX);

/// Where a connection is in its one exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading the request head.
    Head,
    /// Writing the reply.
    Reply,
    /// Reply sent and our side shut down: reading and dropping until the client closes.
    Linger,
}

/// One admin client.
struct AdminConnection {
    stream: TcpStream,
    /// Order of acceptance: the lowest is the oldest connection.
    serial: u64,
    deadline: Instant,
    phase: Phase,
    /// The request head received so far, then the reply being written.
    buf: Vec<u8>,
    /// Reply bytes written.
    written: usize,
}

/// What happened to a connection after some I/O.
enum Next {
    Keep,
    Close,
}

/// Serves `listener` on a new thread for the life of the process.
pub fn spawn(
    listener: std::net::TcpListener,
    ctx: Arc<ServerContext>,
    metrics: Arc<Metrics>,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER_TOKEN, Interest::READABLE)?;
    let mut server = AdminServer {
        poll,
        listener,
        ctx,
        metrics,
        slots: (0..ADMIN_CONNECTIONS_MAX).map(|_| None).collect(),
        accepted: 0,
        accept_retry_at: None,
    };
    std::thread::Builder::new()
        .name("strata-admin".into())
        .spawn(move || server.run())?;
    Ok(())
}

struct AdminServer {
    poll: Poll,
    listener: TcpListener,
    ctx: Arc<ServerContext>,
    metrics: Arc<Metrics>,
    /// Connections by token, a fixed table of [`ADMIN_CONNECTIONS_MAX`] slots.
    slots: Box<[Option<AdminConnection>]>,
    /// Connections accepted so far (the next one's serial).
    accepted: u64,
    /// Set after a failed accept: when to try again.
    accept_retry_at: Option<Instant>,
}

impl AdminServer {
    fn run(&mut self) {
        let mut events = Events::with_capacity(EVENTS_MAX);
        loop {
            let timeout = self
                .next_deadline()
                .map(|at| at.saturating_duration_since(Instant::now()));
            if let Err(err) = self.poll.poll(&mut events, timeout) {
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // /health stops answering, which a probe reports: nothing here can fix a poller.
                tracing::error!(error = %err, "admin poll failed; the admin endpoint stops");
                return;
            }
            let now = Instant::now();
            for event in events.iter() {
                match event.token() {
                    LISTENER_TOKEN => self.accept_all(now),
                    Token(slot) => self.on_ready(slot, now),
                }
            }
            if self.accept_retry_at.is_some_and(|at| now >= at) {
                self.accept_retry_at = None;
                self.accept_all(now);
            }
            self.close_expired(now);
        }
    }

    /// The earliest connection deadline or accept retry.
    fn next_deadline(&self) -> Option<Instant> {
        self.slots
            .iter()
            .flatten()
            .map(|connection| connection.deadline)
            .chain(self.accept_retry_at)
            .min()
    }

    /// Accepts every pending connection (edge-triggered), closing the oldest when full.
    fn accept_all(&mut self, now: Instant) {
        loop {
            match self.listener.accept() {
                Ok((stream, _peer)) => self.add(stream, now),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    if self.accept_retry_at.is_none() {
                        tracing::warn!(error = %err, "admin accept failed; retrying");
                    }
                    self.accept_retry_at = Some(now + ACCEPT_RETRY_INTERVAL);
                    return;
                }
            }
        }
    }

    fn add(&mut self, mut stream: TcpStream, now: Instant) {
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                let oldest = self.oldest();
                tracing::debug!("admin connections at their limit; closing the oldest");
                self.close(oldest);
                oldest
            }
        };
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(err) = self
            .poll
            .registry()
            .register(&mut stream, Token(slot), interest)
        {
            tracing::warn!(error = %err, "cannot register an admin connection; closing it");
            return;
        }
        self.accepted += 1;
        self.slots[slot] = Some(AdminConnection {
            stream,
            serial: self.accepted,
            deadline: now + ADMIN_HEAD_TIMEOUT,
            phase: Phase::Head,
            buf: Vec::new(),
            written: 0,
        });
        self.on_ready(slot, now);
    }

    /// The slot of the connection accepted first (the table is full).
    fn oldest(&self) -> usize {
        let serial = |slot: usize| self.slots[slot].as_ref().map_or(u64::MAX, |c| c.serial);
        let oldest = (0..self.slots.len()).min_by_key(|&slot| serial(slot));
        oldest.expect("at least one slot")
    }

    fn close(&mut self, slot: usize) {
        if let Some(mut connection) = self.slots[slot].take() {
            let _ = self.poll.registry().deregister(&mut connection.stream);
        }
    }

    fn close_expired(&mut self, now: Instant) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].as_ref().is_some_and(|c| now >= c.deadline) {
                self.close(slot);
            }
        }
    }

    /// Moves a connection on as far as its socket allows.
    fn on_ready(&mut self, slot: usize, now: Instant) {
        let Some(connection) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return; // Closed earlier in this round.
        };
        let next = match connection.phase {
            Phase::Head => match connection.read_head() {
                Ok(true) => {
                    let reply = answer(&self.ctx, &self.metrics, &connection.buf);
                    connection.start_reply(reply, now);
                    connection.write_reply(now)
                }
                Ok(false) => Next::Keep,
                Err(()) => Next::Close,
            },
            Phase::Reply => connection.write_reply(now),
            Phase::Linger => connection.drain(),
        };
        if let Next::Close = next {
            self.close(slot);
        }
    }
}

impl AdminConnection {
    /// Reads what the socket holds into the head buffer: `Ok(true)` once the head is complete
    /// or fills the buffer, `Ok(false)` while more is to come, `Err` when the client closed or
    /// failed before sending a whole head.
    fn read_head(&mut self) -> Result<bool, ()> {
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        loop {
            let full = self.buf.len() >= ADMIN_REQUEST_BYTES_MAX;
            if full || http::parse_head(&self.buf) != Err(HeadError::Incomplete) {
                return Ok(true);
            }
            let room = (ADMIN_REQUEST_BYTES_MAX - self.buf.len()).min(READ_CHUNK_BYTES);
            match self.stream.read(&mut chunk[..room]) {
                Ok(0) => return Err(()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
    }

    fn start_reply(&mut self, reply: Vec<u8>, now: Instant) {
        self.buf = reply;
        self.written = 0;
        self.phase = Phase::Reply;
        self.deadline = now + ADMIN_REPLY_TIMEOUT;
    }

    /// Writes the reply; once it is all out, shuts down the sending side and lingers.
    fn write_reply(&mut self, now: Instant) -> Next {
        while self.written < self.buf.len() {
            match self.stream.write(&self.buf[self.written..]) {
                Ok(0) => return Next::Close,
                Ok(n) => self.written += n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        if self.stream.shutdown(Shutdown::Write).is_err() {
            return Next::Close;
        }
        self.buf = Vec::new();
        self.phase = Phase::Linger;
        self.deadline = now + ADMIN_LINGER_TIMEOUT;
        self.drain()
    }

    /// Reads and drops input until the client closes (or the socket has nothing more).
    fn drain(&mut self) -> Next {
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Next::Close,
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Next::Keep,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
    }
}

/// The reply to the request head in `buf`, which is complete or fills the buffer.
fn answer(ctx: &ServerContext, metrics: &Metrics, buf: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let head = match http::parse_head(buf) {
        Ok(head) => head,
        Err(error) => {
            let status = match error {
                HeadError::Incomplete => Status::HeaderFieldsTooLarge,
                HeadError::Malformed => Status::BadRequest,
                HeadError::VersionNotSupported => Status::VersionNotSupported,
            };
            let body = http::error_body(status).as_bytes();
            http::reply(&mut out, status, http::TEXT_CONTENT_TYPE, body, false);
            return out;
        }
    };
    let head_only = http::head_only(&head);
    let (status, content_type, body) = match http::route(&head) {
        Ok(Resource::Metrics) => (
            Status::Ok,
            http::METRICS_CONTENT_TYPE,
            metrics::render(ctx, metrics),
        ),
        Ok(Resource::Health) => {
            let verdict = health::check(ctx);
            let status = if verdict.healthy {
                Status::Ok
            } else {
                Status::ServiceUnavailable
            };
            (status, http::TEXT_CONTENT_TYPE, verdict.body)
        }
        Err(status) => (
            status,
            http::TEXT_CONTENT_TYPE,
            http::error_body(status).to_string(),
        ),
    };
    http::reply(&mut out, status, content_type, body.as_bytes(), head_only);
    out
}

#[cfg(test)]
mod tests {
    use strata_engine::{Durability, Engine, EngineConfig, Expiry, PoolLocation};

    use super::*;
    use crate::context::Settings;
    use crate::health::ThreadState;

    fn text(reply: Vec<u8>) -> String {
        String::from_utf8(reply).expect("text")
    }

    #[test]
    fn health_is_503_with_the_reason_once_writes_are_latched_off() {
        // Every persist from the 30th on fails, as on a failing device: the engine then
        // refuses writes until it is reopened, and the server must not call itself healthy.
        let engine = Engine::open(EngineConfig {
            memory_bytes: 1 << 20,
            segment_size_bytes: 64 << 10,
            pool: PoolLocation::Simulated(
                strata_pool::testing::SimulatedPersistence::failing_from(30),
            ),
            durability: Durability::Sync,
            ..EngineConfig::default()
        })
        .expect("engine");
        let ctx = ServerContext::new(Arc::new(engine), Settings::default());
        ctx.health.set_acceptor(ThreadState::Serving);
        ctx.health.set_worker(0, ThreadState::Serving);
        let metrics = Metrics::new(1);
        let request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let reply = text(answer(&ctx, &metrics, request));
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        let refused = (0..100u32).any(|i| {
            let key = format!("k{i}");
            let set = ctx.engine.set(key.as_bytes(), b"v", 0, Expiry::Never);
            set.is_err()
        });
        assert!(refused, "the injected fault latched writes off");
        let reply = text(answer(&ctx, &metrics, request));
        assert!(
            reply.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{reply}"
        );
        assert!(
            reply.ends_with("injected fault); restart strata\n"),
            "{reply}"
        );
        let head = text(answer(&ctx, &metrics, b"HEAD /health HTTP/1.0\r\n\r\n"));
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
    }

    #[test]
    fn a_full_buffer_without_the_end_of_the_head_is_431() {
        let engine = Engine::open(EngineConfig {
            memory_bytes: 4 << 20,
            ..EngineConfig::default()
        })
        .expect("engine");
        let ctx = ServerContext::new(Arc::new(engine), Settings::default());
        let mut request = b"GET /health HTTP/1.1\r\n".to_vec();
        request.resize(ADMIN_REQUEST_BYTES_MAX, b'x');
        let reply = text(answer(&ctx, &Metrics::new(1), &request));
        assert!(
            reply.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{reply}"
        );
    }
}
