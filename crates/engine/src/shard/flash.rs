//! The shard's side of the flash tier: demoting evicted items into it, promoting items back,
//! and dropping its entries (see `crate::flash::tiering` for the engine's side).
//!
//! Entries of the flash tier carry `FLASH_TIER_BIT`; memory lookups skip them
//! (`Shard::lookup`), and their count is kept in `Shard::flash_items`.
//!
//! A key has at most one live copy: a read looks in memory first and on flash only when
//! memory misses. Writing a key to memory cannot tell, without a flash read, whether a flash
//! entry with the key's 24 hash bits is the key's older copy or the only copy of another key
//! (in a shard of a million flash items, one write in sixteen meets such an entry). So the
//! write leaves those entries indexed and lists them as *suspects* ([`FlashSuspect`]); the
//! flash thread reads each one's key and drops it only if memory holds that key (memory's copy
//! is always the newer: demotion moves a key's only copy to flash, promotion moves it back, and
//! a write puts the newest in memory). Until then,
//! memory holds the newer copy and answers first, and every path that takes the key's memory
//! entry out of the index (delete, eviction, demotion, expiry, damage) drops the suspects with
//! its hash bits first, unread, so an older copy can never become visible again.

use crate::config::FlashAdmission;
use crate::error::WriteError;
use crate::flash::{self, tiering};
use crate::index::{self, is_flash, Entry, SlotRef};
use crate::record::{RecordMeta, RecordView};
use crate::segment::OwnedSegment;
use crate::Inner;

use super::{Found, Shard};

/// A flash entry that may hold an older copy of a key written to memory since: its hash bits
/// and location (tier bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlashSuspect {
    pub(crate) h24: u32,
    pub(crate) location: u64,
}

/// The suspects of a shard, by hash bits: adding one, dropping those of a key's bits and
/// settling one each cost a hash lookup, whatever their number (a write storm over a large
/// flash tier makes thousands).
#[derive(Debug, Default)]
pub(crate) struct Suspects {
    by_h24: std::collections::HashMap<u32, Vec<u64>>,
    count: usize,
}

impl Suspects {
    fn add(&mut self, suspect: FlashSuspect) {
        let locations = self.by_h24.entry(suspect.h24).or_default();
        if !locations.contains(&suspect.location) {
            locations.push(suspect.location);
            self.count += 1;
        }
    }

    /// Removes and returns the locations of the suspects with hash bits `h24`.
    fn take(&mut self, h24: u32) -> Vec<u64> {
        let locations = self.by_h24.remove(&h24).unwrap_or_default();
        self.count -= locations.len();
        locations
    }

    /// Removes one suspect; returns whether it was there.
    fn remove(&mut self, suspect: FlashSuspect) -> bool {
        let Some(locations) = self.by_h24.get_mut(&suspect.h24) else {
            return false;
        };
        let Some(at) = locations.iter().position(|&l| l == suspect.location) else {
            return false;
        };
        locations.swap_remove(at);
        if locations.is_empty() {
            self.by_h24.remove(&suspect.h24);
        }
        self.count -= 1;
        true
    }

    fn retain(&mut self, mut keep: impl FnMut(FlashSuspect) -> bool) {
        let mut count = 0;
        self.by_h24.retain(|&h24, locations| {
            locations.retain(|&location| keep(FlashSuspect { h24, location }));
            count += locations.len();
            !locations.is_empty()
        });
        self.count = count;
    }

    /// Up to `max` suspects, for the flash thread to read.
    fn some(&self, max: usize) -> Vec<FlashSuspect> {
        self.by_h24
            .iter()
            .flat_map(|(&h24, locations)| {
                locations
                    .iter()
                    .map(move |&location| FlashSuspect { h24, location })
            })
            .take(max)
            .collect()
    }
}

/// Most flash entries one lookup reads (entries sharing a key's 24 hash bits in its buckets;
/// more than one is a rare collision).
pub(crate) const FLASH_CANDIDATES_MAX: usize = 8;

