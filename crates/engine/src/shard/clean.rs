//! The cleaner: gives back the dead space that overwrites and deletes leave inside segments by
//! moving the live records of mostly dead segments into the shard's *cleaner segments* and
//! freeing them, so that an item leaves memory only when live data really exceeds the budget
//! (RAMCloud's log cleaner, Rumble et al., FAST'14).
//!
//! A pass runs under the shard's write lock when a write needs a segment and the free list is
//! down to its reserve (`Inner::obtain_segment`). It picks *victims* among the shard's sealed
//! segments by RAMCloud's cost-benefit, `(1 - u) · age / (1 + u)` with `u` the live fraction
//! (a segment with no live record first), just enough of them that the pass frees at least one
//! segment more than it fills (counted by packing their records as the pass will), and at most
//! [`CLEAN_VICTIMS_PER_PASS_MAX`]: so a pass copies at most that many segments' live bytes (16
//! MiB at the default segment size), the bound on how long it holds the shard. A cache cleans
//! only while a pass moves at most [`CACHE_MOVED_SEGMENTS_PER_GAINED_MAX`] segments' worth per
//! segment it gains ([`FLASH_MOVED_SEGMENTS_PER_GAINED_MAX`] with a flash tier, where eviction
//! demotes), and evicts past that; a store cleans at any cost before it refuses a write.
//! Every live record moves, read or not; an expired one is dropped.
//!
//! A moved record keeps its CAS (written as the record's explicit CAS field: 8 bytes more for a
//! record that had none) and its index slot keeps its reads, and stays in its TTL group: each
//! TTL bucket the cleaner takes victims from has its own cleaner segment, a sealed segment
//! (never an open head for writes) in that bucket's chain, kept across passes until full, so
//! segments of items with a TTL still expire whole. A shard has at most
//! `Inner::clean_segments_per_shard_max` of them (a sixteenth of its share of segments, 1 to
//! 8); past that, a victim's records go to the cleaner segment of the nearest longer TTL, as
//! writes do past the cap on open segments. Destinations are that segment, then victims this
//! pass freed, then free segments (the reserve is for this).
//!
//! Crash safety: a victim's records are copied, made as durable as the durability level makes
//! writes, and only then is the victim freed (its header zeroed and persisted); its own bytes
//! are not marked. A crash in between leaves two live records of each moved key with the same
//! contents, and recovery keeps one of them (the cleaner segment's: its seq is the newer). A
//! pass first makes every waiting dead mark durable (`persist_dirty`), so that no superseded
//! record older than a moved one can come back after a power cut in its place, and the cleaner
//! segment's seq is above every record it takes, as `reserve` keeps for any write of a key.

use std::sync::atomic::Ordering;
use std::time::Instant;

use strata_pool::Segment;

use crate::cleaning::COMPACT_AFTER_EVICTION_MS;
use crate::config::EvictionPolicy;
use crate::error::WriteError;
use crate::index;
use crate::record::{self, Kind, RecordMeta, RecordView};
use crate::segment::OwnedSegment;
use crate::Inner;

use super::{bump, FreeReason, Shard};

/// Most segments one pass frees (and so most it copies): the bound on how long a pass holds
/// its shard.
pub(crate) const CLEAN_VICTIMS_PER_PASS_MAX: usize = 16;
/// In a cache, the most segments' worth of live records a pass may move per segment it
/// gains: past it, live data nearly fills the shard, and an eviction costs less than the
/// copying (the memory tier's write amplification stays at most this).
pub(crate) const CACHE_MOVED_SEGMENTS_PER_GAINED_MAX: usize = 8;
/// The same with a flash tier below, where an evicted item is demoted rather than lost: only
/// segments at least half dead are worth cleaning (a flash A/B at 1 KiB: with the cache's
/// bound, passes of up to 8 segments put the fixed-rate p99 at 2-3x and p99.9 at 2-8x).
pub(crate) const FLASH_MOVED_SEGMENTS_PER_GAINED_MAX: usize = 1;

