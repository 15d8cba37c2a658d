//! The whole keyspace: flush, expiry, SCAN, random keys, counts, commit, scrub.

use super::*;

/// Index buckets one scan step visits under a shard's read lock.
pub const SCAN_BUCKETS_PER_STEP: usize = 64;
/// Most index buckets one `scan` call visits, however sparse the cache.
pub const SCAN_BUCKETS_PER_CALL_MAX: usize = 64 * 1024;
/// What [`Engine::sample_expiry`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpirySample {
    /// Items in memory (all of them, sampled or not).
    pub memory_items: u64,
    /// Memory entries read, expired ones included.
    pub walked: u64,
    /// Unexpired items read.
    pub sampled: u64,
    /// Of those, the ones with an expiry.
    pub with_expiry: u64,
    /// Their milliseconds left, added up.
    pub ttl_ms_sum: u64,
    /// Every memory item was read: `with_expiry` is a count, not a sample.
    pub exact: bool,
}

/// Where an [`Engine::scan_step`] call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanStep {
    /// The cursor to go on from (0: the iteration is done).
    pub next: u64,
    /// The call stopped because it had read [`SCAN_FLASH_READS_PER_CALL_MAX`] flash records.
    pub flash_bound: bool,
}

/// Index buckets one scan step visits when the engine has a flash tier: up to 64 entries,
/// whose flash records the step reads together.
pub const SCAN_BUCKETS_PER_FLASH_STEP: usize = 8;
/// A `scan` call returns once it has read this many keys' records from flash (after the step
/// that reached it): it holds its caller for a disk round trip or two, not hundreds.
pub const SCAN_FLASH_READS_PER_CALL_MAX: usize = 64;

impl Engine {
    /// Removes every item now (`delay_ms == 0`) or at `now + delay_ms`.
    pub fn flush_all(&self, delay_ms: u64) -> Result<(), WriteError> {
        if delay_ms == 0 {
            self.inner.flush_at_ms.store(0, Ordering::Release);
            return self.flush_now();
        }
        let at = self.inner.now_ms() + delay_ms;
        self.inner.flush_at_ms.store(at, Ordering::Release);
        Ok(())
    }

    pub(super) fn flush_now(&self) -> Result<(), WriteError> {
        for shard in self.inner.shards.iter() {
            let freed = shard.0.write().flush(&self.inner)?;
            self.inner.release(freed);
        }
        Ok(())
    }

    /// Frees segments whose items have all expired, and runs a due delayed flush. Call it
    /// periodically (the server does, every 100 ms). Returns the segments freed.
    pub fn expire(&self) -> Result<usize, WriteError> {
        self.maybe_flush();
        let now_ms = self.inner.now_ms();
        let mut count = 0;
        for shard in self.inner.shards.iter() {
            let freed = shard.0.write().expire(&self.inner, now_ms)?;
            count += freed.len();
            self.inner.release(freed);
        }
        Ok(count)
    }

    /// Items indexed (including expired ones not yet reclaimed; an item of several records
    /// counts once).
    pub fn len(&self) -> usize {
        (self.inner.shards.iter())
            .map(|s| {
                let shard = s.0.read();
                let parts = usize::try_from(shard.part_items()).unwrap_or(usize::MAX);
                shard.index.len().saturating_sub(parts)
            })
            .sum()
    }

    /// True when no item is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Persists every write made so far that is not yet persistent: the group commit of
    /// `Durability::Sync` with `group_commit` (call it before acknowledging a batch), and the
    /// periodic flush of `Durability::Interval` (call it every interval). A no-op otherwise.
    /// An error means some writes may not be durable: do not acknowledge them; the engine then
    /// refuses writes until it is reopened.
    pub fn commit(&self) -> Result<(), WriteError> {
        self.inner.commit()
    }

    /// The failed persist that latched writes off, or `None` while writes are accepted. Once
    /// set it stays until the engine is reopened (every write is refused with it), so a health
    /// check can report that the store no longer serves writes.
    pub fn write_failure(&self) -> Option<strata_pool::PersistError> {
        // Acquire: pairs with the Release store in `Inner::persisted`, after `failure` is set.
        if !self.inner.failed.load(Ordering::Acquire) {
            return None;
        }
        self.inner.failure.lock().clone()
    }

