//! A segment as the engine sees it: the pool's segment handle plus DRAM bookkeeping, and the
//! engine's format of the 64-byte segment header line in the pool.
//!
//! ```text
//!  segment header line (little-endian):
//!  0      1      2        4        6        8                16               24
//!  +------+------+--------+--------+--------+----------------+----------------+
//!  |state |vers. |ttl_bkt | shard  | zero   | seq (u64)      | created_ms u64 |
//!  +------+------+--------+--------+--------+----------------+----------------+
//!  | zero ...................................................| crc32c of 0..60 |
//!  +---------------------------------------------------------+----------------+
//!  state 0 = free (the whole line is zero), 1 = in use.
//! ```
//!
//! `seq` is the segment's ordering stamp: unique and increasing across the pool's life (the
//! root area reserves them in blocks so a restart never reuses one). Records in one segment
//! are ordered by offset, so `(seq, offset)` orders every write of a key (see `shard` for the
//! rule that keeps this true across TTL buckets). It also forms the CAS: `seq << 20 | offset/8`.

use strata_pool::Segment;

/// How far ahead of a walk over a segment's records the lines are asked for
/// ([`OwnedSegment::for_each_trusted_record`]).
const WALK_PREFETCH_BYTES: usize = 2048;

const STATE_OFFSET: usize = 0;
const VERSION_OFFSET: usize = STATE_OFFSET + 1;
const TTL_BUCKET_OFFSET: usize = VERSION_OFFSET + 1;
const SHARD_OFFSET: usize = TTL_BUCKET_OFFSET + 2;
const SEQ_OFFSET: usize = SHARD_OFFSET + 4;
const CREATED_OFFSET: usize = SEQ_OFFSET + 8;
const CRC_OFFSET: usize = 60;
const STATE_IN_USE: u8 = 1;
const HEADER_VERSION: u8 = 1;

const _: () = assert!(CREATED_OFFSET + 8 <= CRC_OFFSET);
const _: () = assert!(CRC_OFFSET + 4 == strata_pool::SEGMENT_HEADER_SIZE_BYTES);

/// Bits of a CAS value that hold the record offset (in 8-byte units).
pub const CAS_OFFSET_BITS: u32 = 20;
/// Seqs stay below this, so that `seq << CAS_OFFSET_BITS` never overflows a CAS value (2^44
/// segments: at a million new segments a second, half a year... of seconds: 200 years of
/// 1 MiB segments written at 3 GB/s).
pub const SEQ_LIMIT: u64 = 1 << (64 - CAS_OFFSET_BITS);

/// The header fields of an in-use segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderFields {
    /// TTL bucket the segment serves.
    pub ttl_bucket: u16,
    /// Shard that owns it.
    pub shard: u16,
    /// Ordering stamp.
    pub seq: u64,
    /// When it was opened, Unix ms.
    pub created_ms: u64,
}

/// Writes an in-use header line.
pub fn write_header(line: &mut [u8], fields: HeaderFields) {
    line.fill(0);
    line[STATE_OFFSET] = STATE_IN_USE;
    line[VERSION_OFFSET] = HEADER_VERSION;
    line[TTL_BUCKET_OFFSET..TTL_BUCKET_OFFSET + 2]
        .copy_from_slice(&fields.ttl_bucket.to_le_bytes());
    line[SHARD_OFFSET..SHARD_OFFSET + 2].copy_from_slice(&fields.shard.to_le_bytes());
    line[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&fields.seq.to_le_bytes());
    line[CREATED_OFFSET..CREATED_OFFSET + 8].copy_from_slice(&fields.created_ms.to_le_bytes());
    let crc = crc32c::crc32c(&line[..CRC_OFFSET]);
    line[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
}

/// What a header line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderRead {
    /// All zero: a free segment.
    Free,
    /// A valid in-use header.
    InUse(HeaderFields),
    /// Neither: damaged.
    Corrupt,
}

/// Decodes a header line.
pub fn read_header(line: &[u8]) -> HeaderRead {
    if line.iter().all(|&b| b == 0) {
        return HeaderRead::Free;
    }
    let crc = u32::from_le_bytes(line[CRC_OFFSET..].try_into().expect("4 bytes"));
    if line[STATE_OFFSET] != STATE_IN_USE
        || line[VERSION_OFFSET] != HEADER_VERSION
        || crc32c::crc32c(&line[..CRC_OFFSET]) != crc
        || line[SHARD_OFFSET + 2..SEQ_OFFSET].iter().any(|&b| b != 0)
        || line[CREATED_OFFSET + 8..CRC_OFFSET].iter().any(|&b| b != 0)
    {
        return HeaderRead::Corrupt;
    }
    let u16_at = |at: usize| u16::from_le_bytes(line[at..at + 2].try_into().expect("2 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(line[at..at + 8].try_into().expect("8 bytes"));
    if usize::from(u16_at(TTL_BUCKET_OFFSET)) >= crate::ttl::TTL_BUCKET_COUNT
        || u64_at(SEQ_OFFSET) >= SEQ_LIMIT
    {
        return HeaderRead::Corrupt; // A checksum that matches a field no writer could write.
    }
    HeaderRead::InUse(HeaderFields {
        ttl_bucket: u16_at(TTL_BUCKET_OFFSET),
        shard: u16_at(SHARD_OFFSET),
        seq: u64_at(SEQ_OFFSET),
        created_ms: u64_at(CREATED_OFFSET),
    })
}

/// A segment's DRAM bookkeeping apart from its handle, header and seal: what the index files'
/// segment books and the clean-close snapshot record for a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Book {
    /// Next append offset.
    pub write_offset: usize,
    /// Live records.
    pub live_items: u32,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Latest expiry among its records; `None` when some record never expires.
    pub expires_at_ms: Option<u64>,
}

impl Book {
    /// Whether the numbers can describe a segment of `segment_size_bytes` (the only check a
    /// book read from a file can get: it has no checksum of its own).
    pub fn is_plausible(&self, segment_size_bytes: usize) -> bool {
        self.write_offset <= segment_size_bytes
            && self.live_bytes <= self.write_offset as u64
            && u64::from(self.live_items) * 16 <= self.live_bytes
            && (self.live_items == 0) == (self.live_bytes == 0)
    }

    /// The bookkeeping of a segment with no records (what recovery's scan starts from).
    pub const EMPTY: Book = Book {
        write_offset: 0,
        live_items: 0,
        live_bytes: 0,
        expires_at_ms: Some(0),
    };
}

/// What is known of the records of a segment's log `[0, write_offset)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verified {
    /// Adopted from a clean-close snapshot or the index files, not read since: records may
    /// have been damaged while no process held the pool. Reads validate each record (checksum)
    /// until the scrub has walked the segment.
    Unverified,
    /// Every record was validated since this process opened the pool (by recovery or the
    /// scrub), or written by it: reads and walks trust the bytes.
    Clean,
    /// A walk found damaged bytes between valid records: reads keep validating, and walks skip
    /// the damage (`record::walk`).
    Damaged,
}

