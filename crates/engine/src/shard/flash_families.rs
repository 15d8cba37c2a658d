//! Items of several records (an owner and its parts: `parts`) on the flash tier: an evicted
//! family is demoted whole, as one flash record (a bundle: `crate::flash::bundle`), and comes
//! back whole.
//!
//! - **Demotion** happens while a segment that holds one of the family's records is freed for
//!   eviction. Before the segment leaves the shard's table, the families of its parts are
//!   gathered whole (every member is still indexed and readable then) and their bundles
//!   appended ([`Shard::demote_families_in`]; a segment adopted unread at a restart is walked
//!   whatever its part count says, which stays 0 until the scrub walks it); an owner whose
//!   parts are all elsewhere is demoted when the walk meets it
//!   ([`Shard::demote_walked_family`]); the walk and
//!   `drop_families` then drop the memory records as they drop any evicted family, except that
//!   the owner's index entry is moved to the bundle instead of removed. A family is not
//!   demoted when it is expired, incomplete, being written by the transaction holding the
//!   shard (`Shard::building`: its parts may be half old, half new), larger than a region, or
//!   refused by admission or a tier that is behind: then it is dropped, as before.
//! - **Reads** (`crate::flash::tiering::FlashItem`): a large string's bundle is served as it
//!   lies; a large hash's is promoted first, or, under a read-only hold that cannot promote,
//!   read from a copy the transaction keeps (`Txn::read_part`).
//! - **Promotion** ([`Shard::promote`] of a bundle) writes the parts, then the owner, as a
//!   transaction writes a family, under `building` so that the cleaner the writes may run
//!   moves the new parts rather than dropping them as orphans. If the writes' own eviction took
//!   part of the family, it is dropped from memory and the bundle stays the item.
//! - A crash between the steps loses nothing a reader was told of: until the owner's entry
//!   points at the bundle, memory holds the family; after, the bundle does, and memory records
//!   left behind are orphans (a part) or an owner that lacks parts, which recovery drops
//!   before any read (`drop_recovered_broken_families`). The flash copy is the item's only
//!   copy, as for any demoted item: the tier may lose it, which is an eviction.

use crate::error::WriteError;
use crate::flash::{self, bundle, bundle::Bundle, tiering};
use crate::index::{self, Entry, SlotRef};
use crate::record::{self, Kind, RecordMeta, RecordView};
use crate::segment::OwnedSegment;
use crate::Inner;

use super::flash::FlashSuspect;
use super::{Held, Shard};

/// An owner record met by the walk of a segment already out of the shard's table (so a
/// lookup would not find it): what its bundle takes from it.
pub(super) struct WalkedOwner<'v> {
    pub(super) value: &'v [u8],
    pub(super) meta: RecordMeta,
    pub(super) cas: u64,
    pub(super) fetched: bool,
}

