//! A worker thread: one mio event loop serving the connections the acceptor hands it.
//!
//! Invariants:
//! - A connection belongs to one worker for its whole life; its slot index is its mio token.
//! - `ServerStats::connections_current` counts every connection from its accept (acceptor)
//!   to its removal here, so the acceptor can enforce the connection limit.
//! - After warm-up the loop allocates nothing per request: the event list, the slot table, the
//!   revisit list and the connection buffers are reused (buffers grow only for large requests
//!   or output, and shrink back once a sweep finds no request needed them since the last:
//!   `Connection::release_unused_buffers`, every `BUFFER_SWEEP_INTERVAL` while one is large).
//! - The worker publishes to the `OutputBudget` the held output bytes of its largest connection
//!   that the budget may close (`largest`), comparing each connection's published figure after
//!   its pass: a plain comparison per pass, a shared store only when the largest changes, and
//!   a scan of the slots only after the largest connection shrank or closed.
//! - Shutdown: once woken with `ServerContext::shutdown` set, the worker reads and answers what
//!   each client already sent, stops reading, writes pending output for up to
//!   [`DRAIN_TIME_MAX`], closes everything and returns.
//! - A panic in the loop is caught ([`crate::panics`] has the policy): the worker closes every
//!   connection it holds, counts them, reports itself restarting on `/health`, clears its state
//!   and runs a fresh loop. The poller, its waker and the queue from the acceptor outlive the
//!   restart, so a connection handed over meanwhile waits in the queue; each loop begins by
//!   taking what the queue holds, because the wake-up for it may have been consumed by the
//!   poll whose round panicked.
//!
//! Why epoll (mio) rather than io_uring, for now: per read batch the loop makes one `recv` and
//! one `send`, and one `epoll_wait` serves many connections. Measured with `strace -c` under
//! `redis-benchmark -c 20 -P 16` (PING, one worker): 30,955 recvfrom, 30,934 sendto and 1,579
//! epoll_wait in 2 s — the same pattern as Redis 7 (one read, one write per batch, about 20
//! batches per wait), with server CPU per request within a few percent of Redis's. The
//! remaining cost is the kernel's TCP path, which io_uring does not remove; what it would
//! remove is the per-batch syscall entry (submitting all connections' sends in one
//! `io_uring_enter`). That is the next step if the CPU-per-request target needs it, and it
//! stays behind this module: sessions and connections know nothing of the poller.
//!
//! Replies are written at the end of each round, after every ready connection has been read
//! and processed ([`Status::Flush`]), not right after each connection's batch. On loopback a
//! `send` runs the client's receive path and, when the client sleeps in `epoll_wait`, wakes it
//! with a cross-CPU interrupt, which costs the sender far more than the copy on a virtual
//! machine: `perf record` (20 connections × 16 pipelined, 90:10) had 15% of the worker's CPU in
//! `sock_def_readable` under `sendto`, and 43% in the kernel overall. Written back to back, the
//! round's replies find the client already awake after the first: 3% and 28%, server CPU per
//! request down about a fifth, and the generator's own CPU per request halved.
//!
//! A connection whose request waits for flash reads holds the replies before it and writes
//! them with the replies from that request on, once the reads are done: one `send` per batch
//! rather than one before the wait and one after (flash 1 KiB smoke A/B, two runs each: zipf
//! 182/183K → 216/207K requests/s, uniform 73/71K → 85/92K, CPU per request down 12–20%).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::connection::{
    CloseReason, Connection, Limits, PassContext, Status, Traffic, BUFFER_SWEEP_INTERVAL,
};
use crate::context::ServerContext;
use crate::flash_io;
use crate::health::ThreadState;
use crate::metrics::Metrics;
use crate::panics;
use crate::sessions::{Protocol, Sessions};

/// Readiness events handled per poll.
pub const EVENTS_MAX: usize = 1024;
/// Longest time shutdown waits for clients to take their pending output.
pub const DRAIN_TIME_MAX: Duration = Duration::from_secs(5);
/// How often idle connections are looked for, when an idle timeout is set.
const IDLE_SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// The token of the worker's waker (connection tokens are slot indexes).
const WAKER_TOKEN: Token = Token(usize::MAX);
/// The worker's flash read ring's eventfd ([`flash_io::RingReads`]).
const FLASH_RING_TOKEN: Token = Token(usize::MAX - 1);

