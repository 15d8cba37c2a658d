//! Recovery: rebuilding a shard's index and counts from its segments' logs after a restart, and the
//! snapshot export.

use crate::index;
use crate::record::{self, Damage};
use crate::recovery::RecoveryReport;
use crate::segment::{OwnedSegment, Verified};
use crate::Inner;

use super::Shard;

impl Shard {
    /// Recovery: walks a segment's whole data validating every record (`record::walk`), sets
    /// its log end and verified state, and lists its valid records' offsets for
    /// `recover_segment`. Damaged bytes between valid records are skipped and counted; invalid
    /// bytes with nothing valid after them are a write the crash tore (when `torn_possible`;
    /// else damage too), and the log ends where they start.
    pub(crate) fn scan_log(&mut self, id: u32, torn_possible: bool, report: &mut RecoveryReport) {
        let mut offsets = std::mem::take(&mut self.scan_offsets);
        offsets.clear();
        let mut causes: Vec<(usize, Damage)> = Vec::new();
        let owned = self.owned_mut(id);
        let mut walk = record::walk(owned.segment.data());
        let mut log_end = None;
        let mut damaged = false;
        for step in walk.by_ref() {
            match step {
                record::Step::Record { offset, .. } => offsets.push(offset as u32),
                record::Step::Damaged { offset, cause, .. } => {
                    damaged = true;
                    causes.push((offset, cause));
                }
                record::Step::Tail { offset, cause } => {
                    log_end = Some(offset);
                    if torn_possible {
                        report.records_torn += 1;
                    } else {
                        causes.push((offset, cause));
                    }
                }
            }
        }
        let end = log_end.unwrap_or(walk.offset());
        owned.write_offset = end;
        owned.verified = if damaged {
            Verified::Damaged
        } else {
            Verified::Clean
        };
        for (offset, cause) in causes {
            report.records_damaged += 1;
            self.counters.count_damage(cause);
            crate::scrub::log_damage(self.id, id, offset, cause, "skipped by recovery");
        }
        self.scan_offsets = offsets;
    }

    /// The seq of an owned segment.
    pub(crate) fn seq_of(&self, id: u32) -> u64 {
        self.owned(id).fields.seq
    }

    /// Recovery: indexes the live records `scan_log` listed, resolving duplicates by
    /// `(seq, offset)` and marking expired ones dead. Both index buckets of each record are
    /// prefetched a batch ahead, so the random index misses overlap instead of queueing.
    pub(crate) fn recover_segment(
        &mut self,
        inner: &Inner,
        id: u32,
        now_ms: u64,
        superseded_live: bool,
        report: &mut RecoveryReport,
    ) {
        const BATCH: usize = 16;
        let offsets = std::mem::take(&mut self.scan_offsets);
        let mut batch: Vec<(usize, u64)> = Vec::with_capacity(BATCH);
        for chunk in offsets.chunks(BATCH) {
            batch.clear();
            for &offset in chunk {
                let offset = offset as usize;
                // Validated by `scan_log` under this same exclusive lock.
                let Some(view) = record::read_trusted(&self.owned(id).log()[offset..]) else {
                    continue;
                };
                let (superseded, revive) = (view.superseded, view.superseded && superseded_live);
                if superseded && !revive {
                    // Dead after a process crash: marked so, as recovery marks every record it
                    // finds superseded, durably before the shard serves.
                    self.recover_supersede(inner, id, offset);
                    continue;
                }
                if view.live || revive {
                    let hash = inner.record_hash(&view);
                    if inner.shard_of(hash) != usize::from(self.id) {
                        // A valid record of another shard's key: the segment header naming
                        // this shard was damaged (with a checksum to match). Never indexed.
                        self.misplaced(id, offset, report);
                        continue;
                    }
                    if revive {
                        // Live again (see `record`); its replacement, if it survived too, is
                        // the newer and supersedes it below.
                        record::mark_live(&mut self.owned_mut(id).segment.data_mut()[offset..]);
                    }
                    self.index.prefetch(index::hash24(hash));
                    batch.push((offset, hash));
                }
            }
            for &(at, hash) in &batch {
                self.recover_record(inner, id, at, hash, now_ms, report);
            }
        }
        self.scan_offsets = offsets;
    }

    /// Recovery found a record of another shard's key in segment `id`: damage.
    pub(super) fn misplaced(&mut self, id: u32, offset: usize, report: &mut RecoveryReport) {
        self.owned_mut(id).verified = Verified::Damaged;
        report.records_damaged += 1;
        self.counters.count_damage(Damage::Location);
        crate::scrub::log_damage(self.id, id, offset, Damage::Location, "of another shard");
    }

