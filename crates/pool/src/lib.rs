//! The strata data pool: one contiguous mapping cut into fixed-size segments.
//!
//! A pool lives in anonymous DRAM (the default), in a file on a DAX filesystem (PMem or CXL
//! memory mapped with `MAP_SYNC`), in a file on tmpfs, or in an ordinary file. This crate maps
//! it, validates its header, tells what survives what (its [`PersistenceDomain`]) and offers
//! `persist(range)`. It is the only crate of strata with `unsafe` code, all of it about the
//! mapping.
//!
//! ```text
//!  pool offset 0        4096                      data_offset
//!  +-------------------+-------------------------+-----------+-----------+-----+
//!  | header page       | segment header table    | segment 0 | segment 1 | ... |
//!  | geometry, state,  | 64 B per segment,       | segment_size_bytes each     |
//!  | engine root area  | owned with its segment  |                             |
//!  +-------------------+-------------------------+-----------+-----------+-----+
//! ```
//!
//! Nothing in the pool is a pointer: the engine stores segment ids and offsets, so a pool can be
//! mapped at another address on the next start. The exact format is `docs/POOL_FORMAT.md`.
//!
//! Ownership: [`Pool::open`] returns the pool; [`Pool::take_segments`] hands out one
//! [`Segment`] per segment (its header line and its data), and [`Pool::take_root`] the engine's
//! [`RootArea`]. Each piece has exactly one owner, so reads go through `&` and writes through
//! `&mut` with no locking in this crate; the engine decides how to share them between threads.

mod error;
mod header;
mod mapping;
mod medium;
mod sidecar;
mod tables;
pub mod testing;
mod uring;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use error::{PersistError, PoolError};
pub use header::{
    Geometry, HeaderInfo, HeaderState, FORMAT_VERSION, HEADER_SIZE_BYTES, MAGIC, ROOT_SIZE_BYTES,
    SEGMENT_HEADER_SIZE_BYTES,
};
pub use mapping::{Backend, FlushMethod, PersistObserver, PersistenceDomain};
pub mod size;
pub use medium::{AlignedBuf, DirectFile, IoEngine, Medium, MediumError, DIRECT_BLOCK_SIZE_BYTES};
pub use size::ByteSize;
pub use tables::{
    ControlHeader, IndexFiles, LineTable, TableKind, TableObserver, SEGMENT_BOOK_SIZE_BYTES,
};
pub use uring::{ReadDone, ReadRing};

use mapping::Mapping;

/// Size of a CPU cache line, the unit of flushing and of crash images.
pub const CACHE_LINE_SIZE_BYTES: usize = 64;
/// Smallest segment: one page.
pub const SEGMENT_SIZE_BYTES_MIN: u64 = 4096;
/// Largest segment.
pub const SEGMENT_SIZE_BYTES_MAX: u64 = 1 << 30;
/// Default segment size, as in Segcache.
pub const SEGMENT_SIZE_BYTES_DEFAULT: u64 = 1 << 20;
/// Most segments a pool may have.
pub const SEGMENT_COUNT_MAX: u64 = 1 << 24;

/// Where the pool lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// Anonymous memory (the default).
    Dram,
    /// A file; DAX is used when the filesystem supports `MAP_SYNC`.
    File(PathBuf),
    /// Anonymous memory whose persists a test's power-failure simulator watches (tests only).
    Simulated(Arc<testing::SimulatedPersistence>),
}

/// What to do when the file already holds a pool, or holds something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Reopen a valid pool with the same geometry; create one when the file is missing or empty.
    /// A file with other content is refused, never overwritten.
    OpenOrCreate,
    /// Discard whatever the file holds and create a new pool (the operator's explicit choice).
    Fresh,
}

/// How to open a pool.
#[derive(Debug)]
pub struct PoolOptions {
    /// Where the bytes live.
    pub location: Location,
    /// Segment size and count.
    pub geometry: Geometry,
    /// Reopen or start fresh.
    pub mode: OpenMode,
}

