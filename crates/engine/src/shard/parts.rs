//! Items of several records: an owner and its parts (`record`'s module docs), kept whole.
//!
//! An owner and its parts live in one shard (`Inner::part_hash`), so whatever holds the
//! shard's write lock changes them together. The rules every path follows:
//!
//! - A write of an owner that owns fewer parts than the record it replaces drops the parts
//!   past its count (a string written over a large hash drops them all); a delete of an owner
//!   drops every part.
//! - Eviction, expiry and the cleaner's drop of an expired record treat a family as one
//!   item: dropping its owner drops its parts, dropping a part drops its owner and the other
//!   parts. A freed segment's family members are collected while its records are unindexed
//!   and dropped after (the segment being freed is out of the shard's table by then).
//!   Neither an owner nor a part is kept by merge eviction: a cache never keeps half an
//!   item. An evicted family goes to the flash tier whole, as one record (a bundle), or is
//!   dropped whole (`flash_families`).
//! - Dropping parts never breaks a family across a crash: an owner's record goes durably
//!   before its parts' dead marks are written (a delete or a family drop persists the owner's
//!   mark first; eviction frees the owner's segment first; a transaction's undo drops the
//!   parts its group made once the owners it put back are durable), and the parts a
//!   rewritten owner no longer owns go with its old record, their marks waiting for the
//!   commit that makes the new owner durable; a crash between leaves orphans at most.
//!   *Writing* a family is whole across a process crash (every store kept) and, under
//!   `sync`, across a power cut once the write was acknowledged; a power cut under deferred
//!   durability may keep some of a family's writes since the last commit and not others,
//!   unless a logged transaction wrote it (its log keeps the parts' before-images: `Txn`'s
//!   parts).
//! - While a logged transaction holds the shard (`defer_part_drops`), the parts its writes
//!   replace or delete stay indexed until its log says done, so that a crash before then
//!   can put their owners back whole; then those no owner owns go
//!   (`drop_deferred_parts`).
//! - No reader is served an owner that lacks a part: recovery checks every owner it indexed
//!   (`drop_recovered_broken_families`), and after damage is found (a damaged record may have
//!   been a part) or a mapped index was adopted after a power loss, the next scrub step or
//!   repair walks the shard for owners (`drop_broken_families`); an owner that lacks a part is
//!   dropped with its parts, counted as a damaged item. A transaction's read of the missing
//!   part (`Txn::read_part`) answers `FamilyBroken`, never other bytes or an absent part, and
//!   the family is dropped then (a write hold) or as the transaction ends (a read-only one).
//! - A part a transaction writes before its owner (`Txn::write_owner` comes last) is not an
//!   orphan while the transaction holds the shard (`Shard::building`): the cleaner, which a
//!   write of the same transaction may run, moves it.
//! - A part whose owner is gone, or owns fewer parts than its number, is an orphan (a crash
//!   between a family's writes on a pool without a transaction log, or an owner lost to
//!   damage): never read, and dropped by the cleaner instead of moved.

use crate::error::WriteError;
use crate::index;
use crate::record::{self, Kind, RecordView};
use crate::Inner;

use super::{bump, FreeReason, Held, Shard};

/// A family member dropped while a segment was freed: the owner's key, and its part count
/// when the owner itself was the one dropped (else it is looked up).
pub(crate) struct FamilyDrop {
    owner: Vec<u8>,
    parts: Option<u32>,
}

impl Shard {
    /// Whether the record is an owner or a part (see the module docs).
    pub(super) fn is_family(view: &RecordView<'_>) -> bool {
        view.meta.kind == Kind::Part || view.meta.parts > 0
    }

    /// Notes, for [`Shard::drop_families`], that a freed segment's family member was dropped.
    pub(super) fn note_family_drop(&mut self, view: &RecordView<'_>) {
        let drop = if view.meta.kind == Kind::Part {
            let (owner, _) = record::split_part_key(view.key);
            FamilyDrop {
                owner: owner.to_vec(),
                parts: None,
            }
        } else {
            FamilyDrop {
                owner: view.key.to_vec(),
                parts: Some(view.meta.parts),
            }
        };
        self.family_drops.push(drop);
    }

