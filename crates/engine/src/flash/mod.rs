//! The flash tier: items evicted from the memory tier, kept in large regions of a flash medium
//! (a file or block device behind `strata_pool::Medium`), found through the same index.
//!
//! ```text
//!  eviction ──append──► open region buffer (DRAM, one per expiry class)
//!                            │ full: sealed, handed to the flash thread
//!                            ▼
//!  flash thread ── write_at(whole region) ──► medium      (one large sequential write)
//!               ◄─ read_at(its directory) ── oldest region, when free regions run low:
//!                  its records' index entries are dropped, the region reused (FIFO)
//!  reads: index slot (tier bit) ──► the region's buffer while it is not yet written,
//!                                   else read_at(the record's blocks)
//! ```
//!
//! Invariants:
//! - An index entry of the flash tier points at the start of a record in a region that is open,
//!   being written, or written; a region is reused only after every entry pointing into it was
//!   dropped (`reclaim`).
//! - A region's buffer stays readable until its write returned; its content never changes after
//!   it was sealed.
//! - Nothing waits for flash on the write path: when no buffer is free (the medium is behind),
//!   `append` refuses and the evicted item is dropped, as memcached's extstore does.
//!
//! What survives a restart: the tier is described by the clean-close snapshot (its regions and
//! the entries pointing into them), so a clean stop keeps it; after a crash, or with the index
//! in the pool, the flash tier starts empty (its entries are not restored), so no item can come
//! back from flash older than a write or delete the memory tier saw.

pub(crate) mod check;
pub(crate) mod filter;
pub(crate) mod format;
pub(crate) mod tiering;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use strata_pool::{AlignedBuf, Medium, MediumError};

use format::{
    RegionHeader, Superblock, BLOCK_SIZE_BYTES, DIRECTORY_ENTRY_BYTES, RECORD_ALIGN_BYTES_MAX,
};

/// Expiry classes, each with its own open region, so that a region's records expire together
/// (Segcache's idea at flash scale): no expiry, under an hour, under a day, longer.
pub(crate) const CLASSES: usize = 4;
/// Region buffers beyond one per class: regions being written while new ones fill.
const BUFFERS_IN_FLIGHT: usize = 2;
/// Free regions kept in reserve: below it the flash thread reclaims the oldest.
const FREE_REGIONS_MIN: usize = CLASSES + BUFFERS_IN_FLIGHT;

/// The expiry class of a record expiring at `expires_at_ms` (`None`: never), seen at `now_ms`.
pub(crate) fn class_of(expires_at_ms: Option<u64>, now_ms: u64) -> usize {
    const HOUR_MS: u64 = 3_600_000;
    match expires_at_ms {
        None => 0,
        Some(at) if at.saturating_sub(now_ms) < HOUR_MS => 1,
        Some(at) if at.saturating_sub(now_ms) < 24 * HOUR_MS => 2,
        Some(_) => 3,
    }
}

/// Bytes of the stamp before each record (see `format`).
const STAMP_BYTES: usize = 8;

/// The size of the record at `payload[at..]` after its stamp, when the stamp is `stamp` (the
/// region's generation on this medium) and the record passes its own checks (`record::read`).
pub(crate) fn stamped_record_size(
    payload: &[u8],
    at: usize,
    stamp: &[u8; STAMP_BYTES],
) -> Option<usize> {
    if payload.get(at..at.checked_add(STAMP_BYTES)?)? != stamp {
        return None;
    }
    match crate::record::read(&payload[at + STAMP_BYTES..]) {
        crate::record::Scan::Record(view) => Some(view.size_bytes),
        _ => None,
    }
}

/// Longest first read of a record (the guess before its length is known): records up to about
/// 13 KiB on average are read whole at once; a longer one takes a second read at its length.
/// (At 4 KiB, one 4-KiB-block guess left about one read in twelve short, each a second disk
/// round trip for its GET.)
const FIRST_READ_BYTES_MAX: usize = 16 << 10;

/// Where a region stands.
#[derive(Debug)]
enum RegionState {
    Free,
    /// Filling in DRAM (`OpenRegion` holds the buffer).
    Open {
        seq: u64,
    },
    /// Sealed; its write to the medium is pending or under way. Reads use the buffer.
    Writing {
        seq: u64,
        buf: Arc<AlignedBuf>,
    },
    /// On the medium.
    Written {
        seq: u64,
        payload_bytes: u64,
        expires_at_ms: u64,
        /// Records (and directory entries).
        records: u64,
        directory_crc: u32,
    },
}

impl RegionState {
    fn seq(&self) -> Option<u64> {
        match self {
            RegionState::Free => None,
            RegionState::Open { seq }
            | RegionState::Writing { seq, .. }
            | RegionState::Written { seq, .. } => Some(*seq),
        }
    }
}

#[derive(Debug)]
struct OpenRegion {
    index: u32,
    seq: u64,
    /// The region as it will be written; while open, its directory entries grow down from
    /// the buffer's end (last record first) and move behind the records at the seal.
    buf: AlignedBuf,
    /// Bytes of records after the header block.
    payload_len: usize,
    records: u64,
    expires_at_ms: u64,
}

/// A sealed region on its way to the medium.
#[derive(Debug)]
pub(crate) struct RegionWrite {
    pub(crate) index: u32,
    pub(crate) buf: Arc<AlignedBuf>,
    pub(crate) len_bytes: usize,
    pub(crate) seq: u64,
    pub(crate) payload_bytes: u64,
    pub(crate) expires_at_ms: u64,
    pub(crate) records: u64,
    pub(crate) directory_crc: u32,
}

#[derive(Debug)]
struct Regions {
    states: Vec<RegionState>,
    free: VecDeque<u32>,
    /// Written regions, oldest first: `(index, seq)`.
    written: VecDeque<(u32, u64)>,
    open: [Option<OpenRegion>; CLASSES],
    /// Buffers ready to be reused.
    spare: Vec<AlignedBuf>,
    /// Buffers that exist (in use, in flight or spare): at most `CLASSES + BUFFERS_IN_FLIGHT`.
    buffers: usize,
    /// Sealed regions waiting for the flash thread.
    to_write: VecDeque<RegionWrite>,
    /// Regions popped from `to_write` whose write has not returned.
    writing: usize,
    next_seq: u64,
    /// Written regions kept from before this open, `(index, seq)`, whose key filters the flash
    /// thread has yet to build from their directories.
    unfiltered: VecDeque<(u32, u64)>,
}

/// Counters for stats, INFO and metrics.
#[derive(Debug, Default)]
pub(crate) struct FlashCounters {
    /// Reads served from flash, and reads that looked there and found nothing.
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    /// Items moved back to memory.
    pub(crate) promoted_items: AtomicU64,
    pub(crate) appended_items: AtomicU64,
    pub(crate) appended_bytes: AtomicU64,
    /// Bytes of values among the appended records (write amplification's denominator).
    pub(crate) appended_value_bytes: AtomicU64,
    pub(crate) refused_items: AtomicU64,
    pub(crate) written_regions: AtomicU64,
    pub(crate) written_bytes: AtomicU64,
    pub(crate) reclaimed_regions: AtomicU64,
    /// Items whose index entry a reclaim dropped (they left the cache).
    pub(crate) evicted_items: AtomicU64,
    /// Reads of the medium (a record read may take two).
    pub(crate) reads: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) read_errors: AtomicU64,
    pub(crate) write_errors: AtomicU64,
    /// Records a read found torn, damaged or of an earlier region generation (served as misses).
    pub(crate) damaged_records: AtomicU64,
    /// Read latency, log2 buckets of microseconds: bucket i counts reads of < 2^i µs.
    pub(crate) read_latency_us: [AtomicU64; READ_LATENCY_BUCKETS],
    /// Microseconds all reads took together.
    pub(crate) read_latency_us_sum: AtomicU64,
    /// Reads served from a record an I/O thread had read ahead (no I/O on the worker).
    pub(crate) staged_reads: AtomicU64,
    /// Reads of the medium (among `reads`) the flash thread made to settle suspects.
    pub(crate) settle_reads: AtomicU64,
    /// Bytes reclaim read (directories; whole regions where a directory failed).
    pub(crate) reclaim_read_bytes: AtomicU64,
    /// Reclaims that read the whole region (its directory unreadable or damaged).
    pub(crate) reclaim_full_reads: AtomicU64,
    /// Candidate records a region's key filter ruled out (reads not made).
    pub(crate) filtered_reads: AtomicU64,
}

/// Buckets of `FlashCounters::read_latency_us`.
pub(crate) const READ_LATENCY_BUCKETS: usize = 24;

