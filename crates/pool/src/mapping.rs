//! The one mapping behind a pool, and how its bytes are made persistent.
//!
//! Invariants:
//! - The mapping is created once, never moved or resized, and unmapped only when the last
//!   handle (`Pool`, `Segment`, `RootArea`) referring to it is dropped (they share an `Arc`).
//! - A file-backed mapping is only created after an exclusive `flock` on the file succeeded, and
//!   the lock is held for the mapping's lifetime. No other strata process maps the same file, so
//!   the only writers of these bytes are this process's handles. (Another program writing the
//!   file behind our back is outside the contract, as for any database file.)
//! - The bytes of the mapping are handed out in disjoint pieces (header page, one segment header
//!   and one data range per segment, the root area), each to exactly one owner. Shared readers
//!   use `&` to a handle, writers need `&mut`, so Rust's aliasing rules hold per piece.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{PersistError, PoolError};
use crate::CACHE_LINE_SIZE_BYTES;

/// Which kind of memory backs the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Anonymous DRAM: nothing survives the process.
    Dram,
    /// A file on a DAX filesystem mapped with `MAP_SYNC`: stores reach persistent media after
    /// CLWB (or CLFLUSHOPT) of each cache line and an SFENCE.
    DaxFile,
    /// A shared mapping of a file on tmpfs (e.g. `/dev/shm`): survives a process crash, not a
    /// reboot or power loss.
    TmpfsFile,
    /// A shared mapping of an ordinary file: survives a process crash; survives power loss only
    /// for ranges that were `msync`ed.
    SharedFile,
    /// DRAM whose every persist is reported to a test's power-failure simulator
    /// ([`crate::testing::SimulatedPersistence`]).
    Simulated,
}

impl Backend {
    /// A short lowercase name for stats and logs.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Dram => "dram",
            Backend::DaxFile => "dax",
            Backend::TmpfsFile => "tmpfs",
            Backend::SharedFile => "file",
            Backend::Simulated => "simulated",
        }
    }

    /// Whether the pool is a file (DAX, tmpfs or plain), so it has a path and outlives us.
    pub fn is_file(self) -> bool {
        matches!(
            self,
            Backend::DaxFile | Backend::TmpfsFile | Backend::SharedFile
        )
    }
}

/// How `persist(range)` makes bytes durable on this backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushMethod {
    /// Nothing to do (DRAM, tmpfs): there is no more durable place to put the bytes.
    None,
    /// Write back each cache line (CLWB, else CLFLUSHOPT, else CLFLUSH), then SFENCE.
    CacheLineFlush,
    /// `msync(MS_SYNC)` of the pages covering the range.
    Msync,
    /// Report the range to the test's [`PersistObserver`], which keeps what has been persisted.
    Simulated,
}

/// What survives what, for this pool. INFO and `stats` report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PersistenceDomain {
    /// Data written to the pool survives `kill -9` of the process.
    pub survives_process_crash: bool,
    /// Data that was persisted survives power loss or a reboot.
    pub survives_power_loss: bool,
    /// What persist does.
    pub flush: FlushMethod,
}

impl PersistenceDomain {
    /// The domain of each backend.
    pub fn of(backend: Backend) -> Self {
        let (crash, power, flush) = match backend {
            Backend::Dram => (false, false, FlushMethod::None),
            Backend::TmpfsFile => (true, false, FlushMethod::None),
            Backend::DaxFile => (true, true, FlushMethod::CacheLineFlush),
            Backend::SharedFile => (true, true, FlushMethod::Msync),
            Backend::Simulated => (true, true, FlushMethod::Simulated),
        };
        PersistenceDomain {
            survives_process_crash: crash,
            survives_power_loss: power,
            flush,
        }
    }

    /// A one-word summary: `none`, `process-crash` or `power-loss`.
    pub fn summary(&self) -> &'static str {
        match (self.survives_process_crash, self.survives_power_loss) {
            (_, true) => "power-loss",
            (true, false) => "process-crash",
            (false, false) => "none",
        }
    }
}

