//! Flash reads for requests that wait: a request whose keys are on flash parks while their
//! records are read ahead, instead of blocking its worker's other connections. Two ways read:
//! where the medium is read through io_uring, each worker puts the reads in flight on its own
//! ring ([`RingReads`]; past 128 reads in flight, later requests wait their turn) and learns
//! of completions with its sockets' events; elsewhere (the `pread` fallback, test media, a
//! worker whose ring could not be set up) I/O threads do them ([`FlashIo`]).
//!
//! ```text
//!  worker: session sees a GET of a key on flash (Engine::flash_reads_needed: where)
//!          └─ the request stays unconsumed, the connection parks
//!             ├─▶ RingReads::start: reads queued on the ring; RingReads::submit at the end
//!             │   of the loop round: one io_uring submission for all of the round's reads
//!             │   ─▶ eventfd ─▶ RingReads::complete
//!             └─▶ FlashIo::submit(job) ─▶ strata-flash-io-N: Engine::read_flash_ahead_at
//!                 for a batch of queued reads (blocking) ─▶ Finished to the worker's queue,
//!                 and its waker
//!  worker: the connection unparks with its records (a ReadAhead of its own: nothing is kept
//!          in the tier for it) and runs the request again with them lent to its reads
//!          (Engine::with_read_ahead): no I/O, no lock; replies leave in request order.
//!
//!  A request that would read flash at length (KEYS: every flash key) hands a [`Walk`] over
//!  instead: the walk thread runs it and tells the worker the same way.
//! ```
//!
//! A record read ahead is used only if the index still points at it and its region is still
//! the generation it was read from (the engine checks), so a write, delete or reclaim that
//! happens while the request waits wins. Records are the connection's: another connection
//! reading the same key reads its own (none takes another's and sends it to the medium). The request then runs with whatever a read finds;
//! if a key went back to flash meanwhile, that read blocks (rare), it is never wrong.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use mio::Waker;
use strata_engine::{Engine, ReadAhead};

/// I/O threads started with a flash tier. Each reads a batch of keys at a time, all in flight
/// at once (io_uring); while one waits for its batch, the other gathers the next. (Measured on
/// 2 cores, 1 KiB values, uniform keys: 8 threads, one read each in flight, served 31K req/s;
/// 8 batching threads 31K, 4 35K, 2 39–47K, 1 42–47K.)
pub const FLASH_IO_THREADS_DEFAULT: usize = 2;

/// Most records one I/O thread reads in one batch.
const BATCH_KEYS_MAX: usize = 64;

/// Most keys one wait reads ahead for the requests pipelined behind the waiting one (the
/// waiting request's own keys are all read, however many).
pub const READ_AHEAD_KEYS_MAX: usize = 64;

/// Which parked connection a read-ahead is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// The connection's slot in its worker.
    pub slot: usize,
    /// The connection's id: a slot reused by a newer connection ignores the old one's `Done`.
    pub connection_id: u64,
}

/// A finished read-ahead, for the worker that parked the connection: who, and the records
/// read for it (none for a walk, which leaves its result with the request).
#[derive(Debug)]
pub struct Finished {
    /// The connection.
    pub done: Done,
    /// Its records, to lend to its requests' reads.
    pub records: ReadAhead,
}

impl Finished {
    /// `done` with no records.
    pub fn nothing_read(done: Done) -> Finished {
        Finished {
            done,
            records: ReadAhead::default(),
        }
    }
}

/// Where a worker takes its finished read-aheads.
#[derive(Clone)]
pub struct ReplyTo {
    /// The worker's queue.
    pub sender: Sender<Finished>,
    /// Wakes the worker's poll.
    pub waker: Arc<Waker>,
}

/// Reads ahead for a parked connection.
pub struct Job {
    /// Where its request's records are on the flash medium (`Engine::flash_reads_needed`).
    pub locations: Vec<u64>,
    /// Who to tell.
    pub done: Done,
    /// Where to tell it.
    pub reply: ReplyTo,
}

/// Work that reads flash at length for one parked request (a `KEYS` over a store with items on
/// flash: a read per flash key), run on the walk thread instead of the worker. It leaves its
/// result where the request finds it when it runs again.
pub type Walk = Box<dyn FnOnce(&Engine) + Send>;

/// A walk, and who waits for it.
struct WalkJob {
    walk: Walk,
    done: Done,
    reply: ReplyTo,
}

/// The pool of I/O threads and the walk thread; they end when it is dropped (their queues
/// close).
pub struct FlashIo {
    sender: Mutex<Sender<Part>>,
    walks: Mutex<Sender<WalkJob>>,
}

