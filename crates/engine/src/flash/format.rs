//! The flash tier's on-medium format (docs/FLASH_FORMAT.md is the full description).
//!
//! ```text
//!  offset 0          4096            4096 + R          4096 + 2R
//!  +----------------+----------------+----------------+-----+
//!  | superblock     | region 0       | region 1       | ... |      R = region_size_bytes
//!  +----------------+----------------+----------------+-----+
//!
//!  region:  +------------------+---------------------------------------+-----------+
//!           | header (4 KiB)   | records, each aligned to the record   | directory |
//!           |                  | alignment (superblock), zero padded   |           |
//!           +------------------+---------------------------------------+-----------+
//! ```
//!
//! The directory follows the records (at the payload's end rounded up to 64 bytes): one
//! 12-byte entry per record, last record first, `| payload offset u32 | key hash u64 |`, with
//! its CRC32C in the header. Reclaim reads it instead of the whole region to learn which
//! index entries point into the region; a directory that fails its CRC sends reclaim back to
//! reading the records themselves.
//!
//! All integers little-endian. The superblock binds the medium to one pool (`pool_id`) and
//! says its geometry and record alignment; a region header names its region seq (unique for the medium's life) and
//! carries a CRC32C of its payload, so a region torn by a crash, or left from an earlier use,
//! is never read as current. Each record is preceded by an 8-byte stamp (`flash_id ^ seq` of
//! the region generation that wrote it), so bytes a torn region write left from an earlier
//! generation never pass for a record of the current one. Records are the engine's
//! (`record.rs`), always with their CAS written out (their position no longer derives it).
//!
//! ```text
//!  record:  | stamp u64 | engine record (header, key, value, CRC32C) | zeros to the record alignment |
//! ```
//!
//! A reclaimed region keeps a header (state `reclaimed`) with its last seq, so that seqs are
//! never reused on the medium even across restarts.

/// Bytes of the superblock and of each region header.
pub const BLOCK_SIZE_BYTES: usize = 4096;
/// Records on flash start at multiples of the medium's record alignment, and index locations
/// count in those units. The alignment is chosen at format time from the medium's size
/// ([`record_align_for`]) and kept in the superblock: the smallest that lets a location (35
/// bits, see `index.rs`) reach the medium's end: 8 bytes below 256 GiB, 64 below 2 TiB, 512
/// at most (below 16 TiB).
pub const RECORD_ALIGN_BYTES_MIN: usize = 8;
/// Largest record alignment, hence the largest medium ([`record_align_for`]).
pub const RECORD_ALIGN_BYTES_MAX: usize = 512;
/// Directories start at multiples of this.
const DIRECTORY_ALIGN_BYTES: u64 = 64;
/// The smallest piece of the medium a torn write keeps or loses whole (a sector: 512 bytes,
/// or 4 KiB on 4Kn devices, which holds whole 512-byte pieces).
const TORN_PIECE_BYTES: usize = 512;
/// A record's head: its stamp and the first bytes of the engine record after it (header,
/// lengths, expiry, CAS: at most 40 bytes), kept within one torn piece.
const RECORD_HEAD_BYTES: usize = 64;

/// Zero bytes to put before a record that would start at payload offset `payload_len`, so
/// that its head lies in one 512-byte piece of the medium (payloads start 4 KiB-aligned).
///
/// The stamp names the region generation, but it can only vouch for the piece it lies in: if
/// a stamp were the last bytes of a piece, a torn write could keep it (new) and lose the next
/// piece, leaving an earlier generation's intact record of the same key at the same offset
/// behind a current stamp. With the head in the stamp's piece, the record's CRC (in its
/// header) is the new record's and covers the whole record: a new head over an older body
/// fails the check, unless the bodies are the same bytes (then it is the new record). Records
/// aligned to 64 bytes or more never need padding.
pub fn head_padding(payload_len: usize) -> usize {
    let into = payload_len % TORN_PIECE_BYTES;
    if into + RECORD_HEAD_BYTES > TORN_PIECE_BYTES {
        TORN_PIECE_BYTES - into
    } else {
        0
    }
}

