//! Recovery: rebuilding shards and the index from the segments of a reopened pool.
//!
//! Every in-use segment is scanned from offset 0. Valid live records are indexed; when a key
//! has several, the one with the greatest `(segment seq, offset)` wins and the others are
//! marked dead. A record failing its checksum (a torn write, or damage) ends the scan of that
//! segment: nothing after it is trusted. Expired records are marked dead. Every recovered
//! segment is sealed; new writes go to fresh segments. A segment header that fails its
//! checksum frees the whole segment. Free segments go to the free list.

use strata_pool::{Opened, Segment};

use crate::config::{RecoveryObserver, RecoveryProgress};
use crate::error::OpenError;
use crate::segment::{self, Book, HeaderRead, OwnedSegment};
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
    /// Records that failed validation between valid ones (damage), or anywhere in a pool closed
    /// cleanly: skipped, never served; the records around them are kept.
    pub records_damaged: u64,
    /// Invalid bytes ending a segment's log after a crash: a write the crash tore (never
    /// acknowledged). Dropped.
    pub records_torn: u64,
    /// Older versions of keys superseded by a newer record.
    pub records_superseded: u64,
    /// Records that had expired while the server was down.
    pub records_expired: u64,
    /// Segments freed unread because of `RecoveryPlan::DiscardAll`.
    pub segments_discarded: u64,
    /// The DRAM state came from the clean-close snapshot (no scan was needed).
    pub from_snapshot: bool,
    /// Shards whose index was mapped from the pool's index files as they were left (no scan).
    pub shards_from_index_files: u64,
    /// Items kept on the flash tier (entries of a restored index whose region survived).
    pub flash_items_kept: u64,
    /// Flash entries of shards a process crash caught changing, read back from their tables
    /// (their segments cannot name flash items) and indexed again; counted in
    /// `flash_items_kept` too when their region survived.
    pub flash_items_salvaged: u64,
    /// Items of the flash tier that could not be kept: their region was not written before
    /// the stop, or the flash medium was formatted (see `flash`).
    pub flash_items_dropped: u64,
    /// What the flash tier's open found (`None`: no flash tier).
    pub flash: Option<crate::FlashOpened>,
    /// Keys put back as they were before a group of writes a crash interrupted
    /// (`Engine::atomically`, the transaction log).
    pub transaction_keys_restored: u64,
}

/// What the way the pool was left lets recovery assume.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Left {
    /// The last write of a log may be torn: any stop but a clean close.
    pub(crate) torn_possible: bool,
    /// Stores the last session made may be lost: a stop that was neither a clean close nor a
    /// process crash on the same boot (a power loss, a reboot). Superseded records are then
    /// live, since one may be its key's newest durable copy (see `record`).
    pub(crate) stores_lost_possible: bool,
}

impl Left {
    pub(crate) fn of(opened: Opened) -> Left {
        Left {
            // A created pool has no log to tear nor flash entries to suspect either way.
            torn_possible: !matches!(opened, Opened::Reopened { previous, .. } if previous.clean),
            stores_lost_possible: !opened.stores_kept(),
        }
    }
}

/// Recovers every shard from its segments, except shards marked `trusted`, whose index was
/// mapped from the pool's index files: their segments are adopted with the bookkeeping their
/// books recorded, unread.
pub(crate) fn recover(
    inner: &Inner,
    segments: Vec<Segment>,
    plan: RecoveryPlan,
    trusted: &[bool],
    left: Left,
    observer: Option<&RecoveryObserver>,
) -> Result<RecoveryReport, OpenError> {
    if left.torn_possible && !left.stores_lost_possible && inner.survives_power_loss() {
        persist_what_the_crash_kept(inner, &segments)?;
    }
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
                owned.push(if trusted[fields.shard as usize] {
                    booked(inner, segment, fields)
                } else {
                    // Its log end is not known yet: the parallel phase scans it.
                    OwnedSegment::reopened(segment, fields, Book::EMPTY)
                });
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
    let in_use = owned.len();
    for (shard, _) in trusted.iter().enumerate().filter(|(_, &t)| t) {
        let mut shard = inner.shards[shard].0.write();
        report.items_recovered += shard.index.len() as u64;
        report.shards_from_index_files += 1;
        if left.stores_lost_possible {
            // A mapped index is not walked here: the scrub checks its families.
            shard.suspect_families();
        }
    }
    let mut by_shard: Vec<Vec<u32>> = vec![Vec::new(); inner.shards.len()];
    for segment in owned.iter().filter(|s| !trusted[s.fields.shard as usize]) {
        by_shard[segment.fields.shard as usize].push(segment.segment.id());
    }
    for segment in owned {
        inner.shards[segment.fields.shard as usize]
            .0
            .write()
            .adopt(segment);
    }
    let notify = |progress| {
        if let Some(observer) = observer {
            (observer.0)(progress);
        }
    };
    notify(RecoveryProgress::SegmentsAdopted {
        segments: in_use as u64,
        shards_to_rebuild: trusted.iter().filter(|&&t| !t).count() as u64,
    });
    index_shards_in_parallel(inner, &by_shard, trusted, left, &mut report, &notify);
    settle(inner, seq_max, in_use, free);
    Ok(report)
}

