//! The acceptor: one thread accepts on every client listener and hands connections to the
//! workers round-robin.
//!
//! Why one acceptor rather than an `SO_REUSEPORT` listener per worker: the kernel spreads
//! reuseport connections by a hash of their addresses, so a handful of long-lived cache
//! connections (a benchmark's 20, a proxy's 8) often lands unevenly, leaving one worker
//! saturated while another idles; round-robin gives each worker its exact share. One acceptor
//! is also the one place that counts connections against `--max-connections` and answers the
//! refusal, and closing the listeners at shutdown is one step. Its cost is one accept and one
//! channel send per *connection*, nothing per request, and cache clients keep connections open.
//! (memcached dispatches from one listener thread the same way.)

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::context::ServerContext;
use crate::health::ThreadState;
use crate::sessions::Protocol;
use crate::worker::{Incoming, WorkerHandle};

/// The acceptor's waker token (listener tokens are indexes into its listener list).
pub const WAKER_TOKEN: Token = Token(usize::MAX);
/// Shortest time between two warnings about refused connections (the rest are counted).
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(1);
/// After a failed accept (out of file descriptors), retry this much later: edge-triggered
/// listeners raise no new event for connections already waiting in the backlog.
const ACCEPT_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// Accepts connections until shutdown.
pub struct Acceptor {
    poll: Poll,
    listeners: Vec<(TcpListener, Protocol)>,
    workers: Vec<WorkerHandle>,
    ctx: Arc<ServerContext>,
    next_worker: usize,
    last_refusal_warning: Option<Instant>,
    refusals_unreported: u64,
    /// Set after a failed accept: when to try every listener again.
    accept_retry_at: Option<Instant>,
    /// Accepts fail since the last warning (warn once per episode, not per retry).
    accept_failing: bool,
}

impl Acceptor {
    /// An acceptor over `listeners`, polled by `poll` (whose waker uses [`WAKER_TOKEN`]).
    pub fn new(
        poll: Poll,
        listeners: Vec<(TcpListener, Protocol)>,
        workers: Vec<WorkerHandle>,
        ctx: Arc<ServerContext>,
    ) -> std::io::Result<Self> {
        assert!(!workers.is_empty(), "at least one worker");
        let mut acceptor = Acceptor {
            poll,
            listeners,
            workers,
            ctx,
            next_worker: 0,
            last_refusal_warning: None,
            refusals_unreported: 0,
            accept_retry_at: None,
            accept_failing: false,
        };
        for (index, (listener, _)) in acceptor.listeners.iter_mut().enumerate() {
            acceptor
                .poll
                .registry()
                .register(listener, Token(index), Interest::READABLE)?;
        }
        // Serving from now: the kernel queues new connections until `run` takes them.
        acceptor.ctx.health.set_acceptor(ThreadState::Serving);
        Ok(acceptor)
    }

    /// Accepts until `ctx.shutdown` is set, then closes the listeners, wakes every worker and
    /// returns their handles so the caller can wait for them to drain.
    pub fn run(mut self) -> Vec<WorkerHandle> {
        let mut events = Events::with_capacity(64);
        while !self.ctx.shutdown.load(Ordering::Acquire) {
            let timeout = self
                .accept_retry_at
                .map(|at| at.saturating_duration_since(Instant::now()));
            if let Err(err) = self.poll.poll(&mut events, timeout) {
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %err, "acceptor poll failed; shutting down");
                self.ctx.shutdown.store(true, Ordering::Release);
                break;
            }
            for event in events.iter() {
                if event.token() != WAKER_TOKEN {
                    self.accept_all(event.token().0);
                }
            }
            if self.accept_retry_at.is_some_and(|at| Instant::now() >= at) {
                self.accept_retry_at = None;
                for index in 0..self.listeners.len() {
                    self.accept_all(index);
                }
            }
        }
        // Dropping the listeners closes them: new clients are refused by the kernel.
        self.listeners.clear();
        self.ctx.health.set_acceptor(ThreadState::Stopped);
        for worker in &self.workers {
            let _ = worker.waker.wake();
        }
        self.workers
    }

    /// Accepts every pending connection on listener `index` (edge-triggered).
    fn accept_all(&mut self, index: usize) {
        loop {
            let (listener, protocol) = &self.listeners[index];
            let protocol = *protocol;
            match listener.accept() {
                Ok((stream, _peer)) => {
                    self.accept_failing = false;
                    self.dispatch(stream, protocol);
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => {
                    // EMFILE and the like: the pending connections wait in the backlog.
                    if !self.accept_failing {
                        let protocol = protocol.name();
                        tracing::warn!(error = %err, protocol, "accept failed; retrying");
                    }
                    self.accept_failing = true;
                    self.accept_retry_at = Some(Instant::now() + ACCEPT_RETRY_INTERVAL);
                    return;
                }
            }
        }
    }

    fn dispatch(&mut self, stream: TcpStream, protocol: Protocol) {
        // Acquire: pairs with the Release store of `DEBUG PANIC-ACCEPTOR` (tests only).
        if self.ctx.acceptor_panic_requested.load(Ordering::Acquire) {
            panic!("DEBUG PANIC-ACCEPTOR: a client asked the acceptor to panic");
        }
        let stats = &self.ctx.stats;
        let current = stats.connections_current.load(Ordering::Relaxed);
        if current >= self.ctx.settings.connections_max as u64 {
            self.refuse(stream, protocol);
            return;
        }
        // Requests and replies are small and latency-bound: never wait to coalesce them.
        let _ = stream.set_nodelay(true);
        stats.connections_current.fetch_add(1, Ordering::Relaxed);
        stats.connections_total.fetch_add(1, Ordering::Relaxed);
        let worker = &self.workers[self.next_worker];
        self.next_worker = (self.next_worker + 1) % self.workers.len();
        if worker.sender.send(Incoming { stream, protocol }).is_err() {
            // The worker has exited (it only does at shutdown).
            stats.connections_current.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let _ = worker.waker.wake();
    }

    /// Answers the reference server's refusal and closes (the reply fits an empty socket
    /// buffer, so the non-blocking write completes).
    fn refuse(&mut self, mut stream: TcpStream, protocol: Protocol) {
        self.ctx
            .stats
            .connections_rejected
            .fetch_add(1, Ordering::Relaxed);
        let _ = stream.write(protocol.too_many_connections());
        let _ = stream.shutdown(std::net::Shutdown::Write);
        self.refusals_unreported += 1;
        let now = Instant::now();
        let due = self
            .last_refusal_warning
            .is_none_or(|last| now.duration_since(last) >= REFUSAL_WARNING_INTERVAL);
        if due {
            tracing::warn!(
                protocol = protocol.name(),
                refused = self.refusals_unreported,
                connections_max = self.ctx.settings.connections_max,
                "refused connections: at the connection limit"
            );
            self.last_refusal_warning = Some(now);
            self.refusals_unreported = 0;
        }
    }
}

/// Wakes the acceptor (from the signal thread or a worker) so it notices `ctx.shutdown`.
pub fn request_shutdown(ctx: &ServerContext, acceptor_waker: &Waker) {
    if !ctx.shutdown.swap(true, Ordering::AcqRel) {
        crate::notify::stopping();
    }
    let _ = acceptor_waker.wake();
}