impl Shard {
    /// Before segment `id` is freed for eviction, while its records are still indexed and in
    /// the table: demotes the families its parts belong to ([`Shard::demote_family`]). An
    /// owner alone in the segment is demoted when the walk meets it.
    pub(super) fn demote_families_in(&mut self, inner: &Inner, id: u32, now_ms: u64) {
        let Some(owned) = self.segments[id as usize].as_ref() else {
            return;
        };
        // (A segment adopted from its book at a restart counts no parts until the scrub
        // walks it: it is walked whatever its count says.)
        if inner.flash.is_none() || (owned.live_parts == 0 && owned.is_clean()) {
            return;
        }
        let mut owners: Vec<Vec<u8>> = Vec::new();
        let mut note = |view: RecordView<'_>| {
            if view.live && view.meta.kind == Kind::Part {
                let owner = record::split_part_key(view.key).0;
                if owners.last().is_none_or(|last| last[..] != *owner) {
                    owners.push(owner.to_vec());
                }
            }
        };
        if owned.is_clean() {
            owned.for_each_trusted_record(|_, view| note(view));
        } else {
            // Not verified yet (adopted unread at a restart): each record's checksum is
            // checked, as the free's own walk checks them.
            for step in record::walk(owned.log()) {
                if let record::Step::Record { view, .. } = step {
                    note(view);
                }
            }
        }
        for owner in owners {
            self.demote_family(inner, &owner, None, now_ms);
        }
    }

    /// The flash location (tier bit set) of the bundle the family of `owner` went to,
    /// demoting it now if nothing earlier in this free did (see the module docs); `None` when
    /// it stays to be dropped. `walked`: the owner's record, when the walk of the segment
    /// being freed met it.
    pub(super) fn demote_family(
        &mut self,
        inner: &Inner,
        owner: &[u8],
        walked: Option<WalkedOwner<'_>>,
        now_ms: u64,
    ) -> Option<u64> {
        if let Some(&done) = self.family_demotions.get(owner) {
            return done;
        }
        let demoted = self.append_bundle(inner, owner, walked, now_ms);
        self.family_demotions.insert(owner.to_vec(), demoted);
        demoted
    }

    /// Gathers the family of `owner` and appends its bundle to the flash tier, its record
    /// written straight into the region's buffer; its location (tier bit set), or `None` (see
    /// the module docs for when).
    fn append_bundle(
        &self,
        inner: &Inner,
        owner: &[u8],
        walked: Option<WalkedOwner<'_>>,
        now_ms: u64,
    ) -> Option<u64> {
        let flash = inner.flash.as_ref()?;
        if self.is_building(owner) || !self.flash_index_has_room(inner) {
            return None;
        }
        let owner_hash = inner.hash(owner);
        let (record, parts) = self.family_of(inner, (owner, owner_hash), walked, now_ms)?;
        let meta = RecordMeta {
            cas: Some(record.cas),
            ..record.meta
        };
        let value_len = bundle::encoded_len(record.value, &parts);
        let record_len = record::record_size(owner.len(), value_len, &meta);
        let placement = flash::RecordPlacement {
            value_len: parts.iter().map(|part| part.len()).sum(),
            class: flash::class_of(meta.expires_at_ms, now_ms),
            expires_at_ms: meta.expires_at_ms,
            key_hash: owner_hash,
        };
        let placed = flash.append_with(record_len, placement, |into| {
            record::write_with(into, owner, value_len, &meta, |value| {
                bundle::encode_into(value, record.value, &parts);
            });
        });
        placed.map(index::flash_location)
    }

    /// The family of `owner` (hash `owner_hash`) as memory holds it: its owner's record
    /// (`walked`, or looked up) and its parts' values; `None` when it is not whole, expired,
    /// or admission refuses it.
    fn family_of<'s>(
        &'s self,
        inner: &Inner,
        (owner, owner_hash): (&[u8], u64),
        walked: Option<WalkedOwner<'s>>,
        now_ms: u64,
    ) -> Option<(WalkedOwner<'s>, Vec<&'s [u8]>)> {
        let record = match walked {
            Some(walked) => walked,
            None => {
                let found = self.lookup(inner, owner, owner_hash)?;
                WalkedOwner {
                    value: found.view.value,
                    meta: found.view.meta,
                    cas: found.cas,
                    fetched: found.entry.fetched(),
                }
            }
        };
        let meta = record.meta;
        if meta.parts == 0 || meta.expires_at_ms.is_some_and(|at| at <= now_ms) {
            return None; // An orphan's owner, a single record by now, or expired.
        }
        if inner.flash_admission == crate::config::FlashAdmission::Fetched && !record.fetched {
            return None;
        }
        let mut parts = Vec::with_capacity(meta.parts as usize);
        let mut name = Vec::new();
        for part in 0..meta.parts {
            let part_hash = inner.part_name(owner, owner_hash, part, &mut name);
            parts.push(self.lookup(inner, &name, part_hash)?.view.value);
        }
        Some((record, parts))
    }

    /// The walk of a segment freed for eviction met `view` (at `location`, indexed as
    /// `entry`), a member of a family: the bundle's location when the family went to flash
    /// and `view` is its owner, whose entry is then moved there ([`Shard::move_walked_owner`]).
    /// A part's family was offered before the walk (`demote_families_in`).
    pub(super) fn demote_walked_family(
        &mut self,
        inner: &Inner,
        owned: &OwnedSegment,
        view: &RecordView<'_>,
        (location, entry): (u64, Entry),
        now_ms: u64,
    ) -> Option<u64> {
        if view.meta.kind == Kind::Part {
            return None;
        }
        let (_, offset) = inner.split_location(location);
        let walked = WalkedOwner {
            value: view.value,
            meta: view.meta,
            cas: view.meta.cas.unwrap_or_else(|| owned.cas_at(offset)),
            fetched: entry.fetched(),
        };
        self.demote_family(inner, view.key, Some(walked), now_ms)
    }

    /// The walk of a segment freed for eviction met the owner `view` in `slot` (hash bits
    /// `h24`) of a family demoted to flash at `location`: its entry now points there (reads
    /// reset), and the family's drop is noted for its parts.
    pub(super) fn move_walked_owner(
        &mut self,
        slot: SlotRef,
        h24: u32,
        view: &RecordView<'_>,
        location: u64,
    ) {
        debug_assert!(view.meta.parts > 0 && view.meta.kind != Kind::Part);
        self.point_at_flash(slot, h24, location);
        self.note_family_drop(view);
    }

    /// Where the bundle of `owner`'s family went, if this free demoted it.
    pub(super) fn demoted_to(&self, owner: &[u8]) -> Option<u64> {
        self.family_demotions.get(owner).copied().flatten()
    }

    /// `drop_families` for a family demoted to `location` whose owner (`found`, hash
    /// `owner_hash`) is in a segment that stays: its record is marked dead and durable
    /// before the parts' marks (`parts`' crash rule), and its entry moves to the bundle.
    pub(super) fn move_owner_to_flash(
        &mut self,
        inner: &Inner,
        held: Held,
        (owner, owner_hash): (&[u8], u64),
        location: u64,
    ) -> Result<(), WriteError> {
        self.kill_record(inner, held, None)?;
        self.point_at_flash(held.slot, index::hash24(owner_hash), location);
        if inner.track_dirty {
            self.persist_dirty(inner)?;
        }
        self.drop_parts(inner, owner, owner_hash, 0..held.parts, false)
    }

    /// Forgets the families this free offered to flash (with `family_drops`).
    pub(super) fn forget_family_demotions(&mut self) {
        self.family_demotions.clear();
    }

    /// Promotes the bundle `bundle` of `key` (hash `hash`), read from the flash `location` as
    /// `item`: parts, then owner (see the module docs). Returns false, leaving the bundle the
    /// item, when the transaction holding the shard is writing the key's family, or the writes'
    /// eviction took part of it.
    pub(super) fn promote_family(
        &mut self,
        inner: &Inner,
        (key, hash): (&[u8], u64),
        location: u64,
        item: &tiering::FlashItem<'_>,
        bundle: Bundle<'_>,
    ) -> Result<bool, WriteError> {
        if self.is_building(key) {
            return Ok(false);
        }
        self.begin_building(key);
        let freed_before = self.segments_freed();
        let written = self.write_bundle(inner, (key, hash), item, bundle);
        self.end_building(key);
        written?;
        let whole = self.lookup(inner, key, hash).is_some() && self.family_is_whole(inner, key);
        if self.segments_freed() != freed_before && !whole {
            // The bundle stays the item: the owner's write listed it as a suspect, which the
            // owner's drop would drop with it.
            let h24 = index::hash24(hash);
            self.flash_suspects_forget(FlashSuspect { h24, location });
            if let Some(found) = self.lookup(inner, key, hash) {
                self.kill_item(inner, Held::of(found), key, hash)?;
            }
            return Ok(false);
        }
        self.promoted_from(inner, hash, location);
        Ok(true)
    }

    /// Writes the bundle's parts, then its owner, into memory.
    fn write_bundle(
        &mut self,
        inner: &Inner,
        (key, hash): (&[u8], u64),
        item: &tiering::FlashItem<'_>,
        bundle: Bundle<'_>,
    ) -> Result<u64, WriteError> {
        let part_meta = RecordMeta {
            kind: Kind::Part,
            ..RecordMeta::default()
        };
        let mut name = Vec::new();
        for (part, value) in (0u32..).zip(bundle.parts()) {
            let part_hash = inner.part_name(key, hash, part, &mut name);
            self.write(inner, &name, part_hash, value, part_meta, false)?;
        }
        let meta = RecordMeta {
            cas: Some(item.cas),
            parts: bundle.part_count(),
            ..item.meta
        };
        self.write(inner, key, hash, bundle.owner_value(), meta, true)
    }
}
