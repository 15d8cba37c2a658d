//! One shard: a lock's worth of the keyspace, with its own index, TTL chains and segments.
//! This file holds the shard's state, its lock and lookups; each concern of `impl Shard` has a
//! file of its own: `write` (writes, deletes, indexing), `durability` (what is persisted and
//! when), `segments` (TTL chains, open and fresh segments), `evict` (eviction, expiry, flush,
//! freeing), `clean` (the cleaner), `flash` (demotion and promotion), `flash_families` (the same for items
//! of several records), `recover` (rebuilding
//! from the logs) and `scrub` (checking what a restart adopted, damage, integrity).
//!
//! Invariants (checked by `check_integrity` in tests):
//! - Every index entry points at a live record, in a segment this shard owns, whose key hashes
//!   to the entry; every live record in an owned segment is indexed exactly once, except while
//!   a merge carries survivors (never visible: the shard's write lock is held throughout).
//! - Each TTL chain lists segment ids in increasing `seq`; only its last segment may be open.
//! - A key's records are ordered by `(seq, offset)`: a write never goes to an open segment
//!   whose `seq` is below that of the key's current record (such a segment is sealed first), so
//!   recovery can pick the newest record of a key even when its writes crossed TTL buckets.
//! - A replaced or deleted record is marked dead in place before the call returns.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use strata_pool::CACHE_LINE_SIZE_BYTES;

use crate::index::{self, Entry, Index, SlotRef};
use crate::index_files::{Agreement, Anchor};
use crate::record::{self, Damage, RecordView};
use crate::segment::OwnedSegment;
use crate::ttl;
use crate::Inner;

mod clean;
mod durability;
mod evict;
mod flash;
mod flash_families;
mod parts;
mod recover;
mod scrub;
mod segments;
mod write;

pub(crate) use clean::{Ahead, CleanOutcome};
pub(crate) use flash::{FlashCandidates, Lookup};

/// Dead marks closer than this share one persist call.
const MARK_RUN_GAP_BYTES: usize = 4096;

/// Counters of one shard. Read-path counters are atomics (taken under the read lock); the rest
/// change only under the write lock but are atomics too so stats can read them without it.
#[derive(Debug, Default)]
pub struct ShardCounters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) evicted_items: AtomicU64,
    pub(crate) expired_items: AtomicU64,
    pub(crate) evicted_segments: AtomicU64,
    pub(crate) expired_segments: AtomicU64,
    pub(crate) merged_items: AtomicU64,
    /// Bytes of records written by requests (not by the cleaner or merge).
    pub(crate) written_bytes: AtomicU64,
    /// Cleaner passes (run by a write that needed a segment), steps run ahead of need, and
    /// segments both freed.
    pub(crate) clean_passes: AtomicU64,
    pub(crate) clean_steps_ahead: AtomicU64,
    pub(crate) cleaned_segments: AtomicU64,
    /// Live records the cleaner moved, and their bytes once moved.
    pub(crate) cleaned_items: AtomicU64,
    pub(crate) cleaned_bytes: AtomicU64,
    /// Time spent in cleaner passes (holding the shard), in total and the longest pass.
    pub(crate) clean_ns: AtomicU64,
    pub(crate) clean_pass_max_ns: AtomicU64,
    /// Damaged records found (by recovery, the scrub or an eviction walk), per
    /// [`record::Damage`] cause in `Damage::ALL` order; torn tails after a crash not included.
    pub(crate) damaged_records: [AtomicU64; 4],
    /// Items dropped from the index because their record was damaged.
    pub(crate) damaged_items_dropped: AtomicU64,
}