/// One read of a job, for one I/O thread: the job's reads are made in parallel, each adds its
/// record to the job's, and the thread that makes the last one tells the worker.
struct Part {
    location: u64,
    job: Arc<PartsOf>,
}

/// What the parts of one job share.
struct PartsOf {
    /// Parts not finished yet.
    left: std::sync::atomic::AtomicUsize,
    /// The records read so far.
    records: Mutex<ReadAhead>,
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
        // One walk at a time: walks are rare and long, and each holds its reply until it ends.
        let (walks, walk_queue) = std::sync::mpsc::channel::<WalkJob>();
        std::thread::Builder::new()
            .name("strata-flash-walk".into())
            .spawn(move || {
                for job in walk_queue {
                    (job.walk)(&engine);
                    if job
                        .reply
                        .sender
                        .send(Finished::nothing_read(job.done))
                        .is_ok()
                    {
                        let _ = job.reply.waker.wake();
                    }
                }
            })?;
        Ok(FlashIo {
            sender: Mutex::new(sender),
            walks: Mutex::new(walks),
        })
    }

    /// Queues a walk for the walk thread, which tells the worker through `reply` when it
    /// ended. Returns false if the thread is gone (the caller then runs the request at once).
    pub fn walk(&self, walk: Walk, done: Done, reply: ReplyTo) -> bool {
        let Ok(walks) = self.walks.lock() else {
            return false;
        };
        walks.send(WalkJob { walk, done, reply }).is_ok()
    }

    /// Queues a read-ahead, one part per location. Returns false if the I/O threads are gone
    /// (the caller then runs the request at once, reading flash itself).
    pub fn submit(&self, job: Job) -> bool {
        let Ok(sender) = self.sender.lock() else {
            return false;
        };
        if job.locations.is_empty() {
            return false;
        }
        let shared = Arc::new(PartsOf {
            left: std::sync::atomic::AtomicUsize::new(job.locations.len()),
            records: Mutex::new(ReadAhead::default()),
            done: job.done,
            reply: job.reply,
        });
        for location in job.locations {
            let part = Part {
                location,
                job: Arc::clone(&shared),
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
        let locations: Vec<u64> = batch.iter().map(|part| part.location).collect();
        let mut read = ReadAhead::default();
        engine.read_flash_ahead_at(&locations, &mut read);
        for (at, part) in batch.iter().enumerate() {
            let job = &part.job;
            {
                let mut records = job.records.lock().unwrap_or_else(|e| e.into_inner());
                // Requests of two connections may wait for one record: each gets it.
                if batch[at + 1..].iter().any(|p| p.location == part.location) {
                    read.copy_to(part.location, &mut records);
                } else {
                    read.move_to(part.location, &mut records);
                }
            }
            if job.left.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) != 1 {
                continue;
            }
            let records =
                std::mem::take(&mut *job.records.lock().unwrap_or_else(|e| e.into_inner()));
            let finished = Finished {
                done: job.done,
                records,
            };
            // A worker that is gone (shutdown) no longer listens: nothing to tell.
            if job.reply.sender.send(finished).is_ok() {
                let _ = job.reply.waker.wake();
            }
        }
    }
}

/// Reads a worker puts in flight itself, on its own io_uring (where the flash medium is read
/// through io_uring): no hand-off to an I/O thread and back, which on a busy core costs more
/// than the read. The ring's eventfd is polled with the worker's sockets.
///
/// ```text
///  worker: a connection parks ─▶ RingReads::start: Engine::plan_flash_reads_at, one
///          submission for all ─▶ … eventfd readable … ─▶ RingReads::complete:
///          Engine::finish_flash_read each, into its job's records (a longer record is read
///          again) ─▶ the connection's Finished, with them, once its last read finished
/// ```
pub struct RingReads {
    /// Each read in flight carries the job it belongs to.
    ring: strata_pool::ReadRing<RingRead>,
    /// By job: who waits, for how many reads, and the records read so far.
    jobs: Vec<Option<(Done, usize, ReadAhead)>>,
    free_jobs: Vec<usize>,
    /// Jobs waiting for room on the ring, in arrival order.
    queued: std::collections::VecDeque<(Vec<u64>, Done)>,
    completed: Vec<strata_pool::ReadDone<RingRead>>,
    /// Reads queued on the ring since the last submission ([`RingReads::submit`]).
    unsubmitted: bool,
}

/// A read on a worker's ring, and the job (index into `RingReads::jobs`) it belongs to.
type RingRead = (strata_engine::FlashRead, usize);