    pub(super) fn recover_record(
        &mut self,
        inner: &Inner,
        id: u32,
        offset: usize,
        hash: u64,
        now_ms: u64,
        report: &mut RecoveryReport,
    ) {
        let location = inner.join_location(id, offset);
        let (expired, existing) = {
            let Some(view) = record::read_trusted(&self.owned(id).log()[offset..]) else {
                return;
            };
            let expired = view.meta.expires_at_ms.is_some_and(|at| at <= now_ms);
            let existing = (!expired)
                .then(|| self.lookup(inner, view.key, hash))
                .flatten()
                .map(|found| (found.slot, found.entry.location));
            (expired, existing)
        };
        if expired {
            report.records_expired += 1;
            self.recover_kill(id, offset);
            if !self.salvaged_flash.is_empty() {
                self.expired_h24.insert(index::hash24(hash));
            }
            return;
        }
        match existing {
            None => {
                self.recover_count(id, offset);
                self.insert_index(inner, hash, location, 0);
                report.items_recovered += 1;
            }
            Some((slot, other)) => {
                report.records_superseded += 1;
                let (other_id, other_offset) = inner.split_location(other);
                if (self.seq_of(other_id), other_offset) < (self.seq_of(id), offset) {
                    self.recover_uncount_supersede(inner, other_id, other_offset);
                    self.recover_count(id, offset);
                    self.index.relocate(slot, location);
                } else {
                    self.recover_supersede(inner, id, offset);
                }
            }
        }
    }

    /// Recovery: counts a record as live in its segment.
    pub(super) fn recover_count(&mut self, id: u32, offset: usize) {
        let owned = self.owned_mut(id);
        let Some(view) = record::read_trusted(&owned.log()[offset..]) else {
            return; // Validated by `scan_log`: cannot happen.
        };
        let (size, expires_at_ms) = (view.size_bytes, view.meta.expires_at_ms);
        let part = view.meta.kind == record::Kind::Part;
        let owner = (view.meta.parts > 0).then(|| view.key.to_vec());
        let first = owned.live_items == 0;
        owned.live_items += 1;
        owned.live_bytes += size as u64;
        owned.live_parts += u32::from(part);
        owned.cover_expiry(expires_at_ms, first);
        self.live_bytes += size as u64;
        self.recovered_owners.extend(owner);
    }

    /// Recovery: marks an uncounted expired record dead. Not persisted: the next recovery
    /// reaches the same decision (an expired record stays expired, whatever happens to the
    /// key's other records).
    pub(super) fn recover_kill(&mut self, id: u32, offset: usize) {
        record::mark_dead(&mut self.owned_mut(id).segment.data_mut()[offset..]);
    }

    /// Recovery: marks an uncounted record dead that a newer record of its key supersedes, and
    /// lists it for `persist_recovery_marks`.
    pub(super) fn recover_supersede(&mut self, inner: &Inner, id: u32, offset: usize) {
        self.recover_kill(id, offset);
        self.recovery_marks.push(inner.join_location(id, offset));
    }

    /// Recovery: un-counts and kills a record that a newer one supersedes.
    pub(super) fn recover_uncount_supersede(&mut self, inner: &Inner, id: u32, offset: usize) {
        let owned = self.owned_mut(id);
        let Some(view) = record::read_trusted(&owned.log()[offset..]) else {
            return; // Validated by `scan_log`: cannot happen.
        };
        let size = view.size_bytes as u64;
        let part = view.meta.kind == record::Kind::Part;
        owned.live_items = owned.live_items.saturating_sub(1);
        owned.live_bytes = owned.live_bytes.saturating_sub(size);
        owned.live_parts = owned.live_parts.saturating_sub(u32::from(part));
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.recover_supersede(inner, id, offset);
    }

    /// Appends this shard's DRAM state (index and segment bookkeeping) for a clean close.
    pub(crate) fn export(&self, out: &mut Vec<u8>) {
        self.index.export(out);
        let owned: Vec<&OwnedSegment> = self.segments.iter().flatten().map(|b| &**b).collect();
        out.extend_from_slice(&(owned.len() as u64).to_le_bytes());
        for segment in owned {
            out.extend_from_slice(&segment.segment.id().to_le_bytes());
            out.extend_from_slice(&(segment.write_offset as u64).to_le_bytes());
            out.extend_from_slice(&segment.live_items.to_le_bytes());
            out.extend_from_slice(&segment.live_bytes.to_le_bytes());
            out.extend_from_slice(&segment.expires_at_ms.unwrap_or(u64::MAX).to_le_bytes());
        }
    }
}