/// Whether the pool was made now or found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// A new, zeroed pool.
    Created,
    /// An existing pool, with the state line as the previous process left it.
    Reopened {
        /// What the previous owner left in the state line.
        previous: HeaderState,
        /// True when the previous owner ran under the same kernel boot as us: a process crash
        /// rather than a reboot or power loss.
        same_boot: bool,
    },
}

impl Opened {
    /// Whether every store the previous owner made is in the pool: it closed cleanly (which
    /// persisted them) or it crashed on this kernel boot (page cache or DAX media kept them),
    /// or there was no previous owner. False after a power loss or reboot that followed an
    /// unclean stop.
    pub fn stores_kept(self) -> bool {
        match self {
            Opened::Created => true,
            Opened::Reopened {
                previous,
                same_boot,
            } => previous.clean || same_boot,
        }
    }
}

/// Checks that a geometry is within the format's limits.
pub fn validate_geometry(geometry: Geometry) -> Result<(), PoolError> {
    let size = geometry.segment_size_bytes;
    if !(SEGMENT_SIZE_BYTES_MIN..=SEGMENT_SIZE_BYTES_MAX).contains(&size)
        || !size.is_multiple_of(4096)
    {
        return Err(PoolError::InvalidGeometry {
            reason: "segment size must be a multiple of 4 KiB between 4 KiB and 1 GiB",
        });
    }
    if geometry.segment_count == 0 || geometry.segment_count > SEGMENT_COUNT_MAX {
        return Err(PoolError::InvalidGeometry {
            reason: "segment count must be 1..=2^24",
        });
    }
    if usize::try_from(geometry.pool_size_bytes()).is_err() {
        return Err(PoolError::InvalidGeometry {
            reason: "pool larger than the address space",
        });
    }
    Ok(())
}

/// An open pool.
pub struct Pool {
    mapping: Arc<Mapping>,
    info: HeaderInfo,
    opened: Opened,
    state: HeaderState,
    segments_taken: bool,
    root_taken: bool,
    /// The length a pool file cut short was found at (see [`Pool::cut_at`]).
    cut_at: Option<u64>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("backend", &self.backend())
            .field("path", &self.mapping.path)
            .field("info", &self.info)
            .field("opened", &self.opened)
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// Creates or reopens a pool. A reopened pool's state line is marked not-clean with the
    /// current boot id before this returns, so a crash from now on is recognised as one.
    pub fn open(options: PoolOptions) -> Result<Pool, PoolError> {
        validate_geometry(options.geometry)?;
        let len = options.geometry.pool_size_bytes() as usize;
        let (mapping, existing) = match &options.location {
            Location::Dram => (Mapping::anonymous(len, None)?, false),
            Location::Simulated(simulation) => {
                let observer: Arc<dyn PersistObserver> = simulation.clone();
                (Mapping::anonymous(len, Some(observer))?, false)
            }
            Location::File(path) => {
                let (mapping, existing, cut_at) = open_file(path, options.geometry, options.mode)?;
                let mut pool = Self::finish_open(mapping, existing, Some(options.geometry))?;
                pool.cut_at = cut_at;
                return Ok(pool);
            }
        };
        Self::finish_open(mapping, existing, Some(options.geometry))
    }

    /// For a pool file found shorter than its header describes: the length it had. It was
    /// extended back; the segments' bytes past that length read as zeros (their records are
    /// lost, and recovery or the scrub counts them as damage).
    pub fn cut_at(&self) -> Option<u64> {
        self.cut_at
    }