/// The record alignment for a medium of `medium_bytes`: the smallest power of two from
/// [`RECORD_ALIGN_BYTES_MIN`] whose units number every byte of it below `location_units_max`
/// (the index's reach); `None` when even [`RECORD_ALIGN_BYTES_MAX`] does not.
pub fn record_align_for(medium_bytes: u64, location_units_max: u64) -> Option<usize> {
    let mut align = RECORD_ALIGN_BYTES_MIN;
    while medium_bytes.div_ceil(align as u64) >= location_units_max {
        align *= 2;
        if align > RECORD_ALIGN_BYTES_MAX {
            return None;
        }
    }
    Some(align)
}

const SUPER_MAGIC: [u8; 8] = *b"STRATAFL";
const REGION_MAGIC: [u8; 8] = *b"STRATARG";
/// Version of this format (2: regions end with a directory; 3: the record alignment is the
/// superblock's, no longer always 64 bytes; 4: a record that owns parts is a bundle,
/// `flash::bundle`).
pub const FORMAT_VERSION: u32 = 4;
/// The older version this build still reads: the same layout, without bundles (it never wrote
/// a record that owns parts). A region this build writes is version 4, so a build that reads
/// only 3 drops it rather than misread a bundle as a value.
pub const FORMAT_VERSION_READ_MIN: u32 = 3;

/// Whether this build reads a superblock or region header of `version`.
pub fn reads_version(version: u32) -> bool {
    (FORMAT_VERSION_READ_MIN..=FORMAT_VERSION).contains(&version)
}
/// Bytes of one directory entry: the record's payload offset (u32) and its key's hash (u64).
pub const DIRECTORY_ENTRY_BYTES: usize = 12;

// Superblock fields, each at the end of the one before.
const S_MAGIC: usize = 0;
const S_VERSION: usize = S_MAGIC + 8;
const S_RECORD_ALIGN: usize = S_VERSION + 4;
const S_FLASH_ID: usize = S_RECORD_ALIGN + 4;
const S_POOL_ID: usize = S_FLASH_ID + 8;
const S_REGION_SIZE: usize = S_POOL_ID + 8;
const S_REGION_COUNT: usize = S_REGION_SIZE + 8;
const S_CREATED: usize = S_REGION_COUNT + 8;
const S_CRC: usize = S_CREATED + 8;
const S_END: usize = S_CRC + 4;
const _: () = assert!(S_END <= BLOCK_SIZE_BYTES);

// Region header fields.
const R_MAGIC: usize = 0;
const R_VERSION: usize = R_MAGIC + 8;
const R_STATE: usize = R_VERSION + 4;
const R_FLASH_ID: usize = R_STATE + 4;
const R_SEQ: usize = R_FLASH_ID + 8;
const R_CREATED: usize = R_SEQ + 8;
const R_EXPIRES: usize = R_CREATED + 8;
const R_PAYLOAD_LEN: usize = R_EXPIRES + 8;
const R_RECORDS: usize = R_PAYLOAD_LEN + 8;
const R_PAYLOAD_CRC: usize = R_RECORDS + 8;
const R_DIRECTORY_CRC: usize = R_PAYLOAD_CRC + 4;
const R_CRC: usize = R_DIRECTORY_CRC + 4;
const R_END: usize = R_CRC + 4;
const _: () = assert!(R_END <= BLOCK_SIZE_BYTES);

/// What the superblock says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Random, chosen when the medium was formatted; every region header repeats it.
    pub flash_id: u64,
    /// The pool this flash tier belongs to.
    pub pool_id: u64,
    /// Bytes per region, header included.
    pub region_size_bytes: u64,
    /// Regions after the superblock.
    pub region_count: u64,
    /// When it was formatted.
    pub created_unix_secs: u64,
    /// Records start at multiples of this many bytes; index locations count in them.
    pub record_align_bytes: u32,
}