/// A connection handed from the acceptor to a worker.
pub struct Incoming {
    /// The accepted socket (non-blocking, TCP_NODELAY set).
    pub stream: TcpStream,
    /// The listener's protocol.
    pub protocol: Protocol,
}

/// The acceptor's handle on a worker.
pub struct WorkerHandle {
    /// Where new connections go.
    pub sender: Sender<Incoming>,
    /// Wakes the worker (new connection, shutdown).
    pub waker: Arc<Waker>,
    /// The thread.
    pub thread: JoinHandle<()>,
}

/// What a worker shares with the rest of the server.
pub struct WorkerShared {
    /// The server context.
    pub ctx: Arc<ServerContext>,
    /// Metrics (this worker writes `latency[id]`).
    pub metrics: Arc<Metrics>,
    /// Connection limits.
    pub limits: Limits,
    /// Session factories.
    pub sessions: Sessions,
    /// Wakes the acceptor when a session starts a shutdown (Redis SHUTDOWN).
    pub acceptor_waker: Arc<Waker>,
    /// `--flash-sqpoll-idle-ms`: a kernel thread issues this worker's flash reads (0: not).
    pub flash_read_poll_idle_ms: u32,
}

/// Starts worker `id`.
pub fn spawn(id: usize, shared: WorkerShared) -> std::io::Result<WorkerHandle> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER_TOKEN)?);
    shared.ctx.output_budget.set_waker(id, Arc::clone(&waker));
    shared.ctx.clients.set_waker(id, Arc::clone(&waker));
    let (sender, receiver) = std::sync::mpsc::channel();
    let (flash_sender, flash_done) = std::sync::mpsc::channel();
    let flash_ring = flash_io::RingReads::new(&shared.ctx.engine, shared.flash_read_poll_idle_ms);
    if let Some(ring) = &flash_ring {
        if ring.is_kernel_polled() {
            let stats = &shared.ctx.stats;
            stats
                .flash_read_rings_kernel_polled
                .fetch_add(1, Ordering::Relaxed);
        }
        poll.registry().register(
            &mut mio::unix::SourceFd(&ring.eventfd()),
            FLASH_RING_TOKEN,
            Interest::READABLE,
        )?;
    }
    let worker = Worker {
        id,
        poll,
        incoming: receiver,
        flash_reply: flash_io::ReplyTo {
            sender: flash_sender,
            waker: Arc::clone(&waker),
        },
        flash_done,
        flash_ring,
        flash_finished: Vec::new(),
        shared,
        slots: Vec::new(),
        free_slots: Vec::new(),
        again: Vec::new(),
        held: Vec::new(),
        unflushed: Vec::new(),
        traffic: Traffic::default(),
        largest: Largest::default(),
        drain_deadline: None,
        next_idle_sweep: Instant::now() + IDLE_SWEEP_INTERVAL,
        next_buffer_sweep: None,
    };
    // Serving from now: its poller and queue exist, and what the acceptor hands it waits in the
    // queue until the thread's loop takes it, microseconds later.
    worker
        .shared
        .ctx
        .health
        .set_worker(id, ThreadState::Serving);
    let thread = std::thread::Builder::new()
        .name(format!("strata-worker-{id}"))
        .spawn(move || worker.run())?;
    Ok(WorkerHandle {
        sender,
        waker,
        thread,
    })
}

/// A worker's connection holding the most output memory among those the output budget may
/// close, as published to the budget.
#[derive(Clone, Copy, Debug, Default)]
struct Largest {
    /// Its slot.
    slot: usize,
    /// Its held bytes (0: none holds any).
    bytes: usize,
    /// That connection shrank or closed: find the largest again at the end of the round.
    stale: bool,
}