    /// Opens a simulated pool from a crash image made by
    /// [`testing::SimulatedPersistence::crash_image`], watched by `simulation` from now on (its
    /// persisted bytes start as the image). The image is taken to be what a power loss left:
    /// `opened()` reports another boot.
    pub fn open_image(
        image: &[u8],
        simulation: Arc<testing::SimulatedPersistence>,
    ) -> Result<Pool, PoolError> {
        let mapping = Mapping::from_image(image, simulation)?;
        let mut pool = Self::finish_open(mapping, true, None)?;
        if let Opened::Reopened { previous, .. } = pool.opened {
            pool.opened = Opened::Reopened {
                previous,
                same_boot: false,
            };
        }
        Ok(pool)
    }

    /// Opens a simulated pool as a process crash on this boot leaves it: the mapping holds
    /// `live` (every store the crashed process made, as the page cache or the DAX media's
    /// caches keep them) while the media hold only `persisted`, both images of one pool from
    /// [`testing::SimulatedPersistence::crash_image`] (keeping every unpersisted line, and
    /// none). `opened()` reports the same boot, and a power cut later in the new session
    /// loses what neither session persisted.
    pub fn open_image_after_process_crash(
        live: &[u8],
        persisted: &[u8],
        simulation: Arc<testing::SimulatedPersistence>,
    ) -> Result<Pool, PoolError> {
        assert_eq!(live.len(), persisted.len(), "two images of one pool");
        let mapping = Mapping::from_image(live, simulation.clone())?;
        simulation.set_persisted(persisted);
        let pool = Self::finish_open(mapping, true, None)?;
        debug_assert!(pool.opened.stores_kept(), "an image of this boot's pool");
        Ok(pool)
    }

    fn finish_open(
        mut mapping: Mapping,
        existing: bool,
        wanted: Option<Geometry>,
    ) -> Result<Pool, PoolError> {
        let len = mapping.len() as u64;
        let page = &mut mapping.bytes_mut_at_open()[..HEADER_SIZE_BYTES];
        if !existing {
            let geometry = wanted.expect("a new pool has a configured geometry");
            header::write_new(page, geometry, unix_secs_now(), random_u64());
        }
        let (info, previous) = header::validate(page, len)?;
        let boot_id = current_boot_id();
        let opened = if existing {
            if let Some(wanted) = wanted.filter(|w| *w != info.geometry) {
                return Err(PoolError::GeometryMismatch {
                    file_segment_size_bytes: info.geometry.segment_size_bytes,
                    file_segment_count: info.geometry.segment_count,
                    segment_size_bytes: wanted.segment_size_bytes,
                    segment_count: wanted.segment_count,
                });
            }
            Opened::Reopened {
                previous,
                same_boot: previous.boot_id == boot_id,
            }
        } else {
            Opened::Created
        };
        let state = HeaderState {
            state_seq: previous.state_seq + 1,
            clean: false,
            boot_id,
        };
        header::write_state(page, state);
        let pool = Pool {
            mapping: Arc::new(mapping),
            info,
            opened,
            state,
            segments_taken: false,
            root_taken: false,
            cut_at: None,
        };
        // A new file reads as zeroes past its header (set_len), so only the header page and the
        // segment table need persisting; a reopened pool changed only its state line.
        let persist_len = if existing {
            HEADER_SIZE_BYTES
        } else {
            pool.info.geometry.data_offset() as usize
        };
        pool.persist_range(0, persist_len)
            .map_err(|e| PoolError::Io {
                op: "persist header",
                path: pool.path(),
                message: e.message,
            })?;
        Ok(pool)
    }

    /// This session's pool state sequence number (a clean close writes the next one).
    pub fn state_seq(&self) -> u64 {
        self.state.state_seq
    }

    /// Header fields as validated at open.
    pub fn info(&self) -> &HeaderInfo {
        &self.info
    }

    /// Segment size and count.
    pub fn geometry(&self) -> Geometry {
        self.info.geometry
    }

    /// Whether the pool was created now or reopened, and how the previous owner left it.
    pub fn opened(&self) -> Opened {
        self.opened
    }

    /// The backend found at open.
    pub fn backend(&self) -> Backend {
        self.mapping.backend
    }

