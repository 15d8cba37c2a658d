//! Line tables: arrays of 64-byte atomic lines (the engine's index buckets), held either in DRAM
//! or in files next to a file pool, plus the control file that lets a restart trust those files.
//!
//! With the index placed in the pool (`IndexFiles`), a pool at `P` has a directory `P.index/`:
//!
//! ```text
//!  P.index/control          line 0: header; lines 1..=shards: one control line per shard;
//!                           then one 32-byte book per segment (two per line)
//!  P.index/s0003-p17        shard 3's primary bucket table, generation 17 (64 B per bucket)
//!  P.index/s0003-o18        shard 3's overflow bucket table, generation 18
//! ```
//!
//! Control header words (u64, little-endian): `magic "STRATAIX"`, `version (2)`, `pool_id`,
//! `session_state_seq`, `shard_count`, `segment_count`, then two zero words. A restart trusts the
//! files only when the header names this pool and the exact pool state it was left in (see the
//! engine's `index_files` module for the rest of the rule).
//!
//! Files have every block reserved (`posix_fallocate`) when created or opened, like the pool, so
//! a store through their mapping never meets a full file system (a SIGBUS).
//! They are only written by the process holding the pool's exclusive lock.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::PoolError;
use crate::{io_err, AtomicLine, CACHE_LINE_SIZE_BYTES};

const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"STRATAIX");
/// 3: a shard's state 1 means "changing, consistent before" and 2 "untrusted" (in version 2, 1
/// meant either); older control files are replaced and every shard rebuilt.
const CONTROL_VERSION: u64 = 3;
/// Bytes of one segment's book in the control file.
pub const SEGMENT_BOOK_SIZE_BYTES: usize = 32;
const BOOKS_PER_LINE: usize = CACHE_LINE_SIZE_BYTES / SEGMENT_BOOK_SIZE_BYTES;

enum Storage {
    /// An anonymous mapping (none for an empty table).
    Dram(#[allow(dead_code)] Option<memmap2::MmapMut>),
    File {
        _map: memmap2::MmapMut,
        path: PathBuf,
        /// Power-failure simulation (tests): `persist` hands the table to it instead of
        /// calling msync.
        observer: Option<Arc<dyn TableObserver>>,
    },
}

/// Told of every table file of an index directory opened and persisted: how tests simulate
/// power cuts of the index ([`crate::testing::SimulatedPersistence`] keeps each file's bytes
/// as last persisted). Production directories have none.
pub trait TableObserver: Send + Sync + std::fmt::Debug {
    /// The table at `path` was persisted with these bytes; also called when a table file is
    /// opened or created, whose bytes then count as persisted.
    fn table_persisted(&self, path: &Path, bytes: &[u8]);
}

/// A fixed-size table of zeroed-at-creation cache lines.
pub struct LineTable {
    base: *const AtomicLine,
    count: usize,
    storage: Storage,
}

// SAFETY: the table owns its storage (a Vec's heap buffer or a shared file mapping), which never
// moves while the table lives; all access is through `&[AtomicLine]`, whose atomics make shared
// use from several threads sound.
unsafe impl Send for LineTable {}
// SAFETY: see `Send`.
unsafe impl Sync for LineTable {}

impl std::fmt::Debug for LineTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineTable")
            .field("count", &self.count)
            .field("file", &self.path())
            .finish()
    }
}

impl LineTable {
    /// `count` zeroed lines in DRAM: an anonymous mapping, whose pages the kernel hands out
    /// zeroed on first touch, so a large table costs no time or memory until its lines are
    /// used. (The allocator's `alloc_zeroed` wrote zeroes over the whole table for an alignment
    /// of 64: a 139 MB table for a 16 GiB budget took 90 ms of a server's start.)
    pub fn dram(count: usize) -> LineTable {
        if count == 0 {
            return LineTable {
                base: std::ptr::NonNull::<AtomicLine>::dangling().as_ptr(),
                count,
                storage: Storage::Dram(None),
            };
        }
        let len = count
            .checked_mul(CACHE_LINE_SIZE_BYTES)
            .expect("table size fits usize");
        let mut map = memmap2::MmapMut::map_anon(len)
            .unwrap_or_else(|err| panic!("cannot map {len} bytes for a table: {err}"));
        let base = map.as_mut_ptr().cast::<AtomicLine>().cast_const();
        assert_eq!(
            base as usize % CACHE_LINE_SIZE_BYTES,
            0,
            "mappings are page aligned"
        );
        LineTable {
            base,
            count,
            storage: Storage::Dram(Some(map)),
        }
    }

