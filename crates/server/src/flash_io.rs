//! I/O threads for the flash tier: a request whose keys are on flash waits while one of these
//! threads reads their records ahead, instead of blocking its worker's other connections.
//!
//! ```text
//!  worker: session sees a GET of a key on flash (Engine::flash_read_needed)
//!          └─ the request stays unconsumed, the connection parks ─▶ FlashIo::submit(job)
//!  strata-flash-io-N: Engine::stage_flash(keys) for a batch of queued keys (one io_uring
//!          submission; blocking)
//!          └─ Done { slot, connection_id } ─▶ the worker's queue, and its waker
//!  worker: the connection unparks and runs the request again; its flash reads find the
//!          records read ahead (no I/O), and replies leave in request order.
//! ```
//!
//! A record read ahead is used only if the index still points at it and its region is still
//! the generation it was read from (the engine checks), so a write, delete or reclaim that
//! happens while the request waits wins. The request then runs with whatever a read finds;
//! if a key went back to flash meanwhile, that read blocks (rare), it is never wrong.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use mio::Waker;
use strata_engine::Engine;

/// I/O threads started with a flash tier. Each reads a batch of keys at a time, all in flight
/// at once (io_uring); while one waits for its batch, the other gathers the next. (Measured on
/// 2 cores, 1 KiB values, uniform keys: 8 threads, one read each in flight, served 31K req/s;
/// 8 batching threads 31K, 4 35K, 2 39–47K, 1 42–47K.)
pub const FLASH_IO_THREADS_DEFAULT: usize = 2;

/// Most keys one I/O thread reads in one batch.
const BATCH_KEYS_MAX: usize = 64;

/// Most keys one wait reads ahead for the requests pipelined behind the waiting one (the
/// waiting request's own keys are all read, however many).
pub const READ_AHEAD_KEYS_MAX: usize = 64;

/// A finished read-ahead, for the worker that parked the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// The connection's slot in its worker.
    pub slot: usize,
    /// The connection's id: a slot reused by a newer connection ignores the old one's `Done`.
    pub connection_id: u64,
}

/// Where a worker takes its finished read-aheads.
#[derive(Clone)]
pub struct ReplyTo {
    /// The worker's queue.
    pub sender: Sender<Done>,
    /// Wakes the worker's poll.
    pub waker: Arc<Waker>,
}

/// Keys to read ahead for a parked connection.
pub struct Job {
    /// The keys its request reads.
    pub keys: Vec<Vec<u8>>,
    /// Who to tell.
    pub done: Done,
    /// Where to tell it.
    pub reply: ReplyTo,
}

/// The pool of I/O threads; they end when it is dropped (their queue closes).
pub struct FlashIo {
    sender: Mutex<Sender<Part>>,
}

/// One key of a job, for one I/O thread: the job's keys are read in parallel, and the thread
/// that reads the last one tells the worker.
struct Part {
    key: Vec<u8>,
    left: Arc<std::sync::atomic::AtomicUsize>,
    done: Done,
    reply: ReplyTo,
}

impl FlashIo {
    /// Starts `threads` I/O threads reading ahead for `engine`.
    pub fn start(engine: Arc<Engine>, threads: usize) -> std::io::Result<Self> {
        let (sender, receiver) = std::sync::mpsc::channel::<Part>();
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..threads.max(1) {
            let engine = Arc::clone(&engine);
            let receiver = Arc::clone(&receiver);
            std::thread::Builder::new()
                .name(format!("strata-flash-io-{i}"))
                .spawn(move || serve(&engine, &receiver))?;
        }
        Ok(FlashIo {
            sender: Mutex::new(sender),
        })
    }