    /// What survives what on this pool.
    pub fn domain(&self) -> PersistenceDomain {
        PersistenceDomain::of(self.mapping.backend)
    }

    /// The file path, or `(anonymous)`.
    pub fn path(&self) -> PathBuf {
        self.mapping.path.clone()
    }

    /// Hands out every segment, once. Panics if called twice: each segment has one owner.
    pub fn take_segments(&mut self) -> Vec<Segment> {
        assert!(!self.segments_taken, "segments are handed out once");
        self.segments_taken = true;
        let geometry = self.info.geometry;
        (0..geometry.segment_count)
            .map(|id| {
                let id = u32::try_from(id).expect("segment count ≤ 2^24");
                let (header_offset, data_offset) = geometry.segment_offsets(id);
                Segment {
                    id,
                    header_offset,
                    data_offset,
                    data_len: geometry.segment_size_bytes as usize,
                    mapping: Arc::clone(&self.mapping),
                }
            })
            .collect()
    }

    /// Hands out the engine's root area, once.
    pub fn take_root(&mut self) -> RootArea {
        assert!(!self.root_taken, "the root area is handed out once");
        self.root_taken = true;
        RootArea {
            mapping: Arc::clone(&self.mapping),
        }
    }

    /// Marks the pool cleanly closed (or not) and persists the state line. The engine marks it
    /// clean only after everything it needs on the next start has been persisted.
    pub fn set_clean(&mut self, clean: bool) -> Result<(), PersistError> {
        self.state = HeaderState {
            state_seq: self.state.state_seq + 1,
            clean,
            ..self.state
        };
        // SAFETY: the header page is owned by `Pool` (never handed out) and `&mut self` makes
        // this the only access to it.
        let page = unsafe { self.mapping.slice_mut(0, HEADER_SIZE_BYTES) };
        header::write_state(page, self.state);
        self.persist_range(0, HEADER_SIZE_BYTES)
    }

    /// Closes the pool cleanly: persists every byte, writes `sidecar` (the engine's saved DRAM
    /// state, e.g. its index) next to a file pool bound to this exact clean state, then marks the
    /// pool clean. A sidecar is only ever read back by the next open of this pool in this state.
    pub fn close_clean(&mut self, sidecar: Option<&[u8]>) -> Result<(), PoolError> {
        let path = self.path();
        self.persist_all().map_err(|e| PoolError::Io {
            op: "persist",
            path: path.clone(),
            message: e.message,
        })?;
        if let (Some(payload), Some(sidecar_path)) = (sidecar, self.sidecar_path()) {
            let clean_state_seq = self.state.state_seq + 1;
            sidecar::write(&sidecar_path, self.info.pool_id, clean_state_seq, payload)?;
        }
        self.set_clean(true).map_err(|e| PoolError::Io {
            op: "persist header",
            path,
            message: e.message,
        })
    }