    fn file(
        path: PathBuf,
        count: usize,
        create: bool,
        observer: Option<&Arc<dyn TableObserver>>,
    ) -> Result<LineTable, PoolError> {
        assert!(count > 0, "file tables are never empty");
        let len = count
            .checked_mul(CACHE_LINE_SIZE_BYTES)
            .expect("table size fits usize");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(&path)
            .map_err(|e| io_err("open index table", &path, e))?;
        if create {
            file.set_len(len as u64)
                .map_err(|e| io_err("size index table", &path, e))?;
            if let Err(err) = crate::reserve(&file, len as u64, &path) {
                let _ = std::fs::remove_file(&path);
                return Err(err);
            }
        } else {
            let found = file
                .metadata()
                .map_err(|e| io_err("stat index table", &path, e))?
                .len();
            if found != len as u64 {
                return Err(PoolError::Io {
                    op: "open index table",
                    path,
                    message: format!("{found} bytes, expected {len}"),
                });
            }
            crate::reserve(&file, len as u64, &path)?;
        }
        // SAFETY: the file is private to the process that holds the pool's exclusive lock (the
        // index directory belongs to that pool); its length was checked or set just above and is
        // never changed while mapped.
        let mut map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
            .map_err(|e| io_err("mmap index table", &path, e))?;
        let base = map.as_mut_ptr().cast::<AtomicLine>().cast_const();
        assert_eq!(
            base as usize % CACHE_LINE_SIZE_BYTES,
            0,
            "mappings are page aligned"
        );
        if let Some(observer) = observer {
            observer.table_persisted(&path, &map);
        }
        Ok(LineTable {
            base,
            count,
            storage: Storage::File {
                _map: map,
                path,
                observer: observer.cloned(),
            },
        })
    }

    /// The file behind the table, if any.
    pub fn path(&self) -> Option<&Path> {
        match &self.storage {
            Storage::Dram(_) => None,
            Storage::File { path, .. } => Some(path),
        }
    }

    /// Drops the table and deletes its file (a table replaced by a newer one).
    pub fn retire(self) {
        if let Some(path) = self.path().map(Path::to_path_buf) {
            drop(self);
            let _ = std::fs::remove_file(path);
        }
    }

    /// Maps a file table's pages into the page tables now (`MADV_POPULATE_READ`), so lookups
    /// after a restart do not each take a fault. Errors (old kernels) are ignored.
    pub fn populate(&self) {
        if let Storage::File { _map: map, .. } = &self.storage {
            let _ = map.advise(memmap2::Advice::PopulateRead);
        }
    }

    /// Writes the table's file back to its medium (msync); nothing for DRAM. In a simulated
    /// index directory, hands the table to the observer instead.
    pub fn persist(&self) -> Result<(), PoolError> {
        match &self.storage {
            Storage::Dram(_) => Ok(()),
            Storage::File {
                _map: map,
                path,
                observer: Some(observer),
            } => {
                observer.table_persisted(path, &map[..]);
                Ok(())
            }
            Storage::File {
                _map: map, path, ..
            } => map
                .flush()
                .map_err(|e| io_err("msync index table", path, e)),
        }
    }
}

impl std::ops::Deref for LineTable {
    type Target = [AtomicLine];

    #[inline]
    fn deref(&self) -> &[AtomicLine] {
        // SAFETY: `base` points at `count` initialised lines owned by `storage` (a mapping of
        // `count * 64` bytes, anonymous and zeroed or of a file; dangling but aligned when
        // empty), alive and unmoved as long as `self`; any bytes are valid `AtomicU64`s.
        unsafe { std::slice::from_raw_parts(self.base, self.count) }
    }
}

/// Which table of a shard's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// The primary buckets.
    Primary,
    /// The overflow buckets.
    Overflow,
}

impl TableKind {
    fn letter(self) -> char {
        match self {
            TableKind::Primary => 'p',
            TableKind::Overflow => 'o',
        }
    }
}

/// What the control header says about the session that last wrote the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlHeader {
    /// The pool the files belong to.
    pub pool_id: u64,
    /// The pool state (`HeaderState::state_seq`) the files were last left consistent with.
    pub session_state_seq: u64,
    /// Shards described.
    pub shard_count: u64,
    /// Segment books held.
    pub segment_count: u64,
}