/// What cleaning ahead may move per segment it gains to spare a write a segment never written
/// (`Engine::clean_ahead`), as (moved, gained): a victim at most a quarter live. On DRAM a
/// segment never written costs a page fault per 4 KiB when first written (1 MiB: about 1.8 ms
/// of kernel time on this VM), where moving a quarter segment of small records costs about a
/// tenth of that; and the memory a workload of overwrites holds stays near its live data
/// instead of growing to `--memory`, as Redis's does.
pub(crate) const RECYCLE_MOVED_PER_GAINED: (usize, usize) = (1, 3);

/// What compaction of a quiet shard may move per segment it gains, as (moved, gained): a
/// victim at most seven eighths live. Nobody is writing, so the copying costs no request a
/// segment; what it gains is memory handed back to the OS (`Engine::clean_ahead`): after a
/// load of overwrites, live data fills the segments in use to seven eighths or more instead
/// of about half (a million-field hash loaded field by field: 108 MiB of segments for
/// 52 MiB of live records before). Its moving is bounded by the writes that made the dead
/// space: at most seven times their bytes.
pub(crate) const COMPACT_MOVED_PER_GAINED: (usize, usize) = (7, 1);

/// What a step of cleaning ahead (`Engine::clean_ahead`) is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ahead {
    /// Free segments run short: any victim the cache's bound allows
    /// ([`CACHE_MOVED_SEGMENTS_PER_GAINED_MAX`], [`FLASH_MOVED_SEGMENTS_PER_GAINED_MAX`]).
    Need,
    /// Spare a write a segment never written (DRAM): victims cheap to move
    /// ([`RECYCLE_MOVED_PER_GAINED`]).
    Recycle,
    /// The shard is quiet (DRAM): pack its live records into fewer segments
    /// ([`COMPACT_MOVED_PER_GAINED`]) so that the free ones' pages can go back to the OS.
    Compact,
}

impl Ahead {
    /// The most a step may move per segment it gains, as (moved, gained).
    fn moved_per_gained(self, inner: &Inner) -> (usize, usize) {
        match self {
            Ahead::Need => (
                moved_per_gained_max(inner).unwrap_or(CACHE_MOVED_SEGMENTS_PER_GAINED_MAX),
                1,
            ),
            Ahead::Recycle => RECYCLE_MOVED_PER_GAINED,
            Ahead::Compact => COMPACT_MOVED_PER_GAINED,
        }
    }
}

/// The most segments' worth of live records a pass may move per segment it gains: none for a
/// store (it cleans at any cost before it refuses a write).
fn moved_per_gained_max(inner: &Inner) -> Option<usize> {
    if inner.policy() == EvictionPolicy::None {
        None
    } else if inner.flash.is_some() {
        Some(FLASH_MOVED_SEGMENTS_PER_GAINED_MAX)
    } else {
        Some(CACHE_MOVED_SEGMENTS_PER_GAINED_MAX)
    }
}

/// What a pass did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CleanOutcome {
    /// It handed this many segments back to the free list beyond those it took (at least 1).
    Gained(usize),
    /// No choice of victims frees more than it fills: live data fills the shard's segments.
    NothingToGain,
    /// Victims were worth cleaning, but no segment was free to move their records to.
    NoDestination,
}

/// A segment the pass may clean.
struct Candidate {
    id: u32,
    live_items: u32,
    score: f64,
}

impl Shard {
    /// One cleaning pass (module docs).
    pub(crate) fn clean(&mut self, inner: &Inner) -> Result<CleanOutcome, WriteError> {
        // (An index not yet checked by the scrub is fine: a record moves only where an entry
        // names its exact location, and reads validate every record until the scrub is done.)
        let mut victims = self.choose_victims(inner);
        if victims.is_empty() && !self.clean_heads.is_empty() {
            // The cleaner segments' room is too little for any gain: they become sealed
            // segments like any other, candidates themselves, and the next destinations fresh.
            let heads = std::mem::take(&mut self.clean_heads);
            victims = self.choose_victims(inner);
            if victims.is_empty() {
                self.clean_heads = heads;
            }
        }
        if victims.is_empty() {
            return Ok(CleanOutcome::NothingToGain);
        }
        let started = Instant::now();
        if inner.track_dirty && victims.iter().any(|v| v.live_items > 0) {
            self.persist_dirty(inner)?;
        }
        let mut freed: Vec<Segment> = Vec::new();
        let (mut taken, mut starved) = (0usize, false);
        for victim in &victims {
            if !self.clean_victim(inner, victim.id, &mut freed, &mut taken)? {
                starved = true;
                break;
            }
        }
        bump(&self.counters.clean_passes, 1);
        self.count_clean_time(started);
        let gained = freed.len().saturating_sub(taken);
        inner.release(freed);
        Ok(match gained {
            0 if starved => CleanOutcome::NoDestination,
            0 => CleanOutcome::NothingToGain,
            n => CleanOutcome::Gained(n),
        })
    }

