//! Writes: stores, read-modify-writes, deletes, counters, appends.

use super::*;
use crate::record::Kind;

/// What `apply` needs of the item a `modify` closure saw.
#[derive(Clone, Copy)]
struct Current {
    expires_at_ms: Option<u64>,
    cas: u64,
    slot: SlotRef,
    kind: Kind,
    parts: u32,
    /// The record, for the write that replaces it (no second lookup).
    looked: crate::shard::Looked,
}

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

impl Engine {
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

    /// Stores `value` under `key` subject to `options.condition` ([`Door::store`]).
    pub fn store(
        &self,
        key: &[u8],
        value: &[u8],
        options: StoreOptions,
    ) -> Result<StoreOutcome, WriteError> {
        self.or_in_transaction(key, |door| door.store(key, value, options))
    }

    /// Runs `op` on `key` through the engine, and when it answers that it writes a string of
    /// several records ([`WriteError::NeedsTransaction`], nothing changed), again in a
    /// transaction that holds `key` and logs it.
    pub fn or_in_transaction<R>(
        &self,
        key: &[u8],
        mut op: impl FnMut(&dyn DynDoor) -> Result<R, WriteError>,
    ) -> Result<R, WriteError> {
        match op(self) {
            Err(WriteError::NeedsTransaction) => self.in_transaction(key, op),
            answer => answer,
        }
    }

    /// Runs `op` in a transaction that holds `key` and logs it, and ends it.
    fn in_transaction<R>(
        &self,
        key: &[u8],
        op: impl FnOnce(&dyn DynDoor) -> Result<R, WriteError>,
    ) -> Result<R, WriteError> {
        let txn = self.transaction(&[], &[key])?;
        let answer = op(&txn)?;
        txn.finish()?;
        Ok(answer)
    }

