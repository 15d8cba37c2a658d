//! Simulators for tests. For a mapped pool, [`SimulatedPersistence`] watches every persist
//! (the mapping only calls it) and builds what a power cut would leave, a cache line at a time.
//! For media: [`MemoryMedium`], a medium in DRAM, and [`SimulatedMedium`], which wraps
//! any medium to model what the real world does to it: a power cut that keeps only what was
//! persisted plus an arbitrary subset of the sectors written since (so a write spanning sectors
//! can be torn, and a later write can survive an earlier one), the N-th write or persist
//! failing, and slow I/O. Production code never builds these; they implement the same
//! [`Medium`] contract, so the code under test runs unchanged.
//!
//! The sector is the unit of atomicity: a 512-byte write either fully reached the media or did
//! not, as NVMe guarantees for its atomic write unit (and 4 KiB-sector devices for 4 KiB).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{PersistError, PoolError};
use crate::mapping::{FlushMethod, PersistObserver, PersistenceDomain};
use crate::medium::{check_range, Medium, MediumError};
use crate::tables::TableObserver;
use crate::{io_err, CACHE_LINE_SIZE_BYTES};

/// Bytes a power cut keeps or loses together.
pub const SECTOR_SIZE_BYTES: usize = 512;

/// A medium in DRAM (a RAM disk), with the given block size (and reads aligned to it, or to
/// what [`MemoryMedium::reading_in`] says).
#[derive(Debug)]
pub struct MemoryMedium {
    bytes: Mutex<Vec<u8>>,
    block_size_bytes: usize,
    read_align_bytes: usize,
}

impl MemoryMedium {
    /// `len_bytes` zeroed bytes.
    pub fn new(len_bytes: usize, block_size_bytes: usize) -> MemoryMedium {
        MemoryMedium::from_image(vec![0; len_bytes], block_size_bytes)
    }

    /// A medium holding `image` (a crash image, say).
    pub fn from_image(image: Vec<u8>, block_size_bytes: usize) -> MemoryMedium {
        MemoryMedium {
            bytes: Mutex::new(image),
            block_size_bytes,
            read_align_bytes: block_size_bytes,
        }
    }

    /// The same medium with reads aligned to `read_align_bytes` (a divisor of its block size),
    /// as a direct-I/O file on a disk of 512-byte sectors reads.
    pub fn reading_in(self, read_align_bytes: usize) -> MemoryMedium {
        assert!(self.block_size_bytes.is_multiple_of(read_align_bytes));
        MemoryMedium {
            read_align_bytes,
            ..self
        }
    }
}

impl Medium for MemoryMedium {
    fn len_bytes(&self) -> u64 {
        self.bytes.lock().expect("medium lock").len() as u64
    }

    fn domain(&self) -> PersistenceDomain {
        PersistenceDomain {
            survives_process_crash: false,
            survives_power_loss: false,
            flush: FlushMethod::None,
        }
    }

    fn block_size_bytes(&self) -> usize {
        self.block_size_bytes
    }

    fn read_align_bytes(&self) -> usize {
        self.read_align_bytes
    }

