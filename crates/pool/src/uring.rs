//! Reads and writes of a [`crate::DirectFile`] through io_uring (the `io-uring` crate), with
//! `pread`/`pwrite` as the fallback where the kernel or a seccomp policy refuses io_uring.
//!
//! Each thread that does I/O gets its own ring on first use (a thread-local), so threads never
//! wait for one another's submissions. A single read or write keeps one request in flight, as
//! `pread` would; [`read_many_exact_at`] puts a whole batch in flight with one submission (the
//! flash tier's I/O threads read every key queued for them that way). A ring that cannot be set
//! up once makes the whole process use `pread`, and says why ([`probe`]).

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::OnceLock;

use io_uring::{opcode, types, IoUring};

/// Entries of each thread's ring: the most reads of a batch in flight at once (a longer batch
/// goes in chunks of this many).
const RING_ENTRIES: u32 = 64;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Whether io_uring works here: `Ok` after a ring was set up once, else why not (the first
/// call decides for the process's life).
pub fn probe() -> &'static Result<(), String> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    PROBED.get_or_init(|| {
        IoUring::new(RING_ENTRIES)
            .map(drop)
            .map_err(|e| format!("io_uring unavailable ({e}); using pread/pwrite"))
    })
}

/// What one ring operation moves.
enum Op<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// Reads `buf.len()` bytes at `offset` of `fd` through this thread's ring, resubmitting after
/// short reads. An end of file before the buffer is full is an error, as `read_exact_at`'s.
pub fn read_exact_at(fd: RawFd, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = submit(fd, Op::Read(&mut buf[done..]), offset + done as u64)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        done += n;
    }
    Ok(())
}

/// Writes all of `data` at `offset` of `fd` through this thread's ring.
pub fn write_all_at(fd: RawFd, data: &[u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        let n = submit(fd, Op::Write(&data[done..]), offset + done as u64)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}

/// Reads each `(offset, buf)` of `reads` in full, all of a chunk of up to [`RING_ENTRIES`] in
/// flight at once through this thread's ring; one result per read, in order. A short read is
/// finished alone afterwards; an end of file before a buffer is full is that read's error.
pub fn read_many_exact_at(fd: RawFd, reads: &mut [(u64, &mut [u8])]) -> Vec<std::io::Result<()>> {
    let mut results = Vec::with_capacity(reads.len());
    for chunk in reads.chunks_mut(RING_ENTRIES as usize) {
        match submit_reads(fd, chunk) {
            Ok(moved) => {
                for ((offset, buf), moved) in chunk.iter_mut().zip(moved) {
                    results.push(moved.and_then(|n| match n {
                        0 if !buf.is_empty() => Err(std::io::ErrorKind::UnexpectedEof.into()),
                        n if n < buf.len() => read_exact_at(fd, &mut buf[n..], *offset + n as u64),
                        _ => Ok(()),
                    }));
                }
            }
            Err(e) => {
                let kind = e.kind();
                results.push(Err(e));
                results.extend((1..chunk.len()).map(|_| Err(kind.into())));
            }
        }
    }
    results
}

/// Puts every read of `chunk` (at most [`RING_ENTRIES`]) in flight and waits for all their
/// completions; returns the bytes each moved. `Err` only when none was handed to the kernel.
fn submit_reads(
    fd: RawFd,
    chunk: &mut [(u64, &mut [u8])],
) -> std::io::Result<Vec<std::io::Result<usize>>> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(IoUring::new(RING_ENTRIES)?);
        }
        let ring = slot.as_mut().expect("set above");
        for (i, (offset, buf)) in chunk.iter_mut().enumerate() {
            let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
            let entry = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len)
                .offset(*offset)
                .build()
                .user_data(i as u64);
            // SAFETY: the entry names a descriptor the caller keeps open for this call and a
            // buffer it lends (mutably) for this call; the call waits below for the completion
            // of every entry the kernel took before it returns, so the kernel never touches a
            // buffer after its borrow ends. The ring is this thread's own, empty between calls,
            // and has room for the whole chunk.
            unsafe {
                ring.submission()
                    .push(&entry)
                    .map_err(|_| std::io::Error::other("io_uring submission queue full"))?;
            }
        }
        let mut moved: Vec<std::io::Result<usize>> = (0..chunk.len())
            .map(|_| Err(std::io::Error::other("io_uring completion missing")))
            .collect();
        let mut completed = 0;
        while completed < chunk.len() {
            match ring.submit_and_wait(chunk.len() - completed) {
                Ok(_) => {}
                // Nothing handed to the kernel yet: dropping the ring drops the entries, unread.
                Err(e) if completed == 0 && ring.submission().len() == chunk.len() => {
                    *slot = None;
                    return Err(e);
                }
                // Entries the kernel took may still use their buffers: the call must not return
                // before their completions (EINTR and EBUSY pass; nothing else is expected).
                Err(_) => std::thread::yield_now(),
            }
            for cqe in ring.completion() {
                let Some(entry) = moved.get_mut(cqe.user_data() as usize) else {
                    continue;
                };
                *entry = bytes_moved(cqe.result());
                completed += 1;
            }
        }
        Ok(moved)
    })
}