/// Flash locations that may hold a key's record.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlashCandidates {
    locations: [u64; FLASH_CANDIDATES_MAX],
    len: usize,
}

impl FlashCandidates {
    pub(crate) fn as_slice(&self) -> &[u64] {
        &self.locations[..self.len]
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Where a key is, found in one walk of its index buckets.
pub(crate) enum Lookup<'s> {
    /// Memory holds its record (expired or not: an expired one still shadows any flash copy).
    Memory(Found<'s>),
    /// Memory does not: the flash entries that may hold it (none without a flash tier).
    Flash(FlashCandidates),
}

impl Shard {
    /// The key's record in memory, else its flash candidates ([`Shard::flash_candidates`]),
    /// in one walk of its buckets (a read of a key memory does not hold walked them three
    /// times: memory unexpired, memory at all, flash).
    pub(crate) fn lookup_or_flash(&self, inner: &Inner, key: &[u8], hash: u64) -> Lookup<'_> {
        let flash = inner.flash.as_ref().filter(|_| self.flash_items > 0);
        let Some(flash) = flash else {
            return self
                .lookup(inner, key, hash)
                .map_or(Lookup::Flash(FlashCandidates::default()), Lookup::Memory);
        };
        let h24 = index::hash24(hash);
        let mut candidates = FlashCandidates::default();
        let mut hit = None;
        let found = self.index.find(h24, |location| {
            if !is_flash(location) {
                return self.is_key_at(inner, key, hash, location, &mut hit);
            }
            if candidates.len < FLASH_CANDIDATES_MAX
                && flash.may_hold(index::flash_units(location), hash)
            {
                candidates.locations[candidates.len] = location;
                candidates.len += 1;
            }
            false
        });
        match (found, hit) {
            (Some((slot, entry)), Some((view, cas))) => Lookup::Memory(Found {
                slot,
                entry,
                view,
                cas,
            }),
            _ => Lookup::Flash(candidates),
        }
    }

    /// The flash entries of the key with `hash`: the places a key missing from memory may be
    /// (entries with its 24 hash bits whose region's key filter does not rule the key out).
    pub(crate) fn flash_candidates(&self, inner: &Inner, hash: u64) -> FlashCandidates {
        let mut found = FlashCandidates::default();
        let Some(flash) = inner.flash.as_ref() else {
            return found;
        };
        self.for_each_flash_entry(index::hash24(hash), |location| {
            if found.len < FLASH_CANDIDATES_MAX
                && flash.may_hold(index::flash_units(location), hash)
            {
                found.locations[found.len] = location;
                found.len += 1;
            }
        });
        found
    }

    /// Calls `f` with the location of every flash entry with hash bits `h24`.
    fn for_each_flash_entry(&self, h24: u32, mut f: impl FnMut(u64)) {
        if self.flash_items == 0 {
            return;
        }
        let _ = self.index.find(h24, |location| {
            if is_flash(location) {
                f(location);
            }
            false
        });
    }

    /// Drops, unread, every flash entry that may be the key with `hash`'s copy: the key is
    /// being deleted without a read of it (a store with an expiry already past), so its flash
    /// copy is dead at once. An entry sharing the key's 24 hash bits whose region's key filter
    /// rules the key out is another key's and stays; one the filter cannot rule out (a false
    /// positive, or a region not filtered yet) goes too (that other key then misses, never
    /// reads a wrong value). Returns how many were dropped.
    pub(crate) fn drop_flash_slots(&mut self, inner: &Inner, hash: u64) -> usize {
        let h24 = index::hash24(hash);
        let flash = inner.flash.as_ref();
        let mut dropped = 0;
        for location in self.flash_locations(h24) {
            let others = flash.is_some_and(|f| f.rules_out(index::flash_units(location), hash));
            if !others && self.unindex_flash(h24, location) {
                dropped += 1;
            }
        }
        dropped
    }

    /// Lists the flash entries with `hash`'s 24 bits as suspects: its key has just been
    /// written to memory (see the module docs).
    pub(crate) fn suspect_flash_copies(&mut self, hash: u64) {
        // Every one, however many: a copy left off the list could outlive the key's memory
        // copy (reads look at the first few candidates only, which costs misses, never this).
        let h24 = index::hash24(hash);
        for location in self.flash_locations(h24) {
            self.add_suspect(FlashSuspect { h24, location });
        }
    }

    /// The locations of the flash entries with hash bits `h24` (no allocation when none).
    fn flash_locations(&self, h24: u32) -> Vec<u64> {
        let mut found = Vec::new();
        self.for_each_flash_entry(h24, |location| found.push(location));
        found
    }

    fn add_suspect(&mut self, suspect: FlashSuspect) {
        self.flash_suspects.add(suspect);
    }

    /// Takes the memory entry in `slot` (hash bits `h24`) out of the index; first drops, unread,
    /// the flash suspects with those bits, which may be the key's older copies.
    pub(super) fn remove_memory_slot(&mut self, slot: SlotRef, h24: u32) {
        self.index.remove(slot);
        self.count_removal(h24);
        self.drop_suspects(h24);
    }

    /// Drops the flash entries of the suspects with hash bits `h24` (see the module docs).
    pub(super) fn drop_suspects(&mut self, h24: u32) {
        if self.flash_suspects.count == 0 {
            return;
        }
        for location in self.flash_suspects.take(h24) {
            self.unindex_flash(h24, location);
        }
    }

    /// How many suspects wait for the flash thread.
    pub(crate) fn flash_suspect_count(&self) -> u64 {
        self.flash_suspects.count as u64
    }

    /// Up to `max` of the suspects waiting for the flash thread.
    pub(crate) fn flash_suspects(&self, max: usize) -> Vec<FlashSuspect> {
        self.flash_suspects.some(max)
    }

    /// Settles a suspect the flash thread has read: `key` is the key its record holds (`None`:
    /// no valid record). Its entry is dropped when memory holds that key (the flash copy is the
    /// older) or the record is not valid; otherwise it is another key's only copy and stays.
    /// Nothing happens if the suspect was settled meanwhile. Returns whether it was dropped.
    pub(crate) fn settle_suspect(
        &mut self,
        inner: &Inner,
        suspect: FlashSuspect,
        key: Option<&[u8]>,
    ) -> bool {
        if !self.flash_suspects.remove(suspect) {
            return false;
        }
        let older = match key {
            Some(key) => self.lookup(inner, key, inner.hash(key)).is_some(),
            None => true,
        };
        older && self.unindex_flash(suspect.h24, suspect.location)
    }

    /// After an open that followed a crash: lists as suspects the flash entries that share
    /// hash bits with a memory entry (the crash lost the list; a clean close settles it, and
    /// the open after one does not call this).
    pub(crate) fn suspect_flash_beside_memory(&mut self) {
        if self.flash_items == 0 {
            return;
        }
        // One bit per value of the 24 hash bits (2 MiB) marks those memory entries hold; one
        // pass then collects the flash entries beside them. No copy of every flash entry, no
        // random bucket read per flash entry (15M of each at full size).
        let mut memory_bits = vec![0u64; (1usize << index::HASH_BITS) / 64];
        self.index.all_entries(|entry| {
            if !is_flash(entry.location) {
                memory_bits[entry.hash24 as usize / 64] |= 1 << (entry.hash24 % 64);
            }
            true
        });
        let mut suspects = Vec::new();
        self.index.all_entries(|entry| {
            let beside_memory =
                memory_bits[entry.hash24 as usize / 64] & (1 << (entry.hash24 % 64)) != 0;
            if is_flash(entry.location) && beside_memory {
                suspects.push(entry);
            }
            true
        });
        for entry in suspects {
            self.add_suspect(FlashSuspect {
                h24: entry.hash24,
                location: entry.location,
            });
        }
    }

    /// Drops the flash entry (hash bits, location) if it is still there: its region is being
    /// reclaimed, or a read found its record damaged. Returns whether it was there.
    pub(crate) fn unindex_flash(&mut self, h24: u32, location: u64) -> bool {
        debug_assert!(is_flash(location));
        match self.index.find(h24, |l| l == location) {
            Some((slot, _)) => {
                self.remove_flash_slot(slot, h24);
                true
            }
            None => false,
        }
    }

    /// Queues the flash entry (hash bits, location) for `repair`: a read found no valid
    /// record there. Logged, since only damage or a lost write puts one there.
    pub(crate) fn queue_flash_damage(&self, h24: u32, location: u64) {
        tracing::warn!(
            shard = self.id,
            flash_location = index::flash_units(location),
            "a flash record failed its checks (damaged, torn or reclaimed); it is dropped, not served"
        );
        self.damaged_reads.lock().push((h24, location));
    }

    fn remove_flash_slot(&mut self, slot: SlotRef, h24: u32) {
        self.count_removal(h24);
        self.index.remove(slot);
        self.flash_items = self.flash_items.saturating_sub(1);
    }

    /// Drops every flash entry for which `keep(location)` is false (all of them for a flush,
    /// those whose region did not survive for an open). Returns how many were dropped.
    pub(crate) fn drop_flash_entries(&mut self, mut keep: impl FnMut(u64) -> bool) -> u64 {
        let mut stale: Vec<(SlotRef, Entry)> = Vec::new();
        let mut cursor = Some(0);
        while let Some(at) = cursor {
            cursor = self.index.scan_slots(at, 1024, |slot, entry| {
                if is_flash(entry.location) && !keep(index::flash_units(entry.location)) {
                    stale.push((slot, entry));
                }
            });
        }
        let mut dropped = 0;
        for (slot, entry) in stale {
            if self.index.remove_if(slot, entry) {
                self.count_removal(entry.hash24);
                dropped += 1;
            }
        }
        let index = &self.index;
        self.flash_suspects
            .retain(|s| index.find(s.h24, |l| l == s.location).is_some());
        self.count_flash_items();
        dropped
    }

    /// Indexes again the flash entries read back from the tables a process crash left this
    /// shard with ([`Shard::salvaged_flash`]), once recovery has indexed its segments. An
    /// entry indexed already is skipped; an entry beside a memory entry with its hash bits is
    /// settled as any suspect after a crash is (memory's copy is the newer). An entry with the
    /// hash bits of a record recovery dropped as expired is dropped unread, as a suspect is
    /// when its memory entry leaves (it may be an older copy of that key, unsettled when the
    /// process died: the expired record had superseded it). Entries whose region did not
    /// survive are dropped afterwards with every other (`keep_flash_entries`). Returns how
    /// many were indexed.
    pub(crate) fn restore_salvaged_flash(&mut self, inner: &Inner) -> u64 {
        let salvaged = std::mem::take(&mut self.salvaged_flash);
        let expired_h24 = std::mem::take(&mut self.expired_h24);
        let mut restored = 0;
        for entry in salvaged {
            if self.flash_items >= inner.flash_items_per_shard_max {
                break;
            }
            if expired_h24.contains(&entry.hash24)
                || self
                    .index
                    .find(entry.hash24, |l| l == entry.location)
                    .is_some()
            {
                continue;
            }
            self.insert_entry(inner, entry.hash24, entry.location, entry.freq());
            self.flash_items += 1;
            restored += 1;
        }
        restored
    }

    /// Counts the flash entries from the tables (after an open or a bulk drop).
    pub(crate) fn count_flash_items(&mut self) {
        let mut count = 0;
        self.index.all_entries(|entry| {
            count += u64::from(is_flash(entry.location));
            true
        });
        self.flash_items = count;
    }

    /// Flash entries this shard indexes.
    pub(crate) fn flash_items(&self) -> u64 {
        self.flash_items
    }

    /// Moves the key's flash record at `location` (read as `item`) back into memory, as one
    /// more read of it. Returns false, changing nothing, when the entry no longer points there
    /// (a write, delete or reclaim came first).
    pub(crate) fn promote(
        &mut self,
        inner: &Inner,
        key: &[u8],
        hash: u64,
        location: u64,
        item: &tiering::FlashItem<'_>,
    ) -> Result<bool, WriteError> {
        if self
            .index
            .find(index::hash24(hash), |l| l == location)
            .is_none()
        {
            return Ok(false);
        }
        if let Some(bundle) = item.bundle {
            return self.promote_family(inner, (key, hash), location, item, bundle);
        }
        let meta = RecordMeta {
            cas: Some(item.cas),
            ..item.meta
        };
        // With no memory record, the write indexes the new record as read once (a touch); the
        // flash copy it was read from is dropped here, not left to the flash thread.
        self.write(inner, key, hash, item.value, meta, true)?;
        self.promoted_from(inner, hash, location);
        Ok(true)
    }

    /// Takes `suspect` off the list, if it is on it (its entry is known to be the key's only
    /// copy again).
    pub(super) fn flash_suspects_forget(&mut self, suspect: FlashSuspect) {
        self.flash_suspects.remove(suspect);
    }

    /// After a promotion of the key with `hash` wrote it to memory: its flash entry at
    /// `location` goes (not left to the flash thread), counted as promoted.
    pub(super) fn promoted_from(&mut self, inner: &Inner, hash: u64, location: u64) {
        let h24 = index::hash24(hash);
        self.flash_suspects.remove(FlashSuspect { h24, location });
        self.unindex_flash(h24, location);
        if let Some(flash) = &inner.flash {
            flash
                .counters
                .promoted_items
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether the index's share for flash entries has room for one more; when it has not,
    /// the flash thread reclaims the oldest region, and until then evicted items are dropped,
    /// counted as refused.
    pub(super) fn flash_index_has_room(&self, inner: &Inner) -> bool {
        if self.flash_items < inner.flash_items_per_shard_max {
            return true;
        }
        if let Some(flash) = inner.flash.as_ref() {
            flash
                .counters
                .refused_items
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        false
    }

    /// Points the memory entry in `slot` (hash bits `h24`) at its item's new flash record at
    /// `location` (tier bit set): a demotion. Its reads start over, and the key's older flash
    /// copies among the suspects go (see the module docs); the new entry is not a suspect.
    pub(super) fn point_at_flash(&mut self, slot: SlotRef, h24: u32, location: u64) {
        debug_assert!(is_flash(location));
        self.index.relocate(slot, location);
        self.index.set_freq(slot, 0);
        self.flash_items += 1;
        // Removing slots may move others, so this comes after the last use of `slot`.
        self.drop_suspects(h24);
    }

    /// Offers an evicted memory record to the flash tier; on success its entry points there
    /// (frequency reset, fetched kept) and the caller keeps it indexed. False when there is no
    /// flash tier, admission refuses the item, or the tier is behind.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn demote(
        &mut self,
        inner: &Inner,
        owned: &OwnedSegment,
        slot: SlotRef,
        entry: Entry,
        view: &RecordView<'_>,
        location: u64,
        now_ms: u64,
    ) -> bool {
        let Some(flash) = inner.flash.as_ref() else {
            return false;
        };
        if inner.flash_admission == FlashAdmission::Fetched && !entry.fetched() {
            return false;
        }
        if !self.flash_index_has_room(inner) {
            return false;
        }
        let (_, offset) = inner.split_location(location);
        let cas = view.meta.cas.unwrap_or_else(|| owned.cas_at(offset));
        let mut record = std::mem::take(&mut self.demote_scratch);
        tiering::demoted_record(&mut record, view.key, view.value, view.meta, cas);
        let class = flash::class_of(view.meta.expires_at_ms, now_ms);
        let placed = flash.append(
            &record,
            view.value.len(),
            class,
            view.meta.expires_at_ms,
            inner.record_hash(view),
        );
        self.demote_scratch = record;
        let Some(flash_location) = placed else {
            return false;
        };
        self.point_at_flash(slot, entry.hash24, index::flash_location(flash_location));
        true
    }
}
