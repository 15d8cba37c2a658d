//! The cache in front of a backing store, write-through (`--mode wt`, and `wa`, `wi`): reads
//! are served from cached lines and fill them on a miss; writes go to the backing store first,
//! and the lines they cover hold the new bytes only once the store has them. Nothing is lost
//! when the process dies: the backing store always holds every acknowledged write. The lines
//! live in DRAM or in a pool (`slots`, `pool_cache`), which restarts warm.
//!
//! Lines are `line_bytes` long (4–64 KiB) and aligned to it in the store; only whole lines are
//! cached (a store whose size is not a whole number of lines has its tail read and written
//! directly). The lines are spread over shards by a hash of the line number, each shard under
//! its own lock with its own map and a CLOCK hand for eviction.
//!
//! Consistency with the store, whatever runs at once on the same line:
//! - A write invalidates the lines it covers before it writes the store, and counts itself in
//!   flight on each. When it ends, it puts its bytes in a line only if it covered the whole line,
//!   no other write was in flight on that line when it began, and none began since; otherwise
//!   the line stays invalid (two overlapping writes may reach the store in either order, and the
//!   cache cannot know which one the store kept).
//! - A read miss notes its shard's generation, reads the store, and fills the line only if the
//!   generation has not moved (every write's start and end moves it) and no write is in flight
//!   on the line: a fill never puts back bytes a write has replaced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use strata_pool::Pool;

use crate::slots::Slots;

/// Shards of the cache (each its own lock, map and CLOCK hand).
pub const SHARDS: usize = 64;
/// No line in this slot.
const EMPTY: u64 = u64::MAX;

/// The cache's counters.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Lines read from the cache.
    pub read_hits: AtomicU64,
    /// Lines read from the backing store.
    pub read_misses: AtomicU64,
    /// Lines filled by read misses.
    pub fills: AtomicU64,
    /// Fills given up because a write touched the line meanwhile.
    pub fills_raced: AtomicU64,
    /// Misses not filled yet: the line has missed fewer times than `--promote-after`.
    pub fills_deferred: AtomicU64,
    /// Lines read or written past the sequential cut-off, bypassing the cache.
    pub seq_cutoff_bypasses: AtomicU64,
    /// Lines that writes put their bytes in (write-through keeps written data cached).
    pub write_updates: AtomicU64,
    /// Lines that writes (or trims) left invalid.
    pub write_invalidations: AtomicU64,
    /// Lines evicted to make room.
    pub evictions: AtomicU64,
}

/// A cache of whole lines, in DRAM or in a pool.
#[derive(Debug)]
pub struct Cache {
    line_bytes: usize,
    /// The pool the lines live in (`--cache PATH`), closed cleanly at stop.
    pool: Mutex<Option<Pool>>,
    /// Lines found valid in the pool at open.
    pub recovered_lines: u64,
    /// Misses of a line before a miss fills it (1: every miss fills).
    promote_after: u32,
    shards: Vec<Mutex<Shard>>,
    /// Counters, for logs and stats.
    pub counters: CacheCounters,
}

#[derive(Debug)]
struct Shard {
    slots: Slots,
    /// Slot → line number (`EMPTY` when free).
    lines: Vec<u64>,
    referenced: Vec<bool>,
    /// Line number → slot.
    index: HashMap<u64, usize>,
    hand: usize,
    /// Moved by every write's start and end in this shard (fills compare it).
    generation: u64,
    /// Line number → (writes in flight on it, writes begun on it while any was in flight).
    writing: HashMap<u64, (u32, u64)>,
    /// Line number → misses not yet filled (`promote_after` > 1 only); cleared whole when it
    /// outgrows a few times the shard's lines, so it stays bounded.
    misses: HashMap<u64, u32>,
}

impl WriteTicket {
    /// The line's number.
    pub fn line(&self) -> u64 {
        self.line
    }
}

/// What a write's start noted on a line, for its end.
#[derive(Clone, Copy, Debug)]
pub struct WriteTicket {
    line: u64,
    alone: bool,
    epoch: u64,
    /// The line was cached when the write began (write-around updates only such lines).
    pub was_cached: bool,
}