    fn is_direct(&self) -> bool {
        false
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        let bytes = self.bytes.lock().expect("medium lock");
        check_range(
            bytes.len() as u64,
            self.read_align_bytes,
            offset,
            buf.len(),
            0,
        )?;
        let at = offset as usize;
        buf.copy_from_slice(&bytes[at..at + buf.len()]);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        let mut bytes = self.bytes.lock().expect("medium lock");
        check_range(
            bytes.len() as u64,
            self.block_size_bytes,
            offset,
            data.len(),
            0,
        )?;
        let at = offset as usize;
        bytes[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn persist(&self, _offset: u64, _len: u64) -> Result<(), PersistError> {
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        let mut bytes = self.bytes.lock().expect("medium lock");
        check_range(bytes.len() as u64, 1, offset, len as usize, 0)?;
        bytes[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
}

/// What to do wrong, and when.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Fail the write with this 1-based number and every write after it.
    pub fail_write_from: Option<u64>,
    /// Fail the persist with this 1-based number and every persist after it.
    pub fail_persist_from: Option<u64>,
    /// Fail every read.
    pub fail_reads: bool,
    /// Sleep this long in every read and write (a slow or overloaded device).
    pub latency: Option<Duration>,
}

/// Wraps a medium and keeps, beside it, the bytes a power cut would leave: see the module
/// documentation.
#[derive(Debug)]
pub struct SimulatedMedium<M: Medium> {
    inner: M,
    /// What the media holds for sure: the bytes as of each sector's last persist.
    durable: Mutex<Vec<u8>>,
    /// Sectors written since their last persist.
    unpersisted: Mutex<BTreeSet<usize>>,
    faults: Faults,
    writes: AtomicU64,
    persists: AtomicU64,
}

impl<M: Medium> SimulatedMedium<M> {
    /// Wraps `inner`, whose current bytes are taken as persisted.
    pub fn new(inner: M, faults: Faults) -> SimulatedMedium<M> {
        let len = inner.len_bytes() as usize;
        let mut durable = vec![0u8; len];
        let block = inner.block_size_bytes();
        for (at, chunk) in (0..len)
            .step_by(block.max(SECTOR_SIZE_BYTES))
            .zip(durable.chunks_mut(block.max(SECTOR_SIZE_BYTES)))
        {
            // A medium that cannot be read at open is a test set-up error.
            inner
                .read_at(at as u64, chunk)
                .expect("the wrapped medium reads");
        }
        SimulatedMedium {
            inner,
            durable: Mutex::new(durable),
            unpersisted: Mutex::new(BTreeSet::new()),
            faults,
            writes: AtomicU64::new(0),
            persists: AtomicU64::new(0),
        }
    }

    /// The bytes a power cut now could leave: every persisted sector, and each sector written
    /// since its last persist as written when `keep_written_sector(sector)` says so, as it was
    /// persisted otherwise. Keeping some sectors of a write and not others is a torn write;
    /// keeping a later write's sectors and not an earlier one's is writes reaching the media out
    /// of order.
    pub fn crash_image(&self, keep_written_sector: &mut dyn FnMut(usize) -> bool) -> Vec<u8> {
        let mut image = self.durable.lock().expect("durable lock").clone();
        let unpersisted = self.unpersisted.lock().expect("unpersisted lock");
        let mut sector = vec![0u8; SECTOR_SIZE_BYTES];
        for &index in unpersisted.iter() {
            if keep_written_sector(index) {
                let at = index * SECTOR_SIZE_BYTES;
                if self.read_sector(at, &mut sector).is_ok() {
                    image[at..at + SECTOR_SIZE_BYTES].copy_from_slice(&sector);
                }
            }
        }
        image
    }

    /// Sectors written and not persisted since.
    pub fn unpersisted_sectors(&self) -> usize {
        self.unpersisted.lock().expect("unpersisted lock").len()
    }

    /// The wrapped medium.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    fn read_sector(&self, at: usize, out: &mut [u8]) -> Result<(), MediumError> {
        let block = self.inner.block_size_bytes();
        if block <= SECTOR_SIZE_BYTES {
            return self.inner.read_at(at as u64, out);
        }
        let mut whole = vec![0u8; block];
        let block_start = at / block * block;
        self.inner.read_at(block_start as u64, &mut whole)?;
        out.copy_from_slice(&whole[at - block_start..at - block_start + SECTOR_SIZE_BYTES]);
        Ok(())
    }

    fn delay(&self) {
        if let Some(latency) = self.faults.latency {
            std::thread::sleep(latency);
        }
    }

    fn injected(&self, op: &'static str) -> MediumError {
        MediumError::Io {
            op,
            path: "(simulated)".into(),
            message: "injected fault".into(),
            os_error: Some(libc::EIO),
        }
    }
}

impl<M: Medium> Medium for SimulatedMedium<M> {
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }

    fn domain(&self) -> PersistenceDomain {
        PersistenceDomain {
            survives_process_crash: true,
            survives_power_loss: true,
            flush: FlushMethod::Simulated,
        }
    }

    fn block_size_bytes(&self) -> usize {
        self.inner.block_size_bytes()
    }

    fn read_align_bytes(&self) -> usize {
        self.inner.read_align_bytes()
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn io_engine(&self) -> &'static str {
        self.inner.io_engine()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        self.delay();
        if self.faults.fail_reads {
            return Err(self.injected("read"));
        }
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        self.delay();
        if nth_call_fails(&self.writes, self.faults.fail_write_from) {
            return Err(self.injected("write"));
        }
        self.inner.write_at(offset, data)?;
        let first = offset as usize / SECTOR_SIZE_BYTES;
        let last = (offset as usize + data.len()).div_ceil(SECTOR_SIZE_BYTES);
        let mut unpersisted = self.unpersisted.lock().expect("unpersisted lock");
        unpersisted.extend(first..last);
        Ok(())
    }

    fn persist(&self, offset: u64, len: u64) -> Result<(), PersistError> {
        if nth_call_fails(&self.persists, self.faults.fail_persist_from) {
            return Err(PersistError {
                offset,
                len_bytes: len,
                message: "injected fault".into(),
            });
        }
        let first = offset as usize / SECTOR_SIZE_BYTES;
        let last = (offset + len).div_ceil(SECTOR_SIZE_BYTES as u64) as usize;
        let mut unpersisted = self.unpersisted.lock().expect("unpersisted lock");
        let covered: Vec<usize> = unpersisted.range(first..last).copied().collect();
        let mut durable = self.durable.lock().expect("durable lock");
        let mut sector = vec![0u8; SECTOR_SIZE_BYTES];
        for index in covered {
            let at = index * SECTOR_SIZE_BYTES;
            self.read_sector(at, &mut sector)
                .map_err(|e| PersistError {
                    offset,
                    len_bytes: len,
                    message: e.to_string(),
                })?;
            durable[at..at + SECTOR_SIZE_BYTES].copy_from_slice(&sector);
            unpersisted.remove(&index);
        }
        self.inner.persist(offset, len)
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        // A discard is a write of zeros as far as a power cut can tell.
        self.inner.discard(offset, len)?;
        let first = offset as usize / SECTOR_SIZE_BYTES;
        let last = (offset + len).div_ceil(SECTOR_SIZE_BYTES as u64) as usize;
        self.unpersisted
            .lock()
            .expect("unpersisted lock")
            .extend(first..last);
        Ok(())
    }
}

/// The power-failure simulator of a mapped pool ([`crate::Location::Simulated`]) and of its
/// index directory: it is told of every persist (it is the pool's [`PersistObserver`] and the
/// directory's [`TableObserver`]) and keeps a copy of the bytes as last persisted, so a test can
/// ask what a power cut now could leave (every persisted cache line, and any subset of the lines
/// changed since). It can also fail the N-th persist of the pool and every later one, as a
/// device that stops taking writes does.
#[derive(Debug, Default)]
pub struct SimulatedPersistence {
    persisted: Mutex<Vec<u8>>,
    /// Each index table file's bytes as last persisted (as opened, until its first persist).
    tables: Mutex<HashMap<PathBuf, Vec<u8>>>,
    persist_calls: AtomicU64,
    fail_persist_from: Option<u64>,
}

impl SimulatedPersistence {
    /// A simulator whose persists all succeed.
    pub fn new() -> Arc<SimulatedPersistence> {
        Arc::new(SimulatedPersistence::default())
    }

