//! The strata storage engine: items appended into TTL-grouped segments of a data pool, found
//! through a compact DRAM hash index. Embeddable: link it and call `get`/`set` directly.
//!
//! ```text
//!             key ──xxh3──► hash ──► shard (RwLock) ──► index: 2 candidate buckets (64 B)
//!                                         │                    slot = hash24 | freq | location
//!                                         ▼
//!   TTL chain [bucket b]: seg 7 ─► seg 12 ─► seg 30 (open)      records appended, 8-B aligned
//!   pool: | header | segment table | seg 0 | seg 1 | ... |      (DRAM, DAX file, or file)
//! ```
//!
//! Goals: a few bytes of overhead per item (an 8-byte record header and ~8.5 bytes of index),
//! no global lock on the read or write path, an index that grows online, whole-segment expiry
//! and eviction, and records that a restart can validate (checksums) and order (segment seq).
//! Non-goals: knowing any wire protocol, or how a typed value is encoded: a record carries its
//! kind (`Kind`: string, hash), the server and `strata-types` read and write the bytes.
//!
//! Concurrency: the keyspace is split into shards, each behind a reader-writer lock holding
//! its own index, TTL chains and segments. Reads of one shard run in parallel and never wait
//! for writes to other shards. Free segments sit in one pool-wide list touched once per
//! segment (about once per MiB written).

#![forbid(unsafe_code)]

mod check;
mod cleaning;
mod clock;
mod config;
mod error;
mod flash;
mod index;
mod index_files;
mod record;
mod recovery;
mod root;
mod scrub;
mod segment;
mod shard;
mod snapshot;
mod stats;
mod ttl;
mod txlog;

pub use api::{
    parse_u64, DeleteOutcome, Door, DynDoor, ExpirySample, Families, ScanStep, Txn,
    PREFETCH_KEYS_MAX, SCAN_BUCKETS_PER_CALL_MAX, SCAN_BUCKETS_PER_FLASH_STEP,
    SCAN_BUCKETS_PER_STEP, SCAN_FLASH_READS_PER_CALL_MAX,
};
pub use check::{check_pool_file, PoolReport};
pub use cleaning::CLEAN_AHEAD_SEGMENTS;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{
    segment_size_bytes_for, shard_count_for, Durability, EngineConfig, EvictionPolicy,
    FlashAdmission, FlashConfig, FlashMedium, IndexPlacement, PoolLocation, RecoveryObserver,
    RecoveryProgress, DATA_BYTES_MAX, FLASH_REGION_SIZE_BYTES_DEFAULT, KEY_LEN_FOR_VALUE_LIMIT,
    MEMORY_BYTES_DEFAULT, SEGMENT_SIZE_BYTES_DEFAULT, SEGMENT_SIZE_BYTES_MAX, SHARD_COUNT_DEFAULT,
    VALUE_LEN_MAX_DEFAULT,
};
pub use error::{FamilyBroken, OpenError, WriteError};
pub use flash::check::{check_flash_file, FlashReport};
pub use flash::format::Superblock as FlashSuperblock;
pub use flash::read_ahead::ReadAhead;
pub use flash::{FlashError, FlashOpened, FlashRead, FlashStats, ReadOutcome};
pub use record::{Kind, KEY_LEN_MAX};

/// The engine's decoders the fuzz targets drive (`fuzz/`), not an API.
#[doc(hidden)]
pub mod fuzzing {
    /// The `flash_bundle` target's checks (see `flash::bundle::check_any`).
    pub use crate::flash::bundle::check_any as check_flash_bundle;
}
pub use recovery::{RecoveryPlan, RecoveryReport};
pub use strata_pool::{Backend, PersistenceDomain};
pub use txlog::{Image, ImageItem};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use strata_pool::{PersistError, Pool, Segment};

use shard::{CleanOutcome, Shard, ShardLock};

/// An item as returned by a read, borrowing the engine's memory for the closure's duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value: a string kept in several records (`api::large`) joined.
    pub value: &'a [u8],
    /// The owner record's own bytes: for a string of several records its header, else the
    /// same as `value` (what a copy of the record with its parts, [`Families`], takes).
    pub record_value: &'a [u8],
    /// memcached client flags.
    pub client_flags: u32,
    /// The item's CAS value: unique per write, across restarts, unless the writer chose it
    /// ([`Change::WriteWithCas`]).
    pub cas: u64,
    /// Absolute expiry in Unix ms, `None` when it never expires.
    pub expires_at_ms: Option<u64>,
    /// What the value is (a string unless a typed write stored another kind).
    pub kind: Kind,
    /// How many parts the item owns (0: it is one record; see [`Txn::write_owner`]).
    pub parts: u32,
    /// Whether the item had been read since it was written, not counting this access
    /// (memcached's "fetched" bit, the meta flag `h`). Reads are [`Engine::get`],
    /// [`Change::Read`] and writes that keep the CAS (touch); every other write starts over.
    pub fetched: bool,
    /// Reads since the item was written or merge eviction last carried it forward, not
    /// counting this access, saturating at 6 (the index slot's 3-bit count, which merge
    /// eviction keeps hot items by; OBJECT FREQ answers it).
    pub reads: u8,
    /// Whether the read found it on the flash tier (memory holds only its index slot).
    pub on_flash: bool,
}