/// Told of every persist of a mapped pool: how tests simulate power cuts and failing devices
/// ([`crate::testing::SimulatedPersistence`]). Production pools have none; the mapping only
/// calls it, and keeps no test state of its own.
pub trait PersistObserver: Send + Sync + std::fmt::Debug {
    /// Once, when the mapping is made: its bytes at that moment (zeros, or a crash image), all
    /// of which count as persisted.
    fn attached(&self, initial: &[u8]);
    /// By every `persist` before it returns: the range rounded out to cache lines, its offset
    /// and its live bytes (empty for an empty persist). An error fails the persist with it.
    fn persisted(&self, offset: usize, live: &[u8]) -> Result<(), String>;
}

enum Region {
    /// Kept only to be unmapped on drop.
    Memmap(#[allow(dead_code)] memmap2::MmapMut),
    /// A mapping made with `libc::mmap` (for `MAP_SYNC`), unmapped in `Drop`.
    Raw { base: *mut u8, len: usize },
}

/// The mapping and its persistence machinery, shared by every handle of a pool.
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
    _region: Region,
    pub(crate) backend: Backend,
    pub(crate) path: PathBuf,
    _lock: Option<File>,
    observer: Option<Arc<dyn PersistObserver>>,
    flush_instruction: FlushInstruction,
}

// SAFETY: `Mapping` owns the mapped region; the raw base pointer is only dereferenced through
// the disjoint pieces handed out by `Pool` (see the module invariants), each guarded by Rust's
// borrow rules on its handle. The region itself is valid for the whole lifetime of `Mapping`.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; the only other shared state, the observer, is `Sync`.
unsafe impl Sync for Mapping {}

impl Drop for Region {
    fn drop(&mut self) {
        if let Region::Raw { base, len } = *self {
            // SAFETY: `base`/`len` came from a successful `mmap` in `map_dax` and are unmapped
            // exactly once, here; no handle outlives the `Mapping` that owns this region.
            unsafe {
                libc::munmap(base.cast(), len);
            }
        }
    }
}

impl Mapping {
    /// Anonymous DRAM, zero-filled; with an observer, a simulated pool.
    pub(crate) fn anonymous(
        len: usize,
        observer: Option<Arc<dyn PersistObserver>>,
    ) -> Result<Self, PoolError> {
        Self::anonymous_with(len, observer, None)
    }

    /// A simulated pool whose live and persisted bytes both start as `image`.
    pub(crate) fn from_image(
        image: &[u8],
        observer: Arc<dyn PersistObserver>,
    ) -> Result<Self, PoolError> {
        Self::anonymous_with(image.len(), Some(observer), Some(image))
    }

    fn anonymous_with(
        len: usize,
        observer: Option<Arc<dyn PersistObserver>>,
        initial: Option<&[u8]>,
    ) -> Result<Self, PoolError> {
        let path = PathBuf::from("(anonymous)");
        let mut map =
            memmap2::MmapMut::map_anon(len).map_err(|e| crate::io_err("mmap", &path, e))?;
        if let Some(initial) = initial {
            map.copy_from_slice(initial);
        }
        if let Some(observer) = &observer {
            observer.attached(&map);
        }
        let base = map.as_mut_ptr();
        let backend = if observer.is_some() {
            Backend::Simulated
        } else {
            Backend::Dram
        };
        Ok(Self::assemble(
            base,
            len,
            Region::Memmap(map),
            backend,
            path,
            None,
            observer,
        ))
    }

    /// Maps `file` (already locked, already of length `len`) shared, trying DAX first.
    pub(crate) fn file(file: File, path: PathBuf, len: usize) -> Result<Self, PoolError> {
        if let Some((base, region)) = map_dax(&file, len) {
            let backend = Backend::DaxFile;
            return Ok(Self::assemble(
                base,
                len,
                region,
                backend,
                path,
                Some(file),
                None,
            ));
        }
        // SAFETY: the file is exclusively flocked by this process for the mapping's lifetime
        // (see module invariants), so no other strata process writes it; its length was set by
        // us and is never truncated while mapped.
        let mut map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
            .map_err(|e| crate::io_err("mmap", &path, e))?;
        let base = map.as_mut_ptr();
        let backend = if is_tmpfs(&file) {
            Backend::TmpfsFile
        } else {
            Backend::SharedFile
        };
        Ok(Self::assemble(
            base,
            len,
            Region::Memmap(map),
            backend,
            path,
            Some(file),
            None,
        ))
    }