/// What a region header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    /// The superblock's `flash_id`.
    pub flash_id: u64,
    /// Unique for the medium's life, increasing: orders regions (FIFO reclaim).
    pub seq: u64,
    /// When the region was filled, Unix ms.
    pub created_ms: u64,
    /// Latest expiry of its records (`u64::MAX`: some never expires).
    pub expires_at_ms: u64,
    /// Bytes of records after the header.
    pub payload_bytes: u64,
    /// Records in the payload.
    pub records: u64,
    /// CRC32C of the payload.
    pub payload_crc: u32,
    /// CRC32C of the directory (`records` entries after the payload).
    pub directory_crc: u32,
    /// The region was reclaimed: its records are not to be read, but its seq stays on the
    /// medium, so a later open never hands the same seq to the region again.
    pub reclaimed: bool,
}

impl RegionHeader {
    /// Whether its payload and directory fit a region of `region_size_bytes` (after the
    /// header block): a header whose checksum holds may still carry numbers no region holds.
    pub fn fits(&self, region_size_bytes: u64) -> bool {
        let payload_max = region_size_bytes.saturating_sub(BLOCK_SIZE_BYTES as u64);
        self.payload_bytes <= payload_max
            && self
                .records
                .checked_mul(DIRECTORY_ENTRY_BYTES as u64)
                .and_then(|len| directory_start(self.payload_bytes).checked_add(len))
                .is_some_and(|end| end <= region_size_bytes)
    }
}

const STATE_WRITTEN: u32 = 1;
const STATE_RECLAIMED: u32 = 2;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(word)
}