impl ItemRef<'_> {
    /// What the item costs in memory (MEMORY USAGE's figure): its record (key, value and the
    /// fields it carries; the explicit CAS a record the cleaner moved carries, 8 bytes, is left
    /// out) plus its index slot's share; on flash, the slot alone.
    pub fn memory_bytes(&self) -> u64 {
        if self.on_flash {
            return index::INDEX_BYTES_PER_ITEM;
        }
        let meta = record::RecordMeta {
            expires_at_ms: self.expires_at_ms,
            cas: None,
            client_flags: self.client_flags,
            kind: self.kind,
            parts: self.parts,
        };
        record::record_size(self.key.len(), self.value.len(), &meta) as u64
            + index::INDEX_BYTES_PER_ITEM
    }
}

/// What [`Engine::observe`] saw of a key: compare two to learn whether it changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The item's CAS and expiry, `None` when absent.
    pub item: Option<(u64, Option<u64>)>,
    /// When absent: the CAS of an expired record of the key still in memory.
    pub expired: Option<u64>,
    /// Removals counted for the key's hash slot.
    pub removals: u32,
}

/// When a written item expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Never.
    Never,
    /// At this Unix time in milliseconds (a time in the past deletes the item).
    AtMs(u64),
    /// Keep the current item's expiry (Redis KEEPTTL; touch-free updates).
    Keep,
}

/// The condition a store is subject to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Store unconditionally (set).
    Always,
    /// Only if the key is absent (add, SET NX).
    IfAbsent,
    /// Only if the key is present (replace, SET XX).
    IfPresent,
    /// Only if the key is present with this CAS (cas).
    IfCas(u64),
}

/// What a store did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored; the item's new CAS.
    Stored(u64),
    /// The condition failed: add of a present key, or replace of an absent one.
    NotStored,
    /// `IfCas` with another CAS.
    Exists,
    /// `IfCas` on an absent key.
    NotFound,
}

/// Options of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// memcached client flags.
    pub client_flags: u32,
    /// Expiry.
    pub expiry: Expiry,
    /// Condition.
    pub condition: Condition,
    /// What the value is (RENAME and COPY carry a hash as a hash).
    pub kind: Kind,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            client_flags: 0,
            expiry: Expiry::Never,
            condition: Condition::Always,
            kind: Kind::String,
        }
    }
}

/// What a `modify` closure decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Leave the item as it is.
    Keep,
    /// Leave the item as it is, but count the call as a read of it, as [`Engine::get`] does:
    /// the item becomes fetched and its access frequency goes up. For read-modify-write
    /// commands that answer with the item they found (memcached's `mg` with `N`).
    Read,
    /// Delete the item.
    Delete,
    /// Write the value the closure put in the buffer, with these flags and expiry, as a
    /// string. `keep_cas` keeps the item's CAS and its kind: such a touch (the item's own
    /// value back, with a new expiry) keeps the item's reads and counts as one more (like
    /// memcached's touch and gat); any other write gets a new CAS and starts the item's reads
    /// over.
    Write {
        /// memcached client flags.
        client_flags: u32,
        /// Expiry (`Keep` keeps the current one).
        expiry: Expiry,
        /// Keep the current CAS.
        keep_cas: bool,
    },
    /// Keep the item as it is (value, every record of it, client flags, CAS) with a new
    /// expiry: a touch, as `Write` with `keep_cas` and the item's own value back, without the
    /// closure copying the value (a large string's owner is rewritten alone, its parts kept).
    /// Nothing happens when the key is absent.
    Touch {
        /// Expiry (`Keep` keeps the current one).
        expiry: Expiry,
    },
    /// Like `Write` without `keep_cas`, but the item gets the CAS value `cas` instead of a new
    /// one (memcached's meta flag `E`). The engine stores it with the record, so it survives
    /// restarts, and does not check it: two writes given the same value share it.
    WriteWithCas {
        /// memcached client flags.
        client_flags: u32,
        /// Expiry (`Keep` keeps the current one).
        expiry: Expiry,
        /// The item's CAS value.
        cas: u64,
    },
    /// Write the value the closure put in the buffer as a value of `kind` (a Redis type's
    /// encoding), with no client flags and a new CAS. `Change::Write` writes strings.
    WriteKind {
        /// What the value is.
        kind: Kind,
        /// Expiry (`Keep` keeps the current one).
        expiry: Expiry,
    },
}

