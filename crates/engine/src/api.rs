//! The engine's public operations.

use std::sync::atomic::Ordering;

use crate::flash::{tiering, FlashRead, ReadFor, ReadOutcome};
use crate::index::SlotRef;
use crate::record::{self, RecordMeta, KEY_LEN_MAX};
use crate::shard::{FlashCandidates, Found, Shard, ShardLock, ShardWrite};
use crate::{
    Arith, Change, Condition, Engine, Expiry, Inner, ItemRef, StoreOptions, StoreOutcome,
    WriteError,
};

fn item<'a>(found: &Found<'a>) -> ItemRef<'a> {
    ItemRef {
        key: found.view.key,
        value: found.view.value,
        client_flags: found.view.meta.client_flags,
        cas: found.cas,
        expires_at_ms: found.view.meta.expires_at_ms,
        fetched: found.entry.fetched(),
    }
}

/// What `apply` needs of the item a `modify` closure saw.
#[derive(Clone, Copy)]
struct Current {
    expires_at_ms: Option<u64>,
    cas: u64,
    slot: SlotRef,
}

fn check_key(key: &[u8]) -> Result<(), WriteError> {
    if key.is_empty() {
        return Err(WriteError::KeyEmpty);
    }
    if key.len() > KEY_LEN_MAX {
        return Err(WriteError::KeyTooLong {
            len: key.len(),
            max: KEY_LEN_MAX,
        });
    }
    Ok(())
}

/// Looks a read takes for a key whose flash entry keeps moving under it (promoted, rewritten,
/// reclaimed between its read and the recheck) before it answers from memory alone.
const FLASH_READ_RACES_MAX: usize = 3;

impl Engine {
    fn shard_for(&self, key: &[u8]) -> (u64, &ShardLock) {
        let hash = self.inner.hash(key);
        (hash, &self.inner.shards[self.inner.shard_of(hash)].0)
    }

    fn check_value(
        &self,
        key: &[u8],
        value_len: usize,
        meta: &RecordMeta,
    ) -> Result<(), WriteError> {
        check_key(key)?;
        let max = self.inner.value_len_max;
        let size = record::record_size(key.len(), value_len, meta);
        if value_len > max || size > self.inner.segment_size_bytes {
            return Err(WriteError::TooLarge {
                len: value_len,
                max: self.value_len_max_for_key(key.len()),
            });
        }
        Ok(())
    }