impl ShardCounters {
    /// Counts a damaged record found by a walk.
    pub(crate) fn count_damage(&self, cause: Damage) {
        let at = Damage::ALL.iter().position(|&c| c == cause).unwrap_or(0);
        bump(&self.damaged_records[at], 1);
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// The segment a write goes to, and whether getting it opened a segment (which may have evicted
/// or moved records).
struct Reserved {
    id: u32,
    opened: bool,
}

/// Why a segment is being freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FreeReason {
    Evict {
        keep_hot: bool,
    },
    Expire,
    Flush,
    /// The cleaner moved every live record out already (see `clean`).
    Cleaned,
}

pub(crate) struct Shard {
    pub(crate) id: u16,
    pub(crate) index: Index,
    segments: Vec<Option<Box<OwnedSegment>>>,
    chains: Vec<VecDeque<u32>>,
    /// Owned segments in allocation order: `(id, seq)`; stale pairs are skipped lazily.
    order: VecDeque<(u32, u64)>,
    /// TTL buckets whose last segment is open (at most `open_segments_per_shard_max`).
    open_buckets: Vec<u16>,
    /// The segments the cleaner moves live records to, one per TTL bucket it has cleaned,
    /// while they have room: `(bucket, id)` (see `clean`). A moved record stays in its TTL
    /// group, so segments still expire whole.
    clean_heads: Vec<(u16, u32)>,
    pub(crate) scratch: Vec<u8>,
    survivors: Vec<u8>,
    survivor_slots: Vec<(u32, u64)>,
    /// Family members a segment being freed dropped (see `parts`).
    family_drops: Vec<parts::FamilyDrop>,
    /// The families a segment being freed offered to the flash tier, by owner key: where the
    /// bundle went (tier bit set), or `None` when it stays to be dropped (see
    /// `flash_families`). Emptied with `family_drops`.
    family_demotions: HashMap<Vec<u8>, Option<u64>>,
    /// Owners whose families a transaction holding the shard is writing, each with the
    /// segments the shard had freed when it began: their new parts are not orphans yet, and a
    /// segment freed since may have taken part of the family (see `parts`).
    pub(crate) building: Vec<(Vec<u8>, u64)>,
    /// A logged transaction holds the shard: the parts its writes drop stay until its log
    /// says done (`deferred_parts`), so a crash before then can put their owners back whole
    /// (see `parts`).
    pub(crate) defer_part_drops: bool,
    /// The keys of the parts dropped while `defer_part_drops`.
    deferred_parts: Vec<Vec<u8>>,
    /// Owners recovery indexed, for the check that each owns all its parts (see `parts`).
    recovered_owners: Vec<Vec<u8>>,
    /// Damage was found since the families were last checked (see `parts`).
    families_suspect: bool,
    pub(crate) live_bytes: u64,
    /// Ranges written since the last commit: `(segment id, start, end)`.
    dirty: Vec<(u32, u32, u32)>,
    /// Overwritten records whose dead mark waits for the commit that makes their replacement
    /// durable (deferred persistence only). Counted dead in DRAM already.
    pending_dead: Vec<u64>,
    /// For each record of `pending_dead`, its replacement's location → its own, so that a
    /// delete of the replacement marks the whole chain dead at once (see `kill_record`).
    pending_by_replacement: HashMap<u64, u64, LocationHash>,
    /// Records recovery marked dead because a newer record of their key supersedes them; their
    /// marks are persisted before the shard serves (see `persist_recovery_marks`).
    recovery_marks: Vec<u64>,
    pub(crate) counters: ShardCounters,
    rng_state: u64,
    /// With the index in the pool: the shard's control line, kept in step at every change.
    anchor: Option<Anchor>,
    /// Segments whose bookkeeping changed since the change began (index in the pool only),
    /// each once: `is_touched[id]` says whether `id` is listed.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
    /// With the index in the pool: recovery is rebuilding this shard's index from its segments,
    /// so the control line must stay "changing" whatever changes end meanwhile (adopting a
    /// segment, say): a crash before the rebuild ends must find the shard to rebuild again, not
    /// a consistent, partly filled index.
    pub(crate) rebuilding: bool,
    /// Every index entry points at the start of a valid, live record of its key: true for an
    /// index built or loaded (checksummed snapshot) by this process, false for one mapped from
    /// the index files until the scrub has checked every entry. While false, reads validate.
    pub(crate) index_verified: bool,
    /// Locations that reads under the read lock found not to hold a valid record of their
    /// entry's key: dropped from the index at the next `repair` (rare; only damage puts them
    /// here).
    damaged_reads: parking_lot::Mutex<Vec<(u32, u64)>>,
    /// A read under the read lock met a live owner whose part the index lacks (a part's
    /// damaged record, or an entry lost): the next `repair` checks the shard's families.
    broken_family_read: std::sync::atomic::AtomicBool,
    /// Recovery's list of a segment's valid record offsets, kept to reuse its allocation.
    scan_offsets: Vec<u32>,
    /// `counters.written_bytes` when cleaning ahead last looked for a victim to recycle and
    /// found none: it looks again only once a segment's worth more was written (a fill of new
    /// keys leaves none, and is not scanned every 10 ms for it).
    pub(crate) recycle_scanned_at_written: u64,
    /// The same for compaction of a quiet shard (`shard::clean::Ahead::Compact`).
    pub(crate) compact_scanned_at_written: u64,
    /// `counters.written_bytes` at the last tick of cleaning ahead that looked whether the
    /// shard was quiet (`Shard::quiet_since_last_look`).
    pub(crate) quiet_looked_at_written: u64,
    /// `counters.evicted_segments` at that look, and when (engine clock) a look last found
    /// it changed: compaction waits a while after an eviction (`Shard::quiet_since_last_look`).
    quiet_looked_at_evicted: u64,
    evicted_seen_at_ms: Option<u64>,
    /// Index entries of the flash tier (see the `flash` module).
    flash_items: u64,
    /// A record being demoted to flash, kept to reuse its allocation.
    demote_scratch: Vec<u8>,
    /// Flash entries that may be older copies of keys written to memory since (see
    /// `flash::FlashSuspect`).
    flash_suspects: flash::Suspects,
    /// Flash entries read back at open from the tables of a shard a process crash caught
    /// changing, for recovery to index again once its segments are (see `index_files`).
    pub(crate) salvaged_flash: Vec<Entry>,
    /// The hash bits of the expired records a rebuild dropped while `salvaged_flash` waited:
    /// a flash entry with those bits may be an older copy of such a key, which its memory
    /// record (newer, though expired) had superseded; it must not come back in its place.
    expired_h24: std::collections::HashSet<u32>,
    /// How many times an index entry whose hash bits fall in each of [`REMOVAL_SLOTS`] slots
    /// left the index (delete, expiry, eviction, a flash copy dropped, flush): with a key's
    /// item, what a WATCH compares (`Engine::observe`), so a key that was absent at WATCH and
    /// absent at EXEC still aborts it when it existed in between. Wrapping; changed under the
    /// write lock, read under the read lock.
    removals: Box<[u32]>,
}

/// Slots of [`Shard::removals`] (4 KiB per shard): two keys share one with odds 1 in 1024,
/// which can only abort a WATCH that need not have been aborted.
pub(crate) const REMOVAL_SLOTS: usize = 1024;

/// What the scrub's walk of one segment found.
#[derive(Debug, Default)]
pub(crate) struct ScrubWalk {
    /// Damage, `(offset, cause)`.
    pub(crate) damage: Vec<(usize, Damage)>,
    /// Valid live records: how many, and their bytes.
    pub(crate) live: (u32, u64),
    /// Of them, parts.
    pub(crate) live_parts: u32,
    /// Valid live records the (unverified) index does not find, `(offset, hash)`.
    pub(crate) unindexed: Vec<(usize, u64)>,
}

/// Hashes a record location (a u64 that is already well spread in its low bits by segment id
/// and offset) with one multiplication, for the maps keyed by location.
#[derive(Clone, Copy, Default)]
pub(crate) struct LocationHasher(u64);

impl std::hash::Hasher for LocationHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type LocationHash = std::hash::BuildHasherDefault<LocationHasher>;

/// A shard's lock. Write access only comes as a [`ShardWrite`], so no change can bypass the
/// control line of an index kept in the pool.
pub(crate) struct ShardLock(parking_lot::RwLock<Shard>);

impl ShardLock {
    pub(crate) fn new(shard: Shard) -> Self {
        ShardLock(parking_lot::RwLock::new(shard))
    }