    /// Caps the memory tier at `bytes` while running (Redis's `CONFIG SET maxmemory`; `None`:
    /// the whole pool again), rounded down to whole segments: free segments past the cap give
    /// their memory back at once, and the writes that follow evict (or, under
    /// `EvictionPolicy::None`, are refused) until the segments in use fit. The pool itself
    /// does not grow: a cap above it, or below what the shards need to take writes (two
    /// segments each, and the cleaner's two), is refused with the bounds. Not kept across a
    /// restart. Returns the cap in bytes.
    pub fn set_memory_limit(&self, bytes: Option<u64>) -> Result<u64, String> {
        let segment_bytes = self.inner.segment_size_bytes as u64;
        let mut free = self.inner.free.lock();
        let (min, total) = self.memory_limit_segments(&free);
        let segments = bytes.map_or(total, |bytes| bytes / segment_bytes);
        if segments > total || segments < min {
            return Err(format!(
                "strata's memory limit must be between {} and {} bytes (the pool's size; a \
                 larger one needs a restart with a larger --memory)",
                min * segment_bytes,
                total * segment_bytes
            ));
        }
        free.cap = if segments == total {
            usize::MAX
        } else {
            usize::try_from(segments).unwrap_or(usize::MAX)
        };
        free.set_limit(self.inner.segment_size_bytes);
        Ok(segments * segment_bytes)
    }

    /// The fewest and the most segments the memory tier may be capped at: two per shard and
    /// the cleaner's two (or the pool, if smaller), and the pool.
    fn memory_limit_segments(&self, free: &crate::FreePool) -> (u64, u64) {
        let total = (free.list.len() + free.in_use + free.retired.len()) as u64;
        ((self.inner.shards.len() as u64 * 2 + 2).min(total), total)
    }

    /// The caps [`Engine::set_memory_limit`] takes, in bytes: at least the first (two segments
    /// per shard and the cleaner's two), at most the second (the pool).
    pub fn memory_limit_bounds(&self) -> (u64, u64) {
        let segment_bytes = self.inner.segment_size_bytes as u64;
        let (min, total) = self.memory_limit_segments(&self.inner.free.lock());
        (min * segment_bytes, total * segment_bytes)
    }

    /// The cap an operator's `bytes` sets, as Redis's `maxmemory` and memcached's
    /// `cache_memlimit` mean them: 0, or the pool's size or more, is none (the whole pool);
    /// anything else is rounded down to whole segments, and under the least cap
    /// ([`Engine::memory_limit_bounds`]) is refused with it. Sets nothing: hand the answer to
    /// [`Engine::set_memory_limit`].
    pub fn memory_cap_for(&self, bytes: u64) -> Result<Option<u64>, u64> {
        let (min, max) = self.memory_limit_bounds();
        let segment_bytes = self.inner.segment_size_bytes as u64;
        match bytes {
            0 => Ok(None),
            bytes if bytes >= max => Ok(None),
            bytes if bytes < min => Err(min),
            bytes => Ok(Some(bytes / segment_bytes * segment_bytes)),
        }
    }

    /// Changes the eviction policy while running (Redis's `CONFIG SET maxmemory-policy`): the
    /// next segment a write needs is found by it. Not kept across a restart.
    pub fn set_eviction_policy(&self, policy: crate::EvictionPolicy) {
        self.inner
            .policy
            .store(crate::policy_code(policy), Ordering::Relaxed);
    }

    /// The eviction policy now.
    pub fn eviction_policy(&self) -> crate::EvictionPolicy {
        self.inner.policy()
    }

    /// The shard `key` lives in (0..shard count): keys of different shards never wait for
    /// each other's locks, which tests and diagnostics choose keys by.
    pub fn shard_index(&self, key: &[u8]) -> usize {
        self.inner.shard_of(self.inner.hash(key))
    }

    /// The engine clock's current Unix time in milliseconds (expiry is measured against it).
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    /// Iterates keys in cursor order, Redis SCAN style: returns at least `count` keys when that
    /// many remain (or after visiting [`SCAN_BUCKETS_PER_CALL_MAX`] index buckets, or reading
    /// [`SCAN_FLASH_READS_PER_CALL_MAX`] keys from flash), starting at `cursor` (0 to begin),
    /// and returns the next cursor (0 when done). Every key present for the whole iteration is
    /// returned at least once.
    ///
    /// A key on flash is known only by reading its record, and the caller (a server worker)
    /// waits for those reads: with a flash tier a step visits [`SCAN_BUCKETS_PER_FLASH_STEP`]
    /// buckets, its flash records are read all in flight at once, and a call stops once it
    /// has read [`SCAN_FLASH_READS_PER_CALL_MAX`] of them, so one call holds its worker for
    /// about one or two disk round trips, not one per key.
    pub fn scan(&self, cursor: u64, count: usize, visit: &mut dyn FnMut(&[u8])) -> u64 {
        self.scan_step(cursor, count, visit).next
    }

