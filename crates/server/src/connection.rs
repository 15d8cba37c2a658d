//! One client connection: its socket, buffers and protocol session, and the read → process →
//! write cycle the worker drives it through.
//!
//! Invariants:
//! - `read_buf[..read_len]` holds input not yet consumed by the session; `read_buf.len()` is the
//!   buffer's usable size (zero-filled when it grows, so reads need no unsafe code) and never
//!   exceeds `Limits::read_buffer_bytes_max`.
//! - `buffer_peak_bytes` is at least the most input held and the most output built since the
//!   last [`Connection::release_unused_buffers`]: a buffer past
//!   [`BUFFER_BYTES_RETAINED_MAX`] is kept while that peak says a request needed it.
//! - `write_buf[write_pos..]` is output not yet written; `write_buf[..write_pos]` was written
//!   and is reclaimed lazily. The session is not called while the buffer holds more than
//!   `OutputLimits::buffered_bytes_soft` (the client is not reading), and the connection is
//!   closed, without writing what it holds, once it holds more than
//!   `OutputLimits::buffered_bytes_hard`. Sessions check the same limits on the same buffer
//!   (`write_buf` is their `out`) while building multi-key replies, so no request takes it past
//!   a limit by more than one value.
//! - `output_held_bytes` is what this connection has published to the server's
//!   [`OutputBudget`]: its write buffer's capacity beyond the base, as of the last check. It is
//!   brought up to date after every session call and every flush, so a session starts each
//!   call with its buffer's capacity published and needs to add only what it grows by itself.
//!   The worker releases it when it removes the connection.
//! - The session sees each byte once: it is called per read batch with the unconsumed input
//!   (in chunks, from [`PROCESS_CHUNK_BYTES_INITIAL`] doubling while replies stay small, so one
//!   call for a typical batch), answers every complete request in it (pipelining) and reports
//!   what it consumed. Between calls the buffered output is checked against the soft limit.
//! - Sockets are non-blocking and edge-triggered: every pass reads until the receive queue is
//!   empty (a short read or `WouldBlock`), or reports `Again` when it stopped early, so no
//!   readiness is lost.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Instant;

use mio::net::TcpStream;
use strata_engine::{Engine, ReadAhead};

use crate::context::{
    output_held_bytes, OutputBudget, OutputLimits, Processed, ServerContext, Session,
    OUTPUT_BUFFERED_BYTES_HARD_DEFAULT, OUTPUT_BUFFER_BYTES_BASE,
};
use crate::metrics::LatencyHistogram;
use crate::stats::ServerStats;

/// Initial size of a connection's read and write buffers.
pub const BUFFER_BYTES_INITIAL: usize = 16 << 10;
/// A drained buffer larger than this is shrunk back to the initial size once the connection
/// has not needed that much for a whole [`BUFFER_SWEEP_INTERVAL`] (the worker's sweep:
/// [`Connection::release_unused_buffers`]), or at once when all clients' output nears the
/// budget: a connection that once moved a large value does not keep its memory, and one that
/// moves large values all the time does not grow (zero-filled, page by page) and shrink its
/// buffers for each of them.
pub const BUFFER_BYTES_RETAINED_MAX: usize = 1 << 20;
/// How often the worker looks for large buffers no request needed since the last look.
pub const BUFFER_SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Read/process rounds per readiness event before the worker serves other connections.
pub const READ_ROUNDS_MAX: usize = 8;
/// Input handed to the session in the first call of a batch: a 16-deep pipeline of small
/// requests fits, while a pipeline of tiny requests with 1 MiB replies (7-byte Redis inline
/// `GET k`) builds at most about 150 MiB before the output check stops it, under the default
/// hard limit. (memcached gets stop themselves at the soft limit.)
pub const PROCESS_CHUNK_BYTES_INITIAL: usize = 1 << 10;
/// Largest chunk the doubling reaches while replies stay small (a larger request gets a chunk
/// its size).
pub const PROCESS_CHUNK_BYTES_MAX: usize = 64 << 10;
/// Smallest chunk, reached after chunks whose replies were large (one small request or so).
pub const PROCESS_CHUNK_BYTES_MIN: usize = 64;
/// Output per session call above which the next chunk is made smaller.
pub const PROCESS_OUTPUT_BYTES_TARGET: usize = 1 << 20;

const _: () = assert!(BUFFER_BYTES_INITIAL <= BUFFER_BYTES_RETAINED_MAX);
// The budget leaves out exactly the write buffer every connection starts with.
const _: () = assert!(BUFFER_BYTES_INITIAL == OUTPUT_BUFFER_BYTES_BASE);
const _: () = assert!(PROCESS_CHUNK_BYTES_MIN < PROCESS_CHUNK_BYTES_INITIAL);
const _: () = assert!(PROCESS_CHUNK_BYTES_INITIAL < PROCESS_CHUNK_BYTES_MAX);
const _: () = assert!(
    PROCESS_OUTPUT_BYTES_TARGET < OUTPUT_BUFFERED_BYTES_HARD_DEFAULT / OutputLimits::SOFT_DIVISOR
);

