//! Recovery: rebuilding shards and the index from the segments of a reopened pool.
//!
//! Every in-use segment is scanned from offset 0. Valid live records are indexed; when a key
//! has several, the one with the greatest `(segment seq, offset)` wins and the others are
//! marked dead. A record failing its checksum (a torn write, or damage) ends the scan of that
//! segment: nothing after it is trusted. Expired records are marked dead. Every recovered
//! segment is sealed; new writes go to fresh segments. A segment header that fails its
//! checksum frees the whole segment. Free segments go to the free list.

use strata_pool::Segment;

use crate::error::OpenError;
use crate::record::{self, Scan};
use crate::segment::{self, HeaderRead, OwnedSegment};
use crate::Inner;

/// What to do with the segments of a reopened pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryPlan {
    /// Validate and index every record.
    Recover,
    /// Free every segment: the pool was left unclean across a power loss or reboot under
    /// `Durability::None`, so its bytes are an unordered mix of old and new.
    DiscardAll,
}

/// What recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments holding data.
    pub segments_recovered: u64,
    /// Segments whose header was damaged (dropped).
    pub segments_corrupt: u64,
    /// Items indexed.
    pub items_recovered: u64,
    /// Records that failed validation (torn or damaged).
    pub records_invalid: u64,
    /// Older versions of keys superseded by a newer record.
    pub records_superseded: u64,
    /// Records that had expired while the server was down.
    pub records_expired: u64,
    /// Segments freed unread because of `RecoveryPlan::DiscardAll`.
    pub segments_discarded: u64,
}

pub(crate) fn recover(
    inner: &Inner,
    segments: Vec<Segment>,
    plan: RecoveryPlan,
) -> Result<RecoveryReport, OpenError> {
    let mut report = RecoveryReport::default();
    let mut owned = Vec::new();
    let mut free = Vec::new();
    let mut seq_max = 0;
    for mut segment in segments {
        match segment::read_header(segment.header()) {
            HeaderRead::InUse(_) if plan == RecoveryPlan::DiscardAll => {
                report.segments_discarded += 1;
                segment.header_mut().fill(0);
                segment.persist_header()?;
                free.push(segment);
            }
            HeaderRead::InUse(fields) if (fields.shard as usize) < inner.shards.len() => {
                seq_max = seq_max.max(fields.seq);
                owned.push(scan_segment(segment, fields, &mut report));
            }
            HeaderRead::Free => free.push(segment),
            HeaderRead::InUse(_) | HeaderRead::Corrupt => {
                report.segments_corrupt += 1;
                segment.header_mut().fill(0);
                segment.persist_header()?;
                free.push(segment);
            }
        }
    }
    report.segments_recovered = owned.len() as u64;
    {
        let mut seq = inner.seq.lock();
        seq.next = seq.next.max(seq_max + 1);
        seq.reserved_until = seq.reserved_until.max(seq.next);
    }
    let ids: Vec<(u16, u32)> = owned
        .iter()
        .map(|o| (o.fields.shard, o.segment.id()))
        .collect();
    for segment in owned {
        inner.shards[segment.fields.shard as usize]
            .0
            .write()
            .adopt(segment);
    }
    for (shard, id) in ids {
        index_segment(inner, shard, id, &mut report);
    }
    let mut pool = inner.free.lock();
    pool.in_use = report.segments_recovered as usize;
    pool.list = free;
    Ok(report)
}

/// Scans a segment's records to find where its log ends.
fn scan_segment(
    segment: Segment,
    fields: segment::HeaderFields,
    report: &mut RecoveryReport,
) -> OwnedSegment {
    let mut offset = 0;
    let data = segment.data();
    while offset < data.len() {
        match record::read(&data[offset..]) {
            Scan::Record(view) => offset += view.size_bytes,
            Scan::End => break,
            Scan::Invalid => {
                report.records_invalid += 1;
                break;
            }
        }
    }
    OwnedSegment {
        segment,
        fields,
        write_offset: offset,
        sealed: true,
        live_items: 0,
        live_bytes: 0,
        expires_at_ms: Some(0),
    }
}

/// Indexes the live records of an adopted segment, resolving duplicates by `(seq, offset)`.
fn index_segment(inner: &Inner, shard: u16, id: u32, report: &mut RecoveryReport) {
    let mut shard = inner.shards[shard as usize].0.write();
    let now_ms = inner.now_ms();
    let end = shard.segment_end(id);
    let mut offset = 0;
    while offset < end {
        let (size, live, expired, hash) = shard.record_facts(inner, id, offset, now_ms);
        if live && expired {
            report.records_expired += 1;
            shard.recover_kill(inner, id, offset);
        } else if live {
            let location = inner.join_location(id, offset);
            let seq = shard.seq_of(id);
            let key = shard.key_at(id, offset).to_vec();
            match shard
                .lookup(inner, &key, hash)
                .map(|f| (f.slot, f.entry.location))
            {
                None => {
                    shard.recover_count(id, offset, now_ms);
                    shard.index_insert(inner, hash, location);
                    report.items_recovered += 1;
                }
                Some((slot, other)) => {
                    report.records_superseded += 1;
                    let (other_id, other_offset) = inner.split_location(other);
                    if (shard.seq_of(other_id), other_offset) < (seq, offset) {
                        shard.recover_uncount_kill(inner, other_id, other_offset);
                        shard.recover_count(id, offset, now_ms);
                        shard.index.relocate(slot, location);
                    } else {
                        shard.recover_kill(inner, id, offset);
                    }
                }
            }
        }
        offset += size;
    }
}