/// Reads in flight at once on one worker's ring; jobs past it wait their turn. 128: with 64,
/// 20 connections pipelining 8 GETs of 1 KiB values with uniform keys (about 3 flash reads per
/// batch) filled the ring, and a batch arriving then waited a whole disk round trip before its
/// reads were even submitted (A/B on the 2-core VM, four runs each: zipf 0.9 173K → 182K
/// req/s median, uniform 78.6K → 79.4K, server CPU per request −1–3%).
const RING_READS_MAX: u32 = 128;

/// What [`RingReads::start`] did with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// Its reads are in flight; [`RingReads::complete`] reports the job when they finished.
    Reading,
    /// Nothing to read (the keys were written, or read ahead, meanwhile): run it now.
    NothingToRead,
}

impl RingReads {
    /// A ring reading `engine`'s flash medium, its reads issued by a kernel thread that polls
    /// for `poll_idle_ms` after the last (0: by the worker; where the kernel refuses, by the
    /// worker, said why); `None` where the medium is not read through io_uring (the I/O
    /// threads then do every read), or the ring cannot be set up (said why).
    pub fn new(engine: &Engine, poll_idle_ms: u32) -> Option<RingReads> {
        let file = engine.flash_read_file()?;
        let ring = if poll_idle_ms > 0 {
            let polled = file.try_clone().and_then(|file| {
                strata_pool::ReadRing::kernel_polled(RING_READS_MAX, file, poll_idle_ms)
            });
            polled.or_else(|err| {
                tracing::warn!(error = %err, "no kernel thread for a worker's flash reads (SQPOLL); the worker issues them");
                strata_pool::ReadRing::new(RING_READS_MAX, file)
            })
        } else {
            strata_pool::ReadRing::new(RING_READS_MAX, file)
        };
        match ring {
            Ok(ring) => Some(RingReads {
                ring,
                jobs: Vec::new(),
                free_jobs: Vec::new(),
                queued: std::collections::VecDeque::new(),
                completed: Vec::new(),
                unsubmitted: false,
            }),
            Err(err) => {
                tracing::warn!(error = %err, "no io_uring for a worker's flash reads; I/O threads read");
                None
            }
        }
    }

    /// Whether a kernel thread issues the reads (`--flash-sqpoll-idle-ms`, and the kernel
    /// agreed).
    pub fn is_kernel_polled(&self) -> bool {
        self.ring.is_kernel_polled()
    }

    /// The descriptor to poll for completions.
    pub fn eventfd(&self) -> std::os::fd::RawFd {
        self.ring.eventfd()
    }

    /// Puts the reads at `locations` in flight for the connection `done` names, or queues
    /// them until the ring has room (a deeper device queue only lengthens the tail).
    pub fn start(&mut self, engine: &Engine, locations: Vec<u64>, done: Done) -> Started {
        if !self.queued.is_empty() || !self.has_room(locations.len()) {
            self.queued.push_back((locations, done));
            return Started::Reading;
        }
        self.start_now(engine, &locations, done)
    }

    /// Whether `reads` more reads fit (a few spare entries cover records read again, longer).
    /// A ring with nothing in flight takes any job.
    fn has_room(&self, reads: usize) -> bool {
        self.ring.in_flight() == 0 || self.ring.in_flight() + reads + 4 <= self.ring.capacity()
    }

    fn start_now(&mut self, engine: &Engine, locations: &[u64], done: Done) -> Started {
        let reads = engine.plan_flash_reads_at(locations);
        if reads.is_empty() {
            return Started::NothingToRead;
        }
        let job = self.free_jobs.pop().unwrap_or_else(|| {
            self.jobs.push(None);
            self.jobs.len() - 1
        });
        let mut queued = 0;
        for read in reads {
            if self.queue(read, job) {
                queued += 1;
            }
        }
        if queued == 0 {
            self.free_jobs.push(job);
            return Started::NothingToRead; // Read on the worker: never seen, never wrong.
        }
        self.jobs[job] = Some((done, queued, ReadAhead::default()));
        self.unsubmitted = true;
        Started::Reading
    }

    /// Whether reads wait for [`RingReads::submit`] (the worker then does not sleep in poll).
    pub fn has_unsubmitted(&self) -> bool {
        self.unsubmitted
    }

    /// Hands the reads queued since the last call to the kernel, in one system call. The
    /// worker calls it once per round of its event loop, after every connection that was ready
    /// ran: one submission, and on a virtual disk one doorbell, for all of the round's reads
    /// rather than one per waiting request.
    pub fn submit(&mut self) {
        if !std::mem::take(&mut self.unsubmitted) {
            return;
        }
        if let Err(err) = self.ring.submit() {
            // The entries stay queued; the next submission hands them over.
            self.unsubmitted = true;
            tracing::warn!(error = %err, "io_uring submission of flash reads failed");
        }
    }