    fn maybe_flush(&self) {
        let flush_at_ms = self.inner.flush_at_ms.load(Ordering::Acquire);
        if flush_at_ms != 0 && self.inner.now_ms() >= flush_at_ms {
            let claimed = self.inner.flush_at_ms.compare_exchange(
                flush_at_ms,
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if claimed.is_ok() {
                let _ = self.flush_now();
            }
        }
    }

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

    #[inline]
    fn read<R, F: FnOnce(ItemRef<'_>) -> R>(&self, key: &[u8], bump: bool, f: F) -> Option<R> {
        self.maybe_flush();
        let mut f = f;
        // A flash read that lost a race with a move of its key (most often another read that
        // promoted it to memory) looks again rather than miss: the key is still there. Still
        // moving after as many looks, the last look is memory's alone (a miss at worst, never a
        // wrong value).
        for look in 0..=FLASH_READ_RACES_MAX {
            match self.read_once(key, bump, look < FLASH_READ_RACES_MAX, f) {
                Ok(found) => return found,
                Err(back) => f = back,
            }
        }
        unreachable!("a look that skips flash cannot race")
    }

    /// One look for `key` (see [`Engine::read`]), on flash too if `on_flash`; `Err(f)` when a
    /// flash read raced with a move of the key and the caller should look again.
    #[inline]
    fn read_once<R, F: FnOnce(ItemRef<'_>) -> R>(
        &self,
        key: &[u8],
        bump: bool,
        on_flash: bool,
        f: F,
    ) -> Result<Option<R>, F> {
        let (hash, lock) = self.shard_for(key);
        let shard = lock.read();
        match shard.lookup_unexpired(&self.inner, key, hash) {
            Some(found) => {
                // `found.entry` was loaded before this bump, so `item` reports the item as it
                // was before this access, like memcached's delayed bump.
                if bump {
                    shard.index.bump_freq(found.slot);
                }
                shard.counters.hits.fetch_add(1, Ordering::Relaxed);
                Ok(Some(f(item(&found))))
            }
            None => {
                // A memory record of the key, even expired, is newer than any flash copy:
                // only a key memory does not hold at all is looked for on flash.
                if on_flash
                    && self.inner.flash.is_some()
                    && shard.lookup(&self.inner, key, hash).is_none()
                {
                    let candidates = shard.flash_candidates(&self.inner, hash);
                    if !candidates.is_empty() {
                        drop(shard);
                        return self.read_flash(key, hash, lock, &candidates, bump, f);
                    }
                }
                shard.counters.misses.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// The read of a key found only among the flash tier's entries: each candidate's record
    /// is read with no lock held, then, under the read lock, the entry must still point there;
    /// if it no longer does (a write, delete, promotion or reclaim came first), `Err(f)`: the
    /// caller looks again, in memory first. A hit that makes the item read often enough moves
    /// it back to memory.
    #[cold]
    fn read_flash<R, F: FnOnce(ItemRef<'_>) -> R>(
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
                if bump {
                    shard.index.bump_freq(slot);
                }
                shard.counters.hits.fetch_add(1, Ordering::Relaxed);
                flash.counters.hits.fetch_add(1, Ordering::Relaxed);
                let f = f.take().expect("called once");
                let result = f(ItemRef {
                    key,
                    value: item.value,
                    client_flags: item.meta.client_flags,
                    cas: item.cas,
                    expires_at_ms: item.meta.expires_at_ms,
                    fetched: entry.fetched(),
                });
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
    /// flash entry with its hash bits has no record read ahead ([`Engine::stage_flash`]). A
    /// server asks this before running a request, and has an I/O thread stage the key while
    /// the request waits instead of blocking its worker. Always false without a flash tier.
    pub fn flash_read_needed(&self, key: &[u8]) -> bool {
        let Some(flash) = self.inner.flash.as_ref() else {
            return false;
        };
        let (hash, lock) = self.shard_for(key);
        let shard = lock.read();
        // Candidates first: with no flash entry sharing the key's bits (most keys), no lookup.
        let candidates = shard.flash_candidates(&self.inner, hash);
        if candidates.is_empty() || shard.lookup(&self.inner, key, hash).is_some() {
            return false;
        }
        drop(shard);
        candidates
            .as_slice()
            .iter()
            .any(|&location| !flash.is_staged(crate::index::flash_units(location)))
    }

    /// Reads ahead, from the flash medium, the records reads of `keys` would read there, all in
    /// flight at once, and keeps them for those reads (blocking I/O: for an I/O thread, not a
    /// worker). Keys memory holds are skipped; a no-op without a flash tier.
    pub fn stage_flash<K: AsRef<[u8]>>(&self, keys: &[K]) {
        if let Some(flash) = self.inner.flash.as_ref() {
            flash.stage_many(&self.flash_locations(keys));
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

    /// Takes the bytes a planned read got (`None`: it failed) and keeps the record for the
    /// request's own read; [`ReadOutcome::ReadMore`]: read again where `read` now says.
    pub fn finish_flash_read(&self, read: &mut FlashRead, bytes: Option<&[u8]>) -> ReadOutcome {
        match self.inner.flash.as_ref() {
            Some(flash) => flash.finish_read(read, bytes),
            None => ReadOutcome::Miss,
        }
    }

    /// A duplicate of the flash medium's descriptor for reads a server puts in flight itself
    /// ([`strata_pool::ReadRing`]); `None` without a flash tier, where the medium is not read
    /// through io_uring, or where tests slow its reads (then [`Engine::stage_flash`] does them).
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
            let shard = lock.read();
            if shard.lookup(&self.inner, key, hash).is_some() {
                continue;
            }
            let candidates = shard.flash_candidates(&self.inner, hash);
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

    /// Before a read-modify-write of a key that memory does not hold: moves the key's flash
    /// record (if one of the candidates is it) into memory, so the change sees it. Returns the
    /// shard locked for the change.
    fn lock_for_change<'a>(&'a self, key: &[u8], hash: u64, lock: &'a ShardLock) -> ShardWrite<'a> {
        let inner: &Inner = &self.inner;
        let h24 = crate::index::hash24(hash);
        // A promoted item can be demoted again before the lock is retaken (a full memory tier
        // under a write storm): a few tries, then the change sees the key as absent.
        for _ in 0..4 {
            let shard = lock.write();
            if inner.flash.is_none() || shard.lookup(inner, key, hash).is_some() {
                return shard;
            }
            let candidates = shard.flash_candidates(inner, hash);
            if candidates.is_empty() {
                return shard;
            }
            drop(shard);
            let now_ms = inner.now_ms();
            let mut promoted = false;
            for &location in candidates.as_slice() {
                let read = tiering::read_record(inner, key, location, now_ms, |item| {
                    lock.write().promote(inner, key, hash, location, &item)
                });
                match read {
                    tiering::FlashRead::Item(Ok(true)) => {
                        promoted = true;
                        break;
                    }
                    tiering::FlashRead::Item(Ok(false)) => {
                        promoted = true; // Raced with a change of the key: look again.
                        break;
                    }
                    tiering::FlashRead::Item(Err(_)) | tiering::FlashRead::Expired => break,
                    tiering::FlashRead::NotIt => {}
                    tiering::FlashRead::Damaged => lock.read().queue_flash_damage(h24, location),
                }
            }
            if !promoted {
                return lock.write();
            }
        }
        lock.write()
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

    /// Stores `value` under `key` subject to `options.condition`.
    pub fn store(
        &self,
        key: &[u8],
        value: &[u8],
        options: StoreOptions,
    ) -> Result<StoreOutcome, WriteError> {
        let condition = options.condition;
        let mut outcome = StoreOutcome::NotStored;
        self.modify(key, |current, buffer| {
            let decision = match (condition, &current) {
                (Condition::IfAbsent, Some(_)) | (Condition::IfPresent, None) => {
                    Err(StoreOutcome::NotStored)
                }
                (Condition::IfCas(_), None) => Err(StoreOutcome::NotFound),
                (Condition::IfCas(cas), Some(item)) if item.cas != cas => Err(StoreOutcome::Exists),
                _ => Ok(()),
            };
            if let Err(refused) = decision {
                outcome = refused;
                return Change::Keep;
            }
            outcome = StoreOutcome::Stored(0);
            buffer.extend_from_slice(value);
            Change::Write {
                client_flags: options.client_flags,
                expiry: options.expiry,
                keep_cas: false,
            }
        })
        .map(|cas| match (outcome, cas) {
            (StoreOutcome::Stored(_), Some(cas)) => StoreOutcome::Stored(cas),
            (StoreOutcome::Stored(_), None) => StoreOutcome::Stored(0),
            (other, _) => other,
        })
    }

    /// Plain set: the fast path of `store` with no condition (no read-modify-write copy).
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        if expiry == Expiry::Keep {
            let options = StoreOptions {
                client_flags,
                expiry,
                condition: Condition::Always,
            };
            return match self.store(key, value, options)? {
                StoreOutcome::Stored(cas) => Ok(cas),
                _ => unreachable!("an unconditional store stores"),
            };
        }
        let meta = RecordMeta {
            expires_at_ms: self.expiry_ms(expiry, None),
            cas: None,
            client_flags,
        };
        self.check_value(key, value.len(), &meta)?;
        self.maybe_flush();
        let (hash, lock) = self.shard_for(key);
        let mut shard = lock.write();
        if meta
            .expires_at_ms
            .is_some_and(|at| at <= self.inner.now_ms())
        {
            shard.delete(&self.inner, key, hash)?;
            return Ok(0);
        }
        shard.write(&self.inner, key, hash, value, meta, false)
    }

    fn expiry_ms(&self, expiry: Expiry, current: Option<Option<u64>>) -> Option<u64> {
        match expiry {
            Expiry::Never => None,
            Expiry::AtMs(at) => Some(at),
            Expiry::Keep => current.flatten(),
        }
    }

    /// The general read-modify-write: `f` sees the current item (if any, unexpired) and an
    /// empty buffer; it returns what to do, writing the new value into the buffer for
    /// `Change::Write`. Runs under the shard's write lock, so it is atomic with respect to
    /// every other operation on the key. Returns the new CAS when something was written.
    /// Seeing the item is not an access; `Change::Read` and touches (`keep_cas`) make it one.
    pub fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        check_key(key)?;
        self.maybe_flush();
        let (hash, lock) = self.shard_for(key);
        let mut shard = self.lock_for_change(key, hash, lock);
        let inner: &Inner = &self.inner;
        let mut buffer = std::mem::take(&mut shard.scratch);
        buffer.clear();
        // The caller's closure changes nothing of the shard, so a panic in it may unwind (the
        // shard is released as it was); a panic in the engine's own change cannot (see
        // `ShardWrite`'s drop).
        let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let found = shard.lookup_unexpired(inner, key, hash);
            let current = found.as_ref().map(|found| Current {
                expires_at_ms: found.view.meta.expires_at_ms,
                cas: found.cas,
                slot: found.slot,
            });
            (f(found.as_ref().map(item), &mut buffer), current)
        }));
        let (change, current) = match decided {
            Ok(decided) => decided,
            Err(panic) => {
                drop(shard);
                std::panic::resume_unwind(panic);
            }
        };
        let result = self.apply(&mut shard, key, hash, change, current, &buffer);
        shard.scratch = buffer;
        result
    }

    fn apply(
        &self,
        shard: &mut Shard,
        key: &[u8],
        hash: u64,
        change: Change,
        current: Option<Current>,
        buffer: &[u8],
    ) -> Result<Option<u64>, WriteError> {
        let (client_flags, expiry, cas, touch) = match change {
            Change::Keep => return Ok(None),
            Change::Read => {
                if let Some(current) = current {
                    shard.index.bump_freq(current.slot);
                }
                return Ok(None);
            }
            Change::Delete => return shard.delete(&self.inner, key, hash).map(|_| None),
            Change::Write {
                client_flags,
                expiry,
                keep_cas,
            } => {
                let kept = current.filter(|_| keep_cas).map(|current| current.cas);
                (client_flags, expiry, kept, kept.is_some())
            }
            Change::WriteWithCas {
                client_flags,
                expiry,
                cas,
            } => (client_flags, expiry, Some(cas), false),
        };
        let expires_at_ms = self.expiry_ms(expiry, current.map(|c| c.expires_at_ms));
        let meta = RecordMeta {
            expires_at_ms,
            cas,
            client_flags,
        };
        self.check_value(key, buffer.len(), &meta)?;
        if expires_at_ms.is_some_and(|at| at <= self.inner.now_ms()) {
            shard.delete(&self.inner, key, hash)?;
            return Ok(None);
        }
        shard
            .write(&self.inner, key, hash, buffer, meta, touch)
            .map(Some)
    }

    /// Deletes `key`; with `cas`, only if the item's CAS matches. Returns whether it was
    /// deleted (`Err(StoreOutcome::Exists)` semantics are folded into `DeleteOutcome`).
    pub fn delete(&self, key: &[u8], cas: Option<u64>) -> Result<DeleteOutcome, WriteError> {
        let mut outcome = DeleteOutcome::NotFound;
        self.modify(key, |current, _| match (current, cas) {
            (None, _) => Change::Keep,
            (Some(item), Some(cas)) if item.cas != cas => {
                outcome = DeleteOutcome::Exists;
                Change::Keep
            }
            (Some(_), _) => {
                outcome = DeleteOutcome::Deleted;
                Change::Delete
            }
        })?;
        Ok(outcome)
    }

    /// Sets a new expiry on `key`, keeping its value, flags and CAS. Returns whether it exists.
    pub fn touch(&self, key: &[u8], expiry: Expiry) -> Result<bool, WriteError> {
        let mut found = false;
        self.modify(key, |current, buffer| match current {
            None => Change::Keep,
            Some(item) => {
                found = true;
                buffer.extend_from_slice(item.value);
                Change::Write {
                    client_flags: item.client_flags,
                    expiry,
                    keep_cas: true,
                }
            }
        })?;
        Ok(found)
    }

    /// memcached incr/decr: the value must be a decimal u64; incr wraps at 2^64, decr stops
    /// at 0. The new value gets a new CAS.
    pub fn arith(&self, key: &[u8], delta: u64, decrement: bool) -> Result<Arith, WriteError> {
        let mut result = Arith::NotFound;
        let cas = self.modify(key, |current, buffer| {
            let Some(item) = current else {
                return Change::Keep;
            };
            let Some(number) = parse_u64(item.value) else {
                result = Arith::NotNumeric;
                return Change::Keep;
            };
            let next = if decrement {
                number.saturating_sub(delta)
            } else {
                number.wrapping_add(delta)
            };
            result = Arith::Value(next, 0);
            // Decimal straight into the buffer (a Vec's io::Write cannot fail).
            let _ = std::io::Write::write_fmt(buffer, format_args!("{next}"));
            Change::Write {
                client_flags: item.client_flags,
                expiry: Expiry::Keep,
                keep_cas: false,
            }
        })?;
        Ok(match (result, cas) {
            (Arith::Value(value, _), Some(cas)) => Arith::Value(value, cas),
            (other, _) => other,
        })
    }

    /// memcached append/prepend: adds `data` to an existing value. Returns the new CAS, or
    /// `None` when the key is absent.
    pub fn concat(
        &self,
        key: &[u8],
        data: &[u8],
        prepend: bool,
    ) -> Result<Option<u64>, WriteError> {
        self.modify(key, |current, buffer| {
            let Some(item) = current else {
                return Change::Keep;
            };
            if prepend {
                buffer.extend_from_slice(data);
                buffer.extend_from_slice(item.value);
            } else {
                buffer.extend_from_slice(item.value);
                buffer.extend_from_slice(data);
            }
            Change::Write {
                client_flags: item.client_flags,
                expiry: Expiry::Keep,
                keep_cas: false,
            }
        })
    }

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

    fn flush_now(&self) -> Result<(), WriteError> {
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

    /// Items indexed (including expired ones not yet reclaimed).
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| s.0.read().index.len())
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
        if read > 0 {
            let on_medium: Vec<u64> = flash
                .iter()
                .map(|&location| crate::index::flash_units(location))
                .collect();
            tier.stage_many(&on_medium);
        }
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
        read
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

/// Most keys one `prefetch` call looks at.
pub const PREFETCH_KEYS_MAX: usize = 32;

/// Index buckets one scan step visits under a shard's read lock.
pub const SCAN_BUCKETS_PER_STEP: usize = 64;
/// Most index buckets one `scan` call visits, however sparse the cache.
pub const SCAN_BUCKETS_PER_CALL_MAX: usize = 64 * 1024;
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

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleted.
    Deleted,
    /// No such key.
    NotFound,
    /// The CAS did not match.
    Exists,
}

/// Parses a memcached counter: ASCII decimal digits (trailing spaces allowed, as memcached
/// leaves them after a shrinking decr), at most u64::MAX.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    let digits = std::str::from_utf8(bytes).ok()?.trim_end_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
