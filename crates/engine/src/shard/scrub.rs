//! The scrub and damage: checking adopted segments and index entries after a restart, dropping what
//! is damaged, and the integrity check tests run.

use std::collections::HashMap;

use crate::index;
use crate::record::{self, Damage};
use crate::segment::{OwnedSegment, Verified};
use crate::Inner;

use super::{bump, ScrubWalk, Shard};

impl Shard {
    /// Takes the entries (hash bits, location) that reads found pointing at no valid record.
    pub(crate) fn take_damaged_reads(&self) -> Vec<(u32, u64)> {
        std::mem::take(&mut *self.damaged_reads.lock())
    }

    /// Notes that a reader met a live owner lacking a part it owns (see
    /// `Shard::broken_family_read`).
    pub(crate) fn note_broken_family_read(&self) {
        (self.broken_family_read).store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Takes the note of [`Shard::note_broken_family_read`].
    pub(crate) fn take_broken_family_read(&self) -> bool {
        (self.broken_family_read).swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the entry (hash bits, location) points at the start of a valid, live record of
    /// a key with those hash bits, in a segment of this shard. Validates the record whatever
    /// the segment's state.
    pub(crate) fn entry_is_sound(&self, inner: &Inner, h24: u32, location: u64) -> bool {
        self.sound_key(inner, h24, location).is_some()
    }

    /// The key of the valid, live record at `location` if its hash bits are `h24` (see
    /// [`Shard::entry_is_sound`]).
    pub(super) fn sound_key(&self, inner: &Inner, h24: u32, location: u64) -> Option<&[u8]> {
        let (id, offset) = inner.split_location(location);
        let owned = self.segments.get(id as usize)?.as_deref()?;
        if offset >= owned.write_offset {
            return None;
        }
        match record::read(&owned.log()[offset..]) {
            record::Scan::Record(view)
                if view.live && index::hash24(inner.record_hash(&view)) == h24 =>
            {
                Some(view.key)
            }
            _ => None,
        }
    }

    /// Whether the entry in `slot` is sound and the one a lookup of its key finds: a second
    /// entry of the same key (damage) is not, and would outlive a delete of the key.
    pub(super) fn entry_is_the_keys(
        &self,
        inner: &Inner,
        slot: index::SlotRef,
        entry: index::Entry,
    ) -> bool {
        let Some(key) = self.sound_key(inner, entry.hash24, entry.location) else {
            return false;
        };
        let first = self.index.find(entry.hash24, |location| {
            self.record_at(inner, location)
                .is_some_and(|(view, _)| view.key == key)
        });
        first.is_some_and(|(found, _)| found == slot)
    }

    /// Drops the index entry (hash bits, location) if it is still there and still points at no
    /// valid record of its key. Returns whether it dropped one.
    pub(crate) fn drop_if_damaged(&mut self, inner: &Inner, h24: u32, location: u64) -> bool {
        if index::is_flash(location) {
            // A flash read found it damaged: its bytes on flash do not change until reclaim.
            let dropped = self.unindex_flash(h24, location);
            if dropped {
                bump(&self.counters.damaged_items_dropped, 1);
            }
            return dropped;
        }
        if self.entry_is_sound(inner, h24, location) {
            return false; // Rewritten since the read that queued it, or a race: keep it.
        }
        let Some((slot, _)) = self.index.find(h24, |l| l == location) else {
            return false;
        };
        self.remove_memory_slot(slot, h24);
        self.dropped(inner, location);
        true
    }

    /// Drops the entry in `slot` if it still holds `entry` and points at no valid record of its
    /// key (the scrub's check found it; its hash bits may be damaged too, so it is removed where
    /// it is rather than looked up). Returns whether it dropped it.
    pub(crate) fn drop_slot_if_damaged(
        &mut self,
        inner: &Inner,
        slot: index::SlotRef,
        entry: index::Entry,
    ) -> bool {
        if self.entry_is_the_keys(inner, slot, entry) || !self.index.remove_if(slot, entry) {
            return false;
        }
        self.count_removal(entry.hash24);
        self.drop_suspects(entry.hash24);
        self.dropped(inner, entry.location);
        true
    }

    /// Accounts for an entry dropped because it pointed at no valid record. The segment's live
    /// counts are the scrub's to set (`scrub_settle` counts the valid live records of a damaged
    /// segment): whether the damaged bytes were counted live cannot be read back.
    pub(super) fn dropped(&mut self, inner: &Inner, location: u64) {
        let (id, offset) = inner.split_location(location);
        self.families_suspect = true; // The record may have been a part.
        bump(&self.counters.damaged_items_dropped, 1);
        crate::scrub::log_damage(self.id, id, offset, Damage::Location, "item dropped");
    }

    /// Segments whose records no walk has validated yet: `(id, seq)`.
    pub(crate) fn unverified_segments(&self) -> Vec<(u32, u64)> {
        self.segments
            .iter()
            .flatten()
            .filter(|owned| owned.verified == Verified::Unverified)
            .map(|owned| (owned.segment.id(), owned.fields.seq))
            .collect()
    }

    /// Whether any segment has known damage.
    pub(crate) fn has_damaged_segments(&self) -> bool {
        self.segments
            .iter()
            .flatten()
            .any(|owned| owned.verified == Verified::Damaged)
    }

    /// The scrub's walk of segment `id` (if it is still the segment of stamp `seq`): the damage
    /// it holds, `(offset, cause)`, empty when every record is valid; and the valid live records
    /// the index does not find, `(offset, hash)`: their entries were damaged (an index mapped
    /// from its files, or a snapshot that no longer matches its pool).
    pub(crate) fn scrub_walk(&self, inner: &Inner, id: u32, seq: u64) -> Option<ScrubWalk> {
        let owned = self.segments.get(id as usize)?.as_deref()?;
        if owned.fields.seq != seq || owned.verified != Verified::Unverified {
            return None;
        }
        let mut found = ScrubWalk::default();
        let mut walk = record::walk(owned.log());
        for step in walk.by_ref() {
            if let record::Step::Record { view, .. } = &step {
                if view.live && inner.shard_of(inner.record_hash(view)) == usize::from(self.id) {
                    found.live.0 += 1;
                    found.live.1 += view.size_bytes as u64;
                    found.live_parts += u32::from(view.meta.kind == record::Kind::Part);
                }
            }
            match step {
                record::Step::Record { offset, view }
                    if view.live
                        && inner.shard_of(inner.record_hash(&view)) != usize::from(self.id) =>
                {
                    found.damage.push((offset, Damage::Location));
                }
                record::Step::Record { offset, view } if view.live => {
                    let hash = inner.record_hash(&view);
                    let location = inner.join_location(id, offset);
                    let indexed = self
                        .lookup(inner, view.key, hash)
                        .is_some_and(|f| f.entry.location == location);
                    if !indexed {
                        found.unindexed.push((offset, hash));
                    }
                }
                record::Step::Record { .. } => {}
                record::Step::Damaged { offset, cause, .. }
                | record::Step::Tail { offset, cause } => {
                    found.damage.push((offset, cause));
                }
            }
        }
        // The log's end is known here: zeros before it are records that were wiped.
        if walk.offset() < owned.write_offset && found.damage.is_empty() {
            found.damage.push((walk.offset(), Damage::State));
        }
        Some(found)
    }

    /// Records the outcome of the scrub's walk of segment `id` (still of stamp `seq`).
    pub(crate) fn scrub_settle(&mut self, inner: &Inner, id: u32, seq: u64, walked: &ScrubWalk) {
        let Some(owned) = self
            .segments
            .get_mut(id as usize)
            .and_then(|s| s.as_deref_mut())
        else {
            return;
        };
        if owned.fields.seq != seq || owned.verified != Verified::Unverified {
            return;
        }
        // The books never hold it: the walk's count is the first.
        owned.live_parts = walked.live_parts;
        owned.verified = if walked.damage.is_empty() {
            Verified::Clean
        } else {
            Verified::Damaged
        };
        if owned.verified == Verified::Damaged || !self.index_verified {
            // The book counted records the walk found damaged (or an index that lost entries
            // was behind it): the walk's count is the truth.
            let (items, bytes) = walked.live;
            self.live_bytes = self.live_bytes.saturating_sub(owned.live_bytes) + bytes;
            (owned.live_items, owned.live_bytes) = (items, bytes);
            self.touch(id);
        }
        self.families_suspect |= !walked.damage.is_empty();
        for &(offset, cause) in &walked.damage {
            self.counters.count_damage(cause);
            crate::scrub::log_damage(self.id, id, offset, cause, "found by the scrub");
        }
        for &(offset, hash) in &walked.unindexed {
            self.reindex(inner, id, offset, hash);
        }
    }

    /// Puts back a valid live record that a damaged (mapped) index lost: indexed again, or, if
    /// the index holds another live record of its key, the older of the two marked dead (only a
    /// damaged dead mark makes two; a scan would pick the newer the same way).
    pub(super) fn reindex(&mut self, inner: &Inner, id: u32, offset: usize, hash: u64) {
        let location = inner.join_location(id, offset);
        let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) else {
            return;
        };
        let record::Scan::Record(view) = record::read(&owned.log()[offset..]) else {
            return;
        };
        if !view.live {
            return;
        }
        let size = view.size_bytes;
        let part = view.meta.kind == record::Kind::Part;
        let other = self
            .lookup(inner, view.key, hash)
            .map(|found| (found.slot, found.entry.location, found.view.size_bytes));
        let kill = match other {
            None => {
                self.insert_index(inner, hash, location, 0);
                None
            }
            Some((_, other, _)) if other == location => return,
            Some((slot, other, _)) if !self.starts_a_walked_record(inner, other) => {
                // The entry points inside another record (damage that reads accept): the walked
                // record takes its place, and nothing is marked, which would write into the
                // record around it.
                self.index.relocate(slot, location);
                None
            }
            Some((slot, other, other_size)) => {
                let (other_id, other_offset) = inner.split_location(other);
                if (self.seq_of(other_id), other_offset) < (self.seq_of(id), offset) {
                    self.index.relocate(slot, location);
                    Some((other, other_size))
                } else {
                    Some((location, size))
                }
            }
        };
        if let Some((dead, dead_size)) = kill {
            let (dead_id, _) = inner.split_location(dead);
            let owned = self.owned_mut(dead_id);
            owned.live_items = owned.live_items.saturating_sub(1);
            owned.live_bytes = owned.live_bytes.saturating_sub(dead_size as u64);
            owned.live_parts = owned.live_parts.saturating_sub(u32::from(part));
            self.live_bytes = self.live_bytes.saturating_sub(dead_size as u64);
            // A failed persist latches the engine; the mark is redone by any later recovery.
            let _ = self.mark_dead_now(inner, dead);
        }
        self.touch(id);
        self.counters.count_damage(Damage::Location);
        crate::scrub::log_damage(
            self.id,
            id,
            offset,
            Damage::Location,
            "index entry restored",
        );
    }

    /// Whether `location` is where a walk of its segment's log finds a record start (an entry
    /// of damage may point inside another record, at bytes that read as one). Costs a walk of
    /// the segment: for damage only.
    pub(super) fn starts_a_walked_record(&self, inner: &Inner, location: u64) -> bool {
        let (id, offset) = inner.split_location(location);
        let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) else {
            return false;
        };
        for step in record::walk(owned.log()) {
            match step {
                record::Step::Record { offset: at, .. } if at == offset => return true,
                record::Step::Record { offset: at, .. }
                | record::Step::Damaged { offset: at, .. }
                    if at > offset =>
                {
                    return false
                }
                record::Step::Tail { .. } => return false,
                _ => {}
            }
        }
        false
    }