    /// Shared access (lookups, stats).
    pub(crate) fn read(&self) -> parking_lot::RwLockReadGuard<'_, Shard> {
        crate::api::assert_no_transaction();
        self.0.read()
    }

    /// Exclusive access, waiting for it.
    pub(crate) fn write(&self) -> ShardWrite<'_> {
        crate::api::assert_no_transaction();
        ShardWrite::begin(self.0.write())
    }

    /// Shared access for a transaction, which takes its shards in index order (and so never
    /// waits in a cycle); it begins no change.
    pub(crate) fn read_for_transaction(&self) -> parking_lot::RwLockReadGuard<'_, Shard> {
        self.0.read()
    }

    /// Exclusive access for a transaction (see [`ShardLock::read_for_transaction`]): each of
    /// its changes begins and ends on its own ([`ShardChange`]).
    pub(crate) fn write_for_transaction(&self) -> parking_lot::RwLockWriteGuard<'_, Shard> {
        self.0.write()
    }

    /// Exclusive access that changes neither the index nor a segment's bookkeeping, so does not
    /// mark the shard as changing: for taking a crash image, which must show the control line
    /// as it is between changes, and for a commit, which only makes written bytes durable and
    /// turns superseded records dead (both already counted dead: see `kill_record`).
    pub(crate) fn hold(&self) -> parking_lot::RwLockWriteGuard<'_, Shard> {
        crate::api::assert_no_transaction();
        self.0.write()
    }

    /// Exclusive access if no one holds the lock right now.
    pub(crate) fn try_write(&self) -> Option<ShardWrite<'_>> {
        self.0.try_write().map(ShardWrite::begin)
    }
}