    /// Drops the rest of every family noted since the last call (see the module docs): an
    /// owner not dropped yet is dropped now, counted by `reason` as the item it is.
    pub(super) fn drop_families(
        &mut self,
        inner: &Inner,
        reason: FreeReason,
    ) -> Result<(), WriteError> {
        let drops = std::mem::take(&mut self.family_drops);
        for drop in &drops {
            let owner_hash = inner.hash(&drop.owner);
            let parts = match drop.parts {
                Some(parts) => parts,
                None => {
                    match self.lookup(inner, &drop.owner, owner_hash) {
                        Some(found) if found.view.meta.parts > 0 => {
                            let held = Held::of(found);
                            if let Some(location) = self.demoted_to(&drop.owner) {
                                let owner = (&drop.owner[..], owner_hash);
                                self.move_owner_to_flash(inner, held, owner, location)?;
                                continue;
                            }
                            self.kill_item(inner, held, &drop.owner, owner_hash)?;
                            let counter = match reason {
                                FreeReason::Evict { .. } => &self.counters.evicted_items,
                                _ => &self.counters.expired_items,
                            };
                            bump(counter, 1);
                        }
                        // An orphan's owner: left to the cleaner (see the module docs).
                        _ => {}
                    }
                    continue;
                }
            };
            self.drop_parts(inner, &drop.owner, owner_hash, 0..parts, false)?;
        }
        self.family_drops = drops;
        self.family_drops.clear();
        self.forget_family_demotions();
        Ok(())
    }

    /// Kills the held record of `key` (hash `hash`), unindexes it, and, for an owner, drops
    /// every part it owns after its own dead mark is durable: under deferred persistence one
    /// commit could otherwise make a part's mark durable and not the owner's, and a power cut
    /// then would leave an owner that lacks a part. Counts nothing.
    pub(super) fn kill_item(
        &mut self,
        inner: &Inner,
        held: Held,
        key: &[u8],
        hash: u64,
    ) -> Result<(), WriteError> {
        self.kill_record(inner, held, None)?;
        self.remove_memory_slot(held.slot, index::hash24(hash));
        if held.parts == 0 {
            return Ok(());
        }
        if inner.track_dirty {
            self.persist_dirty(inner)?;
        }
        self.drop_parts(inner, key, hash, 0..held.parts, false)
    }

    /// Drops the owner's parts numbered in `parts` that the index holds: at once (the owner is
    /// gone or going durably first), or, when `replaced`, as the replaced owner's record goes
    /// ([`Shard::kill_part_of_replaced`]).
    pub(super) fn drop_parts(
        &mut self,
        inner: &Inner,
        owner: &[u8],
        owner_hash: u64,
        parts: std::ops::Range<u32>,
        replaced: bool,
    ) -> Result<(), WriteError> {
        let mut name = Vec::new();
        for part in parts {
            let hash = inner.part_name(owner, owner_hash, part, &mut name);
            if self.defer_part_drops {
                if self.lookup(inner, &name, hash).is_some() {
                    self.deferred_parts.push(name.clone());
                }
                continue;
            }
            if let Some(found) = self.lookup(inner, &name, hash) {
                let held = Held::of(found);
                debug_assert!(held.part, "a part's name finds only parts");
                if replaced {
                    self.kill_part_of_replaced(inner, held)?;
                } else {
                    self.kill_record(inner, held, None)?;
                }
                self.remove_memory_slot(held.slot, index::hash24(hash));
            }
        }
        Ok(())
    }

    /// Drops part `part` of `owner` now, whatever holds the shard (a restore's undo of a part
    /// a group made).
    pub(crate) fn kill_part(
        &mut self,
        inner: &Inner,
        owner: &[u8],
        owner_hash: u64,
        part: u32,
    ) -> Result<(), WriteError> {
        let deferring = std::mem::replace(&mut self.defer_part_drops, false);
        let killed = self.drop_parts(inner, owner, owner_hash, part..part + 1, false);
        self.defer_part_drops = deferring;
        killed
    }