/// Submits one operation and waits for its completion; returns the bytes it moved.
fn submit(fd: RawFd, op: Op<'_>, offset: u64) -> std::io::Result<usize> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(IoUring::new(RING_ENTRIES)?);
        }
        let ring = slot.as_mut().expect("set above");
        let entry = match op {
            Op::Read(buf) => {
                let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
                opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), len)
                    .offset(offset)
                    .build()
            }
            Op::Write(data) => {
                let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
                opcode::Write::new(types::Fd(fd), data.as_ptr(), len)
                    .offset(offset)
                    .build()
            }
        };
        // SAFETY: the entry names a descriptor the caller keeps open for this call and a buffer
        // borrowed (mutably, for a read) for this call; the call waits below for the entry's
        // completion before it returns, so the kernel never touches either after the borrow
        // ends. The ring is this thread's own, empty between calls.
        unsafe {
            ring.submission()
                .push(&entry)
                .map_err(|_| std::io::Error::other("io_uring submission queue full"))?;
        }
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) if !ring.completion().is_empty() => break,
                Ok(_) => {}
                // Never handed to the kernel: dropping the ring drops the entry, unread.
                Err(e) if !ring.submission().is_empty() => {
                    *slot = None;
                    return Err(e);
                }
                // Handed to the kernel, which may still be using the buffer: the call must not
                // return before the completion (EINTR and EBUSY pass; nothing else is expected).
                Err(_) => std::thread::yield_now(),
            }
        }
        let cqe = ring
            .completion()
            .next()
            .ok_or_else(|| std::io::Error::other("io_uring completion missing"))?;
        bytes_moved(cqe.result())
    })
}

/// A completion's result: the bytes moved, or the error (a negated errno).
fn bytes_moved(result: i32) -> std::io::Result<usize> {
    if result < 0 {
        Err(std::io::Error::from_raw_os_error(-result))
    } else {
        Ok(result as usize)
    }
}

/// Reads put in flight without waiting for them: the thread that owns the ring queues reads,
/// submits them in one call, and learns of their completions through an eventfd it polls with
/// its other descriptors (a server worker: no thread hand-off per read).
///
/// ```text
///   queue_read(offset, len, with) ×N ─▶ submit() ─▶ … eventfd readable … ─▶ complete(out)
///                                                        └─ (with, the bytes read or an error)
/// ```
///
/// Each read gets a fresh buffer the ring owns until the read completes; the ring reads its
/// own duplicate of the file's descriptor, so neither outlives the other. Dropping the ring
/// waits for the reads still in flight.
pub struct ReadRing<T> {
    ring: IoUring,
    file: std::os::fd::OwnedFd,
    eventfd: std::os::fd::OwnedFd,
    /// By `user_data`: the buffer a read in flight fills, and what the caller keeps with it.
    reads: Vec<Option<(crate::AlignedBuf, T)>>,
    free: Vec<usize>,
    /// Buffers of finished reads, for the next ones ([`ReadRing::recycle`]).
    spare: Vec<crate::AlignedBuf>,
    in_flight: usize,
}

/// Largest buffer a [`ReadRing`] keeps for reuse: reads of small records (most of a cache's)
/// reuse buffers; a rare large one is freed after use rather than held.
pub const SPARE_BUFFER_BYTES_MAX: usize = 64 * 1024;

/// A finished read of a [`ReadRing`]: what the caller queued with it, and the buffer with the
/// bytes read (all of them: a short read is an error).
pub type ReadDone<T> = (T, std::io::Result<crate::AlignedBuf>);

impl<T> ReadRing<T> {
    /// A ring for up to `entries` reads in flight at once, reading `file` (a duplicate of a
    /// [`crate::DirectFile`]'s descriptor, [`crate::Medium::read_file`]).
    pub fn new(entries: u32, file: std::os::fd::OwnedFd) -> std::io::Result<ReadRing<T>> {
        ReadRing::with_ring(IoUring::new(entries)?, file)
    }

    /// As [`ReadRing::new`], with a kernel thread of its own (io_uring's `SQPOLL`) that takes
    /// queued reads off the ring and issues them, and sleeps after `idle_ms` without any:
    /// [`ReadRing::submit`] then makes no system call while the thread is awake, so the
    /// owner's core no longer pays for issuing each read (the file system's and block layer's
    /// submission path, about 5 µs per read on a virtual disk); the thread spins a core of its
    /// own while reads keep coming. Refused by kernels before 5.11 for unprivileged users.
    pub fn kernel_polled(
        entries: u32,
        file: std::os::fd::OwnedFd,
        idle_ms: u32,
    ) -> std::io::Result<ReadRing<T>> {
        ReadRing::with_ring(
            IoUring::builder().setup_sqpoll(idle_ms).build(entries)?,
            file,
        )
    }

