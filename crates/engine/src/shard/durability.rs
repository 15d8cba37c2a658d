//! What a shard persists and when: dirty ranges, dead marks waiting for the commit that makes their
//! replacements durable, and the marks recovery decided.

use std::sync::atomic::Ordering;

use crate::error::WriteError;
use crate::record;
use crate::Inner;

use super::{Shard, MARK_RUN_GAP_BYTES};

impl Shard {
    /// Makes a write durable as the durability level says: now, or at the next commit.
    pub(super) fn written(
        &mut self,
        inner: &Inner,
        id: u32,
        offset: usize,
        len: usize,
    ) -> Result<(), WriteError> {
        if inner.sync_inline {
            inner.persisted(self.owned(id).segment.persist_data(offset, len))?;
        } else if inner.track_dirty {
            let (start, end) = (offset as u32, (offset + len) as u32);
            match self.dirty.last_mut() {
                Some(last) if last.0 == id && start <= last.2 && end >= last.1 => {
                    last.1 = last.1.min(start);
                    last.2 = last.2.max(end);
                }
                _ => self.dirty.push((id, start, end)),
            }
            // Release: pairs with the AcqRel swap in `Inner::commit`.
            inner.dirty_any.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Whole-pool commits: the ranges are covered by the caller's whole-pool persist.
    pub(crate) fn forget_dirty_ranges(&mut self) {
        self.dirty.clear();
    }

    /// Writes the dead marks of records superseded since the last commit; the caller has made
    /// their replacements durable. Returns the marks as runs of nearby bytes, `(segment, start,
    /// end)`, so a caller that persists ranges does it once per run rather than once per mark.
    pub(crate) fn write_pending_marks(&mut self, inner: &Inner) -> Vec<(u32, usize, usize)> {
        let mut pending = std::mem::take(&mut self.pending_dead);
        pending.sort_unstable();
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        for &location in &pending {
            let (id, offset) = inner.split_location(location);
            let Some(owned) = self.segments[id as usize].as_deref_mut() else {
                continue;
            };
            let data = &mut owned.segment.data_mut()[offset..];
            if !record::is_superseded(data) {
                continue; // Marked early, by a delete of its replacement (`kill_record`).
            }
            record::mark_dead(data);
            add_to_runs(&mut runs, id, offset, offset + 1);
        }
        pending.clear();
        self.pending_dead = pending;
        self.pending_by_replacement.clear();
        runs
    }

    /// Ends a shard's recovery: persists the dead marks it wrote over superseded records, so
    /// that no later power loss finds such a record live again. Without this, a delete (or a
    /// dead mark) of the newer record made durable in the new session would leave the older
    /// one its key's newest live record on the media: a value resurrected after an
    /// acknowledged delete. The newer records are durable already: read from the media after
    /// a power loss, persisted by `recovery::recover` before the scan after a process crash.
    /// Only where a power loss keeps the pool (`interval`, `sync`).
    pub(crate) fn persist_recovery_marks(&mut self, inner: &Inner) -> Result<(), WriteError> {
        let mut marks = std::mem::take(&mut self.recovery_marks);
        if !inner.survives_power_loss() {
            return Ok(());
        }
        marks.sort_unstable();
        let mut runs: Vec<(u32, usize, usize)> = Vec::new();
        for location in marks {
            let (id, offset) = inner.split_location(location);
            if self.segments[id as usize].is_some() {
                add_to_runs(&mut runs, id, offset, offset + 1);
            }
        }
        for run in runs {
            self.persist_run(inner, run)?;
        }
        Ok(())
    }

    pub(super) fn persist_run(
        &self,
        inner: &Inner,
        (id, start, end): (u32, usize, usize),
    ) -> Result<(), WriteError> {
        let owned = self.segments[id as usize]
            .as_deref()
            .expect("run of an owned segment");
        inner.persisted(owned.segment.persist_data(start, end - start))
    }

    /// Persists the ranges written since the last commit, merged per segment, then writes and
    /// persists the dead marks their records wait for. A persist that fails leaves every range
    /// dirty and every mark pending: a later commit persists the ranges again before it may
    /// write a mark (a mark durable before its replacement would lose the key to a power cut).
    pub(crate) fn persist_dirty(&mut self, inner: &Inner) -> Result<(), WriteError> {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        if let Err(error) = self.persist_ranges(inner, &dirty) {
            self.dirty = dirty; // All still dirty (nothing is written while they persist).
            return Err(error);
        }
        dirty.clear();
        self.dirty = dirty;
        // Only now, with every replacement durable, may the old records be marked dead.
        for run in self.write_pending_marks(inner) {
            self.persist_run(inner, run)?;
        }
        Ok(())
    }

    /// Persists `dirty` (sorted by segment), merged per segment.
    fn persist_ranges(&self, inner: &Inner, dirty: &[(u32, u32, u32)]) -> Result<(), WriteError> {
        let mut at = 0;
        while at < dirty.len() {
            let (id, mut start, mut end) = dirty[at];
            at += 1;
            while at < dirty.len() && dirty[at].0 == id {
                start = start.min(dirty[at].1);
                end = end.max(dirty[at].2);
                at += 1;
            }
            // A segment freed since was made durable (free header) when it was freed.
            if let Some(owned) = self.segments[id as usize].as_deref() {
                let (start, end) = (start as usize, end as usize);
                inner.persisted(owned.segment.persist_data(start, end - start))?;
            }
        }
        Ok(())
    }
}

/// Adds the bytes `start..end` of segment `id` to `runs` (given in order): extends the last
/// run when they are near it, so a caller persisting ranges does it once per run.
pub(super) fn add_to_runs(runs: &mut Vec<(u32, usize, usize)>, id: u32, start: usize, end: usize) {
    match runs.last_mut() {
        Some(run) if run.0 == id && start < run.2 + MARK_RUN_GAP_BYTES => run.2 = run.2.max(end),
        _ => runs.push((id, start, end)),
    }
}