struct Worker {
    id: usize,
    poll: Poll,
    incoming: Receiver<Incoming>,
    /// Where this worker's flash read-aheads report back ([`crate::flash_io`]).
    flash_reply: flash_io::ReplyTo,
    flash_done: Receiver<flash_io::Finished>,
    /// The worker's own flash reads, where the medium is read through io_uring (else the I/O
    /// threads do them).
    flash_ring: Option<flash_io::RingReads>,
    /// Scratch: jobs whose ring reads finished.
    flash_finished: Vec<flash_io::Finished>,
    shared: WorkerShared,
    /// Connections by token; `None` slots are listed in `free_slots`.
    slots: Vec<Option<Connection>>,
    free_slots: Vec<usize>,
    /// Connections to pass again without waiting for an event (they stopped reading early).
    again: Vec<usize>,
    /// Connections a CLIENT PAUSE holds (see `crate::pause`).
    held: Vec<usize>,
    /// Connections whose replies are written once this round's input is processed.
    unflushed: Vec<usize>,
    traffic: Traffic,
    /// This worker's largest connection that the output budget may close.
    largest: Largest,
    /// Set once shutdown began.
    drain_deadline: Option<Instant>,
    next_idle_sweep: Instant,
    /// When to look for large buffers no request needs any more; `None` while no connection
    /// may hold one ([`Connection::release_unused_buffers`]).
    next_buffer_sweep: Option<Instant>,
}

impl Worker {
    /// Serves until shutdown, restarting the loop after each panic.
    fn run(mut self) {
        self.shared.ctx.exclusive.register(self.id);
        panics::set_recoverable(true);
        while std::panic::catch_unwind(AssertUnwindSafe(|| self.serve())).is_err() {
            self.restart();
        }
        panics::set_recoverable(false);
        let ctx = &self.shared.ctx;
        ctx.health.set_worker(self.id, ThreadState::Stopped);
    }

    /// After a panic in [`Worker::serve`]: closes every connection (their state may be
    /// half-changed), counts them and clears the loop's state for a fresh start. A panic in
    /// here ends the process: a worker that cannot clean up cannot be trusted to serve.
    fn restart(&mut self) {
        panics::set_recoverable(false);
        self.shared
            .ctx
            .health
            .set_worker(self.id, ThreadState::Restarting);
        let mut closed = 0;
        for slot in 0..self.slots.len() {
            if self.slots[slot].is_some() {
                self.remove(slot, CloseReason::Panic);
                closed += 1;
            }
        }
        let stats = &self.shared.ctx.stats;
        stats
            .panic_closed_connections
            .fetch_add(closed, Ordering::Relaxed);
        stats.worker_panics.fetch_add(1, Ordering::Relaxed);
        self.slots.clear();
        self.free_slots.clear();
        self.again.clear();
        self.unflushed.clear();
        self.drain_deadline = None;
        self.publish_traffic();
        tracing::error!(
            worker = self.id,
            connections_closed = closed,
            "worker restarting after a panic; its connections were closed"
        );
        panics::set_recoverable(true);
    }

    /// The event loop: returns once shutdown has drained this worker's connections.
    fn serve(&mut self) {
        self.shared
            .ctx
            .health
            .set_worker(self.id, ThreadState::Serving);
        // Connections queued before this loop (after a restart: while it was down).
        self.on_wake(Instant::now());
        let mut events = Events::with_capacity(EVENTS_MAX);
        let mut again = Vec::new();
        loop {
            let timeout = self.poll_timeout(Instant::now());
            if let Err(err) = self.poll.poll(&mut events, timeout) {
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(worker = self.id, error = %err, "poll failed; worker stops");
                break;
            }
            let now = Instant::now();
            for event in events.iter() {
                match event.token() {
                    WAKER_TOKEN => self.on_wake(now),
                    FLASH_RING_TOKEN => self.on_flash_ring(),
                    Token(slot)
                        if event.is_readable()
                            || event.is_read_closed()
                            || event.is_error()
                            || self.wants_writable(slot) =>
                    {
                        self.on_ready(slot, now);
                    }
                    Token(_) => {} // Writable with nothing to write: no work, no syscall.
                }
            }
            self.release_held();
            std::mem::swap(&mut again, &mut self.again);
            for slot in again.drain(..) {
                self.on_ready(slot, now);
            }
            if let Some(ring) = self.flash_ring.as_mut() {
                ring.submit(); // This round's flash reads, in one submission.
            }
            self.flush_unflushed();
            self.evict_if_requested();
            self.sweep_buffers(now);
            self.refresh_largest();
            self.sweep_idle(now);
            self.publish_traffic();
            if self.drained(now) {
                break;
            }
        }
        self.close_all();
    }