/// Per-connection limits fixed at startup. (The idle timeout and the output limits change
/// while running: `ServerContext::live`, which the sessions check too.)
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest read buffer: a request that does not fit closes the connection.
    pub read_buffer_bytes_max: usize,
}

impl Limits {
    /// Limits for requests of at most `read_buffer_bytes_max` bytes.
    pub fn new(read_buffer_bytes_max: usize) -> Self {
        assert!(read_buffer_bytes_max >= BUFFER_BYTES_INITIAL);
        Limits {
            read_buffer_bytes_max,
        }
    }
}

/// Why a connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed it.
    PeerClosed,
    /// The session asked (quit, fatal protocol error, shutdown).
    Session,
    /// A request outgrew the read buffer limit.
    RequestTooLarge,
    /// The output buffer passed its hard limit: the client does not read its replies, or one
    /// request asked for a reply larger than the limit.
    OutputTooLarge,
    /// All connections together held more output than `--client-output-memory`, and this one
    /// held the most (Redis's `maxmemory-clients` eviction).
    OutputBudget,
    /// No input within the idle timeout.
    Idle,
    /// A socket error.
    Error,
    /// The server is shutting down.
    Shutdown,
    /// Persisting this batch's writes failed: its replies were dropped unsent, so no write the
    /// store could not make durable is acknowledged.
    PersistFailed,
    /// The client sent an HTTP request: closed at once, its buffered replies dropped.
    CrossProtocol,
    /// The worker serving it panicked.
    Panic,
    /// A `CLIENT KILL` named it.
    Killed,
}

/// What the worker should do with a connection after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Wait for the next readiness event.
    Open,
    /// Input may still be waiting in the socket: run another pass soon.
    Again,
    /// Replies are waiting and the pass was asked to defer writing them
    /// ([`PassContext::defer_flush`]): call [`Connection::flush_only`] before polling again.
    Flush,
    /// A request is held by CLIENT PAUSE (`crate::pause`): run the connection again once the
    /// pause is over.
    Held,
    /// Drop the connection.
    Closed(CloseReason),
}

/// Bytes moved by a worker since it last published them to the shared counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic {
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub written_bytes: u64,
}

/// How one fill of the read buffer ended.
enum Fill {
    /// The socket had no more input (a short read, or `WouldBlock`).
    Drained,
    /// The buffer is full.
    Full,
    /// The client closed its side.
    Eof,
}

/// Output pushed to a connection (MONITOR's lines) that may wait unwritten in its buffer; more
/// stays in the session's bounded backlog until the socket takes this.
const PUSHED_PENDING_BYTES_MAX: usize = 256 << 10;

/// Most records read ahead a connection keeps from earlier waits when another wait's records
/// arrive (requests pipelined behind one that waited again, not run yet): twice what one wait
/// reads ahead for the requests behind it.
pub const READ_AHEAD_KEPT_MAX: usize = 2 * crate::flash_io::READ_AHEAD_KEYS_MAX;

/// Most bytes of records read ahead a connection keeps from earlier waits (see
/// [`READ_AHEAD_KEPT_MAX`]): a slow client's pipeline of large values holds no more.
pub const READ_AHEAD_KEPT_BYTES_MAX: usize = 4 << 20;

/// A client connection.
pub struct Connection {
    /// Declared (so dropped) before the socket: the session leaves the clients' registry
    /// (`CLIENT LIST`) before the peer can see the connection closed.
    session: Box<dyn Session>,
    stream: TcpStream,
    read_buf: Vec<u8>,
    read_len: usize,
    write_buf: Vec<u8>,
    write_pos: usize,
    /// The most input held or output built since the last sweep (module invariants).
    buffer_peak_bytes: usize,
    /// Where in `write_buf` the replies not yet covered by an `Engine::commit` start: they may
    /// acknowledge writes that are not durable yet, so `flush` commits before sending them.
    uncommitted_from: Option<usize>,
    /// The session asked to close, or input ended: write what is pending, then close.
    closing: Option<CloseReason>,
    /// Processing stopped at the output limit with input left: process it before reading.
    input_waiting: bool,
    /// Output memory published to the budget (see the module invariants).
    output_held_bytes: usize,
    /// The session pauses over the budget instead of having the connection closed.
    pauses_over_budget: bool,
    /// Processing paused because the budget was passed while this connection's buffer grew:
    /// it resumes once the output has drained completely.
    budget_paused: bool,
    /// A request waits for flash reads ahead ([`crate::flash_io`]): nothing more is processed,
    /// read or written until the worker hears they are done ([`Connection::flash_staged`]); the
    /// replies before it are held, to go out with its own.
    flash_waiting: bool,
    /// The session stopped before a request CLIENT PAUSE holds.
    held: bool,
    /// The waiting request's keys were read ahead and it has not run yet (during shutdown the
    /// worker runs it before the connection closes: see [`Connection::run_resumed`]).
    flash_resumed: bool,
    /// The records read ahead for this connection's requests, lent to their reads while its
    /// input is processed ([`Connection::process`]).
    read_ahead: ReadAhead,
    /// The session's entry in the clients' registry, where [`Connection::publish_buffers`]
    /// puts the buffers' sizes (`CLIENT LIST`); none before attach or for a session not in it.
    client: Option<std::sync::Arc<crate::clients::Client>>,
    /// Unique for the server's life: tells a finished read-ahead which connection it is for.
    pub id: u64,
    /// Last time input arrived.
    pub last_active: Instant,
}