impl FlashCounters {
    pub(crate) fn record_read(&self, elapsed: std::time::Duration, bytes: usize) {
        let us = elapsed.as_micros().max(1) as u64;
        let bucket = (64 - us.leading_zeros()).min(READ_LATENCY_BUCKETS as u32 - 1) as usize;
        self.read_latency_us[bucket].fetch_add(1, Ordering::Relaxed);
        self.read_latency_us_sum.fetch_add(us, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// How reclaim names the key of a record it visits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RecordKey<'a> {
    /// The engine's hash of the key, from the region's directory.
    Hash(u64),
    /// The record itself (the directory was unreadable): the caller hashes its key.
    Record(&'a [u8]),
}

/// Why a record is read (for the counters: the issue's "flash reads per flash hit" counts the
/// reads requests make, not the flash thread's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadFor {
    /// A request's read (GET, SCAN, a read-modify-write's promotion).
    Request,
    /// The flash thread settling a suspect.
    Settle,
}

/// The tier: a medium cut into regions, with its region table and buffers.
#[derive(Debug)]
pub(crate) struct FlashTier {
    medium: Arc<dyn Medium>,
    superblock: Superblock,
    regions: Mutex<Regions>,
    /// By region: the key filter of a written region (none for regions not yet written,
    /// and for regions kept from before a restart until the flash thread rebuilds theirs).
    /// Apart from `regions`, so that reads check them without the tier's lock.
    filters: Box<[RwLock<Option<filter::KeyFilter>>]>,
    pub(crate) counters: FlashCounters,
    /// The flash thread, woken when a region is sealed (it also polls).
    writer: Mutex<Option<std::thread::Thread>>,
    /// Records read ahead by I/O threads for a request that waits for them (see `stage`),
    /// by location; taken by the read that uses them.
    staged: Mutex<Staged>,
    /// `FlashConfig::read_delay_for_tests`.
    pub(crate) read_delay_for_tests: std::time::Duration,
}

/// A record read ahead: its region generation when read, and its bytes.
#[derive(Debug)]
struct StagedRecord {
    seq: u64,
    bytes: Vec<u8>,
}

/// The records read ahead, and the bytes they hold.
#[derive(Debug, Default)]
struct Staged {
    records: HashMap<u64, StagedRecord>,
    bytes: usize,
}

/// Where a record's first read goes (`FlashTier::plan_read`).
#[derive(Debug, Clone, Copy)]
struct ReadPlan {
    /// The medium offset read from (block-aligned).
    start: u64,
    /// Bytes from `start` to the record's stamp.
    skip: usize,
    /// Bytes read.
    len: usize,
    /// Bytes from `start` to the region's end: no record reaches past it.
    room: usize,
}

/// A read of one flash record that stages it for a request waiting on it: where to read, and
/// what to check. Planned by the engine ([`crate::Engine::plan_flash_reads`]), done by a server
/// (its own io_uring, or an I/O thread), and finished by the engine
/// ([`crate::Engine::finish_flash_read`]).
#[derive(Debug, Clone)]
pub struct FlashRead {
    location: u64,
    seq: u64,
    plan: ReadPlan,
    /// Read again at the record's full length once already.
    extended: bool,
    started: std::time::Instant,
}

impl FlashRead {
    /// The medium offset to read from.
    pub fn offset(&self) -> u64 {
        self.plan.start
    }

    /// Bytes to read.
    pub fn len_bytes(&self) -> usize {
        self.plan.len
    }
}

/// What a finished [`FlashRead`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The record is kept for the read that will ask for it.
    Staged,
    /// No record of the generation looked for (reclaimed, damaged) or the read failed: the
    /// request's own read then misses or reads the medium itself.
    Miss,
    /// The record is longer than what was read: read again where the read now says.
    ReadMore,
}

/// What a read found (`FlashTier::check_read`).
enum Checked {
    /// The record, at this range of the buffer.
    Record(std::ops::Range<usize>),
    /// Not a record of the generation looked for.
    Miss,
    /// A record longer than what was read: bytes to read from the plan's start to hold it.
    Longer(usize),
}

/// Most records, and most bytes, held read ahead. Past either, all are dropped (records no
/// read came for accumulate otherwise): a read that wanted one reads the medium itself.
const STAGED_RECORDS_MAX: usize = 4096;
const STAGED_BYTES_MAX: usize = 64 << 20;

/// Why the tier could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlashError {
    /// The medium is too small for two regions per class.
    #[error("the flash medium holds {regions} regions of {region_size_bytes} bytes; at least {min} are needed: give it more room or smaller regions")]
    TooSmall {
        /// Regions that fit.
        regions: u64,
        /// Region size.
        region_size_bytes: u64,
        /// Regions needed.
        min: u64,
    },
    /// The region size is not a multiple of 4 KiB, or too small for the largest item.
    #[error("flash region size {0} must be a multiple of 4 KiB and hold the largest item")]
    RegionSize(u64),
    /// The medium is larger than index locations reach.
    #[error("the flash medium is {0} bytes; at most {max} are supported (index locations count in units of at most {RECORD_ALIGN_BYTES_MAX} bytes): give --flash-size a smaller size", max = flash_bytes_max())]
    TooLarge(u64),
    /// The medium failed.
    #[error("flash medium: {0}")]
    Medium(#[from] MediumError),
}

/// Index locations of flash records (in record-alignment units) stay below this: stored with
/// the tier bit and plus one, they must fit the slot's 36 location bits (`index.rs`).
const LOCATION_UNITS_MAX: u64 = crate::index::FLASH_TIER_BIT - 1;

/// The largest flash medium index locations reach (about 16 TiB).
pub fn flash_bytes_max() -> u64 {
    (LOCATION_UNITS_MAX - 1) * RECORD_ALIGN_BYTES_MAX as u64
}

/// The flash tier's figures (stats, INFO, metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashStats {
    /// Items whose record is on flash (index entries of the tier).
    pub items: u64,
    /// Flash entries sharing hash bits with a key written to memory since, waiting for the
    /// flash thread to read whether they are its older copy (see `shard::flash`).
    pub suspects: u64,
    /// Bytes of the medium.
    pub medium_bytes: u64,
    /// Whether I/O bypasses the page cache.
    pub direct_io: bool,
    /// How reads and writes reach the medium.
    pub io_engine: &'static str,
    /// Bytes flash reads are aligned to and rounded up to (the medium's direct-I/O alignment).
    pub read_align_bytes: u64,
    /// Bytes records are aligned to on the medium (chosen from its size when formatted).
    pub record_align_bytes: u64,
    /// Bytes per region.
    pub region_size_bytes: u64,
    /// Regions on the medium.
    pub regions_total: u64,
    /// Regions written and holding records.
    pub regions_written: u64,
    /// Regions free for new records.
    pub regions_free: u64,
    /// Sealed regions waiting for the flash thread or being written (the write queue).
    pub regions_queued: u64,
    /// DRAM held by region buffers (open regions and regions being written).
    pub buffer_bytes: u64,
    /// Reads served from flash.
    pub hits: u64,
    /// Reads that looked on flash (a candidate entry) and found nothing.
    pub misses: u64,
    /// Items moved back to memory after being read often.
    pub promoted_items: u64,
    /// Items written into regions (demoted from memory).
    pub appended_items: u64,
    /// Bytes those took in regions (stamps, headers, padding included).
    pub appended_bytes: u64,
    /// Bytes of values among them.
    pub appended_value_bytes: u64,
    /// Evicted items the tier could not take (behind, or at its write rate): dropped.
    pub refused_items: u64,
    /// Regions written to the medium.
    pub written_regions: u64,
    /// Bytes written to the medium (region headers and padding included).
    pub written_bytes: u64,
    /// Regions reclaimed (oldest first, or whole once every record expired).
    pub reclaimed_regions: u64,
    /// Items dropped from the cache by reclaim.
    pub evicted_items: u64,
    /// Reads of the medium.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Reads the medium failed.
    pub read_errors: u64,
    /// Region writes the medium failed.
    pub write_errors: u64,
    /// Records that failed their checks on read (never served).
    pub damaged_records: u64,
    /// Read latency: bucket i counts medium reads that took under 2^i microseconds.
    pub read_latency_us: [u64; READ_LATENCY_BUCKETS],
    /// Microseconds all reads took together.
    pub read_latency_us_sum: u64,
    /// Reads served from a record an I/O thread had read ahead while its request waited.
    pub staged_reads: u64,
    /// Medium reads (among `reads`) made to settle suspects, not for a request: which key a
    /// flash entry beside a newer write holds. Reads for requests are `reads` minus these.
    pub settle_reads: u64,
    /// Bytes reclaim read from the medium: each region's directory, or the whole region where
    /// the directory could not be used.
    pub reclaim_read_bytes: u64,
    /// Reclaims that read the whole region because its directory failed its check.
    pub reclaim_full_reads: u64,
    /// Candidate records a written region's key filter ruled out: reads of another key's
    /// record (sharing the key's stored hash bits) not made.
    pub filtered_reads: u64,
    /// DRAM the written regions' key filters hold.
    pub filter_bytes: u64,
    /// Written regions kept from before the open whose filters are still to be built.
    pub regions_unfiltered: u64,
}

/// What `FlashTier::open` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlashOpened {
    /// Regions holding records kept from before (0 after a format).
    pub regions_kept: u64,
    /// Why the medium's content was not kept, when it was not (a new medium says so too).
    pub formatted_because: Option<&'static str>,
}

/// A written region being reclaimed, as its state said when it was taken.
#[derive(Clone, Copy)]
struct ReclaimVictim {
    index: u32,
    seq: u64,
    payload_bytes: u64,
    records: u64,
    directory_crc: u32,
}

/// What a medium's superblock must say for its regions to be kept.
struct Geometry {
    pool_id: u64,
    region_size_bytes: u64,
    regions: u64,
    record_align: usize,
}

/// Why the medium whose first block is `first` (superblock `found`) cannot be kept as it is,
/// or `None` when it can.
fn why_not_kept(
    first: &[u8],
    found: Option<Superblock>,
    keep: bool,
    geometry: &Geometry,
) -> Option<&'static str> {
    match found {
        None if format::superblock_version(first).is_some_and(|v| v != format::FORMAT_VERSION) => {
            const _: () = assert!(format::FORMAT_VERSION == 3, "update the message");
            Some("it is in another version of the flash format (this build's is 3)")
        }
        None => Some("no strata flash superblock (a new or foreign medium, or damage)"),
        Some(_) if !keep => Some("the memory tier did not keep its items"),
        Some(sb) if sb.pool_id != geometry.pool_id => Some("it belongs to another pool"),
        Some(sb) if sb.region_size_bytes != geometry.region_size_bytes => {
            Some("its region size differs from the configured one")
        }
        Some(sb) if sb.region_count != geometry.regions => {
            Some("its size differs from the configured one")
        }
        Some(sb) if sb.record_align_bytes as usize != geometry.record_align => {
            Some("its record alignment differs from the one its size calls for")
        }
        Some(_) => None,
    }
}

/// Writes and persists a new superblock for `geometry` in `first` and on the medium: every
/// region is free from now on.
fn format_medium(
    medium: &dyn Medium,
    first: &mut AlignedBuf,
    geometry: &Geometry,
) -> Result<Superblock, FlashError> {
    let sb = Superblock {
        flash_id: random_u64(),
        pool_id: geometry.pool_id,
        region_size_bytes: geometry.region_size_bytes,
        region_count: geometry.regions,
        created_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        record_align_bytes: geometry.record_align as u32,
    };
    format::write_superblock(first, &sb);
    medium.write_at(0, first)?;
    medium
        .persist(0, BLOCK_SIZE_BYTES as u64)
        .map_err(|e| MediumError::Io {
            op: "persist superblock",
            path: "(flash)".into(),
            message: e.message,
            os_error: None,
        })?;
    Ok(sb)
}