    /// One step of cleaning ahead (`Engine::clean_ahead`), holding the shard for one victim's
    /// records at most: the best candidate whose live fraction makes moving it a bargain for
    /// `ahead` ([`Ahead::moved_per_gained`]) is moved to the cleaner segment and freed. Returns
    /// whether it cleaned one.
    pub(crate) fn clean_one(&mut self, inner: &Inner, ahead: Ahead) -> Result<bool, WriteError> {
        let capacity = inner.segment_size_bytes;
        let (num, den) = ahead.moved_per_gained(inner);
        let written = self.counters.written_bytes.load(Ordering::Relaxed);
        // A look that found nothing is not repeated before a segment's worth more is written.
        if self
            .scanned_at(ahead)
            .is_some_and(|at| written < *at + capacity as u64)
        {
            return Ok(false);
        }
        // One pass for the best candidate worth it: this runs every 10 ms under the shard's
        // write lock, also when nothing is (a full cache), so no list is built or sorted.
        let Some(victim) = self
            .candidates_unsorted(inner)
            .filter(|candidate| {
                let owned = self.owned(candidate.id);
                owned.live_bytes as usize * (num + den) <= capacity * num
            })
            .max_by(|a, b| a.score.total_cmp(&b.score))
        else {
            if let Some(at) = self.scanned_at(ahead) {
                *at = written;
            }
            return Ok(false);
        };
        let started = Instant::now();
        if inner.track_dirty && victim.live_items > 0 {
            self.persist_dirty(inner)?;
        }
        let (mut freed, mut taken) = (Vec::new(), 0);
        let cleaned = self.clean_victim(inner, victim.id, &mut freed, &mut taken)?;
        bump(&self.counters.clean_steps_ahead, u64::from(cleaned));
        self.count_clean_time(started);
        inner.release(freed);
        Ok(cleaned)
    }

    /// Where cleaning ahead for `ahead` marks the bytes written when it last found no victim
    /// (`None` for [`Ahead::Need`], which looks every time).
    fn scanned_at(&mut self, ahead: Ahead) -> Option<&mut u64> {
        match ahead {
            Ahead::Need => None,
            Ahead::Recycle => Some(&mut self.recycle_scanned_at_written),
            Ahead::Compact => Some(&mut self.compact_scanned_at_written),
        }
    }

    /// Whether requests wrote less than a sixteenth of a segment into this shard since the
    /// last look (one look per tick of cleaning ahead, every 10 ms in the server: under
    /// 6.4 MB/s at 1 MiB segments), and it evicted no segment (nor demoted one to flash) in
    /// the last [`COMPACT_AFTER_EVICTION_MS`]. A quiet shard's memory may be compacted
    /// ([`Ahead::Compact`]); a busy one's is left to the writes' own cleaning, and a full
    /// one's too: a cache whose memory is short (every flash-tiered one under load) takes
    /// each segment compaction frees for its next writes at once, so compacting would spend
    /// up to seven times the bytes gained to give nothing back (it cost a flash-tiered smoke
    /// run 7-19% more server CPU per request).
    pub(crate) fn quiet_since_last_look(&mut self, inner: &Inner) -> bool {
        let written = self.counters.written_bytes.load(Ordering::Relaxed);
        let since = written.wrapping_sub(self.quiet_looked_at_written);
        self.quiet_looked_at_written = written;
        let evicted = self.counters.evicted_segments.load(Ordering::Relaxed);
        let now_ms = inner.now_ms();
        if evicted != self.quiet_looked_at_evicted {
            self.quiet_looked_at_evicted = evicted;
            self.evicted_seen_at_ms = Some(now_ms);
        }
        let evicted_lately = self
            .evicted_seen_at_ms
            .is_some_and(|at_ms| now_ms.saturating_sub(at_ms) < COMPACT_AFTER_EVICTION_MS);
        since < (inner.segment_size_bytes / 16) as u64 && !evicted_lately
    }