/// Write access to a shard. With the index in the pool, taking it marks the shard as changing
/// and dropping it records the change (see `index_files`).
pub(crate) struct ShardWrite<'a>(parking_lot::RwLockWriteGuard<'a, Shard>);

impl<'a> ShardWrite<'a> {
    fn begin(shard: parking_lot::RwLockWriteGuard<'a, Shard>) -> Self {
        if let Some(anchor) = &shard.anchor {
            anchor.begin();
        }
        ShardWrite(shard)
    }
}

impl std::ops::Deref for ShardWrite<'_> {
    type Target = Shard;

    fn deref(&self) -> &Shard {
        &self.0
    }
}

impl std::ops::DerefMut for ShardWrite<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        &mut self.0
    }
}

impl Drop for ShardWrite<'_> {
    fn drop(&mut self) {
        end_change(&mut self.0);
    }
}

/// One change to a shard a transaction holds: like a [`ShardWrite`], it marks the shard as
/// changing when it begins and records the change when it ends, but the lock stays held (the
/// transaction releases it). Between its changes a held shard is consistent, so a panic
/// there unwinds normally; one inside a change aborts, as with a `ShardWrite`.
/// (A change made while a panic unwinds, as a transaction's undo is, ends normally.)
pub(crate) struct ShardChange<'g> {
    shard: &'g mut Shard,
    /// The thread was already unwinding when the change began.
    began_unwinding: bool,
}

impl<'g> ShardChange<'g> {
    pub(crate) fn begin(shard: &'g mut Shard) -> Self {
        if let Some(anchor) = &shard.anchor {
            anchor.begin();
        }
        ShardChange {
            shard,
            began_unwinding: std::thread::panicking(),
        }
    }
}

impl std::ops::Deref for ShardChange<'_> {
    type Target = Shard;

    fn deref(&self) -> &Shard {
        self.shard
    }
}

impl std::ops::DerefMut for ShardChange<'_> {
    fn deref_mut(&mut self) -> &mut Shard {
        self.shard
    }
}

impl Drop for ShardChange<'_> {
    fn drop(&mut self) {
        if self.began_unwinding {
            self.shard.record_change();
        } else {
            end_change(self.shard);
        }
    }
}

