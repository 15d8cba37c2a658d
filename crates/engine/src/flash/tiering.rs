//! How the engine uses its flash tier: the flash thread (region writes and reclaim), demotion of
//! evicted items, reads of flash-resident items, and promotion of the ones read often.
//!
//! Reads never hold a shard lock across flash I/O: a lookup that finds only flash candidates
//! (slots of the flash tier with the key's hash bits) drops the lock, reads each candidate's
//! record, checks it (checksum, the key), and then checks under the read lock again that the
//! index still points there, so a write or delete that raced with the read wins.
//!
//! A write of a key (SET) drops every flash slot with the key's hash bits among its candidates
//! without reading them: the key's flash copy (if any) is superseded, and the rare other key
//! sharing 24 hash bits and a bucket loses only its flash copy, a miss, never a wrong value.
//! Read-modify-writes (and deletes, which answer whether the key existed) first promote the
//! key's flash copy into memory and then run there.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use strata_pool::AlignedBuf;

use crate::flash::bundle::Bundle;
use crate::flash::{ReadFor, RecordKey};
use crate::index;
use crate::record::{self, RecordMeta};
use crate::Inner;

/// Reads of a flash-resident item after which it moves back to memory.
pub(crate) const PROMOTE_AFTER_READS: u8 = 2;
/// Entries a reclaim drops under one hold of a shard's write lock.
const RECLAIM_BATCH_MAX: usize = 256;
/// Suspects of each shard the flash thread settles between two looks at its write queue.
const SETTLE_PER_ROUND_MAX: usize = 32;
/// How long the flash thread sleeps when it has nothing to do.
const IDLE_WAIT: Duration = Duration::from_millis(2);

thread_local! {
    /// Where a thread's flash reads land (one record at a time).
    static READ_BUF: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::zeroed(4096, 4096));
}

/// A record read from flash, as the read path hands it on.
pub(crate) struct FlashItem<'a> {
    /// What readers see: the record's value, or for an item of several records (a
    /// [`Bundle`]) a large string's bytes joined, another kind's owner value.
    pub(crate) value: &'a [u8],
    /// The record's fields; for a large string's bundle, those of the one string readers see
    /// (no parts).
    pub(crate) meta: RecordMeta,
    /// The item's CAS (flash records always carry it).
    pub(crate) cas: u64,
    /// The owner and parts, for an item of several records (`None`: a single record).
    pub(crate) bundle: Option<Bundle<'a>>,
}