/// Result of incr/decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// The new value and CAS.
    Value(u64, u64),
    /// No such key.
    NotFound,
    /// The value is not a decimal u64.
    NotNumeric,
}

/// Engine-wide figures for stats, INFO and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Indexed items, in memory and on flash (some may have expired and not been reclaimed
    /// yet). A flash entry waiting to be settled as a *suspect* (it shares its hash bits with a
    /// key written since, which it nearly always is an older copy of) is not counted; the rare
    /// one holding another key is counted again once settled.
    pub items: u64,
    /// Bytes of live records in segments.
    pub live_bytes: u64,
    /// Reads that found an item.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
    /// Records written.
    pub writes: u64,
    /// Items dropped by eviction.
    pub evicted_items: u64,
    /// Items dropped because they expired.
    pub expired_items: u64,
    /// Segments evicted.
    pub evicted_segments: u64,
    /// Segments freed by expiry.
    pub expired_segments: u64,
    /// Items carried forward by merge eviction.
    pub merged_items: u64,
    /// Bytes of records that requests wrote (the cleaner's and merge's copies not included).
    pub written_bytes: u64,
    /// Bytes of dead records and unused room in segments that take no more writes: what the
    /// cleaner can give back. Open segments' unwritten room is not counted.
    pub dead_bytes: u64,
    /// Cleaner passes run by writes that needed a segment.
    pub cleaner_passes: u64,
    /// Cleaner steps run ahead of need (`Engine::clean_ahead`).
    pub cleaner_steps_ahead: u64,
    /// Segments the cleaner freed.
    pub cleaner_segments_freed: u64,
    /// Live records the cleaner moved.
    pub cleaner_items_moved: u64,
    /// Bytes the cleaner wrote moving them: over `written_bytes`, the memory tier's write
    /// amplification.
    pub cleaner_bytes_moved: u64,
    /// Time spent in cleaner passes, holding their shard, in nanoseconds.
    pub cleaner_time_ns: u64,
    /// The longest cleaner pass, in nanoseconds (a pass holds its shard that long).
    pub cleaner_pass_max_ns: u64,
    /// Segments in the pool.
    pub segments_total: u64,
    /// Segments holding data.
    pub segments_used: u64,
    /// Segments ready for use.
    pub segments_free: u64,
    /// Of those, segments never written since the pool was mapped (DRAM; 0 on other media):
    /// memory the process has not touched.
    pub segments_untouched: u64,
    /// Free segments whose pages were given back to the OS once the shards were quiet and
    /// compacted (DRAM; `Engine::clean_ahead`), since start: each counts as never written
    /// again.
    pub segments_released: u64,
    /// Segments taken out of service to pay for index growth.
    pub segments_retired: u64,
    /// Bytes per segment.
    pub segment_size_bytes: u64,
    /// Bytes the index holds.
    pub index_bytes: u64,
    /// Primary index buckets.
    pub index_buckets: u64,
    /// Overflow index buckets.
    pub index_overflow_buckets: u64,
    /// The memory budget (the pool's segments).
    pub memory_bytes: u64,
    /// The operator's cap on it (`Engine::set_memory_limit`), `memory_bytes` without one.
    pub memory_limit_bytes: u64,
    /// Shards.
    pub shards: u64,
    /// Damaged records found (by recovery, the scrub or an eviction walk; never served), per
    /// cause in [`DAMAGE_CAUSES`] order. A write torn by a crash is not damage.
    pub records_damaged: [u64; 4],
    /// Items dropped from the index because their record was found damaged.
    pub damaged_items_dropped: u64,
    /// Segments adopted at open that the scrub has not checked yet (reads of them validate).
    pub segments_unverified: u64,
    /// The flash tier's figures (`None`: no flash tier). `items`, `hits` and `misses` above
    /// count both tiers.
    pub flash: Option<FlashStats>,
}

/// The causes of `EngineStats::records_damaged`, as stats, INFO and metrics name them.
pub const DAMAGE_CAUSES: [&str; 4] = [
    record::Damage::ALL[0].name(),
    record::Damage::ALL[1].name(),
    record::Damage::ALL[2].name(),
    record::Damage::ALL[3].name(),
];

#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