    fn poll_timeout(&self, now: Instant) -> Option<Duration> {
        if !self.again.is_empty() {
            return Some(Duration::ZERO);
        }
        if !self.held.is_empty() {
            // Wake when the pause ends (CLIENT UNPAUSE wakes the worker sooner).
            return Some(self.shared.ctx.pause.left().unwrap_or(Duration::ZERO));
        }
        if self
            .flash_ring
            .as_ref()
            .is_some_and(|r| r.has_unsubmitted())
        {
            // A submission failed; try again soon rather than sleep on reads never started.
            return Some(Duration::from_millis(1));
        }
        let idle = self
            .shared
            .ctx
            .live
            .idle_timeout()
            .map(|_| self.next_idle_sweep.saturating_duration_since(now));
        let drain = self
            .drain_deadline
            .map(|d| d.saturating_duration_since(now));
        let buffers = self
            .next_buffer_sweep
            .map(|at| at.saturating_duration_since(now));
        [idle, drain, buffers].into_iter().flatten().min()
    }

    /// New connections, finished flash read-aheads, or shutdown.
    fn on_wake(&mut self, now: Instant) {
        while let Ok(incoming) = self.incoming.try_recv() {
            self.add(incoming, now);
        }
        while let Ok(finished) = self.flash_done.try_recv() {
            self.flash_read_ahead(finished);
        }
        if self.drain_deadline.is_none() && self.shared.ctx.shutdown.load(Ordering::Acquire) {
            self.start_drain(now);
        }
        if self.shared.ctx.clients.take_kills(self.id) {
            self.close_killed();
        }
        if self.shared.ctx.clients.take_pushes(self.id) {
            self.write_pushed();
        }
    }

    /// Keeps connection `slot` aside until CLIENT PAUSE ends (see `crate::pause`).
    fn hold(&mut self, slot: usize) {
        if !self.held.contains(&slot) {
            self.held.push(slot);
        }
    }

    /// Runs the held connections again once the pause is over.
    fn release_held(&mut self) {
        if !self.held.is_empty() && self.shared.ctx.pause.holds().is_none() {
            self.again.append(&mut self.held);
        }
    }

    /// Writes what was pushed to the worker's connections (MONITOR's lines).
    fn write_pushed(&mut self) {
        for slot in 0..self.slots.len() {
            let Some(connection) = self.slots[slot].as_mut() else {
                continue;
            };
            let status = connection.push_pending(&mut self.traffic, &self.shared.ctx);
            connection.publish_buffers();
            match status {
                Status::Closed(reason) => self.remove(slot, reason),
                Status::Flush => self.unflushed.push(slot),
                Status::Held => self.hold(slot),
                Status::Open | Status::Again => {}
            }
        }
    }