impl<'a> FlashItem<'a> {
    /// The item of the live record `view` (of the key read): a bundle when it owns parts;
    /// `None` when it says it owns parts and its value is no bundle (damage the record's
    /// checksum did not catch, or another version).
    fn of(view: &record::RecordView<'a>) -> Option<FlashItem<'a>> {
        FlashItem::of_fields(view.value, view.meta)
    }

    /// [`FlashItem::of`] a record's value and fields.
    fn of_fields(record_value: &'a [u8], record_meta: RecordMeta) -> Option<FlashItem<'a>> {
        let cas = record_meta.cas.unwrap_or(0);
        if record_meta.parts == 0 {
            return Some(FlashItem {
                value: record_value,
                meta: record_meta,
                cas,
                bundle: None,
            });
        }
        let bundle = Bundle::parse(record_value, record_meta.parts)?;
        let (value, meta) = if record_meta.kind == record::Kind::String {
            let meta = RecordMeta {
                parts: 0,
                ..record_meta
            };
            (bundle.parts_joined(), meta)
        } else {
            (bundle.owner_value(), record_meta)
        };
        Some(FlashItem {
            value,
            meta,
            cas,
            bundle: Some(bundle),
        })
    }

    /// Whether readers must wait for the item to be promoted: an item of several records
    /// that is not a string, whose parts only memory serves (a large hash's chunks).
    pub(crate) fn needs_memory(&self) -> bool {
        self.bundle.is_some() && self.meta.kind != record::Kind::String
    }

    /// A copy that outlives the read buffer, for a promotion after the read.
    pub(crate) fn to_owned(&self) -> OwnedFlashItem {
        let (value, parts) = match self.bundle {
            Some(bundle) => (bundle.bytes().to_vec(), bundle.part_count()),
            None => (self.value.to_vec(), 0),
        };
        OwnedFlashItem {
            record_value: value,
            record_meta: RecordMeta {
                cas: Some(self.cas),
                parts,
                ..self.meta
            },
        }
    }
}

/// A [`FlashItem`] copied out of the read buffer.
pub(crate) struct OwnedFlashItem {
    record_value: Vec<u8>,
    record_meta: RecordMeta,
}

impl OwnedFlashItem {
    /// The item again, as the read saw it.
    pub(crate) fn item(&self) -> FlashItem<'_> {
        FlashItem::of_fields(&self.record_value, self.record_meta).expect("read as one before")
    }
}

/// What a flash read of a key found.
pub(crate) enum FlashRead<R> {
    /// The key's record, unexpired: `f`'s result.
    Item(R),
    /// The key's record, expired: a miss, and no other candidate can be the key.
    Expired,
    /// Another key's record (sharing the key's hash bits).
    NotIt,
    /// No valid record there: damaged, torn by a crash, of a reclaimed region, or unreadable.
    Damaged,
}

/// Reads the flash record at index location `location` (tier bit set) and calls `f` with it
/// if it is a valid, live, unexpired record of `key`. A record that fails its checks is
/// counted; the caller queues its entry for `repair`.
pub(crate) fn read_record<R>(
    inner: &Inner,
    key: &[u8],
    location: u64,
    now_ms: u64,
    f: impl FnOnce(FlashItem<'_>) -> R,
) -> FlashRead<R> {
    let Some(flash) = inner.flash.as_ref() else {
        return FlashRead::NotIt;
    };
    with_read_buf(|buf| {
        let Some(range) = flash.read(index::flash_units(location), buf) else {
            flash
                .counters
                .damaged_records
                .fetch_add(1, Ordering::Relaxed);
            return FlashRead::Damaged;
        };
        match record::read(&buf[range]) {
            record::Scan::Record(view) if view.live && view.key == key => {
                if view.meta.expires_at_ms.is_some_and(|at| at <= now_ms) {
                    return FlashRead::Expired;
                }
                match FlashItem::of(&view) {
                    Some(item) => FlashRead::Item(f(item)),
                    None => {
                        flash
                            .counters
                            .damaged_records
                            .fetch_add(1, Ordering::Relaxed);
                        FlashRead::Damaged
                    }
                }
            }
            record::Scan::Record(view) if view.live => FlashRead::NotIt,
            _ => {
                flash
                    .counters
                    .damaged_records
                    .fetch_add(1, Ordering::Relaxed);
                FlashRead::Damaged
            }
        }
    })
}

/// Runs `f` with this thread's read buffer (a new one when a caller's closure reads flash
/// again from inside a read).
fn with_read_buf<R>(f: impl FnOnce(&mut AlignedBuf) -> R) -> R {
    READ_BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => f(&mut buf),
        Err(_) => f(&mut AlignedBuf::zeroed(4096, 4096)),
    })
}

/// Reads the flash record at `location` (tier bit set) and returns its key if it is valid,
/// live and, given `unexpired_at_ms`, unexpired then (SCAN, which does not know the key; the
/// flash thread settling a suspect passes `None`: expired or not, the record is that key's).
pub(crate) fn read_key(
    inner: &Inner,
    location: u64,
    unexpired_at_ms: Option<u64>,
    purpose: ReadFor,
) -> Option<Vec<u8>> {
    let flash = inner.flash.as_ref()?;
    with_read_buf(|buf| {
        let range = flash.read_for(index::flash_units(location), buf, purpose)?;
        match record::read(&buf[range]) {
            record::Scan::Record(view)
                if view.live
                    && unexpired_at_ms
                        .is_none_or(|now| view.meta.expires_at_ms.is_none_or(|at| at > now)) =>
            {
                Some(view.key.to_vec())
            }
            _ => None,
        }
    })
}

/// The record bytes to demote for a memory record: the same fields with its CAS written out
/// (its position no longer derives it).
pub(crate) fn demoted_record(
    out: &mut Vec<u8>,
    key: &[u8],
    value: &[u8],
    meta: RecordMeta,
    cas: u64,
) {
    let meta = RecordMeta {
        cas: Some(cas),
        ..meta
    };
    let size = record::record_size(key.len(), value.len(), &meta);
    out.clear();
    out.resize(size, 0);
    record::write(out, key, value, &meta);
}