/// A segment owned by a shard, with its DRAM bookkeeping.
#[derive(Debug)]
pub struct OwnedSegment {
    /// The pool's handle.
    pub segment: Segment,
    /// Header fields as last written.
    pub fields: HeaderFields,
    /// Next append offset; records occupy `[0, write_offset)`.
    pub write_offset: usize,
    /// No more appends (full, or recovered).
    pub sealed: bool,
    /// Live records.
    pub live_items: u32,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Live part records (of `live_items`; see `record`'s module docs): counted for the
    /// segments this process wrote and those recovery or the scrub walked, 0 in a segment
    /// adopted from its book until the scrub walks it (the books do not keep it).
    pub live_parts: u32,
    /// Latest expiry among its records; `None` when some record never expires.
    pub expires_at_ms: Option<u64>,
    /// Whether its records can be trusted without checking them.
    pub verified: Verified,
}

impl OwnedSegment {
    /// A segment found in use at open, with its recorded bookkeeping. Sealed: new writes go to
    /// fresh segments. Unverified until recovery or the scrub walks it.
    pub fn reopened(segment: Segment, fields: HeaderFields, book: Book) -> Self {
        OwnedSegment {
            segment,
            fields,
            write_offset: book.write_offset,
            sealed: true,
            live_items: book.live_items,
            live_bytes: book.live_bytes,
            live_parts: 0,
            expires_at_ms: book.expires_at_ms,
            verified: Verified::Unverified,
        }
    }

    /// Whether reads and walks may trust its records without checking them.
    pub fn is_clean(&self) -> bool {
        self.verified == Verified::Clean
    }

    /// The bytes its records may occupy.
    pub fn log(&self) -> &[u8] {
        &self.segment.data()[..self.write_offset]
    }

    /// CAS value of the record at `offset`.
    pub fn cas_at(&self, offset: usize) -> u64 {
        (self.fields.seq << CAS_OFFSET_BITS) | (offset as u64 / 8)
    }

    /// Calls `f` with each record of a clean segment, at its offset, in log order: the bytes
    /// are trusted (`record::read_trusted`).
    pub fn for_each_trusted_record(&self, mut f: impl FnMut(usize, crate::record::RecordView<'_>)) {
        debug_assert!(
            self.is_clean(),
            "only a clean segment's records are trusted"
        );
        let mut offset = 0;
        let log = self.log();
        let mut prefetched_to = 0;
        while offset < self.write_offset {
            // The walk finds each record from the one before's length, so the CPU cannot run
            // ahead of it: the lines a little further on are asked for now (a cold segment's
            // walk, the cleaner's, waited on memory for most of its time).
            // From the current record on only: a large record's lines are skipped, not asked
            // for (a walk over 512 KiB parts asked for every line of them).
            let ahead_end = (offset + WALK_PREFETCH_BYTES).min(self.write_offset);
            prefetched_to = prefetched_to.max(offset);
            while prefetched_to < ahead_end {
                strata_pool::prefetch(&log[prefetched_to]);
                prefetched_to += strata_pool::CACHE_LINE_SIZE_BYTES;
            }
            let Some(view) = crate::record::read_trusted(&log[offset..]) else {
                debug_assert!(
                    false,
                    "a clean segment holds records up to its write offset"
                );
                break;
            };
            let size = view.size_bytes;
            f(offset, view);
            offset += size;
        }
    }

    /// Bytes still free for appends.
    pub fn free_bytes(&self) -> usize {
        if self.sealed {
            0
        } else {
            self.segment.data().len() - self.write_offset
        }
    }

    /// Widens the segment's expiry to cover a record expiring at `expires_at_ms`.
    pub fn cover_expiry(&mut self, expires_at_ms: Option<u64>, first_record: bool) {
        self.expires_at_ms = match (first_record, self.expires_at_ms, expires_at_ms) {
            (true, _, e) => e,
            (false, Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_detects_damage() {
        let fields = HeaderFields {
            ttl_bucket: 1024,
            shard: 3,
            seq: 1 << 40,
            created_ms: 99,
        };
        let mut line = [0u8; 64];
        write_header(&mut line, fields);
        assert_eq!(read_header(&line), HeaderRead::InUse(fields));
        assert_eq!(read_header(&[0u8; 64]), HeaderRead::Free);
        for byte in 0..64 {
            let mut bad = line;
            bad[byte] ^= 0x10;
            assert_eq!(read_header(&bad), HeaderRead::Corrupt, "byte {byte}");
        }
    }
}