    /// [`Engine::scan`], saying also whether the call stopped for its flash reads (a caller
    /// that loops until it has `count` keys, as SCAN does, stops there too: its worker has
    /// waited on the disk long enough for one call, and SCAN may return fewer keys than asked).
    pub fn scan_step(&self, cursor: u64, count: usize, visit: &mut dyn FnMut(&[u8])) -> ScanStep {
        let shards = self.inner.shards.len() as u64;
        let mut shard_index = cursor >> 32;
        let mut position = (cursor & 0xFFFF_FFFF) as u32;
        let now_ms = self.inner.now_ms();
        let returned = std::cell::Cell::new(0usize);
        let mut buckets_visited = 0usize;
        let mut counting = |key: &[u8]| {
            returned.set(returned.get() + 1);
            visit(key);
        };
        let mut flash = Vec::new();
        let mut flash_read = 0usize;
        let step = if self.inner.flash.is_some() {
            SCAN_BUCKETS_PER_FLASH_STEP
        } else {
            SCAN_BUCKETS_PER_STEP
        };
        while shard_index < shards {
            let shard = self.inner.shards[shard_index as usize].0.read();
            let next = shard.scan(
                &self.inner,
                position,
                step,
                now_ms,
                &mut counting,
                &mut flash,
            );
            drop(shard);
            flash_read +=
                self.visit_flash_keys(shard_index as usize, &mut flash, now_ms, &mut counting);
            buckets_visited += step;
            match next {
                Some(next) => position = next,
                None => {
                    shard_index += 1;
                    position = 0;
                }
            }
            if shard_index >= shards {
                break;
            }
            let flash_bound = flash_read >= SCAN_FLASH_READS_PER_CALL_MAX;
            if returned.get() >= count
                || buckets_visited >= SCAN_BUCKETS_PER_CALL_MAX
                || flash_bound
            {
                return ScanStep {
                    next: (shard_index << 32) | u64::from(position),
                    flash_bound,
                };
            }
        }
        ScanStep {
            next: 0,
            flash_bound: false,
        }
    }

    /// The keys of a scan step's flash entries (`flash`, of shard `shard_index`, emptied),
    /// read with no lock held (a key deleted meanwhile may still be returned, as SCAN allows
    /// for keys not present for the whole iteration), all in flight at once, then each taken
    /// from what was read. Returns how many records were read.
    fn visit_flash_keys(
        &self,
        shard_index: usize,
        flash: &mut Vec<u64>,
        now_ms: u64,
        visit: &mut dyn FnMut(&[u8]),
    ) -> usize {
        let Some(tier) = self.inner.flash.as_ref() else {
            return 0;
        };
        let read = flash.len();
        let mut records = crate::flash::read_ahead::ReadAhead::default();
        if read > 0 {
            let on_medium: Vec<u64> = flash
                .iter()
                .map(|&location| crate::index::flash_units(location))
                .collect();
            tier.stage_many(&on_medium, &mut records);
        }
        self.with_read_ahead(&mut records, || {
            for location in flash.drain(..) {
                let Some(key) =
                    tiering::read_key(&self.inner, location, Some(now_ms), ReadFor::Request)
                else {
                    continue;
                };
                // An older copy of a key memory holds (see `shard::flash`) is not a second key.
                let hash = self.inner.hash(&key);
                let shard = self.inner.shards[shard_index].0.read();
                if shard.lookup(&self.inner, &key, hash).is_none() {
                    visit(&key);
                }
            }
        });
        self.discard_read_ahead(&mut records);
        read
    }

