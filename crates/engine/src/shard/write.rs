//! Writes and deletes: appending a record, indexing it, and marking the record it replaced dead.

use crate::error::WriteError;
use crate::index;
use crate::record::{self, RecordMeta};
use crate::ttl;
use crate::Inner;

use super::{bump, Held, Reserved, Shard};

impl Shard {
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
        self.write_over(inner, (key, hash), value, meta, touch, None)
    }

    /// [`Shard::write`] by a caller that looked the key up under this same hold of the shard
    /// and found `looked` (the record the write replaces; `None`: not looked up, or nothing
    /// found, which may still hide an expired record: looked up here).
    pub(crate) fn write_over(
        &mut self,
        inner: &Inner,
        (key, hash): (&[u8], u64),
        value: &[u8],
        meta: RecordMeta,
        touch: bool,
        looked: Option<super::Looked>,
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
        let current = match looked {
            Some(super::Looked(held)) => {
                debug_assert_eq!(
                    self.lookup(inner, key, hash).map(Held::of),
                    Some(held),
                    "the record looked up under this hold is still the key's"
                );
                Some(held)
            }
            None => self.lookup(inner, key, hash).map(Held::of),
        };
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
        owned.live_parts += u32::from(meta.kind == record::Kind::Part);
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
                // The parts the new record does not own (see `parts`).
                if held.parts > meta.parts {
                    self.drop_parts(inner, key, hash, meta.parts..held.parts, true)?;
                }
            }
            // A touch whose record was evicted while making room is still the same item, and
            // this access counts as a read of it. A flash copy of the key is dead from now on:
            // memory answers first, and the flash entries with the key's hash bits stay only
            // until the flash thread has read which key they hold.
            None => {
                if hash & crate::PART_BIT == 0 {
                    self.suspect_flash_copies(hash); // Parts are never on flash.
                }
                self.insert_index(inner, hash, location, u8::from(touch));
            }
        }
        bump(&self.counters.writes, 1);
        bump(&self.counters.written_bytes, size as u64);
        Ok(cas)
    }

    /// Indexes a new item read `freq` times (marked fetched when `freq > 0`).
    pub(super) fn insert_index(&mut self, inner: &Inner, hash: u64, location: u64, freq: u8) {
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
    pub(super) fn index_items_expected(&self, inner: &Inner) -> usize {
        let memory_items = (self.index.len() as u64)
            .saturating_sub(self.flash_items)
            .max(1);
        let record_bytes = (self.live_bytes / memory_items).max(inner.item_size_bytes_expected);
        let items = inner.shard_memory_bytes / (record_bytes + index::INDEX_BYTES_PER_ITEM);
        usize::try_from(items).unwrap_or(usize::MAX)
    }

    pub(super) fn seq_at(&self, inner: &Inner, location: u64) -> u64 {
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
    pub(super) fn kill_record(
        &mut self,
        inner: &Inner,
        held: Held,
        replaced_by: Option<u64>,
    ) -> Result<(), WriteError> {
        let location = held.location;
        self.uncount(inner, held);
        if let (Some(replacement), true) = (replaced_by, inner.track_dirty) {
            self.supersede(inner, location);
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

    /// Takes the held record out of its segment's and the shard's live counts. Saturating: a
    /// segment's counts come from books that damage may have changed (mapped index files, a
    /// snapshot that no longer matches) until the scrub counts them again.
    fn uncount(&mut self, inner: &Inner, held: Held) {
        let size = held.size_bytes as u64;
        let owned = self.owned_mut(inner.split_location(held.location).0);
        owned.live_items = owned.live_items.saturating_sub(1);
        owned.live_bytes = owned.live_bytes.saturating_sub(size);
        owned.live_parts = owned.live_parts.saturating_sub(u32::from(held.part));
        self.live_bytes = self.live_bytes.saturating_sub(size);
    }

    /// Marks the (uncounted) record at `location` superseded, its dead mark waiting for the
    /// next commit. Not persisted: what it tells a recovery is only used when no store was
    /// lost.
    fn supersede(&mut self, inner: &Inner, location: u64) {
        let (id, offset) = inner.split_location(location);
        record::mark_superseded(&mut self.owned_mut(id).segment.data_mut()[offset..]);
        self.pending_dead.push(location);
    }

    /// Like [`Shard::kill_record`] for a part whose owner a new record replaced (with fewer
    /// parts): under deferred persistence its dead mark waits for the commit that makes the
    /// new owner durable, as the old owner's does, so a power cut before it finds the old
    /// family whole (see `parts`).
    pub(super) fn kill_part_of_replaced(
        &mut self,
        inner: &Inner,
        held: Held,
    ) -> Result<(), WriteError> {
        if !inner.track_dirty {
            return self.kill_record(inner, held, None);
        }
        let location = held.location;
        self.uncount(inner, held);
        self.supersede(inner, location);
        Ok(())
    }

    /// Writes a record's dead mark and makes it durable as the durability level says.
    pub(super) fn mark_dead_now(&mut self, inner: &Inner, location: u64) -> Result<(), WriteError> {
        let (id, offset) = inner.split_location(location);
        let Some(owned) = self.segments[id as usize].as_deref_mut() else {
            return Ok(()); // Its segment was freed since: nothing to mark.
        };
        record::mark_dead(&mut owned.segment.data_mut()[offset..]);
        self.touch(id);
        self.written(inner, id, offset, 1)
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
        self.kill_item(inner, Held::of(found), key, hash)?;
        if expired {
            bump(&self.counters.expired_items, 1);
        }
        Ok(!expired)
    }
}
