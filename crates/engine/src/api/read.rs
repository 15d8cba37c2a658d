//! Reads: memory first, then flash (read with no lock held, checked again under it).

use super::*;
use crate::flash::read_ahead::{self, ReadAhead};

/// Most keys one `prefetch` call looks at.
pub const PREFETCH_KEYS_MAX: usize = 32;

/// Looks a read takes for a key whose flash entry keeps moving under it (promoted, rewritten,
/// reclaimed between its read and the recheck) before it answers from memory alone.
const FLASH_READ_RACES_MAX: usize = 3;

/// How a read hands over a large string's value (`Engine::read_as`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pieces {
    /// Joined into one buffer: `ItemRef::value`.
    Joined,
    /// As its parts' values, unjoined.
    Unjoined,
}

impl Engine {
    /// Reads `key`, calling `f` with the item while the shard's read lock is held (copy what
    /// you need; the borrow ends with the call). Returns `None` on a miss. The read counts as
    /// an access: the item becomes fetched and its frequency (merge eviction's test) goes up.
    pub fn get<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        self.read(key, true, f)
    }

    /// Reads `key` like [`Engine::get`] (counting the hit or miss) without counting the read
    /// as an access: the item's fetched state and frequency stay as they were (memcached's
    /// `mg` flag `u`, "don't bump the item", and its `me`).
    pub fn peek<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        self.read(key, false, f)
    }

    /// What a WATCH of `key` compares at EXEC: the item's CAS (new with every write) and
    /// expiry, or its absence, and how many times an entry that may be the key's left the
    /// index. Two observations differ whenever the key was written, deleted, expired, evicted
    /// or flushed between them, even when it was absent both times (created and removed in
    /// between), and rarely otherwise (another key removed whose hash bits share the count).
    /// Not an access: nothing about the item changes.
    pub fn observe(&self, key: &[u8]) -> crate::Observed {
        let (hash, lock) = self.shard_for(key);
        let seen = observe_in(&self.inner, &lock.read(), key, hash);
        seen.unwrap_or_else(|removals| crate::Observed {
            // Only its flash record can tell (read with no lock held: a change meanwhile
            // changes the next observation, or the removal count).
            item: self.peek(key, |item| (item.cas, item.expires_at_ms)),
            expired: None,
            removals,
        })
    }

    /// Reads `key` like [`Engine::get`] (`bump`: whether it counts as an access, see
    /// [`Engine::peek`]), calling `f` with the item and its value in pieces: a large string's
    /// parts unjoined, in order (the item's `value` then empty), checked whole against the
    /// string's length and checksum before `f` sees any; any other item's value as one piece.
    /// What a reply that copies the value out takes, sparing the string's joined copy.
    pub fn get_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        self.read_as(key, bump, Pieces::Unjoined, f)
    }

    #[inline]
    pub(super) fn read<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Option<R> {
        self.read_as(key, bump, Pieces::Joined, |item, _| f(item))
    }

    /// [`Engine::read`] and [`Engine::get_pieces`]: `pieces` says how a large string is handed
    /// over.
    #[inline]
    fn read_as<R, F: FnOnce(ItemRef<'_>, &[&[u8]]) -> R>(
        &self,
        key: &[u8],
        bump: bool,
        pieces: Pieces,
        f: F,
    ) -> Option<R> {
        self.maybe_flush();
        let mut f = f;
        // A flash read that lost a race with a move of its key (most often another read that
        // promoted it to memory) looks again rather than miss: the key is still there. Still
        // moving after as many looks, the last look is memory's alone (a miss at worst, never a
        // wrong value).
        for look in 0..=FLASH_READ_RACES_MAX {
            match self.read_once(key, bump, pieces, look < FLASH_READ_RACES_MAX, f) {
                Ok(found) => return found,
                Err(back) => f = back,
            }
        }
        unreachable!("a look that skips flash cannot race")
    }

    /// One look for `key` (see [`Engine::read`]), on flash too if `on_flash`; `Err(f)` when a
    /// flash read raced with a move of the key and the caller should look again.
    #[inline]
    fn read_once<R, F: FnOnce(ItemRef<'_>, &[&[u8]]) -> R>(
        &self,
        key: &[u8],
        bump: bool,
        pieces: Pieces,
        on_flash: bool,
        f: F,
    ) -> Result<Option<R>, F> {
        let (hash, lock) = self.shard_for(key);
        let shard = lock.read();
        let found = match shard.lookup_or_flash(&self.inner, key, hash) {
            Lookup::Memory(found) => Some(found).filter(|found| {
                found
                    .view
                    .meta
                    .expires_at_ms
                    .is_none_or(|at| at > self.inner.now_ms())
            }),
            // A memory record of the key, even expired, is newer than any flash copy: only a
            // key memory does not hold at all is looked for on flash.
            Lookup::Flash(candidates) if on_flash && !candidates.is_empty() => {
                drop(shard);
                return self.read_flash(key, hash, lock, &candidates, bump, f);
            }
            Lookup::Flash(_) => None,
        };
        let Some(found) = found else {
            shard.counters.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        // `found.entry` was loaded before this bump, so `item` reports the item as it was
        // before this access, like memcached's delayed bump.
        if bump {
            shard.index.bump_freq(found.slot);
        }
        shard.counters.hits.fetch_add(1, Ordering::Relaxed);
        let key = (key, hash);
        Ok(match pieces {
            Pieces::Unjoined => large::with_pieces(&self.inner, &shard, key, &found, f),
            Pieces::Joined => large::with_item(&self.inner, &shard, key, &found, |item| {
                f(item, &[item.value])
            }),
        })
    }

    /// The read of a key found only among the flash tier's entries: each candidate's record
    /// is read with no lock held, then, under the read lock, the entry must still point there;
    /// if it no longer does (a write, delete, promotion or reclaim came first), `Err(f)`: the
    /// caller looks again, in memory first. A hit that makes the item read often enough moves
    /// it back to memory.
    #[cold]
    fn read_flash<R, F: FnOnce(ItemRef<'_>, &[&[u8]]) -> R>(
        &self,
        key: &[u8],
        hash: u64,
        lock: &ShardLock,
        candidates: &FlashCandidates,
        bump: bool,
        f: F,
    ) -> Result<Option<R>, F> {
        let inner: &Inner = &self.inner;
        let flash = inner
            .flash
            .as_ref()
            .expect("candidates come from a flash tier");
        let h24 = crate::index::hash24(hash);
        let now_ms = inner.now_ms();
        let mut f = Some(f);
        for &location in candidates.as_slice() {
            let read = tiering::read_record(inner, key, location, now_ms, |item| {
                let shard = lock.read();
                let (slot, entry) = shard.index.find(h24, |l| l == location)?;
                if item.needs_memory() {
                    // A large hash's chunks are read in memory: promoted, then looked for
                    // again (a failed promotion looks again too, at most as many times).
                    drop(shard);
                    let _ = lock.write().promote(inner, key, hash, location, &item);
                    return None;
                }
                if bump {
                    shard.index.bump_freq(slot);
                }
                shard.counters.hits.fetch_add(1, Ordering::Relaxed);
                flash.counters.hits.fetch_add(1, Ordering::Relaxed);
                let f = f.take().expect("called once");
                // One piece: a flash record's value, or a large string's bundle's parts, joined.
                let found = flash_item(key, &item, entry);
                let result = f(found, &[found.value]);
                drop(shard);
                if bump && entry.freq() + 1 >= tiering::PROMOTE_AFTER_READS {
                    // Best effort: a failed promotion leaves the item on flash.
                    let _ = lock.write().promote(inner, key, hash, location, &item);
                }
                Some(result)
            });
            match read {
                tiering::FlashRead::Item(Some(result)) => return Ok(Some(result)),
                tiering::FlashRead::Item(None) => {
                    return Err(f.take().expect("not called: the entry had moved"));
                }
                tiering::FlashRead::Expired => break,
                tiering::FlashRead::NotIt => {}
                tiering::FlashRead::Damaged => lock.read().queue_flash_damage(h24, location),
            }
        }
        flash.counters.misses.fetch_add(1, Ordering::Relaxed);
        lock.read().counters.misses.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    }

    /// Whether a read of `key` now would read the flash medium: memory does not hold it, and a
    /// flash entry with its hash bits has no record read ahead lent to this thread's reads
    /// ([`Engine::with_read_ahead`]). A server asks this before running a request, and has the
    /// key read ahead while the request waits instead of blocking its worker. Always false
    /// without a flash tier.
    pub fn flash_read_needed(&self, key: &[u8]) -> bool {
        self.flash_reads_needed(key, &mut Vec::new())
    }

    /// [`Engine::flash_read_needed`], adding the flash locations (in the medium's units) a
    /// read of `key` would read and that are not read ahead to `locations`, in one walk of
    /// the key's buckets: what [`Engine::plan_flash_reads_at`] and
    /// [`Engine::read_flash_ahead_at`] take, so a server plans a waiting request's reads
    /// without looking its keys up again.
    pub fn flash_reads_needed(&self, key: &[u8], locations: &mut Vec<u64>) -> bool {
        if self.inner.flash.is_none() {
            return false;
        }
        let (hash, lock) = self.shard_for(key);
        let Lookup::Flash(candidates) = lock.read().lookup_or_flash(&self.inner, key, hash) else {
            return false;
        };
        let before = locations.len();
        locations.extend(
            candidates
                .as_slice()
                .iter()
                .map(|&location| crate::index::flash_units(location))
                .filter(|&units| !read_ahead::is_lent(units)),
        );
        locations.len() > before
    }

    /// [`Engine::read_flash_ahead`] of locations [`Engine::flash_reads_needed`] gave.
    pub fn read_flash_ahead_at(&self, locations: &[u64], into: &mut ReadAhead) {
        if let Some(flash) = self.inner.flash.as_ref() {
            flash.stage_many(locations, into);
        }
    }

    /// [`Engine::plan_flash_reads`] of locations [`Engine::flash_reads_needed`] gave.
    pub fn plan_flash_reads_at(&self, locations: &[u64]) -> Vec<FlashRead> {
        match self.inner.flash.as_ref() {
            Some(flash) => flash.plan_reads(locations),
            None => Vec::new(),
        }
    }

    /// Reads ahead, from the flash medium, the records reads of `keys` would read there, all in
    /// flight at once, into `into`, for the reads [`Engine::with_read_ahead`] lends them to
    /// (blocking I/O: for an I/O thread, not a worker). Keys memory holds are skipped; a no-op
    /// without a flash tier.
    pub fn read_flash_ahead<K: AsRef<[u8]>>(&self, keys: &[K], into: &mut ReadAhead) {
        if let Some(flash) = self.inner.flash.as_ref() {
            flash.stage_many(&self.flash_locations(keys), into);
        }
    }

    /// The reads that would read ahead what reads of `keys` need from flash, for a server that
    /// does them itself, without blocking (its own io_uring on [`Engine::flash_read_file`]),
    /// then hands each to [`Engine::finish_flash_read`]. Empty without a flash tier, or when no
    /// key needs the medium.
    pub fn plan_flash_reads<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<FlashRead> {
        match self.inner.flash.as_ref() {
            Some(flash) => flash.plan_reads(&self.flash_locations(keys)),
            None => Vec::new(),
        }
    }

    /// Takes the bytes a planned read got (`None`: it failed) and adds the record to `into`,
    /// the waiting request's own; [`ReadOutcome::ReadMore`]: read again where `read` now says.
    pub fn finish_flash_read(
        &self,
        read: &mut FlashRead,
        bytes: Option<&[u8]>,
        into: &mut ReadAhead,
    ) -> ReadOutcome {
        match self.inner.flash.as_ref() {
            Some(flash) => flash.finish_read(read, bytes, into),
            None => ReadOutcome::Miss,
        }
    }

    /// Runs `f` with `records` lent to the flash reads this thread makes meanwhile: a read of
    /// a location lent takes its record (no I/O, no lock) if its region is still the
    /// generation it was read from, and [`Engine::flash_reads_needed`] leaves lent locations
    /// out. What no read took is back in `records` afterwards. A server wraps the run of a
    /// connection's requests in it once their reads ahead are back (see `read_ahead`).
    pub fn with_read_ahead<R>(&self, records: &mut ReadAhead, f: impl FnOnce() -> R) -> R {
        read_ahead::lend(records, f)
    }

    /// Drops `records`, counting them as read ahead and never taken (`staged_dropped`).
    pub fn discard_read_ahead(&self, records: &mut ReadAhead) {
        let dropped = records.clear() as u64;
        if let (Some(flash), true) = (self.inner.flash.as_ref(), dropped > 0) {
            flash
                .counters
                .staged_dropped
                .fetch_add(dropped, Ordering::Relaxed);
        }
    }

    /// A duplicate of the flash medium's descriptor for reads a server puts in flight itself
    /// ([`strata_pool::ReadRing`]); `None` without a flash tier, where the medium is not read
    /// through io_uring, or where tests slow its reads (then [`Engine::read_flash_ahead`] does them).
    pub fn flash_read_file(&self) -> Option<std::os::fd::OwnedFd> {
        self.inner.flash.as_ref()?.read_file()
    }

    /// Where the flash records of `keys` that memory does not hold may be (every entry sharing
    /// a key's hash bits).
    fn flash_locations<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<u64> {
        let mut locations = Vec::with_capacity(keys.len());
        for key in keys {
            let key = key.as_ref();
            let (hash, lock) = self.shard_for(key);
            let Lookup::Flash(candidates) = lock.read().lookup_or_flash(&self.inner, key, hash)
            else {
                continue;
            };
            locations.extend(
                candidates
                    .as_slice()
                    .iter()
                    .map(|&location| crate::index::flash_units(location)),
            );
        }
        locations
    }

    /// Whether the engine has a flash tier.
    pub fn has_flash(&self) -> bool {
        self.inner.flash.is_some()
    }

    /// Items the flash tier holds (its index entries; 0 without a flash tier).
    pub fn flash_items(&self) -> u64 {
        self.inner
            .shards
            .iter()
            .map(|shard| shard.0.read().flash_items())
            .sum()
    }

    /// Starts loading what reads of `keys` will touch: both index buckets of each key, then the
    /// record its matching slot points at. A hint only: nothing is counted or waited for. A
    /// server calls it for a parsed batch before executing it, so the batch's cache misses
    /// overlap instead of queueing one after another. Uses at most [`PREFETCH_KEYS_MAX`] keys.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let keys = &keys[..keys.len().min(PREFETCH_KEYS_MAX)];
        let mut hashes = [0u64; PREFETCH_KEYS_MAX];
        for (key, hash) in keys.iter().zip(&mut hashes) {
            *hash = self.inner.hash(key);
            let shard = self.inner.shards[self.inner.shard_of(*hash)].0.read();
            shard.index.prefetch(crate::index::hash24(*hash));
        }
        for &hash in &hashes[..keys.len()] {
            let shard = self.inner.shards[self.inner.shard_of(hash)].0.read();
            shard.prefetch_record(&self.inner, hash);
        }
    }

    /// Reads many keys, calling `f(i, item)` for each in order (`None` on a miss).
    pub fn get_many<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        mut f: impl FnMut(usize, Option<ItemRef<'_>>),
    ) {
        for (i, key) in keys.into_iter().enumerate() {
            let mut called = false;
            self.get(key, |item| {
                called = true;
                f(i, Some(item));
            });
            if !called {
                f(i, None);
            }
        }
    }

    /// What `key`'s item costs in memory, in bytes: its record (key, value and the fields it
    /// carries; the explicit CAS a record the cleaner moved carries, 8 bytes, is left out) plus
    /// its index slot's share, found in one look that counts no hit or miss; for an item on
    /// flash, the index slot alone (its record is on the medium, read, and counted, to know the
    /// key is there). `None` when absent.
    pub fn memory_usage(&self, key: &[u8]) -> Option<u64> {
        let (hash, lock) = self.shard_for(key);
        {
            // One look under the read lock for an item in memory (nearly every one).
            let shard = lock.read();
            if let Some(found) = shard.lookup_unexpired(&self.inner, key, hash) {
                return Some(family_memory(&self.inner, &shard, key, hash, &found));
            }
            if shard.flash_candidates(&self.inner, hash).is_empty() {
                return None;
            }
        }
        // On flash, perhaps (only its record can tell): its index slot is what memory holds.
        self.peek(key, |item| item.memory_bytes())
    }

    /// Whether `key` is present (and unexpired), without counting a hit or a miss.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.maybe_flush();
        let (hash, lock) = self.shard_for(key);
        let shard = lock.read();
        if shard.lookup_unexpired(&self.inner, key, hash).is_some() {
            return true;
        }
        // An expired memory record shadows any older flash copy.
        if shard.lookup(&self.inner, key, hash).is_some() {
            return false;
        }
        let candidates = shard.flash_candidates(&self.inner, hash);
        drop(shard);
        let now_ms = self.inner.now_ms();
        candidates.as_slice().iter().any(|&location| {
            matches!(
                tiering::read_record(&self.inner, key, location, now_ms, |_| ()),
                tiering::FlashRead::Item(())
            )
        })
    }
}

