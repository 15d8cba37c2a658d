//! The clean-close snapshot: each shard's index and segment bookkeeping, saved in the pool's
//! sidecar at `Engine::close` and loaded at the next open instead of scanning every record.
//!
//! Payload (little-endian): `u32` shard count, then per shard the index as `Index::export`
//! writes it, a `u64` segment count and per segment `u32 id, u64 write_offset, u32 live_items,
//! u64 live_bytes, u64 expires_at_ms (u64::MAX: never)`. The pool binds the sidecar to the
//! exact clean state it was written for; anything inconsistent makes the open fall back to a
//! full recovery scan.

use strata_pool::Segment;

use crate::index::Index;
use crate::recovery::{self, RecoveryReport};
use crate::segment::{self, Book, HeaderRead, OwnedSegment};
use crate::Inner;

struct SavedShard {
    index: Index,
    /// Each segment's id and bookkeeping.
    segments: Vec<(u32, Book)>,
}

/// Builds the payload. The caller holds every shard's lock.
pub(crate) fn save(shards: &[&crate::shard::Shard]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(shards.len() as u32).to_le_bytes());
    for shard in shards {
        shard.export(&mut out);
    }
    out
}

fn parse(
    payload: &[u8],
    shard_count: usize,
    segment_size: usize,
    pool_bytes: usize,
) -> Option<Vec<SavedShard>> {
    // An index is part of the memory budget: never more buckets than the pool's bytes hold.
    let buckets_max = pool_bytes / std::mem::size_of::<strata_pool::AtomicLine>();
    let count = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    if count != shard_count {
        return None;
    }
    let mut at = 4;
    let mut shards = Vec::with_capacity(count);
    for _ in 0..count {
        let (index, used) = Index::import(&payload[at..], buckets_max)?;
        at += used;
        let word = |at: usize| {
            Some(u64::from_le_bytes(
                payload.get(at..at + 8)?.try_into().ok()?,
            ))
        };
        let half = |at: usize| {
            Some(u32::from_le_bytes(
                payload.get(at..at + 4)?.try_into().ok()?,
            ))
        };
        let segment_count = word(at)? as usize;
        at += 8;
        let mut segments = Vec::with_capacity(segment_count.min(1 << 24));
        for _ in 0..segment_count {
            let expires = word(at + 24)?;
            let book = Book {
                write_offset: word(at + 4)? as usize,
                live_items: half(at + 12)?,
                live_bytes: word(at + 16)?,
                expires_at_ms: (expires != u64::MAX).then_some(expires),
            };
            if !book.is_plausible(segment_size) {
                return None;
            }
            segments.push((half(at)?, book));
            at += 32;
        }
        shards.push(SavedShard { index, segments });
    }
    (at == payload.len()).then_some(shards)
}

/// The flash entries of each shard's index in `payload`, if it parses for this geometry.
pub(crate) fn flash_entries(
    payload: &[u8],
    shard_count: usize,
    segment_size: usize,
    pool_bytes: usize,
) -> Option<Vec<Vec<crate::index::Entry>>> {
    let saved = parse(payload, shard_count, segment_size, pool_bytes)?;
    Some(
        saved
            .iter()
            .map(|shard| crate::open::flash_entries(&shard.index))
            .collect(),
    )
}

/// Restores shards from a snapshot. Returns the segments untouched when the snapshot does not
/// match the pool, so the caller can fall back to a full recovery.
pub(crate) fn restore(
    inner: &Inner,
    segments: Vec<Segment>,
    payload: &[u8],
) -> Result<RecoveryReport, Vec<Segment>> {
    let pool_bytes = segments.len() * inner.segment_size_bytes;
    let Some(saved) = parse(
        payload,
        inner.shards.len(),
        inner.segment_size_bytes,
        pool_bytes,
    ) else {
        return Err(segments);
    };
    let mut by_id: Vec<Option<(usize, Book)>> = vec![None; segments.len()];
    for (shard, saved_shard) in saved.iter().enumerate() {
        for &(id, book) in &saved_shard.segments {
            match by_id.get_mut(id as usize) {
                Some(slot @ None) => *slot = Some((shard, book)),
                _ => return Err(segments),
            }
        }
    }
    let consistent = segments.iter().all(|segment| {
        match (
            segment::read_header(segment.header()),
            by_id[segment.id() as usize],
        ) {
            (HeaderRead::InUse(fields), Some((shard, _))) => fields.shard as usize == shard,
            (HeaderRead::Free, None) => true,
            _ => false,
        }
    });
    // Entries are not checked here (a pass over the whole index, half the restore's time):
    // the restored index is unverified, so reads validate what they touch until the scrub has
    // checked every entry.
    if !consistent {
        return Err(segments);
    }
    Ok(apply(inner, segments, saved, &by_id))
}

fn apply(
    inner: &Inner,
    segments: Vec<Segment>,
    saved: Vec<SavedShard>,
    by_id: &[Option<(usize, Book)>],
) -> RecoveryReport {
    let mut report = RecoveryReport::default();
    let mut free = Vec::new();
    let mut seq_max = 0;
    for segment in segments {
        let HeaderRead::InUse(fields) = segment::read_header(segment.header()) else {
            free.push(segment);
            continue;
        };
        let (shard, book) = by_id[segment.id() as usize].expect("checked consistent");
        seq_max = seq_max.max(fields.seq);
        report.segments_recovered += 1;
        inner.shards[shard]
            .0
            .write()
            .adopt(OwnedSegment::reopened(segment, fields, book));
    }
    for (shard, saved_shard) in saved.into_iter().enumerate() {
        report.items_recovered += saved_shard.index.len() as u64;
        let mut shard = inner.shards[shard].0.write();
        shard.index = saved_shard.index;
        // The payload is checksummed, but the scrub checks its entries anyway (a snapshot that
        // a faulty process wrote, or that no longer matches its pool): reads validate until then.
        shard.index_verified = false;
    }
    recovery::settle(inner, seq_max, report.segments_recovered as usize, free);
    report.from_snapshot = true;
    report
}
