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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
    /// DRAM with a shadow copy of what has been persisted, for power-failure tests.
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
    /// Copy the range into the simulated persistent image.
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

/// Fail persists on purpose, for tests of I/O-error handling (as Open CAS fails its N-th write).
#[derive(Debug, Default)]
pub struct FaultPlan {
    /// Fail the persist call with this 1-based number and every call after it.
    pub fail_persist_from: Option<u64>,
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
    persisted_image: Option<Mutex<Vec<u8>>>,
    persist_calls: AtomicU64,
    fail_persist_from: Option<u64>,
    flush_instruction: FlushInstruction,
}

// SAFETY: `Mapping` owns the mapped region; the raw base pointer is only dereferenced through
// the disjoint pieces handed out by `Pool` (see the module invariants), each guarded by Rust's
// borrow rules on its handle. The region itself is valid for the whole lifetime of `Mapping`.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; the shared state (`persisted_image`, counters) is behind a Mutex or atomic.
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
    /// Anonymous DRAM, zero-filled; `simulated` adds the persisted-image shadow.
    pub(crate) fn anonymous(
        len: usize,
        simulated: bool,
        faults: FaultPlan,
    ) -> Result<Self, PoolError> {
        let path = PathBuf::from("(anonymous)");
        let mut map =
            memmap2::MmapMut::map_anon(len).map_err(|e| crate::io_err("mmap", &path, e))?;
        let base = map.as_mut_ptr();
        let backend = if simulated {
            Backend::Simulated
        } else {
            Backend::Dram
        };
        let image = simulated.then(|| Mutex::new(vec![0u8; len]));
        Ok(Self::assemble(
            base,
            len,
            Region::Memmap(map),
            backend,
            path,
            None,
            image,
            faults,
        ))
    }

    /// A simulated pool whose live and persisted bytes both start as `image`.
    pub(crate) fn from_image(image: Vec<u8>, faults: FaultPlan) -> Result<Self, PoolError> {
        let mut mapping = Self::anonymous(image.len(), true, faults)?;
        mapping.bytes_mut_at_open().copy_from_slice(&image);
        mapping.persisted_image = Some(Mutex::new(image));
        Ok(mapping)
    }

    /// Maps `file` (already locked, already of length `len`) shared, trying DAX first.
    pub(crate) fn file(
        file: File,
        path: PathBuf,
        len: usize,
        faults: FaultPlan,
    ) -> Result<Self, PoolError> {
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
                faults,
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
            faults,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        base: *mut u8,
        len: usize,
        region: Region,
        backend: Backend,
        path: PathBuf,
        lock: Option<File>,
        persisted_image: Option<Mutex<Vec<u8>>>,
        faults: FaultPlan,
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
            persisted_image,
            persist_calls: AtomicU64::new(0),
            fail_persist_from: faults.fail_persist_from,
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
        let call = self.persist_calls.fetch_add(1, Ordering::Relaxed) + 1;
        let failure = |message: String| PersistError {
            offset: offset as u64,
            len_bytes: len as u64,
            message,
        };
        if self.fail_persist_from.is_some_and(|from| call >= from) {
            return Err(failure("injected fault".to_string()));
        }
        if len == 0 {
            return Ok(());
        }
        match PersistenceDomain::of(self.backend).flush {
            FlushMethod::None => Ok(()),
            FlushMethod::CacheLineFlush => {
                self.flush_cache_lines(offset, len);
                Ok(())
            }
            FlushMethod::Msync => self.msync(offset, len).map_err(|e| failure(e.to_string())),
            FlushMethod::Simulated => {
                self.copy_to_image(offset, len);
                Ok(())
            }
        }
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

    fn copy_to_image(&self, offset: usize, len: usize) {
        let start = offset / CACHE_LINE_SIZE_BYTES * CACHE_LINE_SIZE_BYTES;
        let end =
            ((offset + len).div_ceil(CACHE_LINE_SIZE_BYTES) * CACHE_LINE_SIZE_BYTES).min(self.len);
        let image = self
            .persisted_image
            .as_ref()
            .expect("simulated backend has an image");
        let mut image = image.lock().expect("image lock");
        // SAFETY: the caller of `persist` owns the piece covering [offset, offset+len) and holds
        // at least a shared borrow of it; pieces are cache-line aligned (segments and headers
        // are multiples of 64 bytes), so rounding to lines stays inside that piece.
        let live = unsafe { self.slice(start, end - start) };
        image[start..end].copy_from_slice(live);
    }

    /// The persisted image plus, for each cache line whose live bytes differ from it, the live
    /// line when `keep_unpersisted_line(line_index)` says so: what a power cut could leave.
    pub(crate) fn crash_image(
        &self,
        keep_unpersisted_line: &mut dyn FnMut(usize) -> bool,
    ) -> Vec<u8> {
        let image = self
            .persisted_image
            .as_ref()
            .expect("only simulated pools make crash images");
        let mut out = image.lock().expect("image lock").clone();
        // SAFETY: crash images are taken by tests while no handle is writing (they hold `&Pool`
        // and the engine is quiescent); reading the whole mapping is then race-free.
        let live = unsafe { self.slice(0, self.len) };
        for (index, (persisted, current)) in out
            .chunks_exact_mut(CACHE_LINE_SIZE_BYTES)
            .zip(live.chunks_exact(CACHE_LINE_SIZE_BYTES))
            .enumerate()
        {
            if persisted != current && keep_unpersisted_line(index) {
                persisted.copy_from_slice(current);
            }
        }
        out
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