struct FreePool {
    /// Free segments; taken from the end, so the ones freed last (their pages in memory) go
    /// before the ones never written.
    list: Vec<Segment>,
    /// How many segments at the start of `list` were never written since the pool was mapped
    /// (DRAM only, 0 on other media): their pages are not backed yet, so a write into one
    /// costs a page fault per 4 KiB (zeroing by the kernel; 23% of a worker's time under
    /// HSET overwrites on this VM), and they read as zero with no fill. Cleaning ahead
    /// recycles dead space before a write has to take one (`Engine::clean_ahead`).
    untouched: usize,
    in_use: usize,
    limit: usize,
    retired: Vec<Segment>,
    index_bytes: usize,
    /// The operator's cap on segments in service (`Engine::set_memory_limit`, Redis's
    /// `CONFIG SET maxmemory`); `usize::MAX` for none.
    cap: usize,
    /// Segments taken from the list since the pool opened (by writes and the cleaner).
    taken_total: u64,
    /// `taken_total` when cleaning ahead last looked (`Inner::recycle_target`).
    taken_at_last_look: u64,
}

impl FreePool {
    /// Segments in service: all of them but the index's share of the budget. Retired segments
    /// count in "all of them": they are the ones already given up to the index, so a growth
    /// charges only what it adds (counting them out charged every earlier growth again, and
    /// a growing index squeezed the memory tier down to one segment).
    ///
    /// Under an operator's cap the limit is lower still; free segments past it are retired at
    /// once (their memory given back), and when the limit rises again, retired
    /// segments beyond the index's share come back to the free list. Segments in use past the
    /// limit are evicted by the writes that follow (`Inner::obtain_segment`'s over-limit path).
    fn set_limit(&mut self, segment_size_bytes: usize) {
        let total = self.list.len() + self.in_use + self.retired.len();
        self.limit = total
            .saturating_sub(self.index_bytes.div_ceil(segment_size_bytes))
            .min(self.cap)
            .max(1);
        let listed = self.in_use + self.list.len();
        if self.limit > listed {
            let back = (self.limit - listed).min(self.retired.len());
            let at = self.retired.len() - back;
            self.list.extend(self.retired.drain(at..));
        }
        // (Without a cap the free list never passes the limit by more than the index's share,
        // which writes retire as they evict; under one, its memory goes back at once.)
        while self.cap != usize::MAX && self.in_use + self.list.len() > self.limit {
            let Some((mut segment, _)) = self.pop() else {
                break;
            };
            segment.release_memory();
            self.retired.push(segment);
        }
    }

    /// Segments a write may not take while the cleaner can make room instead: the cleaner's
    /// destinations (two, so that a second shard's pass need not wait for the first's; one in a
    /// small pool; none in a pool of two segments or fewer).
    fn cleaner_reserve(&self) -> usize {
        match self.limit {
            0..=2 => 0,
            3..=15 => 1,
            _ => 2,
        }
    }

    /// A free segment, if one is in service and free with `reserve` segments kept back, and
    /// whether it was never written (`untouched`).
    fn take(&mut self, reserve: usize) -> Option<(Segment, bool)> {
        if self.in_use + reserve >= self.limit {
            return None;
        }
        let taken = self.pop()?;
        self.in_use += 1;
        Some(taken)
    }

    /// The last segment of the list, and whether it was never written.
    fn pop(&mut self) -> Option<(Segment, bool)> {
        let segment = self.list.pop()?;
        self.taken_total += 1;
        let untouched = self.list.len() < self.untouched;
        self.untouched = self.untouched.min(self.list.len());
        Some((segment, untouched))
    }

    /// Gives the pages of the oldest free segment written before back to the OS, when more
    /// than `keep` such are free: it then counts as never written (the first after those at
    /// the start of the list). False when none is spare or the medium keeps its pages (only a
    /// DRAM pool's private mapping gives them back, and reads them as zero after).
    fn release_oldest_touched(&mut self, keep: usize) -> bool {
        let at = self.untouched;
        if self.list.len() - at <= keep || !self.list[at].release_memory() {
            return false;
        }
        self.untouched += 1;
        debug_assert!(self.untouched <= self.list.len());
        true
    }

    /// Whether fewer than [`cleaning::CLEAN_AHEAD_SEGMENTS`] segments are free for writes
    /// beyond the cleaner's reserve: what cleaning ahead restores, and `Txn::make_room` too.
    fn below_clean_ahead_target(&self) -> bool {
        self.spare(self.cleaner_reserve()).0 < cleaning::CLEAN_AHEAD_SEGMENTS
    }

    /// Free segments a write may take now beyond `reserve`, and of those, how many were
    /// written before (their pages backed).
    fn spare(&self, reserve: usize) -> (usize, usize) {
        let room = self.limit.saturating_sub(self.in_use);
        let spare = |free: usize| free.min(room).saturating_sub(reserve);
        (
            spare(self.list.len()),
            spare(self.list.len() - self.untouched),
        )
    }
}

struct SeqState {
    next: u64,
    reserved_until: u64,
    root: strata_pool::RootArea,
}