    /// Closes the connections a `CLIENT KILL` marked (see `crate::clients`).
    fn close_killed(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot].as_ref().is_some_and(Connection::killed) {
                self.remove(slot, CloseReason::Killed);
            }
        }
    }

    /// Reads of the worker's ring finished: the connections whose reads all did run again.
    fn on_flash_ring(&mut self) {
        let Some(ring) = self.flash_ring.as_mut() else {
            return;
        };
        let mut finished = std::mem::take(&mut self.flash_finished);
        ring.complete(&self.shared.ctx.engine, &mut finished);
        for done in finished.drain(..) {
            self.flash_read_ahead(done);
        }
        self.flash_finished = finished;
    }

    /// A connection's flash reads ahead finished: it runs its request again, with its records.
    fn flash_read_ahead(&mut self, finished: flash_io::Finished) {
        let flash_io::Finished { done, mut records } = finished;
        let slot = done.slot;
        let stats = &self.shared.ctx.stats;
        // The slot may be empty or hold a newer connection: this one closed while it waited,
        // and its records are dropped, counted as read ahead and never taken.
        match self.slots.get_mut(slot).and_then(Option::as_mut) {
            Some(connection) if connection.id == done.connection_id => {
                stats.flash_waits_done.fetch_add(1, Ordering::Relaxed);
                connection.flash_staged(&self.shared.ctx.engine, records);
                self.again.push(slot);
            }
            _ => {
                stats.flash_waits_abandoned.fetch_add(1, Ordering::Relaxed);
                self.shared.ctx.engine.discard_read_ahead(&mut records);
            }
        }
    }

    fn add(&mut self, incoming: Incoming, now: Instant) {
        if self.drain_deadline.is_some() {
            self.closed(CloseReason::Shutdown);
            return;
        }
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let session = self
            .shared
            .sessions
            .create(incoming.protocol, &self.shared.ctx);
        let mut connection = Connection::new(incoming.stream, session, now);
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(err) =
            self.poll
                .registry()
                .register(connection.stream_mut(), Token(slot), interest)
        {
            tracing::warn!(error = %err, "cannot register a connection; closing it");
            self.free_slots.push(slot);
            self.closed(CloseReason::Error);
            return;
        }
        debug_assert!(self.slots[slot].is_none());
        connection.attach(&self.shared.ctx, self.id, slot);
        self.slots[slot] = Some(connection);
        // The client may have sent before registration: look now rather than wait for an edge.
        self.on_ready(slot, now);
    }

    fn wants_writable(&self, slot: usize) -> bool {
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(Connection::wants_writable)
    }

    fn on_ready(&mut self, slot: usize, now: Instant) {
        let shared = &self.shared;
        let Some(connection) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return; // Closed earlier in this round.
        };
        let mut pass = PassContext {
            ctx: &shared.ctx,
            limits: &shared.limits,
            latency: &shared.metrics.latency[self.id],
            traffic: &mut self.traffic,
            now,
            defer_flush: self.drain_deadline.is_none(),
        };
        let status = if self.drain_deadline.is_some() {
            connection.run_resumed(&mut pass)
        } else {
            let status = connection.pass(&mut pass);
            if shared.ctx.shutdown.load(Ordering::Relaxed) {
                // A session (Redis SHUTDOWN) asked: the acceptor stops listening and wakes
                // every worker, this one included.
                let _ = shared.acceptor_waker.wake();
            }
            status
        };
        let done = flash_io::Done {
            slot,
            connection_id: connection.id,
        };
        let ring = self.flash_ring.as_mut();
        let queued = start_flash_wait(shared, ring, &self.flash_reply, connection, done);
        if let Some(queued) = queued {
            shared.ctx.stats.flash_waits.fetch_add(1, Ordering::Relaxed);
            if !queued {
                // Nothing to wait for, or no I/O threads: the request runs now (reading flash
                // on this thread if it must); the wait ended at once.
                shared
                    .ctx
                    .stats
                    .flash_waits_done
                    .fetch_add(1, Ordering::Relaxed);
                connection.flash_staged(&shared.ctx.engine, strata_engine::ReadAhead::default());
                self.again.push(slot);
            }
        }
        connection.publish_buffers();
        let bytes = connection.output_closable_bytes();
        if self.next_buffer_sweep.is_none() && connection.holds_large_buffers() {
            self.next_buffer_sweep = Some(now + BUFFER_SWEEP_INTERVAL);
        }
        match status {
            Status::Open => {}
            Status::Again => self.again.push(slot),
            Status::Flush => self.unflushed.push(slot),
            Status::Held => self.hold(slot),
            Status::Closed(reason) => return self.remove(slot, reason),
        }
        self.track_output(slot, bytes);
    }

    /// Keeps [`Largest`] up to date after connection `slot` may have published a new size:
    /// it holds `bytes` the budget may close.
    fn track_output(&mut self, slot: usize, bytes: usize) {
        if bytes > self.largest.bytes {
            self.largest.slot = slot;
            self.largest.bytes = bytes;
            self.shared
                .ctx
                .output_budget
                .publish_largest(self.id, bytes);
        } else if slot == self.largest.slot && bytes < self.largest.bytes {
            self.largest.stale = true;
        }
    }

    /// Finds the largest closable connection again after the previous one shrank or closed.
    fn refresh_largest(&mut self) {
        if !self.largest.stale {
            return;
        }
        let (slot, bytes) = self.find_largest();
        self.largest = Largest {
            slot,
            bytes,
            stale: false,
        };
        self.shared
            .ctx
            .output_budget
            .publish_largest(self.id, bytes);
    }

    /// The slot and held bytes of the connection holding the most output among those the
    /// budget may close ((0, 0) when none holds any).
    fn find_largest(&self) -> (usize, usize) {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| c.as_ref().map(|c| (slot, c.output_closable_bytes())))
            .max_by_key(|&(_, bytes)| bytes)
            .unwrap_or((0, 0))
    }

    /// Another connection found all connections' output over `--client-output-memory` with
    /// this worker holding the largest closable one. Drained buffers give their memory back
    /// first, which costs no client anything; if the total is still over, the largest
    /// closable connection is closed without writing what it holds, as Redis evicts clients
    /// over `maxmemory-clients`.
    fn evict_if_requested(&mut self) {
        let budget = &self.shared.ctx.output_budget;
        if !budget.take_eviction_request(self.id) {
            return;
        }
        for connection in self.slots.iter_mut().flatten() {
            connection.shrink_drained_output(budget);
        }
        self.largest.stale = true;
        if !budget.over(0) {
            return;
        }
        let (slot, bytes) = self.find_largest();
        if bytes == 0 {
            return;
        }
        if let Some(connection) = self.slots[slot].as_ref() {
            tracing::warn!(
                worker = self.id,
                peer = ?connection.peer_addr(),
                held_bytes = bytes,
                all_clients_bytes = budget.held_bytes(),
                limit_bytes = budget.limit_bytes(),
                "client closed: all clients' output passed --client-output-memory and it held \
                 the most; its replies are dropped"
            );
        }
        self.remove(slot, CloseReason::OutputBudget);
    }

    /// Writes the replies that passes of this round left unwritten ([`Status::Flush`]).
    fn flush_unflushed(&mut self) {
        // One group commit for every connection of the round (a no-op unless
        // `--durability sync`): it covers every write these connections made. After a failure
        // each connection's flush commits again, fails, drops its unacknowledged replies and
        // closes.
        let committed = !self.unflushed.is_empty() && self.shared.ctx.engine.commit().is_ok();
        for index in 0..self.unflushed.len() {
            let slot = self.unflushed[index];
            let Some(connection) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
                continue; // Closed since.
            };
            if committed {
                connection.mark_committed();
            }
            if let Status::Closed(reason) =
                connection.flush_only(&mut self.traffic, &self.shared.ctx)
            {
                self.remove(slot, reason);
            } else {
                connection.publish_buffers();
                let bytes = connection.output_closable_bytes();
                self.track_output(slot, bytes);
            }
        }
        self.unflushed.clear();
    }

    fn remove(&mut self, slot: usize, reason: CloseReason) {
        if let Some(mut connection) = self.slots[slot].take() {
            connection.release_output(&self.shared.ctx.output_budget);
            connection.release_input(&self.shared.ctx.stats);
            if slot == self.largest.slot {
                self.largest.stale = true;
            }
            let _ = self.poll.registry().deregister(connection.stream_mut());
            self.free_slots.push(slot);
            self.closed(reason);
        }
    }

    /// Accounts for a connection that ends.
    fn closed(&self, reason: CloseReason) {
        let stats = &self.shared.ctx.stats;
        let previous = stats.connections_current.fetch_sub(1, Ordering::Relaxed);
        assert!(previous > 0, "connections_current underflow");
        match reason {
            CloseReason::RequestTooLarge => {
                tracing::info!(worker = self.id, ?reason, "closed a client over a limit");
            }
            // The connection (or the eviction) logged the client and its buffer.
            CloseReason::OutputTooLarge => {
                stats
                    .output_limit_disconnections
                    .fetch_add(1, Ordering::Relaxed);
            }
            CloseReason::OutputBudget => {
                stats.evicted_clients.fetch_add(1, Ordering::Relaxed);
            }
            _ => tracing::debug!(worker = self.id, ?reason, "connection closed"),
        }
    }

    fn sweep_idle(&mut self, now: Instant) {
        let Some(timeout) = self.shared.ctx.live.idle_timeout() else {
            return;
        };
        if now < self.next_idle_sweep {
            return;
        }
        self.next_idle_sweep = now + IDLE_SWEEP_INTERVAL;
        for slot in 0..self.slots.len() {
            let idle = self.slots[slot]
                .as_ref()
                .is_some_and(|c| now.saturating_duration_since(c.last_active) >= timeout);
            if idle {
                self.remove(slot, CloseReason::Idle);
            }
        }
    }

    /// Every [`BUFFER_SWEEP_INTERVAL`] while a connection may hold a large buffer: shrinks
    /// those no request needed since the last sweep.
    fn sweep_buffers(&mut self, now: Instant) {
        if self.next_buffer_sweep.is_none_or(|at| now < at) {
            return;
        }
        let mut held = false;
        for connection in self.slots.iter_mut().flatten() {
            held |= connection.release_unused_buffers(&self.shared.ctx);
            connection.publish_buffers();
        }
        self.largest.stale = true;
        self.next_buffer_sweep = held.then_some(now + BUFFER_SWEEP_INTERVAL);
    }

    /// Shutdown: answer what clients already sent, stop reading, keep writing.
    fn start_drain(&mut self, now: Instant) {
        for slot in 0..self.slots.len() {
            self.on_ready(slot, now);
        }
        self.drain_deadline = Some(now + DRAIN_TIME_MAX);
        for slot in 0..self.slots.len() {
            if let Some(connection) = self.slots[slot].as_mut() {
                if let Status::Closed(reason) = connection.stop_reading(CloseReason::Shutdown) {
                    self.remove(slot, reason);
                }
            }
        }
    }

    fn drained(&self, now: Instant) -> bool {
        self.drain_deadline
            .is_some_and(|deadline| now >= deadline || self.slots.iter().all(Option::is_none))
    }

    fn close_all(&mut self) {
        for slot in 0..self.slots.len() {
            self.remove(slot, CloseReason::Shutdown);
        }
        while self.incoming.try_recv().is_ok() {
            self.closed(CloseReason::Shutdown);
        }
        self.publish_traffic();
    }

    /// Adds this worker's byte counts to the shared counters, once per loop iteration rather
    /// than once per read, so workers do not contend on those cache lines per request.
    fn publish_traffic(&mut self) {
        let stats = &self.shared.ctx.stats;
        if self.traffic.read_bytes > 0 {
            stats
                .bytes_read
                .fetch_add(self.traffic.read_bytes, Ordering::Relaxed);
        }
        if self.traffic.written_bytes > 0 {
            stats
                .bytes_written
                .fetch_add(self.traffic.written_bytes, Ordering::Relaxed);
        }
        self.traffic = Traffic::default();
    }
}

/// Hands what a connection's request waits for (keys, or a KEYS walk) to this worker's ring
/// or to the I/O threads: `Some(queued)` when it asked for a wait, `queued` false when there
/// was nothing to wait for after all (or no I/O threads).
fn start_flash_wait(
    shared: &WorkerShared,
    ring: Option<&mut flash_io::RingReads>,
    reply: &flash_io::ReplyTo,
    connection: &mut Connection,
    done: flash_io::Done,
) -> Option<bool> {
    if let Some(locations) = connection.take_flash_locations() {
        Some(match ring {
            Some(ring) => {
                ring.start(&shared.ctx.engine, locations, done) == flash_io::Started::Reading
            }
            None => {
                let job = flash_io::Job {
                    locations,
                    done,
                    reply: reply.clone(),
                };
                shared
                    .ctx
                    .flash_io
                    .as_ref()
                    .is_some_and(|io| io.submit(job))
            }
        })
    } else {
        connection.take_flash_walk().map(|walk| {
            let reply = reply.clone();
            shared
                .ctx
                .flash_io
                .as_ref()
                .is_some_and(|io| io.walk(walk, done, reply))
        })
    }
}