/// Ends a change to `shard` (see [`ShardWrite`]).
fn end_change(shard: &mut Shard) {
    if std::thread::panicking() {
        // A panic in the middle of a change: the shard's index, bookkeeping and pool bytes
        // may disagree, and no caller can tell. Serving on would risk wrong values, so the
        // process ends here, before the lock is released, as a `kill -9` would: the control
        // line still says "changing", and the next open rebuilds the shard from its records.
        eprintln!(
            "strata-engine: a panic unwound through a change to shard {}; aborting so that \
             a restart recovers the pool",
            shard.id
        );
        std::process::abort();
    }
    shard.record_change();
}

/// A record found by a lookup.
pub(crate) struct Found<'a> {
    pub(crate) slot: SlotRef,
    pub(crate) entry: Entry,
    pub(crate) view: RecordView<'a>,
    pub(crate) cas: u64,
}

/// What a change needs of a record a lookup found, without borrowing the shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    slot: SlotRef,
    location: u64,
    size_bytes: usize,
    /// The record is a part.
    part: bool,
    /// The parts the record owns.
    parts: u32,
}

/// The record a lookup of a key found, kept by a caller that changes the key next under the
/// same hold of the shard ([`Shard::write_over`]), so the write need not look it up again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Looked(Held);

impl Looked {
    /// What `found` (the first record of its key the index finds) is.
    pub(crate) fn of(found: &Found<'_>) -> Looked {
        Looked(Held::of_ref(found))
    }
}

impl Held {
    fn of(found: Found<'_>) -> Held {
        Held::of_ref(&found)
    }

    fn of_ref(found: &Found<'_>) -> Held {
        Held {
            slot: found.slot,
            location: found.entry.location,
            size_bytes: found.view.size_bytes,
            part: found.view.meta.kind == record::Kind::Part,
            parts: found.view.meta.parts,
        }
    }
}

/// The cache lines of a record `Shard::prefetch_record` loads (384 B).
const PREFETCH_RECORD_LINES: usize = 6;

impl Shard {
    /// A shard with no segments yet. `rebuilding`: its index is to be rebuilt by recovery (see
    /// [`Shard::rebuilding`]).
    pub(crate) fn new(
        id: u16,
        segment_count: usize,
        index: Index,
        anchor: Option<Anchor>,
        rebuilding: bool,
    ) -> Self {
        Shard {
            id,
            index,
            segments: (0..segment_count).map(|_| None).collect(),
            chains: (0..ttl::TTL_BUCKET_COUNT)
                .map(|_| VecDeque::new())
                .collect(),
            order: VecDeque::new(),
            open_buckets: Vec::new(),
            clean_heads: Vec::new(),
            scratch: Vec::new(),
            survivors: Vec::new(),
            survivor_slots: Vec::new(),
            family_drops: Vec::new(),
            family_demotions: HashMap::new(),
            building: Vec::new(),
            defer_part_drops: false,
            deferred_parts: Vec::new(),
            recovered_owners: Vec::new(),
            families_suspect: false,
            live_bytes: 0,
            dirty: Vec::new(),
            pending_dead: Vec::new(),
            pending_by_replacement: HashMap::default(),
            recovery_marks: Vec::new(),
            counters: ShardCounters::default(),
            rng_state: 0x9E37_79B9_7F4A_7C15 ^ u64::from(id),
            is_touched: if anchor.is_some() {
                vec![false; segment_count]
            } else {
                Vec::new()
            },
            anchor,
            touched: Vec::new(),
            rebuilding,
            index_verified: true,
            damaged_reads: parking_lot::Mutex::new(Vec::new()),
            broken_family_read: std::sync::atomic::AtomicBool::new(false),
            scan_offsets: Vec::new(),
            recycle_scanned_at_written: 0,
            compact_scanned_at_written: 0,
            quiet_looked_at_written: 0,
            quiet_looked_at_evicted: 0,
            evicted_seen_at_ms: None,
            flash_items: 0,
            demote_scratch: Vec::new(),
            flash_suspects: flash::Suspects::default(),
            salvaged_flash: Vec::new(),
            expired_h24: std::collections::HashSet::new(),
            removals: vec![0; REMOVAL_SLOTS].into_boxed_slice(),
        }
    }

