//! A cache whose lines live in a strata pool (`--cache PATH`: a file, a file on tmpfs, or DAX
//! persistent memory), so the export restarts warm: after a clean stop, and after a process
//! crash (`kill -9`) on the same boot, when the page cache or the DAX media kept every store.
//! After a reboot or power loss that followed an unclean stop the clean lines are discarded:
//! the write-through modes do not persist a line's invalidation before writing the store (a
//! persist per write), so such a pool could hold a clean line older than the store. Dirty
//! lines (write-back) are kept: the store does not have them (see `cache` for why the newest
//! durable version of a dirty line is never older than the last acknowledged write).
//!
//! The pool's root area names the cache and its store; a pool made for another store (another
//! file, or the same path with another size or inode), another line size, or anything but a
//! block cache is refused with a message, never used.
//!
//! Layout: segments of [`SEGMENT_BYTES`], dealt to the cache's shards in turn; each segment is
//! an entry table and slots (`slots`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use strata_pool::{Geometry, Location, OpenMode, Opened, Pool, PoolOptions};

use crate::cache::{Cache, SHARDS};
use crate::slots::{segment_layout, Slots};

/// Bytes per pool segment.
pub const SEGMENT_BYTES: u64 = 256 << 10;
/// The root area's first bytes: `STRBLKC1`.
const ROOT_MAGIC: u64 = 0x3143_4b4c_4252_5453;
/// The root's layout version (1: 16-byte entries, write-through only; 2: 32-byte entries with
/// versions and the dirty flag).
const ROOT_VERSION: u32 = 2;
/// Bytes of the root this module writes (magic, version, line size, store size, device,
/// inode, CRC).
const ROOT_BYTES: usize = 44;

/// What identifies the backing store a pool was made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreIdentity {
    /// Bytes.
    pub size_bytes: u64,
    /// The device holding the file (the device itself for a block device).
    pub device: u64,
    /// The file's inode (0 for a block device).
    pub inode: u64,
}

impl StoreIdentity {
    /// The identity of the store at `path` of `size_bytes`.
    pub fn of(path: &Path, size_bytes: u64) -> Result<StoreIdentity, String> {
        let metadata = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let block_device = std::os::unix::fs::FileTypeExt::is_block_device(&metadata.file_type());
        Ok(if block_device {
            StoreIdentity {
                size_bytes,
                device: metadata.rdev(),
                inode: 0,
            }
        } else {
            StoreIdentity {
                size_bytes,
                device: metadata.dev(),
                inode: metadata.ino(),
            }
        })
    }
}

/// Opens (or creates) the pool at `path` as a cache of `capacity_bytes` of `line_bytes` lines
/// for the store `store`, and the cache over it.
pub fn open(
    path: &Path,
    capacity_bytes: u64,
    line_bytes: usize,
    promote_after: u32,
    store: StoreIdentity,
) -> Result<Cache, String> {
    let segment_count = capacity_bytes / SEGMENT_BYTES;
    if segment_count < SHARDS as u64 {
        return Err(format!(
            "--cache-size: a cache pool holds at least {} MiB ({SHARDS} segments of {} KiB)",
            (SHARDS as u64 * SEGMENT_BYTES) >> 20,
            SEGMENT_BYTES >> 10
        ));
    }
    // A pool made for something else is refused before the open, which would mark it in use.
    // (A file the inspector cannot read is checked after the open instead.)
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        if let Ok(found) = strata_pool::PoolFile::open(path) {
            check_root(found.root(), line_bytes, store)
                .map_err(|why| format!("cache pool {}: {why}", path.display()))?;
        }
    }
    let pool = Pool::open(PoolOptions {
        location: Location::File(path.to_path_buf()),
        geometry: geometry(segment_count),
        mode: OpenMode::OpenOrCreate,
    })
    .map_err(|e| format!("cache pool {}: {e}", path.display()))?;
    attach(pool, line_bytes, promote_after, store)
        .map_err(|why| format!("cache pool {}: {why}", path.display()))
}