    /// Ends a logged transaction's hold (its log says done): the parts its writes dropped
    /// (`defer_part_drops`) go now, those that are orphans by then (a part the transaction
    /// wrote again, or an owner it put back, keeps).
    pub(crate) fn drop_deferred_parts(&mut self, inner: &Inner) -> Result<(), WriteError> {
        self.defer_part_drops = false;
        self.building.clear();
        let parts = std::mem::take(&mut self.deferred_parts);
        self.drop_orphans(inner, &parts)
    }

    /// Drops the parts named (by their keys) that are orphans: their owner is not indexed,
    /// or owns no more parts than their number (see the module docs). The cleaner checks the
    /// parts it moved, once every record of its victim has its new place.
    pub(super) fn drop_orphans(
        &mut self,
        inner: &Inner,
        part_keys: &[Vec<u8>],
    ) -> Result<(), WriteError> {
        for key in part_keys {
            let (owner, number) = record::split_part_key(key);
            if self.is_building(owner) {
                continue; // Its owner is being written (by the transaction holding the shard).
            }
            let owner_hash = inner.hash(owner);
            let owned = self
                .lookup(inner, owner, owner_hash)
                .is_some_and(|found| found.view.meta.parts > number);
            if !owned {
                self.drop_parts(inner, owner, owner_hash, number..number + 1, false)?;
            }
        }
        Ok(())
    }

    /// Checks that every owner's parts are all indexed (`check_integrity`; orphans are
    /// allowed: see the module docs).
    pub(super) fn check_families(
        &self,
        inner: &Inner,
        owners: &[(Vec<u8>, u32)],
    ) -> Result<(), String> {
        for (owner, parts) in owners {
            if let Some(part) = self.first_missing_part(inner, owner, inner.hash(owner), *parts) {
                return Err(format!(
                    "an owner of {parts} parts lacks part {part} (key {:?})",
                    String::from_utf8_lossy(owner)
                ));
            }
        }
        Ok(())
    }

    /// The first of parts `0..parts` of the owner `owner` (hash `owner_hash`) that the index
    /// does not hold, if any.
    fn first_missing_part(
        &self,
        inner: &Inner,
        owner: &[u8],
        owner_hash: u64,
        parts: u32,
    ) -> Option<u32> {
        let mut name = Vec::new();
        (0..parts).find(|&part| {
            let hash = inner.part_name(owner, owner_hash, part, &mut name);
            self.lookup(inner, &name, hash).is_none()
        })
    }

    /// Whether `owner`'s family is being written (see `Shard::building`).
    pub(crate) fn is_building(&self, owner: &[u8]) -> bool {
        self.building
            .iter()
            .any(|(building, _)| building[..] == *owner)
    }

    /// Notes that the transaction holding the shard began writing `owner`'s family (see
    /// `Shard::building`).
    pub(crate) fn begin_building(&mut self, owner: &[u8]) {
        if !self.is_building(owner) {
            let freed = self.segments_freed();
            self.building.push((owner.to_vec(), freed));
        }
    }

    /// Notes that `owner`'s family is written (a promotion's end: a transaction's building
    /// lasts until it ends).
    pub(crate) fn end_building(&mut self, owner: &[u8]) {
        self.building.retain(|(building, _)| building[..] != *owner);
    }

    /// The segments this shard had freed when the holding transaction began writing `owner`'s
    /// family: now, when it has written none of its parts.
    pub(crate) fn freed_when_building_began(&self, owner: &[u8]) -> u64 {
        (self.building.iter())
            .find(|(building, _)| building[..] == *owner)
            .map_or_else(|| self.segments_freed(), |&(_, freed)| freed)
    }

    /// Segments this shard has evicted or expired since it was opened (see `Txn`'s parts).
    pub(crate) fn segments_freed(&self) -> u64 {
        let load = |counter: &std::sync::atomic::AtomicU64| {
            counter.load(std::sync::atomic::Ordering::Relaxed)
        };
        load(&self.counters.evicted_segments) + load(&self.counters.expired_segments)
    }