    /// Queues a read-ahead, one part per key. Returns false if the I/O threads are gone (the
    /// caller then runs the request at once, reading flash itself).
    pub fn submit(&self, job: Job) -> bool {
        let Ok(sender) = self.sender.lock() else {
            return false;
        };
        if job.keys.is_empty() {
            return false;
        }
        let left = Arc::new(std::sync::atomic::AtomicUsize::new(job.keys.len()));
        for key in job.keys {
            let part = Part {
                key,
                left: Arc::clone(&left),
                done: job.done,
                reply: job.reply.clone(),
            };
            if sender.send(part).is_err() {
                return false;
            }
        }
        true
    }
}

fn serve(engine: &Engine, receiver: &Mutex<Receiver<Part>>) {
    loop {
        // Every key queued when this thread comes for work, up to a bound, in one batch: one
        // submission puts all their reads in flight (io_uring), and the next batch gathers on
        // another thread meanwhile.
        let batch = {
            let Ok(receiver) = receiver.lock() else {
                return;
            };
            let Ok(first) = receiver.recv() else {
                return; // The server is stopping.
            };
            let mut batch = vec![first];
            while batch.len() < BATCH_KEYS_MAX {
                match receiver.try_recv() {
                    Ok(part) => batch.push(part),
                    Err(_) => break,
                }
            }
            batch
        };
        let keys: Vec<&[u8]> = batch.iter().map(|part| &part.key[..]).collect();
        engine.stage_flash(&keys);
        for part in batch {
            let last = part.left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1;
            // A worker that is gone (shutdown) no longer listens: nothing to tell.
            if last && part.reply.sender.send(part.done).is_ok() {
                let _ = part.reply.waker.wake();
            }
        }
    }
}

/// A session's side of waiting for flash: the keys its waiting request needs read ahead, and
/// whether they were (then the request runs without checking again, so it always moves on).
#[derive(Debug, Default)]
pub struct FlashWait {
    keys: Option<Vec<Vec<u8>>>,
    staged: bool,
}

impl FlashWait {
    /// Whether the requests reading `keys` must wait for flash reads ahead: some key is on
    /// flash and not read ahead, and the session did not just wait. Then the keys to read are
    /// kept for [`FlashWait::take_keys`]. Without I/O threads, never.
    ///
    /// After a wait, the next call with keys runs without waiting, whatever its keys now need:
    /// that is the request that waited (it stayed first in the input), so every wait moves the
    /// connection on, and a key that went back to flash meanwhile is read on the worker. A call
    /// with no keys leaves that turn to the next.
    pub fn must_wait<'k>(
        &mut self,
        ctx: &crate::context::ServerContext,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> bool {
        if ctx.flash_io.is_none() {
            return false;
        }
        let mut keys = keys.into_iter().peekable();
        if keys.peek().is_none() || std::mem::take(&mut self.staged) {
            return false;
        }
        let needed: Vec<Vec<u8>> = keys
            .filter(|key| ctx.engine.flash_read_needed(key))
            .map(<[u8]>::to_vec)
            .collect();
        if needed.is_empty() {
            return false;
        }
        self.keys = Some(needed);
        true
    }

    /// After [`FlashWait::must_wait`] said wait: reads `keys` ahead too, those on flash and
    /// not read ahead yet. A server adds the keys of the requests pipelined behind the waiting
    /// one, so that a pipeline of reads waits once, its reads in parallel, instead of once per
    /// request, one after another.
    pub fn read_ahead_too<'k>(
        &mut self,
        ctx: &crate::context::ServerContext,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) {
        let Some(waiting) = self.keys.as_mut() else {
            return;
        };
        for key in keys {
            if waiting.len() >= READ_AHEAD_KEYS_MAX {
                return;
            }
            if !waiting.iter().any(|k| k == key) && ctx.engine.flash_read_needed(key) {
                waiting.push(key.to_vec());
            }
        }
    }

    /// The keys of the request that began waiting.
    pub fn take_keys(&mut self) -> Option<Vec<Vec<u8>>> {
        self.keys.take()
    }

    /// Its keys were read ahead.
    pub fn staged(&mut self) {
        self.staged = true;
    }
}