    /// At open: the sidecar saved by the clean close this pool was reopened from, if it is there
    /// and valid; else why it was not used (`Err(None)`: there was none). The file is removed
    /// either way (the pool is about to change).
    pub fn take_sidecar(&mut self) -> Result<Vec<u8>, Option<&'static str>> {
        let path = self.sidecar_path().ok_or(None)?;
        let Opened::Reopened { previous, .. } = self.opened else {
            let _ = std::fs::remove_file(&path);
            return Err(None);
        };
        let payload = if previous.clean {
            sidecar::read(&path, self.info.pool_id, previous.state_seq)
        } else {
            // A sidecar of a pool that did not close cleanly is from an earlier clean close.
            Err(path
                .exists()
                .then_some("the pool did not close cleanly since"))
        };
        let _ = std::fs::remove_file(&path);
        payload
    }

    /// Whether a clean close keeps a sidecar: only a file pool can be reopened to read one.
    pub fn keeps_sidecar(&self) -> bool {
        self.sidecar_path().is_some()
    }

    fn sidecar_path(&self) -> Option<PathBuf> {
        self.backend().is_file().then(|| {
            let mut name = self.mapping.path.as_os_str().to_owned();
            name.push(".sidecar");
            PathBuf::from(name)
        })
    }

    /// A handle that persists the whole pool: for plain-file pools, where one `msync` over
    /// the mapping (the kernel writes only dirty pages) is far cheaper than one per range.
    pub fn persister(&self) -> Persister {
        Persister {
            mapping: Arc::clone(&self.mapping),
        }
    }

    /// A handle that populates the pool's page tables (file pools; `None` for DRAM, where it would
    /// allocate the whole budget). It holds the pool only while populating a chunk.
    pub fn populator(&self) -> Option<Populator> {
        self.backend().is_file().then(|| Populator {
            mapping: Arc::downgrade(&self.mapping),
            len: self.mapping.len(),
        })
    }

    /// Persists the whole pool (used before a clean close).
    pub fn persist_all(&self) -> Result<(), PersistError> {
        self.persist_range(0, self.mapping.len())
    }

    fn persist_range(&self, offset: usize, len: usize) -> Result<(), PersistError> {
        self.mapping.persist(offset, len)
    }

    /// A copy of the pool's live bytes, as a process crash (no power loss) would leave them;
    /// for a simulated pool, what [`testing::SimulatedPersistence::crash_image`] starts from.
    /// Tests only: the engine must be quiescent while this runs.
    pub fn live_image(&self) -> Vec<u8> {
        self.mapping.live_copy()
    }
}

/// One cache line of eight atomic words: the unit of DRAM tables such as the engine's index.
#[repr(C, align(64))]
#[derive(Default, Debug)]
pub struct AtomicLine(pub [std::sync::atomic::AtomicU64; 8]);

const _: () = assert!(std::mem::size_of::<AtomicLine>() == CACHE_LINE_SIZE_BYTES);