    fn with_ring(ring: IoUring, file: std::os::fd::OwnedFd) -> std::io::Result<ReadRing<T>> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor eventfd just made, owned by nothing else.
        let eventfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(ReadRing {
            ring,
            file,
            eventfd,
            reads: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            in_flight: 0,
        })
    }

    /// The descriptor that becomes readable when reads complete (edge: [`ReadRing::complete`]
    /// drains it).
    pub fn eventfd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.eventfd.as_raw_fd()
    }

    /// Reads queued or in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether a kernel thread issues its reads ([`ReadRing::kernel_polled`]).
    pub fn is_kernel_polled(&self) -> bool {
        self.ring.params().is_setup_sqpoll()
    }

    /// Most reads in flight at once.
    pub fn capacity(&self) -> usize {
        self.ring.params().sq_entries() as usize
    }

    /// Queues a read of `len` bytes at `offset` into a new buffer aligned to `align`, for
    /// [`ReadRing::submit`]; `with` comes back with its completion. Refused (`with` handed
    /// back: the caller reads another way) when the ring is full.
    pub fn queue_read(&mut self, offset: u64, len: usize, align: usize, with: T) -> Result<(), T> {
        use std::os::fd::AsRawFd;
        if self.in_flight >= self.capacity() {
            return Err(with);
        }
        let reused =
            (self.spare.pop()).and_then(|mut spare| spare.reuse(len, align).then_some(spare));
        let mut buf = reused.unwrap_or_else(|| crate::AlignedBuf::zeroed(len, align));
        // Exactly `len` (a read's alignment can be finer than its buffer's): the kernel fills
        // it whole, or the read is short.
        buf.truncate(len);
        let slot = self.free.pop().unwrap_or_else(|| {
            self.reads.push(None);
            self.reads.len() - 1
        });
        let entry = opcode::Read::new(
            types::Fd(self.file.as_raw_fd()),
            buf.as_mut_ptr(),
            u32::try_from(len).unwrap_or(u32::MAX),
        )
        .offset(offset)
        .build()
        .user_data(slot as u64);
        // The queue holds `capacity` entries and at most `in_flight` are queued: room is left.
        // SAFETY: the entry names the ring's own descriptor (closed only after every read in
        // flight completed, see Drop) and a heap buffer stored below in `reads`, which keeps it
        // (its address does not move with the Vec) until this entry's completion is reaped.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            self.free.push(slot);
            return Err(with);
        }
        self.reads[slot] = Some((buf, with));
        self.in_flight += 1;
        Ok(())
    }

    /// Takes back the buffer of a finished read (its bytes used) for a later read: a
    /// worker's flash reads then neither allocate nor zero a buffer each. Kept only while
    /// fewer than [`ReadRing::capacity`] are spare and when small
    /// ([`SPARE_BUFFER_BYTES_MAX`]); else freed.
    pub fn recycle(&mut self, buf: crate::AlignedBuf) {
        if self.spare.len() < self.capacity() && buf.len() <= SPARE_BUFFER_BYTES_MAX {
            self.spare.push(buf);
        }
    }

    /// Hands every queued read to the kernel without waiting for any.
    pub fn submit(&mut self) -> std::io::Result<()> {
        self.ring.submit().map(drop)
    }

    /// Appends the reads that completed to `out` and clears the eventfd.
    pub fn complete(&mut self, out: &mut Vec<ReadDone<T>>) {
        let mut counter = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `counter`, which lives across the call; the
        // descriptor is ours. EAGAIN (nothing signalled) is fine.
        let _ = unsafe { libc::read(self.eventfd(), counter.as_mut_ptr().cast(), 8) };
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            let Some((buf, with)) = self.reads.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            self.free.push(slot);
            self.in_flight -= 1;
            let done = match bytes_moved(cqe.result()) {
                Ok(n) if n < buf.len() => Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => Ok(buf),
                Err(e) => Err(e),
            };
            out.push((with, done));
        }
    }
}

impl<T> Drop for ReadRing<T> {
    fn drop(&mut self) {
        // The kernel may still write into buffers of reads in flight: wait for them all.
        let mut done = Vec::new();
        let mut tries = 0;
        while self.in_flight > 0 && tries < 1000 {
            if self.ring.submit_and_wait(1).is_err() {
                tries += 1;
                std::thread::yield_now();
            }
            self.complete(&mut done);
            done.clear();
        }
        if self.in_flight > 0 {
            // Never seen: rather leak the buffers than free memory the kernel may write.
            for read in self.reads.drain(..).flatten() {
                std::mem::forget(read);
            }
        }
    }
}