    /// The scrub's check of the entries of index buckets `[cursor, cursor + budget)`: those
    /// that may point at no valid record of their key. Entries of clean segments are trusted
    /// once the index is verified.
    pub(crate) fn scrub_entries(
        &self,
        inner: &Inner,
        cursor: u32,
        bucket_budget: usize,
        per_segment: &mut HashMap<u32, u32>,
    ) -> (Option<u32>, Vec<(index::SlotRef, index::Entry)>) {
        let mut bad = Vec::new();
        let next = self.index.scan_slots(cursor, bucket_budget, |slot, entry| {
            if index::is_flash(entry.location) {
                return; // Flash records are checked as they are read.
            }
            let (id, _) = inner.split_location(entry.location);
            *per_segment.entry(id).or_insert(0) += 1;
            let trusted = self.index_verified
                && self
                    .segments
                    .get(id as usize)
                    .and_then(|s| s.as_deref())
                    .is_some_and(OwnedSegment::is_clean);
            if !trusted && !self.entry_is_the_keys(inner, slot, entry) {
                bad.push((slot, entry));
            }
        });
        (next, bad)
    }

    /// Drops the entries pointing into segment `id` (still of stamp `seq`) at offsets where its
    /// walk finds no live record. Scans the whole index: only for a segment whose entries
    /// outnumber its live records, which only damage makes.
    pub(crate) fn drop_entries_off_the_walk(&mut self, inner: &Inner, id: u32, seq: u64) {
        let Some(owned) = self.segments.get(id as usize).and_then(|s| s.as_deref()) else {
            return;
        };
        if owned.fields.seq != seq {
            return;
        }
        let on_walk: std::collections::HashSet<u64> = record::walk(owned.log())
            .filter_map(|step| match step {
                record::Step::Record { offset, view } if view.live => {
                    Some(inner.join_location(id, offset))
                }
                _ => None,
            })
            .collect();
        let mut stray = Vec::new();
        let mut cursor = Some(0);
        while let Some(at) = cursor {
            cursor = self.index.scan_slots(at, 1024, |slot, entry| {
                if !index::is_flash(entry.location)
                    && inner.split_location(entry.location).0 == id
                    && !on_walk.contains(&entry.location)
                {
                    stray.push((slot, entry));
                }
            });
        }
        for (slot, entry) in stray {
            if self.index.remove_if(slot, entry) {
                self.count_removal(entry.hash24);
                self.drop_suspects(entry.hash24);
                self.dropped(inner, entry.location);
            }
        }
    }