impl Cache {
    /// A cache of `capacity_bytes` (rounded down to whole lines per shard) of `line_bytes`
    /// lines, filling a line on its `promote_after`-th miss (at least the first).
    pub fn new(capacity_bytes: u64, line_bytes: usize, promote_after: u32) -> Cache {
        let lines_total = (capacity_bytes / line_bytes as u64) as usize;
        let per_shard = lines_total / SHARDS;
        let slots = (0..SHARDS)
            .map(|_| Slots::Dram {
                bytes: vec![0u8; per_shard * line_bytes],
            })
            .collect();
        Cache::from_slots(line_bytes, promote_after, slots, None, u64::MAX)
    }

    /// A cache over `slots` (one per shard), with the lines their entries name valid (pool
    /// slots) taken in, except those of lines at or past `lines_max` or found in two slots.
    pub fn from_slots(
        line_bytes: usize,
        promote_after: u32,
        slots: Vec<Slots>,
        pool: Option<Pool>,
        lines_max: u64,
    ) -> Cache {
        assert_eq!(slots.len(), SHARDS, "one slot set per shard");
        let mut recovered_lines = 0;
        let shards = slots
            .into_iter()
            .map(|mut slots| {
                let count = slots.count(line_bytes);
                let mut lines = vec![EMPTY; count];
                let mut index = HashMap::with_capacity(count);
                let mut twice = Vec::new();
                for (slot, line) in slots.valid_entries(line_bytes) {
                    if line >= lines_max {
                        slots.clear(slot);
                        continue;
                    }
                    if let Some(other) = index.insert(line, slot) {
                        // Cannot happen (a line is stored only where it is not): trust neither.
                        twice.push((line, other, slot));
                    }
                    lines[slot] = line;
                }
                for (line, a, b) in twice {
                    index.remove(&line);
                    for slot in [a, b] {
                        lines[slot] = EMPTY;
                        slots.clear(slot);
                    }
                }
                recovered_lines += index.len() as u64;
                Mutex::new(Shard {
                    slots,
                    lines,
                    referenced: vec![false; count],
                    index,
                    hand: 0,
                    generation: 0,
                    writing: HashMap::new(),
                    misses: HashMap::new(),
                })
            })
            .collect();
        Cache {
            line_bytes,
            pool: Mutex::new(pool),
            recovered_lines,
            promote_after: promote_after.max(1),
            shards,
            counters: CacheCounters::default(),
        }
    }

