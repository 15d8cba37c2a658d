//! Media: the one small interface every place strata keeps bytes offers the tiers above it, in
//! the spirit of redb's `StorageBackend` and nbdkit's plugin table.
//!
//! ```text
//!   flash tier, block cache ──► dyn Medium: read_at, write_at, persist, discard, len
//!                                   ├── DirectFile   a file or block device, O_DIRECT
//!                                   └── testing::SimulatedMedium<M>  (tests: power cuts,
//!                                        torn and lost sector writes, failing and slow I/O)
//! ```
//!
//! The contract, per method:
//! - `read_at(offset, buf)`: fills `buf` with the bytes at `[offset, offset + buf.len())`, or
//!   fails and leaves `buf` unspecified. Reads see every write that returned before they began.
//! - `read_many(reads)`: each `(offset, buf)` as `read_at` would, with one result per read, in
//!   order; a medium may have all of them in flight at once (io_uring: one submission).
//! - `write_at(offset, data)`: stores `data`; after it returns, reads see it, but only a
//!   `persist` covering it makes it survive a power loss. A failed write leaves the range's old
//!   or new bytes, sector by sector, in any mix: the caller must not trust that range until it
//!   has rewritten it.
//! - `persist(offset, len)`: makes every write into the range that returned before the call
//!   durable. On failure nothing is promised about the range, and the caller must assume the
//!   medium's durability is void (the engine latches writes off).
//! - `discard(offset, len)`: the range's content is no longer needed; it reads as zeros or as
//!   its old bytes. A hint: media that cannot discard return `Ok`.
//!
//! Offsets, lengths and buffer addresses must be multiples of [`Medium::block_size_bytes`]
//! (4 KiB for direct I/O), or for reads of [`Medium::read_align_bytes`] (the device's direct-I/O
//! alignment, often 512); [`AlignedBuf`] provides such buffers.
//! No call may ask the caller to retry: a medium that is behind is the tier's business (it
//! keeps items in memory or drops them), not the medium's.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::PersistError;
use crate::mapping::{FlushMethod, PersistenceDomain};

/// Why a medium call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MediumError {
    /// The range lies (partly) past the medium's end.
    #[error("range {offset}+{len} past the medium's {medium_len} bytes")]
    OutOfRange {
        /// Start of the range.
        offset: u64,
        /// Its length.
        len: u64,
        /// The medium's length.
        medium_len: u64,
    },
    /// An offset, length or buffer address is not a multiple of the medium's block size.
    #[error("offset {offset}, length {len} or buffer not aligned to {block} bytes")]
    Misaligned {
        /// Start of the range.
        offset: u64,
        /// Its length.
        len: u64,
        /// The alignment the medium needs.
        block: usize,
    },
    /// The operating system refused or failed the call.
    #[error("{op} of {path}: {message}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or device.
        path: PathBuf,
        /// The OS error text.
        message: String,
        /// The OS error number, where there is one (`ENOSPC` tells a full disk from a failure).
        os_error: Option<i32>,
    },
}

/// A store of bytes (see the module documentation for the contract of each method).
pub trait Medium: Send + Sync + std::fmt::Debug {
    /// Bytes the medium holds.
    fn len_bytes(&self) -> u64;
    /// What survives what.
    fn domain(&self) -> PersistenceDomain;
    /// The alignment of offsets, lengths and buffers.
    fn block_size_bytes(&self) -> usize;
    /// The alignment reads accept (offsets, lengths and buffers), a divisor of
    /// [`Medium::block_size_bytes`]: a direct-I/O file on a disk of 512-byte sectors reads
    /// 512-byte pieces, so a small record costs one short read instead of a whole 4 KiB block
    /// or two. By default the block size.
    fn read_align_bytes(&self) -> usize {
        self.block_size_bytes()
    }
    /// Whether I/O bypasses the page cache (O_DIRECT), for stats and logs.
    fn is_direct(&self) -> bool;
    /// Reads `buf.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError>;
    /// Reads each `(offset, buf)`, as [`Medium::read_at`] would, all in flight at once where the
    /// medium can; one result per read, in order. By default, one read after another.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MediumError>> {
        read_each(self, reads)
    }
    /// Writes `data` at `offset`.
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError>;
    /// Makes the writes into `[offset, offset + len)` durable.
    fn persist(&self, offset: u64, len: u64) -> Result<(), PersistError>;
    /// Drops the content of `[offset, offset + len)`.
    fn discard(&self, offset: u64, len: u64) -> Result<(), MediumError>;

    /// How reads and writes reach the medium, for logs and stats (`io_uring`, `pread`, ...).
    fn io_engine(&self) -> &'static str {
        "memory"
    }

    /// A duplicate of the descriptor to read the medium through with one's own io_uring (a
    /// [`crate::ReadRing`]): offsets and lengths as for `read_at`. `None` where reads do not go
    /// through io_uring (memory media, the `pread` fallback); then use `read_at`/`read_many`.
    fn read_file(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
}