    fn assemble(
        base: *mut u8,
        len: usize,
        region: Region,
        backend: Backend,
        path: PathBuf,
        lock: Option<File>,
        observer: Option<Arc<dyn PersistObserver>>,
    ) -> Self {
        assert!(!base.is_null());
        assert_eq!(base as usize % 4096, 0, "mappings are page aligned");
        Mapping {
            base,
            len,
            _region: region,
            backend,
            path,
            _lock: lock,
            observer,
            flush_instruction: FlushInstruction::detect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The whole mapping, mutably; only used while `Pool::open` still owns every piece.
    pub(crate) fn bytes_mut_at_open(&mut self) -> &mut [u8] {
        // SAFETY: `&mut self` proves no handle exists yet (handles hold an `Arc<Mapping>`, and
        // `Arc::get_mut` is how callers reach this), and [base, base+len) is the live mapping.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// A shared slice of `range`.
    ///
    /// # Safety
    /// The caller must own the piece covering `range` (see module invariants) through a shared
    /// borrow for the returned lifetime, so that nothing writes these bytes meanwhile.
    pub(crate) unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (asserted above); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts(self.base.add(offset), len) }
    }

    /// A mutable slice of `range`.
    ///
    /// # Safety
    /// The caller must own the piece covering `range` through an exclusive borrow for the
    /// returned lifetime.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds (asserted above); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(offset), len) }
    }