    /// Counts an index entry with hash bits `h24` leaving the index (see [`Shard::removals`]).
    pub(crate) fn count_removal(&mut self, h24: u32) {
        let slot = h24 as usize % REMOVAL_SLOTS;
        self.removals[slot] = self.removals[slot].wrapping_add(1);
    }

    /// Counts every slot once: every entry may have left (flush).
    pub(crate) fn count_removal_of_all(&mut self) {
        for count in self.removals.iter_mut() {
            *count = count.wrapping_add(1);
        }
    }

    /// The removal count of hash bits `h24`'s slot.
    pub(crate) fn removals_of(&self, h24: u32) -> u32 {
        self.removals[h24 as usize % REMOVAL_SLOTS]
    }

    /// Lists segment `id` for the book update at the end of this change (index in the pool).
    fn touch(&mut self, id: u32) {
        if let Some(listed) = self.is_touched.get_mut(id as usize) {
            if !*listed {
                *listed = true;
                self.touched.push(id);
            }
        }
    }

    /// After a commit wrote this shard's waiting dead marks (under a lock held without a change
    /// begun): its control line may say consistent again.
    pub(crate) fn marks_written(&self) {
        if let Some(anchor) = &self.anchor {
            anchor.marks_written();
        }
    }

    /// The shard's control line, when its index lives in the pool.
    pub(crate) fn anchor(&self) -> Option<&Anchor> {
        self.anchor.as_ref()
    }

    /// Ends a change (see `ShardWrite`): writes the books of touched segments and the index's
    /// tables to the control line, and marks it consistent, or with dead marks waiting for a
    /// commit, or untrusted while it is rebuilt or when the index could not stay in its files.
    pub(crate) fn record_change(&mut self) {
        let Some(anchor) = &self.anchor else {
            return;
        };
        let segments = &self.segments;
        let touched = self
            .touched
            .iter()
            .filter_map(|&id| segments[id as usize].as_deref());
        let agreement = if self.rebuilding || !self.index.in_files() {
            Agreement::None
        } else if self.pending_dead.is_empty() {
            Agreement::Exact
        } else {
            Agreement::MarksWaiting
        };
        anchor.end(self.index.desc(), touched, agreement);
        for id in self.touched.drain(..) {
            self.is_touched[id as usize] = false;
        }
    }

    fn owned(&self, id: u32) -> &OwnedSegment {
        self.segments[id as usize]
            .as_deref()
            .expect("index points into an owned segment")
    }

    fn owned_mut(&mut self, id: u32) -> &mut OwnedSegment {
        self.touch(id);
        self.segments[id as usize]
            .as_deref_mut()
            .expect("owned segment")
    }

    /// The live record at an index location, with its CAS; `None` when the location does not
    /// hold one (damage: the caller queues the entry for `repair`). Records of a clean segment under a
    /// verified index are decoded as they are; any other is validated first (checksum), so a
    /// record damaged while the pool was closed is never served.
    pub(crate) fn record_at(&self, inner: &Inner, location: u64) -> Option<(RecordView<'_>, u64)> {
        let (id, offset) = inner.split_location(location);
        let found = self
            .segments
            .get(id as usize)
            .and_then(|owned| owned.as_deref())
            .filter(|owned| offset < owned.write_offset)
            .and_then(|owned| {
                let bytes = &owned.log()[offset..];
                let view = if owned.is_clean() && self.index_verified && !inner.validate_every_read
                {
                    record::read_trusted(bytes)
                } else {
                    match record::read(bytes) {
                        record::Scan::Record(view) => Some(view),
                        _ => None,
                    }
                };
                view.filter(|view| view.live).map(|view| {
                    let cas = view.meta.cas.unwrap_or_else(|| owned.cas_at(offset));
                    (view, cas)
                })
            });
        found
    }