/// [`Medium::read_many`] as one `read_at` after another.
fn read_each<M: Medium + ?Sized>(
    medium: &M,
    reads: &mut [(u64, &mut [u8])],
) -> Vec<Result<(), MediumError>> {
    reads
        .iter_mut()
        .map(|(offset, buf)| medium.read_at(*offset, buf))
        .collect()
}

/// Checks a call's range and alignment against a medium's.
pub(crate) fn check_range(
    medium_len: u64,
    block: usize,
    offset: u64,
    len: usize,
    address: usize,
) -> Result<(), MediumError> {
    let len = len as u64;
    if offset.checked_add(len).is_none_or(|end| end > medium_len) {
        return Err(MediumError::OutOfRange {
            offset,
            len,
            medium_len,
        });
    }
    let block_u64 = block as u64;
    if !offset.is_multiple_of(block_u64)
        || !len.is_multiple_of(block_u64)
        || !address.is_multiple_of(block)
    {
        return Err(MediumError::Misaligned { offset, len, block });
    }
    Ok(())
}

/// A heap buffer whose address and length are multiples of an alignment (direct I/O needs
/// both). Zeroed at creation.
pub struct AlignedBuf {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (rounded up to `align`), aligned to `align` (a power of
    /// two, at most 64 KiB).
    pub fn zeroed(len: usize, align: usize) -> AlignedBuf {
        assert!(align.is_power_of_two() && align <= 1 << 16);
        let len = len.next_multiple_of(align);
        let bytes = vec![0u8; len + align];
        let start = bytes.as_ptr().align_offset(align);
        assert!(start < align, "a Vec<u8> can be offset to any alignment");
        AlignedBuf { bytes, start, len }
    }

    /// Shortens it to `len` bytes (its alignment stays): a read of fewer bytes than the
    /// alignment rounds to.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Makes it `len` bytes long again for another read, keeping its alignment and its bytes
    /// (not zeroed again: a read fills it whole or fails). False, unchanged, when it holds fewer
    /// than `len` bytes or is not aligned to `align`.
    pub fn reuse(&mut self, len: usize, align: usize) -> bool {
        let room = self.bytes.len() - self.start;
        if len > room || !self.as_ptr().addr().is_multiple_of(align) {
            return false;
        }
        self.len = len;
        true
    }

    /// The buffer's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

/// Direct I/O's alignment when the device does not say: the classic sector.
pub const DIRECT_BLOCK_SIZE_BYTES: usize = 4096;

/// A file or block device used through `pread`/`pwrite`, opened `O_DIRECT` when the file system
/// allows it (tmpfs does not; then the page cache is used and [`Medium::is_direct`] says so).
/// Held under an exclusive `flock` for its lifetime. A regular file is sized to the requested
/// length with every block reserved (`posix_fallocate`), so writes never find a full disk.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    path: PathBuf,
    len_bytes: u64,
    direct: bool,
    device: bool,
    engine: IoEngine,
    /// What reads must be aligned to ([`Medium::read_align_bytes`]): the kernel's direct-I/O
    /// alignment for this file, found at open.
    read_align_bytes: usize,
}

/// How a [`DirectFile`] reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoEngine {
    /// io_uring, one ring per thread (the default where the kernel allows it).
    Uring,
    /// `pread`/`pwrite` (the fallback, or asked for).
    Pread,
}

impl IoEngine {
    /// The name logs and stats use.
    pub fn name(self) -> &'static str {
        match self {
            IoEngine::Uring => "io_uring",
            IoEngine::Pread => "pread",
        }
    }

    /// io_uring where this process can set up a ring, else `pread` with the reason.
    pub fn best() -> (IoEngine, Option<&'static str>) {
        match crate::uring::probe() {
            Ok(()) => (IoEngine::Uring, None),
            Err(why) => (IoEngine::Pread, Some(why.as_str())),
        }
    }
}

impl DirectFile {
    /// Opens (creating if missing) `path` with `len_bytes` usable bytes: a regular file is
    /// created or resized to exactly that; a block device must hold at least that much.
    pub fn open(path: &Path, len_bytes: u64) -> Result<DirectFile, crate::PoolError> {
        Self::open_with(path, len_bytes, IoEngine::best().0)
    }

