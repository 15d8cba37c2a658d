//! The hash index of one shard: cache-line buckets of eight 64-bit slots, two candidate buckets
//! per key, overflow chains for the rare full pair, and online growth.
//!
//! ```text
//!  slot (u64):  63        40   39   38  36  35  34                                  0
//!              +------------+----+-------+---+-------------------------------------+
//!              | hash24     |link| freq3 |    location + 1                          |
//!              +------------+----+-------+---+-------------------------------------+
//!  location (36 bits): bit 35 = 0: the memory tier, bits 0..34 in 8-byte units of the pool's
//!  data area (256 GiB); bit 35 = 1: the flash tier, bits 0..34 in units of the flash medium's
//!  record alignment (8 bytes below 256 GiB of flash, up to 512 bytes for 16 TiB; see
//!  `flash/format.rs`). Stored plus one, so an all-zero slot is empty.
//!  bucket: 8 slots = 64 bytes = one cache line.
//!  A link slot (link bit set) is always slot 7; its low 32 bits are an overflow bucket index.
//! ```
//!
//! The 3-bit `freq3` field holds two facts about the item, so neither costs a byte more:
//!
//! ```text
//!  freq3  fetched  freq   meaning
//!  0      no       0      not read since it was written
//!  1      yes      0      read since written, not since merge eviction last carried it forward
//!  2..=7  yes      1..=6  read since written, `freq3 - 1` times since written or carried
//! ```
//!
//! `freq` (reads since the item was written or carried forward, saturating at [`FREQ_MAX`]) is
//! what merge eviction tests; `fetched` (read at least once since written) is memcached's
//! "fetched" bit, which the meta protocol's `h` flag reports. A read sets both; carrying an item
//! forward clears `freq` only; a write that replaces the item clears both (`forget_reads`).
//!
//! `hash24` is 24 bits of the key's hash. A key's two candidate buckets are
//! `(hash24 * n) >> 24` and the same of a bijective mix of `hash24`, for `n` buckets: any `n`
//! works, and doubling `n` maps bucket `b` onto `2b` and `2b + 1`, so growth needs no key bytes,
//! only the stored hash. Inserts go to the first candidate with room (most hits read one cache
//! line), then the second, then an overflow chain off the first. Lookups compare stored hashes
//! and hand every candidate location to the caller, who compares the full key.
//!
//! When both candidates are full, one resident item moves to its own other candidate (a single
//! cuckoo step) before an overflow chain is started.
//!
//! Invariants:
//! - Every item slot sits in the chain of one of its key's two candidate buckets, and growth
//!   keeps it in the same candidate, so a cursor over bucket positions (`scan`) stays valid
//!   across growth: an item present for a whole scan is returned at least once, unless a
//!   cuckoo step moved it behind the cursor (only inserts into two full buckets do that).
//! - `items` counts item slots; link slots are not items.
//! - Nothing here is a pointer: locations are pool offsets, links are overflow indices.
//!
//! Concurrency: the shard's lock guards the index. Readers (`&self`) only load slots and bump
//! the 3-bit access field with a relaxed compare-exchange; writers hold `&mut self`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use strata_pool::{IndexFiles, LineTable, TableKind};

/// Index bytes per item at the sized load (8-byte slots, 95% full), rounded up: what a
/// budget sets aside per expected item.
pub const INDEX_BYTES_PER_ITEM: u64 = 9;
/// Slots per bucket.
pub const SLOTS_PER_BUCKET: usize = 8;
/// Grow when items exceed this fraction of primary slots, in percent.
pub const LOAD_PERCENT_MAX: usize = 98;
/// New tables are sized so that the expected items fill this share of slots, in percent.
pub const LOAD_PERCENT_SIZED: usize = 95;
/// Growth factor of the primary buckets, as a fraction: new = old * 5 / 4. Small steps keep the
/// memory taken from the segment budget close to what the items need.
pub const GROWTH_NUMERATOR: usize = 5;
/// See [`GROWTH_NUMERATOR`].
pub const GROWTH_DENOMINATOR: usize = 4;
/// Bits of the key hash kept in a slot. With 16 candidate slots a lookup compares a wrong key's
/// record once in a million lookups; a shard's table grows to at most 2^24 buckets (134M items;
/// more items need more shards), past which inserts chain.
pub const HASH_BITS: u32 = 24;
/// The location bit that names the flash tier (clear: the memory tier).
pub const FLASH_TIER_BIT: u64 = 1 << 35;
/// Whether a slot's location names the flash tier.
#[inline]
pub const fn is_flash(location: u64) -> bool {
    location & FLASH_TIER_BIT != 0
}
/// The flash tier's own address (record-alignment units into its medium) of a flash slot's
/// location: the location without the tier bit.
#[inline]
pub const fn flash_units(location: u64) -> u64 {
    location & !FLASH_TIER_BIT
}
/// The slot location of a record at `units` of the flash tier: the units with the tier bit.
#[inline]
pub const fn flash_location(units: u64) -> u64 {
    units | FLASH_TIER_BIT
}

/// Largest location a slot can hold, tier bit included.
pub const LOCATION_MAX: u64 = (1 << 36) - 2;
/// Largest access frequency a slot counts to (the 3-bit field's largest value, 7, less the
/// one value that records "fetched, but not since carried forward").
pub const FREQ_MAX: u8 = 6;

