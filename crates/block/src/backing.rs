//! The backing store of an export (Open CAS calls it the "core"): a file or block device
//! opened as a pool medium ([`strata_pool::DirectFile`]: direct I/O where the file system takes
//! it, io_uring where the kernel allows it, an exclusive lock so no second process serves it),
//! at its own length, never resized.
//!
//! The medium wants offsets, lengths and buffers aligned to its block (4 KiB); NBD requests
//! need only be aligned to 1 byte (this server advertises a minimum block size of 1), so a
//! request that is not aligned goes through an aligned bounce buffer, and an unaligned write
//! reads the blocks it covers partly, patches them and writes them back. Such a write holds the
//! store's write lock alone (no other write, aligned or not, runs meanwhile, so none is lost
//! under its write-back); aligned writes share it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use strata_pool::{AlignedBuf, DirectFile, IoEngine, Medium, MediumError};

/// A backing store.
#[derive(Debug)]
pub struct Backing {
    medium: DirectFile,
    block_bytes: u64,
    /// Shared by aligned writes and trims, held alone by read-modify-writes (module docs).
    write_lock: RwLock<()>,
    /// A write or trim completed since the last `fdatasync`: a flush with none skips its own.
    unflushed: AtomicBool,
}

/// Largest write of zeroes issued at once by [`Backing::write_zeroes`].
const ZEROES_CHUNK_BYTES: u64 = 1 << 20;

impl Backing {
    /// Opens the file or block device at `path` as it is. Its size must be a whole number of
    /// the medium's blocks (4 KiB), or it is refused with a message saying so.
    pub fn open(path: &Path) -> Result<Backing, String> {
        let medium =
            DirectFile::open_existing(path, IoEngine::best().0).map_err(|e| e.to_string())?;
        let block_bytes = medium.block_size_bytes() as u64;
        if !medium.len_bytes().is_multiple_of(block_bytes) {
            return Err(format!(
                "{}: {} bytes is not a whole number of {block_bytes}-byte blocks (extend it, e.g. \
                 with truncate -s)",
                path.display(),
                medium.len_bytes()
            ));
        }
        Ok(Backing {
            medium,
            block_bytes,
            write_lock: RwLock::new(()),
            unflushed: AtomicBool::new(true),
        })
    }