/// The flash thread: writes sealed regions, reclaims the oldest when free ones run low, and
/// paces writes to the configured rate. Stopped and joined when the engine is dropped.
pub(crate) struct FlashWorker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FlashWorker {
    pub(crate) fn spawn(inner: Arc<Inner>) -> std::io::Result<FlashWorker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let flash_inner = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("strata-flash".into())
            .spawn(move || run(&flash_inner, &flag))?;
        if let Some(flash) = inner.flash.as_ref() {
            flash.set_writer(thread.thread().clone());
        }
        Ok(FlashWorker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for FlashWorker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

fn run(inner: &Inner, stop: &AtomicBool) {
    let Some(flash) = inner.flash.as_ref() else {
        return;
    };
    let rate = inner.flash_write_bytes_per_sec_max;
    let started = std::time::Instant::now();
    let mut written = 0u64;
    while !stop.load(Ordering::Acquire) {
        let mut busy = false;
        if let Some(job) = flash.next_write() {
            let len = job.len_bytes as u64;
            if let Err(err) = flash.write(job) {
                tracing::error!(error = %err, "flash region write failed; its items are dropped");
            }
            written += len;
            pace(rate, written, started);
            busy = true;
        }
        if flash.needs_reclaim(inner.now_ms()) {
            busy |= reclaim_one(inner, false);
        } else if at_item_bound(inner) {
            busy |= reclaim_one(inner, true);
        }
        // Region writes come first: a suspect waiting costs a lookup's extra read at most,
        // while a region not written in time makes the next evictions refused.
        if !flash.has_writes_queued() {
            busy |= settle_suspects(inner, SETTLE_PER_ROUND_MAX) > 0;
            busy |= flash.build_one_filter();
        }
        if !busy {
            std::thread::park_timeout(IDLE_WAIT);
        }
    }
}

/// Whether some shard indexes as many flash items as its share of memory allows (then the
/// oldest region goes, as when the medium is full).
fn at_item_bound(inner: &Inner) -> bool {
    inner
        .shards
        .iter()
        .any(|shard| shard.0.read().flash_items() >= inner.flash_items_per_shard_max)
}

/// Sleeps as long as writing `written` bytes since `started` is ahead of `rate` bytes a second.
fn pace(rate: u64, written: u64, started: std::time::Instant) {
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(written as f64 / rate as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(ahead);
    }
}

/// Reads the key of up to `max_per_shard` flash suspects of each shard (see
/// `crate::shard::flash`) and settles them: dropped if memory holds that key, kept if it is
/// another key's only copy. Returns how many it read.
pub(crate) fn settle_suspects(inner: &Inner, max_per_shard: usize) -> usize {
    let mut read = 0;
    for padded in inner.shards.iter() {
        let lock = &padded.0;
        let suspects = lock.read().flash_suspects(max_per_shard);
        for suspect in suspects {
            let key = read_key(inner, suspect.location, None, ReadFor::Settle);
            lock.write().settle_suspect(inner, suspect, key.as_deref());
            read += 1;
        }
    }
    read
}

/// Reclaims a region (see `FlashTier::reclaim`): every index entry still pointing into it
/// is dropped; those items leave the cache.
/// With `oldest`, the oldest written region goes even when free regions remain. Returns
/// whether a region was reclaimed.
pub(crate) fn reclaim_one(inner: &Inner, oldest: bool) -> bool {
    let Some(flash) = inner.flash.as_ref() else {
        return false;
    };
    // Entries to drop, by shard: one write lock per shard and batch rather than per record
    // (a 4 MiB region of 100-byte items holds 20,000 records).
    let pending = std::cell::RefCell::new(vec![Vec::new(); inner.shards.len()]);
    let evicted = std::cell::Cell::new(0u64);
    let drop_pending = |shard_index: usize| {
        let batch = std::mem::take(&mut pending.borrow_mut()[shard_index]);
        if batch.is_empty() {
            return;
        }
        let mut shard = inner.shards[shard_index].0.write();
        for (h24, location) in batch {
            if shard.unindex_flash(h24, location) {
                evicted.set(evicted.get() + 1);
            }
        }
    };
    let result = flash.reclaim(
        inner.now_ms(),
        oldest,
        &mut |location, key| {
            let hash = match key {
                RecordKey::Hash(hash) => hash,
                RecordKey::Record(bytes) => {
                    let record::Scan::Record(view) = record::read(bytes) else {
                        return;
                    };
                    inner.record_hash(&view)
                }
            };
            let shard_index = inner.shard_of(hash);
            let full = {
                let mut pending = pending.borrow_mut();
                pending[shard_index].push((index::hash24(hash), index::flash_location(location)));
                pending[shard_index].len() >= RECLAIM_BATCH_MAX
            };
            if full {
                drop_pending(shard_index);
            }
        },
        &mut || (0..inner.shards.len()).for_each(drop_pending),
    );
    let evicted = evicted.get();
    flash
        .counters
        .evicted_items
        .fetch_add(evicted, Ordering::Relaxed);
    match result {
        Ok(visited) => visited > 0,
        Err(err) => {
            tracing::error!(error = %err, "flash region could not be read back or marked reclaimed");
            false
        }
    }
}