const HASH_SHIFT: u32 = 40;
const LINK_BIT: u64 = 1 << 39;
const FREQ_SHIFT: u32 = 36;
const FREQ_MASK: u64 = 0x7 << FREQ_SHIFT;
/// The 3-bit field of an item fetched since written but not read since carried forward.
const FREQ3_FETCHED: u8 = 1;
const LOCATION_MASK: u64 = (1 << 36) - 1;
const HASH_MASK: u64 = (1 << HASH_BITS) - 1;
const LINK_SLOT: usize = SLOTS_PER_BUCKET - 1;

use strata_pool::AtomicLine as Bucket;

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

/// Where a slot is: a primary or overflow bucket, and the slot within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRef {
    overflow: bool,
    bucket: u32,
    slot: u8,
}

/// An item slot's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The 24 stored hash bits.
    pub hash24: u32,
    /// The `freq3` field as stored; `freq` and `fetched` decode it, so a lookup that uses
    /// neither pays nothing for them.
    freq3: u8,
    /// Record location in 8-byte units from the start of the data area.
    pub location: u64,
}

impl Entry {
    /// An entry of an item read `freq` times since it was written or carried forward, and
    /// `fetched` if read at all since it was written (`freq > 0` implies `fetched`).
    pub fn new(hash24: u32, freq: u8, fetched: bool, location: u64) -> Self {
        debug_assert!(
            freq <= FREQ_MAX && (fetched || freq == 0),
            "a read item is fetched"
        );
        let freq3 = match (freq, fetched) {
            (0, false) => 0,
            (0, true) => FREQ3_FETCHED,
            (freq, _) => freq + FREQ3_FETCHED,
        };
        Entry {
            hash24,
            freq3,
            location,
        }
    }

    /// Reads since the item was written or carried forward by merge eviction, 0..=FREQ_MAX.
    pub fn freq(self) -> u8 {
        self.freq3.saturating_sub(FREQ3_FETCHED)
    }

    /// Whether the item has been read since it was written (a read before a carry-forward
    /// counts). Always true when `freq() > 0`.
    pub fn fetched(self) -> bool {
        self.freq3 != 0
    }

    /// This entry with other reads (see `new`).
    fn with_reads(self, freq: u8, fetched: bool) -> Self {
        Entry::new(self.hash24, freq, fetched, self.location)
    }
}

fn pack(entry: Entry) -> u64 {
    assert!(entry.location <= LOCATION_MAX);
    debug_assert!(u64::from(entry.hash24) <= HASH_MASK);
    (u64::from(entry.hash24) << HASH_SHIFT)
        | (u64::from(entry.freq3) << FREQ_SHIFT)
        | (entry.location + 1)
}

fn unpack(slot: u64) -> Entry {
    Entry {
        hash24: (slot >> HASH_SHIFT) as u32,
        freq3: ((slot & FREQ_MASK) >> FREQ_SHIFT) as u8,
        // Wrapping: an item slot never holds location bits 0 (`pack` adds one); only damage to
        // a mapped table does, and it then names a location past every segment, which reads
        // find to hold no record.
        location: (slot & LOCATION_MASK).wrapping_sub(1),
    }
}

fn is_link(slot: u64) -> bool {
    slot & LINK_BIT != 0
}

/// The 24 index bits of a 64-bit key hash.
pub fn hash24(hash: u64) -> u32 {
    (hash & HASH_MASK) as u32
}

fn mix(hash24: u32) -> u32 {
    // An odd multiplier is a bijection modulo 2^24, so the second candidate is as uniform as
    // the first and can be recomputed from the stored bits alone.
    (hash24.wrapping_mul(0x9E37_79B1)) & HASH_MASK as u32
}

fn position(h: u32, bucket_count: usize) -> usize {
    ((u64::from(h) * bucket_count as u64) >> HASH_BITS) as usize
}

/// First overflow table size, in buckets; it doubles when full.
const OVERFLOW_BUCKETS_MIN: usize = 64;

/// Where a shard's index tables live.
#[derive(Clone, Debug)]
pub enum TableHome {
    /// Anonymous DRAM: rebuilt or reloaded at every start.
    Dram,
    /// Files in the pool's index directory, which a restart can map again as they are.
    Files {
        /// The pool's index directory.
        files: Arc<IndexFiles>,
        /// The shard the tables belong to.
        shard: u16,
    },
}

/// Which tables an index uses, as its shard's control line records them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TablesDesc {
    /// Items indexed.
    pub items: u64,
    /// Primary table generation (its file name) and size in buckets.
    pub primary_generation: u64,
    /// Primary buckets.
    pub primary_count: u64,
    /// Overflow table generation, 0 when there is none yet.
    pub overflow_generation: u64,
    /// Overflow table capacity in buckets.
    pub overflow_capacity: u64,
    /// Overflow buckets in use (a prefix of the table).
    pub overflow_len: u64,
}

