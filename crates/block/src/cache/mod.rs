//! The cache in front of a backing store. Reads are served from cached lines and fill them on
//! a miss. In write-through (`--mode wt`, and `wa`, `wi`) writes go to the backing store first,
//! and the lines they cover hold the new bytes only once the store has them: the store always
//! holds every acknowledged write. In write-back (`wb`) a write goes to a line of the cache,
//! marked dirty, and the store gets it later (`Cache::clean`: the cleaner, a flush, a mode
//! switch, or a write that needs room). The lines live in DRAM or in a pool (`slots`,
//! `pool_cache`), which restarts warm.
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
//!
//! Write-back in a pool, so that no write acknowledged by FUA or a later FLUSH is lost to a
//! crash or a power cut, whatever subset of the pool's unpersisted bytes reached the media (the
//! kernel writes a file's dirty pages back in any order):
//! - Every slot written carries a version (one counter per cache); at open, of the valid
//!   entries naming a line, the highest version wins.
//! - A write over a dirty line goes to a new slot; the old one is *superseded* and keeps its
//!   entry until a settle (`Cache::settle`: persist the pool, clear the superseded entries,
//!   persist again) has made the new one durable. (Overwriting it in place could tear it: its
//!   CRC would fail and the line fall back to the store's older bytes.) A write over a clean
//!   line may overwrite it in place: torn, it falls back to the store, which has the old bytes.
//! - While a line has a superseded slot whose cleared entry may not be durable, its newest
//!   entry is neither rewritten (marked clean) nor removed: an older dirty version would come
//!   back. A FLUSH is a settle; a FUA write persists its own slots.
//! - Cleaning a line writes its bytes to the store and makes the store durable before the
//!   entry is marked clean.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use strata_pool::{MediumError, Pool};

use crate::slots::{Entry, Slots};

mod recover;

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
    /// Write-back: lines written into the cache as dirty.
    pub dirty_writes: AtomicU64,
    /// Write-back: of those, lines that were cached already (clean or dirty).
    pub dirty_write_hits: AtomicU64,
    /// Write-back: lines written back to the store.
    pub writebacks: AtomicU64,
    /// Write-back: writes that waited for lines to be written back to find room.
    pub room_waits: AtomicU64,
    /// Write-back: settles (pool persisted, superseded versions cleared).
    pub settles: AtomicU64,
}

/// A cache of whole lines, in DRAM or in a pool.
#[derive(Debug)]
pub struct Cache {
    line_bytes: usize,
    /// The pool the lines live in (`--cache PATH`), closed cleanly at stop.
    pool: Mutex<Option<Pool>>,
    /// Whether the lines live in a pool (fixed at open).
    persistent: bool,
    /// Lines found valid in the pool at open.
    pub recovered_lines: u64,
    /// Of those, dirty lines (the store lacks their bytes).
    pub recovered_dirty_lines: u64,
    /// Dirty slots found at open whose bytes failed their checksum (dropped, and logged).
    pub dirty_slots_failed: u64,
    /// Misses of a line before a miss fills it (1: every miss fills).
    promote_after: u32,
    /// Slots in all shards (fixed at open).
    capacity_lines: usize,
    shards: Vec<Mutex<Shard>>,
    /// The next version a stored slot gets.
    next_version: AtomicU64,
    /// A dirty write or a clean mark happened since the last settle began.
    unsettled: AtomicBool,
    /// One settle at a time.
    settling: Mutex<()>,
    /// One clean at a time: two writing back one line could reach the store out of order
    /// (an older copy landing last while the line is marked clean at the newer).
    cleaning: Mutex<()>,
    /// Counters, for logs and stats.
    pub counters: CacheCounters,
    /// The thread mapping a file pool's pages ahead of the requests, and its stop flag: stopped
    /// and joined at close and drop, so no mapping (and no file lock) outlives the cache.
    populating: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>>,
}

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Empty,
    /// A line's newest bytes, which the store has.
    Clean,
    /// A line's newest bytes, which the store lacks.
    Dirty,
    /// An older dirty version of a line, its entry kept until the version `by` that replaced
    /// it is durable.
    Superseded {
        by: u64,
    },
    /// A superseded slot whose cleared entry is not known durable yet.
    Clearing,
}