/// What an item in memory costs ([`ItemRef::memory_bytes`]).
pub(super) fn memory_of(found: &Found<'_>) -> u64 {
    item(found).memory_bytes()
}

/// What the item `found` (of `key`, hash `hash`) costs in memory with the parts it owns
/// (an item of several records: MEMORY USAGE counts them all).
pub(super) fn family_memory(
    inner: &Inner,
    shard: &Shard,
    key: &[u8],
    hash: u64,
    found: &Found<'_>,
) -> u64 {
    let mut bytes = memory_of(found);
    let mut name = Vec::new();
    for part in 0..found.view.meta.parts {
        let part_hash = inner.part_name(key, hash, part, &mut name);
        if let Some(part) = shard.lookup(inner, &name, part_hash) {
            bytes += memory_of(&part);
        }
    }
    bytes
}

/// What a WATCH of `key` sees in its shard, held (see [`Engine::observe`]): the count of
/// removals and the look in one hold. An expired record still in memory is seen too (apart
/// from a live item): a key created with a short TTL after WATCH and expired by EXEC changed,
/// though absent both times. `Err(removals)` when memory does not hold the key and a flash
/// record may: the caller reads it.
pub(super) fn observe_in(
    inner: &Inner,
    shard: &Shard,
    key: &[u8],
    hash: u64,
) -> Result<crate::Observed, u32> {
    let removals = shard.removals_of(crate::index::hash24(hash));
    let (item, expired) = match shard.lookup_or_flash(inner, key, hash) {
        Lookup::Memory(found) => {
            let expires_at_ms = found.view.meta.expires_at_ms;
            if expires_at_ms.is_some_and(|at| at <= inner.now_ms()) {
                (None, Some(found.cas))
            } else {
                (Some((found.cas, expires_at_ms)), None)
            }
        }
        Lookup::Flash(candidates) if !candidates.is_empty() => return Err(removals),
        Lookup::Flash(_) => (None, None),
    };
    Ok(crate::Observed {
        item,
        expired,
        removals,
    })
}