    /// Finds the key's live record, expired or not.
    pub(crate) fn lookup(&self, inner: &Inner, key: &[u8], hash: u64) -> Option<Found<'_>> {
        let h24 = index::hash24(hash);
        let mut hit = None;
        let (slot, entry) = self.index.find(h24, |location| {
            if index::is_flash(location) {
                return false; // The flash tier's: read outside the lock (`flash::tiering`).
            }
            self.is_key_at(inner, key, hash, location, &mut hit)
        })?;
        let (view, cas) = hit?;
        Some(Found {
            slot,
            entry,
            view,
            cas,
        })
    }

    /// Whether the memory record at `location` (an entry with the hash bits of `hash`) is
    /// `key`'s; if so, `hit` gets it. A part's name (its hash has `PART_BIT`) matches only a
    /// part, and a user key never does.
    pub(super) fn is_key_at<'s>(
        &'s self,
        inner: &Inner,
        key: &[u8],
        hash: u64,
        location: u64,
        hit: &mut Option<(RecordView<'s>, u64)>,
    ) -> bool {
        let Some(record) = self.record_at(inner, location) else {
            // Damaged: not this key's record; dropped from the index at the next repair.
            self.damaged_reads
                .lock()
                .push((index::hash24(hash), location));
            return false;
        };
        let is_part = record.0.meta.kind == crate::record::Kind::Part;
        let is_key = record.0.key == key && is_part == (hash & crate::PART_BIT != 0);
        if is_key {
            *hit = Some(record);
        }
        is_key
    }

    /// Starts loading the record of the first slot whose stored hash matches (no key compare:
    /// a hint for `Engine::prefetch`): its first [`PREFETCH_RECORD_LINES`] cache lines.
    pub(crate) fn prefetch_record(&self, inner: &Inner, hash: u64) {
        let _ = self.index.find(index::hash24(hash), |location| {
            if index::is_flash(location) {
                return false;
            }
            let (id, offset) = inner.split_location(location);
            if let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) {
                // A small item's header, key and value nearly always straddle a line
                // boundary, and the copy of the value then stalls on the second line; a small
                // hash (ten 30-byte fields take about 350 B) is walked to its field. Loading
                // lines past a small item costs a pipelined GET nothing measurable (an A/B
                // beside two lines, 2026-12-03); an HGET's and HGETALL's CPU went 2-3% down.
                let data = owned.segment.data();
                for line in 0..PREFETCH_RECORD_LINES {
                    if let Some(byte) = data.get(offset + line * CACHE_LINE_SIZE_BYTES) {
                        strata_pool::prefetch(byte);
                    }
                }
            }
            true
        });
    }

    /// Finds the key's live, unexpired record.
    /// The clock is read only for items that have an expiry.
    pub(crate) fn lookup_unexpired(
        &self,
        inner: &Inner,
        key: &[u8],
        hash: u64,
    ) -> Option<Found<'_>> {
        self.lookup(inner, key, hash).filter(|found| {
            found
                .view
                .meta
                .expires_at_ms
                .is_none_or(|at| at > inner.now_ms())
        })
    }

    /// Visits up to `bucket_budget` index buckets from `cursor`; see `Index::scan`.
    pub(crate) fn scan(
        &self,
        inner: &Inner,
        cursor: u32,
        bucket_budget: usize,
        now_ms: u64,
        visit: &mut dyn FnMut(&[u8]),
        flash: &mut Vec<u64>,
    ) -> Option<u32> {
        self.index.scan(cursor, bucket_budget, |entry| {
            if index::is_flash(entry.location) {
                flash.push(entry.location);
                return;
            }
            match self.record_at(inner, entry.location) {
                // A part is not a key.
                Some((view, _))
                    if view.meta.expires_at_ms.is_none_or(|at| at > now_ms)
                        && view.meta.kind != record::Kind::Part =>
                {
                    visit(view.key);
                }
                Some(_) => {}
                None => self
                    .damaged_reads
                    .lock()
                    .push((entry.hash24, entry.location)),
            }
        })
    }
}