#[derive(Debug)]
struct Shard {
    slots: Slots,
    /// Slot → line number (`EMPTY` when free).
    lines: Vec<u64>,
    /// Slot → the version its entry carries.
    versions: Vec<u64>,
    states: Vec<SlotState>,
    referenced: Vec<bool>,
    /// Line number → the slot of its newest bytes.
    index: HashMap<u64, usize>,
    hand: usize,
    /// Moved by every write's start and end in this shard (fills compare it).
    generation: u64,
    /// Line number → (writes in flight on it, writes begun on it while any was in flight).
    writing: HashMap<u64, (u32, u64)>,
    /// Line number → misses not yet filled (`promote_after` > 1 only); cleared whole when it
    /// outgrows a few times the shard's lines, so it stays bounded.
    misses: HashMap<u64, u32>,
    /// Dirty lines by the version of the oldest write the store lacks (least recently written
    /// first):
    /// `(version, line)` → when that write happened. The line is part of the key: a line's
    /// version moves up when it is written back while rewritten, and may then equal another
    /// line's.
    dirty: BTreeMap<(u64, u64), Instant>,
    /// Line number → its version in `dirty`.
    dirty_from: HashMap<u64, u64>,
    /// Line number → its slots superseded or clearing (older versions maybe valid on media).
    older: HashMap<u64, u32>,
    /// Slots superseded or clearing.
    superseded: Vec<usize>,
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

impl WriteTicket {
    /// The line's number.
    pub fn line(&self) -> u64 {
        self.line
    }
}

/// Why a write-back write did not go into the cache.
#[derive(Debug)]
pub enum DirtyWriteError {
    /// Every slot of shard `.0` holds dirty or superseded bytes: write some back, then retry.
    NoRoom(usize),
    /// The shard has no slots at all (a cache too small for its shards): write to the store.
    NoSlots,
    /// Reading the line's other bytes from the store, or persisting the slot, failed.
    Store(MediumError),
}

/// Which dirty lines [`Cache::clean`] writes back.
#[derive(Clone, Debug)]
pub enum CleanScope {
    /// Up to `max` of the least recently written lines, in one shard or all, written before
    /// `before` (if given).
    Oldest {
        /// One shard only.
        shard: Option<usize>,
        /// Lines at most.
        max: usize,
        /// Only lines dirty since before this.
        before: Option<Instant>,
    },
    /// Every line whose oldest unwritten write has a version below this.
    VersionsBelow(u64),
    /// The lines of these numbers.
    Lines(std::ops::Range<u64>),
}

/// Writes a line's bytes to the backing store (`line number, bytes`).
pub type StoreWrite<'a> = dyn Fn(u64, &[u8]) -> Result<(), MediumError> + 'a;

/// A persist of the cache pool failed.
fn persist_failed(message: String) -> MediumError {
    MediumError::Io {
        op: "persist",
        path: "cache pool".into(),
        message,
        os_error: None,
    }
}

impl Cache {
    /// A cache of `capacity_bytes` (rounded down to whole lines per shard) of `line_bytes`
    /// lines, filling a line on its `promote_after`-th miss (at least the first).
    pub fn new(capacity_bytes: u64, line_bytes: usize, promote_after: u32) -> Cache {
        let lines_total = (capacity_bytes / line_bytes as u64) as usize;
        let per_shard = lines_total / SHARDS;
        let slots = (0..SHARDS)
            .map(|_| {
                let mut bytes = vec![0u8; per_shard * line_bytes];
                // Each page touched now rather than at its first write (a fault then, in the
                // request's time); `black_box` keeps the store of a zero from being elided.
                for page in bytes.chunks_mut(4096) {
                    page[0] = std::hint::black_box(0);
                }
                Slots::Dram { bytes }
            })
            .collect();
        Cache::from_slots(line_bytes, promote_after, slots, None, u64::MAX, true)
    }

    /// Whether the lines live in a pool (and survive a restart).
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Persists every byte of the pool (nothing to do in DRAM).
    pub fn persist_pool(&self) -> Result<(), MediumError> {
        match self.pool.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(pool) => pool
                .persist_all()
                .map_err(|e| persist_failed(e.to_string())),
            None => Ok(()),
        }
    }