/// Source of connection ids.
static NEXT_CONNECTION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// What a pass needs besides the connection.
pub struct PassContext<'a> {
    /// The shared server context.
    pub ctx: &'a ServerContext,
    /// The limits.
    pub limits: &'a Limits,
    /// This worker's latency histogram.
    pub latency: &'a LatencyHistogram,
    /// This worker's unpublished byte counts.
    pub traffic: &'a mut Traffic,
    /// The time the worker woke up.
    pub now: Instant,
    /// Leave the replies of the last batch unwritten and return [`Status::Flush`], so the
    /// worker writes every connection's replies after it has read and processed them all.
    /// Writing a batch wakes the client; writing them back to back wakes it once per round
    /// rather than once per connection (a cross-CPU wake-up costs the writer more than the
    /// write itself on a virtual machine).
    pub defer_flush: bool,
}

impl Connection {
    /// A connection with fresh buffers.
    pub fn new(stream: TcpStream, mut session: Box<dyn Session>, now: Instant) -> Self {
        session.connected(stream.peer_addr().ok(), stream.local_addr().ok());
        let pauses_over_budget = session.pauses_over_budget();
        let write_buf = Vec::with_capacity(BUFFER_BYTES_INITIAL);
        let output_held_bytes = output_held_bytes(write_buf.capacity());
        debug_assert_eq!(
            output_held_bytes, 0,
            "the budget does not count the base buffer"
        );
        Connection {
            stream,
            session,
            read_buf: vec![0; BUFFER_BYTES_INITIAL],
            read_len: 0,
            write_buf,
            write_pos: 0,
            buffer_peak_bytes: 0,
            closing: None,
            input_waiting: false,
            held: false,
            output_held_bytes,
            pauses_over_budget,
            budget_paused: false,
            flash_waiting: false,
            flash_resumed: false,
            read_ahead: ReadAhead::default(),
            client: None,
            id: NEXT_CONNECTION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            uncommitted_from: None,
            last_active: now,
        }
    }

    /// Where on the flash medium the records a request that just began waiting for flash reads
    /// ([`Processed::flash_wait`]) are; `None` when no request began waiting since the last
    /// call.
    pub fn take_flash_locations(&mut self) -> Option<Vec<u64>> {
        if !self.flash_waiting {
            return None;
        }
        self.session.take_flash_locations()
    }

    /// The walk a request that just began waiting for flash waits for, if it waits for one
    /// rather than for reads of its keys; `None` when no request began waiting.
    pub fn take_flash_walk(&mut self) -> Option<crate::flash_io::Walk> {
        if !self.flash_waiting {
            return None;
        }
        self.session.take_flash_walk()
    }

    /// The session now serves slot `slot` of worker `worker` (see `Session::attach`).
    pub fn attach(&mut self, ctx: &ServerContext, worker: usize, slot: usize) {
        self.session.attach(ctx, worker, slot);
        self.client = self.session.registry_entry();
        self.publish_buffers();
    }

    /// Tells the clients' registry how much its buffers hold now (`CLIENT LIST`'s `qbuf`,
    /// `omem` and the rest): the worker calls it after each event of the connection.
    pub fn publish_buffers(&self) {
        if let Some(client) = &self.client {
            client.buffers.store(crate::clients::BufferFigures {
                input_bytes: self.read_len as u64,
                input_capacity_bytes: self.read_buf.len() as u64,
                output_bytes: self.output_pending_bytes() as u64,
                output_capacity_bytes: self.write_buf.capacity() as u64,
            });
        }
    }

    /// A `CLIENT KILL` marked it.
    #[must_use]
    pub fn killed(&self) -> bool {
        self.session.killed()
    }

