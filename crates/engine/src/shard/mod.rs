//! One shard: a lock's worth of the keyspace, with its own index, TTL chains and segments.
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

use strata_pool::{Segment, CACHE_LINE_SIZE_BYTES};

use crate::config::EvictionPolicy;
use crate::error::WriteError;
use crate::index::{self, Entry, Index, SlotRef};
use crate::index_files::{Agreement, Anchor};
use crate::record::{self, Damage, RecordMeta, RecordView};
use crate::recovery::RecoveryReport;
use crate::segment::{self, HeaderFields, OwnedSegment, Verified};
use crate::ttl;
use crate::Inner;

mod clean;
mod flash;

pub(crate) use clean::CleanOutcome;
pub(crate) use flash::FlashCandidates;

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
    /// The segment the cleaner moves live records to, while it has room (see `clean`).
    clean_head: Option<u32>,
    pub(crate) scratch: Vec<u8>,
    survivors: Vec<u8>,
    survivor_slots: Vec<(u32, u64)>,
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
    /// Recovery's list of a segment's valid record offsets, kept to reuse its allocation.
    scan_offsets: Vec<u32>,
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
}

/// What the scrub's walk of one segment found.
#[derive(Debug, Default)]
pub(crate) struct ScrubWalk {
    /// Damage, `(offset, cause)`.
    pub(crate) damage: Vec<(usize, Damage)>,
    /// Valid live records: how many, and their bytes.
    pub(crate) live: (u32, u64),
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
        self.0.read()
    }

    /// Exclusive access, waiting for it.
    pub(crate) fn write(&self) -> ShardWrite<'_> {
        ShardWrite::begin(self.0.write())
    }

    /// Exclusive access that changes neither the index nor a segment's bookkeeping, so does not
    /// mark the shard as changing: for taking a crash image, which must show the control line
    /// as it is between changes, and for a commit, which only makes written bytes durable and
    /// turns superseded records dead (both already counted dead: see `kill_record`).
    pub(crate) fn hold(&self) -> parking_lot::RwLockWriteGuard<'_, Shard> {
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
        if std::thread::panicking() {
            // A panic in the middle of a change: the shard's index, bookkeeping and pool bytes
            // may disagree, and no caller can tell. Serving on would risk wrong values, so the
            // process ends here, before the lock is released, as a `kill -9` would: the control
            // line still says "changing", and the next open rebuilds the shard from its records.
            eprintln!(
                "strata-engine: a panic unwound through a change to shard {}; aborting so that \
                 a restart recovers the pool",
                self.0.id
            );
            std::process::abort();
        }
        self.0.record_change();
    }
}

/// A record found by a lookup.
pub(crate) struct Found<'a> {
    pub(crate) slot: SlotRef,
    pub(crate) entry: Entry,
    pub(crate) view: RecordView<'a>,
    pub(crate) cas: u64,
}

/// What a change needs of a record a lookup found, without borrowing the shard.
#[derive(Clone, Copy)]
struct Held {
    slot: SlotRef,
    location: u64,
    size_bytes: usize,
}