    /// A copy of the pool's live bytes (tests: crash images of a simulated pool; the cache must
    /// be quiescent). `None` in DRAM.
    pub fn pool_live_image(&self) -> Option<Vec<u8>> {
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|pool| pool.live_image())
    }

    /// Closes the pool cleanly (every line's bytes and entry persisted, the pool marked clean;
    /// dirty lines stay dirty, for the next start); nothing to do in DRAM.
    pub fn close(&self) -> Result<(), String> {
        self.stop_populating();
        // Every shard held: no line changes while the pool is persisted.
        let _shards: Vec<_> = (0..self.shards.len()).map(|s| self.lock(s)).collect();
        match self.pool.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            Some(pool) => pool.close_clean(None).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Stops the populating thread, if any, and waits for it.
    fn stop_populating(&self) {
        let populating = self
            .populating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((stop, thread)) = populating {
            stop.store(true, Ordering::Release);
            let _ = thread.join();
        }
    }

    /// Bytes per line.
    pub fn line_bytes(&self) -> usize {
        self.line_bytes
    }

    /// Lines the cache holds at most.
    pub fn capacity_lines(&self) -> usize {
        self.capacity_lines
    }

    /// Lines cached now.
    pub fn cached_lines(&self) -> usize {
        (0..self.shards.len())
            .map(|s| self.lock(s).index.len())
            .sum()
    }

    /// Dirty lines now (their bytes are not in the store yet).
    pub fn dirty_lines(&self) -> usize {
        (0..self.shards.len())
            .map(|s| self.lock(s).dirty.len())
            .sum()
    }

    /// The shard of line `line`.
    pub fn shard_of(&self, line: u64) -> usize {
        // Consecutive lines go to different shards.
        (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % self.shards.len()
    }

    fn lock(&self, shard: usize) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[shard].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The version the next stored slot gets.
    pub fn next_version(&self) -> u64 {
        self.next_version.load(Ordering::Acquire)
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

    /// A write to `line` begins: the line is invalidated and the write counted in flight. The
    /// line must not be dirty (write-back cleans a line before a write that bypasses the
    /// cache, and a switch out of write-back cleans them all).
    pub fn write_begins(&self, line: u64) -> WriteTicket {
        let mut shard = self.lock(self.shard_of(line));
        shard.generation += 1;
        let was_cached = match shard.index.get(&line).copied() {
            Some(slot) => {
                debug_assert_eq!(
                    shard.states[slot],
                    SlotState::Clean,
                    "only clean lines are invalidated"
                );
                if shard.states[slot] == SlotState::Clean {
                    shard.index.remove(&line);
                    free(&mut shard, slot);
                    shard.slots.clear(slot);
                }
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

    /// Puts `data` in `line`'s slot as clean bytes (taking a slot by CLOCK if it has none).
    /// False when no slot can take it (none at all, or none clean or empty).
    fn put(&self, shard: &mut Shard, line: u64, data: &[u8]) -> bool {
        let slot = match shard.index.get(&line) {
            Some(&slot) if shard.states[slot] == SlotState::Clean => slot,
            Some(_) => return false, // Dirty: the cache's bytes are newer than the store's.
            None => match self.take_slot(shard) {
                Some(slot) => {
                    shard.lines[slot] = line;
                    shard.index.insert(line, slot);
                    slot
                }
                None => return false,
            },
        };
        let version = self.next_version.fetch_add(1, Ordering::AcqRel);
        shard.referenced[slot] = true;
        shard.versions[slot] = version;
        shard.states[slot] = SlotState::Clean;
        let entry = Entry {
            line,
            version,
            dirty: false,
        };
        shard.slots.store(slot, entry, data);
        true
    }

    /// A free slot, by CLOCK: an empty one, or a clean line's (evicted). Dirty and superseded
    /// slots are skipped; `None` after two turns of the hand found nothing.
    fn take_slot(&self, shard: &mut Shard) -> Option<usize> {
        let slots = shard.lines.len();
        for _ in 0..2 * slots {
            let at = shard.hand;
            shard.hand = (shard.hand + 1) % slots;
            match shard.states[at] {
                SlotState::Empty => return Some(at),
                SlotState::Clean if shard.referenced[at] => shard.referenced[at] = false,
                SlotState::Clean => {
                    let old = shard.lines[at];
                    shard.index.remove(&old);
                    shard.lines[at] = EMPTY;
                    shard.states[at] = SlotState::Empty;
                    self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                    return Some(at);
                }
                _ => {}
            }
        }
        None
    }

    /// Write-back: writes `part` at byte `at` of line `line` into the cache as the line's new,
    /// dirty version (module docs). A write covering the line partly takes the rest from the
    /// cached line, or from `read_line` (the store) when it is not cached. `durable`: the
    /// slot is persisted before this returns (FUA; nothing to do in DRAM).
    pub fn write_dirty(
        &self,
        line: u64,
        at: usize,
        part: &[u8],
        durable: bool,
        read_line: &mut dyn FnMut(&mut [u8]) -> Result<(), MediumError>,
    ) -> Result<(), DirtyWriteError> {
        let shard_no = self.shard_of(line);
        let mut shard = self.lock(shard_no);
        if shard.lines.is_empty() {
            return Err(DirtyWriteError::NoSlots);
        }
        shard.generation += 1;
        let current = shard.index.get(&line).copied();
        let whole = at == 0 && part.len() == self.line_bytes;
        let mut merged;
        let data = if whole {
            part
        } else {
            merged = vec![0u8; self.line_bytes];
            match current {
                Some(slot) => merged.copy_from_slice(shard.slots.slot(slot, self.line_bytes)),
                None => read_line(&mut merged).map_err(DirtyWriteError::Store)?,
            }
            merged[at..at + part.len()].copy_from_slice(part);
            &merged[..]
        };
        let slot = match current {
            // Clean: overwritten in place (torn, it falls back to the store's bytes).
            Some(slot) if shard.states[slot] == SlotState::Clean => slot,
            // Dirty: a new slot; in DRAM the old one is simply freed.
            _ => self
                .take_slot(&mut shard)
                .ok_or(DirtyWriteError::NoRoom(shard_no))?,
        };
        let version = self.next_version.fetch_add(1, Ordering::AcqRel);
        let entry = Entry {
            line,
            version,
            dirty: true,
        };
        shard.slots.store(slot, entry, data);
        shard.lines[slot] = line;
        shard.versions[slot] = version;
        shard.states[slot] = SlotState::Dirty;
        shard.referenced[slot] = true;
        shard.index.insert(line, slot);
        self.unsettled.store(true, Ordering::Release);
        self.counters.dirty_writes.fetch_add(1, Ordering::Relaxed);
        if current.is_some() {
            self.counters
                .dirty_write_hits
                .fetch_add(1, Ordering::Relaxed);
        }
        match current {
            Some(old) if old != slot => {
                if self.persistent {
                    shard.states[old] = SlotState::Superseded { by: version };
                    *shard.older.entry(line).or_insert(0) += 1;
                    shard.superseded.push(old);
                } else {
                    free(&mut shard, old);
                }
            }
            _ => {}
        }
        if let std::collections::hash_map::Entry::Vacant(first) = shard.dirty_from.entry(line) {
            first.insert(version);
            shard.dirty.insert((version, line), Instant::now());
        }
        if durable {
            shard
                .slots
                .persist(slot, self.line_bytes)
                .map_err(|e| DirtyWriteError::Store(persist_failed(e)))?;
        }
        Ok(())
    }

    /// Drops every clean line (a detach; dirty lines, which there should be none of then, are
    /// kept): their entries are emptied. Returns the lines dropped.
    pub fn drop_clean_lines(&self) -> usize {
        let mut dropped = 0;
        for s in 0..self.shards.len() {
            let mut guard = self.lock(s);
            let shard = &mut *guard;
            shard.generation += 1; // A fill in flight is given up.
            for slot in 0..shard.lines.len() {
                if shard.states[slot] == SlotState::Clean {
                    shard.index.remove(&shard.lines[slot]);
                    free(shard, slot);
                    shard.slots.clear(slot);
                    dropped += 1;
                }
            }
        }
        dropped
    }

    /// Makes every dirty write stored so far durable and lets go of the versions they
    /// replaced: persists the pool, clears the superseded entries, persists again (module
    /// docs). Nothing to do in DRAM or when no dirty write or clean mark happened since the
    /// last settle.
    pub fn settle(&self) -> Result<(), MediumError> {
        if !self.persistent {
            return Ok(());
        }
        let _one = self.settling.lock().unwrap_or_else(|e| e.into_inner());
        if !self.unsettled.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let bound = self.next_version();
        // Every store numbered below `bound` is complete once each shard's lock was taken.
        for s in 0..self.shards.len() {
            drop(self.lock(s));
        }
        self.persist_pool().inspect_err(|_| {
            self.unsettled.store(true, Ordering::Release);
        })?;
        self.counters.settles.fetch_add(1, Ordering::Relaxed);
        let mut cleared = false;
        for s in 0..self.shards.len() {
            let mut guard = self.lock(s);
            let shard = &mut *guard;
            for &slot in &shard.superseded {
                if matches!(shard.states[slot], SlotState::Superseded { by } if by < bound) {
                    shard.slots.clear(slot);
                    shard.states[slot] = SlotState::Clearing;
                    cleared = true;
                }
            }
        }
        if !cleared {
            return Ok(());
        }
        self.persist_pool()?;
        for s in 0..self.shards.len() {
            let mut guard = self.lock(s);
            let shard = &mut *guard;
            let mut kept = Vec::with_capacity(shard.superseded.len());
            for slot in std::mem::take(&mut shard.superseded) {
                if shard.states[slot] == SlotState::Clearing {
                    let line = shard.lines[slot];
                    if let Some(count) = shard.older.get_mut(&line) {
                        *count -= 1;
                        if *count == 0 {
                            shard.older.remove(&line);
                        }
                    }
                    free(shard, slot);
                } else {
                    kept.push(slot);
                }
            }
            shard.superseded = kept;
        }
        Ok(())
    }

    /// Writes dirty lines back to the store (`store(line, bytes)`), makes the store durable
    /// (`flush_store`), then marks them clean: the lines `scope` picks, except those whose
    /// older versions are not cleared yet (a settle comes first when any are). Returns the
    /// lines cleaned.
    pub fn clean(
        &self,
        scope: &CleanScope,
        store: &StoreWrite<'_>,
        flush_store: &dyn Fn() -> Result<(), MediumError>,
    ) -> Result<usize, MediumError> {
        let _one = self.cleaning.lock().unwrap_or_else(|e| e.into_inner());
        let shards: Vec<usize> = match scope {
            CleanScope::Oldest {
                shard: Some(shard), ..
            } => vec![*shard],
            _ => (0..self.shards.len()).collect(),
        };
        if self.persistent && shards.iter().any(|&s| !self.lock(s).superseded.is_empty()) {
            self.settle()?;
        }
        let max = match scope {
            CleanScope::Oldest { max, .. } => *max,
            _ => usize::MAX,
        };
        let mut picked = self.pick_dirty(scope, &shards, max);
        if picked.is_empty() {
            return Ok(0);
        }
        picked.sort_by_key(|p| p.2);
        for (_, _, line, _, bytes) in &picked {
            store(*line, bytes)?;
        }
        flush_store()?;
        let cleaned = self.mark_cleaned(picked);
        if cleaned > 0 {
            // A clean mark must reach the media before the entry it rewrote is dropped (a
            // trim's or a zeroing's invalidation, made durable by the next FLUSH): else a
            // power cut could find the line dirty with bytes older than the store's.
            self.unsettled.store(true, Ordering::Release);
        }
        self.counters
            .writebacks
            .fetch_add(cleaned as u64, Ordering::Relaxed);
        Ok(cleaned)
    }

    /// The dirty lines `clean` writes back: those `scope` picks in `shards`, at most `max`,
    /// spread over the shards so the least recently written of each go first; as (shard,
    /// slot, line, version, bytes).
    fn pick_dirty(&self, scope: &CleanScope, shards: &[usize], max: usize) -> Vec<Picked> {
        let per_shard = max.div_ceil(shards.len());
        let mut picked = Vec::new();
        for &s in shards {
            let shard = self.lock(s);
            let first_of_shard = picked.len();
            for (&(from, line), &since) in &shard.dirty {
                if picked.len() >= max || picked.len() - first_of_shard >= per_shard {
                    break;
                }
                let wanted = match scope {
                    CleanScope::Oldest { before, .. } => before.is_none_or(|before| since < before),
                    CleanScope::VersionsBelow(bound) => from < *bound,
                    CleanScope::Lines(range) => range.contains(&line),
                };
                if !wanted || shard.older.contains_key(&line) {
                    continue;
                }
                let Some(&slot) = shard.index.get(&line) else {
                    debug_assert!(false, "a dirty line is cached");
                    continue;
                };
                picked.push((
                    s,
                    slot,
                    line,
                    shard.versions[slot],
                    shard.slots.slot(slot, self.line_bytes).to_vec(),
                ));
            }
        }
        picked
    }

    /// After the store has the `picked` lines durably: marks clean those not rewritten since
    /// (a line rewritten since stays dirty from its next version on). Returns how many.
    fn mark_cleaned(&self, picked: Vec<Picked>) -> usize {
        let mut cleaned = 0;
        for (s, slot, line, version, _) in picked {
            let mut guard = self.lock(s);
            let shard = &mut *guard;
            let Some(&from) = shard.dirty_from.get(&line) else {
                continue;
            };
            let newest = shard.index.get(&line) == Some(&slot)
                && shard.versions[slot] == version
                && shard.states[slot] == SlotState::Dirty;
            if newest && !shard.older.contains_key(&line) {
                shard.states[slot] = SlotState::Clean;
                shard.slots.mark_clean(slot);
                shard.dirty.remove(&(from, line));
                shard.dirty_from.remove(&line);
                cleaned += 1;
            } else if from <= version {
                // Rewritten since: the store has every write up to `version`.
                if let Some(since) = shard.dirty.remove(&(from, line)) {
                    shard.dirty.insert((version + 1, line), since);
                    shard.dirty_from.insert(line, version + 1);
                }
            }
        }
        cleaned
    }

    /// Writes every line dirty now back ([`Cache::clean`] until none is left below the version
    /// counter as it was at the call, so writes that come meanwhile do not hold it up).
    pub fn clean_all(
        &self,
        store: &StoreWrite<'_>,
        flush_store: &dyn Fn() -> Result<(), MediumError>,
    ) -> Result<usize, MediumError> {
        let bound = self.next_version();
        let scope = CleanScope::VersionsBelow(bound);
        let mut cleaned = 0;
        loop {
            cleaned += self.clean(&scope, store, flush_store)?;
            let left = (0..self.shards.len()).any(|s| {
                let shard = self.lock(s);
                shard.dirty.range(..(bound, 0)).next().is_some()
            });
            if !left {
                return Ok(cleaned);
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.stop_populating();
    }
}

/// Frees a slot (its entry is left to the caller).
fn free(shard: &mut Shard, slot: usize) {
    shard.lines[slot] = EMPTY;
    shard.states[slot] = SlotState::Empty;
    shard.referenced[slot] = false;
}

/// A dirty line `Cache::clean` writes back: (shard, slot, line, version, bytes).
type Picked = (usize, usize, u64, u64, Vec<u8>);

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

    #[test]
    fn a_line_rewritten_while_it_is_written_back_stays_dirty_and_no_other_line_is_forgotten() {
        let cache = Cache::new(64 * 4 * LINE as u64, LINE, 1);
        let mut no_read = |_: &mut [u8]| -> Result<(), MediumError> { unreachable!() };
        // Line 1 gets version v, line 2 version v + 1.
        cache
            .write_dirty(1, 0, &[1u8; LINE], false, &mut no_read)
            .unwrap();
        cache
            .write_dirty(2, 0, &[2u8; LINE], false, &mut no_read)
            .unwrap();
        let store = Mutex::new(HashMap::new());
        let rewritten = AtomicBool::new(false);
        let write_store = |line: u64, data: &[u8]| {
            store.lock().unwrap().insert(line, data[0]);
            if line == 1 && !rewritten.swap(true, Ordering::AcqRel) {
                // Line 1 is written again while its old bytes go to the store: it must stay
                // dirty, keyed after what the store has (v + 1, line 2's version too).
                let mut no_read = |_: &mut [u8]| -> Result<(), MediumError> { unreachable!() };
                cache
                    .write_dirty(1, 0, &[3u8; LINE], false, &mut no_read)
                    .unwrap();
            }
            Ok(())
        };
        let only_line_1 = CleanScope::Lines(1..2);
        assert_eq!(
            cache.clean(&only_line_1, &write_store, &|| Ok(())).unwrap(),
            0
        );
        assert_eq!(cache.dirty_lines(), 2, "both lines still dirty");
        assert_eq!(cache.clean_all(&write_store, &|| Ok(())).unwrap(), 2);
        assert_eq!(cache.dirty_lines(), 0);
        let store = store.lock().unwrap();
        assert_eq!(
            (store[&1], store[&2]),
            (3, 2),
            "the store has each line's newest bytes"
        );
    }
}