    /// The waiting request's keys were read ahead, into `records`: it runs on the next pass,
    /// with them lent to its reads. Records kept from an earlier wait stay (bounded by
    /// [`READ_AHEAD_KEPT_MAX`]) for the requests pipelined behind it.
    pub fn flash_staged(&mut self, engine: &Engine, mut records: ReadAhead) {
        if !self.flash_waiting {
            engine.discard_read_ahead(&mut records);
            return;
        }
        self.flash_waiting = false;
        self.flash_resumed = true;
        self.session.flash_keys_staged();
        let mut dropped =
            self.read_ahead
                .absorb(records, READ_AHEAD_KEPT_MAX, READ_AHEAD_KEPT_BYTES_MAX);
        engine.discard_read_ahead(&mut dropped);
    }

    /// During shutdown, which reads no more input: runs a request whose flash reads finished,
    /// and what the client had sent after it, so that it is answered before the close.
    pub fn run_resumed(&mut self, pass: &mut PassContext<'_>) -> Status {
        if self.flash_resumed {
            if let Err(reason) = self.process(pass) {
                return Status::Closed(reason);
            }
        }
        self.flush_only(pass.traffic, pass.ctx)
    }

    /// The socket, to register with the poller.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Output not yet written.
    pub fn output_pending_bytes(&self) -> usize {
        self.write_buf.len() - self.write_pos
    }

    /// Output the buffer holds: pending, and written but not yet reclaimed. The output limits
    /// apply to this, the memory the buffer holds, as Redis counts whole reply blocks.
    pub fn output_buffered_bytes(&self) -> usize {
        self.write_buf.len()
    }

    /// Output memory this connection holds against the server's [`OutputBudget`], as last
    /// published.
    pub fn output_held_bytes(&self) -> usize {
        self.output_held_bytes
    }

    /// [`Connection::output_held_bytes`] if the budget may close this connection, else 0.
    pub fn output_closable_bytes(&self) -> usize {
        if self.pauses_over_budget {
            0
        } else {
            self.output_held_bytes
        }
    }