fn put_u32(b: &mut [u8], at: usize, value: u32) {
    b[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, value: u64) {
    b[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Writes a superblock into `block` (4 KiB, zeroed past it).
pub fn write_superblock(block: &mut [u8], sb: &Superblock) {
    block[..BLOCK_SIZE_BYTES].fill(0);
    block[S_MAGIC..S_MAGIC + 8].copy_from_slice(&SUPER_MAGIC);
    put_u32(block, S_VERSION, FORMAT_VERSION);
    put_u32(block, S_RECORD_ALIGN, sb.record_align_bytes);
    put_u64(block, S_FLASH_ID, sb.flash_id);
    put_u64(block, S_POOL_ID, sb.pool_id);
    put_u64(block, S_REGION_SIZE, sb.region_size_bytes);
    put_u64(block, S_REGION_COUNT, sb.region_count);
    put_u64(block, S_CREATED, sb.created_unix_secs);
    let crc = crc32c::crc32c(&block[..S_CRC]);
    put_u32(block, S_CRC, crc);
}

/// The format version of a block that starts with a superblock's magic (`None`: no magic),
/// whatever else it holds: tells an older or newer strata's flash file from a foreign one.
pub fn superblock_version(block: &[u8]) -> Option<u32> {
    (block.len() >= S_VERSION + 4 && block[S_MAGIC..S_MAGIC + 8] == SUPER_MAGIC)
        .then(|| u32_at(block, S_VERSION))
}

/// Reads a superblock; `None` unless magic, version, checksum, record alignment and reserved
/// bytes are right.
pub fn read_superblock(block: &[u8]) -> Option<Superblock> {
    let align = u32_at(block, S_RECORD_ALIGN) as usize;
    if block.len() < BLOCK_SIZE_BYTES
        || block[S_MAGIC..S_MAGIC + 8] != SUPER_MAGIC
        || !reads_version(u32_at(block, S_VERSION))
        || !align.is_power_of_two()
        || !(RECORD_ALIGN_BYTES_MIN..=RECORD_ALIGN_BYTES_MAX).contains(&align)
        || u32_at(block, S_CRC) != crc32c::crc32c(&block[..S_CRC])
        || block[S_END..BLOCK_SIZE_BYTES].iter().any(|&b| b != 0)
    {
        return None;
    }
    Some(Superblock {
        flash_id: u64_at(block, S_FLASH_ID),
        pool_id: u64_at(block, S_POOL_ID),
        region_size_bytes: u64_at(block, S_REGION_SIZE),
        region_count: u64_at(block, S_REGION_COUNT),
        created_unix_secs: u64_at(block, S_CREATED),
        record_align_bytes: align as u32,
    })
}

/// Writes a region header into `block` (4 KiB, zeroed past it).
pub fn write_region_header(block: &mut [u8], header: &RegionHeader) {
    block[..BLOCK_SIZE_BYTES].fill(0);
    block[R_MAGIC..R_MAGIC + 8].copy_from_slice(&REGION_MAGIC);
    put_u32(block, R_VERSION, FORMAT_VERSION);
    let state = if header.reclaimed {
        STATE_RECLAIMED
    } else {
        STATE_WRITTEN
    };
    put_u32(block, R_STATE, state);
    put_u64(block, R_FLASH_ID, header.flash_id);
    put_u64(block, R_SEQ, header.seq);
    put_u64(block, R_CREATED, header.created_ms);
    put_u64(block, R_EXPIRES, header.expires_at_ms);
    put_u64(block, R_PAYLOAD_LEN, header.payload_bytes);
    put_u64(block, R_RECORDS, header.records);
    put_u32(block, R_PAYLOAD_CRC, header.payload_crc);
    put_u32(block, R_DIRECTORY_CRC, header.directory_crc);
    let crc = crc32c::crc32c(&block[..R_CRC]);
    put_u32(block, R_CRC, crc);
}

/// Reads a region header; `None` unless magic, version, checksum and reserved bytes are right.
/// Whether it belongs to the medium (its `flash_id`) and fits the region is the caller's check.
pub fn read_region_header(block: &[u8]) -> Option<RegionHeader> {
    if block.len() < BLOCK_SIZE_BYTES
        || block[R_MAGIC..R_MAGIC + 8] != REGION_MAGIC
        || !reads_version(u32_at(block, R_VERSION))
        || !matches!(u32_at(block, R_STATE), STATE_WRITTEN | STATE_RECLAIMED)
        || u32_at(block, R_CRC) != crc32c::crc32c(&block[..R_CRC])
        || block[R_END..BLOCK_SIZE_BYTES].iter().any(|&b| b != 0)
    {
        return None;
    }
    Some(RegionHeader {
        flash_id: u64_at(block, R_FLASH_ID),
        seq: u64_at(block, R_SEQ),
        created_ms: u64_at(block, R_CREATED),
        expires_at_ms: u64_at(block, R_EXPIRES),
        payload_bytes: u64_at(block, R_PAYLOAD_LEN),
        records: u64_at(block, R_RECORDS),
        payload_crc: u32_at(block, R_PAYLOAD_CRC),
        directory_crc: u32_at(block, R_DIRECTORY_CRC),
        reclaimed: u32_at(block, R_STATE) == STATE_RECLAIMED,
    })
}

/// Where a region's directory starts, in bytes from the region's start: after the header and
/// `payload_bytes` of records, rounded up to 64 bytes.
pub fn directory_start(payload_bytes: u64) -> u64 {
    (BLOCK_SIZE_BYTES as u64 + payload_bytes).next_multiple_of(DIRECTORY_ALIGN_BYTES)
}

/// The stamp before each record a region of generation `seq` holds, on the medium `flash_id`.
pub fn record_stamp(flash_id: u64, seq: u64) -> u64 {
    flash_id ^ seq
}

/// Writes directory entry `(payload_offset, hash)` into `entry` (12 bytes).
pub fn write_directory_entry(entry: &mut [u8], payload_offset: u32, hash: u64) {
    put_u32(entry, 0, payload_offset);
    put_u64(entry, 4, hash);
}

/// The `(payload_offset, hash)` of directory entry `entry` (12 bytes).
pub fn read_directory_entry(entry: &[u8]) -> (u32, u64) {
    (u32_at(entry, 0), u64_at(entry, 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_superblock() -> Superblock {
        Superblock {
            flash_id: 0xDEAD_BEEF_0000_0001,
            pool_id: 7,
            region_size_bytes: 4 << 20,
            region_count: 1000,
            created_unix_secs: 1_700_000_000,
            record_align_bytes: 8,
        }
    }

    /// A header whose numbers no region holds does not fit, however they overflow.
    #[test]
    fn headers_fit_their_region_or_not() {
        let region = 4u64 << 20;
        let header = |payload_bytes: u64, records: u64| RegionHeader {
            flash_id: 1,
            seq: 1,
            created_ms: 0,
            expires_at_ms: u64::MAX,
            payload_bytes,
            records,
            payload_crc: 0,
            directory_crc: 0,
            reclaimed: false,
        };
        let payload_max = region - BLOCK_SIZE_BYTES as u64;
        assert!(header(0, 0).fits(region));
        assert!(header(payload_max - 4096, 300).fits(region));
        assert!(!header(payload_max + 1, 0).fits(region));
        assert!(!header(payload_max, 1).fits(region));
        // The directory's length fits a u64; its end past the payload does not.
        assert!(!header(1000, u64::MAX / DIRECTORY_ENTRY_BYTES as u64).fits(region));
        assert!(!header(0, u64::MAX).fits(region));
    }

    #[test]
    fn superblocks_and_headers_round_trip_and_every_damaged_byte_is_caught() {
        let sb = sample_superblock();
        let mut block = vec![0u8; BLOCK_SIZE_BYTES];
        write_superblock(&mut block, &sb);
        assert_eq!(read_superblock(&block), Some(sb));
        let header = RegionHeader {
            flash_id: sb.flash_id,
            seq: 99,
            created_ms: 5,
            expires_at_ms: u64::MAX,
            payload_bytes: 12_345,
            records: 17,
            payload_crc: 0xABCD,
            directory_crc: 0x1234_5678,
            reclaimed: false,
        };
        let mut region = vec![0u8; BLOCK_SIZE_BYTES];
        write_region_header(&mut region, &header);
        assert_eq!(read_region_header(&region), Some(header));
        for at in 0..S_END.max(R_END) + 8 {
            let mut bad = block.clone();
            bad[at] ^= 0x04;
            assert_eq!(read_superblock(&bad), None, "superblock byte {at}");
            let mut bad = region.clone();
            bad[at] ^= 0x04;
            assert_eq!(read_region_header(&bad), None, "region header byte {at}");
        }
        assert_eq!(
            read_region_header(&block),
            None,
            "a superblock is no region header"
        );
        // A version 1 header (before directories) is not taken for this format's.
        let mut old = region.clone();
        put_u32(&mut old, R_VERSION, 1);
        let crc = crc32c::crc32c(&old[..R_CRC]);
        put_u32(&mut old, R_CRC, crc);
        assert_eq!(read_region_header(&old), None);
    }

    #[test]
    fn the_record_alignment_is_the_smallest_that_reaches_the_medium_s_end() {
        let units_max = crate::index::FLASH_TIER_BIT - 1;
        assert_eq!(record_align_for(4 << 30, units_max), Some(8));
        assert_eq!(record_align_for((256 << 30) - 4096, units_max), Some(8));
        assert_eq!(record_align_for(256 << 30, units_max), Some(16));
        assert_eq!(record_align_for((2 << 40) - 4096, units_max), Some(64));
        assert_eq!(record_align_for(2 << 40, units_max), Some(128));
        assert_eq!(record_align_for((16 << 40) - 4096, units_max), Some(512));
        assert_eq!(record_align_for(16 << 40, units_max), None);
        // Whatever the size, the last byte's unit stays below the reach.
        for bytes in [1u64 << 20, 300 << 30, 3 << 40, 15 << 40] {
            let align = record_align_for(bytes, units_max).unwrap() as u64;
            assert!((bytes - 1) / align < units_max - 1, "{bytes}");
        }
    }

    #[test]
    fn a_record_s_head_never_straddles_a_512_byte_piece() {
        for payload_len in (0..8192).step_by(8) {
            let start = payload_len + head_padding(payload_len);
            assert_eq!(
                start / 512,
                (start + RECORD_HEAD_BYTES - 1) / 512,
                "a record at {payload_len}"
            );
            assert!(head_padding(payload_len) < RECORD_HEAD_BYTES);
        }
        // 64-byte aligned records are never padded.
        assert!((0..8192).step_by(64).all(|at| head_padding(at) == 0));
        // Eight bytes before a piece's end: padded to it.
        assert_eq!(head_padding(504), 8);
        assert_eq!(head_padding(448), 0);
    }

    /// Version 3 (before bundles) is read as it was written: its layout is this one's, and it
    /// holds no record that owns parts. A version past this build's is not.
    #[test]
    fn version_3_superblocks_and_region_headers_are_read_and_a_newer_one_is_not() {
        let sb = sample_superblock();
        let mut block = vec![0u8; BLOCK_SIZE_BYTES];
        let header = RegionHeader {
            flash_id: 7,
            seq: 3,
            created_ms: 11,
            expires_at_ms: u64::MAX,
            payload_bytes: 4096,
            records: 2,
            payload_crc: 5,
            directory_crc: 6,
            reclaimed: false,
        };
        let mut region = vec![0u8; BLOCK_SIZE_BYTES];
        for (version, read) in [(3, true), (4, true), (5, false), (2, false)] {
            write_superblock(&mut block, &sb);
            put_u32(&mut block, S_VERSION, version);
            let crc = crc32c::crc32c(&block[..S_CRC]);
            put_u32(&mut block, S_CRC, crc);
            assert_eq!(
                read_superblock(&block) == Some(sb),
                read,
                "superblock {version}"
            );
            write_region_header(&mut region, &header);
            put_u32(&mut region, R_VERSION, version);
            let crc = crc32c::crc32c(&region[..R_CRC]);
            put_u32(&mut region, R_CRC, crc);
            assert_eq!(
                read_region_header(&region) == Some(header),
                read,
                "region {version}"
            );
        }
    }

    #[test]
    fn a_superblock_of_another_format_version_is_told_apart_from_a_foreign_block() {
        let sb = sample_superblock();
        let mut block = vec![0u8; BLOCK_SIZE_BYTES];
        write_superblock(&mut block, &sb);
        assert_eq!(superblock_version(&block), Some(FORMAT_VERSION));
        put_u32(&mut block, S_VERSION, 2);
        let crc = crc32c::crc32c(&block[..S_CRC]);
        put_u32(&mut block, S_CRC, crc);
        assert_eq!(read_superblock(&block), None);
        assert_eq!(superblock_version(&block), Some(2));
        assert_eq!(superblock_version(&[0u8; BLOCK_SIZE_BYTES]), None);
        // A record alignment that is no power of two, or out of range, is refused even with a
        // good checksum.
        for bad in [0u32, 4, 24, 1024] {
            write_superblock(
                &mut block,
                &Superblock {
                    record_align_bytes: bad,
                    ..sb
                },
            );
            assert_eq!(read_superblock(&block), None, "{bad}");
        }
    }

    #[test]
    fn directory_entries_round_trip_after_the_payload() {
        let mut entry = [0u8; DIRECTORY_ENTRY_BYTES];
        write_directory_entry(&mut entry, 4_194_240, 0x0123_4567_89AB_CDEF);
        assert_eq!(
            read_directory_entry(&entry),
            (4_194_240, 0x0123_4567_89AB_CDEF)
        );
        assert_eq!(directory_start(0), 4096);
        assert_eq!(directory_start(1), 4096 + 64);
        assert_eq!(directory_start(128), 4096 + 128);
    }
}
