//! The scrub and repair: making sure a record damaged while no process held the pool is never
//! served, at no cost to reads once the pool has been checked.
//!
//! A restart that adopts segments without reading them (the clean-close snapshot, or the index
//! mapped from its files) leaves them `Verified::Unverified`, and an index mapped from its files
//! unverified too. While either holds, reads validate each record they touch (checksum, state,
//! lengths, and that it is a live record of the entry's key); a record that fails is treated as
//! absent and its entry is queued for `repair`. The scrub walks every unverified segment in the
//! background (`Engine::scrub_step`, run by the server's `strata-scrub` thread at the lowest
//! priority), marking it clean, or damaged with its damage counted and logged; then, where the
//! index was mapped or damage was found, it checks every index entry that is not known good and
//! drops the unsound ones. From then on reads decode records as they are.
//!
//! Invariants: a clean segment's log `[0, write_offset)` holds only valid records; an entry of a
//! verified index points at the start of a live record of its key, or, in a segment that is not
//! clean, at bytes that reads validate before serving.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::record::Damage;
use crate::Inner;

/// Index buckets whose entries one scrub step checks under a shard's read lock (about 400
/// entries, tens of microseconds).
const SCRUB_BUCKETS_PER_STEP: usize = 64;

/// Damage log lines written one by one; after these, one line per this many more.
const DAMAGE_LOG_LINES_MAX: u64 = 64;
const DAMAGE_LOG_EVERY: u64 = 1024;

static DAMAGE_LOGGED: AtomicU64 = AtomicU64::new(0);

/// Logs a damaged record (or index entry), rate-limited: the first [`DAMAGE_LOG_LINES_MAX`]
/// one per line, then every [`DAMAGE_LOG_EVERY`]-th with the running count.
pub(crate) fn log_damage(shard: u16, segment: u32, offset: usize, cause: Damage, what: &str) {
    let seen = DAMAGE_LOGGED.fetch_add(1, Ordering::Relaxed) + 1;
    if seen <= DAMAGE_LOG_LINES_MAX || seen.is_multiple_of(DAMAGE_LOG_EVERY) {
        tracing::warn!(
            shard,
            segment,
            offset,
            cause = cause.name(),
            damaged_so_far = seen,
            "damaged record: {what}; it is never served, the records around it are"
        );
    }
}

/// Where the scrub stands.
#[derive(Debug, Default)]
pub(crate) struct ScrubState {
    /// The shard being scrubbed.
    shard: usize,
    /// Its segments still to walk (`None`: not listed yet).
    segments: Option<Vec<(u32, u64)>>,
    /// The next index bucket position of its entry check, once its segments are done.
    entries: Option<u32>,
    /// Each walked segment's stamp and the live records its walk found.
    walked: HashMap<u32, (u64, u32)>,
    /// Entries the entry check found pointing into each walked segment.
    entries_found: HashMap<u32, u32>,
    /// Every shard is done.
    pub(crate) done: bool,
}

/// One step of the scrub: one segment walked, or one run of index buckets checked. Returns true
/// once everything is verified.
pub(crate) fn step(inner: &Inner, state: &mut ScrubState) -> bool {
    while !state.done {
        let Some(lock) = inner.shards.get(state.shard) else {
            state.done = true;
            break;
        };
        let lock = &lock.0;
        if lock.read().families_suspect() {
            lock.write().drop_broken_families(inner);
        }
        let segments = state
            .segments
            .get_or_insert_with(|| lock.read().unverified_segments());
        if let Some((id, seq)) = segments.pop() {
            let walked = lock.read().scrub_walk(inner, id, seq);
            if let Some(walked) = walked {
                state.walked.insert(id, (seq, walked.live.0));
                let mut shard = lock.write();
                shard.scrub_settle(inner, id, seq, &walked);
                shard.drop_broken_families(inner);
            }
            return false;
        }
        let needs_entries = {
            let shard = lock.read();
            !shard.index_verified || shard.has_damaged_segments()
        };
        if needs_entries {
            let cursor = state.entries.get_or_insert(0);
            let (next, bad) = lock.read().scrub_entries(
                inner,
                *cursor,
                SCRUB_BUCKETS_PER_STEP,
                &mut state.entries_found,
            );
            if !bad.is_empty() {
                let mut shard = lock.write();
                for (slot, entry) in bad {
                    shard.drop_slot_if_damaged(inner, slot, entry);
                }
                shard.drop_broken_families(inner);
            }
            match next {
                Some(next) => {
                    *cursor = next;
                    return false;
                }
                None => {
                    let mut shard = lock.write();
                    // A segment with more entries than its walk found live records has entries
                    // that point at records the walk does not reach (inside another record, on
                    // a resync's far side): sound to a direct read, but not the pool's.
                    for (&id, &(seq, live)) in &state.walked {
                        if state.entries_found.get(&id).copied().unwrap_or(0) > live {
                            shard.drop_entries_off_the_walk(inner, id, seq);
                        }
                    }
                    if !shard.index_verified {
                        shard.index.recount();
                    }
                    shard.index_verified = true;
                }
            }
        }
        *state = ScrubState {
            shard: state.shard + 1,
            ..ScrubState::default()
        };
    }
    true
}

/// Drops the index entries that reads found pointing at no valid record, and the families
/// (an owner and its parts) left lacking a part. Returns how many entries.
pub(crate) fn repair(inner: &Inner) -> u64 {
    let mut dropped = 0;
    for lock in inner.shards.iter() {
        let (found, broken_family) = {
            let shard = lock.0.read();
            (shard.take_damaged_reads(), shard.take_broken_family_read())
        };
        if found.is_empty() && !broken_family {
            continue;
        }
        let mut shard = lock.0.write();
        for (h24, location) in found {
            dropped += u64::from(shard.drop_if_damaged(inner, h24, location));
        }
        if broken_family {
            shard.suspect_families();
        }
        shard.drop_broken_families(inner);
    }
    dropped
}