    /// Verifies the invariants in the module docs. Costly: tests and `strata pool verify`.
    /// Damaged segments (damage found and skipped) are checked only for what damage cannot
    /// excuse: every valid live record indexed.
    pub(crate) fn check_integrity(&self, inner: &Inner) -> Result<(), String> {
        let mut live_records = 0usize;
        let mut damaged = false;
        let mut owners = Vec::new();
        for owned in self.segments.iter().flatten() {
            let id = owned.segment.id();
            let (mut live, mut live_parts) = (0u32, 0u32);
            for step in record::walk(owned.log()) {
                let (offset, view) = match step {
                    record::Step::Record { offset, view } => (offset, view),
                    record::Step::Damaged { offset, .. } | record::Step::Tail { offset, .. } => {
                        if owned.is_clean() {
                            return Err(format!(
                                "segment {id} offset {offset}: damage in a segment marked clean"
                            ));
                        }
                        damaged = true;
                        continue;
                    }
                };
                let location = inner.join_location(id, offset);
                let hash = inner.record_hash(&view);
                if view.live && inner.shard_of(hash) != usize::from(self.id) {
                    // Another shard's key: damage (a header naming the wrong shard).
                    if owned.is_clean() {
                        return Err(format!(
                            "segment {id} offset {offset}: another shard's key in a clean segment"
                        ));
                    }
                    damaged = true;
                    continue;
                }
                if view.live {
                    live += 1;
                    live_parts += u32::from(view.meta.kind == record::Kind::Part);
                    if view.meta.parts > 0 {
                        owners.push((view.key.to_vec(), view.meta.parts));
                    }
                    let h24 = index::hash24(hash);
                    if self.index.find(h24, |l| l == location).is_none() {
                        return Err(format!(
                            "segment {id} offset {offset}: live record not indexed"
                        ));
                    }
                }
            }
            if live != owned.live_items && owned.verified != Verified::Damaged {
                return Err(format!(
                    "segment {id}: {live} live records, counted {}",
                    owned.live_items
                ));
            }
            if live_parts != owned.live_parts && owned.verified != Verified::Unverified {
                return Err(format!(
                    "segment {id}: {live_parts} live parts, counted {}",
                    owned.live_parts
                ));
            }
            live_records += live as usize;
        }
        self.check_families(inner, &owners)?;
        self.check_entry_counts(live_records, damaged)
    }

    /// `check_integrity`'s count of the index's entries: flash ones as counted, memory ones
    /// one per live record (unless damage was skipped).
    fn check_entry_counts(&self, live_records: usize, damaged: bool) -> Result<(), String> {
        let mut flash_entries = 0u64;
        self.index.all_entries(|entry| {
            flash_entries += u64::from(index::is_flash(entry.location));
            true
        });
        if flash_entries != self.flash_items {
            return Err(format!(
                "{flash_entries} flash entries, counted {}",
                self.flash_items
            ));
        }
        let memory_entries = self.index.len() - flash_entries as usize;
        if live_records != memory_entries && !damaged {
            return Err(format!(
                "{live_records} live records but {memory_entries} memory index entries",
            ));
        }
        Ok(())
    }
}