    /// Whether every part of the owner the index holds under `owner` is indexed; true when
    /// the owner is absent or owns none.
    pub(crate) fn family_is_whole(&self, inner: &Inner, owner: &[u8]) -> bool {
        let owner_hash = inner.hash(owner);
        let Some(found) = self.lookup(inner, owner, owner_hash) else {
            return true;
        };
        let parts = found.view.meta.parts;
        self.first_missing_part(inner, owner, owner_hash, parts)
            .is_none()
    }

    /// Drops the owner under `owner` and every part it owns, counted as one evicted item
    /// (a family a write's eviction broke: see `Txn`'s parts).
    pub(crate) fn evict_family(&mut self, inner: &Inner, owner: &[u8]) -> Result<(), WriteError> {
        let owner_hash = inner.hash(owner);
        let Some(found) = self.lookup(inner, owner, owner_hash) else {
            return Ok(());
        };
        self.kill_item(inner, Held::of(found), owner, owner_hash)?;
        bump(&self.counters.evicted_items, 1);
        Ok(())
    }

    /// After recovery indexed this shard's records: drops each recovered owner that lacks a
    /// part (damage, or a power cut that kept a family's owner and not all of its new parts),
    /// counted as a damaged item, so no reader is served half an item.
    pub(crate) fn drop_recovered_broken_families(&mut self, inner: &Inner) {
        let owners = std::mem::take(&mut self.recovered_owners);
        self.drop_owners_lacking_parts(inner, &owners);
    }

    /// Asks for [`Shard::drop_broken_families`]'s check (a power cut before a mapped index
    /// was adopted unwalked).
    pub(crate) fn suspect_families(&mut self) {
        self.families_suspect = true;
    }

    /// Whether [`Shard::drop_broken_families`] has a check to make.
    pub(crate) fn families_suspect(&self) -> bool {
        self.families_suspect
    }

    /// After damage was found in this shard since the last check (a damaged record may have
    /// been a part): walks its segments for owners and drops each that lacks a part. A no-op
    /// otherwise; its cost, a walk of the shard, is paid only after damage.
    pub(crate) fn drop_broken_families(&mut self, inner: &Inner) {
        if !std::mem::take(&mut self.families_suspect) {
            return;
        }
        let mut owners = Vec::new();
        for owned in self.segments.iter().flatten() {
            for step in record::walk(owned.log()) {
                if let record::Step::Record { view, .. } = step {
                    if view.live && view.meta.parts > 0 {
                        owners.push(view.key.to_vec());
                    }
                }
            }
        }
        self.drop_owners_lacking_parts(inner, &owners);
    }

    /// Drops each of `owners` whose indexed record owns a part the index does not hold.
    pub(crate) fn drop_owners_lacking_parts(&mut self, inner: &Inner, owners: &[Vec<u8>]) {
        for owner in owners {
            let hash = inner.hash(owner);
            let Some(found) = self.lookup(inner, owner, hash) else {
                continue;
            };
            let parts = found.view.meta.parts;
            let Some(missing) = self.first_missing_part(inner, owner, hash, parts) else {
                continue;
            };
            let location = found.entry.location;
            if !self.starts_a_walked_record(inner, location) {
                // A damaged entry inside another record, at bytes that read as this owner:
                // dropped alone; marking them dead would write into the record around them.
                let (slot, h24) = (found.slot, found.entry.hash24);
                self.remove_memory_slot(slot, h24);
                self.dropped(inner, location);
                continue;
            }
            // A failed persist latches the engine; what it did not mark, a later recovery does.
            let _ = self.kill_item(inner, Held::of(found), owner, hash);
            bump(&self.counters.damaged_items_dropped, 1);
            let (id, offset) = inner.split_location(location);
            tracing::warn!(
                shard = self.id,
                segment = id,
                offset,
                parts,
                missing,
                "an item that lacks a part was dropped"
            );
        }
    }

    /// Part records this shard indexes in memory (not keys: left out of the item counts).
    pub(crate) fn part_items(&self) -> u64 {
        (self.segments.iter().flatten())
            .map(|owned| u64::from(owned.live_parts))
            .sum()
    }
}