/// A shard's index.
pub struct Index {
    buckets: LineTable,
    overflow: LineTable,
    overflow_len: usize,
    items: usize,
    home: TableHome,
    primary_generation: u64,
    overflow_generation: u64,
    /// The newest generation number handed out (generations only grow).
    generation: u64,
    /// A table could not be created in the index directory and lives in DRAM instead: the
    /// files do not describe this index, so a restart must rebuild it.
    degraded: bool,
}

impl Index {
    /// An empty DRAM index sized for `items_expected` items at the growth threshold.
    pub fn with_capacity(items_expected: usize) -> Self {
        Self::with_capacity_in(TableHome::Dram, items_expected, 0)
    }

    /// An empty index in `home`, its tables numbered from `generation + 1`.
    pub fn with_capacity_in(home: TableHome, items_expected: usize, generation: u64) -> Self {
        let mut index = Self::without_tables(home, generation);
        index.set_primary(Self::sized_count(items_expected));
        index
    }

    /// Primary buckets that hold `items` at [`LOAD_PERCENT_SIZED`].
    fn sized_count(items: usize) -> usize {
        let slots = (items.saturating_mul(100)).div_ceil(LOAD_PERCENT_SIZED);
        slots.div_ceil(SLOTS_PER_BUCKET).clamp(2, 1 << HASH_BITS)
    }

    fn without_tables(home: TableHome, generation: u64) -> Self {
        Index {
            buckets: LineTable::dram(0),
            overflow: LineTable::dram(0),
            overflow_len: 0,
            items: 0,
            home,
            primary_generation: 0,
            overflow_generation: 0,
            generation,
            degraded: false,
        }
    }

    /// Gives an index without tables an empty primary table of `bucket_count` buckets.
    fn set_primary(&mut self, bucket_count: usize) {
        let (buckets, generation) = self.new_table(TableKind::Primary, bucket_count);
        self.buckets = buckets;
        self.primary_generation = generation;
    }

    /// Maps the tables a control line describes, as a restart found them. `None` when a file is
    /// missing or of another size, or when the description or an overflow link is out of range
    /// (the caller then rebuilds the shard).
    pub fn open_in(files: Arc<IndexFiles>, shard: u16, desc: TablesDesc) -> Option<Self> {
        let primary_count = usize::try_from(desc.primary_count).ok()?;
        let overflow_capacity = usize::try_from(desc.overflow_capacity).ok()?;
        let slots = primary_count
            .saturating_add(overflow_capacity)
            .saturating_mul(SLOTS_PER_BUCKET);
        if primary_count < 2
            || desc.overflow_len > desc.overflow_capacity
            || (desc.overflow_generation == 0) != (overflow_capacity == 0)
            || primary_count.saturating_add(overflow_capacity) > u32::MAX as usize
            || desc.items > slots as u64
        {
            return None;
        }
        let open = |kind, generation, count| files.open_table(shard, kind, generation, count).ok();
        let buckets = open(TableKind::Primary, desc.primary_generation, primary_count)?;
        let overflow = if overflow_capacity == 0 {
            LineTable::dram(0)
        } else {
            open(
                TableKind::Overflow,
                desc.overflow_generation,
                overflow_capacity,
            )?
        };
        let index = Index {
            buckets,
            overflow,
            overflow_len: desc.overflow_len as usize,
            items: desc.items as usize,
            home: TableHome::Files { files, shard },
            primary_generation: desc.primary_generation,
            overflow_generation: desc.overflow_generation,
            generation: desc.primary_generation.max(desc.overflow_generation),
            degraded: false,
        };
        // Fault the tables in at once (cheaper than a fault per page as the check below reads
        // them, and the first requests then find them mapped).
        index.buckets.populate();
        index.overflow.populate();
        index.links_in_range().then_some(index)
    }

    /// The tables in use, for the shard's control line.
    pub fn desc(&self) -> TablesDesc {
        TablesDesc {
            items: self.items as u64,
            primary_generation: self.primary_generation,
            primary_count: self.buckets.len() as u64,
            overflow_generation: self.overflow_generation,
            overflow_capacity: self.overflow.len() as u64,
            overflow_len: self.overflow_len as u64,
        }
    }

    /// True when the index lives in files that describe it (see `degraded`).
    pub fn in_files(&self) -> bool {
        matches!(self.home, TableHome::Files { .. }) && !self.degraded
    }

    /// A zeroed table of `count` buckets in this index's home, and its generation. When the
    /// file cannot be made the table goes to DRAM and the index is marked degraded (served as
    /// normal, rebuilt at the next start).
    fn new_table(&mut self, kind: TableKind, count: usize) -> (LineTable, u64) {
        self.generation += 1;
        let generation = self.generation;
        let table = match &self.home {
            TableHome::Dram => LineTable::dram(count),
            TableHome::Files { files, shard } => {
                match files.create_table(*shard, kind, generation, count) {
                    Ok(table) => table,
                    Err(_) => {
                        self.degraded = true;
                        LineTable::dram(count)
                    }
                }
            }
        };
        (table, generation)
    }

    /// Deletes the files of this index's tables (the index is being replaced by a rebuilt one).
    pub fn retire(self) {
        self.buckets.retire();
        self.overflow.retire();
    }

    /// Writes file-backed tables back to their medium.
    pub fn persist(&self) -> Result<(), strata_pool::PoolError> {
        self.buckets.persist()?;
        self.overflow.persist()
    }

