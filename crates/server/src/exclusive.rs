//! Running a command alone: the gate that makes `EXEC` atomic across worker threads.
//!
//! A worker is *inside* while it runs commands for a connection ([`Exclusive::enter`], around
//! each `Session::process`), and outside while it polls, reads or writes sockets. A command
//! that must run alone ([`Exclusive::alone`]: `EXEC`, and MSET, MSETNX, DEL, UNLINK, RENAME
//! and RENAMENX when they name several keys) takes the gate's mutex (one at a time),
//! raises `pause`, and waits until every other worker is outside; a worker that enters while
//! `pause` is up steps out again and waits for it to fall. So while the command runs, no other
//! client's command runs at all, on any worker, as in single-threaded Redis; the cost when no
//! transaction runs is two stores and a load per connection pass, none of them shared with
//! another worker (each worker's flag has its own cache line).
//!
//! The handshake is Dekker's: a worker stores `inside` then loads `pause`, the command stores
//! `pause` then loads each `inside`, all sequentially consistent, so at least one of them sees
//! the other and they never both go on.
//!
//! A single command runs within one pass, so it never interleaves with one run alone: a
//! multi-key read (MGET, EXISTS) sees all or none of an MSET or a transaction. Departure from
//! Redis: it may interleave with single-key writes another worker runs meanwhile (two SETs one
//! client sends one after the other can be seen as the second without the first).
//!
//! Threads that are not workers (unit tests, the NBD server, the engine's own threads) are not
//! paused: they do not run Redis commands. What the engine's threads change meanwhile (moving
//! records between tiers, cleaning) is invisible to commands; what they remove (eviction,
//! expiry) a transaction may see between its commands, as it may in Redis, which evicts before
//! any command it runs.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// See the module documentation.
#[derive(Debug)]
pub struct Exclusive {
    /// A command is running alone, or waits to.
    pause: AtomicBool,
    /// One command alone at a time.
    alone: Mutex<()>,
    /// Per worker: it runs commands now.
    inside: Box<[Padded]>,
}

/// A flag on its own cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicBool);

thread_local! {
    /// The worker this thread is, once it said so (`Exclusive::register`).
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
    /// This thread runs a command alone now (a command inside `EXEC` may ask again).
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// A worker inside the gate; steps out when dropped (a panic included).
#[must_use]
pub struct Inside<'a> {
    gate: &'a Exclusive,
    worker: Option<usize>,
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        if let Some(worker) = self.worker {
            self.gate.inside[worker].0.store(false, Ordering::SeqCst);
        }
    }
}

impl Exclusive {
    /// A gate for `workers` worker threads.
    #[must_use]
    pub fn new(workers: usize) -> Exclusive {
        Exclusive {
            pause: AtomicBool::new(false),
            alone: Mutex::new(()),
            inside: (0..workers).map(|_| Padded::default()).collect(),
        }
    }

    /// Says that the calling thread is worker `worker` (each worker once, when it starts).
    pub fn register(&self, worker: usize) {
        assert!(worker < self.inside.len(), "worker {worker} has no flag");
        WORKER.with(|w| w.set(Some(worker)));
    }

    /// Enters the gate to run commands: waits while a command runs alone.
    pub fn enter(&self) -> Inside<'_> {
        let worker = WORKER.with(Cell::get).filter(|&w| w < self.inside.len());
        if let Some(worker) = worker {
            self.step_in(worker);
        }
        Inside { gate: self, worker }
    }

    fn step_in(&self, worker: usize) {
        let flag = &self.inside[worker].0;
        loop {
            flag.store(true, Ordering::SeqCst);
            if !self.pause.load(Ordering::SeqCst) {
                return;
            }
            flag.store(false, Ordering::SeqCst);
            while self.pause.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
    }

    /// Whether this thread is running something alone now (inside [`Exclusive::alone`]).
    pub fn is_alone(&self) -> bool {
        ALONE.with(Cell::get)
    }

    /// Runs `f` while no other worker runs a command (see the module documentation). Called
    /// from inside the gate (a command being run), or from a thread that is no worker.
    pub fn alone<R>(&self, f: impl FnOnce() -> R) -> R {
        if ALONE.with(Cell::get) {
            return f();
        }
        let worker = WORKER.with(Cell::get).filter(|&w| w < self.inside.len());
        // Outside while waiting for the mutex: the command running alone now waits for this
        // worker to be outside.
        if let Some(worker) = worker {
            debug_assert!(self.inside[worker].0.load(Ordering::SeqCst));
            self.inside[worker].0.store(false, Ordering::SeqCst);
        }
        let result = {
            let _alone = self
                .alone
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _paused = Paused::raise(self);
            ALONE.with(|alone| alone.set(true));
            for (other, flag) in self.inside.iter().enumerate() {
                if Some(other) == worker {
                    continue;
                }
                while flag.0.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                    std::thread::yield_now();
                }
            }
            f()
        };
        if let Some(worker) = worker {
            self.step_in(worker);
        }
        result
    }
}

/// `pause` raised; lowered when dropped (a panic in the command included).
struct Paused<'a>(&'a Exclusive);

impl<'a> Paused<'a> {
    fn raise(gate: &'a Exclusive) -> Paused<'a> {
        gate.pause.store(true, Ordering::SeqCst);
        Paused(gate)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        ALONE.with(|alone| alone.set(false));
        self.0.pause.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Two workers add to a pair of counters, one in two steps that another must never see
    /// apart, the other in a command run alone that checks they agree: with the gate, no
    /// check ever sees a pair half updated.
    #[test]
    fn a_command_alone_never_sees_another_worker_mid_command() {
        let gate = Arc::new(Exclusive::new(2));
        let pair = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let torn = Arc::new(AtomicU64::new(0));
        let stepper = {
            let (gate, pair) = (Arc::clone(&gate), Arc::clone(&pair));
            std::thread::spawn(move || {
                gate.register(0);
                for _ in 0..20_000 {
                    let _inside = gate.enter();
                    pair.0.fetch_add(1, Ordering::Relaxed);
                    std::hint::spin_loop();
                    pair.1.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let checker = {
            let (gate, pair, torn) = (Arc::clone(&gate), Arc::clone(&pair), Arc::clone(&torn));
            std::thread::spawn(move || {
                gate.register(1);
                for _ in 0..2_000 {
                    let _inside = gate.enter();
                    gate.alone(|| {
                        let a = pair.0.load(Ordering::Relaxed);
                        std::thread::yield_now();
                        let b = pair.1.load(Ordering::Relaxed);
                        if a != b {
                            torn.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            })
        };
        stepper.join().unwrap();
        checker.join().unwrap();
        assert_eq!(torn.load(Ordering::Relaxed), 0);
        assert_eq!(pair.0.load(Ordering::Relaxed), 20_000);
    }
}