/// Hints the CPU to start loading the cache line holding `value` (used to overlap the index
/// misses of a batch during recovery). A hint only: it never faults and changes nothing.
#[inline]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint that never faults and never writes memory; `value` is a valid
    // reference anyway. SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch(
            (value as *const T).cast::<i8>(),
            std::arch::x86_64::_MM_HINT_T0,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Takes a shared `flock` on `file` without waiting: false while another process (a server,
/// which locks its pool and flash medium exclusively) holds it exclusively. Offline checkers
/// take it so that no server writes what they read.
pub fn try_lock_shared(file: &File) -> bool {
    // SAFETY: flock on a descriptor the caller owns; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    rc == 0
}

/// A pool file opened read-only for offline inspection (`strata pool inspect|verify`): the
/// header is validated, segments are readable, nothing is ever written.
pub struct PoolFile {
    map: memmap2::Mmap,
    info: HeaderInfo,
    state: HeaderState,
    _lock: File,
}

impl PoolFile {
    /// Opens `path` read-only. Refused with `Locked` while a server has the pool open.
    pub fn open(path: &Path) -> Result<PoolFile, PoolError> {
        let file = File::open(path).map_err(|e| io_err("open", path, e))?;
        if !try_lock_shared(&file) {
            return Err(PoolError::Locked {
                path: path.to_path_buf(),
            });
        }
        // SAFETY: a read-only private mapping of a file we hold a shared lock on: a strata server
        // takes the lock exclusively before mapping, so none writes the file while we read it.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_err("mmap", path, e))?;
        let (info, state) =
            header::validate(&map[..HEADER_SIZE_BYTES.min(map.len())], map.len() as u64)?;
        Ok(PoolFile {
            map,
            info,
            state,
            _lock: file,
        })
    }

    /// Header fields.
    pub fn info(&self) -> &HeaderInfo {
        &self.info
    }

    /// The state line.
    pub fn state(&self) -> HeaderState {
        self.state
    }

    /// The engine's root area.
    pub fn root(&self) -> &[u8] {
        &self.map[header::ROOT_OFFSET..header::ROOT_OFFSET + ROOT_SIZE_BYTES]
    }

    /// Segment `id`'s header line and data.
    pub fn segment(&self, id: u32) -> (&[u8], &[u8]) {
        let (header_at, data_at) = self.info.geometry.segment_offsets(id);
        let size = self.info.geometry.segment_size_bytes as usize;
        (
            &self.map[header_at..header_at + SEGMENT_HEADER_SIZE_BYTES],
            &self.map[data_at..data_at + size],
        )
    }
}

/// Lowers the calling thread's scheduling priority to the least (nice 19), for background work
/// (populating, scrubbing) that request handling should win every contest with.
pub fn lower_thread_priority() {
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// Populates a file pool's page tables from another thread, a chunk at a time (see
/// [`Pool::populator`]).
pub struct Populator {
    mapping: std::sync::Weak<Mapping>,
    len: usize,
}

impl Populator {
    /// Bytes populated between two looks at `stop`.
    const CHUNK_BYTES: usize = 64 << 20;

    /// Populates the whole pool from the calling thread, first lowering its priority to the
    /// least (nice 19) so that request handling gets the core whenever both want it. Returns
    /// early once `stop` is set or the pool is gone (its last handle dropped: the file lock is
    /// released with it); the pool is held only while a chunk is populated.
    pub fn run(&self, stop: &std::sync::atomic::AtomicBool) {
        lower_thread_priority();
        for offset in (0..self.len).step_by(Self::CHUNK_BYTES) {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            let Some(mapping) = self.mapping.upgrade() else {
                return;
            };
            mapping.populate(offset, Self::CHUNK_BYTES.min(self.len - offset));
        }
    }
}

/// Persists a whole pool from any thread (see [`Pool::persister`]).
pub struct Persister {
    mapping: Arc<Mapping>,
}

impl Persister {
    /// Makes every written byte of the pool durable. Only for backends whose flush reads no
    /// memory in user space (`FlushMethod::Msync`, `FlushMethod::None`): with them, other
    /// threads writing meanwhile is harmless.
    pub fn persist_all(&self) -> Result<(), PersistError> {
        let flush = PersistenceDomain::of(self.mapping.backend).flush;
        assert!(
            matches!(flush, FlushMethod::Msync | FlushMethod::None),
            "whole-pool persist of a {flush:?} pool"
        );
        self.mapping.persist(0, self.mapping.len())
    }
}

/// An I/O error on `path` during `op`.
pub(crate) fn io_err(op: &'static str, path: &Path, err: std::io::Error) -> PoolError {
    PoolError::Io {
        op,
        path: path.to_path_buf(),
        message: err.to_string(),
    }
}

/// Reserves the blocks of `file`'s first `len` bytes (`posix_fallocate`), so that stores
/// through a shared mapping of it never need the file system to find space: on a full file
/// system such a store is a SIGBUS, which no error handling can turn into a refused write.
/// Reserving what is already allocated costs nothing.
pub(crate) fn reserve(file: &File, len: u64, path: &Path) -> Result<(), PoolError> {
    // A file whose blocks are all allocated already (every restart after the first) needs no
    // call: on tmpfs a fallocate of a large file walks every page, tens of ms per GiB.
    let allocated = file
        .metadata()
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m).saturating_mul(512))
        .unwrap_or(0);
    if allocated >= len {
        return Ok(());
    }
    let Ok(len_signed) = libc::off_t::try_from(len) else {
        return Err(PoolError::InvalidGeometry {
            reason: "file larger than the platform's file offsets",
        });
    };
    // SAFETY: posix_fallocate takes a descriptor we own and two integers; no memory of ours.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len_signed) };
    if rc == 0 {
        return Ok(());
    }
    Err(PoolError::NoSpace {
        path: path.to_path_buf(),
        bytes: len,
        message: std::io::Error::from_raw_os_error(rc).to_string(),
    })
}