impl FlashTier {
    /// Opens the flash tier on `medium` for pool `pool_id`: keeps what it holds when `keep` is
    /// set and its superblock names this pool and geometry (regions are then listed from their
    /// headers), else formats it. Records of at most `record_bytes_max` bytes must fit a region.
    pub(crate) fn open(
        medium: Arc<dyn Medium>,
        pool_id: u64,
        region_size_bytes: u64,
        record_bytes_max: usize,
        keep: bool,
    ) -> Result<(FlashTier, FlashOpened), FlashError> {
        let medium_bytes = medium.len_bytes();
        let record_align = format::record_align_for(medium_bytes, LOCATION_UNITS_MAX)
            .ok_or(FlashError::TooLarge(medium_bytes))?;
        let payload_max = region_size_bytes.saturating_sub(BLOCK_SIZE_BYTES as u64);
        // The payload room is a multiple of 4 KiB: the largest record, rounded up to 64 bytes,
        // leaves at least 64 more, room for the directory's start and its 12-byte entry.
        let largest_room = (record_bytes_max + STAMP_BYTES).next_multiple_of(record_align.max(64));
        if !region_size_bytes.is_multiple_of(BLOCK_SIZE_BYTES as u64)
            || payload_max < (largest_room + 64) as u64
        {
            return Err(FlashError::RegionSize(region_size_bytes));
        }
        let regions =
            medium.len_bytes().saturating_sub(BLOCK_SIZE_BYTES as u64) / region_size_bytes;
        let min = (FREE_REGIONS_MIN + 2) as u64;
        if regions < min {
            return Err(FlashError::TooSmall {
                regions,
                region_size_bytes,
                min,
            });
        }
        let block = medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let mut first = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, block);
        medium.read_at(0, &mut first)?;
        let found = format::read_superblock(&first);
        let geometry = Geometry {
            pool_id,
            region_size_bytes,
            regions,
            record_align,
        };
        let why_not = why_not_kept(&first, found, keep, &geometry);
        let superblock = match (found, why_not) {
            (Some(sb), None) => sb,
            _ => format_medium(&*medium, &mut first, &geometry)?,
        };
        let tier = FlashTier {
            medium,
            superblock,
            regions: Mutex::new(Regions {
                states: (0..regions).map(|_| RegionState::Free).collect(),
                free: VecDeque::new(),
                written: VecDeque::new(),
                open: Default::default(),
                spare: Vec::new(),
                buffers: 0,
                to_write: VecDeque::new(),
                writing: 0,
                next_seq: 1,
                unfiltered: VecDeque::new(),
            }),
            counters: FlashCounters::default(),
            writer: Mutex::new(None),
            filters: (0..regions).map(|_| RwLock::new(None)).collect(),
            staged: Mutex::new(Staged::default()),
            read_delay_for_tests: std::time::Duration::ZERO,
        };
        let regions_kept = tier.list_regions()?;
        Ok((
            tier,
            FlashOpened {
                regions_kept,
                formatted_because: why_not,
            },
        ))
    }

    /// Reads every region header: written regions of this medium join the FIFO, the others
    /// are free; the next seq follows the greatest found. Returns the written regions.
    fn list_regions(&self) -> Result<u64, MediumError> {
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let mut buf = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, block);
        let mut regions = self.regions.lock().expect("regions lock");
        let mut written = Vec::new();
        let mut seq_max = 0;
        for index in 0..self.superblock.region_count as u32 {
            self.medium.read_at(self.region_offset(index), &mut buf)?;
            let header = format::read_region_header(&buf).filter(|h| {
                h.flash_id == self.superblock.flash_id && h.fits(self.superblock.region_size_bytes)
            });
            match header {
                Some(h) => {
                    seq_max = seq_max.max(h.seq);
                    if h.reclaimed {
                        regions.free.push_back(index);
                    } else {
                        regions.states[index as usize] = RegionState::Written {
                            seq: h.seq,
                            payload_bytes: h.payload_bytes,
                            expires_at_ms: h.expires_at_ms,
                            records: h.records,
                            directory_crc: h.directory_crc,
                        };
                        written.push((index, h.seq));
                    }
                }
                None => regions.free.push_back(index),
            }
        }
        written.sort_unstable_by_key(|&(_, seq)| seq);
        regions.written = written.into_iter().collect();
        regions.next_seq = seq_max + 1;
        regions.unfiltered = regions.written.iter().copied().collect();
        Ok(regions.written.len() as u64)
    }

    /// Builds the key filter of one written region kept from before this open, from its
    /// directory (the flash thread's background work after a restart; until then reads of
    /// that region are not filtered). Returns whether one was left to do.
    pub(crate) fn build_one_filter(&self) -> bool {
        let (index, seq, payload_bytes, records, directory_crc) = {
            let mut regions = self.regions.lock().expect("regions lock");
            let Some((index, seq)) = regions.unfiltered.pop_front() else {
                return false;
            };
            match regions.states[index as usize] {
                RegionState::Written {
                    seq: now,
                    payload_bytes,
                    records,
                    directory_crc,
                    ..
                } if now == seq => (index, seq, payload_bytes, records, directory_crc),
                _ => return true, // Reclaimed meanwhile.
            }
        };
        // A directory that cannot be read or fails its check leaves the region unfiltered.
        let Some(directory) =
            self.read_directory(index, payload_bytes, records, directory_crc, None)
        else {
            return true;
        };
        let filter = key_filter(&directory);
        let regions = self.regions.lock().expect("regions lock");
        if matches!(regions.states[index as usize], RegionState::Written { seq: now, .. } if now == seq)
        {
            *self.filters[index as usize].write().expect("filter lock") = Some(filter);
        }
        true
    }

    /// Figures for stats; `items` (the index's flash entries) is the caller's.
    pub(crate) fn stats(&self, items: u64) -> FlashStats {
        let (regions_written, regions_free, buffers, regions_queued, unfiltered) = {
            let regions = self.regions.lock().expect("regions lock");
            (
                regions.written.len() as u64,
                regions.free.len() as u64,
                regions.buffers as u64,
                (regions.to_write.len() + regions.writing) as u64,
                regions.unfiltered.len() as u64,
            )
        };
        let filter_bytes = self
            .filters
            .iter()
            .filter_map(|filter| {
                let filter = filter.read().expect("filter lock");
                filter.as_ref().map(|f| f.size_bytes() as u64)
            })
            .sum();
        let c = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        FlashStats {
            items,
            suspects: 0,
            medium_bytes: self.medium.len_bytes(),
            direct_io: self.medium.is_direct(),
            io_engine: self.medium.io_engine(),
            read_align_bytes: self.read_align() as u64,
            record_align_bytes: self.record_align() as u64,
            region_size_bytes: self.superblock.region_size_bytes,
            regions_total: self.superblock.region_count,
            regions_written,
            regions_free,
            regions_queued,
            buffer_bytes: buffers * self.superblock.region_size_bytes,
            hits: load(&c.hits),
            misses: load(&c.misses),
            promoted_items: load(&c.promoted_items),
            appended_items: load(&c.appended_items),
            appended_bytes: load(&c.appended_bytes),
            appended_value_bytes: load(&c.appended_value_bytes),
            refused_items: load(&c.refused_items),
            written_regions: load(&c.written_regions),
            written_bytes: load(&c.written_bytes),
            reclaimed_regions: load(&c.reclaimed_regions),
            evicted_items: load(&c.evicted_items),
            reads: load(&c.reads),
            read_bytes: load(&c.read_bytes),
            read_errors: load(&c.read_errors),
            write_errors: load(&c.write_errors),
            damaged_records: load(&c.damaged_records),
            read_latency_us: std::array::from_fn(|i| load(&c.read_latency_us[i])),
            read_latency_us_sum: load(&c.read_latency_us_sum),
            staged_reads: load(&c.staged_reads),
            settle_reads: load(&c.settle_reads),
            reclaim_read_bytes: load(&c.reclaim_read_bytes),
            reclaim_full_reads: load(&c.reclaim_full_reads),
            filtered_reads: load(&c.filtered_reads),
            filter_bytes,
            regions_unfiltered: unfiltered,
        }
    }

    fn region_offset(&self, index: u32) -> u64 {
        BLOCK_SIZE_BYTES as u64 + u64::from(index) * self.superblock.region_size_bytes
    }

    fn stamp(&self, seq: u64) -> u64 {
        format::record_stamp(self.superblock.flash_id, seq)
    }

    /// Bytes records are aligned to, and index locations count in (the superblock's).
    fn record_align(&self) -> usize {
        self.superblock.record_align_bytes as usize
    }

    /// Bytes a read of the medium is aligned to: the device's direct-I/O alignment, at least a
    /// record's.
    fn read_align(&self) -> usize {
        self.medium.read_align_bytes().max(self.record_align())
    }

    /// The index location (record-alignment units from the medium's start, before the tier
    /// bit) of byte `payload_offset` of region `index`'s payload.
    fn location_of(&self, index: u32, payload_offset: usize) -> u64 {
        let byte = self.region_offset(index) + (BLOCK_SIZE_BYTES + payload_offset) as u64;
        // A power of two: a shift, not a division, on every demotion.
        byte >> self.record_align().trailing_zeros()
    }

    /// The region and payload offset of a location; `None` if it points outside every payload.
    fn split(&self, location: u64) -> Option<(u32, usize)> {
        let byte = location.checked_mul(self.record_align() as u64)?;
        let region_bytes = byte.checked_sub(BLOCK_SIZE_BYTES as u64)?;
        let index = region_bytes / self.superblock.region_size_bytes;
        let within = region_bytes % self.superblock.region_size_bytes;
        if index >= self.superblock.region_count || within < BLOCK_SIZE_BYTES as u64 {
            return None;
        }
        Some((index as u32, (within - BLOCK_SIZE_BYTES as u64) as usize))
    }

    /// Whether `location` points into the payload of a written region (an index entry kept
    /// from before an open is dropped otherwise: its region was never written, or reclaimed).
    pub(crate) fn holds(&self, location: u64) -> bool {
        let Some((index, offset)) = self.split(location) else {
            return false;
        };
        let regions = self.regions.lock().expect("regions lock");
        matches!(
            regions.states[index as usize],
            RegionState::Written { payload_bytes, .. } if (offset as u64) < payload_bytes
        )
    }

    /// Whether the record at `location` may be the key with `key_hash`: false only when the
    /// written region's key filter rules it out (then reading it would find another key).
    /// Regions not yet written are read from their buffers (no I/O), so they always may.
    pub(crate) fn may_hold(&self, location: u64, key_hash: u64) -> bool {
        let held = !self.rules_out(location, key_hash);
        if !held {
            self.counters.filtered_reads.fetch_add(1, Ordering::Relaxed);
        }
        held
    }

    /// Whether the written region's key filter says the record at `location` is certainly not
    /// the key with `key_hash` (no filter, or a location outside every region: false).
    pub(crate) fn rules_out(&self, location: u64, key_hash: u64) -> bool {
        let Some((index, _)) = self.split(location) else {
            return false;
        };
        self.filters[index as usize]
            .read()
            .expect("filter lock")
            .as_ref()
            .is_some_and(|filter| !filter.may_hold(key_hash))
    }

    /// Appends a record (its bytes as the memory tier holds them, CAS written out) to the open
    /// region of `class`; returns its location, or `None` when the tier is behind (no buffer
    /// or free region): the caller drops the item instead. Never waits for the medium.
    /// `key_hash` (the engine's hash of the record's key) goes into the region's directory,
    /// which reclaim reads instead of the records.
    pub(crate) fn append(
        &self,
        record: &[u8],
        value_len: usize,
        class: usize,
        expires_at_ms: Option<u64>,
        key_hash: u64,
    ) -> Option<u64> {
        let size = (STAMP_BYTES + record.len()).next_multiple_of(self.record_align());
        let region_bytes = self.superblock.region_size_bytes as usize;
        let mut regions = self.regions.lock().expect("regions lock");
        let needs_new = regions.open[class].as_ref().is_none_or(|open| {
            // The records, then the directory with this record's entry.
            let directory = (open.records as usize + 1) * DIRECTORY_ENTRY_BYTES;
            let end = open.payload_len + format::head_padding(open.payload_len) + size;
            format::directory_start(end as u64) as usize + directory > region_bytes
        });
        if needs_new {
            if regions.open[class].is_some() {
                self.seal(&mut regions, class);
            }
            if !self.open_region(&mut regions, class) {
                self.counters.refused_items.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        let open = regions.open[class].as_mut().expect("opened above");
        let padding = format::head_padding(open.payload_len);
        let padding_at = BLOCK_SIZE_BYTES + open.payload_len;
        open.buf[padding_at..padding_at + padding].fill(0);
        open.payload_len += padding;
        let at = BLOCK_SIZE_BYTES + open.payload_len;
        let stamp = self.stamp(open.seq);
        open.buf[at..at + STAMP_BYTES].copy_from_slice(&stamp.to_le_bytes());
        let body = at + STAMP_BYTES;
        open.buf[body..body + record.len()].copy_from_slice(record);
        open.buf[body + record.len()..at + size].fill(0);
        let location = self.location_of(open.index, open.payload_len);
        let entry = region_bytes - (open.records as usize + 1) * DIRECTORY_ENTRY_BYTES;
        format::write_directory_entry(
            &mut open.buf[entry..entry + DIRECTORY_ENTRY_BYTES],
            u32::try_from(open.payload_len).expect("a region is under 4 GiB"),
            key_hash,
        );
        open.payload_len += size;
        open.records += 1;
        open.expires_at_ms = open.expires_at_ms.max(expires_at_ms.unwrap_or(u64::MAX));
        self.counters.appended_items.fetch_add(1, Ordering::Relaxed);
        self.counters
            .appended_bytes
            .fetch_add((padding + size) as u64, Ordering::Relaxed);
        self.counters
            .appended_value_bytes
            .fetch_add(value_len as u64, Ordering::Relaxed);
        Some(location)
    }

    fn open_region(&self, regions: &mut Regions, class: usize) -> bool {
        if regions.free.len() <= BUFFERS_IN_FLIGHT {
            return false; // The reserve is for regions being reclaimed; wait for it.
        }
        let buf = match regions.spare.pop() {
            Some(buf) => buf,
            None if regions.buffers < CLASSES + BUFFERS_IN_FLIGHT => {
                regions.buffers += 1;
                let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
                AlignedBuf::zeroed(self.superblock.region_size_bytes as usize, block)
            }
            None => return false,
        };
        let index = regions.free.pop_front().expect("free checked above");
        let seq = regions.next_seq;
        regions.next_seq += 1;
        regions.states[index as usize] = RegionState::Open { seq };
        regions.open[class] = Some(OpenRegion {
            index,
            seq,
            buf,
            payload_len: 0,
            records: 0,
            expires_at_ms: 0,
        });
        true
    }

    /// Seals the open region of `class`: its header is written into its buffer and it joins
    /// the queue of regions to write.
    fn seal(&self, regions: &mut Regions, class: usize) {
        let Some(mut open) = regions.open[class].take() else {
            return;
        };
        // The directory moves from the buffer's end to just behind the records.
        let region_bytes = open.buf.len();
        let directory_len = open.records as usize * DIRECTORY_ENTRY_BYTES;
        let directory_at = format::directory_start(open.payload_len as u64) as usize;
        open.buf
            .copy_within(region_bytes - directory_len..region_bytes, directory_at);
        let directory_end = directory_at + directory_len;
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let len_bytes = directory_end.next_multiple_of(block).min(region_bytes);
        open.buf[BLOCK_SIZE_BYTES + open.payload_len..directory_at].fill(0);
        open.buf[directory_end..len_bytes].fill(0);
        let payload = &open.buf[BLOCK_SIZE_BYTES..BLOCK_SIZE_BYTES + open.payload_len];
        let directory_crc = crc32c::crc32c(&open.buf[directory_at..directory_end]);
        let header = RegionHeader {
            flash_id: self.superblock.flash_id,
            seq: open.seq,
            created_ms: now_ms(),
            expires_at_ms: open.expires_at_ms,
            payload_bytes: open.payload_len as u64,
            records: open.records,
            payload_crc: crc32c::crc32c(payload),
            directory_crc,
            reclaimed: false,
        };
        format::write_region_header(&mut open.buf[..BLOCK_SIZE_BYTES], &header);
        let buf = Arc::new(open.buf);
        regions.states[open.index as usize] = RegionState::Writing {
            seq: open.seq,
            buf: Arc::clone(&buf),
        };
        regions.to_write.push_back(RegionWrite {
            index: open.index,
            buf,
            len_bytes,
            seq: open.seq,
            payload_bytes: open.payload_len as u64,
            expires_at_ms: open.expires_at_ms,
            records: open.records,
            directory_crc,
        });
        if let Some(writer) = self.writer.lock().expect("writer lock").as_ref() {
            writer.unpark();
        }
    }

    /// Whether sealed regions wait for the flash thread.
    pub(crate) fn has_writes_queued(&self) -> bool {
        !self
            .regions
            .lock()
            .expect("regions lock")
            .to_write
            .is_empty()
    }

    /// Names the thread that writes sealed regions, to wake when one is sealed.
    pub(crate) fn set_writer(&self, thread: std::thread::Thread) {
        *self.writer.lock().expect("writer lock") = Some(thread);
    }

    /// Seals every open region that holds records (a clean close, or a test that wants
    /// everything written).
    pub(crate) fn seal_all(&self) {
        let mut regions = self.regions.lock().expect("regions lock");
        for class in 0..CLASSES {
            if regions.open[class].as_ref().is_some_and(|o| o.records > 0) {
                self.seal(&mut regions, class);
            }
        }
    }

    /// The next sealed region to write, if any (the flash thread's work; a close's too).
    pub(crate) fn next_write(&self) -> Option<RegionWrite> {
        let mut regions = self.regions.lock().expect("regions lock");
        let job = regions.to_write.pop_front()?;
        regions.writing += 1;
        Some(job)
    }

    /// Writes a sealed region to the medium and records it as written. A failed write leaves
    /// the region written as far as the table knows: reads of its records fail their checks
    /// and miss, and reclaim frees it in turn.
    pub(crate) fn write(&self, job: RegionWrite) -> Result<(), MediumError> {
        let offset = self.region_offset(job.index);
        let result = self.medium.write_at(offset, &job.buf[..job.len_bytes]);
        let directory_at = format::directory_start(job.payload_bytes) as usize;
        let filter = key_filter(
            &job.buf[directory_at..directory_at + job.records as usize * DIRECTORY_ENTRY_BYTES],
        );
        let mut regions = self.regions.lock().expect("regions lock");
        regions.writing -= 1;
        regions.states[job.index as usize] = RegionState::Written {
            seq: job.seq,
            payload_bytes: job.payload_bytes,
            expires_at_ms: job.expires_at_ms,
            records: job.records,
            directory_crc: job.directory_crc,
        };
        *self.filters[job.index as usize]
            .write()
            .expect("filter lock") = Some(filter);
        regions.written.push_back((job.index, job.seq));
        match &result {
            Ok(()) => {
                self.counters
                    .written_regions
                    .fetch_add(1, Ordering::Relaxed);
                self.counters
                    .written_bytes
                    .fetch_add(job.len_bytes as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The buffer comes back once no reader holds it.
        match Arc::try_unwrap(job.buf) {
            Ok(buf) => regions.spare.push(buf),
            Err(_) => regions.buffers -= 1,
        }
        result
    }

    /// The region the flash thread should reclaim next, if any: one whose records have all
    /// expired at `now_ms` (dropped whole, Segcache's idea), else the oldest when fewer
    /// regions are free than the reserve.
    fn reclaim_candidate(&self, regions: &Regions, now_ms: u64, oldest: bool) -> Option<usize> {
        let expired = regions.written.iter().position(|&(index, _)| {
            matches!(
                regions.states[index as usize],
                RegionState::Written { expires_at_ms, .. } if expires_at_ms <= now_ms
            )
        });
        expired.or_else(|| {
            ((oldest || regions.free.len() < FREE_REGIONS_MIN) && !regions.written.is_empty())
                .then_some(0)
        })
    }

    /// Whether the flash thread has a region to reclaim.
    pub(crate) fn needs_reclaim(&self, now_ms: u64) -> bool {
        let regions = self.regions.lock().expect("regions lock");
        self.reclaim_candidate(&regions, now_ms, false).is_some()
    }

    /// Reclaims a region (see `needs_reclaim`): calls `unindex(location, key)` for each of its
    /// records (the engine drops the index entries that still point there), marks it reclaimed
    /// on the medium, and frees it. The keys come from the region's directory (one short
    /// read), or, where that fails its CRC or cannot be read, from the records themselves
    /// (the whole region read). Returns the records visited.
    pub(crate) fn reclaim(
        &self,
        now_ms: u64,
        oldest: bool,
        unindex: &mut dyn FnMut(u64, RecordKey<'_>),
        visited_all: &mut dyn FnMut(),
    ) -> Result<u64, MediumError> {
        let Some(victim) = self.take_reclaim_candidate(now_ms, oldest) else {
            return Ok(0);
        };
        let visited = self.unindex_region(&victim, unindex);
        // The caller's batched drops happen before the region can be reused.
        visited_all();
        // A region that cannot be read back: its entries fail every read's check (they miss)
        // and are replaced or dropped as their keys are written; nothing is served from it.
        // The reclaimed header goes down (and is persisted) before the region is reused, so
        // no later open takes its old records for current ones.
        let marked = self.mark_reclaimed(victim.index, victim.seq, now_ms);
        let mut regions = self.regions.lock().expect("regions lock");
        regions.states[victim.index as usize] = RegionState::Free;
        regions.free.push_back(victim.index);
        self.counters
            .reclaimed_regions
            .fetch_add(1, Ordering::Relaxed);
        visited.and_then(|visited| marked.map(|()| visited))
    }

    /// Takes the region to reclaim off the written list (see `reclaim_candidate`) and drops
    /// its key filter; `None` when there is none.
    fn take_reclaim_candidate(&self, now_ms: u64, oldest: bool) -> Option<ReclaimVictim> {
        let mut regions = self.regions.lock().expect("regions lock");
        let at = self.reclaim_candidate(&regions, now_ms, oldest)?;
        let (index, seq) = regions.written.remove(at).expect("candidate in range");
        // Its entries are about to go: no read needs its filter, and its next use has none.
        *self.filters[index as usize].write().expect("filter lock") = None;
        let RegionState::Written {
            payload_bytes,
            records,
            directory_crc,
            ..
        } = regions.states[index as usize]
        else {
            unreachable!("a listed region is written");
        };
        Some(ReclaimVictim {
            index,
            seq,
            payload_bytes,
            records,
            directory_crc,
        })
    }

    /// Calls `unindex(location, key)` for each record of the region being reclaimed, its keys
    /// from the directory, else from the records themselves (the whole region read). Returns
    /// the records visited, or the read's error.
    fn unindex_region(
        &self,
        victim: &ReclaimVictim,
        unindex: &mut dyn FnMut(u64, RecordKey<'_>),
    ) -> Result<u64, MediumError> {
        let ReclaimVictim {
            index,
            seq,
            payload_bytes,
            records,
            directory_crc,
        } = *victim;
        let directory = self.read_directory(
            index,
            payload_bytes,
            records,
            directory_crc,
            Some(&self.counters.reclaim_read_bytes),
        );
        if let Some(entries) = directory {
            for entry in entries.chunks_exact(DIRECTORY_ENTRY_BYTES) {
                let (offset, hash) = format::read_directory_entry(entry);
                if u64::from(offset) < payload_bytes {
                    unindex(
                        self.location_of(index, offset as usize),
                        RecordKey::Hash(hash),
                    );
                }
            }
            return Ok(records);
        }
        self.counters
            .reclaim_full_reads
            .fetch_add(1, Ordering::Relaxed);
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let len = (BLOCK_SIZE_BYTES + payload_bytes as usize).next_multiple_of(block);
        let mut buf = AlignedBuf::zeroed(len, block);
        let read = self.medium.read_at(self.region_offset(index), &mut buf);
        self.counters
            .reclaim_read_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        if let Err(err) = read {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return Err(err);
        }
        Ok(self.visit_records(index, seq, &buf[BLOCK_SIZE_BYTES..], unindex))
    }

    /// Writes and persists the reclaimed header of region `index` (seq `seq`).
    fn mark_reclaimed(&self, index: u32, seq: u64, now_ms: u64) -> Result<(), MediumError> {
        let header = RegionHeader {
            flash_id: self.superblock.flash_id,
            seq,
            created_ms: now_ms,
            expires_at_ms: 0,
            payload_bytes: 0,
            records: 0,
            payload_crc: crc32c::crc32c(&[]),
            directory_crc: crc32c::crc32c(&[]),
            reclaimed: true,
        };
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let mut buf = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, block);
        format::write_region_header(&mut buf[..BLOCK_SIZE_BYTES], &header);
        let offset = self.region_offset(index);
        self.medium
            .write_at(offset, &buf[..BLOCK_SIZE_BYTES])
            .and_then(|()| {
                self.medium
                    .persist(offset, BLOCK_SIZE_BYTES as u64)
                    .map_err(|e| MediumError::Io {
                        op: "persist reclaimed region header",
                        path: "(flash)".into(),
                        message: e.message,
                        os_error: None,
                    })
            })
    }

    /// The directory of written region `index` (`records` entries after `payload_bytes` of
    /// records), read in the medium's read alignment and checked against its CRC; `None`
    /// when it cannot be read or fails the check. The bytes read count in `read_bytes`.
    fn read_directory(
        &self,
        index: u32,
        payload_bytes: u64,
        records: u64,
        directory_crc: u32,
        read_bytes: Option<&AtomicU64>,
    ) -> Option<Vec<u8>> {
        let align = self.read_align() as u64;
        let at = self.region_offset(index) + format::directory_start(payload_bytes);
        let len = records.checked_mul(DIRECTORY_ENTRY_BYTES as u64)?;
        let start = at / align * align;
        let end = (at + len).next_multiple_of(align);
        let mut buf = AlignedBuf::zeroed((end - start) as usize, align as usize);
        if let Some(counter) = read_bytes {
            counter.fetch_add(end - start, Ordering::Relaxed);
        }
        if self.medium.read_at(start, &mut buf).is_err() {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let directory = &buf[(at - start) as usize..(at - start + len) as usize];
        (crc32c::crc32c(directory) == directory_crc).then(|| directory.to_vec())
    }

    fn visit_records(
        &self,
        index: u32,
        seq: u64,
        payload: &[u8],
        unindex: &mut dyn FnMut(u64, RecordKey<'_>),
    ) -> u64 {
        let stamp = self.stamp(seq).to_le_bytes();
        let mut at = 0;
        let mut visited = 0;
        while at + STAMP_BYTES < payload.len() {
            let body = &payload[at + STAMP_BYTES..];
            let Some(size) = stamped_record_size(payload, at, &stamp) else {
                at += self.record_align(); // Damage: look at the next record boundary.
                continue;
            };
            unindex(
                self.location_of(index, at),
                RecordKey::Record(&body[..size]),
            );
            visited += 1;
            at += (STAMP_BYTES + size).next_multiple_of(self.record_align());
        }
        visited
    }

    /// Reads the record at `location` into `out` (resized), from the region's buffer while it
    /// is not yet written, else from the medium; returns the record's bytes within `out` (its
    /// stamp checked, its content not: `record::read` is the caller's), or `None` when the
    /// location holds no record of this tier's current generation there (a miss).
    pub(crate) fn read(
        &self,
        location: u64,
        out: &mut AlignedBuf,
    ) -> Option<std::ops::Range<usize>> {
        self.read_for(location, out, ReadFor::Request)
    }

    /// [`FlashTier::read`], counting its medium reads as `purpose`'s.
    pub(crate) fn read_for(
        &self,
        location: u64,
        out: &mut AlignedBuf,
        purpose: ReadFor,
    ) -> Option<std::ops::Range<usize>> {
        let (index, offset) = self.split(location)?;
        let started = std::time::Instant::now();
        let (seq, buffered) = {
            let regions = self.regions.lock().expect("regions lock");
            let state = &regions.states[index as usize];
            let seq = state.seq()?;
            match state {
                RegionState::Free => return None,
                RegionState::Open { .. } => {
                    let open = regions.open.iter().flatten().find(|o| o.index == index)?;
                    if offset + STAMP_BYTES >= open.payload_len {
                        return None;
                    }
                    let at = BLOCK_SIZE_BYTES + offset;
                    let end = BLOCK_SIZE_BYTES + open.payload_len;
                    return self.take_record(seq, &open.buf[at..end], 0, out);
                }
                RegionState::Writing { buf, .. } => (seq, Some(Arc::clone(buf))),
                RegionState::Written { payload_bytes, .. } => {
                    if (offset + STAMP_BYTES) as u64 >= *payload_bytes {
                        return None;
                    }
                    (seq, None)
                }
            }
        };
        if buffered.is_none() {
            if let Some(range) = self.take_staged(location, seq, out) {
                return Some(range);
            }
        }
        if let Some(buf) = buffered {
            let at = BLOCK_SIZE_BYTES + offset;
            return self.take_record(seq, &buf[at..], 0, out);
        }
        let range = self.read_medium(index, offset, seq, out, purpose)?;
        self.counters.record_read(started.elapsed(), range.len());
        Some(range)
    }

    /// Reads the records at `locations` from the medium, all in flight at once, and keeps each
    /// apart for the read that will ask for it (an I/O thread's work for requests that wait, so
    /// that the worker's reads then find them without I/O). Nothing is kept for a location not
    /// on the medium, or already kept.
    pub(crate) fn stage_many(&self, locations: &[u64]) {
        let mut reads = self.plan_reads(locations);
        let block = self.read_align();
        // A second round for the records longer than their first read.
        for _ in 0..2 {
            if reads.is_empty() {
                return;
            }
            if !self.read_delay_for_tests.is_zero() {
                std::thread::sleep(self.read_delay_for_tests);
            }
            let mut bufs: Vec<AlignedBuf> = reads
                .iter()
                .map(|read| AlignedBuf::zeroed(read.plan.len, block))
                .collect();
            let results = {
                let mut batch: Vec<(u64, &mut [u8])> = reads
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(read, buf)| (read.plan.start, &mut buf[..]))
                    .collect();
                self.medium.read_many(&mut batch)
            };
            let mut longer = Vec::new();
            for ((mut read, buf), result) in reads.into_iter().zip(bufs).zip(results) {
                let bytes = result.is_ok().then_some(&buf[..]);
                if self.finish_read(&mut read, bytes) == ReadOutcome::ReadMore {
                    longer.push(read);
                }
            }
            reads = longer;
        }
    }

    /// The reads that would stage the records at `locations`: those in a written region, not
    /// staged yet, each once (see [`FlashRead`]).
    pub(crate) fn plan_reads(&self, locations: &[u64]) -> Vec<FlashRead> {
        let mut planned: Vec<FlashRead> = Vec::with_capacity(locations.len());
        let regions = self.regions.lock().expect("regions lock");
        let staged = self.staged.lock().expect("staged lock");
        for &location in locations {
            let Some((index, offset)) = self.split(location) else {
                continue;
            };
            let seq = match &regions.states[index as usize] {
                RegionState::Written {
                    seq, payload_bytes, ..
                } if ((offset + STAMP_BYTES) as u64) < *payload_bytes => *seq,
                _ => continue, // In a buffer (no I/O to save) or not a record.
            };
            if staged.records.contains_key(&location)
                || planned.iter().any(|read| read.location == location)
            {
                continue;
            }
            planned.push(FlashRead {
                location,
                seq,
                plan: self.plan_read(index, offset),
                extended: false,
                started: std::time::Instant::now(),
            });
        }
        self.counters
            .reads
            .fetch_add(planned.len() as u64, Ordering::Relaxed);
        planned
    }

    /// Takes what `read` read (`None`: the read failed) and keeps the record for the read that
    /// will ask for it; or says to read more, `read` then says where.
    pub(crate) fn finish_read(&self, read: &mut FlashRead, bytes: Option<&[u8]>) -> ReadOutcome {
        let Some(bytes) = bytes else {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return ReadOutcome::Miss;
        };
        let range = match self.check_read(bytes, &read.plan, read.seq) {
            Checked::Record(range) => range,
            Checked::Miss => return ReadOutcome::Miss,
            Checked::Longer(_) if read.extended => return ReadOutcome::Miss,
            Checked::Longer(len) => {
                read.plan.len = len;
                read.extended = true;
                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                return ReadOutcome::ReadMore;
            }
        };
        self.counters
            .record_read(read.started.elapsed(), range.len());
        let record = StagedRecord {
            seq: read.seq,
            bytes: bytes[range].to_vec(),
        };
        let mut staged = self.staged.lock().expect("staged lock");
        if staged.records.len() >= STAGED_RECORDS_MAX
            || staged.bytes + record.bytes.len() > STAGED_BYTES_MAX
        {
            // Reads that wanted them read the medium themselves.
            staged.records.clear();
            staged.bytes = 0;
        }
        staged.bytes += record.bytes.len();
        if let Some(old) = staged.records.insert(read.location, record) {
            staged.bytes -= old.bytes.len();
        }
        ReadOutcome::Staged
    }

    /// A duplicate of the medium's descriptor for a server's own io_uring reads
    /// ([`Medium::read_file`]); `None` where the medium has none, or reads are slowed for tests
    /// (only `read_many` is slowed).
    pub(crate) fn read_file(&self) -> Option<std::os::fd::OwnedFd> {
        if !self.read_delay_for_tests.is_zero() {
            return None;
        }
        self.medium.read_file()
    }

    /// Whether a record read ahead waits for `location`.
    pub(crate) fn is_staged(&self, location: u64) -> bool {
        self.staged
            .lock()
            .expect("staged lock")
            .records
            .contains_key(&location)
    }

    /// Takes the record read ahead for `location` into `out`, if it is of generation `seq`
    /// (a region reclaimed and written again since makes it worthless: dropped).
    fn take_staged(
        &self,
        location: u64,
        seq: u64,
        out: &mut AlignedBuf,
    ) -> Option<std::ops::Range<usize>> {
        let staged = {
            let mut all = self.staged.lock().expect("staged lock");
            let record = all.records.remove(&location)?;
            all.bytes -= record.bytes.len();
            record
        };
        if staged.seq != seq {
            return None;
        }
        let len = staged.bytes.len();
        if out.len() < len {
            *out = AlignedBuf::zeroed(len.next_multiple_of(BLOCK_SIZE_BYTES), BLOCK_SIZE_BYTES);
        }
        out[..len].copy_from_slice(&staged.bytes);
        self.counters.staged_reads.fetch_add(1, Ordering::Relaxed);
        Some(0..len)
    }

    /// Copies the record stamped `seq` at `bytes[at..]` into `out`.
    fn take_record(
        &self,
        seq: u64,
        bytes: &[u8],
        at: usize,
        out: &mut AlignedBuf,
    ) -> Option<std::ops::Range<usize>> {
        if bytes.get(at..at + STAMP_BYTES)? != self.stamp(seq).to_le_bytes() {
            return None;
        }
        let body = &bytes[at + STAMP_BYTES..];
        let len = crate::record::declared_size(body)?.min(body.len());
        if out.len() < len {
            *out = AlignedBuf::zeroed(len.next_multiple_of(BLOCK_SIZE_BYTES), BLOCK_SIZE_BYTES);
        }
        out[..len].copy_from_slice(&body[..len]);
        Some(0..len)
    }

    /// Where the first read of the record at `offset` of region `index`'s payload goes: the
    /// blocks from its start to [`FlashTier::first_read_bytes`] past it (most records fit: one
    /// read; a longer one is read again at its length).
    fn plan_read(&self, index: u32, offset: usize) -> ReadPlan {
        let block = self.read_align();
        let byte = self.region_offset(index) + (BLOCK_SIZE_BYTES + offset) as u64;
        let start = byte / block as u64 * block as u64;
        let skip = (byte - start) as usize;
        let room = (self.region_offset(index) + self.superblock.region_size_bytes - start) as usize;
        let len = (skip + self.first_read_bytes())
            .next_multiple_of(block)
            .min(room);
        ReadPlan {
            start,
            skip,
            len,
            room,
        }
    }

    /// Bytes a first read covers past a record's start: the records appended so far, on
    /// average, with a quarter to spare, at most [`FIRST_READ_BYTES_MAX`] (4 KiB before any
    /// was appended, as after a restart). Reading past the record costs bandwidth: a 4 KiB
    /// guess made most reads of 1 KiB records 8 KiB long (the record starts inside its first
    /// block), where about two thirds of them fit one block.
    fn first_read_bytes(&self) -> usize {
        let items = self.counters.appended_items.load(Ordering::Relaxed);
        let bytes = self.counters.appended_bytes.load(Ordering::Relaxed);
        if items == 0 {
            return BLOCK_SIZE_BYTES;
        }
        let average = (bytes / items) as usize;
        (average + average / 4).clamp(self.record_align(), FIRST_READ_BYTES_MAX)
    }

    /// What `buf`, read as `plan` says, holds: the record stamped `seq`, or not that record, or
    /// the start of a record longer than the read (and how much to read to hold it).
    fn check_read(&self, buf: &[u8], plan: &ReadPlan, seq: u64) -> Checked {
        let skip = plan.skip;
        if buf[skip..skip + STAMP_BYTES] != self.stamp(seq).to_le_bytes() {
            return Checked::Miss;
        }
        let body = skip + STAMP_BYTES;
        let Some(size) = crate::record::declared_size(&buf[body..plan.len]) else {
            return Checked::Miss;
        };
        if body + size <= plan.len {
            Checked::Record(body..body + size)
        } else if body + size > plan.room {
            Checked::Miss
        } else {
            let block = self.read_align();
            Checked::Longer((body + size).next_multiple_of(block).min(plan.room))
        }
    }

    /// Reads the blocks of the record at `offset` of region `index`'s payload: the first block
    /// says the record's length, a second read fetches the rest when it is longer.
    fn read_medium(
        &self,
        index: u32,
        offset: usize,
        seq: u64,
        out: &mut AlignedBuf,
        purpose: ReadFor,
    ) -> Option<std::ops::Range<usize>> {
        let block = self.read_align();
        let mut plan = self.plan_read(index, offset);
        for _ in 0..2 {
            if out.len() < plan.len {
                *out = AlignedBuf::zeroed(plan.len, block);
            }
            self.counters.reads.fetch_add(1, Ordering::Relaxed);
            if purpose == ReadFor::Settle {
                self.counters.settle_reads.fetch_add(1, Ordering::Relaxed);
            }
            if !self.read_delay_for_tests.is_zero() {
                std::thread::sleep(self.read_delay_for_tests);
            }
            if self
                .medium
                .read_at(plan.start, &mut out[..plan.len])
                .is_err()
            {
                self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match self.check_read(out, &plan, seq) {
                Checked::Record(range) => return Some(range),
                Checked::Miss => return None,
                Checked::Longer(len) => plan.len = len,
            }
        }
        None
    }

    /// Persists every write made so far (a clean close, after the writes).
    pub(crate) fn persist(&self) -> Result<(), strata_pool::PersistError> {
        self.medium.persist(0, self.medium.len_bytes())
    }
}

/// The key filter of a region whose directory is `directory` (its entries' key hashes).
fn key_filter(directory: &[u8]) -> filter::KeyFilter {
    let entries = directory.chunks_exact(DIRECTORY_ENTRY_BYTES);
    let count = entries.len();
    filter::KeyFilter::new(
        count,
        entries.map(|entry| format::read_directory_entry(entry).1),
    )
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn random_u64() -> u64 {
    use rand::RngCore;
    rand::thread_rng().next_u64() | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{self, RecordMeta};
    use strata_pool::testing::{Faults, MemoryMedium, SimulatedMedium};

    const REGION: u64 = 64 << 10;

    fn tier(regions: u64) -> FlashTier {
        tier_reading_in(regions, 4096)
    }

    /// A tier whose medium reads in `read_align_bytes` pieces (its blocks are 4 KiB).
    fn tier_reading_in(regions: u64, read_align_bytes: usize) -> FlashTier {
        let len = BLOCK_SIZE_BYTES as u64 + regions * REGION;
        let memory = MemoryMedium::new(len as usize, 4096).reading_in(read_align_bytes);
        let medium = SimulatedMedium::new(memory, Faults::default());
        FlashTier::open(Arc::new(medium), 7, REGION, 8 << 10, false)
            .unwrap()
            .0
    }

    /// A stand-in for the engine's key hash in the region directory (tests map it back).
    fn record_hash(record: &[u8]) -> u64 {
        u64::from(crc32c::crc32c(record)) | ((record.len() as u64) << 32)
    }

    fn encode(key: &str, value_len: usize) -> Vec<u8> {
        encode_filled(key, value_len, b'v')
    }

    fn encode_filled(key: &str, value_len: usize, fill: u8) -> Vec<u8> {
        let meta = RecordMeta {
            cas: Some(42),
            ..RecordMeta::default()
        };
        let value = vec![fill; value_len];
        let mut out = vec![0; record::record_size(key.len(), value_len, &meta)];
        record::write(&mut out, key.as_bytes(), &value, &meta);
        out
    }

    fn read_key(tier: &FlashTier, location: u64) -> Option<Vec<u8>> {
        let mut out = AlignedBuf::zeroed(4096, 4096);
        let range = tier.read(location, &mut out)?;
        match record::read(&out[range]) {
            record::Scan::Record(view) => Some(view.key.to_vec()),
            _ => None,
        }
    }

    fn write_all(tier: &FlashTier) {
        while let Some(job) = tier.next_write() {
            tier.write(job).unwrap();
        }
    }

    /// Appends `record` to the first class, never expiring, under its stand-in hash.
    fn append(tier: &FlashTier, record: &[u8]) -> Option<u64> {
        tier.append(record, 0, 0, None, record_hash(record))
    }

    /// Appends `key-0` .. `key-{count-1}` with `value_len`-byte values, then seals and writes
    /// every region.
    fn write_keys(tier: &FlashTier, count: usize, value_len: usize) {
        for i in 0..count {
            append(tier, &encode(&format!("key-{i}"), value_len)).expect("room");
        }
        tier.seal_all();
        write_all(tier);
    }

    #[test]
    fn records_read_back_from_the_buffer_while_open_and_writing_and_from_the_medium() {
        let tier = tier(16);
        let mut locations = Vec::new();
        for i in 0..300 {
            let record = encode(&format!("key-{i}"), 100 + i * 7 % 2000);
            locations.push(append(&tier, &record).expect("room"));
        }
        // Some regions sealed (queued), one open: every record reads back.
        for (i, &location) in locations.iter().enumerate() {
            assert_eq!(
                read_key(&tier, location),
                Some(format!("key-{i}").into_bytes())
            );
        }
        write_all(&tier);
        tier.seal_all();
        write_all(&tier);
        for (i, &location) in locations.iter().enumerate() {
            assert_eq!(
                read_key(&tier, location),
                Some(format!("key-{i}").into_bytes())
            );
        }
        assert!(tier.counters.reads.load(Ordering::Relaxed) >= 300);
        assert_eq!(
            tier.read(0, &mut AlignedBuf::zeroed(64, 64)),
            None,
            "the superblock"
        );
    }

    #[test]
    fn on_a_medium_of_512_byte_reads_a_record_costs_a_read_about_its_length() {
        let tier = tier_reading_in(16, 512);
        let mut locations = Vec::new();
        for i in 0..200 {
            let record = encode(&format!("key-{i}"), 1000 + i * 13 % 200);
            locations.push(append(&tier, &record).expect("room"));
        }
        tier.seal_all();
        write_all(&tier);
        let mut read_bytes = 0;
        for (i, &location) in locations.iter().enumerate() {
            let (index, offset) = tier.split(location).expect("a record's location");
            let plan = tier.plan_read(index, offset);
            assert!(plan.start.is_multiple_of(512) && plan.len.is_multiple_of(512));
            read_bytes += plan.len;
            // Read back from the medium (no region buffer is left), one read or two.
            assert_eq!(
                read_key(&tier, location),
                Some(format!("key-{i}").into_bytes())
            );
        }
        // With 4 KiB reads each ~1.1 KiB record would cost 4 or 8 KiB.
        let average = read_bytes / locations.len();
        assert!(
            average <= 2048,
            "{average} bytes read per record on average"
        );
        // And read ahead in one batch (the I/O threads' way): every record staged.
        tier.stage_many(&locations);
        assert!(locations.iter().all(|&location| tier.is_staged(location)));
    }

    #[test]
    fn reclaim_frees_the_oldest_region_and_visits_its_records() {
        let tier = tier(12);
        let mut appended = Vec::new();
        let mut keys_by_hash = HashMap::new();
        let mut refused = 0;
        for i in 0..2000 {
            let record = encode(&format!("key-{i:05}"), 1000);
            keys_by_hash.insert(record_hash(&record), format!("key-{i:05}"));
            match tier.append(&record, 0, i % CLASSES, None, record_hash(&record)) {
                Some(location) => appended.push((location, format!("key-{i:05}"))),
                None => refused += 1,
            }
            write_all(&tier);
            while tier.needs_reclaim(0) {
                let mut visited = Vec::new();
                tier.reclaim(
                    0,
                    false,
                    &mut |location, key| {
                        let RecordKey::Hash(hash) = key else {
                            panic!("an undamaged region's directory names its keys")
                        };
                        visited.push((location, keys_by_hash[&hash].clone()));
                    },
                    &mut || {},
                )
                .unwrap();
                assert!(!visited.is_empty());
                for entry in &visited {
                    let at = appended.iter().position(|a| a == entry).expect("appended");
                    appended.remove(at);
                }
            }
        }
        assert_eq!(refused, 0, "reclaim keeps regions free");
        let reclaimed = tier.counters.reclaimed_regions.load(Ordering::Relaxed);
        assert!(reclaimed > 5);
        // Each reclaim read its directory (a region of 1 KiB records holds about 60), not
        // the region's 64 KiB.
        assert_eq!(tier.counters.reclaim_full_reads.load(Ordering::Relaxed), 0);
        let read = tier.counters.reclaim_read_bytes.load(Ordering::Relaxed);
        assert!(
            read <= reclaimed * 4096,
            "{read} bytes for {reclaimed} reclaims"
        );
        for (location, key) in &appended {
            assert_eq!(read_key(&tier, *location), Some(key.clone().into_bytes()));
        }
    }

    #[test]
    fn a_damaged_directory_sends_reclaim_to_the_records_themselves() {
        let medium = Arc::new(SimulatedMedium::new(
            MemoryMedium::new(BLOCK_SIZE_BYTES + 12 * REGION as usize, 4096),
            Faults::default(),
        ));
        let tier = FlashTier::open(
            Arc::clone(&medium) as Arc<dyn Medium>,
            7,
            REGION,
            8 << 10,
            false,
        )
        .unwrap()
        .0;
        write_keys(&tier, 40, 900);
        // Flip a byte of the oldest region's directory (right after its records).
        let (index, seq, payload_bytes, records) = {
            let regions = tier.regions.lock().unwrap();
            let (index, seq) = regions.written[0];
            let RegionState::Written {
                payload_bytes,
                records,
                ..
            } = regions.states[index as usize]
            else {
                panic!("written")
            };
            (index, seq, payload_bytes, records)
        };
        assert!(records > 1);
        let at = tier.region_offset(index) + format::directory_start(payload_bytes) + 5;
        let block_at = at / 4096 * 4096;
        let mut block = AlignedBuf::zeroed(4096, 4096);
        medium.read_at(block_at, &mut block).unwrap();
        block[(at - block_at) as usize] ^= 0x10;
        medium.write_at(block_at, &block).unwrap();
        let mut visited = Vec::new();
        let count = tier
            .reclaim(
                0,
                true,
                &mut |location, key| {
                    let RecordKey::Record(bytes) = key else {
                        panic!("a damaged directory is not used")
                    };
                    let record::Scan::Record(view) = record::read(bytes) else {
                        panic!("the records are intact")
                    };
                    visited.push((location, String::from_utf8(view.key.to_vec()).unwrap()));
                },
                &mut || {},
            )
            .unwrap();
        assert_eq!(count, records);
        assert_eq!(visited.len() as u64, records, "region seq {seq}");
        assert_eq!(tier.counters.reclaim_full_reads.load(Ordering::Relaxed), 1);
        for (location, key) in &visited {
            assert!(key.starts_with("key-"), "{location}: {key}");
        }
    }

    #[test]
    fn without_a_free_buffer_or_region_an_append_is_refused_not_waited_for() {
        let tier = tier(12);
        let record = encode("k", 30_000);
        let mut accepted = 0;
        // Nothing is written or reclaimed: the tier fills and then refuses.
        for _ in 0..100 {
            if append(&tier, &record).is_some() {
                accepted += 1;
            }
        }
        assert!(accepted > 0 && accepted < 100, "{accepted}");
        assert!(tier.counters.refused_items.load(Ordering::Relaxed) > 0);
    }

    fn reopen(medium: Arc<dyn Medium>, pool_id: u64) -> (FlashTier, FlashOpened) {
        FlashTier::open(medium, pool_id, REGION, 8 << 10, true).unwrap()
    }

    #[test]
    fn a_written_region_s_filter_rules_out_other_keys_and_is_rebuilt_after_a_reopen() {
        let len = BLOCK_SIZE_BYTES as u64 + 16 * REGION;
        let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::new(len as usize, 4096));
        let (tier, _) = FlashTier::open(Arc::clone(&medium), 7, REGION, 8 << 10, true).unwrap();
        let mut placed = Vec::new();
        for i in 0..300 {
            let record = encode(&format!("key-{i}"), 500);
            let hash = record_hash(&record);
            placed.push((tier.append(&record, 0, 0, None, hash).expect("room"), hash));
        }
        tier.seal_all();
        write_all(&tier);
        // Another key sharing the low 24 bits (what the index stores) of each record's key.
        let other = |hash: u64| hash ^ 0x5A5A_5A5A_0000_0000;
        let check = |tier: &FlashTier| {
            assert!(
                placed.iter().all(|&(l, h)| tier.may_hold(l, h)),
                "no false negative"
            );
            placed
                .iter()
                .filter(|&&(l, h)| tier.may_hold(l, other(h)))
                .count()
        };
        let passed = check(&tier);
        assert!(passed < 30, "{passed} of 300 other keys passed the filters");
        assert!(tier.stats(0).filter_bytes > 0);
        drop(tier);
        // Reopened: regions kept have no filter until the flash thread builds them.
        let (tier, _) = reopen(Arc::clone(&medium), 7);
        assert_eq!(
            check(&tier),
            300,
            "unfiltered: every candidate may be the key"
        );
        assert!(tier.stats(0).regions_unfiltered > 0);
        while tier.build_one_filter() {}
        assert_eq!(tier.stats(0).regions_unfiltered, 0);
        let passed = check(&tier);
        assert!(
            passed < 30,
            "{passed} of 300 other keys passed the rebuilt filters"
        );
    }

    /// Hostile region metadata with valid checksums: a header whose directory would run past
    /// its region is not kept at a reopen, and a directory entry pointing past the payload is
    /// skipped by reclaim (never handed to the engine as a location).
    #[test]
    fn a_directory_that_does_not_fit_or_points_past_the_records_is_not_trusted() {
        let len = BLOCK_SIZE_BYTES as u64 + 12 * REGION;
        let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::new(len as usize, 4096));
        let (tier, _) = FlashTier::open(Arc::clone(&medium), 7, REGION, 8 << 10, true).unwrap();
        write_keys(&tier, 200, 500);
        let (first, second) = {
            let regions = tier.regions.lock().unwrap();
            (regions.written[0].0, regions.written[1].0)
        };
        drop(tier);
        let mut block = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, 4096);
        let at = |index: u32| BLOCK_SIZE_BYTES as u64 + u64::from(index) * REGION;
        // Region `first`: a records count whose directory cannot fit, checksums recomputed.
        medium.read_at(at(first), &mut block).unwrap();
        let mut header = format::read_region_header(&block).expect("a header");
        header.records = REGION;
        format::write_region_header(&mut block, &header);
        medium.write_at(at(first), &block).unwrap();
        // Region `second`: its first directory entry points past the payload, CRC recomputed.
        medium.read_at(at(second), &mut block).unwrap();
        let mut header = format::read_region_header(&block).expect("a header");
        let directory_at = at(second) + format::directory_start(header.payload_bytes);
        let dir_len = (header.records as usize * DIRECTORY_ENTRY_BYTES).next_multiple_of(4096);
        let dir_block = directory_at / 4096 * 4096;
        let mut dir = AlignedBuf::zeroed(dir_len + 4096, 4096);
        medium.read_at(dir_block, &mut dir).unwrap();
        let skip = (directory_at - dir_block) as usize;
        let entries = skip..skip + header.records as usize * DIRECTORY_ENTRY_BYTES;
        let (_, hash) = format::read_directory_entry(&dir[skip..skip + DIRECTORY_ENTRY_BYTES]);
        format::write_directory_entry(&mut dir[skip..skip + DIRECTORY_ENTRY_BYTES], u32::MAX, hash);
        header.directory_crc = crc32c::crc32c(&dir[entries]);
        medium.write_at(dir_block, &dir).unwrap();
        format::write_region_header(&mut block, &header);
        medium.write_at(at(second), &block).unwrap();

        let (tier, _) = reopen(Arc::clone(&medium), 7);
        {
            let regions = tier.regions.lock().unwrap();
            assert!(!regions.written.iter().any(|&(index, _)| index == first));
            assert_eq!(regions.written[0].0, second, "the oldest kept region");
        }
        let mut visited = Vec::new();
        let count = tier
            .reclaim(
                0,
                true,
                &mut |location, _| visited.push(location),
                &mut || {},
            )
            .unwrap();
        assert_eq!(count, header.records);
        assert_eq!(
            visited.len() as u64,
            header.records - 1,
            "the bad entry skipped"
        );
        assert!(visited.iter().all(|&l| tier
            .split(l)
            .is_some_and(|(i, o)| { i == second && (o as u64) < header.payload_bytes })));
        assert_eq!(tier.counters.reclaim_full_reads.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_reopen_keeps_written_regions_and_a_foreign_or_reclaimed_one_is_not_read() {
        let len = BLOCK_SIZE_BYTES as u64 + 12 * REGION;
        let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::new(len as usize, 4096));
        let (tier, opened) =
            FlashTier::open(Arc::clone(&medium), 7, REGION, 8 << 10, true).unwrap();
        assert_eq!(opened.regions_kept, 0);
        assert!(
            opened.formatted_because.is_some(),
            "a new medium is formatted"
        );
        let mut locations = Vec::new();
        for i in 0..700 {
            let record = encode(&format!("key-{i}"), 500);
            locations.push(
                tier.append(&record, 500, 0, None, record_hash(&record))
                    .expect("room"),
            );
            write_all(&tier);
        }
        tier.seal_all();
        write_all(&tier);
        // The oldest region is reclaimed: its records are gone for good.
        let mut reclaimed = Vec::new();
        tier.reclaim(
            0,
            false,
            &mut |location, _| reclaimed.push(location),
            &mut || {},
        )
        .unwrap_or_else(|_| panic!("reclaim"));
        assert!(!reclaimed.is_empty());
        let written = tier.stats(0).regions_written;
        drop(tier);

        let (tier, opened) = reopen(Arc::clone(&medium), 7);
        assert_eq!(opened.formatted_because, None);
        assert_eq!(opened.regions_kept, written);
        for (i, &location) in locations.iter().enumerate() {
            let expected =
                (!reclaimed.contains(&location)).then(|| format!("key-{i}").into_bytes());
            assert_eq!(read_key(&tier, location), expected, "record {i}");
            assert_eq!(tier.holds(location), expected.is_some());
        }
        // The reclaimed region's seq is never handed out again.
        let next = tier.regions.lock().unwrap().next_seq;
        assert!(
            next > written + 1,
            "next seq {next} follows the reclaimed region's"
        );
        drop(tier);

        let (tier, opened) = reopen(Arc::clone(&medium), 8);
        assert_eq!(opened.formatted_because, Some("it belongs to another pool"));
        assert!(locations
            .iter()
            .all(|&l| read_key(&tier, l).is_none() && !tier.holds(l)));
        drop(tier);

        // A superblock of format version 2 (checksum good) is formatted anew, and says why.
        let mut block = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, 4096);
        medium.read_at(0, &mut block).unwrap();
        block[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&block[..56]);
        block[56..60].copy_from_slice(&crc.to_le_bytes());
        medium.write_at(0, &block).unwrap();
        let (_, opened) = reopen(Arc::clone(&medium), 8);
        assert_eq!(
            opened.formatted_because,
            Some("it is in another version of the flash format (this build's is 3)")
        );
    }

    /// A medium that says it is `len_bytes` long (and is a small one underneath).
    #[derive(Debug)]
    struct Claimed {
        inner: MemoryMedium,
        len_bytes: u64,
    }

    impl Medium for Claimed {
        fn len_bytes(&self) -> u64 {
            self.len_bytes
        }
        fn domain(&self) -> strata_pool::PersistenceDomain {
            self.inner.domain()
        }
        fn block_size_bytes(&self) -> usize {
            self.inner.block_size_bytes()
        }
        fn is_direct(&self) -> bool {
            self.inner.is_direct()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
            self.inner.read_at(offset, buf)
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
            self.inner.write_at(offset, data)
        }
        fn persist(&self, offset: u64, len: u64) -> Result<(), strata_pool::PersistError> {
            self.inner.persist(offset, len)
        }
        fn discard(&self, offset: u64, len: u64) -> Result<(), MediumError> {
            self.inner.discard(offset, len)
        }
    }

    /// A medium of 16 TiB or more is refused before anything is read or written: its last
    /// records' locations would not fit the index.
    #[test]
    fn a_medium_beyond_the_index_s_reach_is_refused_untouched() {
        let inner = MemoryMedium::new(BLOCK_SIZE_BYTES, 4096);
        inner.write_at(0, &[0xAB; BLOCK_SIZE_BYTES]).unwrap();
        let medium = Arc::new(Claimed {
            inner,
            len_bytes: 16 << 40,
        });
        let err = FlashTier::open(medium.clone(), 7, REGION, 8 << 10, true).unwrap_err();
        assert!(
            matches!(err, FlashError::TooLarge(bytes) if bytes == 16 << 40),
            "{err}"
        );
        assert!(
            err.to_string().contains(&flash_bytes_max().to_string()),
            "{err}"
        );
        assert!(flash_bytes_max() < 16 << 40 && flash_bytes_max() > (16 << 40) - (1 << 30));
        let mut first = vec![0u8; BLOCK_SIZE_BYTES];
        medium.read_at(0, &mut first).unwrap();
        assert!(first.iter().all(|&b| b == 0xAB), "nothing was formatted");
    }

    #[test]
    fn after_a_power_cut_mid_write_no_record_of_an_earlier_generation_is_read() {
        // One region reused over and over with the same keys at the same offsets: a torn write
        // of a new generation leaves the old generation's records where the new ones belong.
        for seed in 0..40u64 {
            let len = BLOCK_SIZE_BYTES as u64 + 12 * REGION;
            let medium = Arc::new(SimulatedMedium::new(
                MemoryMedium::new(len as usize, 4096),
                Faults::default(),
            ));
            let dyn_medium: Arc<dyn Medium> = medium.clone();
            let (tier, _) =
                FlashTier::open(Arc::clone(&dyn_medium), 7, REGION, 8 << 10, true).unwrap();
            let mut current = std::collections::HashMap::new();
            for generation in 0..30u64 {
                for i in 0..50u64 {
                    let key = format!("key-{i}");
                    let record = encode_filled(&key, 900, b'a' + (generation % 26) as u8);
                    if let Some(location) = append(&tier, &record) {
                        current.insert(location, (key, record));
                    }
                }
                tier.seal_all();
                write_all(&tier);
                tier.persist().unwrap();
                while tier.needs_reclaim(0) {
                    tier.reclaim(
                        0,
                        false,
                        &mut |location, _| {
                            current.remove(&location);
                        },
                        &mut || {},
                    )
                    .unwrap();
                }
            }
            // Some last writes, then a cut that keeps a random part of what was not persisted.
            for i in 0..50u64 {
                let record = encode_filled(&format!("key-{i}"), 900, b'Z');
                if let Some(location) = append(&tier, &record) {
                    current.insert(location, (format!("key-{i}"), record));
                }
            }
            tier.seal_all();
            write_all(&tier);
            let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let image = medium.crash_image(&mut |_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % 3 == 0
            });
            drop(tier);
            let (tier, _) = reopen(Arc::new(MemoryMedium::from_image(image, 4096)), 7);
            let mut out = AlignedBuf::zeroed(4096, 4096);
            for (&location, (key, record)) in &current {
                let Some(range) = tier.read(location, &mut out) else {
                    continue; // Lost with the cut: a miss.
                };
                if let record::Scan::Record(view) = record::read(&out[range.clone()]) {
                    if view.key == key.as_bytes() {
                        assert_eq!(
                            &out[range],
                            &record[..],
                            "seed {seed}: {key} read back stale"
                        );
                    }
                }
            }
        }
    }
}