/// State shared by shards (configuration, free segments, seq allocation, failure state).
pub(crate) struct Inner {
    pub(crate) shards: Box<[Padded<ShardLock>]>,
    pub(crate) segment_size_bytes: usize,
    units_per_segment: u64,
    /// Persist each write before returning (`Durability::Sync` without group commit).
    pub(crate) sync_inline: bool,
    /// Most TTL buckets with an open segment per shard.
    pub(crate) open_segments_per_shard_max: usize,
    /// Most TTL buckets with a cleaner segment per shard.
    pub(crate) clean_segments_per_shard_max: usize,
    durability: Durability,
    /// Record dirty ranges for `commit` (`Interval`, or `Sync` with group commit).
    pub(crate) track_dirty: bool,
    /// Some shard has dirty ranges. Set after pushing a range (under the shard lock), cleared
    /// by `commit` before it visits the shards, so a range is never left behind unflagged.
    pub(crate) dirty_any: AtomicBool,
    /// For plain-file pools: one whole-file persist per commit instead of one per range.
    whole_pool: Option<strata_pool::Persister>,
    /// Serializes commits: a commit that finds nothing flagged must still wait for one in
    /// progress, which may be persisting its writes.
    commit_lock: Mutex<()>,
    pub(crate) dram: bool,
    /// Free segments whose pages cleaning ahead gave back to the OS (`Engine::clean_ahead`).
    pub(crate) released_segments: std::sync::atomic::AtomicU64,
    clock: Arc<dyn Clock>,
    /// The eviction policy (`EvictionPolicy` as `u8`, `policy_code`), changed while running by
    /// `Engine::set_eviction_policy`.
    policy: std::sync::atomic::AtomicU8,
    free: Mutex<FreePool>,
    seq: Mutex<SeqState>,
    failed: AtomicBool,
    failure: Mutex<Option<PersistError>>,
    flush_at_ms: AtomicU64,
    value_len_max: usize,
    /// Where the scrub of unverified segments and index entries stands.
    scrub: Mutex<scrub::ScrubState>,
    /// `EngineConfig::validate_every_read`.
    pub(crate) validate_every_read: bool,
    /// Bits of a key's hash kept (all but in tests; see `hash_collisions_for_tests`).
    pub(crate) hash_mask: u64,
    /// The flash tier below the memory tier, if configured.
    pub(crate) flash: Option<flash::FlashTier>,
    /// Which evicted items the flash tier takes.
    pub(crate) flash_admission: FlashAdmission,
    /// Most bytes a second the flash thread writes (0: no cap).
    pub(crate) flash_write_bytes_per_sec_max: u64,
    /// `EngineConfig::item_size_bytes_expected`: the smallest average record size an index is
    /// grown for at once (smaller items grow it in steps).
    pub(crate) item_size_bytes_expected: u64,
    /// One shard's share of the budget, in bytes.
    pub(crate) shard_memory_bytes: u64,
    /// Most flash items one shard indexes: their slots stay within half of `--memory`. At
    /// the bound, the flash thread reclaims the oldest region, and demotion waits for it.
    pub(crate) flash_items_per_shard_max: u64,
}

/// The hash bit that marks a part's hash ([`Inner::part_hash`]): above the index's 24 bits and
/// below the shard's 32, so it changes neither where an entry goes nor which shard holds it.
pub(crate) const PART_BIT: u64 = 1 << 24;