    /// Makes `[offset, offset + len)` durable according to the backend.
    pub(crate) fn persist(&self, offset: usize, len: usize) -> Result<(), PersistError> {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len));
        let failure = |message: String| PersistError {
            offset: offset as u64,
            len_bytes: len as u64,
            message,
        };
        if let Some(observer) = &self.observer {
            // Every call, an empty one too: the observer numbers them to fail the N-th.
            let (start, live) = self.lines_covering(offset, len);
            return observer.persisted(start, live).map_err(failure);
        }
        if len == 0 {
            return Ok(());
        }
        match PersistenceDomain::of(self.backend).flush {
            FlushMethod::None | FlushMethod::Simulated => Ok(()),
            FlushMethod::CacheLineFlush => {
                self.flush_cache_lines(offset, len);
                Ok(())
            }
            FlushMethod::Msync => self.msync(offset, len).map_err(|e| failure(e.to_string())),
        }
    }

    /// Where the cache lines covering `[offset, offset + len)` start, and their live bytes
    /// (none when `len` is 0), for a simulated pool's observer.
    fn lines_covering(&self, offset: usize, len: usize) -> (usize, &[u8]) {
        if len == 0 {
            return (offset, &[]);
        }
        let start = offset / CACHE_LINE_SIZE_BYTES * CACHE_LINE_SIZE_BYTES;
        let end =
            ((offset + len).div_ceil(CACHE_LINE_SIZE_BYTES) * CACHE_LINE_SIZE_BYTES).min(self.len);
        // SAFETY: the caller of `persist` owns the piece covering the range and holds at least
        // a shared borrow of it; pieces are cache-line aligned (segments and headers are
        // multiples of 64 bytes), so rounding to lines stays inside it.
        (start, unsafe { self.slice(start, end - start) })
    }

    /// Maps `[offset, offset + len)` into the page tables now (`MADV_POPULATE_READ`), so the
    /// first accesses after a restart do not each take a page fault. Changes no byte. Errors
    /// (kernels before 5.14) are ignored: this only saves time.
    pub(crate) fn populate(&self, offset: usize, len: usize) {
        let page = 4096;
        let start = offset / page * page;
        let end = (offset + len)
            .div_ceil(page)
            .saturating_mul(page)
            .min(self.len);
        if start >= end {
            return;
        }
        // SAFETY: [start, end) lies inside the live mapping and is page aligned; populating page
        // tables reads nothing into our address space that was not already mapped there and
        // writes no memory.
        unsafe {
            libc::madvise(
                self.base.add(start).cast(),
                end - start,
                libc::MADV_POPULATE_READ,
            );
        }
    }

    fn msync(&self, offset: usize, len: usize) -> std::io::Result<()> {
        let page = 4096;
        let start = offset / page * page;
        let end = (offset + len).div_ceil(page) * page;
        let end = end.min(self.len);
        // SAFETY: [start, end) lies inside the live mapping (clamped to its length) and is page
        // aligned as msync requires; msync does not touch our memory, it writes it back.
        let rc = unsafe { libc::msync(self.base.add(start).cast(), end - start, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    fn flush_cache_lines(&self, offset: usize, len: usize) {
        let start = offset / CACHE_LINE_SIZE_BYTES * CACHE_LINE_SIZE_BYTES;
        let mut line = start;
        while line < offset + len {
            // SAFETY: `line` is inside the live mapping (it starts at or below `offset` rounded
            // down to a line, and stops before `offset + len`, both in bounds).
            let address = unsafe { self.base.add(line) };
            self.flush_instruction.flush(address);
            line += CACHE_LINE_SIZE_BYTES;
        }
        fence();
    }

    /// A copy of every byte, as a process crash (no power loss) would leave them. Tests only:
    /// the engine must be quiescent (no handle writing) while it runs.
    pub(crate) fn live_copy(&self) -> Vec<u8> {
        // SAFETY: callers (tests taking crash images) hold the engine quiescent, so nothing
        // writes the mapping while it is read; the range is the whole live mapping.
        unsafe { self.slice(0, self.len) }.to_vec()
    }

    /// Gives the pages of `[offset, offset + len)` back to the OS; they read as zero after.
    /// Only meaningful for anonymous DRAM; returns false when the backend cannot do it.
    pub(crate) fn discard(&self, offset: usize, len: usize) -> bool {
        if self.backend != Backend::Dram
            || !offset.is_multiple_of(4096)
            || !len.is_multiple_of(4096)
        {
            return false;
        }
        assert!(offset + len <= self.len);
        // SAFETY: the range is page aligned and inside our private anonymous mapping; the caller
        // owns it exclusively (`&mut Segment`), and MADV_DONTNEED on private anonymous memory
        // makes the pages read as zero afterwards, which is what callers expect.
        let rc = unsafe { libc::madvise(self.base.add(offset).cast(), len, libc::MADV_DONTNEED) };
        rc == 0
    }
}

fn map_dax(file: &File, len: usize) -> Option<(*mut u8, Region)> {
    const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
    const MAP_SYNC: libc::c_int = 0x80000;
    // SAFETY: a fresh mapping of a file we hold locked; on failure nothing is mapped. The kernel
    // refuses MAP_SYNC (EOPNOTSUPP/EINVAL) unless the file is on a DAX filesystem.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            MAP_SHARED_VALIDATE | MAP_SYNC,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base.cast::<u8>();
    Some((base, Region::Raw { base, len }))
}

fn is_tmpfs(file: &File) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs writes a `statfs` into the buffer we own; we read it only on success.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), stat.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: fstatfs returned 0, so the struct is initialised.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    let fs_type = stat.f_type as libc::c_long;
    fs_type == TMPFS_MAGIC
}

/// Which cache-line write-back instruction this CPU has.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
enum FlushInstruction {
    Clwb,
    ClflushOpt,
    Clflush,
    Unavailable,
}

impl FlushInstruction {
    #[cfg(target_arch = "x86_64")]
    fn detect() -> Self {
        // CPUID leaf 7 exists on every x86_64 CPU that can run Rust's std.
        let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
        if leaf7.ebx & (1 << 24) != 0 {
            FlushInstruction::Clwb
        } else if leaf7.ebx & (1 << 23) != 0 {
            FlushInstruction::ClflushOpt
        } else {
            FlushInstruction::Clflush
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> Self {
        FlushInstruction::Unavailable
    }

    fn flush(self, address: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `address` points into the live mapping (checked by the caller); the
        // instruction chosen was reported by CPUID, and none of them modify memory contents.
        unsafe {
            match self {
                FlushInstruction::Clwb => {
                    std::arch::asm!("clwb [{0}]", in(reg) address, options(nostack, preserves_flags));
                }
                FlushInstruction::ClflushOpt => {
                    std::arch::asm!("clflushopt [{0}]", in(reg) address, options(nostack, preserves_flags));
                }
                FlushInstruction::Clflush => std::arch::x86_64::_mm_clflush(address),
                FlushInstruction::Unavailable => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (self, address);
    }
}

fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE has no memory-safety preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}