/// The geometry an existing pool file's header describes, if its header is sound.
fn header_geometry(file: &File) -> Option<Geometry> {
    let mut page = vec![0u8; HEADER_SIZE_BYTES];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut page, 0).ok()?;
    header::described_geometry(&page)
}

/// Opens (or creates) the file, takes its lock and maps it. Returns whether it held a pool,
/// and, for a pool file cut short, the length it was found at (it is extended back to the
/// length its header describes: what was cut is lost, the rest is served).
///
/// Every byte of the file is reserved before it is mapped (see [`reserve`]). A new file that
/// cannot be reserved is removed again; an existing one is refused.
fn open_file(
    path: &Path,
    geometry: Geometry,
    mode: OpenMode,
) -> Result<(Mapping, bool, Option<u64>), PoolError> {
    let created = !path.exists();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_err("open", path, e))?;
    lock_exclusive(&file, path)?;
    let found_len = file.metadata().map_err(|e| io_err("stat", path, e))?.len();
    let existing = found_len > 0 && mode == OpenMode::OpenOrCreate;
    if existing && found_len < HEADER_SIZE_BYTES as u64 {
        return Err(PoolError::Truncated {
            expected_bytes: geometry.pool_size_bytes(),
            found_bytes: found_len,
        });
    }
    let described_geometry = existing.then(|| header_geometry(&file)).flatten();
    // A pool of another shape than configured is refused before anything is extended or
    // reserved: a header describing a pool far larger than its file must not grow the file
    // (and fill its file system or memory) only to be refused afterwards.
    if let Some(found) = described_geometry.filter(|found| *found != geometry) {
        return Err(PoolError::GeometryMismatch {
            file_segment_size_bytes: found.segment_size_bytes,
            file_segment_count: found.segment_count,
            segment_size_bytes: geometry.segment_size_bytes,
            segment_count: geometry.segment_count,
        });
    }
    let described = described_geometry.map(|g| g.pool_size_bytes());
    let cut_at = described.filter(|&len| found_len < len).map(|_| found_len);
    let len = match (existing, described) {
        // A pool cut short keeps what is left; validation reports anything else wrong.
        (true, Some(len)) if found_len < len => len,
        (true, _) => found_len,
        (false, _) => {
            file.set_len(0).map_err(|e| io_err("truncate", path, e))?;
            geometry.pool_size_bytes()
        }
    };
    if let Err(err) = file
        .set_len(len.max(found_len))
        .map_err(|e| io_err("set length", path, e))
        .and_then(|()| reserve(&file, len, path))
    {
        if created {
            let _ = std::fs::remove_file(path);
        }
        return Err(err);
    }
    let len = usize::try_from(len).map_err(|_| PoolError::InvalidGeometry {
        reason: "pool larger than the address space",
    })?;
    let mapping = Mapping::file(file, path.to_path_buf(), len)?;
    Ok((mapping, existing, cut_at))
}

/// How long an open waits for a pool or flash file's lock to be released. The lock of a
/// process that was just killed can outlive it briefly: a file an io_uring instance holds is
/// let go by the kernel after the process is reaped, so a restart right after a `kill -9`
/// (a supervisor, a kill loop) could otherwise be told the file is in use.
const LOCK_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) fn lock_exclusive(file: &File, path: &Path) -> Result<(), PoolError> {
    lock_exclusive_within(file, path, LOCK_WAIT_MAX)
}

/// Takes an exclusive `flock` on `file`, retrying for up to `wait` while another holds it.
fn lock_exclusive_within(
    file: &File,
    path: &Path,
    wait: std::time::Duration,
) -> Result<(), PoolError> {
    const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(10);
    let deadline = std::time::Instant::now() + wait;
    loop {
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(PoolError::Locked {
                path: path.to_path_buf(),
            });
        }
        std::thread::sleep(RETRY_EVERY);
    }
}