    fn links_in_range(&self) -> bool {
        self.buckets
            .iter()
            .chain(&self.overflow[..self.overflow_len])
            .all(|bucket| {
                let last = bucket.0[LINK_SLOT].load(Ordering::Relaxed);
                !is_link(last) || ((last & LOCATION_MASK) as usize) < self.overflow_len
            })
    }

    /// Items indexed.
    pub fn len(&self) -> usize {
        self.items
    }

    /// Primary buckets.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Overflow buckets in use.
    pub fn overflow_bucket_count(&self) -> usize {
        self.overflow_len
    }

    /// Memory the index holds.
    pub fn size_bytes(&self) -> usize {
        (self.buckets.len() + self.overflow.len()) * std::mem::size_of::<Bucket>()
    }

    /// Primary buckets the next growth makes when the shard expects to hold `items_expected`
    /// items: room for them at the sized load, and at least one step of
    /// [`GROWTH_NUMERATOR`]` / `[`GROWTH_DENOMINATOR`]. An index that started small reaches the
    /// size its items need in one growth instead of many 1.25× steps, each a rehash, and lands
    /// where a table sized at start for them would have been.
    pub fn growth_count(&self, items_expected: usize) -> usize {
        Self::grown_count(self.buckets.len()).max(Self::sized_count(items_expected))
    }

    /// Memory the index would hold with `bucket_count` primary buckets (its overflow buckets as
    /// they are).
    pub fn size_bytes_with(&self, bucket_count: usize) -> usize {
        (bucket_count + self.overflow.len()) * std::mem::size_of::<Bucket>()
    }

    fn grown_count(bucket_count: usize) -> usize {
        (bucket_count * GROWTH_NUMERATOR)
            .div_ceil(GROWTH_DENOMINATOR)
            .max(bucket_count + 1)
    }

    /// True when the next insert should be preceded by `grow`.
    pub fn needs_growth(&self) -> bool {
        // Past 2^HASH_BITS buckets more buckets would not spread the items further.
        self.buckets.len() < 1 << HASH_BITS
            && self.items.saturating_mul(100)
                >= self.buckets.len() * SLOTS_PER_BUCKET * LOAD_PERCENT_MAX
    }

    fn candidates(&self, hash24: u32) -> [usize; 2] {
        let n = self.buckets.len();
        let first = position(hash24, n);
        let mut second = position(mix(hash24), n);
        if second == first {
            second = (first + 1) % n;
        }
        [first, second]
    }

    fn bucket(&self, overflow: bool, index: u32) -> &Bucket {
        if overflow {
            &self.overflow[index as usize]
        } else {
            &self.buckets[index as usize]
        }
    }

    fn slot(&self, at: SlotRef) -> &AtomicU64 {
        &self.bucket(at.overflow, at.bucket).0[at.slot as usize]
    }

    /// Calls `visit` on every item slot in the chain starting at primary bucket `head`, stopping
    /// when it returns `Some`.
    fn walk_chain<T>(
        &self,
        head: usize,
        mut visit: impl FnMut(SlotRef, u64) -> Option<T>,
    ) -> Option<T> {
        let mut at = (false, head as u32);
        // A chain visits each overflow bucket at most once; more hops mean a cycle, which only
        // damage to a mapped table file can make. Like a link out of range, it ends the chain.
        let mut hops = 0;
        loop {
            let bucket = self.bucket(at.0, at.1);
            for (i, slot) in bucket.0.iter().enumerate().take(LINK_SLOT) {
                let value = slot.load(Ordering::Relaxed);
                // A link anywhere but the last slot is damage (of a mapped table): skipped.
                if value == 0 || is_link(value) {
                    continue;
                }
                let found = visit(
                    SlotRef {
                        overflow: at.0,
                        bucket: at.1,
                        slot: i as u8,
                    },
                    value,
                );
                if found.is_some() {
                    return found;
                }
            }
            let last = bucket.0[LINK_SLOT].load(Ordering::Relaxed);
            if !is_link(last) {
                if last == 0 {
                    return None;
                }
                let last_slot = SlotRef {
                    overflow: at.0,
                    bucket: at.1,
                    slot: LINK_SLOT as u8,
                };
                return visit(last_slot, last);
            }
            let target = (last & LOCATION_MASK) as usize;
            hops += 1;
            if target >= self.overflow_len || hops > self.overflow_len {
                debug_assert!(false, "an overflow link out of range or in a cycle");
                return None;
            }
            at = (true, target as u32);
        }
    }

    /// Starts loading both candidate buckets of `hash24` into the cache.
    pub fn prefetch(&self, hash24: u32) {
        for head in self.candidates(hash24) {
            strata_pool::prefetch(&self.buckets[head]);
        }
    }