    /// A simulator that fails the persist with this 1-based number and every one after it (the
    /// pool's open persists its header first).
    pub fn failing_from(persist_call: u64) -> Arc<SimulatedPersistence> {
        Arc::new(SimulatedPersistence {
            fail_persist_from: Some(persist_call),
            ..SimulatedPersistence::default()
        })
    }

    /// The persists of the pool asked for so far, failed ones included: a test finds with it
    /// the numbers of the persists one operation takes, to fail each of them in turn.
    pub fn persist_calls(&self) -> u64 {
        self.persist_calls.load(Ordering::Relaxed)
    }

    /// Sets the bytes as last persisted (a pool reopened after a process crash: the media
    /// hold less than the mapping shows).
    pub(crate) fn set_persisted(&self, bytes: &[u8]) {
        let mut persisted = self.persisted.lock().expect("image lock");
        assert_eq!(persisted.len(), bytes.len(), "the watched pool's length");
        persisted.copy_from_slice(bytes);
    }

    /// What a power cut now could leave of a pool whose live bytes are `live`: the persisted
    /// image, plus each cache line whose live bytes differ from it when
    /// `keep_unpersisted_line(line_index)` says so.
    pub fn crash_image(
        &self,
        live: &[u8],
        keep_unpersisted_line: &mut dyn FnMut(usize) -> bool,
    ) -> Vec<u8> {
        let mut out = self.persisted.lock().expect("image lock").clone();
        assert_eq!(out.len(), live.len(), "the live bytes of the watched pool");
        cut_lines(&mut out, live, keep_unpersisted_line);
        out
    }