    /// Plain set: the fast path of `store` with no condition (no read-modify-write copy).
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        let Some(meta) = self.set_meta(key, value, client_flags, expiry)? else {
            return unconditional_store(self, key, value, client_flags, expiry);
        };
        if self.takes_parts(key, value.len()) {
            // Several records: written by a transaction, whose log keeps the old ones.
            return self.in_transaction(key, |txn| txn.set(key, value, client_flags, expiry));
        }
        self.maybe_flush();
        let (hash, lock) = self.shard_for(key);
        let mut shard = lock.write();
        self.set_in(&mut shard, (key, hash), value, meta, None)
    }

    /// The record fields of a plain set, its key and value checked; `None` for one that keeps
    /// the item's expiry (a read-modify-write: see [`unconditional_store`]).
    pub(super) fn set_meta(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<Option<RecordMeta>, WriteError> {
        if expiry == Expiry::Keep {
            return Ok(None);
        }
        let meta = RecordMeta {
            expires_at_ms: self.expiry_ms(expiry, None),
            cas: None,
            client_flags,
            kind: Kind::String,
            parts: 0,
        };
        check_key(key)?;
        self.check_value_of(key, value.len(), &meta)?;
        Ok(Some(meta))
    }

    /// A plain set in a shard held for it: whatever the key held (in memory or on flash) is
    /// replaced without being read.
    pub(super) fn set_in(
        &self,
        shard: &mut Shard,
        (key, hash): (&[u8], u64),
        value: &[u8],
        meta: RecordMeta,
        log: Option<large::PartLog<'_>>,
    ) -> Result<u64, WriteError> {
        if meta
            .expires_at_ms
            .is_some_and(|at| at <= self.inner.now_ms())
        {
            shard.delete(&self.inner, key, hash)?;
            return Ok(0);
        }
        if self.takes_parts(key, value.len()) {
            let log = log.ok_or(WriteError::NeedsTransaction)?;
            return self.write_large(shard, (key, hash), value, meta, log);
        }
        shard.write(&self.inner, key, hash, value, meta, false)
    }

    pub(super) fn expiry_ms(&self, expiry: Expiry, current: Option<Option<u64>>) -> Option<u64> {
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
        match self.modify_in(&mut shard, key, hash, f, None) {
            Ok(result) => result,
            Err(panic) => {
                // Released as it was before it goes on unwinding (see `ShardWrite`'s drop).
                drop(shard);
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// [`Engine::modify`] in a shard already held for the change (memory holds the key's
    /// item if it has one). `Err` carries a panic of `f`, before which nothing changed: the
    /// caller ends the change and goes on unwinding.
    pub(super) fn modify_in(
        &self,
        shard: &mut Shard,
        key: &[u8],
        hash: u64,
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
        log: Option<large::PartLog<'_>>,
    ) -> std::thread::Result<Result<Option<u64>, WriteError>> {
        let inner: &Inner = &self.inner;
        let mut buffer = std::mem::take(&mut shard.scratch);
        buffer.clear();
        // The caller's closure changes nothing of the shard, so a panic in it may unwind (the
        // shard is released as it was); a panic in the engine's own change cannot (see
        // `ShardWrite`'s drop).
        let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let shard: &Shard = shard;
            let found = shard.lookup_unexpired(inner, key, hash);
            // A large string is seen joined; one that cannot be joined, as absent.
            let (found, joined) = match found {
                Some(found) => match large::joined(inner, shard, (key, hash), &found) {
                    Some(joined) => (Some(found), joined),
                    None => (None, None),
                },
                None => (None, None),
            };
            let current = found.as_ref().map(|found| Current {
                expires_at_ms: found.view.meta.expires_at_ms,
                cas: found.cas,
                slot: found.slot,
                kind: found.view.meta.kind,
                parts: found.view.meta.parts,
                looked: crate::shard::Looked::of(found),
            });
            let seen = found
                .as_ref()
                .map(|found| large::seen(found, joined.as_deref()));
            let mut change = f(seen, &mut buffer);
            if let Change::Touch { expiry } = change {
                // The record's own bytes back: a large string's header, its parts kept.
                buffer.clear();
                change = found.as_ref().map_or(Change::Keep, |found| {
                    buffer.extend_from_slice(found.view.value);
                    Change::Write {
                        client_flags: found.view.meta.client_flags,
                        expiry,
                        keep_cas: true,
                    }
                });
            }
            (change, current)
        }));
        let (change, current) = decided?;
        let result = self.apply(shard, (key, hash), change, current, &buffer, log);
        if buffer.capacity() > self.inner.segment_size_bytes {
            buffer = Vec::new(); // A large string's: not kept for the shard's next change.
        }
        shard.scratch = buffer;
        Ok(result)
    }

    /// [`Engine::modify`] for an operation on values of `kind` ([`Door::modify_as`]).
    pub fn modify_as(
        &self,
        key: &[u8],
        kind: Kind,
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        Door::modify_as(self, key, kind, f)
    }

    fn apply(
        &self,
        shard: &mut Shard,
        (key, hash): (&[u8], u64),
        change: Change,
        current: Option<Current>,
        buffer: &[u8],
        log: Option<large::PartLog<'_>>,
    ) -> Result<Option<u64>, WriteError> {
        // A touch keeps the item whole, parts and all; any other write replaces it.
        let (client_flags, expiry, cas, touch, kind, parts) = match change {
            Change::Keep => return Ok(None),
            Change::Read => {
                if let Some(current) = current {
                    shard.index.bump_freq(current.slot);
                }
                return Ok(None);
            }
            Change::Delete => return shard.delete(&self.inner, key, hash).map(|_| None),
            Change::Touch { .. } => unreachable!("`modify_in` turns a touch into a write"),
            Change::Write {
                client_flags,
                expiry,
                keep_cas,
            } => {
                let kept = current.filter(|_| keep_cas);
                let kind = kept.map_or(Kind::String, |current| current.kind);
                let parts = kept.map_or(0, |current| current.parts);
                let cas = kept.map(|current| current.cas);
                (client_flags, expiry, cas, kept.is_some(), kind, parts)
            }
            Change::WriteWithCas {
                client_flags,
                expiry,
                cas,
            } => (client_flags, expiry, Some(cas), false, Kind::String, 0),
            Change::WriteKind { kind, expiry } => (0, expiry, None, false, kind, 0),
        };
        let expires_at_ms = self.expiry_ms(expiry, current.map(|c| c.expires_at_ms));
        let meta = RecordMeta {
            expires_at_ms,
            cas,
            client_flags,
            kind,
            parts,
        };
        let large = self.check_value_of(key, buffer.len(), &meta)?;
        if expires_at_ms.is_some_and(|at| at <= self.inner.now_ms()) {
            shard.delete(&self.inner, key, hash)?;
            return Ok(None);
        }
        if large {
            let log = log.ok_or(WriteError::NeedsTransaction)?;
            return self
                .write_large(shard, (key, hash), buffer, meta, log)
                .map(Some);
        }
        let looked = current.map(|current| current.looked);
        shard
            .write_over(&self.inner, (key, hash), buffer, meta, touch, looked)
            .map(Some)
    }

    /// Deletes `key`; with `cas`, only if the item's CAS matches ([`Door::delete`]).
    pub fn delete(&self, key: &[u8], cas: Option<u64>) -> Result<DeleteOutcome, WriteError> {
        Door::delete(self, key, cas)
    }

    /// Sets a new expiry on a string `key`, keeping its value, flags and CAS (memcached's
    /// touch and gat). Returns whether it exists; a key holding another kind reads as absent
    /// (its expiry is the server's to set: a hash keeps the key's own in its encoding).
    pub fn touch(&self, key: &[u8], expiry: Expiry) -> Result<bool, WriteError> {
        let mut found = false;
        self.modify(key, |current, _| match current {
            None => Change::Keep,
            Some(item) if item.kind != Kind::String => Change::Keep,
            Some(_) => {
                found = true;
                Change::Touch { expiry }
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
            let Some(number) = parse_u64(item.value).filter(|_| item.kind == Kind::String) else {
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
    /// `None` when the key is absent or holds another kind than a string.
    pub fn concat(
        &self,
        key: &[u8],
        data: &[u8],
        prepend: bool,
    ) -> Result<Option<u64>, WriteError> {
        self.or_in_transaction(key, |door| {
            door.modify(key, |current, buffer| {
                let Some(item) = current.filter(|item| item.kind == Kind::String) else {
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
        })
    }
}

/// A set through `door` that keeps the item's expiry: an unconditional store.
pub(super) fn unconditional_store(
    door: &impl Door,
    key: &[u8],
    value: &[u8],
    client_flags: u32,
    expiry: Expiry,
) -> Result<u64, WriteError> {
    let options = StoreOptions {
        client_flags,
        expiry,
        condition: Condition::Always,
        kind: Kind::String,
    };
    match door.store(key, value, options)? {
        StoreOutcome::Stored(cas) => Ok(cas),
        _ => unreachable!("an unconditional store stores"),
    }
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