    /// Moves victim `id`'s live records (to the cleaner segment, then to destinations taken
    /// from `freed`, else from the free pool, counted in `taken`) and frees it into `freed`.
    /// Returns false, touching nothing, when the destinations it needs are not free.
    fn clean_victim(
        &mut self,
        inner: &Inner,
        id: u32,
        freed: &mut Vec<Segment>,
        taken: &mut usize,
    ) -> Result<bool, WriteError> {
        let seq = self.owned(id).fields.seq;
        if let Some(walked) = self.scrub_walk(inner, id, seq) {
            // Adopted at open, unchecked: the scrub's check now, which counts its live records
            // again and indexes any that damage to the index lost, so every valid one moves.
            self.scrub_settle(inner, id, seq, &walked);
        }
        let needed = self.destinations_needed(inner, id);
        let from_freed = needed.min(freed.len());
        let more = if needed > from_freed {
            let Some(more) = inner.take_for_cleaner(needed - from_freed)? else {
                return Ok(false);
            };
            *taken += more.len();
            more
        } else {
            Vec::new()
        };
        // (Segments this pass freed were written; the free pool's may never have been.)
        let mut dests = Vec::with_capacity(needed);
        let at = freed.len() - from_freed;
        for (mut dest, untouched) in freed.drain(at..).map(|s| (s, false)).chain(more) {
            inner.zero_for_reuse(&mut dest, untouched)?;
            dests.push(dest);
        }
        let was_clean = self.owned(id).is_clean();
        self.move_live_records(inner, id, &mut dests)?;
        // Exact for a clean segment; one with damage may have held records no entry names.
        debug_assert!(
            dests.is_empty() || !was_clean,
            "the dry run counted the destinations"
        );
        freed.append(&mut dests);
        freed.push(self.free_segment(inner, id, FreeReason::Cleaned)?);
        bump(&self.counters.cleaned_segments, 1);
        Ok(true)
    }

    /// Adds the time since `started` to the cleaner's time and its longest pass.
    fn count_clean_time(&self, started: Instant) {
        let elapsed_ns = started.elapsed().as_nanos() as u64;
        bump(&self.counters.clean_ns, elapsed_ns);
        self.counters
            .clean_pass_max_ns
            .fetch_max(elapsed_ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// The victims of a pass, best first: the fewest, by cost-benefit, whose live records fit in
    /// at least one segment fewer than they free; none when no such choice exists.
    fn choose_victims(&self, inner: &Inner) -> Vec<Candidate> {
        let mut candidates = self.candidates(inner);
        candidates.truncate(CLEAN_VICTIMS_PER_PASS_MAX);
        let victims = self.fewest_that_gain(inner, &candidates);
        candidates.truncate(victims);
        candidates
    }

    /// The segments a pass may clean, best (by cost-benefit) first: sealed, not the cleaner
    /// segment, whose live records fit in a fresh segment once moved. A segment adopted at open
    /// and not yet checked by the scrub is one too: the pass checks it first (`clean_victim`).
    fn candidates(&self, inner: &Inner) -> Vec<Candidate> {
        let mut candidates: Vec<Candidate> = self.candidates_unsorted(inner).collect();
        candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
        candidates
    }

    /// [`Shard::candidates`] in segment order.
    fn candidates_unsorted<'s>(&'s self, inner: &Inner) -> impl Iterator<Item = Candidate> + 's {
        let capacity = inner.segment_size_bytes;
        let now_ms = inner.now_ms();
        self.segments
            .iter()
            .flatten()
            .filter(|owned| {
                owned.sealed && !self.is_clean_head(owned.segment.id()) && owned.write_offset > 0
            })
            .filter_map(move |owned| {
                // (Its live records, an explicit CAS each at most, fit in a fresh segment.)
                let need_bytes = owned.live_bytes as usize + 8 * owned.live_items as usize;
                (need_bytes < capacity).then(|| Candidate {
                    id: owned.segment.id(),
                    live_items: owned.live_items,
                    score: cost_benefit(owned, capacity, now_ms),
                })
            })
    }