impl Inner {
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A user key's hash: [`PART_BIT`] clear (`hash_mask` never keeps it).
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(key) & self.hash_mask
    }

    /// The hash of a part whose key (its owner's key, then the part's number: `record`'s
    /// module docs) is `part_key`, of an owner whose hash is `owner_hash`: the owner's shard
    /// bits (so an owner and its parts are in one shard, under one lock), index bits of its
    /// own (so the parts spread over the index), and [`PART_BIT`] set, which is how a lookup
    /// tells a part's name from a user key with the same bytes.
    pub(crate) fn part_hash(&self, owner_hash: u64, part_key: &[u8]) -> u64 {
        const SHARD_BITS: u64 = !0xFFFF_FFFF;
        let own = xxhash_rust::xxh3::xxh3_64(part_key) & self.hash_mask & !SHARD_BITS;
        (owner_hash & SHARD_BITS) | own | PART_BIT
    }

    /// Makes `name` part `part`'s key of the owner `owner` (hash `owner_hash`) and returns
    /// the part's hash: the name a lookup of the part takes, in a buffer kept across parts.
    pub(crate) fn part_name(
        &self,
        owner: &[u8],
        owner_hash: u64,
        part: u32,
        name: &mut Vec<u8>,
    ) -> u64 {
        record::set_part_key(name, owner, part);
        self.part_hash(owner_hash, name)
    }

    /// Part `part`'s key of the owner `owner` (hash `owner_hash`), built without the heap
    /// for a short owner key, and the part's hash: [`Inner::part_name`] for one part.
    pub(crate) fn part_key(
        &self,
        owner: &[u8],
        owner_hash: u64,
        part: u32,
    ) -> (record::PartKey, u64) {
        let key = record::PartKey::new(owner, part);
        let hash = self.part_hash(owner_hash, key.as_bytes());
        (key, hash)
    }

    /// The hash a record is indexed under: its key's, or for a part its part hash.
    pub(crate) fn record_hash(&self, view: &record::RecordView<'_>) -> u64 {
        if view.meta.kind == record::Kind::Part {
            let (owner, _) = record::split_part_key(view.key);
            self.part_hash(self.hash(owner), view.key)
        } else {
            self.hash(view.key)
        }
    }

    pub(crate) fn shard_of(&self, hash: u64) -> usize {
        (((hash >> 32) * self.shards.len() as u64) >> 32) as usize
    }

    pub(crate) fn split_location(&self, location: u64) -> (u32, usize) {
        let id = (location / self.units_per_segment) as u32;
        let offset = (location % self.units_per_segment) as usize * record::RECORD_ALIGN_BYTES;
        (id, offset)
    }

    pub(crate) fn join_location(&self, id: u32, offset: usize) -> u64 {
        debug_assert!(offset.is_multiple_of(record::RECORD_ALIGN_BYTES));
        let location =
            u64::from(id) * self.units_per_segment + (offset / record::RECORD_ALIGN_BYTES) as u64;
        // `DATA_BYTES_MAX` keeps memory locations below the flash tier's bit.
        debug_assert_eq!(location & index::FLASH_TIER_BIT, 0);
        location
    }

    pub(crate) fn check_writable(&self) -> Result<(), WriteError> {
        if self.failed.load(Ordering::Acquire) {
            let failure = self
                .failure
                .lock()
                .clone()
                .expect("failure recorded before the flag");
            return Err(WriteError::Persist(failure));
        }
        Ok(())
    }

    /// Turns a persist result into a write result, latching the failure: after one failed
    /// persist the engine refuses writes until reopened (its durability promise is void).
    pub(crate) fn persisted(&self, result: Result<(), PersistError>) -> Result<(), WriteError> {
        result.map_err(|err| {
            self.failure.lock().get_or_insert_with(|| err.clone());
            // Release: pairs with the Acquire in `check_writable`, which then sees `failure`.
            self.failed.store(true, Ordering::Release);
            WriteError::Persist(err)
        })
    }

    /// Whether a power loss keeps what this session writes: a persistent pool under
    /// `interval` or `sync` (under `none` a power loss after an unclean stop discards it).
    pub(crate) fn survives_power_loss(&self) -> bool {
        !self.dram && self.durability != Durability::None
    }

    /// Persists every dirty range of every shard (group commit / interval flush).
    /// The eviction policy now.
    pub(crate) fn policy(&self) -> EvictionPolicy {
        policy_of_code(self.policy.load(Ordering::Relaxed))
    }

    pub(crate) fn commit(&self) -> Result<(), WriteError> {
        if !self.track_dirty {
            return self.check_writable();
        }
        let _serial = self.commit_lock.lock();
        // Acquire: pairs with the Release store after a range is pushed.
        if !self.dirty_any.swap(false, Ordering::AcqRel) {
            return self.check_writable();
        }
        if let Some(whole_pool) = &self.whole_pool {
            // Every shard locked: one sync makes this commit's records (and deletes' marks)
            // durable. Only then are the dead marks of overwritten records written; they reach
            // the media with a later sync, or never: recovery would pick the newer, durable record
            // by (seq, offset) anyway. What must never happen is a mark durable before its
            // replacement, and writing it after the sync rules that out.
            // Held, not changed: a commit leaves the index and the books as they are (see
            // `ShardLock::hold`), so a crash during its sync finds every shard's files current.
            let mut shards: Vec<_> = self.shards.iter().map(|s| s.0.hold()).collect();
            shards
                .iter_mut()
                .for_each(|shard| shard.forget_dirty_ranges());
            self.persisted(whole_pool.persist_all())?;
            for shard in &mut shards {
                shard.write_pending_marks(self);
                shard.marks_written();
            }
            return self.check_writable();
        }
        for shard in self.shards.iter() {
            let mut shard = shard.0.hold();
            shard.persist_dirty(self)?;
            shard.marks_written();
        }
        self.check_writable()
    }

    pub(crate) fn next_seq(&self) -> Result<u64, WriteError> {
        let mut seq = self.seq.lock();
        if seq.next >= seq.reserved_until {
            let reserved_until = seq.next + root::SEQ_RESERVATION;
            root::write_seq_reserved(seq.root.bytes_mut(), reserved_until);
            self.persisted(seq.root.persist())?;
            seq.reserved_until = reserved_until;
        }
        seq.next += 1;
        Ok(seq.next - 1)
    }

    /// Accounts for a shard's index changing size from `before` to `after` bytes (a growth
    /// about to happen, or one of its overflow table): the difference is taken from the segment
    /// budget.
    pub(crate) fn index_resized(&self, before: usize, after: usize) {
        if before == after {
            return;
        }
        let mut free = self.free.lock();
        free.index_bytes = (free.index_bytes + after).saturating_sub(before);
        free.set_limit(self.segment_size_bytes);
    }

    /// A zeroed free segment for `shard`: a free one while more than the cleaner's reserve is
    /// free, else one the cleaner frees (in this shard, else in another whose lock is free),
    /// else one of the reserve, else one evicted (never with `EvictionPolicy::None`: the write
    /// is refused). `keep_hot`: merge eviction may carry the evicted segment's hot items into it
    /// (they are reinserted before the write that asked for the segment).
    pub(crate) fn obtain_segment(
        &self,
        shard: &mut Shard,
        keep_hot: bool,
    ) -> Result<Segment, WriteError> {
        for attempt in 0..64 {
            let (over_limit, reserve) = {
                let mut free = self.free.lock();
                let reserve = free.cleaner_reserve();
                if let Some((segment, untouched)) = free.take(reserve) {
                    drop(free);
                    return self.prepare(segment, untouched);
                }
                (free.in_use > free.limit, reserve)
            };
            if !over_limit {
                match self.clean_for(shard)? {
                    CleanOutcome::Gained(_) => continue,
                    CleanOutcome::NoDestination if self.policy() == EvictionPolicy::None => {
                        // Another shard's pass holds the reserve for now.
                        std::thread::yield_now();
                        continue;
                    }
                    CleanOutcome::NoDestination if reserve > 0 => {
                        // A pass is worth it, but a write took the reserve when no pass was:
                        // evict once into the free list, so the cleaner has a destination.
                        if let Some(victim) = self.evict_for_room(shard, false, attempt)? {
                            self.release(vec![victim]);
                        }
                        continue;
                    }
                    CleanOutcome::NoDestination | CleanOutcome::NothingToGain => {}
                }
                // Live data fills the segments: in a cache, a segment of the reserve holds
                // data better than it waits for a pass that cannot gain. A store keeps the
                // reserve (its stated headroom), so the cleaner can always run.
                let taken = if self.policy() == EvictionPolicy::None {
                    None
                } else {
                    self.free.lock().take(0)
                };
                if let Some((segment, untouched)) = taken {
                    api::note_reserve_taken();
                    return self.prepare(segment, untouched);
                }
            }
            if self.policy() == EvictionPolicy::None {
                return Err(WriteError::OutOfMemory);
            }
            let Some(victim) = self.evict_for_room(shard, keep_hot && !over_limit, attempt)? else {
                continue;
            };
            if !over_limit {
                return self.prepare(victim, false);
            }
            let mut victim = victim;
            victim.release_memory();
            let mut free = self.free.lock();
            free.in_use -= 1;
            free.retired.push(victim);
        }
        Err(WriteError::OutOfMemory)
    }

    /// Whether fewer than [`cleaning::CLEAN_AHEAD_SEGMENTS`] segments are free for writes
    /// beyond the cleaner's reserve (cleaning ahead's target: see `Txn::make_room`).
    pub(crate) fn free_is_low(&self) -> bool {
        self.free.lock().below_clean_ahead_target()
    }

    /// A cleaner pass in `shard`, else in another shard whose lock is free right now (not one
    /// this thread's transaction holds: `Txn::make_room` cleans those).
    fn clean_for(&self, shard: &mut Shard) -> Result<CleanOutcome, WriteError> {
        let outcome = shard.clean(self)?;
        if outcome != CleanOutcome::NothingToGain {
            return Ok(outcome);
        }
        for (i, other) in self.shards.iter().enumerate() {
            if i == usize::from(shard.id) {
                continue;
            }
            if let Some(mut other) = other.0.try_write() {
                let outcome = other.clean(self)?;
                if outcome != CleanOutcome::NothingToGain {
                    return Ok(outcome);
                }
            }
        }
        Ok(CleanOutcome::NothingToGain)
    }

    /// An evicted segment (`None` when no shard could give one right now: the caller tries
    /// again, after yielding here).
    fn evict_for_room(
        &self,
        shard: &mut Shard,
        keep_hot: bool,
        attempt: usize,
    ) -> Result<Option<Segment>, WriteError> {
        if let Some(victim) = shard.evict_one(self, self.policy(), keep_hot)? {
            return Ok(Some(victim));
        }
        if let Some(victim) = self.evict_elsewhere(shard.id)? {
            return Ok(Some(victim));
        }
        // This shard has no segment of its own and every other shard that has one is locked
        // right now (a worker, or the flash thread): wait for one rather than refuse the write
        // a cache can make room for.
        if attempt < 8 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        Ok(None)
    }

    /// `count` free segments for the cleaner's destinations, from the reserve too, or none if
    /// fewer are free; each with whether it was never written. Not zeroed yet
    /// (`zero_for_reuse`).
    pub(crate) fn take_for_cleaner(
        &self,
        count: usize,
    ) -> Result<Option<Vec<(Segment, bool)>>, WriteError> {
        let mut free = self.free.lock();
        if free.in_use + count > free.limit || free.list.len() < count {
            return Ok(None);
        }
        free.in_use += count;
        Ok(Some((0..count).filter_map(|_| free.pop()).collect()))
    }

    /// Prepares a segment about to be written. On a pool that outlives the process it is
    /// zeroed and persisted, so that recovery's walk, which reads the whole segment, finds its
    /// log's end where its records end. On DRAM nothing walks past a segment's write offset
    /// (`OwnedSegment::log`: the cleaner, eviction, the scrub; there is no recovery) and every
    /// record is written whole, its padding too (`record::write`), so the old bytes stay:
    /// zeroing a reused segment was a memset of each segment written (3.3% of a pipelined
    /// HSET's server CPU), and handing its pages back to the OS instead (as
    /// `Segment::zero_data` does there) made each reuse fault them in again, 13% of the
    /// worker's time in a fill of 4 KiB values. A DRAM segment never written (`untouched`, as
    /// the free pool says) is zero.
    pub(crate) fn zero_for_reuse(
        &self,
        segment: &mut Segment,
        untouched: bool,
    ) -> Result<(), WriteError> {
        if self.dram {
            if untouched {
                // Once per segment taken, not per write: a wrong count would mean the free
                // pool's books are wrong.
                assert!(
                    segment.data()[..64].iter().all(|&byte| byte == 0),
                    "a segment never written reads as zero"
                );
            }
            Ok(())
        } else {
            self.persisted(segment.zero_data())
        }
    }

    /// [`Inner::zero_for_reuse`] for a segment a write takes.
    fn prepare(&self, mut segment: Segment, untouched: bool) -> Result<Segment, WriteError> {
        self.zero_for_reuse(&mut segment, untouched)?;
        Ok(segment)
    }

    /// Evicts the oldest segment of another shard whose lock is free right now.
    fn evict_elsewhere(&self, me: u16) -> Result<Option<Segment>, WriteError> {
        for (i, other) in self.shards.iter().enumerate() {
            if i == me as usize {
                continue;
            }
            if let Some(mut other) = other.0.try_write() {
                if let Some(victim) = other.evict_one(self, EvictionPolicy::Fifo, false)? {
                    return Ok(Some(victim));
                }
            }
        }
        Ok(None)
    }

    fn release(&self, segments: Vec<Segment>) {
        if segments.is_empty() {
            return;
        }
        let mut free = self.free.lock();
        free.in_use -= segments.len();
        free.list.extend(segments);
    }
}