    /// Finds the slot whose hash matches and whose location `is_key` confirms.
    pub fn find(
        &self,
        hash24: u32,
        mut is_key: impl FnMut(u64) -> bool,
    ) -> Option<(SlotRef, Entry)> {
        let heads = self.candidates(hash24);
        // Start the second bucket's miss now: it overlaps with the scan of the first.
        strata_pool::prefetch(&self.buckets[heads[1]]);
        for head in heads {
            let found = self.walk_chain(head, |at, value| {
                // Compare the stored hash bits before decoding the rest of the slot.
                if (value >> HASH_SHIFT) as u32 != hash24 {
                    return None;
                }
                let entry = unpack(value);
                is_key(entry.location).then_some((at, entry))
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Counts one more read of the slot's item, which also marks it fetched (saturating; a lost
    /// race only loses a count: two racing readers both succeed in marking it fetched, or the
    /// loser finds it marked).
    pub fn bump_freq(&self, at: SlotRef) {
        let slot = self.slot(at);
        let value = slot.load(Ordering::Relaxed);
        let entry = unpack(value);
        let freq = entry.freq();
        if freq < FREQ_MAX && !is_link(value) {
            let bumped = pack(entry.with_reads(freq + 1, true));
            // Relaxed: the frequency is a hint for eviction and `h`; the slot's location is
            // rewritten only under the shard's write lock, which excludes this reader.
            let _ = slot.compare_exchange(value, bumped, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Points the slot at a new location, keeping its hash and frequency.
    pub fn relocate(&mut self, at: SlotRef, location: u64) {
        let entry = unpack(self.slot(at).load(Ordering::Relaxed));
        self.slot(at)
            .store(pack(Entry { location, ..entry }), Ordering::Relaxed);
    }

    /// Sets the slot's frequency, keeping whether the item was fetched (a frequency above 0
    /// marks it fetched).
    pub fn set_freq(&mut self, at: SlotRef, freq: u8) {
        let entry = unpack(self.slot(at).load(Ordering::Relaxed));
        let entry = entry.with_reads(freq.min(FREQ_MAX), entry.fetched() || freq > 0);
        self.slot(at).store(pack(entry), Ordering::Relaxed);
    }

    /// Forgets every read of the slot's item: it now holds a newly written item, neither read
    /// (frequency 0) nor fetched.
    pub fn forget_reads(&mut self, at: SlotRef) {
        let entry = unpack(self.slot(at).load(Ordering::Relaxed));
        self.slot(at)
            .store(pack(entry.with_reads(0, false)), Ordering::Relaxed);
    }

    /// Empties the slot.
    pub fn remove(&mut self, at: SlotRef) {
        let slot = self.slot(at);
        assert!(!is_link(slot.load(Ordering::Relaxed)) && slot.load(Ordering::Relaxed) != 0);
        slot.store(0, Ordering::Relaxed);
        // Saturating: a count restored from a damaged control line can be below the entries the
        // tables hold, until the scrub counts them again (`recount`).
        self.items = self.items.saturating_sub(1);
    }

    /// Removes the item slot with this hash and location, if present; returns whether it was.
    #[cfg(test)]
    pub fn remove_location(&mut self, hash24: u32, location: u64) -> bool {
        match self.find(hash24, |l| l == location) {
            Some((at, _)) => {
                self.remove(at);
                true
            }
            None => false,
        }
    }

    /// Adds an item. The caller has checked the key is absent and called `grow` if needed.
    pub fn insert(&mut self, hash24: u32, location: u64, freq: u8) {
        let value = pack(Entry::new(hash24, freq, freq > 0, location));
        let [first, second] = self.candidates(hash24);
        // The emptier candidate first: balancing the pair keeps overflow rare at high load.
        let (a, b) = if self.free_slots(second) > self.free_slots(first) {
            (second, first)
        } else {
            (first, second)
        };
        if !self.try_place_in_chain(a, value)
            && !self.try_place_in_chain(b, value)
            && !self.displace_into(a, value)
            && !self.displace_into(b, value)
        {
            self.extend_chain(a, value);
        }
        self.items += 1;
    }

    /// One cuckoo step: moves an item of the full bucket `head` to its other candidate when that
    /// one has room, and puts `value` in the freed slot. Keeps overflow chains rare at high load.
    fn displace_into(&mut self, head: usize, value: u64) -> bool {
        for i in 0..SLOTS_PER_BUCKET {
            let resident = self.buckets[head].0[i].load(Ordering::Relaxed);
            if resident == 0 || is_link(resident) {
                continue;
            }
            let [first, second] = self.candidates(unpack(resident).hash24);
            let other = if head == first { second } else { first };
            if other != head && self.free_slots(other) > 0 {
                let placed = self.try_place_in_chain(other, resident);
                debug_assert!(placed);
                self.buckets[head].0[i].store(value, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    fn free_slots(&self, head: usize) -> usize {
        self.buckets[head]
            .0
            .iter()
            .filter(|slot| slot.load(Ordering::Relaxed) == 0)
            .count()
    }

    fn try_place_in_chain(&mut self, head: usize, value: u64) -> bool {
        let mut at = (false, head as u32);
        loop {
            let bucket = self.bucket(at.0, at.1);
            for slot in &bucket.0 {
                if slot.load(Ordering::Relaxed) == 0 {
                    slot.store(value, Ordering::Relaxed);
                    return true;
                }
            }
            let last = bucket.0[LINK_SLOT].load(Ordering::Relaxed);
            if !is_link(last) {
                return false;
            }
            at = (true, (last & LOCATION_MASK) as u32);
        }
    }

    /// Appends an overflow bucket to the chain at `head` and puts `value` in it.
    fn extend_chain(&mut self, head: usize, value: u64) {
        let mut at = (false, head as u32);
        loop {
            let last = self.bucket(at.0, at.1).0[LINK_SLOT].load(Ordering::Relaxed);
            if !is_link(last) {
                break;
            }
            at = (true, (last & LOCATION_MASK) as u32);
        }
        if self.overflow_len == self.overflow.len() {
            self.grow_overflow();
        }
        let index = u32::try_from(self.overflow_len).expect("overflow buckets fit in u32");
        self.overflow_len += 1;
        let tail = self.bucket(at.0, at.1);
        let moved = tail.0[LINK_SLOT].load(Ordering::Relaxed);
        tail.0[LINK_SLOT].store(LINK_BIT | u64::from(index), Ordering::Relaxed);
        let fresh = &self.overflow[index as usize];
        fresh.0[0].store(moved, Ordering::Relaxed);
        fresh.0[1].store(value, Ordering::Relaxed);
    }

    /// Moves the overflow buckets to a table twice the size.
    fn grow_overflow(&mut self) {
        let capacity = (self.overflow.len() * 2).max(OVERFLOW_BUCKETS_MIN);
        let (table, generation) = self.new_table(TableKind::Overflow, capacity);
        for (to, from) in table.iter().zip(&self.overflow[..self.overflow_len]) {
            for (a, b) in to.0.iter().zip(&from.0) {
                a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        std::mem::replace(&mut self.overflow, table).retire();
        self.overflow_generation = generation;
    }

    /// Grows the primary buckets by a quarter, moving every item to the same candidate in the new
    /// table (positions map monotonically onto buckets for any bucket count).
    /// Runs under the shard's write lock; its pause is proportional to the shard's items.
    #[cfg(test)]
    pub fn grow(&mut self) {
        self.grow_to(Self::grown_count(self.buckets.len()));
    }

    /// Rebuilds the primary table with `new_count` buckets (more than it has), from the stored
    /// hashes.
    pub fn grow_to(&mut self, new_count: usize) {
        assert!(new_count > self.buckets.len(), "growth adds buckets");
        let mut grown = Index::without_tables(self.home.clone(), self.generation);
        grown.degraded = self.degraded;
        grown.set_primary(new_count);
        for head in 0..self.buckets.len() {
            self.walk_chain::<()>(head, |_, value| {
                let entry = unpack(value);
                let [first, _] = self.candidates(entry.hash24);
                let h = if head == first {
                    entry.hash24
                } else {
                    mix(entry.hash24)
                };
                let mut target = position(h, new_count);
                if h != entry.hash24 && target == position(entry.hash24, new_count) {
                    target = (target + 1) % new_count;
                }
                if !grown.try_place_in_chain(target, value) {
                    grown.extend_chain(target, value);
                }
                grown.items += 1;
                None
            });
        }
        // Growth counts what the tables hold; only a count restored from damaged index files
        // (before the scrub recounts it) can differ, and the tables are the truth.
        debug_assert!(
            grown.items == self.items || self.in_files(),
            "growth keeps every item"
        );
        std::mem::replace(self, grown).retire();
    }

    /// Appends the index to `out` (little-endian): item count, primary and overflow bucket
    /// counts, free-overflow count and non-empty slot count as `u64`s, then every non-empty slot
    /// in bucket order as `u32 bucket, u8 slot, u64 value` (overflow buckets numbered after the
    /// primaries), then the free overflow ids as `u32`. Sparse, so its size follows the items,
    /// not the table. `import` reads it back.
    pub fn export(&self, out: &mut Vec<u8>) {
        let tables = self
            .buckets
            .iter()
            .chain(&self.overflow[..self.overflow_len]);
        let used: usize = tables
            .clone()
            .map(|b| {
                b.0.iter()
                    .filter(|s| s.load(Ordering::Relaxed) != 0)
                    .count()
            })
            .sum();
        let counts = [
            self.items,
            self.buckets.len(),
            self.overflow_len,
            0, // free overflow buckets: none since they stopped being freed (format kept)
            used,
        ];
        for count in counts {
            out.extend_from_slice(&(count as u64).to_le_bytes());
        }
        for (index, bucket) in tables.enumerate() {
            for (slot, value) in bucket.0.iter().enumerate() {
                let value = value.load(Ordering::Relaxed);
                if value != 0 {
                    out.extend_from_slice(&(index as u32).to_le_bytes());
                    out.push(slot as u8);
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
    }

    /// Reads what `export` wrote from the front of `bytes`; returns the index and the bytes
    /// consumed, or `None` when they do not describe a consistent index or one of more than
    /// `buckets_max` buckets (an index never outgrows its pool's memory budget).
    pub fn import(bytes: &[u8], buckets_max: usize) -> Option<(Index, usize)> {
        const ENTRY_BYTES: usize = 13;
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let (items, bucket_count) = (word(0)? as usize, word(8)? as usize);
        let (overflow_count, free_count, used) =
            (word(16)? as usize, word(24)? as usize, word(32)? as usize);
        let entries_end = 40usize.checked_add(used.checked_mul(ENTRY_BYTES)?)?;
        let end = entries_end.checked_add(free_count.checked_mul(4)?)?;
        let total = bucket_count.checked_add(overflow_count)?;
        if bytes.len() < end
            || bucket_count < 2
            || total > buckets_max.min(u32::MAX as usize)
            || used > total * SLOTS_PER_BUCKET
        {
            return None;
        }
        let buckets = LineTable::dram(bucket_count);
        let overflow = LineTable::dram(overflow_count);
        for entry in bytes[40..entries_end].chunks_exact(ENTRY_BYTES) {
            let index = u32::from_le_bytes(entry[..4].try_into().expect("4 bytes")) as usize;
            let slot = entry[4] as usize;
            let value = u64::from_le_bytes(entry[5..].try_into().expect("8 bytes"));
            let bucket = if index < bucket_count {
                buckets.get(index)
            } else {
                overflow.get(index - bucket_count)
            };
            bucket?.0.get(slot)?.store(value, Ordering::Relaxed);
        }
        // Free overflow ids (bytes[entries_end..end]) are no longer kept: a listed bucket just
        // stays unused.
        let index = Index {
            buckets,
            overflow,
            overflow_len: overflow_count,
            items,
            ..Self::without_tables(TableHome::Dram, 0)
        };
        if !index.links_in_range() {
            return None;
        }
        let counted = (0..index.buckets.len())
            .map(|head| {
                let mut n = 0;
                index.walk_chain::<()>(head, |_, _| {
                    n += 1;
                    None
                });
                n
            })
            .sum::<usize>();
        (counted == items).then_some((index, end))
    }

    /// Whether `check` holds for every item.
    pub fn all_entries(&self, mut check: impl FnMut(Entry) -> bool) -> bool {
        (0..self.buckets.len()).all(|head| {
            self.walk_chain(head, |_, value| (!check(unpack(value))).then_some(()))
                .is_none()
        })
    }

    /// Visits the items of primary buckets `[cursor, cursor + bucket_budget)` (and their chains)
    /// in bucket order. Returns the next cursor, or `None` when the table has been covered.
    /// Cursors are bucket positions scaled to 2^28, so they survive growth.
    pub fn scan(
        &self,
        cursor: u32,
        bucket_budget: usize,
        mut visit: impl FnMut(Entry),
    ) -> Option<u32> {
        self.scan_slots(cursor, bucket_budget, |_, entry| visit(entry))
    }

    /// [`Index::scan`], with each item's slot.
    pub fn scan_slots(
        &self,
        cursor: u32,
        bucket_budget: usize,
        mut visit: impl FnMut(SlotRef, Entry),
    ) -> Option<u32> {
        let n = self.buckets.len();
        // A cursor is the smallest hash position not yet covered; its bucket is where to resume
        // (in a grown table too, since positions map monotonically onto buckets).
        let mut bucket = position(cursor, n);
        let end = (bucket + bucket_budget.max(1)).min(n);
        while bucket < end {
            self.walk_chain::<()>(bucket, |at, value| {
                visit(at, unpack(value));
                None
            });
            bucket += 1;
        }
        (bucket < n).then(|| ((bucket as u64) << HASH_BITS).div_ceil(n as u64) as u32)
    }

    /// Counts the items again from the tables. For an index mapped from files that damage may
    /// have changed: a count restored from the control line counts what was written, not what
    /// a damaged table holds.
    pub fn recount(&mut self) {
        let mut items = 0;
        self.all_entries(|_| {
            items += 1;
            true
        });
        self.items = items;
    }

    /// Empties `at` if it still holds `entry`; returns whether it did.
    pub fn remove_if(&mut self, at: SlotRef, entry: Entry) -> bool {
        let value = self.slot(at).load(Ordering::Relaxed);
        if value == 0 || is_link(value) || unpack(value) != entry {
            return false;
        }
        self.remove(at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn hashes(count: usize) -> Vec<u32> {
        (0..count as u64)
            .map(|i| hash24(xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())))
            .collect()
    }

    #[test]
    fn pack_round_trips_at_the_extremes() {
        for entry in [
            Entry::new(0, 0, false, 0),
            Entry::new(1, 0, true, 1),
            Entry::new(HASH_MASK as u32, FREQ_MAX, true, LOCATION_MAX),
        ] {
            let value = pack(entry);
            assert_ne!(value, 0, "an item slot is never empty");
            assert!(!is_link(value));
            assert_eq!(unpack(value), entry);
        }
    }

    #[test]
    fn inserted_items_are_found_by_location_through_growth_and_removal() {
        let mut index = Index::with_capacity(16);
        let hs = hashes(5000);
        for (i, &h) in hs.iter().enumerate() {
            if index.needs_growth() {
                index.grow();
            }
            index.insert(h, i as u64, 0);
        }
        assert_eq!(index.len(), 5000);
        for (i, &h) in hs.iter().enumerate() {
            assert!(index.find(h, |l| l == i as u64).is_some(), "item {i} lost");
        }
        for (i, &h) in hs.iter().enumerate().step_by(2) {
            assert!(index.remove_location(h, i as u64));
        }
        assert_eq!(index.len(), 2500);
        for (i, &h) in hs.iter().enumerate() {
            assert_eq!(index.find(h, |l| l == i as u64).is_some(), i % 2 == 1);
        }
    }

    #[test]
    fn growth_jumps_to_the_expected_items_and_keeps_every_item() {
        let mut index = Index::with_capacity(16);
        let hs = hashes(20_000);
        let mut growths = 0;
        for (i, &h) in hs.iter().enumerate() {
            if index.needs_growth() {
                let count = index.growth_count(20_000);
                assert!(count >= Index::grown_count(index.bucket_count()));
                index.grow_to(count);
                growths += 1;
            }
            index.insert(h, i as u64, 0);
        }
        // One jump to the expected size, which then holds them all at the sized load.
        assert_eq!(growths, 1);
        assert_eq!(index.bucket_count(), Index::sized_count(20_000));
        assert!(!index.needs_growth());
        for (i, &h) in hs.iter().enumerate() {
            assert!(index.find(h, |l| l == i as u64).is_some(), "item {i} lost");
        }
        // Past the expected items, growth goes on in steps.
        let before = index.bucket_count();
        assert_eq!(index.growth_count(100), Index::grown_count(before));
    }

    #[test]
    fn a_full_table_overflows_into_chains_without_losing_items() {
        let mut index = Index::with_capacity(16);
        let hs = hashes(400);
        for (i, &h) in hs.iter().enumerate() {
            index.insert(h, i as u64, 1); // no growth: force long chains
        }
        assert!(index.overflow_bucket_count() > 0);
        for (i, &h) in hs.iter().enumerate() {
            let (_, entry) = index.find(h, |l| l == i as u64).expect("found");
            assert_eq!(entry.freq(), 1);
        }
        index.grow();
        for (i, &h) in hs.iter().enumerate() {
            assert!(index.find(h, |l| l == i as u64).is_some());
        }
    }

    #[test]
    fn scan_with_growth_in_the_middle_returns_every_item() {
        let mut index = Index::with_capacity(100);
        let hs = hashes(700);
        for (i, &h) in hs.iter().enumerate() {
            index.insert(h, i as u64, 0);
        }
        let mut seen = HashMap::new();
        let mut cursor = 0;
        let mut steps = 0;
        loop {
            let next = index.scan(cursor, 7, |e| *seen.entry(e.location).or_insert(0) += 1);
            steps += 1;
            if steps == 5 {
                index.grow();
            }
            match next {
                Some(c) => cursor = c,
                None => break,
            }
        }
        assert_eq!(seen.len(), 700, "every item returned at least once");
    }

    #[test]
    fn frequency_saturates() {
        let mut index = Index::with_capacity(16);
        index.insert(5, 9, 0);
        let (at, _) = index.find(5, |_| true).unwrap();
        for _ in 0..20 {
            index.bump_freq(at);
        }
        assert_eq!(index.find(5, |_| true).unwrap().1.freq(), FREQ_MAX);
        index.set_freq(at, 0);
        index.relocate(at, 11);
        assert_eq!(
            index.find(5, |_| true).unwrap().1,
            Entry::new(5, 0, true, 11)
        );
    }

    /// `fetched` is "read since written": a read sets it, merge's carry-forward (`set_freq(_,
    /// 0)` after `relocate`) keeps it while the frequency starts over, and only a write that
    /// replaces the item (`forget_reads`) clears it. Every 3-bit value decodes to a valid state.
    #[test]
    fn fetched_survives_carry_forward_and_not_a_rewrite() {
        let mut index = Index::with_capacity(16);
        index.insert(5, 9, 0);
        let (at, entry) = index.find(5, |_| true).unwrap();
        assert_eq!((entry.freq(), entry.fetched()), (0, false));
        index.bump_freq(at);
        let entry = index.find(5, |_| true).unwrap().1;
        assert_eq!((entry.freq(), entry.fetched()), (1, true));
        index.relocate(at, 10);
        index.set_freq(at, 0);
        let entry = index.find(5, |_| true).unwrap().1;
        assert_eq!(
            (entry.freq(), entry.fetched(), entry.location),
            (0, true, 10)
        );
        index.bump_freq(at);
        let entry = index.find(5, |_| true).unwrap().1;
        assert_eq!((entry.freq(), entry.fetched()), (1, true));
        index.relocate(at, 11);
        index.forget_reads(at);
        let entry = index.find(5, |_| true).unwrap().1;
        assert_eq!(
            (entry.freq(), entry.fetched(), entry.location),
            (0, false, 11)
        );
        for field in 0..=7u64 {
            let entry = unpack((field << FREQ_SHIFT) | 1);
            assert!(entry.freq() <= FREQ_MAX && (entry.fetched() || entry.freq() == 0));
            assert_eq!(pack(entry), (field << FREQ_SHIFT) | 1, "field {field}");
        }
    }

    #[test]
    fn load_reaches_the_threshold_with_few_overflow_buckets() {
        let items = 100_000;
        let mut index = Index::with_capacity(items);
        for (i, h) in hashes(items).into_iter().enumerate() {
            index.insert(h, i as u64, 0);
        }
        let overflow_share = index.overflow_bucket_count() as f64 / index.bucket_count() as f64;
        assert!(
            overflow_share < 0.05,
            "overflow buckets {overflow_share:.3} of primaries"
        );
    }
}