    /// How many of `candidates`, taken in order, a pass cleans: the fewest that free more
    /// segments than their live records fill, packed in order into the cleaner segment's room
    /// and then fresh segments (record by record, as the pass will write them); 0 when none
    /// does, or, in a cache, when the gain would cost more than `moved_per_gained_max`
    /// segments' worth of moving per segment gained (evicting, or demoting to flash, is then
    /// the better bargain; a store cleans at any cost before it refuses).
    fn fewest_that_gain(&self, inner: &Inner, candidates: &[Candidate]) -> usize {
        if !self.may_gain(inner, candidates) {
            return 0;
        }
        let capacity = inner.segment_size_bytes;
        let mut packing = self.packing(inner);
        for (at, candidate) in candidates.iter().enumerate() {
            packing.add(self.owned(candidate.id));
            let victims = at + 1;
            if victims > packing.destinations {
                let gained = victims - packing.destinations;
                let bargain = moved_per_gained_max(inner)
                    .is_none_or(|max| packing.moved_bytes <= gained * capacity * max);
                return if bargain { victims } else { 0 };
            }
        }
        0
    }

    /// Whether some prefix of `candidates` could gain a segment at a bargain, by their books
    /// alone: with their live bytes packed perfectly, which no real packing beats. A full
    /// shard (live data nearly everywhere) is told so without reading a record: the exact
    /// count walks every record of up to 16 segments, which, repeated for every segment a
    /// write needed, put milliseconds on a full flash-tiered cache's tail.
    fn may_gain(&self, inner: &Inner, candidates: &[Candidate]) -> bool {
        let capacity = inner.segment_size_bytes;
        // (The room of every cleaner segment: a bound, as each victim fills only its own.)
        let room: usize = self.clean_head_rooms().iter().map(|&(_, room)| room).sum();
        let max = moved_per_gained_max(inner);
        let mut live_bytes = 0;
        candidates.iter().enumerate().any(|(at, candidate)| {
            live_bytes += self.owned(candidate.id).live_bytes as usize;
            let destinations_min = live_bytes.saturating_sub(room).div_ceil(capacity);
            let gained_max = (at + 1).saturating_sub(destinations_min);
            gained_max > 0 && max.is_none_or(|max| live_bytes <= gained_max * capacity * max)
        })
    }

    /// Whether segment `id` is one of the shard's cleaner segments.
    pub(super) fn is_clean_head(&self, id: u32) -> bool {
        self.clean_heads.iter().any(|&(_, head)| head == id)
    }

    /// The cleaner segment of TTL bucket `bucket`, if it has one.
    fn clean_head(&self, bucket: u16) -> Option<u32> {
        self.clean_heads
            .iter()
            .find(|&&(b, _)| b == bucket)
            .map(|&(_, head)| head)
    }

    /// Free bytes at the end of each cleaner segment, by TTL bucket.
    fn clean_head_rooms(&self) -> Vec<(u16, usize)> {
        self.clean_heads
            .iter()
            .map(|&(bucket, id)| {
                let owned = self.owned(id);
                (bucket, owned.segment.data().len() - owned.write_offset)
            })
            .collect()
    }

    /// How many new cleaner segments moving victim `id`'s live records takes: a dry run over
    /// the sizes they will have, in the order they will be written.
    fn destinations_needed(&self, inner: &Inner, id: u32) -> usize {
        let mut packing = self.packing(inner);
        packing.add(self.owned(id));
        packing.destinations
    }

    /// A dry run starting from the cleaner segments' rooms as they are now.
    fn packing(&self, inner: &Inner) -> Packing {
        Packing {
            rooms: self.clean_head_rooms(),
            capacity: inner.segment_size_bytes,
            now_ms: inner.now_ms(),
            heads_max: inner.clean_segments_per_shard_max,
            destinations: 0,
            moved_bytes: 0,
        }
    }