    fn queue(&mut self, read: strata_engine::FlashRead, job: usize) -> bool {
        let (offset, len) = (read.offset(), read.len_bytes());
        self.ring
            .queue_read(
                offset,
                len,
                strata_pool::DIRECT_BLOCK_SIZE_BYTES,
                (read, job),
            )
            .is_ok()
    }

    /// Finishes the reads that completed; appends the jobs whose last read finished.
    pub fn complete(&mut self, engine: &Engine, finished: &mut Vec<Finished>) {
        let mut completed = std::mem::take(&mut self.completed);
        self.ring.complete(&mut completed);
        let mut requeued = false;
        for ((mut read, job), result) in completed.drain(..) {
            let Some((_, _, records)) = self.jobs.get_mut(job).and_then(Option::as_mut) else {
                debug_assert!(false, "a read of no job");
                continue;
            };
            let outcome = engine.finish_flash_read(&mut read, result.as_deref().ok(), records);
            if let Ok(buf) = result {
                self.ring.recycle(buf);
            }
            if outcome == strata_engine::ReadOutcome::ReadMore && self.queue(read, job) {
                requeued = true;
                continue;
            }
            let Some((_, left, _)) = self.jobs.get_mut(job).and_then(Option::as_mut) else {
                continue;
            };
            *left -= 1;
            if *left == 0 {
                let (done, _, records) = self.jobs[job].take().expect("the job just seen");
                finished.push(Finished { done, records });
                self.free_jobs.push(job);
            }
        }
        self.completed = completed;
        self.unsubmitted |= requeued;
        while self
            .queued
            .front()
            .is_some_and(|(locations, _)| self.has_room(locations.len()))
        {
            let (locations, done) = self.queued.pop_front().expect("front checked");
            if self.start_now(engine, &locations, done) == Started::NothingToRead {
                finished.push(Finished::nothing_read(done));
            }
        }
    }
}

/// A session's side of waiting for flash: where the records its waiting request needs are on
/// the medium, and whether they were read ahead (then the request runs without checking again,
/// so it always moves on).
#[derive(Debug, Default)]
pub struct FlashWait {
    locations: Option<Vec<u64>>,
    walk: Option<WalkSlot>,
    staged: bool,
}

/// A walk a session handed over, in a `Debug` wrapper.
struct WalkSlot(Walk);

impl std::fmt::Debug for WalkSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Walk")
    }
}

impl FlashWait {
    /// Whether the requests reading `keys` must wait for flash reads ahead: some key is on
    /// flash and not read ahead, and the session did not just wait. Then where to read is kept
    /// for [`FlashWait::take_locations`] (found in the same look: `Engine::flash_reads_needed`,
    /// one walk of each key's buckets, and the worker plans the reads from it without looking
    /// the keys up again). Without I/O threads, never.
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
        let mut locations = Vec::new();
        for key in keys {
            ctx.engine.flash_reads_needed(key, &mut locations);
        }
        if locations.is_empty() {
            return false;
        }
        locations.sort_unstable();
        locations.dedup();
        self.locations = Some(locations);
        true
    }

    /// After [`FlashWait::must_wait`] said wait: reads ahead for `keys` too, those on flash
    /// and not read ahead yet, up to [`READ_AHEAD_KEYS_MAX`] reads in all. A server adds the
    /// keys of the requests pipelined behind the waiting one, so that a pipeline of reads
    /// waits once, its reads in parallel, instead of once per request, one after another.
    pub fn read_ahead_too<'k>(
        &mut self,
        ctx: &crate::context::ServerContext,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) {
        let Some(waiting) = self.locations.as_mut() else {
            return;
        };
        for key in keys {
            if waiting.len() >= READ_AHEAD_KEYS_MAX {
                break;
            }
            ctx.engine.flash_reads_needed(key, waiting);
        }
        // A key pipelined twice is read once.
        waiting.sort_unstable();
        waiting.dedup();
    }

    /// Where the request that began waiting needs its records read.
    pub fn take_locations(&mut self) -> Option<Vec<u64>> {
        self.locations.take()
    }

    /// The request waits for `walk` instead of reads of its keys ([`Walk`]).
    pub fn wait_for_walk(&mut self, walk: Walk) {
        self.walk = Some(WalkSlot(walk));
    }

    /// The walk of the request that began waiting.
    pub fn take_walk(&mut self) -> Option<Walk> {
        self.walk.take().map(|slot| slot.0)
    }

    /// Its keys were read ahead, or its walk ended.
    pub fn staged(&mut self) {
        self.staged = true;
    }

    /// The request that waited for a walk runs: the turn to run without waiting is used (the
    /// next request with keys on flash waits for them as usual).
    pub fn walk_done(&mut self) {
        self.staged = false;
    }
}