/// The kernel's boot id, or zeroes where it cannot be read.
pub fn current_boot_id() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks_exact(2).take(16).enumerate() {
        let digits = std::str::from_utf8(pair).unwrap_or("00");
        id[i] = u8::from_str_radix(digits, 16).unwrap_or(0);
    }
    id
}

fn unix_secs_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .elapsed()
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// One segment: its 64-byte header line in the segment table and its data.
///
/// A `Segment` is the only handle to those bytes. `&Segment` reads them, `&mut Segment` writes
/// them; `persist_*` make written bytes durable on the pool's backend.
pub struct Segment {
    id: u32,
    header_offset: usize,
    data_offset: usize,
    data_len: usize,
    mapping: Arc<Mapping>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Segment {
    /// The segment's index in the pool.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The data bytes.
    pub fn data(&self) -> &[u8] {
        // SAFETY: this handle is the only owner of [data_offset, +data_len) (handed out once by
        // `take_segments`), and `&self` excludes writers through `&mut self`.
        unsafe { self.mapping.slice(self.data_offset, self.data_len) }
    }

    /// The data bytes, for writing.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`, and `&mut self` makes this the only access.
        unsafe { self.mapping.slice_mut(self.data_offset, self.data_len) }
    }

    /// The header line.
    pub fn header(&self) -> &[u8] {
        // SAFETY: the header line is owned by this handle alone (see `data`).
        unsafe {
            self.mapping
                .slice(self.header_offset, SEGMENT_HEADER_SIZE_BYTES)
        }
    }

    /// The header line, for writing.
    pub fn header_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `header`, and `&mut self` makes this the only access.
        unsafe {
            self.mapping
                .slice_mut(self.header_offset, SEGMENT_HEADER_SIZE_BYTES)
        }
    }

    /// Persists `len` data bytes starting at `offset` within the segment.
    pub fn persist_data(&self, offset: usize, len: usize) -> Result<(), PersistError> {
        assert!(
            offset + len <= self.data_len,
            "persist range inside the segment"
        );
        self.mapping.persist(self.data_offset + offset, len)
    }

    /// Persists the header line.
    pub fn persist_header(&self) -> Result<(), PersistError> {
        self.mapping
            .persist(self.header_offset, SEGMENT_HEADER_SIZE_BYTES)
    }

    /// Zeroes the data bytes. On DRAM the pages are returned to the OS (and read as zero after);
    /// elsewhere zeroes are written and persisted.
    pub fn zero_data(&mut self) -> Result<(), PersistError> {
        if self.mapping.discard(self.data_offset, self.data_len) {
            return Ok(());
        }
        self.data_mut().fill(0);
        self.persist_data(0, self.data_len)
    }

    /// Returns the data pages to the OS where the backend allows it (DRAM): used when the index
    /// takes this segment's share of the memory budget. Returns false when it cannot.
    pub fn release_memory(&mut self) -> bool {
        self.mapping.discard(self.data_offset, self.data_len)
    }
}

/// The engine's root area: [`ROOT_SIZE_BYTES`] in the header page, in the engine's own format.
pub struct RootArea {
    mapping: Arc<Mapping>,
}

impl RootArea {
    /// The root bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the root area is owned by this handle alone (handed out once).
        unsafe { self.mapping.slice(header::ROOT_OFFSET, ROOT_SIZE_BYTES) }
    }

    /// The root bytes, for writing.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only access.
        unsafe { self.mapping.slice_mut(header::ROOT_OFFSET, ROOT_SIZE_BYTES) }
    }

    /// Persists the root area.
    pub fn persist(&self) -> Result<(), PersistError> {
        self.mapping.persist(header::ROOT_OFFSET, ROOT_SIZE_BYTES)
    }
}

#[cfg(test)]
mod tests;