    /// Moves victim `id`'s live records to the cleaner segment, opening `dests` as it fills,
    /// and makes them durable as writes are; drops the expired ones. Leaves the victim with
    /// no live record in its books (its bytes unmarked: it is freed next).
    fn move_live_records(
        &mut self,
        inner: &Inner,
        id: u32,
        dests: &mut Vec<Segment>,
    ) -> Result<(), WriteError> {
        let victim = self.segments[id as usize]
            .take()
            .expect("a victim is an owned segment");
        let now_ms = inner.now_ms();
        let bucket = clean_target(
            self.clean_heads.iter().map(|&(b, _)| b),
            victim.fields.ttl_bucket,
            inner.clean_segments_per_shard_max,
        );
        let mut written: Vec<(u32, usize, usize)> = Vec::new();
        let mut moved_parts = Vec::new();
        let mut result = Ok(());
        for_each_valid_record(&victim, |offset, view| {
            if result.is_err() || !view.live {
                return;
            }
            let location = inner.join_location(id, offset);
            let h24 = index::hash24(inner.record_hash(&view));
            let Some((slot, _)) = self.index.find(h24, |l| l == location) else {
                // Only a damaged record (the check of `clean_victim` did not index it).
                debug_assert!(
                    !victim.is_clean(),
                    "a live record of a clean segment is indexed"
                );
                return;
            };
            self.live_bytes = self.live_bytes.saturating_sub(view.size_bytes as u64);
            if is_expired(&view.meta, now_ms) {
                self.remove_memory_slot(slot, h24);
                if Shard::is_family(&view) {
                    self.note_family_drop(&view);
                }
                bump(&self.counters.expired_items, 1);
                return;
            }
            let meta = RecordMeta {
                cas: Some(view.meta.cas.unwrap_or_else(|| victim.cas_at(offset))),
                ..view.meta
            };
            let size = moved_size(&view);
            let head = match self.clean_head_with_room(inner, size, bucket, dests) {
                Ok(head) => head,
                Err(err) => {
                    result = Err(err);
                    return;
                }
            };
            let at = self.append_moved(head, &view, &meta, size);
            if meta.kind == Kind::Part {
                moved_parts.push(view.key.to_vec());
            }
            self.index.relocate(slot, inner.join_location(head, at));
            super::durability::add_to_runs(&mut written, head, at, at + size);
            bump(&self.counters.cleaned_items, 1);
            bump(&self.counters.cleaned_bytes, size as u64);
        });
        let mut victim = victim;
        victim.live_items = 0;
        victim.live_bytes = 0;
        victim.live_parts = 0;
        self.segments[id as usize] = Some(victim);
        result?;
        for (head, start, end) in written {
            self.written(inner, head, start, end - start)?;
        }
        // After the copies are written: a drop marks a copy dead, never its original alone.
        self.drop_families(inner, FreeReason::Expire)?;
        self.drop_orphans(inner, &moved_parts)
    }

    /// Appends a moved record (`view` with `meta`, `size` bytes) to cleaner segment `head` and
    /// counts it there. Returns its offset.
    fn append_moved(
        &mut self,
        head: u32,
        view: &RecordView<'_>,
        meta: &RecordMeta,
        size: usize,
    ) -> usize {
        let owned = self.owned_mut(head);
        let at = owned.write_offset;
        record::write(
            &mut owned.segment.data_mut()[at..at + size],
            view.key,
            view.value,
            meta,
        );
        owned.write_offset += size;
        owned.live_items += 1;
        owned.live_bytes += size as u64;
        owned.live_parts += u32::from(meta.kind == Kind::Part);
        owned.cover_expiry(meta.expires_at_ms, at == 0);
        self.live_bytes += size as u64;
        at
    }

    /// TTL bucket `bucket`'s cleaner segment, with at least `size` free bytes: the current
    /// one, or the next of `dests` installed in the bucket (the dry run made sure there is
    /// one); a full one stays behind as an ordinary sealed segment of the bucket.
    fn clean_head_with_room(
        &mut self,
        inner: &Inner,
        size: usize,
        bucket: u16,
        dests: &mut Vec<Segment>,
    ) -> Result<u32, WriteError> {
        if let Some(head) = self.clean_head(bucket) {
            let owned = self.owned(head);
            if owned.segment.data().len() - owned.write_offset >= size {
                return Ok(head);
            }
        }
        let segment = dests.pop().expect("the dry run counted the destinations");
        let head = self.install_clean_head(inner, segment, bucket)?;
        self.clean_heads.retain(|&(b, _)| b != bucket);
        self.clean_heads.push((bucket, head));
        Ok(head)
    }