    /// Opens an existing file or block device as it is, at its own length: never created,
    /// resized or reserved (the block cache's backing store, whose bytes are the user's).
    pub fn open_existing(path: &Path, engine: IoEngine) -> Result<DirectFile, crate::PoolError> {
        let io = |op, e: std::io::Error| crate::io_err(op, path, e);
        let (file, direct, metadata) = Self::open_locked(path, false)?;
        let device = is_block_device(&metadata);
        let len_bytes = if device {
            block_device_size(&file).map_err(|e| io("size block device", e))?
        } else {
            if !metadata.is_file() {
                return Err(crate::PoolError::Io {
                    op: "open",
                    path: path.to_path_buf(),
                    message: "not a regular file or a block device".to_string(),
                });
            }
            metadata.len()
        };
        let read_align_bytes = read_alignment(&file, direct, device);
        Ok(DirectFile {
            file,
            path: path.to_path_buf(),
            len_bytes,
            direct,
            device,
            engine,
            read_align_bytes,
        })
    }

    /// Opens `path` read-write (creating it if `create`), `O_DIRECT` where the file system
    /// allows it, under an exclusive lock: the file, whether direct, and its metadata.
    fn open_locked(
        path: &Path,
        create: bool,
    ) -> Result<(File, bool, std::fs::Metadata), crate::PoolError> {
        let io = |op, e: std::io::Error| crate::io_err(op, path, e);
        let open = |direct: bool| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .custom_flags(if direct { libc::O_DIRECT } else { 0 })
                .open(path)
        };
        let (file, direct) = match open(true) {
            Ok(file) => (file, true),
            // EINVAL: the file system has no direct I/O (tmpfs).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open(false).map_err(|e| io("open", e))?, false)
            }
            Err(e) => return Err(io("open", e)),
        };
        crate::lock_exclusive(&file, path)?;
        let metadata = file.metadata().map_err(|e| io("stat", e))?;
        Ok((file, direct, metadata))
    }

    /// [`DirectFile::open`] with the I/O engine chosen (tests run both).
    pub fn open_with(
        path: &Path,
        len_bytes: u64,
        engine: IoEngine,
    ) -> Result<DirectFile, crate::PoolError> {
        let io = |op, e: std::io::Error| crate::io_err(op, path, e);
        let created = !path.exists();
        let (file, direct, metadata) = Self::open_locked(path, true)?;
        let device = is_block_device(&metadata);
        if device {
            let size = block_device_size(&file).map_err(|e| io("size block device", e))?;
            if size < len_bytes {
                return Err(crate::PoolError::Io {
                    op: "size block device",
                    path: path.to_path_buf(),
                    message: format!("{size} bytes, {len_bytes} asked for"),
                });
            }
        } else {
            let sized = if metadata.len() == len_bytes {
                Ok(())
            } else {
                file.set_len(len_bytes).map_err(|e| io("set length", e))
            };
            if let Err(err) = sized.and_then(|()| crate::reserve(&file, len_bytes, path)) {
                // A file this open made is not left behind, sized but without its blocks.
                if created {
                    let _ = std::fs::remove_file(path);
                }
                return Err(err);
            }
        }
        let read_align_bytes = read_alignment(&file, direct, device);
        Ok(DirectFile {
            file,
            path: path.to_path_buf(),
            len_bytes,
            direct,
            device,
            engine,
            read_align_bytes,
        })
    }

    /// The path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io_error(&self, op: &'static str, error: std::io::Error) -> MediumError {
        MediumError::Io {
            op,
            path: self.path.clone(),
            message: error.to_string(),
            os_error: error.raw_os_error(),
        }
    }
}

fn is_block_device(metadata: &std::fs::Metadata) -> bool {
    std::os::unix::fs::FileTypeExt::is_block_device(&metadata.file_type())
}

/// The smallest alignment (offsets, lengths and buffer addresses) direct reads of `file` accept:
/// the larger of the kernel's direct-I/O offset and memory alignments (`statx` with
/// `STATX_DIOALIGN`, Linux 6.1 on; a block device's logical sector size before that), kept
/// within 512 B..=4 KiB and a power of two, else [`DIRECT_BLOCK_SIZE_BYTES`]. Without direct
/// I/O (the page cache) any alignment does; 512 B keeps the reads' arithmetic one.
fn read_alignment(file: &File, direct: bool, device: bool) -> usize {
    const SECTOR_BYTES: usize = 512;
    if !direct {
        return SECTOR_BYTES;
    }
    let fits = |align: usize| {
        (align.is_power_of_two() && (SECTOR_BYTES..=DIRECT_BLOCK_SIZE_BYTES).contains(&align))
            .then_some(align)
    };
    let from_statx = dio_alignment(file).and_then(|(offset, memory)| fits(offset.max(memory)));
    let from_device = || {
        device
            .then(|| logical_sector_size(file).ok())
            .flatten()
            .and_then(fits)
    };
    from_statx
        .or_else(from_device)
        .unwrap_or(DIRECT_BLOCK_SIZE_BYTES)
}

