//! The shard's segments: TTL chains, open segments, taking a fresh one for a write, sealing,
//! adopting.

use strata_pool::Segment;

use crate::error::WriteError;
use crate::segment::{self, HeaderFields, OwnedSegment, Verified};
use crate::ttl;
use crate::Inner;

use super::{Reserved, Shard};

impl Shard {
    /// Returns an open segment of `bucket` with `size` free bytes whose seq is at least
    /// `min_seq`, sealing and opening segments as needed.
    pub(super) fn reserve(
        &mut self,
        inner: &Inner,
        bucket: usize,
        size: usize,
        min_seq: Option<u64>,
    ) -> Result<Reserved, WriteError> {
        let mut opened = false;
        for _ in 0..8 {
            let bucket = self.write_bucket(inner, bucket);
            if let Some(&id) = self.chains[bucket].back() {
                let owned = self.owned(id);
                let ordered = min_seq.is_none_or(|seq| owned.fields.seq >= seq);
                if !owned.sealed && owned.free_bytes() >= size && ordered {
                    return Ok(Reserved { id, opened });
                }
                if !ordered {
                    // The key's current record is newer than this segment (the cleaner moved
                    // it): rather than seal a barely used segment, write to the newest open
                    // one if it is new enough, and if it expires as this write may: a record
                    // without expiry in a segment with a TTL would keep it from expiring whole.
                    if let Some(newest) = self.newest_open_segment() {
                        let owned = self.owned(newest);
                        let never = |b: usize| b == ttl::NO_EXPIRY_BUCKET;
                        if owned.free_bytes() >= size
                            && min_seq.is_none_or(|s| owned.fields.seq >= s)
                            && never(usize::from(owned.fields.ttl_bucket)) == never(bucket)
                        {
                            return Ok(Reserved { id: newest, opened });
                        }
                    }
                }
                self.seal(id);
            }
            // A segment opened for this write whose carried hot items left too little room for
            // it (a value over half a segment): the next one carries none, so the write fits.
            let segment = inner.obtain_segment(self, !opened)?;
            let id = self.install(inner, segment, bucket)?;
            self.reinsert_survivors(inner, id)?;
            opened = true;
        }
        Err(WriteError::OutOfMemory)
    }

    /// The TTL bucket whose open segment takes a write meant for `bucket`: its own when it has
    /// an open segment or the shard may open another; at the cap, the open bucket with the
    /// nearest longer TTL (else the longest open one). Items keep their exact expiry, so any
    /// segment is correct; the choice only affects how soon a whole segment can be reclaimed.
    /// Without the cap, diverse TTLs would hold one partly filled segment per bucket and shard.
    pub(super) fn write_bucket(&self, inner: &Inner, bucket: usize) -> usize {
        let is_open = self.chains[bucket]
            .back()
            .is_some_and(|&id| !self.owned(id).sealed);
        if is_open {
            return bucket;
        }
        let open = self.open_buckets.iter().map(|&b| usize::from(b));
        ttl::bucket_within_cap(open, bucket, inner.open_segments_per_shard_max)
    }

    /// The open segment with the greatest seq.
    pub(super) fn newest_open_segment(&self) -> Option<u32> {
        self.open_buckets
            .iter()
            .filter_map(|&b| self.chains[usize::from(b)].back().copied())
            .max_by_key(|&id| self.owned(id).fields.seq)
    }

    /// Stops appends to a segment.
    pub(super) fn seal(&mut self, id: u32) {
        let owned = self.owned_mut(id);
        if !owned.sealed {
            owned.sealed = true;
            let bucket = owned.fields.ttl_bucket;
            self.open_buckets.retain(|&b| b != bucket);
        }
    }

    /// Takes ownership of a free (zeroed) segment as the open head of `bucket`'s chain.
    pub(super) fn install(
        &mut self,
        inner: &Inner,
        segment: Segment,
        bucket: usize,
    ) -> Result<u32, WriteError> {
        let id = self.take_fresh(inner, segment, bucket as u16, false)?;
        debug_assert!(!self.open_buckets.contains(&(bucket as u16)));
        self.open_buckets.push(bucket as u16);
        Ok(id)
    }

    /// Takes ownership of a free (zeroed) segment in `bucket`'s chain: writes and persists its
    /// header with a fresh seq, and adds it to the tables, open to appends unless `sealed`.
    pub(super) fn take_fresh(
        &mut self,
        inner: &Inner,
        mut segment: Segment,
        bucket: u16,
        sealed: bool,
    ) -> Result<u32, WriteError> {
        let fields = HeaderFields {
            ttl_bucket: bucket,
            shard: self.id,
            seq: inner.next_seq()?,
            created_ms: inner.now_ms(),
        };
        segment::write_header(segment.header_mut(), fields);
        inner.persisted(segment.persist_header())?;
        let id = segment.id();
        self.adopt(OwnedSegment {
            segment,
            fields,
            write_offset: 0,
            sealed,
            live_items: 0,
            live_bytes: 0,
            live_parts: 0,
            expires_at_ms: Some(0),
            verified: Verified::Clean,
        });
        Ok(id)
    }

    /// Adds a segment to this shard's tables (at open or recovery).
    pub(crate) fn adopt(&mut self, owned: OwnedSegment) {
        let id = owned.segment.id();
        let bucket = owned.fields.ttl_bucket as usize;
        let seq = owned.fields.seq;
        let segments = &self.segments;
        let chain = &mut self.chains[bucket];
        let at = chain.partition_point(|&other| {
            segments[other as usize]
                .as_ref()
                .is_some_and(|s| s.fields.seq < seq)
        });
        chain.insert(at, id);
        let at = self.order.partition_point(|&(_, other)| other < seq);
        self.order.insert(at, (id, seq));
        self.live_bytes += owned.live_bytes;
        assert!(
            self.segments[id as usize].is_none(),
            "a segment has one owner"
        );
        self.segments[id as usize] = Some(Box::new(owned));
        self.touch(id);
    }

    /// Bytes of this shard's segments that hold no live record and take no more writes (see
    /// `EngineStats::dead_bytes`): dead records, and the unwritten room of sealed segments.
    pub(crate) fn dead_bytes(&self) -> u64 {
        self.segments
            .iter()
            .flatten()
            .map(|owned| {
                let takes_more = !owned.sealed || self.is_clean_head(owned.segment.id());
                let used = if takes_more {
                    owned.write_offset
                } else {
                    owned.segment.data().len()
                };
                (used as u64).saturating_sub(owned.live_bytes)
            })
            .sum()
    }

    /// Segments this shard owns.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.iter().filter(|s| s.is_some()).count()
    }
}