/// The pool geometry of a cache of `segment_count` segments.
pub fn geometry(segment_count: u64) -> Geometry {
    Geometry {
        segment_size_bytes: SEGMENT_BYTES,
        segment_count,
    }
}

/// The cache over an opened pool (a file's, or a simulated one in tests): a new pool is given
/// its root; a reopened one is checked against `store` and its lines taken in. After an unclean
/// stop across a reboot or power loss only the dirty lines are kept: a clean line may be older
/// than the store (write-through does not persist an invalidation before it writes the store),
/// while a dirty line's newest durable version is the newest acknowledged write to it.
pub fn attach(
    mut pool: Pool,
    line_bytes: usize,
    promote_after: u32,
    store: StoreIdentity,
) -> Result<Cache, String> {
    let opened = pool.opened();
    let mut root = pool.take_root();
    let reuse = match opened {
        Opened::Created => false,
        Opened::Reopened { .. } => match check_root(root.bytes(), line_bytes, store)? {
            RootFound::Current => true,
            RootFound::OlderLayout(version) => {
                tracing::warn!(
                    version,
                    "the cache pool has an older layout (write-through lines only): its lines \
                     are dropped and the pool laid out anew"
                );
                false
            }
        },
    };
    let keep_clean = opened.stores_kept();
    if !reuse {
        write_root(root.bytes_mut(), line_bytes, store);
        root.persist().map_err(|e| e.to_string())?;
    } else {
        // What a crash left in the mapping is made durable before recovery decides on it.
        pool.persist_all().map_err(|e| e.to_string())?;
    }
    let (per_segment, table_bytes) = segment_layout(SEGMENT_BYTES as usize, line_bytes);
    let mut shards: Vec<Vec<strata_pool::Segment>> = (0..SHARDS).map(|_| Vec::new()).collect();
    for (i, segment) in pool.take_segments().into_iter().enumerate() {
        shards[i % SHARDS].push(segment);
    }
    let mut slots: Vec<Slots> = shards
        .into_iter()
        .map(|segments| Slots::Pool {
            segments,
            per_segment,
            table_bytes,
        })
        .collect();
    if !reuse {
        for shard in &mut slots {
            shard.clear_all();
        }
    }
    let lines_max = store.size_bytes / line_bytes as u64;
    let cache = Cache::from_slots(
        line_bytes,
        promote_after,
        slots,
        Some(pool),
        lines_max,
        keep_clean,
    );
    // Recovery's clears are durable before any line changes.
    cache.persist_pool().map_err(|e| e.to_string())?;
    if reuse && !keep_clean {
        tracing::warn!(
            dirty_lines = cache.recovered_dirty_lines,
            "the cache pool was left unclean across a reboot or power loss: its clean lines are \
             dropped (the store has them), its dirty lines kept"
        );
    }
    tracing::info!(
        recovered_lines = cache.recovered_lines,
        recovered_dirty_lines = cache.recovered_dirty_lines,
        dirty_slots_failed = cache.dirty_slots_failed,
        capacity_lines = cache.capacity_lines(),
        "cache pool opened"
    );
    Ok(cache)
}

fn write_root(bytes: &mut [u8], line_bytes: usize, store: StoreIdentity) {
    let mut root = [0u8; ROOT_BYTES];
    root[0..8].copy_from_slice(&ROOT_MAGIC.to_le_bytes());
    root[8..12].copy_from_slice(&ROOT_VERSION.to_le_bytes());
    root[12..16].copy_from_slice(&(line_bytes as u32).to_le_bytes());
    root[16..24].copy_from_slice(&store.size_bytes.to_le_bytes());
    root[24..32].copy_from_slice(&store.device.to_le_bytes());
    root[32..40].copy_from_slice(&store.inode.to_le_bytes());
    let crc = crc32c::crc32c(&root[0..40]);
    root[40..44].copy_from_slice(&crc.to_le_bytes());
    bytes[..ROOT_BYTES].copy_from_slice(&root);
}

/// What a reopened pool's root says.
enum RootFound {
    /// This binary's layout.
    Current,
    /// An older layout whose lines are all clean (dropped: the store has them).
    OlderLayout(u32),
}

