//! What `/health` reports: whether every part of the server that serves traffic is serving.
//!
//! The threads that serve traffic (the acceptor and each worker) publish their state in a
//! [`Health`] held by the server context; the admin endpoint reads it with the shutdown flag and
//! the engine's write latch, and answers 200 only when all of them are fine ([`check`]).
//!
//! Invariants:
//! - A thread's state is written only by that thread (or by `spawn` before the thread exists),
//!   so no update is lost; readers may see a state a moment late, never a torn one.
//! - A worker is [`ThreadState::Restarting`] from the moment it caught a panic until its fresh
//!   loop takes connections again; [`ThreadState::Stopped`] means it is gone for good.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::context::ServerContext;

/// The state of one thread that serves traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ThreadState {
    /// Not started yet.
    Starting = 0,
    /// Serving.
    Serving = 1,
    /// A worker that caught a panic, closing its connections before it serves again.
    Restarting = 2,
    /// Gone: its loop ended (shutdown, or a failure it could not recover from).
    Stopped = 3,
}

impl ThreadState {
    fn from_u8(value: u8) -> Self {
        match value {
            0 => ThreadState::Starting,
            1 => ThreadState::Serving,
            2 => ThreadState::Restarting,
            _ => ThreadState::Stopped,
        }
    }

    /// How `/health` words a thread in this state.
    fn describe(self) -> &'static str {
        match self {
            ThreadState::Starting => "not started",
            ThreadState::Serving => "serving",
            ThreadState::Restarting => "restarting after a panic",
            ThreadState::Stopped => "stopped",
        }
    }
}

/// The states of the threads that serve traffic.
#[derive(Debug)]
pub struct Health {
    acceptor: AtomicU8,
    workers: Box<[AtomicU8]>,
}

impl Health {
    /// Every thread [`ThreadState::Starting`], for a server with `workers` worker threads.
    pub fn new(workers: usize) -> Self {
        let starting = || AtomicU8::new(ThreadState::Starting as u8);
        Health {
            acceptor: starting(),
            workers: (0..workers).map(|_| starting()).collect(),
        }
    }

    /// Records the acceptor's state.
    pub fn set_acceptor(&self, state: ThreadState) {
        // Relaxed: the state is a report, ordered with nothing else.
        self.acceptor.store(state as u8, Ordering::Relaxed);
    }

    /// Records worker `id`'s state.
    pub fn set_worker(&self, id: usize, state: ThreadState) {
        self.workers[id].store(state as u8, Ordering::Relaxed);
    }

    /// Worker `id`'s state.
    pub fn worker(&self, id: usize) -> ThreadState {
        ThreadState::from_u8(self.workers[id].load(Ordering::Relaxed))
    }

    /// The acceptor's state.
    pub fn acceptor(&self) -> ThreadState {
        ThreadState::from_u8(self.acceptor.load(Ordering::Relaxed))
    }
}

/// The verdict of a health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Everything serves.
    pub healthy: bool,
    /// `OK`, or one line per reason it is not.
    pub body: String,
}

/// Checks the server: healthy only when it is not shutting down, the engine accepts writes,
/// and the acceptor and every worker are serving. Otherwise the body lists every reason, one
/// line each, so an operator reading a failed probe sees what to do.
pub fn check(ctx: &ServerContext) -> Verdict {
    let mut body = String::new();
    if ctx.shutdown.load(Ordering::Relaxed) {
        body.push_str("shutting down\n");
    }
    if let Some(failure) = ctx.engine.write_failure() {
        let _ = writeln!(
            body,
            "writes refused since a persist failed ({failure}); restart strata"
        );
    }
    let acceptor = ctx.health.acceptor();
    if acceptor != ThreadState::Serving {
        let _ = writeln!(body, "acceptor {}", acceptor.describe());
    }
    for id in 0..ctx.health.workers.len() {
        let worker = ctx.health.worker(id);
        if worker != ThreadState::Serving {
            let _ = writeln!(body, "worker {id} {}", worker.describe());
        }
    }
    let healthy = body.is_empty();
    if healthy {
        body.push_str("OK\n");
    }
    Verdict { healthy, body }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use strata_engine::{Durability, Engine, EngineConfig, Expiry, PoolLocation, WriteError};

    use super::*;
    use crate::context::Settings;

    fn context(engine: EngineConfig, threads: usize) -> ServerContext {
        let engine = Arc::new(Engine::open(engine).expect("engine"));
        let settings = Settings {
            threads,
            ..Settings::default()
        };
        ServerContext::new(engine, settings)
    }

    fn small() -> EngineConfig {
        EngineConfig {
            memory_bytes: 4 << 20,
            ..EngineConfig::default()
        }
    }

    fn serving(ctx: &ServerContext) {
        ctx.health.set_acceptor(ThreadState::Serving);
        for id in 0..ctx.settings.threads {
            ctx.health.set_worker(id, ThreadState::Serving);
        }
    }

    #[test]
    fn healthy_only_once_every_thread_serves() {
        let ctx = context(small(), 2);
        let verdict = check(&ctx);
        assert!(!verdict.healthy);
        assert_eq!(
            verdict.body,
            "acceptor not started\nworker 0 not started\nworker 1 not started\n"
        );
        serving(&ctx);
        assert_eq!(
            check(&ctx),
            Verdict {
                healthy: true,
                body: "OK\n".into()
            }
        );
        ctx.health.set_worker(1, ThreadState::Restarting);
        assert_eq!(check(&ctx).body, "worker 1 restarting after a panic\n");
        ctx.health.set_worker(1, ThreadState::Serving);
        ctx.health.set_acceptor(ThreadState::Stopped);
        assert_eq!(check(&ctx).body, "acceptor stopped\n");
        ctx.health.set_acceptor(ThreadState::Serving);
        ctx.shutdown.store(true, Ordering::Relaxed);
        assert_eq!(check(&ctx).body, "shutting down\n");
    }

    #[test]
    fn writes_latched_off_make_the_server_unhealthy() {
        // A simulated pool whose every persist from the 30th on fails: the first write that
        // needs one latches writes off, as a failing disk or DAX device would.
        let ctx = context(
            EngineConfig {
                memory_bytes: 1 << 20,
                segment_size_bytes: 64 << 10,
                pool: PoolLocation::Simulated(
                    strata_pool::testing::SimulatedPersistence::failing_from(30),
                ),
                durability: Durability::Sync,
                ..EngineConfig::default()
            },
            1,
        );
        serving(&ctx);
        assert!(check(&ctx).healthy);
        let failed = (0..100u32).find_map(|i| {
            let key = format!("k{i}");
            ctx.engine
                .set(key.as_bytes(), b"value", 0, Expiry::Never)
                .err()
        });
        assert!(matches!(failed, Some(WriteError::Persist(_))), "{failed:?}");
        let verdict = check(&ctx);
        assert!(!verdict.healthy);
        assert!(
            verdict
                .body
                .starts_with("writes refused since a persist failed (persist of ")
                && verdict.body.ends_with("injected fault); restart strata\n"),
            "{}",
            verdict.body
        );
    }
}
