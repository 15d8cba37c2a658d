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
//! What survives a restart: a clean close writes every region and saves the entries pointing
//! into them (in the DRAM index's snapshot, or in the index files with the index in the pool),
//! so a clean stop keeps the tier. After a process crash with the index in the pool, the
//! entries in the index files are kept (a shard the crash caught changing reads its flash
//! entries back from its tables), less those whose region the medium does not hold as written;
//! with the index in DRAM, the tier starts empty. No item comes back from flash older than a
//! write or delete the memory tier saw (`shard::flash`'s suspects, `restore_salvaged_flash`).
//!
//! | file          | concern                                                              |
//! |---------------|----------------------------------------------------------------------|
//! | `mod.rs`      | the tier's state, counters, stats, locations                         |
//! | `bundle.rs`   | an item of several records as the one flash record it is demoted to   |
//! | `open.rs`     | superblock (kept or formatted), region listing, key filters          |
//! | `write.rs`    | appends to open region buffers, sealing, the flash thread's writes   |
//! | `reclaim.rs`  | the oldest (or expired) region's entries dropped, the region freed   |
//! | `read.rs`     | record reads: buffers, records read ahead, the medium                |
//! | `read_ahead.rs` | records read ahead for a waiting request, lent to its reads        |
//! | `format.rs`   | the on-medium format (docs/FLASH_FORMAT.md)                          |
//! | `filter.rs`   | per-region key filters                                               |
//! | `check.rs`    | the offline check (`strata flash verify`)                            |
//! | `tiering.rs`  | how the engine uses the tier: the flash thread, demotion, promotion  |

pub(crate) mod bundle;
pub(crate) mod check;
pub(crate) mod filter;
pub(crate) mod format;
mod open;
mod read;
pub(crate) mod read_ahead;
mod reclaim;
pub(crate) mod tiering;
mod write;

pub(crate) use write::RecordPlacement;

use std::collections::VecDeque;
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
    stamped_record(payload, at, stamp).map(|view| view.size_bytes)
}

/// The record at `payload[at..]` after its stamp, when the stamp is `stamp` and the record
/// passes its own checks (see [`stamped_record_size`]).
pub(crate) fn stamped_record<'a>(
    payload: &'a [u8],
    at: usize,
    stamp: &[u8; STAMP_BYTES],
) -> Option<crate::record::RecordView<'a>> {
    if payload.get(at..at.checked_add(STAMP_BYTES)?)? != stamp {
        return None;
    }
    match crate::record::read(&payload[at + STAMP_BYTES..]) {
        crate::record::Scan::Record(view) => Some(view),
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
    /// Reads served from a record read ahead while its request waited (no I/O on the worker).
    pub(crate) staged_reads: AtomicU64,
    /// Records read ahead that no read took (`Engine::discard_read_ahead`).
    pub(crate) staged_dropped: AtomicU64,
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
    /// `FlashConfig::read_delay_for_tests`.
    pub(crate) read_delay_for_tests: std::time::Duration,
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
    /// Reads served from a record read ahead while its request waited.
    pub staged_reads: u64,
    /// Records read ahead that no read took: their keys were written or deleted meanwhile,
    /// their requests went away, or a connection kept more across waits than its bound.
    pub staged_dropped: u64,
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

impl FlashTier {
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
            staged_dropped: load(&c.staged_dropped),
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

    /// Whether a record of `record_len` bytes fits a region (an empty one: its header, the
    /// stamped record, one directory entry). Memory records always do (a region is at least
    /// a segment); a family's bundle may not.
    fn holds_record(&self, record_len: usize) -> bool {
        let size = (STAMP_BYTES + record_len).next_multiple_of(self.record_align());
        format::directory_start(size as u64) as usize + DIRECTORY_ENTRY_BYTES
            <= self.superblock.region_size_bytes as usize
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

    /// Persists every write made so far (a clean close, after the writes).
    pub(crate) fn persist(&self) -> Result<(), strata_pool::PersistError> {
        self.medium.persist(0, self.medium.len_bytes())
    }
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
mod tests;