/// Whether a reopened pool's root names a block cache of these lines for this store.
fn check_root(bytes: &[u8], line_bytes: usize, store: StoreIdentity) -> Result<RootFound, String> {
    let root = &bytes[..ROOT_BYTES];
    let u64_at = |at: usize| u64::from_le_bytes(root[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(root[at..at + 4].try_into().expect("4 bytes"));
    if u64_at(0) != ROOT_MAGIC || crc32c::crc32c(&root[0..40]) != u32_at(40) {
        return Err(
            "not a strata block cache (another pool, or a damaged root); point --cache at \
                    a new file"
                .to_string(),
        );
    }
    let version = u32_at(8);
    if version > ROOT_VERSION || version == 0 {
        return Err(format!(
            "cache layout version {version} (this binary reads 1 to {ROOT_VERSION}): made by a \
             newer strata"
        ));
    }
    if u32_at(12) as usize != line_bytes {
        return Err(format!(
            "made with {}-byte lines, --cache-line-size is {line_bytes}",
            u32_at(12)
        ));
    }
    let found = StoreIdentity {
        size_bytes: u64_at(16),
        device: u64_at(24),
        inode: u64_at(32),
    };
    if found != store {
        return Err(format!(
            "made for another backing store ({} bytes, device {}, inode {}; this one: {} bytes, \
             device {}, inode {}); remove it or use a new file",
            found.size_bytes,
            found.device,
            found.inode,
            store.size_bytes,
            store.device,
            store.inode
        ));
    }
    Ok(if version == ROOT_VERSION {
        RootFound::Current
    } else {
        RootFound::OlderLayout(version)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const LINE: usize = 4096;
    const CAPACITY: u64 = SHARDS as u64 * SEGMENT_BYTES;

    struct Temp(PathBuf);

    impl Temp {
        fn new(name: &str) -> Temp {
            let dir = if Path::new("/dev/shm").is_dir() {
                PathBuf::from("/dev/shm")
            } else {
                std::env::temp_dir()
            };
            let path = dir.join(format!("strata-pool-cache-{}-{name}", std::process::id()));
            let _ = std::fs::remove_file(&path);
            Temp(path)
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    const STORE: StoreIdentity = StoreIdentity {
        size_bytes: 64 << 20,
        device: 1,
        inode: 2,
    };

    fn fill(cache: &Cache, lines: std::ops::Range<u64>) {
        let mut out = vec![0u8; LINE];
        for line in lines {
            let generation = cache.read(line, &mut out).unwrap_err();
            cache.fill(line, &vec![line as u8 ^ 0x5a; LINE], generation);
        }
    }

    /// Where segment 0's first slot lies in the pool file.
    fn first_slot_offset() -> usize {
        let (_, table) = segment_layout(SEGMENT_BYTES as usize, LINE);
        geometry(CAPACITY / SEGMENT_BYTES).data_offset() as usize + table
    }

    fn holds_its_bytes(cache: &Cache, line: u64) -> bool {
        let mut out = vec![0u8; LINE];
        cache.read(line, &mut out).is_ok() && out.iter().all(|&b| b == line as u8 ^ 0x5a)
    }

    #[test]
    fn lines_survive_a_clean_close_and_a_crash_and_a_damaged_slot_is_dropped() {
        let pool = Temp::new("restart");
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        assert_eq!(cache.recovered_lines, 0);
        fill(&cache, 0..300);
        cache.close().unwrap();
        drop(cache);
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        assert_eq!(cache.recovered_lines, 300, "after a clean close");
        assert!((0..300).all(|line| holds_its_bytes(&cache, line)));
        // A crash: dropped without a close (the file keeps every store, as the page cache does).
        fill(&cache, 300..400);
        let ticket = cache.write_begins(5); // invalidated, then the process dies
        let _ = ticket;
        drop(cache);
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        assert_eq!(cache.recovered_lines, 399, "all but the invalidated line");
        assert!(!holds_its_bytes(&cache, 5));
        assert!((300..400).all(|line| holds_its_bytes(&cache, line)));
        drop(cache);
        // Damage one slot's bytes in the file: its line is dropped, never served.
        let mut bytes = std::fs::read(&pool.0).unwrap();
        let at = first_slot_offset();
        bytes[at + 100] ^= 0xff;
        std::fs::write(&pool.0, &bytes).unwrap();
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        assert_eq!(
            cache.recovered_lines, 398,
            "the damaged slot's line is dropped"
        );
        let served = (0..400)
            .filter(|&line| holds_its_bytes(&cache, line))
            .count();
        assert_eq!(served, 398);
    }

    #[test]
    fn a_dirty_slot_whose_bytes_were_damaged_is_dropped_counted_and_never_served() {
        let pool = Temp::new("dirty-damage");
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        // A line of shard 0, whose first slot is segment 0's first.
        let line = (0..).find(|&l| cache.shard_of(l) == 0).unwrap();
        let mut no_read =
            |_: &mut [u8]| -> Result<(), strata_pool::MediumError> { unreachable!("a whole line") };
        cache
            .write_dirty(line, 0, &[0xd1; LINE], false, &mut no_read)
            .unwrap();
        cache.close().unwrap();
        drop(cache);
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        assert_eq!(
            (cache.recovered_dirty_lines, cache.dirty_slots_failed),
            (1, 0)
        );
        cache.close().unwrap();
        drop(cache);
        let mut bytes = std::fs::read(&pool.0).unwrap();
        let at = first_slot_offset();
        assert_eq!(
            bytes[at + 7],
            0xd1,
            "the slot's bytes are where the layout says"
        );
        bytes[at + 7] ^= 0x40;
        std::fs::write(&pool.0, &bytes).unwrap();
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        assert_eq!(
            (cache.recovered_dirty_lines, cache.dirty_slots_failed),
            (0, 1)
        );
        assert!(!cache.holds(line), "a damaged dirty line was served");
    }

    #[test]
    fn a_damaged_root_is_refused_and_left_as_it_is() {
        let pool = Temp::new("root");
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        cache.close().unwrap();
        drop(cache);
        let mut bytes = std::fs::read(&pool.0).unwrap();
        let at = bytes
            .windows(8)
            .position(|w| w == b"STRBLKC1")
            .expect("the root's magic");
        bytes[at + 20] ^= 0x01; // Inside the store's size: the root's CRC no longer holds.
        std::fs::write(&pool.0, &bytes).unwrap();
        let err = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap_err();
        assert!(err.contains("not a strata block cache"), "{err}");
        assert!(
            std::fs::read(&pool.0).unwrap() == bytes,
            "a refused pool was changed"
        );
    }

    #[test]
    fn a_pool_made_for_another_store_or_line_size_is_refused() {
        let pool = Temp::new("identity");
        let cache = open(&pool.0, CAPACITY, LINE, 1, STORE).unwrap();
        cache.close().unwrap();
        drop(cache);
        let other_inode = StoreIdentity { inode: 3, ..STORE };
        let err = open(&pool.0, CAPACITY, LINE, 1, other_inode).unwrap_err();
        assert!(err.contains("another backing store"), "{err}");
        let resized = StoreIdentity {
            size_bytes: 32 << 20,
            ..STORE
        };
        assert!(open(&pool.0, CAPACITY, LINE, 1, resized).is_err());
        let err = open(&pool.0, CAPACITY, 8192, 1, STORE).unwrap_err();
        assert!(err.contains("4096-byte lines"), "{err}");
        let err = open(&pool.0, 2 * CAPACITY, LINE, 1, STORE).unwrap_err();
        assert!(err.contains("geometry") || err.contains("segment"), "{err}");
        // A file that is no pool at all is refused, never overwritten.
        let other = Temp::new("notapool");
        std::fs::write(&other.0, vec![7u8; 1 << 20]).unwrap();
        assert!(open(&other.0, CAPACITY, LINE, 1, STORE).is_err());
        assert_eq!(std::fs::read(&other.0).unwrap(), vec![7u8; 1 << 20]);
        // Too small to give every shard a segment.
        let small = Temp::new("small");
        assert!(open(&small.0, CAPACITY / 2, LINE, 1, STORE)
            .unwrap_err()
            .contains("at least"));
    }
}