impl Held {
    fn of(found: Found<'_>) -> Held {
        Held {
            slot: found.slot,
            location: found.entry.location,
            size_bytes: found.view.size_bytes,
        }
    }
}

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
            clean_head: None,
            scratch: Vec::new(),
            survivors: Vec::new(),
            survivor_slots: Vec::new(),
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
            scan_offsets: Vec::new(),
            flash_items: 0,
            demote_scratch: Vec::new(),
            flash_suspects: flash::Suspects::default(),
            salvaged_flash: Vec::new(),
        }
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
            let Some(record) = self.record_at(inner, location) else {
                // Damaged: not this key's record; dropped from the index at the next repair.
                self.damaged_reads.lock().push((h24, location));
                return false;
            };
            let is_key = record.0.key == key;
            if is_key {
                hit = Some(record);
            }
            is_key
        })?;
        let (view, cas) = hit?;
        Some(Found {
            slot,
            entry,
            view,
            cas,
        })
    }

    /// Starts loading the record of the first slot whose stored hash matches (no key compare:
    /// a hint for `Engine::prefetch`).
    pub(crate) fn prefetch_record(&self, inner: &Inner, hash: u64) {
        let _ = self.index.find(index::hash24(hash), |location| {
            if index::is_flash(location) {
                return false;
            }
            let (id, offset) = inner.split_location(location);
            if let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) {
                // Two lines: a small item's header, key and value nearly always straddle a
                // line boundary, and the copy of the value then stalls on the second line.
                let data = owned.segment.data();
                if let Some(first) = data.get(offset) {
                    strata_pool::prefetch(first);
                }
                if let Some(next) = data.get(offset + CACHE_LINE_SIZE_BYTES) {
                    strata_pool::prefetch(next);
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

    /// Appends a record for `key`, replacing the key's current record if any. Returns the new
    /// record's CAS. A `touch` (a rewrite keeping the item's CAS, so the same item with a new
    /// expiry) keeps the slot's reads and counts as one more; any other write replaces the
    /// item, whose reads start over, so a slot's `fetched` means "read since written".
    pub(crate) fn write(
        &mut self,
        inner: &Inner,
        key: &[u8],
        hash: u64,
        value: &[u8],
        meta: RecordMeta,
        touch: bool,
    ) -> Result<u64, WriteError> {
        inner.check_writable()?;
        let size = record::record_size(key.len(), value.len(), &meta);
        assert!(
            size <= inner.segment_size_bytes,
            "callers check item size first"
        );
        let ttl_ms = meta
            .expires_at_ms
            .map(|at| at.saturating_sub(inner.now_ms()));
        let bucket = ttl::bucket_for(ttl_ms);
        let current = self.lookup(inner, key, hash).map(Held::of);
        let current_seq = current.map(|held| self.seq_at(inner, held.location));
        let Reserved { id, opened } = self.reserve(inner, bucket, size, current_seq)?;
        // Opening a segment may have evicted or moved the key's record: look it up again.
        let previous = if opened {
            self.lookup(inner, key, hash).map(Held::of)
        } else {
            current
        };
        let owned = self.owned_mut(id);
        let offset = owned.write_offset;
        let first_record = offset == 0;
        record::write(
            &mut owned.segment.data_mut()[offset..offset + size],
            key,
            value,
            &meta,
        );
        owned.write_offset += size;
        owned.live_items += 1;
        owned.live_bytes += size as u64;
        owned.cover_expiry(meta.expires_at_ms, first_record);
        let cas = meta.cas.unwrap_or_else(|| owned.cas_at(offset));
        self.written(inner, id, offset, size)?;
        self.live_bytes += size as u64;
        let location = inner.join_location(id, offset);
        match previous {
            Some(held) => {
                self.kill_record(inner, held, Some(location))?;
                self.index.relocate(held.slot, location);
                if touch {
                    self.index.bump_freq(held.slot);
                } else {
                    self.index.forget_reads(held.slot);
                }
            }
            // A touch whose record was evicted while making room is still the same item, and
            // this access counts as a read of it. A flash copy of the key is dead from now on:
            // memory answers first, and the flash entries with the key's hash bits stay only
            // until the flash thread has read which key they hold.
            None => {
                self.suspect_flash_copies(hash);
                self.insert_index(inner, hash, location, u8::from(touch));
            }
        }
        bump(&self.counters.writes, 1);
        bump(&self.counters.written_bytes, size as u64);
        Ok(cas)
    }

    /// Indexes a new item read `freq` times (marked fetched when `freq > 0`).
    fn insert_index(&mut self, inner: &Inner, hash: u64, location: u64, freq: u8) {
        self.insert_entry(inner, index::hash24(hash), location, freq);
    }

    /// [`Shard::insert_index`] by the 24 stored hash bits.
    pub(crate) fn insert_entry(&mut self, inner: &Inner, hash24: u32, location: u64, freq: u8) {
        // The budget is charged before a growth (so segments are given up first), then set to
        // the size the index ended with (an overflow table may have grown instead, or too).
        let mut charged = self.index.size_bytes();
        if self.index.needs_growth() {
            let bucket_count = self.index.growth_count(self.index_items_expected(inner));
            let grown = self.index.size_bytes_with(bucket_count);
            inner.index_resized(charged, grown);
            charged = grown;
            self.index.grow_to(bucket_count);
        }
        self.index.insert(hash24, location, freq);
        inner.index_resized(charged, self.index.size_bytes());
    }

    /// Items this shard's share of the budget would hold in memory at its average record size
    /// so far, never less than the expected item size (`EngineConfig::item_size_bytes_expected`):
    /// what the index grows to. An index sized at start for small items would take a large
    /// share of the budget from large ones (13% of 64 MiB, where 1 KiB values need 0.7%).
    fn index_items_expected(&self, inner: &Inner) -> usize {
        let memory_items = (self.index.len() as u64)
            .saturating_sub(self.flash_items)
            .max(1);
        let record_bytes = (self.live_bytes / memory_items).max(inner.item_size_bytes_expected);
        let items = inner.shard_memory_bytes / (record_bytes + index::INDEX_BYTES_PER_ITEM);
        usize::try_from(items).unwrap_or(usize::MAX)
    }

    fn seq_at(&self, inner: &Inner, location: u64) -> u64 {
        self.owned(inner.split_location(location).0).fields.seq
    }

    /// Marks the held record dead and updates its segment's counts. When it is `replaced_by` a
    /// newer record (an overwrite) under deferred persistence, the mark itself waits for the next
    /// commit: written now, it could reach the media before the new record does, and a power cut
    /// would then lose the key's acknowledged value.
    ///
    /// A delete marks the record dead at once, and with it every older record of the key whose
    /// mark still waits (an overwrite earlier in the same commit): recovery serves a key's newest
    /// *live* record, so a crash before the commit would otherwise find the deleted record dead
    /// and its predecessor live, a value from before writes that the state the crash left
    /// otherwise shows as done (a later request of the same connection survived). Marking the
    /// predecessor early is safe for power loss too: neither the overwrite nor the delete has
    /// been acknowledged yet, so the key may be found deleted.
    fn kill_record(
        &mut self,
        inner: &Inner,
        held: Held,
        replaced_by: Option<u64>,
    ) -> Result<(), WriteError> {
        let (location, size) = (held.location, held.size_bytes);
        let (id, offset) = inner.split_location(location);
        // Saturating: a segment's counts come from books that damage may have changed (mapped
        // index files, a snapshot that no longer matches) until the scrub counts them again.
        let owned = self.owned_mut(id);
        owned.live_items = owned.live_items.saturating_sub(1);
        owned.live_bytes = owned.live_bytes.saturating_sub(size as u64);
        self.live_bytes = self.live_bytes.saturating_sub(size as u64);
        if let (Some(replacement), true) = (replaced_by, inner.track_dirty) {
            // Not persisted: what it tells a recovery is only used when no store was lost.
            record::mark_superseded(&mut self.owned_mut(id).segment.data_mut()[offset..]);
            self.pending_dead.push(location);
            self.pending_by_replacement.insert(replacement, location);
            return Ok(());
        }
        self.mark_dead_now(inner, location)?;
        let mut newer = location;
        while let Some(older) = self.pending_by_replacement.remove(&newer) {
            self.mark_dead_now(inner, older)?;
            newer = older;
        }
        Ok(())
    }

    /// Writes a record's dead mark and makes it durable as the durability level says.
    fn mark_dead_now(&mut self, inner: &Inner, location: u64) -> Result<(), WriteError> {
        let (id, offset) = inner.split_location(location);
        let Some(owned) = self.segments[id as usize].as_deref_mut() else {
            return Ok(()); // Its segment was freed since: nothing to mark.
        };
        record::mark_dead(&mut owned.segment.data_mut()[offset..]);
        self.touch(id);
        self.written(inner, id, offset, 1)
    }

    /// Makes a write durable as the durability level says: now, or at the next commit.
    fn written(
        &mut self,
        inner: &Inner,
        id: u32,
        offset: usize,
        len: usize,
    ) -> Result<(), WriteError> {
        if inner.sync_inline {
            inner.persisted(self.owned(id).segment.persist_data(offset, len))?;
        } else if inner.track_dirty {
            let (start, end) = (offset as u32, (offset + len) as u32);
            match self.dirty.last_mut() {
                Some(last) if last.0 == id && start <= last.2 && end >= last.1 => {
                    last.1 = last.1.min(start);
                    last.2 = last.2.max(end);
                }
                _ => self.dirty.push((id, start, end)),
            }
            // Release: pairs with the AcqRel swap in `Inner::commit`.
            inner.dirty_any.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Whole-pool commits: the ranges are covered by the caller's whole-pool persist.
    pub(crate) fn forget_dirty_ranges(&mut self) {
        self.dirty.clear();
    }

    /// Writes the dead marks of records superseded since the last commit; the caller has made
    /// their replacements durable. Returns the marks as runs of nearby bytes, `(segment, start,
    /// end)`, so a caller that persists ranges does it once per run rather than once per mark.
    pub(crate) fn write_pending_marks(&mut self, inner: &Inner) -> Vec<(u32, usize, usize)> {
        let mut pending = std::mem::take(&mut self.pending_dead);
        pending.sort_unstable();
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        for &location in &pending {
            let (id, offset) = inner.split_location(location);
            let Some(owned) = self.segments[id as usize].as_deref_mut() else {
                continue;
            };
            let data = &mut owned.segment.data_mut()[offset..];
            if !record::is_superseded(data) {
                continue; // Marked early, by a delete of its replacement (`kill_record`).
            }
            record::mark_dead(data);
            add_to_runs(&mut runs, id, offset, offset + 1);
        }
        pending.clear();
        self.pending_dead = pending;
        self.pending_by_replacement.clear();
        runs
    }

    /// Ends a shard's recovery: persists the dead marks it wrote over superseded records, so
    /// that no later power loss finds such a record live again. Without this, a delete (or a
    /// dead mark) of the newer record made durable in the new session would leave the older
    /// one its key's newest live record on the media: a value resurrected after an
    /// acknowledged delete. The newer records are durable already: read from the media after
    /// a power loss, persisted by `recovery::recover` before the scan after a process crash.
    /// Only where a power loss keeps the pool (`interval`, `sync`).
    pub(crate) fn persist_recovery_marks(&mut self, inner: &Inner) -> Result<(), WriteError> {
        let mut marks = std::mem::take(&mut self.recovery_marks);
        if !inner.survives_power_loss() {
            return Ok(());
        }
        marks.sort_unstable();
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        for location in marks {
            let (id, offset) = inner.split_location(location);
            if self.segments[id as usize].is_some() {
                add_to_runs(&mut runs, id, offset, offset + 1);
            }
        }
        for run in runs {
            self.persist_run(inner, run)?;
        }
        Ok(())
    }

    fn persist_run(
        &self,
        inner: &Inner,
        (id, start, end): (u32, usize, usize),
    ) -> Result<(), WriteError> {
        let owned = self.segments[id as usize]
            .as_deref()
            .expect("run of an owned segment");
        inner.persisted(owned.segment.persist_data(start, end - start))
    }

    /// Persists the ranges written since the last commit, merged per segment.
    pub(crate) fn persist_dirty(&mut self, inner: &Inner) -> Result<(), WriteError> {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        let mut at = 0;
        while at < dirty.len() {
            let (id, mut start, mut end) = dirty[at];
            at += 1;
            while at < dirty.len() && dirty[at].0 == id {
                start = start.min(dirty[at].1);
                end = end.max(dirty[at].2);
                at += 1;
            }
            // A segment freed since was made durable (free header) when it was freed.
            if let Some(owned) = self.segments[id as usize].as_deref() {
                let (start, end) = (start as usize, end as usize);
                inner.persisted(owned.segment.persist_data(start, end - start))?;
            }
        }
        dirty.clear();
        self.dirty = dirty;
        // Only now, with every replacement durable, may the old records be marked dead.
        for run in self.write_pending_marks(inner) {
            self.persist_run(inner, run)?;
        }
        Ok(())
    }

    /// Deletes the key's record. Returns whether an unexpired record was there.
    pub(crate) fn delete(
        &mut self,
        inner: &Inner,
        key: &[u8],
        hash: u64,
    ) -> Result<bool, WriteError> {
        inner.check_writable()?;
        let Some(found) = self.lookup(inner, key, hash) else {
            // A flash copy (the caller promoted it first if it needed to know of it) dies too.
            self.drop_flash_slots(inner, hash);
            return Ok(false);
        };
        let expired = found
            .view
            .meta
            .expires_at_ms
            .is_some_and(|at| at <= inner.now_ms());
        let held = Held::of(found);
        self.kill_record(inner, held, None)?;
        self.remove_memory_slot(held.slot, index::hash24(hash));
        if expired {
            bump(&self.counters.expired_items, 1);
        }
        Ok(!expired)
    }

    /// Returns an open segment of `bucket` with `size` free bytes whose seq is at least
    /// `min_seq`, sealing and opening segments as needed.
    fn reserve(
        &mut self,
        inner: &Inner,
        bucket: usize,
        size: usize,
        min_seq: Option<u64>,
    ) -> Result<Reserved, WriteError> {
        let mut opened = false;
        for _ in 0..8 {
            let bucket = self.write_bucket(inner, bucket);
            if let Some(&id) = self.chains[bucket].back() {
                let owned = self.owned(id);
                let ordered = min_seq.is_none_or(|seq| owned.fields.seq >= seq);
                if !owned.sealed && owned.free_bytes() >= size && ordered {
                    return Ok(Reserved { id, opened });
                }
                if !ordered {
                    // The key's current record is newer than this segment: rather than seal a
                    // barely used segment, write to the newest open one if it is new enough.
                    if let Some(newest) = self.newest_open_segment() {
                        let owned = self.owned(newest);
                        if owned.free_bytes() >= size
                            && min_seq.is_none_or(|s| owned.fields.seq >= s)
                        {
                            return Ok(Reserved { id: newest, opened });
                        }
                    }
                }
                self.seal(id);
            }
            // A segment opened for this write whose carried hot items left too little room for
            // it (a value over half a segment): the next one carries none, so the write fits.
            let segment = inner.obtain_segment(self, !opened)?;
            let id = self.install(inner, segment, bucket)?;
            self.reinsert_survivors(inner, id)?;
            opened = true;
        }
        Err(WriteError::OutOfMemory)
    }

    /// The TTL bucket whose open segment takes a write meant for `bucket`: its own when it has
    /// an open segment or the shard may open another; at the cap, the open bucket with the
    /// nearest longer TTL (else the longest open one). Items keep their exact expiry, so any
    /// segment is correct; the choice only affects how soon a whole segment can be reclaimed.
    /// Without the cap, diverse TTLs would hold one partly filled segment per bucket and shard.
    fn write_bucket(&self, inner: &Inner, bucket: usize) -> usize {
        let is_open = self.chains[bucket]
            .back()
            .is_some_and(|&id| !self.owned(id).sealed);
        if is_open || self.open_buckets.len() < inner.open_segments_per_shard_max {
            return bucket;
        }
        let open = || self.open_buckets.iter().map(|&b| usize::from(b));
        open()
            .filter(|&b| b >= bucket)
            .min()
            .or_else(|| open().max())
            .unwrap_or(bucket)
    }

    /// The open segment with the greatest seq.
    fn newest_open_segment(&self) -> Option<u32> {
        self.open_buckets
            .iter()
            .filter_map(|&b| self.chains[usize::from(b)].back().copied())
            .max_by_key(|&id| self.owned(id).fields.seq)
    }

    /// Stops appends to a segment.
    fn seal(&mut self, id: u32) {
        let owned = self.owned_mut(id);
        if !owned.sealed {
            owned.sealed = true;
            let bucket = owned.fields.ttl_bucket;
            self.open_buckets.retain(|&b| b != bucket);
        }
    }

    /// Takes ownership of a free (zeroed) segment as the open head of `bucket`'s chain.
    fn install(
        &mut self,
        inner: &Inner,
        segment: Segment,
        bucket: usize,
    ) -> Result<u32, WriteError> {
        let id = self.take_fresh(inner, segment, bucket as u16, false)?;
        debug_assert!(!self.open_buckets.contains(&(bucket as u16)));
        self.open_buckets.push(bucket as u16);
        Ok(id)
    }

    /// Takes ownership of a free (zeroed) segment in `bucket`'s chain: writes and persists its
    /// header with a fresh seq, and adds it to the tables, open to appends unless `sealed`.
    fn take_fresh(
        &mut self,
        inner: &Inner,
        mut segment: Segment,
        bucket: u16,
        sealed: bool,
    ) -> Result<u32, WriteError> {
        let fields = HeaderFields {
            ttl_bucket: bucket,
            shard: self.id,
            seq: inner.next_seq()?,
            created_ms: inner.now_ms(),
        };
        segment::write_header(segment.header_mut(), fields);
        inner.persisted(segment.persist_header())?;
        let id = segment.id();
        self.adopt(OwnedSegment {
            segment,
            fields,
            write_offset: 0,
            sealed,
            live_items: 0,
            live_bytes: 0,
            expires_at_ms: Some(0),
            verified: Verified::Clean,
        });
        Ok(id)
    }

    /// Adds a segment to this shard's tables (at open or recovery).
    pub(crate) fn adopt(&mut self, owned: OwnedSegment) {
        let id = owned.segment.id();
        let bucket = owned.fields.ttl_bucket as usize;
        let seq = owned.fields.seq;
        let segments = &self.segments;
        let chain = &mut self.chains[bucket];
        let at = chain.partition_point(|&other| {
            segments[other as usize]
                .as_ref()
                .is_some_and(|s| s.fields.seq < seq)
        });
        chain.insert(at, id);
        let at = self.order.partition_point(|&(_, other)| other < seq);
        self.order.insert(at, (id, seq));
        self.live_bytes += owned.live_bytes;
        assert!(
            self.segments[id as usize].is_none(),
            "a segment has one owner"
        );
        self.segments[id as usize] = Some(Box::new(owned));
        self.touch(id);
    }

    fn reinsert_survivors(&mut self, inner: &Inner, id: u32) -> Result<(), WriteError> {
        if self.survivor_slots.is_empty() {
            return Ok(());
        }
        let survivors = std::mem::take(&mut self.survivors);
        let slots = std::mem::take(&mut self.survivor_slots);
        let mut at = 0;
        for &(h24, old_location) in &slots {
            let view = record::read_trusted(&survivors[at..])
                .expect("survivors were written by this process");
            let size = view.size_bytes;
            let owned = self.owned_mut(id);
            let offset = owned.write_offset;
            assert!(
                offset + size <= owned.segment.data().len(),
                "survivors fit half a segment"
            );
            owned.segment.data_mut()[offset..offset + size]
                .copy_from_slice(&survivors[at..at + size]);
            owned.write_offset += size;
            owned.live_items += 1;
            owned.live_bytes += size as u64;
            owned.cover_expiry(view.meta.expires_at_ms, offset == 0);
            self.live_bytes += size as u64;
            let location = inner.join_location(id, offset);
            let (slot, _) = self
                .index
                .find(h24, |l| l == old_location)
                .expect("survivor indexed");
            self.index.relocate(slot, location);
            self.index.set_freq(slot, 0);
            at += size;
        }
        bump(&self.counters.merged_items, slots.len() as u64);
        let end = self.owned(id).write_offset;
        self.written(inner, id, 0, end)?;
        self.survivors = survivors;
        self.survivors.clear();
        self.survivor_slots = slots;
        self.survivor_slots.clear();
        Ok(())
    }

    /// Picks a victim by `policy` and frees it. `keep_hot` carries read items (merge).
    pub(crate) fn evict_one(
        &mut self,
        inner: &Inner,
        policy: EvictionPolicy,
        keep_hot: bool,
    ) -> Result<Option<Segment>, WriteError> {
        self.order.retain(|&(id, seq)| {
            self.segments[id as usize]
                .as_ref()
                .is_some_and(|s| s.fields.seq == seq)
        });
        if self.order.is_empty() {
            return Ok(None);
        }
        let pick = match policy {
            EvictionPolicy::Random => (self.next_random() % self.order.len() as u64) as usize,
            _ => 0,
        };
        let (id, _) = self.order[pick];
        bump(&self.counters.evicted_segments, 1);
        let reason = FreeReason::Evict {
            keep_hot: keep_hot && policy == EvictionPolicy::Merge,
        };
        self.free_segment(inner, id, reason).map(Some)
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: eviction only needs a cheap, well-spread choice.
        let mut x = self.rng_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng_state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Unindexes a segment's live records (or keeps hot ones aside), marks it free in the pool,
    /// zeroes it and hands back the pool handle.
    pub(crate) fn free_segment(
        &mut self,
        inner: &Inner,
        id: u32,
        reason: FreeReason,
    ) -> Result<Segment, WriteError> {
        if inner.track_dirty {
            // Make this shard's writes durable first: the segment may hold records that newer,
            // not yet durable records supersede, and freeing it must not lose the key.
            self.persist_dirty(inner)?;
        }
        self.seal(id);
        if self.clean_head == Some(id) {
            self.clean_head = None;
        }
        let owned = *self.segments[id as usize]
            .take()
            .expect("freeing an owned segment");
        self.chains[owned.fields.ttl_bucket as usize].retain(|&other| other != id);
        if reason == FreeReason::Cleaned {
            assert_eq!(owned.live_items, 0, "the cleaner moved every live record");
            return self.release_freed(inner, owned);
        }
        let now_ms = inner.now_ms();
        let survivor_budget = owned.segment.data().len() / 2;
        let release = |shard: &mut Shard, offset: usize, view: RecordView<'_>| {
            if view.live {
                let location = inner.join_location(id, offset);
                shard.unindex_or_keep(
                    inner,
                    &owned,
                    view,
                    location,
                    reason,
                    now_ms,
                    survivor_budget,
                );
            }
        };
        if owned.is_clean() {
            owned.for_each_trusted_record(|offset, view| release(self, offset, view));
        } else {
            // Damage is skipped: an entry of a damaged record is dropped by `repair`, or, if
            // never read, found gone here (`unindex_or_keep` tolerates it).
            for step in record::walk(owned.log()) {
                match step {
                    record::Step::Record { offset, view } => release(self, offset, view),
                    record::Step::Damaged { cause, .. } | record::Step::Tail { cause, .. }
                        if owned.verified == Verified::Unverified =>
                    {
                        self.counters.count_damage(cause);
                    }
                    _ => {}
                }
            }
        }
        self.release_freed(inner, owned)
    }

    /// Ends the freeing of a segment taken out of the shard's tables: its live bytes leave the
    /// shard's count, and its header is zeroed and made durable.
    fn release_freed(
        &mut self,
        inner: &Inner,
        mut owned: OwnedSegment,
    ) -> Result<Segment, WriteError> {
        self.live_bytes = self.live_bytes.saturating_sub(owned.live_bytes);
        owned.segment.header_mut().fill(0);
        inner.persisted(owned.segment.persist_header())?;
        // The data is zeroed when the segment is taken again (`Inner::prepare`), after the free
        // header is durable.
        Ok(owned.segment)
    }

    #[allow(clippy::too_many_arguments)]
    fn unindex_or_keep(
        &mut self,
        inner: &Inner,
        owned: &OwnedSegment,
        view: RecordView<'_>,
        location: u64,
        reason: FreeReason,
        now_ms: u64,
        survivor_budget: usize,
    ) {
        let h24 = index::hash24(inner.hash(view.key));
        let Some((slot, entry)) = self.index.find(h24, |l| l == location) else {
            // Only where damage made the index lose the record (or point elsewhere).
            debug_assert!(
                !(owned.is_clean() && self.index_verified),
                "a live record of a clean segment is indexed"
            );
            return;
        };
        let expired = view.meta.expires_at_ms.is_some_and(|at| at <= now_ms);
        let keep = matches!(reason, FreeReason::Evict { keep_hot: true })
            && !expired
            && entry.freq() > 0
            && self.survivors.len() + view.size_bytes + 8 <= survivor_budget;
        if !keep
            && !expired
            && matches!(reason, FreeReason::Evict { .. })
            && self.demote(inner, owned, slot, entry, &view, location, now_ms)
        {
            return;
        }
        if keep {
            let (_, offset) = inner.split_location(location);
            let meta = RecordMeta {
                cas: Some(view.meta.cas.unwrap_or_else(|| owned.cas_at(offset))),
                ..view.meta
            };
            let size = record::record_size(view.key.len(), view.value.len(), &meta);
            if self.survivors.len() + size <= survivor_budget {
                let start = self.survivors.len();
                self.survivors.resize(start + size, 0);
                record::write(&mut self.survivors[start..], view.key, view.value, &meta);
                self.survivor_slots.push((h24, location));
                return;
            }
        }
        self.remove_memory_slot(slot, h24);
        let counter = match reason {
            _ if expired => &self.counters.expired_items,
            FreeReason::Evict { .. } => &self.counters.evicted_items,
            FreeReason::Expire => &self.counters.expired_items,
            FreeReason::Flush | FreeReason::Cleaned => return,
        };
        bump(counter, 1);
    }

    /// Frees every segment whose records have all expired. Returns the handles.
    pub(crate) fn expire(
        &mut self,
        inner: &Inner,
        now_ms: u64,
    ) -> Result<Vec<Segment>, WriteError> {
        let expired: Vec<u32> = self
            .order
            .iter()
            .filter_map(|&(id, seq)| {
                let owned = self.segments[id as usize].as_ref()?;
                (owned.fields.seq == seq
                    && owned.write_offset > 0
                    && owned.expires_at_ms.is_some_and(|at| at <= now_ms))
                .then_some(id)
            })
            .collect();
        let mut freed = Vec::with_capacity(expired.len());
        for id in expired {
            bump(&self.counters.expired_segments, 1);
            freed.push(self.free_segment(inner, id, FreeReason::Expire)?);
        }
        Ok(freed)
    }

    /// Frees every segment (flush_all). Returns the handles.
    pub(crate) fn flush(&mut self, inner: &Inner) -> Result<Vec<Segment>, WriteError> {
        let ids: Vec<u32> = self.order.iter().map(|&(id, _)| id).collect();
        let mut freed = Vec::new();
        for id in ids {
            if self.segments[id as usize].is_some() {
                freed.push(self.free_segment(inner, id, FreeReason::Flush)?);
            }
        }
        self.order.clear();
        self.drop_flash_entries(|_| false);
        assert_eq!(self.index.len(), 0, "flush unindexes everything");
        Ok(freed)
    }

    /// Bytes of this shard's segments that hold no live record and take no more writes (see
    /// `EngineStats::dead_bytes`): dead records, and the unwritten room of sealed segments.
    pub(crate) fn dead_bytes(&self) -> u64 {
        self.segments
            .iter()
            .flatten()
            .map(|owned| {
                let takes_more = !owned.sealed || Some(owned.segment.id()) == self.clean_head;
                let used = if takes_more {
                    owned.write_offset
                } else {
                    owned.segment.data().len()
                };
                (used as u64).saturating_sub(owned.live_bytes)
            })
            .sum()
    }

    /// Segments this shard owns.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.iter().filter(|s| s.is_some()).count()
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
                Some((view, _)) if view.meta.expires_at_ms.is_none_or(|at| at > now_ms) => {
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

    /// Recovery: walks a segment's whole data validating every record (`record::walk`), sets
    /// its log end and verified state, and lists its valid records' offsets for
    /// `recover_segment`. Damaged bytes between valid records are skipped and counted; invalid
    /// bytes with nothing valid after them are a write the crash tore (when `torn_possible`;
    /// else damage too), and the log ends where they start.
    pub(crate) fn scan_log(&mut self, id: u32, torn_possible: bool, report: &mut RecoveryReport) {
        let mut offsets = std::mem::take(&mut self.scan_offsets);
        offsets.clear();
        let mut causes: Vec<(usize, Damage)> = Vec::new();
        let owned = self.owned_mut(id);
        let mut walk = record::walk(owned.segment.data());
        let mut log_end = None;
        let mut damaged = false;
        for step in walk.by_ref() {
            match step {
                record::Step::Record { offset, .. } => offsets.push(offset as u32),
                record::Step::Damaged { offset, cause, .. } => {
                    damaged = true;
                    causes.push((offset, cause));
                }
                record::Step::Tail { offset, cause } => {
                    log_end = Some(offset);
                    if torn_possible {
                        report.records_torn += 1;
                    } else {
                        causes.push((offset, cause));
                    }
                }
            }
        }
        let end = log_end.unwrap_or(walk.offset());
        owned.write_offset = end;
        owned.verified = if damaged {
            Verified::Damaged
        } else {
            Verified::Clean
        };
        for (offset, cause) in causes {
            report.records_damaged += 1;
            self.counters.count_damage(cause);
            crate::scrub::log_damage(self.id, id, offset, cause, "skipped by recovery");
        }
        self.scan_offsets = offsets;
    }

    /// The seq of an owned segment.
    pub(crate) fn seq_of(&self, id: u32) -> u64 {
        self.owned(id).fields.seq
    }

    /// Recovery: indexes the live records `scan_log` listed, resolving duplicates by
    /// `(seq, offset)` and marking expired ones dead. Both index buckets of each record are
    /// prefetched a batch ahead, so the random index misses overlap instead of queueing.
    pub(crate) fn recover_segment(
        &mut self,
        inner: &Inner,
        id: u32,
        now_ms: u64,
        superseded_live: bool,
        report: &mut RecoveryReport,
    ) {
        const BATCH: usize = 16;
        let offsets = std::mem::take(&mut self.scan_offsets);
        let mut batch: Vec<(usize, u64)> = Vec::with_capacity(BATCH);
        for chunk in offsets.chunks(BATCH) {
            batch.clear();
            for &offset in chunk {
                let offset = offset as usize;
                // Validated by `scan_log` under this same exclusive lock.
                let Some(view) = record::read_trusted(&self.owned(id).log()[offset..]) else {
                    continue;
                };
                let (superseded, revive) = (view.superseded, view.superseded && superseded_live);
                if superseded && !revive {
                    // Dead after a process crash: marked so, as recovery marks every record it
                    // finds superseded, durably before the shard serves.
                    self.recover_supersede(inner, id, offset);
                    continue;
                }
                if view.live || revive {
                    let hash = inner.hash(view.key);
                    if inner.shard_of(hash) != usize::from(self.id) {
                        // A valid record of another shard's key: the segment header naming
                        // this shard was damaged (with a checksum to match). Never indexed.
                        self.misplaced(id, offset, report);
                        continue;
                    }
                    if revive {
                        // Live again (see `record`); its replacement, if it survived too, is
                        // the newer and supersedes it below.
                        record::mark_live(&mut self.owned_mut(id).segment.data_mut()[offset..]);
                    }
                    self.index.prefetch(index::hash24(hash));
                    batch.push((offset, hash));
                }
            }
            for &(at, hash) in &batch {
                self.recover_record(inner, id, at, hash, now_ms, report);
            }
        }
        self.scan_offsets = offsets;
    }

    /// Recovery found a record of another shard's key in segment `id`: damage.
    fn misplaced(&mut self, id: u32, offset: usize, report: &mut RecoveryReport) {
        self.owned_mut(id).verified = Verified::Damaged;
        report.records_damaged += 1;
        self.counters.count_damage(Damage::Location);
        crate::scrub::log_damage(self.id, id, offset, Damage::Location, "of another shard");
    }

    fn recover_record(
        &mut self,
        inner: &Inner,
        id: u32,
        offset: usize,
        hash: u64,
        now_ms: u64,
        report: &mut RecoveryReport,
    ) {
        let location = inner.join_location(id, offset);
        let (expired, existing) = {
            let Some(view) = record::read_trusted(&self.owned(id).log()[offset..]) else {
                return;
            };
            let expired = view.meta.expires_at_ms.is_some_and(|at| at <= now_ms);
            let existing = (!expired)
                .then(|| self.lookup(inner, view.key, hash))
                .flatten()
                .map(|found| (found.slot, found.entry.location));
            (expired, existing)
        };
        if expired {
            report.records_expired += 1;
            self.recover_kill(id, offset);
            return;
        }
        match existing {
            None => {
                self.recover_count(id, offset);
                self.insert_index(inner, hash, location, 0);
                report.items_recovered += 1;
            }
            Some((slot, other)) => {
                report.records_superseded += 1;
                let (other_id, other_offset) = inner.split_location(other);
                if (self.seq_of(other_id), other_offset) < (self.seq_of(id), offset) {
                    self.recover_uncount_supersede(inner, other_id, other_offset);
                    self.recover_count(id, offset);
                    self.index.relocate(slot, location);
                } else {
                    self.recover_supersede(inner, id, offset);
                }
            }
        }
    }

    /// Recovery: counts a record as live in its segment.
    fn recover_count(&mut self, id: u32, offset: usize) {
        let owned = self.owned_mut(id);
        let Some(view) = record::read_trusted(&owned.log()[offset..]) else {
            return; // Validated by `scan_log`: cannot happen.
        };
        let (size, expires_at_ms) = (view.size_bytes, view.meta.expires_at_ms);
        let first = owned.live_items == 0;
        owned.live_items += 1;
        owned.live_bytes += size as u64;
        owned.cover_expiry(expires_at_ms, first);
        self.live_bytes += size as u64;
    }

    /// Recovery: marks an uncounted expired record dead. Not persisted: the next recovery
    /// reaches the same decision (an expired record stays expired, whatever happens to the
    /// key's other records).
    fn recover_kill(&mut self, id: u32, offset: usize) {
        record::mark_dead(&mut self.owned_mut(id).segment.data_mut()[offset..]);
    }

    /// Recovery: marks an uncounted record dead that a newer record of its key supersedes, and
    /// lists it for `persist_recovery_marks`.
    fn recover_supersede(&mut self, inner: &Inner, id: u32, offset: usize) {
        self.recover_kill(id, offset);
        self.recovery_marks.push(inner.join_location(id, offset));
    }

    /// Recovery: un-counts and kills a record that a newer one supersedes.
    fn recover_uncount_supersede(&mut self, inner: &Inner, id: u32, offset: usize) {
        let owned = self.owned_mut(id);
        let Some(view) = record::read_trusted(&owned.log()[offset..]) else {
            return; // Validated by `scan_log`: cannot happen.
        };
        let size = view.size_bytes as u64;
        owned.live_items = owned.live_items.saturating_sub(1);
        owned.live_bytes = owned.live_bytes.saturating_sub(size);
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.recover_supersede(inner, id, offset);
    }

    /// Appends this shard's DRAM state (index and segment bookkeeping) for a clean close.
    pub(crate) fn export(&self, out: &mut Vec<u8>) {
        self.index.export(out);
        let owned: Vec<&OwnedSegment> = self.segments.iter().flatten().map(|b| &**b).collect();
        out.extend_from_slice(&(owned.len() as u64).to_le_bytes());
        for segment in owned {
            out.extend_from_slice(&segment.segment.id().to_le_bytes());
            out.extend_from_slice(&(segment.write_offset as u64).to_le_bytes());
            out.extend_from_slice(&segment.live_items.to_le_bytes());
            out.extend_from_slice(&segment.live_bytes.to_le_bytes());
            out.extend_from_slice(&segment.expires_at_ms.unwrap_or(u64::MAX).to_le_bytes());
        }
    }

    /// Takes the entries (hash bits, location) that reads found pointing at no valid record.
    pub(crate) fn take_damaged_reads(&self) -> Vec<(u32, u64)> {
        std::mem::take(&mut *self.damaged_reads.lock())
    }

    /// Whether the entry (hash bits, location) points at the start of a valid, live record of
    /// a key with those hash bits, in a segment of this shard. Validates the record whatever
    /// the segment's state.
    pub(crate) fn entry_is_sound(&self, inner: &Inner, h24: u32, location: u64) -> bool {
        self.sound_key(inner, h24, location).is_some()
    }

    /// The key of the valid, live record at `location` if its hash bits are `h24` (see
    /// [`Shard::entry_is_sound`]).
    fn sound_key(&self, inner: &Inner, h24: u32, location: u64) -> Option<&[u8]> {
        let (id, offset) = inner.split_location(location);
        let owned = self.segments.get(id as usize)?.as_deref()?;
        if offset >= owned.write_offset {
            return None;
        }
        match record::read(&owned.log()[offset..]) {
            record::Scan::Record(view)
                if view.live && index::hash24(inner.hash(view.key)) == h24 =>
            {
                Some(view.key)
            }
            _ => None,
        }
    }

    /// Whether the entry in `slot` is sound and the one a lookup of its key finds: a second
    /// entry of the same key (damage) is not, and would outlive a delete of the key.
    fn entry_is_the_keys(&self, inner: &Inner, slot: index::SlotRef, entry: index::Entry) -> bool {
        let Some(key) = self.sound_key(inner, entry.hash24, entry.location) else {
            return false;
        };
        let first = self.index.find(entry.hash24, |location| {
            self.record_at(inner, location)
                .is_some_and(|(view, _)| view.key == key)
        });
        first.is_some_and(|(found, _)| found == slot)
    }

    /// Drops the index entry (hash bits, location) if it is still there and still points at no
    /// valid record of its key. Returns whether it dropped one.
    pub(crate) fn drop_if_damaged(&mut self, inner: &Inner, h24: u32, location: u64) -> bool {
        if index::is_flash(location) {
            // A flash read found it damaged: its bytes on flash do not change until reclaim.
            let dropped = self.unindex_flash(h24, location);
            if dropped {
                bump(&self.counters.damaged_items_dropped, 1);
            }
            return dropped;
        }
        if self.entry_is_sound(inner, h24, location) {
            return false; // Rewritten since the read that queued it, or a race: keep it.
        }
        let Some((slot, _)) = self.index.find(h24, |l| l == location) else {
            return false;
        };
        self.remove_memory_slot(slot, h24);
        self.dropped(inner, location);
        true
    }

    /// Drops the entry in `slot` if it still holds `entry` and points at no valid record of its
    /// key (the scrub's check found it; its hash bits may be damaged too, so it is removed where
    /// it is rather than looked up). Returns whether it dropped it.
    pub(crate) fn drop_slot_if_damaged(
        &mut self,
        inner: &Inner,
        slot: index::SlotRef,
        entry: index::Entry,
    ) -> bool {
        if self.entry_is_the_keys(inner, slot, entry) || !self.index.remove_if(slot, entry) {
            return false;
        }
        self.drop_suspects(entry.hash24);
        self.dropped(inner, entry.location);
        true
    }

    /// Accounts for an entry dropped because it pointed at no valid record. The segment's live
    /// counts are the scrub's to set (`scrub_settle` counts the valid live records of a damaged
    /// segment): whether the damaged bytes were counted live cannot be read back.
    fn dropped(&mut self, inner: &Inner, location: u64) {
        let (id, offset) = inner.split_location(location);
        bump(&self.counters.damaged_items_dropped, 1);
        crate::scrub::log_damage(self.id, id, offset, Damage::Location, "item dropped");
    }

    /// Segments whose records no walk has validated yet: `(id, seq)`.
    pub(crate) fn unverified_segments(&self) -> Vec<(u32, u64)> {
        self.segments
            .iter()
            .flatten()
            .filter(|owned| owned.verified == Verified::Unverified)
            .map(|owned| (owned.segment.id(), owned.fields.seq))
            .collect()
    }

    /// Whether any segment has known damage.
    pub(crate) fn has_damaged_segments(&self) -> bool {
        self.segments
            .iter()
            .flatten()
            .any(|owned| owned.verified == Verified::Damaged)
    }

    /// The scrub's walk of segment `id` (if it is still the segment of stamp `seq`): the damage
    /// it holds, `(offset, cause)`, empty when every record is valid; and the valid live records
    /// the index does not find, `(offset, hash)`: their entries were damaged (an index mapped
    /// from its files, or a snapshot that no longer matches its pool).
    pub(crate) fn scrub_walk(&self, inner: &Inner, id: u32, seq: u64) -> Option<ScrubWalk> {
        let owned = self.segments.get(id as usize)?.as_deref()?;
        if owned.fields.seq != seq || owned.verified != Verified::Unverified {
            return None;
        }
        let mut found = ScrubWalk::default();
        let mut walk = record::walk(owned.log());
        for step in walk.by_ref() {
            if let record::Step::Record { view, .. } = &step {
                if view.live && inner.shard_of(inner.hash(view.key)) == usize::from(self.id) {
                    found.live.0 += 1;
                    found.live.1 += view.size_bytes as u64;
                }
            }
            match step {
                record::Step::Record { offset, view }
                    if view.live
                        && inner.shard_of(inner.hash(view.key)) != usize::from(self.id) =>
                {
                    found.damage.push((offset, Damage::Location));
                }
                record::Step::Record { offset, view } if view.live => {
                    let hash = inner.hash(view.key);
                    let location = inner.join_location(id, offset);
                    let indexed = self
                        .lookup(inner, view.key, hash)
                        .is_some_and(|f| f.entry.location == location);
                    if !indexed {
                        found.unindexed.push((offset, hash));
                    }
                }
                record::Step::Record { .. } => {}
                record::Step::Damaged { offset, cause, .. }
                | record::Step::Tail { offset, cause } => {
                    found.damage.push((offset, cause));
                }
            }
        }
        // The log's end is known here: zeros before it are records that were wiped.
        if walk.offset() < owned.write_offset && found.damage.is_empty() {
            found.damage.push((walk.offset(), Damage::State));
        }
        Some(found)
    }

    /// Records the outcome of the scrub's walk of segment `id` (still of stamp `seq`).
    pub(crate) fn scrub_settle(&mut self, inner: &Inner, id: u32, seq: u64, walked: &ScrubWalk) {
        let Some(owned) = self
            .segments
            .get_mut(id as usize)
            .and_then(|s| s.as_deref_mut())
        else {
            return;
        };
        if owned.fields.seq != seq || owned.verified != Verified::Unverified {
            return;
        }
        owned.verified = if walked.damage.is_empty() {
            Verified::Clean
        } else {
            Verified::Damaged
        };
        if owned.verified == Verified::Damaged || !self.index_verified {
            // The book counted records the walk found damaged (or an index that lost entries
            // was behind it): the walk's count is the truth.
            let (items, bytes) = walked.live;
            self.live_bytes = self.live_bytes.saturating_sub(owned.live_bytes) + bytes;
            (owned.live_items, owned.live_bytes) = (items, bytes);
            self.touch(id);
        }
        for &(offset, cause) in &walked.damage {
            self.counters.count_damage(cause);
            crate::scrub::log_damage(self.id, id, offset, cause, "found by the scrub");
        }
        for &(offset, hash) in &walked.unindexed {
            self.reindex(inner, id, offset, hash);
        }
    }

    /// Puts back a valid live record that a damaged (mapped) index lost: indexed again, or, if
    /// the index holds another live record of its key, the older of the two marked dead (only a
    /// damaged dead mark makes two; a scan would pick the newer the same way).
    fn reindex(&mut self, inner: &Inner, id: u32, offset: usize, hash: u64) {
        let location = inner.join_location(id, offset);
        let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) else {
            return;
        };
        let record::Scan::Record(view) = record::read(&owned.log()[offset..]) else {
            return;
        };
        if !view.live {
            return;
        }
        let size = view.size_bytes;
        let other = self
            .lookup(inner, view.key, hash)
            .map(|found| (found.slot, found.entry.location, found.view.size_bytes));
        let kill = match other {
            None => {
                self.insert_index(inner, hash, location, 0);
                None
            }
            Some((_, other, _)) if other == location => return,
            Some((slot, other, other_size)) => {
                let (other_id, other_offset) = inner.split_location(other);
                if (self.seq_of(other_id), other_offset) < (self.seq_of(id), offset) {
                    self.index.relocate(slot, location);
                    Some((other, other_size))
                } else {
                    Some((location, size))
                }
            }
        };
        if let Some((dead, dead_size)) = kill {
            let (dead_id, _) = inner.split_location(dead);
            let owned = self.owned_mut(dead_id);
            owned.live_items = owned.live_items.saturating_sub(1);
            owned.live_bytes = owned.live_bytes.saturating_sub(dead_size as u64);
            self.live_bytes = self.live_bytes.saturating_sub(dead_size as u64);
            // A failed persist latches the engine; the mark is redone by any later recovery.
            let _ = self.mark_dead_now(inner, dead);
        }
        self.touch(id);
        self.counters.count_damage(Damage::Location);
        crate::scrub::log_damage(
            self.id,
            id,
            offset,
            Damage::Location,
            "index entry restored",
        );
    }

    /// The scrub's check of the entries of index buckets `[cursor, cursor + budget)`: those
    /// that may point at no valid record of their key. Entries of clean segments are trusted
    /// once the index is verified.
    pub(crate) fn scrub_entries(
        &self,
        inner: &Inner,
        cursor: u32,
        bucket_budget: usize,
        per_segment: &mut HashMap<u32, u32>,
    ) -> (Option<u32>, Vec<(index::SlotRef, index::Entry)>) {
        let mut bad = Vec::new();
        let next = self.index.scan_slots(cursor, bucket_budget, |slot, entry| {
            if index::is_flash(entry.location) {
                return; // Flash records are checked as they are read.
            }
            let (id, _) = inner.split_location(entry.location);
            *per_segment.entry(id).or_insert(0) += 1;
            let trusted = self.index_verified
                && self
                    .segments
                    .get(id as usize)
                    .and_then(|s| s.as_deref())
                    .is_some_and(OwnedSegment::is_clean);
            if !trusted && !self.entry_is_the_keys(inner, slot, entry) {
                bad.push((slot, entry));
            }
        });
        (next, bad)
    }

    /// Drops the entries pointing into segment `id` (still of stamp `seq`) at offsets where its
    /// walk finds no live record. Scans the whole index: only for a segment whose entries
    /// outnumber its live records, which only damage makes.
    pub(crate) fn drop_entries_off_the_walk(&mut self, inner: &Inner, id: u32, seq: u64) {
        let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) else {
            return;
        };
        if owned.fields.seq != seq {
            return;
        }
        let on_walk: std::collections::HashSet<u64> = record::walk(owned.log())
            .filter_map(|step| match step {
                record::Step::Record { offset, view } if view.live => {
                    Some(inner.join_location(id, offset))
                }
                _ => None,
            })
            .collect();
        let mut stray = Vec::new();
        let mut cursor = Some(0);
        while let Some(at) = cursor {
            cursor = self.index.scan_slots(at, 1024, |slot, entry| {
                if !index::is_flash(entry.location)
                    && inner.split_location(entry.location).0 == id
                    && !on_walk.contains(&entry.location)
                {
                    stray.push((slot, entry));
                }
            });
        }
        for (slot, entry) in stray {
            if self.index.remove_if(slot, entry) {
                self.drop_suspects(entry.hash24);
                self.dropped(inner, entry.location);
            }
        }
    }

    /// Verifies the invariants in the module docs. Costly: tests and `strata pool verify`.
    /// Damaged segments (damage found and skipped) are checked only for what damage cannot
    /// excuse: every valid live record indexed.
    pub(crate) fn check_integrity(&self, inner: &Inner) -> Result<(), String> {
        let mut live_records = 0usize;
        let mut damaged = false;
        for owned in self.segments.iter().flatten() {
            let id = owned.segment.id();
            let mut live = 0u32;
            for step in record::walk(owned.log()) {
                let (offset, view) = match step {
                    record::Step::Record { offset, view } => (offset, view),
                    record::Step::Damaged { offset, .. } | record::Step::Tail { offset, .. } => {
                        if owned.is_clean() {
                            return Err(format!(
                                "segment {id} offset {offset}: damage in a segment marked clean"
                            ));
                        }
                        damaged = true;
                        continue;
                    }
                };
                let location = inner.join_location(id, offset);
                let hash = inner.hash(view.key);
                if view.live && inner.shard_of(hash) != usize::from(self.id) {
                    // Another shard's key: damage (a header naming the wrong shard).
                    if owned.is_clean() {
                        return Err(format!(
                            "segment {id} offset {offset}: another shard's key in a clean segment"
                        ));
                    }
                    damaged = true;
                    continue;
                }
                if view.live {
                    live += 1;
                    let h24 = index::hash24(hash);
                    if self.index.find(h24, |l| l == location).is_none() {
                        return Err(format!(
                            "segment {id} offset {offset}: live record not indexed"
                        ));
                    }
                }
            }
            if live != owned.live_items && owned.verified != Verified::Damaged {
                return Err(format!(
                    "segment {id}: {live} live records, counted {}",
                    owned.live_items
                ));
            }
            live_records += live as usize;
        }
        let mut flash_entries = 0u64;
        self.index.all_entries(|entry| {
            flash_entries += u64::from(index::is_flash(entry.location));
            true
        });
        if flash_entries != self.flash_items {
            return Err(format!(
                "{flash_entries} flash entries, counted {}",
                self.flash_items
            ));
        }
        let memory_entries = self.index.len() - flash_entries as usize;
        if live_records != memory_entries && !damaged {
            return Err(format!(
                "{live_records} live records but {memory_entries} memory index entries",
            ));
        }
        Ok(())
    }
}

/// Adds the bytes `start..end` of segment `id` to `runs` (given in order): extends the last
/// run when they are near it, so a caller persisting ranges does it once per run.
fn add_to_runs(runs: &mut Vec<(u32, usize, usize)>, id: u32, start: usize, end: usize) {
    match runs.last_mut() {
        Some(run) if run.0 == id && start < run.2 + MARK_RUN_GAP_BYTES => run.2 = run.2.max(end),
        _ => runs.push((id, start, end)),
    }
}