    /// The client's address, for logs.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.stream.peer_addr().ok()
    }

    /// Whether input is left unread because the client does not read its output: the buffer
    /// is past the soft limit, or the budget paused processing and output is still pending.
    fn reading_paused(&self, output: &OutputLimits) -> bool {
        self.flash_waiting
            || output.past_soft(&self.write_buf)
            || (self.budget_paused && self.output_pending_bytes() > 0)
    }

    /// Publishes the write buffer's held bytes to the budget if they changed since the last
    /// time (only after a reallocation); returns whether they grew.
    fn publish_output(&mut self, budget: &OutputBudget) -> bool {
        let held = output_held_bytes(self.write_buf.capacity());
        if held == self.output_held_bytes {
            return false;
        }
        budget.publish(self.output_held_bytes, held);
        let grew = held > self.output_held_bytes;
        self.output_held_bytes = held;
        grew
    }

    /// Gives the buffer's memory back to the budget: the worker calls this when it removes the
    /// connection.
    pub fn release_output(&mut self, budget: &OutputBudget) {
        budget.publish(self.output_held_bytes, 0);
        self.output_held_bytes = 0;
    }

    /// Gives the read buffer's memory beyond the initial size back to the gauge of all
    /// clients' input memory: the worker calls this when it removes the connection.
    pub fn release_input(&mut self, stats: &ServerStats) {
        let held = self.read_buf.len().saturating_sub(BUFFER_BYTES_INITIAL);
        stats
            .client_input_bytes
            .fetch_sub(held as u64, Ordering::Relaxed);
        self.read_buf = Vec::new();
        self.read_len = 0;
    }

    /// Shrinks a drained write buffer back to its initial size, however large it is, and
    /// publishes the change: what the worker does first when the budget is passed, since it
    /// frees memory without costing any client anything.
    pub fn shrink_drained_output(&mut self, budget: &OutputBudget) {
        if self.output_pending_bytes() == 0 && self.write_buf.capacity() > BUFFER_BYTES_INITIAL {
            debug_assert!(self.uncommitted_from.is_none(), "nothing unsent to commit");
            self.write_buf.clear();
            self.write_pos = 0;
            self.write_buf.shrink_to(BUFFER_BYTES_INITIAL);
            self.publish_output(budget);
        }
    }

    /// Whether a writable event concerns this connection: output is waiting, or reading is
    /// paused until it drains. Otherwise the event is ignored without a system call.
    pub fn wants_writable(&self) -> bool {
        self.output_pending_bytes() > 0
    }

    /// Reads what the socket has, processes it and writes the replies. Called on readable
    /// events, on writable events (output drained may resume reading), and for `Again`.
    pub fn pass(&mut self, pass: &mut PassContext<'_>) -> Status {
        // A writable event may be the room pushed output waits for.
        let pushed = self.push_pending(pass.traffic, pass.ctx);
        if pushed != Status::Open {
            return pushed;
        }
        for _ in 0..READ_ROUNDS_MAX {
            if self.flash_waiting {
                // The replies before the waiting request go out with its own, in one write
                // once its reads are done, rather than in a write now and another then.
                return Status::Open;
            }
            // Resumed: its replies join those held above and are written with them, unless
            // those are past the soft limit already (it runs only once they have drained).
            if !self.flash_resumed || self.reading_paused(&pass.ctx.live.output()) {
                if let Err(reason) = self.flush(pass.traffic, pass.ctx) {
                    return Status::Closed(reason);
                }
            }
            if let Some(reason) = self.closing {
                return self.closing_status(reason);
            }
            if self.reading_paused(&pass.ctx.live.output()) {
                return Status::Open;
            }
            let fill = if self.input_waiting {
                Fill::Full // Not read this round: the socket may still hold input.
            } else {
                match self.fill(pass) {
                    Ok(fill) => fill,
                    Err(reason) => return Status::Closed(reason),
                }
            };
            if let Err(reason) = self.process(pass) {
                return Status::Closed(reason);
            }
            if self.held {
                // The replies before the held request go out now.
                return match self.flush(pass.traffic, pass.ctx) {
                    Err(reason) => Status::Closed(reason),
                    Ok(()) => Status::Held,
                };
            }
            match fill {
                // With input left over (processing paused at the output limit) go round again:
                // if this flush drains the output, no writable event would come to resume it.
                Fill::Drained if !self.input_waiting => {
                    if pass.defer_flush && self.output_pending_bytes() > 0 {
                        return Status::Flush;
                    }
                    return match self.flush(pass.traffic, pass.ctx) {
                        Err(reason) => Status::Closed(reason),
                        Ok(()) => self
                            .closing
                            .map_or(Status::Open, |r| self.closing_status(r)),
                    };
                }
                Fill::Eof => self.closing = Some(self.closing.unwrap_or(CloseReason::PeerClosed)),
                Fill::Drained | Fill::Full => {}
            }
        }
        Status::Again
    }

    /// Closed once pending output is written; open (waiting for writable) until then.
    fn closing_status(&self, reason: CloseReason) -> Status {
        // A request waiting for flash reads is answered before the close.
        if self.output_pending_bytes() == 0 && !self.flash_waiting && !self.flash_resumed {
            Status::Closed(reason)
        } else {
            Status::Open
        }
    }

    /// Reads until the socket has nothing more, the buffer is full, or the input ends.
    /// Usually one system call: a read that does not fill the buffer drains the socket.
    fn fill(&mut self, pass: &mut PassContext<'_>) -> Result<Fill, CloseReason> {
        if self.read_len == self.read_buf.len() {
            let needed = self
                .session
                .input_needed(&self.read_buf[..self.read_len], pass.ctx);
            self.grow_read_buffer(pass.limits, &pass.ctx.stats, needed)?;
        }
        loop {
            match self.stream.read(&mut self.read_buf[self.read_len..]) {
                Ok(0) => return Ok(Fill::Eof),
                Ok(n) => {
                    self.read_len += n;
                    self.buffer_peak_bytes = self.buffer_peak_bytes.max(self.read_len);
                    pass.traffic.read_bytes += n as u64;
                    self.last_active = pass.now;
                    if self.read_len == self.read_buf.len() {
                        return Ok(Fill::Full);
                    }
                    // A short read emptied the socket's receive queue. Input that arrives
                    // later raises a new edge, so reading on only to see WouldBlock would
                    // cost a system call per batch for nothing.
                    return Ok(Fill::Drained);
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(Fill::Drained),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(CloseReason::Error),
            }
        }
    }

    /// Doubles the read buffer, up to the limit, or grows it to `needed` bytes when the
    /// pending request takes that many ([`Session::input_needed`]) and they are fewer: never
    /// more than doubling (memory for what a client sent, not for what it says it will send),
    /// and a 4 MiB value gets a buffer of its request's size, not 8 MiB. A full buffer at the
    /// limit holds a request too large to serve.
    fn grow_read_buffer(
        &mut self,
        limits: &Limits,
        stats: &ServerStats,
        needed: Option<usize>,
    ) -> Result<(), CloseReason> {
        debug_assert_eq!(self.read_len, self.read_buf.len());
        if self.read_buf.len() >= limits.read_buffer_bytes_max {
            return Err(CloseReason::RequestTooLarge);
        }
        let doubled = (self.read_buf.len() * 2).min(limits.read_buffer_bytes_max);
        let size = needed
            .filter(|&needed| needed > self.read_buf.len())
            .map_or(doubled, |needed| needed.min(doubled));
        debug_assert!(size > self.read_buf.len(), "a full buffer grows");
        let grown = size - self.read_buf.len();
        self.read_buf.resize(size, 0);
        stats
            .client_input_bytes
            .fetch_add(grown as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Gives the read buffer's memory beyond the initial size back: it shrinks to that size,
    /// and the gauge of all clients' input memory goes down by what it held. Empty buffers only.
    fn shrink_read_buffer(&mut self, stats: &ServerStats) {
        debug_assert_eq!(self.read_len, 0, "only a drained read buffer shrinks");
        let held = self.read_buf.len().saturating_sub(BUFFER_BYTES_INITIAL);
        self.read_buf.truncate(BUFFER_BYTES_INITIAL);
        self.read_buf.shrink_to_fit();
        stats
            .client_input_bytes
            .fetch_sub(held as u64, Ordering::Relaxed);
    }

    /// Hands the unconsumed input to the session and drops what it consumed.
    ///
    /// Input goes in chunks (one call for a typical batch): between calls the buffered output is
    /// checked, so a pipeline of requests with large replies stops at the soft limit with the
    /// rest of its input left for later, instead of building its whole output at once. A chunk
    /// that produced much output makes the next one smaller, down to about one request.
    ///
    /// The records read ahead for the requests are lent to their flash reads meanwhile; what
    /// they did not take is kept while a request still waits for its turn (a new wait, or
    /// input left at the output limit), else dropped.
    fn process(&mut self, pass: &mut PassContext<'_>) -> Result<(), CloseReason> {
        if self.read_ahead.is_empty() {
            return self.process_input(pass);
        }
        let ctx = pass.ctx;
        let mut records = std::mem::take(&mut self.read_ahead);
        let result = ctx
            .engine
            .with_read_ahead(&mut records, || self.process_input(pass));
        if result.is_ok() && (self.flash_waiting || self.input_waiting) {
            self.read_ahead = records;
        } else {
            ctx.engine.discard_read_ahead(&mut records);
        }
        result
    }

    /// [`Connection::process`] without the records read ahead.
    fn process_input(&mut self, pass: &mut PassContext<'_>) -> Result<(), CloseReason> {
        self.input_waiting = false;
        self.held = false;
        self.flash_resumed = false;
        // Called only once the output a budget pause waited for has drained.
        self.budget_paused = false;
        if self.read_len == 0 {
            return Ok(());
        }
        if self.write_pos > 0 && self.write_pos >= self.write_buf.len() / 2 {
            // Keep the pending tail at the front so the buffer does not creep forward.
            self.write_buf.drain(..self.write_pos);
            if let Some(from) = &mut self.uncommitted_from {
                *from = from.saturating_sub(self.write_pos);
            }
            self.write_pos = 0;
        }
        let started = Instant::now();
        let output_before = self.write_buf.len();
        let (consumed, over_budget) = self.process_chunks(pass);
        // Group commit: with `--durability sync` these replies may acknowledge writes that are
        // not durable yet; `flush` commits before any of them leaves (the worker commits once
        // for all its connections at the end of a round, so one persist covers them all).
        if self.write_buf.len() > output_before && self.uncommitted_from.is_none() {
            self.uncommitted_from = Some(output_before);
        }
        pass.latency.record(started.elapsed());
        self.read_buf.copy_within(consumed..self.read_len, 0);
        self.read_len -= consumed;
        // A drained read buffer a large request grew is kept for the next one, unless all
        // clients' buffers near the budget: then memory no request holds is given back now.
        if self.read_len == 0
            && self.read_buf.len() > BUFFER_BYTES_RETAINED_MAX
            && buffers_near_budget(pass.ctx)
        {
            self.shrink_read_buffer(&pass.ctx.stats);
        }
        self.buffer_peak_bytes = self.buffer_peak_bytes.max(self.write_buf.len());
        let output = &pass.ctx.live.output();
        if output.past_hard(&self.write_buf) {
            tracing::warn!(
                peer = ?self.peer_addr(),
                buffered_bytes = self.write_buf.len(),
                limit_bytes = output.buffered_bytes_hard,
                "client closed for overcoming the output buffer limit; its replies are dropped"
            );
            return Err(CloseReason::OutputTooLarge);
        }
        if over_budget {
            let budget = &pass.ctx.output_budget;
            tracing::warn!(
                peer = ?self.peer_addr(),
                held_bytes = self.output_held_bytes,
                all_clients_bytes = budget.held_bytes(),
                limit_bytes = budget.limit_bytes(),
                "client closed: all clients' output passed --client-output-memory and it held \
                 the most; its replies are dropped"
            );
            return Err(CloseReason::OutputBudget);
        }
        Ok(())
    }

    /// Calls the session on successive chunks of the input; returns the bytes consumed, and
    /// whether the connection must be closed for the output budget.
    fn process_chunks(&mut self, pass: &mut PassContext<'_>) -> (usize, bool) {
        let mut start = 0;
        let mut chunk = PROCESS_CHUNK_BYTES_INITIAL;
        let output = pass.ctx.live.output();
        // `pass` calls this only while the output is under the soft limit; from then on the
        // check after each session call stops the loop.
        debug_assert!(!self.reading_paused(&output));
        while start < self.read_len {
            let end = self.read_len.min(start + chunk);
            let output_before = self.write_buf.len();
            let input = &self.read_buf[start..end];
            let processed = {
                // Out again before the buffers are handled: a transaction waits only for
                // commands (see `crate::exclusive`).
                let _inside = pass.ctx.exclusive.enter();
                self.session.process(input, pass.ctx, &mut self.write_buf)
            };
            assert!(
                processed.consumed <= input.len(),
                "session consumed more than its input"
            );
            start += processed.consumed;
            if processed.over_budget || self.after_growth(pass.ctx, &processed) {
                return (start, true);
            }
            if processed.close {
                self.closing = Some(if self.session.hang_up() {
                    self.hang_up(pass.ctx)
                } else {
                    CloseReason::Session
                });
                break;
            }
            debug_assert!(
                !(processed.paused || processed.flash_wait) || start < self.read_len,
                "paused inside a request"
            );
            if processed.held {
                // The request stays unconsumed until the pause ends.
                self.held = true;
                self.input_waiting = true;
                break;
            }
            if processed.flash_wait {
                // The request stays unconsumed until its keys have been read ahead.
                self.flash_waiting = true;
                self.input_waiting = true;
                break;
            }
            if processed.paused || (start < self.read_len && self.reading_paused(&output)) {
                // Complete requests may be left, perhaps a request the session stopped inside (a
                // memcached multiget resumes from its next key): they wait until the client
                // reads, and are processed before more is read.
                self.input_waiting = true;
                break;
            }
            if start < end && end == self.read_len {
                break; // An incomplete request: wait for more input.
            }
            if processed.consumed == 0 {
                chunk *= 2; // A request larger than the chunk.
                continue;
            }
            let produced = self.write_buf.len() - output_before;
            chunk = if produced > PROCESS_OUTPUT_BYTES_TARGET {
                (chunk / 4).max(PROCESS_CHUNK_BYTES_MIN)
            } else {
                (chunk * 2).min(PROCESS_CHUNK_BYTES_MAX)
            };
        }
        (start, false)
    }

    /// Publishes the buffer's growth after a session call and, if the budget is passed with
    /// it, applies the budget: a connection that pauses stops processing until its output has
    /// drained; another is closed if it holds the most (returns true), or else asks the worker
    /// of the connection that does to close it. A plain comparison unless the buffer was
    /// reallocated.
    #[inline]
    fn after_growth(&mut self, ctx: &ServerContext, processed: &Processed) -> bool {
        let capacity_published = self.output_held_bytes + OUTPUT_BUFFER_BYTES_BASE;
        self.write_buf.capacity() > capacity_published && self.apply_budget(ctx, processed)
    }

    /// [`Connection::after_growth`] once the buffer grew.
    #[cold]
    #[inline(never)]
    fn apply_budget(&mut self, ctx: &ServerContext, processed: &Processed) -> bool {
        let budget = &ctx.output_budget;
        if !self.publish_output(budget) || !budget.over(0) {
            return false;
        }
        if self.pauses_over_budget {
            self.budget_paused = true;
            return false;
        }
        if processed.close {
            return false; // Closing anyway, after writing what it holds (QUIT, an error).
        }
        if budget.is_largest(self.output_held_bytes) {
            return true;
        }
        budget.request_eviction();
        false
    }

    /// Drops every reply not yet written, as memcached and Redis do when they hang up on an
    /// HTTP request, counts the close and warns (at most once per
    /// [`crate::context::CROSS_PROTOCOL_WARNING_INTERVAL`]).
    #[cold]
    fn hang_up(&mut self, ctx: &ServerContext) -> CloseReason {
        self.write_buf.clear();
        self.write_pos = 0;
        self.uncommitted_from = None;
        let closes = ctx
            .stats
            .cross_protocol_closes
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if ctx.cross_protocol_warnings.allow(ctx.started.elapsed()) {
            tracing::warn!(
                peer = ?self.stream.peer_addr().ok(),
                port = self.stream.local_addr().map_or(0, |addr| addr.port()),
                closes_total = closes,
                "possible security attack: an HTTP request reached a cache port (cross-protocol \
                 scripting); connection closed"
            );
        }
        CloseReason::CrossProtocol
    }

    /// The replies written so far acknowledge only durable writes (the caller committed after
    /// this connection's last pass), so `flush` need not commit again.
    pub(crate) fn mark_committed(&mut self) {
        self.uncommitted_from = None;
    }

    /// Writes pending output until done or the socket is full.
    fn flush(&mut self, traffic: &mut Traffic, ctx: &ServerContext) -> Result<(), CloseReason> {
        if let Some(from) = self.uncommitted_from {
            if let Err(err) = ctx.engine.commit() {
                tracing::error!(error = %err, "persist failed; dropping the unacknowledged replies and closing the connection");
                self.write_buf.truncate(from.max(self.write_pos));
                return Err(CloseReason::PersistFailed);
            }
            self.uncommitted_from = None;
        }
        while self.write_pos < self.write_buf.len() {
            match self.stream.write(&self.write_buf[self.write_pos..]) {
                Ok(0) => return Err(CloseReason::Error),
                Ok(n) => {
                    self.write_pos += n;
                    traffic.written_bytes += n as u64;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(CloseReason::Error),
            }
        }
        self.write_buf.clear();
        self.write_pos = 0;
        // Kept for the next large reply unless all clients' buffers near the budget, where
        // memory a drained buffer keeps could cost a client with replies still to write.
        if self.write_buf.capacity() > BUFFER_BYTES_RETAINED_MAX && buffers_near_budget(ctx) {
            self.write_buf.shrink_to(BUFFER_BYTES_INITIAL);
            self.publish_output(&ctx.output_budget);
        }
        Ok(())
    }

    /// Whether a buffer is past [`BUFFER_BYTES_RETAINED_MAX`]: the worker's sweep then calls
    /// [`Connection::release_unused_buffers`].
    pub fn holds_large_buffers(&self) -> bool {
        self.read_buf.len() > BUFFER_BYTES_RETAINED_MAX
            || self.write_buf.capacity() > BUFFER_BYTES_RETAINED_MAX
    }

    /// The worker's sweep, every [`BUFFER_SWEEP_INTERVAL`]: shrinks back each drained buffer
    /// past [`BUFFER_BYTES_RETAINED_MAX`] if nothing since the last sweep needed that much
    /// (the connection was idle, or its requests and replies became small), and starts the
    /// next interval's peak. Returns whether a large buffer is still held.
    pub fn release_unused_buffers(&mut self, ctx: &ServerContext) -> bool {
        if self.buffer_peak_bytes <= BUFFER_BYTES_RETAINED_MAX {
            if self.read_len == 0 && self.read_buf.len() > BUFFER_BYTES_RETAINED_MAX {
                self.shrink_read_buffer(&ctx.stats);
            }
            if self.write_buf.capacity() > BUFFER_BYTES_RETAINED_MAX {
                self.shrink_drained_output(&ctx.output_budget);
            }
        }
        self.buffer_peak_bytes = self.read_len.max(self.output_pending_bytes());
        self.holds_large_buffers()
    }

    /// Stops reading (shutdown): what was read is processed, pending output is still written.
    pub fn stop_reading(&mut self, reason: CloseReason) -> Status {
        self.closing = Some(self.closing.unwrap_or(reason));
        self.closing_status(reason)
    }

    /// Moves what the session pushed (MONITOR's lines) into the output and writes it, for as
    /// long as the socket takes it: once [`PUSHED_PENDING_BYTES_MAX`] wait unwritten, the rest
    /// stays with the session (whose backlog is bounded) until a writable event comes.
    pub fn push_pending(&mut self, traffic: &mut Traffic, ctx: &ServerContext) -> Status {
        loop {
            if self.closing.is_some() || self.output_pending_bytes() >= PUSHED_PENDING_BYTES_MAX {
                return Status::Open;
            }
            if !self.session.take_pushed(&mut self.write_buf) {
                return Status::Open;
            }
            let status = self.flush_only(traffic, ctx);
            if status != Status::Open {
                return status;
            }
        }
    }

    /// Writes pending output (writable event during shutdown or for a closing connection).
    pub fn flush_only(&mut self, traffic: &mut Traffic, ctx: &ServerContext) -> Status {
        if let Err(reason) = self.flush(traffic, ctx) {
            return Status::Closed(reason);
        }
        self.closing
            .map_or(Status::Open, |r| self.closing_status(r))
    }
}

/// Whether all clients' buffers together, output (what `--client-output-memory` counts) and
/// read buffers beyond their initial size (`strata_client_input_bytes`), are past half of
/// the budget: a drained buffer past [`BUFFER_BYTES_RETAINED_MAX`] is then given back at once
/// instead of kept for the next large request, so the memory kept for requests that may come
/// stays under half the budget (with no budget set, nothing is kept). The buffers of requests
/// and replies in flight are bounded per client (`--max-value-size`, the output limits).
fn buffers_near_budget(ctx: &ServerContext) -> bool {
    let budget = &ctx.output_budget;
    let input = ctx.stats.client_input_bytes.load(Ordering::Relaxed);
    let input = usize::try_from(input).unwrap_or(usize::MAX);
    budget.held_bytes().saturating_add(input) > budget.limit_bytes() / 2
}

#[cfg(test)]
mod tests;
