//! Giving segments back: eviction (merge, fifo, random), expiry, flush, and freeing a segment with
//! what its records still index.

use strata_pool::Segment;

use crate::config::EvictionPolicy;
use crate::error::WriteError;
use crate::index;
use crate::record::{self, RecordMeta, RecordView};
use crate::segment::{OwnedSegment, Verified};
use crate::Inner;

use super::{bump, FreeReason, Shard};

impl Shard {
    pub(super) fn reinsert_survivors(&mut self, inner: &Inner, id: u32) -> Result<(), WriteError> {
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

    pub(super) fn next_random(&mut self) -> u64 {
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
        self.clean_heads.retain(|&(_, head)| head != id);
        let now_ms = inner.now_ms();
        if matches!(reason, FreeReason::Evict { .. }) {
            // While its records are still in the table (see `flash_families`).
            self.demote_families_in(inner, id, now_ms);
        }
        let owned = *self.segments[id as usize]
            .take()
            .expect("freeing an owned segment");
        self.chains[owned.fields.ttl_bucket as usize].retain(|&other| other != id);
        if reason == FreeReason::Cleaned {
            assert_eq!(owned.live_items, 0, "the cleaner moved every live record");
            return self.release_freed(inner, owned);
        }
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
        let freed = self.release_freed(inner, owned)?;
        // After the segment is durably free: a crash between leaves orphans, never an owner
        // that lacks a part (see `parts`). A flush noted none: every segment goes.
        self.drop_families(inner, reason)?;
        Ok(freed)
    }

    /// Ends the freeing of a segment taken out of the shard's tables: its live bytes leave the
    /// shard's count, and its header is zeroed and made durable.
    pub(super) fn release_freed(
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
    pub(super) fn unindex_or_keep(
        &mut self,
        inner: &Inner,
        owned: &OwnedSegment,
        view: RecordView<'_>,
        location: u64,
        reason: FreeReason,
        now_ms: u64,
        survivor_budget: usize,
    ) {
        let h24 = index::hash24(inner.record_hash(&view));
        let Some((slot, entry)) = self.index.find(h24, |l| l == location) else {
            // Only where damage made the index lose the record (or point elsewhere).
            debug_assert!(
                !(owned.is_clean() && self.index_verified),
                "a live record of a clean segment is indexed"
            );
            return;
        };
        let expired = view.meta.expires_at_ms.is_some_and(|at| at <= now_ms);
        // A family goes whole: to flash as one bundle, or dropped (`parts`, `flash_families`).
        let family = Shard::is_family(&view);
        let keep = matches!(reason, FreeReason::Evict { keep_hot: true })
            && !expired
            && !family
            && entry.freq() > 0
            && self.survivors.len() + view.size_bytes + 8 <= survivor_budget;
        if !keep
            && !expired
            && !family
            && matches!(reason, FreeReason::Evict { .. })
            && self.demote(inner, owned, slot, entry, &view, location, now_ms)
        {
            return;
        }
        if family && !expired && matches!(reason, FreeReason::Evict { .. }) {
            if let Some(to) =
                self.demote_walked_family(inner, owned, &view, (location, entry), now_ms)
            {
                self.move_walked_owner(slot, h24, &view, to);
                return;
            }
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
        if family && reason != FreeReason::Flush {
            self.note_family_drop(&view);
        }
        if view.meta.kind == crate::record::Kind::Part {
            return; // Not an item: its owner is counted.
        }
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
        self.count_removal_of_all();
        assert_eq!(self.index.len(), 0, "flush unindexes everything");
        Ok(freed)
    }
}