    /// Writes into `target` what a power cut now would leave of the index directory `dir`
    /// (opened with this simulator watching): each file's bytes as last persisted, plus each
    /// 64-byte line written since for which `keep_unpersisted_line` says yes. A file of another
    /// length than last seen keeps only the lines chosen, over zeros. Files deleted are gone.
    pub fn index_crash_image(
        &self,
        dir: &Path,
        target: &Path,
        keep_unpersisted_line: &mut dyn FnMut(usize) -> bool,
    ) -> Result<(), PoolError> {
        let tables = self.tables.lock().expect("tables lock");
        std::fs::create_dir_all(target).map_err(|e| io_err("create image dir", target, e))?;
        let entries = std::fs::read_dir(dir).map_err(|e| io_err("list", dir, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let live = std::fs::read(&path).map_err(|e| io_err("read", &path, e))?;
            let mut image = tables
                .get(&path)
                .filter(|persisted| persisted.len() == live.len())
                .cloned()
                .unwrap_or_else(|| vec![0; live.len()]);
            cut_lines(&mut image, &live, keep_unpersisted_line);
            let out = target.join(entry.file_name());
            std::fs::write(&out, image).map_err(|e| io_err("write image", &out, e))?;
        }
        Ok(())
    }
}

/// Counts a call and says whether it fails: the `from`-th (1-based) and every later one, as a
/// device that stops taking writes.
fn nth_call_fails(calls: &AtomicU64, from: Option<u64>) -> bool {
    let call = calls.fetch_add(1, Ordering::Relaxed) + 1;
    from.is_some_and(|from| call >= from)
}

/// `persisted` plus each cache line of `live` that differs from it when `keep(line_index)` says
/// so (lines at their index in the file).
fn cut_lines(persisted: &mut [u8], live: &[u8], keep: &mut dyn FnMut(usize) -> bool) {
    for (index, (persisted, current)) in persisted
        .chunks_mut(CACHE_LINE_SIZE_BYTES)
        .zip(live.chunks(CACHE_LINE_SIZE_BYTES))
        .enumerate()
    {
        if persisted != current && keep(index) {
            persisted.copy_from_slice(current);
        }
    }
}

impl TableObserver for SimulatedPersistence {
    fn table_persisted(&self, path: &Path, bytes: &[u8]) {
        let mut tables = self.tables.lock().expect("tables lock");
        tables.insert(path.to_path_buf(), bytes.to_vec());
    }
}

impl PersistObserver for SimulatedPersistence {
    fn attached(&self, initial: &[u8]) {
        *self.persisted.lock().expect("image lock") = initial.to_vec();
    }

    fn persisted(&self, offset: usize, live: &[u8]) -> Result<(), String> {
        if nth_call_fails(&self.persist_calls, self.fail_persist_from) {
            return Err("injected fault".to_string());
        }
        self.persisted.lock().expect("image lock")[offset..offset + live.len()]
            .copy_from_slice(live);
        Ok(())
    }
}

impl PartialEq for SimulatedPersistence {
    /// The same simulator (one per simulated pool), not equal contents.
    fn eq(&self, other: &SimulatedPersistence) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for SimulatedPersistence {}