/// The index directory of one file pool: its control file and table files.
pub struct IndexFiles {
    dir: PathBuf,
    control: LineTable,
    shard_count: usize,
    found: Option<ControlHeader>,
    /// For a simulated pool (tests): told of each table's persists.
    observer: Option<Arc<dyn TableObserver>>,
}

impl std::fmt::Debug for IndexFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexFiles")
            .field("dir", &self.dir)
            .field("found", &self.found)
            .finish_non_exhaustive()
    }
}

impl IndexFiles {
    /// The directory for the pool at `pool_path`: `<pool>.index`.
    fn dir_for(pool_path: &Path) -> PathBuf {
        let mut name = pool_path.as_os_str().to_owned();
        name.push(".index");
        PathBuf::from(name)
    }

    /// Opens (creating when missing) the index directory of a pool with `segment_count`
    /// segments and `shard_count` shards. A control file of another shape is replaced. What the
    /// previous header said is kept in [`IndexFiles::found`] for the caller's trust decision.
    pub fn open(
        pool_path: &Path,
        shard_count: usize,
        segment_count: usize,
    ) -> Result<IndexFiles, PoolError> {
        Self::open_dir(Self::dir_for(pool_path), shard_count, segment_count, None)
    }

    /// [`IndexFiles::open`] on the directory `dir`. With an observer (the index of a simulated
    /// pool, for power-failure tests), persists are handed to it rather than made (see
    /// [`crate::testing::SimulatedPersistence::index_crash_image`]).
    pub fn open_dir(
        dir: PathBuf,
        shard_count: usize,
        segment_count: usize,
        observer: Option<Arc<dyn TableObserver>>,
    ) -> Result<IndexFiles, PoolError> {
        std::fs::create_dir_all(&dir).map_err(|e| io_err("create index directory", &dir, e))?;
        let lines = 1 + shard_count + segment_count.div_ceil(BOOKS_PER_LINE);
        let path = dir.join("control");
        let existing = std::fs::metadata(&path)
            .is_ok_and(|m| m.len() == (lines * CACHE_LINE_SIZE_BYTES) as u64);
        let control = LineTable::file(path, lines, !existing, observer.as_ref())?;
        let word = |i: usize| control[0].0[i].load(Ordering::Relaxed);
        let found = (existing
            && word(0) == CONTROL_MAGIC
            && word(1) == CONTROL_VERSION
            && word(4) == shard_count as u64
            && word(5) == segment_count as u64)
            .then(|| ControlHeader {
                pool_id: word(2),
                session_state_seq: word(3),
                shard_count: word(4),
                segment_count: word(5),
            });
        let header = &control[0].0;
        header[0].store(CONTROL_MAGIC, Ordering::Relaxed);
        header[1].store(CONTROL_VERSION, Ordering::Relaxed);
        header[4].store(shard_count as u64, Ordering::Relaxed);
        header[5].store(segment_count as u64, Ordering::Relaxed);
        Ok(IndexFiles {
            dir,
            control,
            shard_count,
            found,
            observer,
        })
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The header found at open, if the control file had this shape.
    pub fn found(&self) -> Option<ControlHeader> {
        self.found
    }

    /// Binds the files to a pool state: written at open (the session's state) and before a
    /// clean close (the clean state), after the tables were persisted.
    pub fn bind(&self, pool_id: u64, state_seq: u64) {
        let header = &self.control[0].0;
        header[2].store(pool_id, Ordering::Relaxed);
        header[3].store(state_seq, Ordering::Relaxed);
    }

    /// Shard `shard`'s control line (eight words the engine defines).
    pub fn shard_line(&self, shard: usize) -> &AtomicLine {
        assert!(shard < self.shard_count);
        &self.control[1 + shard]
    }

    /// Segment `id`'s book (four words the engine defines).
    pub fn segment_book(&self, id: u32) -> &[AtomicU64] {
        let id = id as usize;
        let line = &self.control[1 + self.shard_count + id / BOOKS_PER_LINE];
        let words = SEGMENT_BOOK_SIZE_BYTES / 8;
        let first = (id % BOOKS_PER_LINE) * words;
        &line.0[first..first + words]
    }

    fn table_path(&self, shard: u16, kind: TableKind, generation: u64) -> PathBuf {
        self.dir
            .join(format!("s{shard:04}-{}{generation}", kind.letter()))
    }

    /// Creates a zeroed table file of `count` lines (replacing any file of that name).
    pub fn create_table(
        &self,
        shard: u16,
        kind: TableKind,
        generation: u64,
        count: usize,
    ) -> Result<LineTable, PoolError> {
        let path = self.table_path(shard, kind, generation);
        LineTable::file(path, count, true, self.observer.as_ref())
    }

    /// Opens an existing table file, which must hold exactly `count` lines.
    pub fn open_table(
        &self,
        shard: u16,
        kind: TableKind,
        generation: u64,
        count: usize,
    ) -> Result<LineTable, PoolError> {
        let path = self.table_path(shard, kind, generation);
        LineTable::file(path, count, false, self.observer.as_ref())
    }

    /// Deletes every table file of `shard` except the generations in `keep`.
    pub fn remove_other_tables(&self, shard: u16, keep: &[u64]) {
        let prefix = format!("s{shard:04}-");
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            let generation = rest.get(1..).and_then(|g| g.parse::<u64>().ok());
            if generation.is_none_or(|g| !keep.contains(&g)) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Writes the control file back to its medium.
    pub fn persist_control(&self) -> Result<(), PoolError> {
        self.control.persist()
    }

    /// Whether the pool at `pool_path` has an index directory.
    pub fn exist(pool_path: &Path) -> bool {
        Self::dir_for(pool_path).is_dir()
    }

    /// Deletes the whole index directory of the pool at `pool_path` (when the pool is created
    /// fresh or the placement changes to DRAM).
    pub fn remove(pool_path: &Path) {
        let _ = std::fs::remove_dir_all(Self::dir_for(pool_path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("strata-tables-{}-{name}.pool", std::process::id()))
    }

    #[test]
    fn table_files_keep_their_lines_across_reopen() {
        let pool = temp("reopen");
        IndexFiles::remove(&pool);
        {
            let files = IndexFiles::open(&pool, 2, 5).unwrap();
            assert_eq!(files.found(), None, "a new directory has no header");
            files.bind(42, 7);
            files.shard_line(1).0[3].store(99, Ordering::Relaxed);
            files.segment_book(4)[2].store(123, Ordering::Relaxed);
            let table = files.create_table(1, TableKind::Primary, 3, 10).unwrap();
            table[9].0[7].store(0xABCD, Ordering::Relaxed);
            let old = files.create_table(1, TableKind::Primary, 2, 4).unwrap();
            old.retire();
        }
        let files = IndexFiles::open(&pool, 2, 5).unwrap();
        assert_eq!(
            files.found(),
            Some(ControlHeader {
                pool_id: 42,
                session_state_seq: 7,
                shard_count: 2,
                segment_count: 5
            })
        );
        assert_eq!(files.shard_line(1).0[3].load(Ordering::Relaxed), 99);
        assert_eq!(files.segment_book(4)[2].load(Ordering::Relaxed), 123);
        let table = files.open_table(1, TableKind::Primary, 3, 10).unwrap();
        assert_eq!(table[9].0[7].load(Ordering::Relaxed), 0xABCD);
        assert!(
            files.open_table(1, TableKind::Primary, 3, 11).is_err(),
            "a table of another size is refused"
        );
        assert!(
            files.open_table(1, TableKind::Primary, 2, 4).is_err(),
            "retired"
        );
        files.create_table(1, TableKind::Overflow, 5, 1).unwrap();
        files.remove_other_tables(1, &[3]);
        assert!(files.open_table(1, TableKind::Overflow, 5, 1).is_err());
        assert!(files.open_table(1, TableKind::Primary, 3, 10).is_ok());
        drop(files);
        // A control file of an older version (2: one state word meant both "changing" and
        // "untrusted") is not read as this version's.
        let control = IndexFiles::dir_for(&pool).join("control");
        let mut bytes = std::fs::read(&control).unwrap();
        bytes[8..16].copy_from_slice(&2u64.to_le_bytes());
        std::fs::write(&control, &bytes).unwrap();
        let older = IndexFiles::open(&pool, 2, 5).unwrap();
        assert_eq!(older.found(), None, "an older version is not trusted");
        drop(older);
        let reshaped = IndexFiles::open(&pool, 3, 5).unwrap();
        assert_eq!(
            reshaped.found(),
            None,
            "another shape starts a new control file"
        );
        drop(reshaped);
        IndexFiles::remove(&pool);
    }

    #[test]
    fn dram_tables_start_zeroed() {
        let table = LineTable::dram(1000);
        assert_eq!(table.len(), 1000);
        assert!(table
            .iter()
            .all(|line| line.0.iter().all(|w| w.load(Ordering::Relaxed) == 0)));
        assert!(table.path().is_none());
    }
}