    /// The store's size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.medium.len_bytes()
    }

    /// Whether it is read and written with direct I/O.
    pub fn direct(&self) -> bool {
        self.medium.is_direct()
    }

    /// How it is read and written (`io_uring` or `pread`).
    pub fn io_engine(&self) -> &'static str {
        self.medium.io_engine()
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.medium.path()
    }

    /// Reads `out.len()` bytes at `offset` (inside the store: the caller checked the range).
    pub fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), MediumError> {
        if out.is_empty() {
            return Ok(());
        }
        let (start, mut bounce) = self.bounce_for(offset, out.len());
        self.medium.read_at(start, &mut bounce)?;
        let skip = (offset - start) as usize;
        out.copy_from_slice(&bounce[skip..skip + out.len()]);
        Ok(())
    }

    /// Writes `data` at `offset` (inside the store: the caller checked the range).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        if data.is_empty() {
            return Ok(());
        }
        let block = self.block_bytes as usize;
        if offset.is_multiple_of(self.block_bytes) && data.len().is_multiple_of(block) {
            let _shared = self.write_lock.read().unwrap_or_else(|e| e.into_inner());
            let mut aligned = AlignedBuf::zeroed(data.len(), block);
            aligned.copy_from_slice(data);
            return self.written(self.medium.write_at(offset, &aligned));
        }
        let _alone = self.write_lock.write().unwrap_or_else(|e| e.into_inner());
        let (start, mut bounce) = self.bounce_for(offset, data.len());
        let skip = (offset - start) as usize;
        // Read, patch, write: the blocks the write covers only partly keep their other bytes.
        if skip != 0 {
            self.medium.read_at(start, &mut bounce[..block])?;
        }
        let end = skip + data.len();
        if !end.is_multiple_of(block) && (end > block || skip == 0) {
            let last = bounce.len() - block;
            self.medium
                .read_at(start + last as u64, &mut bounce[last..])?;
        }
        bounce[skip..end].copy_from_slice(data);
        self.written(self.medium.write_at(start, &bounce))
    }

    /// Makes every completed write durable (`fdatasync`).
    /// Nothing to do when no write or trim completed since the last flush (cleared before the
    /// `fdatasync`, so one that completes meanwhile is left for the next).
    pub fn flush(&self) -> Result<(), MediumError> {
        if !self.unflushed.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.medium.persist(0, self.size_bytes()).map_err(|e| {
            self.unflushed.store(true, Ordering::Release);
            MediumError::Io {
                op: "flush",
                path: self.path().to_path_buf(),
                message: e.message,
                os_error: None,
            }
        })
    }

    /// Notes a completed write or trim for the next flush.
    fn written(&self, result: Result<(), MediumError>) -> Result<(), MediumError> {
        if result.is_ok() {
            self.unflushed.store(true, Ordering::Release);
        }
        result
    }

    /// Writes zeroes over `len` bytes at `offset` (a hole would do for NBD without
    /// `NO_HOLE`, but the medium promises zeroes only for written ranges, so zeroes are written).
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        let zeroes = vec![0u8; ZEROES_CHUNK_BYTES.min(len) as usize];
        let mut done = 0;
        while done < len {
            let n = ZEROES_CHUNK_BYTES.min(len - done) as usize;
            self.write_at(offset + done, &zeroes[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// The range's contents are no longer needed: the whole blocks inside it are discarded
    /// (a file punches a hole; a hint elsewhere). NBD lets a trimmed range read back as
    /// anything until written again.
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        let first = offset.div_ceil(self.block_bytes) * self.block_bytes;
        let end = (offset + len) / self.block_bytes * self.block_bytes;
        if end <= first {
            return Ok(());
        }
        let _shared = self.write_lock.read().unwrap_or_else(|e| e.into_inner());
        self.written(self.medium.discard(first, end - first))
    }

    /// The aligned range covering `len` bytes at `offset`: its start and a buffer for it.
    fn bounce_for(&self, offset: u64, len: usize) -> (u64, AlignedBuf) {
        let block = self.block_bytes;
        let start = offset / block * block;
        let end = (offset + len as u64).div_ceil(block) * block;
        (
            start,
            AlignedBuf::zeroed((end - start) as usize, block as usize),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn temp_file(name: &str, len: usize) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("strata-backing-{}-{name}", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn unaligned_reads_and_writes_keep_the_bytes_around_them() {
        let path = temp_file("rmw", 64 << 10);
        let backing = Backing::open(&path).unwrap();
        assert_eq!(backing.size_bytes(), 64 << 10);
        let mut model = std::fs::read(&path).unwrap();
        for (offset, len) in [
            (1, 10),
            (4095, 2),
            (5000, 9000),
            (8192, 4096),
            (12288, 100),
            (20000, 4096),
            (65535, 1),
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ 0x5a).collect();
            backing.write_at(offset, &data).unwrap();
            model[offset as usize..offset as usize + len].copy_from_slice(&data);
            let mut back = vec![0u8; len];
            backing.read_at(offset, &mut back).unwrap();
            assert_eq!(back, data);
        }
        let mut all = vec![0u8; 64 << 10];
        backing.read_at(0, &mut all).unwrap();
        assert!(all == model);
        drop(backing);
        assert!(std::fs::read(&path).unwrap() == model);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn zeroes_read_back_as_zeroes_and_trims_keep_partial_blocks() {
        let path = temp_file("zero", 64 << 10);
        let backing = Backing::open(&path).unwrap();
        backing.write_zeroes(100, 5000).unwrap();
        backing.trim(40000, 8192).unwrap();
        let mut all = vec![0u8; 64 << 10];
        backing.read_at(0, &mut all).unwrap();
        assert!(all[100..5100].iter().all(|&b| b == 0));
        assert_ne!(all[99], 0);
        assert_ne!(all[5100], 0);
        // The trim covered one whole block (40960..45056); the partial ones keep their bytes.
        assert_eq!(all[40000], (40000 * 7 % 251) as u8);
        assert_eq!(all[46000], (46000 * 7 % 251) as u8);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_directory_or_a_store_of_partial_blocks_is_refused() {
        assert!(Backing::open(&std::env::temp_dir()).is_err());
        let path = temp_file("odd", 5000);
        let err = Backing::open(&path).unwrap_err();
        assert!(err.contains("whole number"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_second_opener_of_the_same_store_is_refused() {
        let path = temp_file("lock", 8192);
        let _first = Backing::open(&path).unwrap();
        let err = Backing::open(&path).unwrap_err();
        assert!(err.contains("in use"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }
}