    /// How many items carry an expiry, and their average time left, from the items in memory:
    /// every one of them when they number at most `items_max`, else about `items_max` of them
    /// in runs of index buckets from a position `seed` picks in each shard (INFO keyspace's
    /// `expires` and `avg_ttl`). Items on flash are not read (their expiry is in their
    /// record, on the medium). Takes each shard's read lock for one run.
    pub fn sample_expiry(&self, items_max: usize, seed: u64) -> ExpirySample {
        let now_ms = self.inner.now_ms();
        let shards = self.inner.shards.len().max(1);
        let per_shard = items_max.div_ceil(shards).max(1);
        let mut sample = ExpirySample::default();
        for (index, lock) in self.inner.shards.iter().enumerate() {
            let shard = lock.0.read();
            let memory_items = (shard.index.len() as u64)
                .saturating_sub(shard.flash_items())
                .saturating_sub(shard.part_items());
            sample.memory_items += memory_items;
            let whole = memory_items as usize <= per_shard;
            let start = if whole {
                0
            } else {
                (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32 ^ (index as u32) << 20
            };
            let mut cursor = Some(start);
            let mut wrapped = whole;
            let mut seen = 0usize;
            while seen < per_shard {
                let Some(at) = cursor.or_else(|| (!wrapped).then_some(0)) else {
                    break;
                };
                wrapped |= cursor.is_none();
                cursor = shard.index.scan_slots(at, 64, |_, entry| {
                    if crate::index::is_flash(entry.location) {
                        return;
                    }
                    let Some((view, _)) = shard.record_at(&self.inner, entry.location) else {
                        return;
                    };
                    if view.meta.kind == crate::record::Kind::Part {
                        return; // Not an item.
                    }
                    match view.meta.expires_at_ms {
                        Some(at) if at <= now_ms => {}
                        Some(at) => {
                            sample.sampled += 1;
                            sample.with_expiry += 1;
                            sample.ttl_ms_sum += at - now_ms;
                        }
                        None => sample.sampled += 1,
                    }
                    seen += 1;
                });
            }
            sample.walked += seen as u64;
        }
        sample.exact = sample.walked >= sample.memory_items;
        sample
    }

    /// A key chosen at random (roughly uniformly among shards and buckets, memory and flash
    /// alike), or `None` when the engine is empty. The first stretch of 64 buckets from a
    /// random position that holds any key is chosen from: one of its keys, each as likely; a
    /// key on flash costs one read of its record, with no lock held (a damaged or dead record
    /// gives way to a memory key of the stretch, or the next shard).
    pub fn random_key(&self, seed: u64) -> Option<Vec<u8>> {
        let shards = self.inner.shards.len() as u64;
        let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let first_shard = (mixed >> 40) % shards;
        let start = (mixed & 0x0FFF_FFFF) as u32;
        let now_ms = self.inner.now_ms();
        for step in 0..shards {
            let (memory_key, flash_location) =
                self.random_in_shard((first_shard + step) % shards, start, mixed, now_ms);
            if let Some(location) = flash_location {
                if let Some(key) =
                    tiering::read_key(&self.inner, location, Some(now_ms), ReadFor::Request)
                {
                    return Some(key);
                }
            }
            if memory_key.is_some() {
                return memory_key;
            }
        }
        None
    }

    /// [`Engine::random_key`] in one shard: from the first stretch holding any key, the key
    /// chosen if it is in memory, or its flash location (with a memory key of the stretch, if
    /// any, to fall back on). Of the stretch's memory keys only one is copied: each is kept
    /// with probability 1/n as the n-th is seen (a reservoir of one).
    fn random_in_shard(
        &self,
        shard_index: u64,
        start: u32,
        mixed: u64,
        now_ms: u64,
    ) -> (Option<Vec<u8>>, Option<u64>) {
        let shard = self.inner.shards[shard_index as usize].0.read();
        // From a random position to the end of the shard, then from its start around.
        for (from, stop_at) in [(start, None), (0, Some(start))] {
            let mut cursor = Some(from);
            while let Some(position) = cursor {
                if stop_at.is_some_and(|stop| position >= stop) {
                    break;
                }
                let (mut memory_keys, mut memory_key, mut flash) = (0u64, None, Vec::new());
                let mut draw = mixed | 1;
                cursor = shard.scan(
                    &self.inner,
                    position,
                    64,
                    now_ms,
                    &mut |key| {
                        memory_keys += 1;
                        // xorshift64: a fresh draw per key.
                        draw ^= draw << 13;
                        draw ^= draw >> 7;
                        draw ^= draw << 17;
                        if draw.is_multiple_of(memory_keys) {
                            memory_key = Some(key.to_vec());
                        }
                    },
                    &mut flash,
                );
                let candidates = memory_keys + flash.len() as u64;
                if candidates == 0 {
                    continue;
                }
                let pick = (mixed >> 28) % candidates;
                if pick < memory_keys {
                    return (memory_key, None);
                }
                return (memory_key, Some(flash[(pick - memory_keys) as usize]));
            }
        }
        (None, None)
    }
}

impl Engine {
    /// Runs one step of the scrub (see the `scrub` module): walks one segment adopted at open
    /// without being read, or checks one run of index entries. Until the scrub is done, reads of
    /// records it has not checked validate them first. Returns true once there is nothing left
    /// to check (at once when the open read everything, or for a new pool). The server runs it
    /// in a background thread; an embedder may call it whenever it likes, or never (reads then
    /// keep validating unchecked records).
    pub fn scrub_step(&self) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return true; // A closed pool is not written again.
        }
        let mut state = self.inner.scrub.lock();
        crate::scrub::step(&self.inner, &mut state)
    }

    /// Whether the scrub has checked everything the open did not read.
    pub fn scrub_done(&self) -> bool {
        self.inner.scrub.lock().done
    }

    /// Drops from the index the items whose records reads found damaged (they were served as
    /// absent already). Returns how many. The server calls it every maintenance tick.
    pub fn repair(&self) -> u64 {
        crate::scrub::repair(&self.inner)
    }
}