    /// Takes ownership of a zeroed free segment as the shard's cleaner segment: sealed (writes
    /// never go to it), with a fresh seq, placed in `bucket`'s chain before the bucket's open
    /// segment, which stays the chain's last.
    fn install_clean_head(
        &mut self,
        inner: &Inner,
        segment: Segment,
        bucket: u16,
    ) -> Result<u32, WriteError> {
        let id = self.take_fresh(inner, segment, bucket, true)?;
        let chain = &mut self.chains[usize::from(bucket)];
        let len = chain.len();
        if len >= 2 {
            // (A victim being moved is out of `segments` meanwhile: sealed.)
            let before = chain[len - 2];
            if self.segments[before as usize]
                .as_deref()
                .is_some_and(|owned| !owned.sealed)
            {
                chain.swap(len - 2, len - 1);
            }
        }
        Ok(id)
    }
}

/// A dry run of the cleaner's writes: records packed in order into the room left, then into
/// fresh segments, as `move_live_records` will write them.
struct Packing {
    /// Room left in each TTL bucket's cleaner segment.
    rooms: Vec<(u16, usize)>,
    capacity: usize,
    now_ms: u64,
    /// Most cleaner segments (`Inner::clean_segments_per_shard_max`).
    heads_max: usize,
    /// Fresh segments opened.
    destinations: usize,
    /// Bytes the moved records take.
    moved_bytes: usize,
}

impl Packing {
    /// Packs the live, unexpired records of `owned` into the cleaner segment that takes its
    /// TTL bucket's records ([`clean_target`]).
    fn add(&mut self, owned: &OwnedSegment) {
        let heads = self.rooms.iter().map(|&(b, _)| b);
        let bucket = clean_target(heads, owned.fields.ttl_bucket, self.heads_max);
        let at = match self.rooms.iter().position(|&(b, _)| b == bucket) {
            Some(at) => at,
            None => {
                self.rooms.push((bucket, 0));
                self.rooms.len() - 1
            }
        };
        let mut room = self.rooms[at].1;
        for_each_valid_record(owned, |_, view| {
            if view.live && !is_expired(&view.meta, self.now_ms) {
                let size = moved_size(&view);
                if size > room {
                    self.destinations += 1;
                    room = self.capacity;
                }
                room -= size;
                self.moved_bytes += size;
            }
        });
        self.rooms[at].1 = room;
    }
}

/// The TTL bucket whose cleaner segment takes the records of a victim of `bucket`, given the
/// buckets that have one (`heads`), at most `heads_max`: writes' rule
/// (`ttl::bucket_within_cap`).
fn clean_target(heads: impl Iterator<Item = u16> + Clone, bucket: u16, heads_max: usize) -> u16 {
    let heads = heads.map(usize::from);
    let target = crate::ttl::bucket_within_cap(heads, usize::from(bucket), heads_max);
    u16::try_from(target).expect("TTL buckets fit in u16")
}

/// Calls `f` with each valid record of a segment, at its offset, in log order: as it is in a
/// clean segment; checked (checksum), damage skipped, in one adopted unchecked or damaged.
fn for_each_valid_record(owned: &OwnedSegment, mut f: impl FnMut(usize, record::RecordView<'_>)) {
    if owned.is_clean() {
        return owned.for_each_trusted_record(f);
    }
    for step in record::walk(owned.log()) {
        if let record::Step::Record { offset, view } = step {
            f(offset, view);
        }
    }
}

/// RAMCloud's cost-benefit of cleaning a segment: what it frees, weighted by how long its data
/// has stayed (old data is cold and stays put), over what moving its live records costs.
fn cost_benefit(owned: &OwnedSegment, capacity: usize, now_ms: u64) -> f64 {
    if owned.live_items == 0 {
        return f64::INFINITY;
    }
    let u = owned.live_bytes as f64 / capacity as f64;
    let age_ms = now_ms.saturating_sub(owned.fields.created_ms) as f64 + 1.0;
    (1.0 - u) * age_ms / (1.0 + u)
}

fn is_expired(meta: &RecordMeta, now_ms: u64) -> bool {
    meta.expires_at_ms.is_some_and(|at| at <= now_ms)
}

/// The size of a record once moved: with its CAS written out.
fn moved_size(view: &record::RecordView<'_>) -> usize {
    let meta = RecordMeta {
        cas: Some(0),
        ..view.meta
    };
    record::record_size(view.key.len(), view.value.len(), &meta)
}