    /// Whether the lines live in a pool (and survive a restart).
    pub fn persistent(&self) -> bool {
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Closes the pool cleanly (every line's bytes and entry persisted, the pool marked clean);
    /// nothing to do in DRAM.
    pub fn close(&self) -> Result<(), String> {
        // Every shard held: no line changes while the pool is persisted.
        let _shards: Vec<_> = (0..self.shards.len()).map(|s| self.lock(s)).collect();
        match self.pool.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(pool) => pool.close_clean(None).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Bytes per line.
    pub fn line_bytes(&self) -> usize {
        self.line_bytes
    }

    /// Lines the cache holds at most.
    pub fn capacity_lines(&self) -> usize {
        (0..self.shards.len())
            .map(|s| self.lock(s).lines.len())
            .sum()
    }

    /// Lines cached now.
    pub fn cached_lines(&self) -> usize {
        (0..self.shards.len())
            .map(|s| self.lock(s).index.len())
            .sum()
    }

    fn shard_of(&self, line: u64) -> usize {
        // Consecutive lines go to different shards.
        (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % self.shards.len()
    }

    fn lock(&self, shard: usize) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[shard].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies line `line` into `out` (one line long) if cached; otherwise returns the shard's
    /// generation for [`Cache::fill`].
    pub fn read(&self, line: u64, out: &mut [u8]) -> Result<(), u64> {
        let mut shard = self.lock(self.shard_of(line));
        let Some(&slot) = shard.index.get(&line) else {
            self.counters.read_misses.fetch_add(1, Ordering::Relaxed);
            return Err(shard.generation);
        };
        shard.referenced[slot] = true;
        out.copy_from_slice(shard.slots.slot(slot, self.line_bytes));
        self.counters.read_hits.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether line `line` is cached now.
    pub fn holds(&self, line: u64) -> bool {
        self.lock(self.shard_of(line)).index.contains_key(&line)
    }

    /// Copies the part of line `line` (at store offset `line_start`) inside the request
    /// `[offset, offset + out.len())` into `out` if the line is cached; counts a hit then, and
    /// nothing otherwise.
    pub fn read_part(&self, line: u64, line_start: u64, offset: u64, out: &mut [u8]) -> bool {
        let mut shard = self.lock(self.shard_of(line));
        let Some(&slot) = shard.index.get(&line) else {
            return false;
        };
        shard.referenced[slot] = true;
        let end = offset + out.len() as u64;
        let from = line_start.max(offset);
        let to = (line_start + self.line_bytes as u64).min(end);
        let at = (from - line_start) as usize;
        let dst = (from - offset) as usize..(to - offset) as usize;
        out[dst].copy_from_slice(
            &shard.slots.slot(slot, self.line_bytes)[at..at + (to - from) as usize],
        );
        self.counters.read_hits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Fills line `line` with `data` read from the store after [`Cache::read`] returned
    /// `generation`, unless a write touched the shard since or is in flight on the line.
    pub fn fill(&self, line: u64, data: &[u8], generation: u64) {
        let mut shard = self.lock(self.shard_of(line));
        if shard.generation != generation || shard.writing.contains_key(&line) {
            self.counters.fills_raced.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.promote_after > 1 {
            let limit = 4 * shard.lines.len() + 64;
            if shard.misses.len() >= limit {
                shard.misses.clear();
            }
            let seen = shard.misses.entry(line).or_insert(0);
            *seen += 1;
            if *seen < self.promote_after {
                self.counters.fills_deferred.fetch_add(1, Ordering::Relaxed);
                return;
            }
            shard.misses.remove(&line);
        }
        if self.put(&mut shard, line, data) {
            self.counters.fills.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A write to `line` begins: the line is invalidated and the write counted in flight.
    pub fn write_begins(&self, line: u64) -> WriteTicket {
        let mut shard = self.lock(self.shard_of(line));
        shard.generation += 1;
        let was_cached = match shard.index.remove(&line) {
            Some(slot) => {
                shard.lines[slot] = EMPTY;
                shard.referenced[slot] = false;
                shard.slots.clear(slot);
                true
            }
            None => false,
        };
        let entry = shard.writing.entry(line).or_insert((0, 0));
        let alone = entry.0 == 0;
        entry.0 += 1;
        entry.1 += 1;
        WriteTicket {
            line,
            alone,
            epoch: entry.1,
            was_cached,
        }
    }

    /// The write of `ticket` has reached the store (or failed: `data` is `None` then, as for
    /// a write that covered the line only partly): the line takes `data` if the write had it
    /// to itself (module docs), else stays invalid.
    pub fn write_ends(&self, ticket: WriteTicket, data: Option<&[u8]>) {
        let mut shard = self.lock(self.shard_of(ticket.line));
        shard.generation += 1;
        let Some(entry) = shard.writing.get_mut(&ticket.line) else {
            return; // Cannot happen: every end has its begin.
        };
        let undisturbed = ticket.alone && entry.1 == ticket.epoch;
        entry.0 -= 1;
        if entry.0 == 0 {
            shard.writing.remove(&ticket.line);
        }
        match data {
            Some(data) if undisturbed => {
                if self.put(&mut shard, ticket.line, data) {
                    self.counters.write_updates.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {
                self.counters
                    .write_invalidations
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Puts `data` in `line`'s slot (taking a slot by CLOCK if it has none). False when the
    /// shard has no slots at all.
    fn put(&self, shard: &mut Shard, line: u64, data: &[u8]) -> bool {
        let slots = shard.lines.len();
        if slots == 0 {
            return false;
        }
        let slot = match shard.index.get(&line) {
            Some(&slot) => slot,
            None => {
                let slot = loop {
                    let at = shard.hand;
                    shard.hand = (shard.hand + 1) % slots;
                    if shard.lines[at] == EMPTY {
                        break at;
                    }
                    if shard.referenced[at] {
                        shard.referenced[at] = false;
                    } else {
                        let old = shard.lines[at];
                        shard.index.remove(&old);
                        self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                        break at;
                    }
                };
                shard.lines[slot] = line;
                shard.index.insert(line, slot);
                slot
            }
        };
        shard.referenced[slot] = true;
        shard.slots.store(slot, line, data);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: usize = 4096;

    #[test]
    fn a_filled_line_is_read_back_and_eviction_keeps_the_capacity() {
        let cache = Cache::new(64 * 4 * LINE as u64, LINE, 1); // 4 lines per shard
        let mut out = vec![0u8; LINE];
        for line in 0..2000u64 {
            let generation = cache.read(line, &mut out).unwrap_err();
            cache.fill(line, &vec![line as u8; LINE], generation);
            cache.read(line, &mut out).expect("just filled");
            assert!(out.iter().all(|&b| b == line as u8));
        }
        assert!(cache.cached_lines() <= cache.capacity_lines());
        assert_eq!(cache.capacity_lines(), 256);
        assert!(cache.counters.evictions.load(Ordering::Relaxed) >= 2000 - 256);
    }

    #[test]
    fn a_fill_that_raced_a_write_is_dropped() {
        let cache = Cache::new(64 * 4 * LINE as u64, LINE, 1);
        let mut out = vec![0u8; LINE];
        let generation = cache.read(7, &mut out).unwrap_err();
        // A write begins and ends between the miss and its fill.
        let ticket = cache.write_begins(7);
        cache.write_ends(ticket, None);
        cache.fill(7, &[1u8; LINE], generation);
        assert!(cache.read(7, &mut out).is_err(), "the stale fill was kept");
        // A fill while a write is in flight on the line is dropped too.
        let generation = cache.read(7, &mut out).unwrap_err();
        let ticket = cache.write_begins(7);
        let later = cache.read(7, &mut out).unwrap_err();
        cache.fill(7, &[2u8; LINE], later);
        assert!(cache.read(7, &mut out).is_err());
        cache.write_ends(ticket, Some(&[3u8; LINE]));
        cache.fill(7, &[2u8; LINE], generation);
        cache.read(7, &mut out).expect("the write's bytes");
        assert!(out.iter().all(|&b| b == 3));
    }

    #[test]
    fn a_line_is_filled_on_its_nth_miss_only() {
        let cache = Cache::new(64 * 4 * LINE as u64, LINE, 3);
        let mut out = vec![0u8; LINE];
        for miss in 1..=3 {
            let generation = cache.read(5, &mut out).unwrap_err();
            cache.fill(5, &[9u8; LINE], generation);
            assert_eq!(
                cache.read(5, &mut out).is_ok(),
                miss == 3,
                "after miss {miss}"
            );
        }
        assert_eq!(cache.counters.fills_deferred.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn overlapping_writes_leave_the_line_invalid() {
        let cache = Cache::new(64 * 4 * LINE as u64, LINE, 1);
        let mut out = vec![0u8; LINE];
        let first = cache.write_begins(9);
        let second = cache.write_begins(9);
        cache.write_ends(second, Some(&[2u8; LINE]));
        cache.write_ends(first, Some(&[1u8; LINE]));
        assert!(
            cache.read(9, &mut out).is_err(),
            "either order could be the store's"
        );
        // Alone, a write's bytes are kept.
        let alone = cache.write_begins(9);
        cache.write_ends(alone, Some(&[4u8; LINE]));
        cache.read(9, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 4));
        // A write begun and ended inside another's span spoils the other's update too.
        let outer = cache.write_begins(9);
        let inner = cache.write_begins(9);
        cache.write_ends(inner, Some(&[5u8; LINE]));
        cache.write_ends(outer, Some(&[6u8; LINE]));
        assert!(cache.read(9, &mut out).is_err());
    }
}