/// The engine. `Send + Sync`: share it with `Arc` between threads.
pub struct Engine {
    /// The flash thread; declared first so it is stopped and joined before anything else goes.
    flash_worker: Mutex<Option<flash::tiering::FlashWorker>>,
    inner: Arc<Inner>,
    /// The index directory, when the index lives in the pool.
    files: Option<std::sync::Arc<strata_pool::IndexFiles>>,
    /// Faults a reopened file pool in after open; declared before `pool` so it is joined first.
    _warmer: Option<open::Warmer>,
    pool: Mutex<Pool>,
    recovery: RecoveryReport,
    closed: AtomicBool,
    /// The transaction logs beside a pool file (`Engine::transaction`, `Engine::atomically`).
    txlog: Option<txlog::TxLogs>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pool", &*self.pool.lock())
            .finish_non_exhaustive()
    }
}

mod api;
mod open;

/// An eviction policy as `Inner::policy` stores it.
pub(crate) fn policy_code(policy: EvictionPolicy) -> u8 {
    match policy {
        EvictionPolicy::None => 0,
        EvictionPolicy::Fifo => 1,
        EvictionPolicy::Random => 2,
        EvictionPolicy::Merge => 3,
    }
}

fn policy_of_code(code: u8) -> EvictionPolicy {
    match code {
        0 => EvictionPolicy::None,
        1 => EvictionPolicy::Fifo,
        2 => EvictionPolicy::Random,
        _ => EvictionPolicy::Merge,
    }
}