/// After a process crash on this boot, makes the pool's bytes durable as the crash left them,
/// before anything reads them. The crashed process's stores are all there (the page cache, or
/// the DAX media's caches, kept them), but not all reached the media: its last writes, never
/// acknowledged, and the dead marks of its last deletes and overwrites. Recovery serves what it
/// finds, and the new session's writes are made durable on top of it; were those bytes still
/// unpersisted, a power cut later in the session could bring back on the media a record the
/// crash had already marked dead (a value deleted twice, resurrected), or take away the
/// record that recovery marked an older one dead for. A file pool writes only its dirty pages
/// (under `interval` and `sync`, those of the last commit interval); a DAX pool flushes the
/// lines of every in-use segment.
fn persist_what_the_crash_kept(inner: &Inner, segments: &[Segment]) -> Result<(), OpenError> {
    if let Some(whole_pool) = &inner.whole_pool {
        whole_pool.persist_all()?;
        return Ok(());
    }
    for segment in segments {
        if matches!(segment::read_header(segment.header()), HeaderRead::InUse(_)) {
            segment.persist_data(0, segment.data().len())?;
        }
    }
    Ok(())
}

/// Ends recovery or a snapshot restore: new segments get seqs above every one found, and the
/// free list and in-use count describe the pool as found.
pub(crate) fn settle(inner: &Inner, seq_max: u64, in_use: usize, free: Vec<Segment>) {
    {
        let mut seq = inner.seq.lock();
        seq.next = seq.next.max(seq_max + 1);
        seq.reserved_until = seq.reserved_until.max(seq.next);
    }
    let mut pool = inner.free.lock();
    pool.in_use = in_use;
    // A DRAM pool is new at every open: none of its free segments was written.
    pool.untouched = if inner.dram { free.len() } else { 0 };
    pool.list = free;
    // Index growth during recovery counted its bytes before the segments were known.
    pool.set_limit(inner.segment_size_bytes);
}

/// A segment of a shard whose index was mapped: its bookkeeping is what its book recorded.
fn booked(inner: &Inner, segment: Segment, fields: segment::HeaderFields) -> OwnedSegment {
    let book = inner.shards[fields.shard as usize]
        .0
        .read()
        .anchor()
        .and_then(|anchor| anchor.book(segment.id(), inner.segment_size_bytes))
        .expect("a mapped shard's books were checked at open");
    OwnedSegment::reopened(segment, fields, book)
}

/// Indexes the segments of every shard not `trusted`, shards spread over the available cores.
/// A shard's rebuild ends (its control line may say consistent again) only once all of its
/// segments are indexed.
fn index_shards_in_parallel(
    inner: &Inner,
    by_shard: &[Vec<u32>],
    trusted: &[bool],
    left: Left,
    report: &mut RecoveryReport,
    notify: &(dyn Fn(RecoveryProgress) + Sync),
) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(by_shard.len());
    let now_ms = inner.now_ms();
    let reports: Vec<RecoveryReport> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut partial = RecoveryReport::default();
                    for shard_index in (t..by_shard.len()).step_by(threads) {
                        if trusted[shard_index] {
                            continue;
                        }
                        let mut shard = inner.shards[shard_index].0.write();
                        for &id in &by_shard[shard_index] {
                            shard.scan_log(id, left.torn_possible, &mut partial);
                            shard.recover_segment(
                                inner,
                                id,
                                now_ms,
                                left.stores_lost_possible,
                                &mut partial,
                            );
                        }
                        shard.drop_recovered_broken_families(inner);
                        if let Err(err) = shard.persist_recovery_marks(inner) {
                            // The engine now refuses writes (its promise is void): say why.
                            tracing::error!(
                                shard = shard_index,
                                %err,
                                "recovery could not persist its dead marks; writes are refused"
                            );
                        }
                        let salvaged = shard.restore_salvaged_flash(inner);
                        partial.flash_items_salvaged += salvaged;
                        partial.items_recovered += salvaged;
                        shard.rebuilding = false;
                        let (shard_id, items) = (shard.id, shard.index.len() as u64);
                        drop(shard);
                        notify(RecoveryProgress::ShardRebuilt {
                            shard: shard_id,
                            items,
                        });
                    }
                    partial
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("recovery thread"))
            .collect()
    });
    for partial in reports {
        report.items_recovered += partial.items_recovered;
        report.records_superseded += partial.records_superseded;
        report.records_expired += partial.records_expired;
        report.records_damaged += partial.records_damaged;
        report.records_torn += partial.records_torn;
        report.flash_items_salvaged += partial.flash_items_salvaged;
    }
}
