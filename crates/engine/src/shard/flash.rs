//! The shard's side of the flash tier: demoting evicted items into it, promoting items back,
//! and dropping its entries (see `crate::flash::tiering` for the engine's side).
//!
//! A key has at most one index entry, of either tier. Entries of the flash tier carry
//! `FLASH_TIER_BIT`; memory lookups skip them (`Shard::lookup`), and their count is kept in
//! `Shard::flash_items`.

use crate::config::FlashAdmission;
use crate::error::WriteError;
use crate::flash::{self, tiering};
use crate::index::{self, is_flash, Entry, SlotRef, FLASH_TIER_BIT};
use crate::record::{RecordMeta, RecordView};
use crate::segment::OwnedSegment;
use crate::Inner;

use super::Shard;

/// Most flash entries one lookup reads (entries sharing a key's 24 hash bits in its buckets;
/// more than one is a rare collision).
pub(crate) const FLASH_CANDIDATES_MAX: usize = 4;

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

impl Shard {
    /// The flash entries with hash bits `h24`: the places a key missing from memory may be.
    pub(crate) fn flash_candidates(&self, h24: u32) -> FlashCandidates {
        let mut found = FlashCandidates::default();
        if self.flash_items == 0 {
            return found;
        }
        let _ = self.index.find(h24, |location| {
            if is_flash(location) && found.len < FLASH_CANDIDATES_MAX {
                found.locations[found.len] = location;
                found.len += 1;
            }
            false
        });
        found
    }

    /// Drops every flash entry with hash bits `h24`, unread: the key is being written or
    /// deleted in memory, so its flash copy is dead at once (another key sharing the hash bits
    /// loses its flash copy too: a miss, never a wrong value). Returns how many.
    pub(crate) fn drop_flash_slots(&mut self, h24: u32) -> usize {
        let mut dropped = 0;
        while self.flash_items > 0 {
            let Some((slot, _)) = self.index.find(h24, is_flash) else {
                break;
            };
            self.remove_flash_slot(slot);
            dropped += 1;
        }
        dropped
    }

    /// Drops the flash entry (hash bits, location) if it is still there: its region is being
    /// reclaimed, or a read found its record damaged. Returns whether it was there.
    pub(crate) fn unindex_flash(&mut self, h24: u32, location: u64) -> bool {
        debug_assert!(is_flash(location));
        match self.index.find(h24, |l| l == location) {
            Some((slot, _)) => {
                self.remove_flash_slot(slot);
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
            flash_location = location & !FLASH_TIER_BIT,
            "a flash record failed its checks (damaged, torn or reclaimed); it is dropped, not served"
        );
        self.damaged_reads.lock().push((h24, location));
    }

    fn remove_flash_slot(&mut self, slot: SlotRef) {
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
                if is_flash(entry.location) && !keep(entry.location & !FLASH_TIER_BIT) {
                    stale.push((slot, entry));
                }
            });
        }
        let mut dropped = 0;
        for (slot, entry) in stale {
            if self.index.remove_if(slot, entry) {
                dropped += 1;
            }
        }
        self.count_flash_items();
        dropped
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
        let meta = RecordMeta {
            cas: Some(item.cas),
            ..item.meta
        };
        // With no memory record, the write drops the flash entry and indexes the new record
        // as read once (a touch).
        self.write(inner, key, hash, item.value, meta, true)?;
        if let Some(flash) = &inner.flash {
            flash
                .counters
                .promoted_items
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(true)
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
        let (_, offset) = inner.split_location(location);
        let cas = view.meta.cas.unwrap_or_else(|| owned.cas_at(offset));
        let mut record = std::mem::take(&mut self.demote_scratch);
        tiering::demoted_record(&mut record, view.key, view.value, view.meta, cas);
        let class = flash::class_of(view.meta.expires_at_ms, now_ms);
        let placed = flash.append(&record, view.value.len(), class, view.meta.expires_at_ms);
        self.demote_scratch = record;
        let Some(flash_location) = placed else {
            return false;
        };
        self.index.relocate(slot, flash_location | FLASH_TIER_BIT);
        self.index.set_freq(slot, 0);
        self.flash_items += 1;
        true
    }
}