/// `(offset, memory)` alignment of direct I/O on `file`, where the kernel says.
fn dio_alignment(file: &File) -> Option<(usize, usize)> {
    // SAFETY: statx is plain old data; all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: the descriptor is ours, the path is a valid empty C string (AT_EMPTY_PATH: the
    // descriptor itself is asked about) and `stx` is alive and writable for the call.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((
        stx.stx_dio_offset_align as usize,
        stx.stx_dio_mem_align as usize,
    ))
}

fn logical_sector_size(file: &File) -> std::io::Result<usize> {
    const BLKSSZGET: libc::c_ulong = 0x1268;
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at `size`, alive for
    // the call; the descriptor is ours.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut size as *mut libc::c_int) };
    if rc == 0 {
        usize::try_from(size).map_err(|_| std::io::Error::other("negative sector size"))
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn block_device_size(file: &File) -> std::io::Result<u64> {
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at `size`, alive for
    // the call; the descriptor is ours.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc == 0 {
        Ok(size)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Medium for DirectFile {
    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    fn domain(&self) -> PersistenceDomain {
        PersistenceDomain {
            survives_process_crash: true,
            survives_power_loss: true,
            flush: FlushMethod::Msync,
        }
    }

    fn block_size_bytes(&self) -> usize {
        DIRECT_BLOCK_SIZE_BYTES
    }

    fn read_align_bytes(&self) -> usize {
        self.read_align_bytes
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    fn io_engine(&self) -> &'static str {
        self.engine.name()
    }

    fn read_file(&self) -> Option<std::os::fd::OwnedFd> {
        if self.engine != IoEngine::Uring {
            return None;
        }
        self.file.try_clone().ok().map(std::os::fd::OwnedFd::from)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        let block = self.read_align_bytes;
        check_range(
            self.len_bytes,
            block,
            offset,
            buf.len(),
            buf.as_ptr() as usize,
        )?;
        match self.engine {
            IoEngine::Uring => crate::uring::read_exact_at(self.file.as_raw_fd(), buf, offset),
            IoEngine::Pread => self.file.read_exact_at(buf, offset),
        }
        .map_err(|e| self.io_error("read", e))
    }

    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Vec<Result<(), MediumError>> {
        if self.engine != IoEngine::Uring {
            return read_each(self, reads);
        }
        let block = self.read_align_bytes;
        // Reads that fail the checks are answered here; the others go to the ring together.
        let mut results: Vec<Result<(), MediumError>> = reads
            .iter()
            .map(|(offset, buf)| {
                check_range(
                    self.len_bytes,
                    block,
                    *offset,
                    buf.len(),
                    buf.as_ptr() as usize,
                )
            })
            .collect();
        let mut valid: Vec<(u64, &mut [u8])> = Vec::with_capacity(reads.len());
        let mut positions = Vec::with_capacity(reads.len());
        for (i, (offset, buf)) in reads.iter_mut().enumerate() {
            if results[i].is_ok() {
                valid.push((*offset, &mut buf[..]));
                positions.push(i);
            }
        }
        let done = crate::uring::read_many_exact_at(self.file.as_raw_fd(), &mut valid);
        for (i, result) in positions.into_iter().zip(done) {
            results[i] = result.map_err(|e| self.io_error("read", e));
        }
        results
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        let block = self.block_size_bytes();
        check_range(
            self.len_bytes,
            block,
            offset,
            data.len(),
            data.as_ptr() as usize,
        )?;
        match self.engine {
            IoEngine::Uring => crate::uring::write_all_at(self.file.as_raw_fd(), data, offset),
            IoEngine::Pread => self.file.write_all_at(data, offset),
        }
        .map_err(|e| self.io_error("write", e))
    }

    fn persist(&self, offset: u64, len: u64) -> Result<(), PersistError> {
        // The device's volatile write cache and the file's metadata: fdatasync covers both.
        self.file.sync_data().map_err(|e| PersistError {
            offset,
            len_bytes: len,
            message: e.to_string(),
        })
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        check_range(self.len_bytes, 1, offset, len as usize, 0)?;
        if self.device {
            return Ok(()); // BLKDISCARD needs a privilege we may not have; a hint only.
        }
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: fallocate takes our descriptor and integers; no memory of ours is touched.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(self.io_error("discard", std::io::Error::last_os_error()));
        }
        // A punched hole must be reserved again, or a later write could meet a full disk.
        // SAFETY: as above.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                0,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(self.io_error("reserve", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}
