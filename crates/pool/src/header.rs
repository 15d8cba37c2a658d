//! The pool header: the first page of every pool, written as bytes at named offsets.
//!
//! The layout is the public contract documented in `docs/POOL_FORMAT.md`; this file repeats it
//! and derives each offset from the one before. All integers are little-endian.
//!
//! ```text
//!  0                   8                   16                  24                  32
//!  +---------+---------+---------+---------+---------+---------+---------+---------+
//!  | magic "STRATAPL"  | version | hdr_size| segment_size_bytes| segment_count     |   0..32
//!  +-------------------+---------+---------+-------------------+-------------------+
//!  | segment_table_off | data_offset       | created_unix_secs | pool_id           |  32..64
//!  +---------+---------+-------------------+-------------------+-------------------+
//!  | geo_crc | zero    | reserved (zero) ............................ up to 128    |  64..128
//!  +---------+---------+-------------------+-------------------+-------------------+
//!  | state_seq         | clean | zero (7)  | boot_id (16 bytes)                    | 128..160
//!  +-------------------+-------------------+---------+---------+-------------------+
//!  | state_crc | zero  | reserved (zero) .............................. up to 1024 | 160..1024
//!  +-------------------------------------------------------------------------------+
//!  | root area: 1024 bytes owned by the engine (its own format and checksum)      | 1024..2048
//!  +-------------------------------------------------------------------------------+
//!  | reserved (zero) ............................................... up to 4096   |
//!  +-------------------------------------------------------------------------------+
//! ```
//!
//! The geometry (bytes 0..64) is written once at creation and protected by `geo_crc`. The state
//! line (bytes 128..168) changes at open and clean close, and is protected by `state_crc`; it
//! sits in its own cache line so that updating it never rewrites the geometry.

use crate::error::PoolError;

/// The eight bytes every strata pool starts with.
pub const MAGIC: [u8; 8] = *b"STRATAPL";
/// The format version this build writes and the only one it opens.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the header page, and the alignment of the segment table and the data area.
pub const HEADER_SIZE_BYTES: usize = 4096;

pub(crate) const MAGIC_OFFSET: usize = 0;
pub(crate) const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
pub(crate) const HEADER_SIZE_OFFSET: usize = VERSION_OFFSET + 4;
pub(crate) const SEGMENT_SIZE_OFFSET: usize = HEADER_SIZE_OFFSET + 4;
pub(crate) const SEGMENT_COUNT_OFFSET: usize = SEGMENT_SIZE_OFFSET + 8;
pub(crate) const SEGMENT_TABLE_OFFSET_OFFSET: usize = SEGMENT_COUNT_OFFSET + 8;
pub(crate) const DATA_OFFSET_OFFSET: usize = SEGMENT_TABLE_OFFSET_OFFSET + 8;
pub(crate) const CREATED_OFFSET: usize = DATA_OFFSET_OFFSET + 8;
pub(crate) const POOL_ID_OFFSET: usize = CREATED_OFFSET + 8;
pub(crate) const GEOMETRY_END: usize = POOL_ID_OFFSET + 8;
pub(crate) const GEOMETRY_CRC_OFFSET: usize = GEOMETRY_END;

pub(crate) const STATE_OFFSET: usize = 128;
pub(crate) const STATE_SEQ_OFFSET: usize = STATE_OFFSET;
pub(crate) const CLEAN_OFFSET: usize = STATE_SEQ_OFFSET + 8;
pub(crate) const BOOT_ID_OFFSET: usize = CLEAN_OFFSET + 8;
pub(crate) const STATE_END: usize = BOOT_ID_OFFSET + 16;
pub(crate) const STATE_CRC_OFFSET: usize = STATE_END;

/// Where the engine's root area starts, and how long it is.
pub const ROOT_OFFSET: usize = 1024;
/// Length of the engine's root area.
pub const ROOT_SIZE_BYTES: usize = 1024;

/// Size of one segment header in the segment table: one cache line.
pub const SEGMENT_HEADER_SIZE_BYTES: usize = 64;

const _: () = assert!(GEOMETRY_END == 64);
const _: () = assert!(GEOMETRY_CRC_OFFSET + 4 <= STATE_OFFSET);
const _: () = assert!(STATE_OFFSET.is_multiple_of(64));
const _: () = assert!(STATE_END == 160);
const _: () = assert!(STATE_CRC_OFFSET + 4 <= ROOT_OFFSET);
const _: () = assert!(ROOT_OFFSET + ROOT_SIZE_BYTES <= HEADER_SIZE_BYTES);

/// The fixed shape of a pool, written once at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per segment; a multiple of 4096.
    pub segment_size_bytes: u64,
    /// Number of segments in the data area.
    pub segment_count: u64,
}

impl Geometry {
    /// Byte offset of the segment header table from the start of the pool.
    pub fn segment_table_offset(&self) -> u64 {
        HEADER_SIZE_BYTES as u64
    }

    /// Byte offset of segment 0's data from the start of the pool.
    pub fn data_offset(&self) -> u64 {
        let table_bytes = self.segment_count * SEGMENT_HEADER_SIZE_BYTES as u64;
        self.segment_table_offset() + round_up(table_bytes, HEADER_SIZE_BYTES as u64)
    }

    /// Byte offsets of segment `id`'s header line and of its data from the start of the pool.
    pub(crate) fn segment_offsets(&self, id: u32) -> (usize, usize) {
        let id = u64::from(id);
        assert!(id < self.segment_count, "segment id in range");
        let header = self.segment_table_offset() + id * SEGMENT_HEADER_SIZE_BYTES as u64;
        let data = self.data_offset() + id * self.segment_size_bytes;
        (header as usize, data as usize)
    }

    /// Total bytes of a pool with this geometry.
    pub fn pool_size_bytes(&self) -> u64 {
        self.data_offset() + self.segment_count * self.segment_size_bytes
    }
}

pub(crate) fn round_up(value: u64, multiple: u64) -> u64 {
    value.div_ceil(multiple) * multiple
}

/// What the header's geometry part says, as read from a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Format version found.
    pub format_version: u32,
    /// Segment size and count.
    pub geometry: Geometry,
    /// Creation time, Unix seconds.
    pub created_unix_secs: u64,
    /// Random id chosen at creation.
    pub pool_id: u64,
}

/// What the header's state line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderState {
    /// Incremented by every state update.
    pub state_seq: u64,
    /// True when the last process to open the pool closed it cleanly.
    pub clean: bool,
    /// Kernel boot id (`/proc/sys/kernel/random/boot_id`) of the last process to open the pool.
    pub boot_id: [u8; 16],
}

pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

pub(crate) fn write_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

pub(crate) fn write_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

/// Writes a fresh header page for `geometry` into `page` (which must be zeroed).
pub(crate) fn write_new(page: &mut [u8], geometry: Geometry, created_unix_secs: u64, pool_id: u64) {
    assert_eq!(page.len(), HEADER_SIZE_BYTES);
    assert!(
        page.iter().all(|&b| b == 0),
        "a new header is written over zeroes only"
    );
    page[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
    write_u32(page, VERSION_OFFSET, FORMAT_VERSION);
    write_u32(page, HEADER_SIZE_OFFSET, HEADER_SIZE_BYTES as u32);
    write_u64(page, SEGMENT_SIZE_OFFSET, geometry.segment_size_bytes);
    write_u64(page, SEGMENT_COUNT_OFFSET, geometry.segment_count);
    write_u64(
        page,
        SEGMENT_TABLE_OFFSET_OFFSET,
        geometry.segment_table_offset(),
    );
    write_u64(page, DATA_OFFSET_OFFSET, geometry.data_offset());
    write_u64(page, CREATED_OFFSET, created_unix_secs);
    write_u64(page, POOL_ID_OFFSET, pool_id);
    let crc = crc32c::crc32c(&page[..GEOMETRY_END]);
    write_u32(page, GEOMETRY_CRC_OFFSET, crc);
    write_state(
        page,
        HeaderState {
            state_seq: 0,
            clean: false,
            boot_id: [0; 16],
        },
    );
}

/// Writes the state line and its checksum.
pub(crate) fn write_state(page: &mut [u8], state: HeaderState) {
    write_u64(page, STATE_SEQ_OFFSET, state.state_seq);
    page[CLEAN_OFFSET] = u8::from(state.clean);
    page[BOOT_ID_OFFSET..BOOT_ID_OFFSET + 16].copy_from_slice(&state.boot_id);
    let crc = crc32c::crc32c(&page[STATE_OFFSET..STATE_END]);
    write_u32(page, STATE_CRC_OFFSET, crc);
}

/// The pool length a header page describes, if its magic, version and geometry checksum are
/// sound (the rest is for `validate`).
pub(crate) fn described_geometry(page: &[u8]) -> Option<Geometry> {
    if page.len() < HEADER_SIZE_BYTES
        || page[MAGIC_OFFSET..MAGIC_OFFSET + 8] != MAGIC
        || read_u32(page, VERSION_OFFSET) != FORMAT_VERSION
        || crc32c::crc32c(&page[..GEOMETRY_END]) != read_u32(page, GEOMETRY_CRC_OFFSET)
    {
        return None;
    }
    let geometry = Geometry {
        segment_size_bytes: read_u64(page, SEGMENT_SIZE_OFFSET),
        segment_count: read_u64(page, SEGMENT_COUNT_OFFSET),
    };
    check_geometry_fields(page, geometry).ok()?;
    Some(geometry)
}

/// Validates a header page: magic, version, checksums, internal consistency, zeroed reserved
/// bytes. `file_len_bytes` is the length of the file or mapping holding the pool.
pub(crate) fn validate(
    page: &[u8],
    file_len_bytes: u64,
) -> Result<(HeaderInfo, HeaderState), PoolError> {
    if page.len() < HEADER_SIZE_BYTES {
        return Err(PoolError::Truncated {
            expected_bytes: HEADER_SIZE_BYTES as u64,
            found_bytes: file_len_bytes,
        });
    }
    if page[MAGIC_OFFSET..MAGIC_OFFSET + 8] != MAGIC {
        return Err(PoolError::BadMagic);
    }
    let version = read_u32(page, VERSION_OFFSET);
    if version != FORMAT_VERSION {
        return Err(PoolError::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let geometry_crc = crc32c::crc32c(&page[..GEOMETRY_END]);
    if geometry_crc != read_u32(page, GEOMETRY_CRC_OFFSET) {
        return Err(PoolError::HeaderCorrupt {
            what: "geometry checksum mismatch",
        });
    }
    let geometry = Geometry {
        segment_size_bytes: read_u64(page, SEGMENT_SIZE_OFFSET),
        segment_count: read_u64(page, SEGMENT_COUNT_OFFSET),
    };
    check_geometry_fields(page, geometry)?;
    let state_crc = crc32c::crc32c(&page[STATE_OFFSET..STATE_END]);
    if state_crc != read_u32(page, STATE_CRC_OFFSET) {
        return Err(PoolError::HeaderCorrupt {
            what: "state checksum mismatch",
        });
    }
    check_reserved_zero(page)?;
    let expected_bytes = geometry.pool_size_bytes();
    if file_len_bytes != expected_bytes {
        return Err(PoolError::Truncated {
            expected_bytes,
            found_bytes: file_len_bytes,
        });
    }
    let info = HeaderInfo {
        format_version: version,
        geometry,
        created_unix_secs: read_u64(page, CREATED_OFFSET),
        pool_id: read_u64(page, POOL_ID_OFFSET),
    };
    let clean = match page[CLEAN_OFFSET] {
        0 => false,
        1 => true,
        _ => {
            return Err(PoolError::HeaderCorrupt {
                what: "clean flag is neither 0 nor 1",
            })
        }
    };
    let mut boot_id = [0; 16];
    boot_id.copy_from_slice(&page[BOOT_ID_OFFSET..BOOT_ID_OFFSET + 16]);
    let state_seq = read_u64(page, STATE_SEQ_OFFSET);
    // One state update per open and per clean close: 2^62 is out of reach, and a value past it
    // (with a checksum to match) would overflow the next update.
    if state_seq >= 1 << 62 {
        return Err(PoolError::HeaderCorrupt {
            what: "state sequence out of range",
        });
    }
    let state = HeaderState {
        state_seq,
        clean,
        boot_id,
    };
    Ok((info, state))
}

fn check_geometry_fields(page: &[u8], geometry: Geometry) -> Result<(), PoolError> {
    if read_u32(page, HEADER_SIZE_OFFSET) as usize != HEADER_SIZE_BYTES {
        return Err(PoolError::HeaderCorrupt {
            what: "header size field",
        });
    }
    crate::validate_geometry(geometry).map_err(|_| PoolError::HeaderCorrupt {
        what: "geometry out of range",
    })?;
    if read_u64(page, SEGMENT_TABLE_OFFSET_OFFSET) != geometry.segment_table_offset()
        || read_u64(page, DATA_OFFSET_OFFSET) != geometry.data_offset()
    {
        return Err(PoolError::HeaderCorrupt {
            what: "derived offsets disagree with geometry",
        });
    }
    Ok(())
}

fn check_reserved_zero(page: &[u8]) -> Result<(), PoolError> {
    let reserved = [
        GEOMETRY_CRC_OFFSET + 4..STATE_OFFSET,
        CLEAN_OFFSET + 1..BOOT_ID_OFFSET,
        STATE_CRC_OFFSET + 4..ROOT_OFFSET,
        ROOT_OFFSET + ROOT_SIZE_BYTES..HEADER_SIZE_BYTES,
    ];
    for range in reserved {
        if page[range].iter().any(|&b| b != 0) {
            return Err(PoolError::HeaderCorrupt {
                what: "reserved bytes are not zero",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_page(geometry: Geometry) -> Vec<u8> {
        let mut page = vec![0u8; HEADER_SIZE_BYTES];
        write_new(&mut page, geometry, 1_700_000_000, 42);
        page
    }

    const GEOMETRY: Geometry = Geometry {
        segment_size_bytes: 1 << 20,
        segment_count: 8,
    };

    #[test]
    fn a_new_header_validates() {
        let page = new_page(GEOMETRY);
        let (info, state) = validate(&page, GEOMETRY.pool_size_bytes()).unwrap();
        assert_eq!(info.geometry, GEOMETRY);
        assert_eq!(info.pool_id, 42);
        assert!(!state.clean);
    }

    #[test]
    fn every_single_bit_flip_in_checked_bytes_is_refused() {
        let page = new_page(GEOMETRY);
        for byte in
            (0..STATE_CRC_OFFSET + 4).chain(ROOT_OFFSET + ROOT_SIZE_BYTES..HEADER_SIZE_BYTES)
        {
            for bit in 0..8 {
                let mut bad = page.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    validate(&bad, GEOMETRY.pool_size_bytes()).is_err(),
                    "flip of byte {byte} bit {bit} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn wrong_length_is_truncation() {
        let page = new_page(GEOMETRY);
        let err = validate(&page, GEOMETRY.pool_size_bytes() - 4096).unwrap_err();
        assert!(matches!(err, PoolError::Truncated { .. }));
    }

    #[test]
    fn other_version_is_named() {
        let mut page = new_page(GEOMETRY);
        write_u32(&mut page, VERSION_OFFSET, 7);
        let err = validate(&page, GEOMETRY.pool_size_bytes()).unwrap_err();
        assert_eq!(
            err,
            PoolError::UnsupportedVersion {
                found: 7,
                supported: FORMAT_VERSION
            }
        );
    }

    #[test]
    fn state_round_trips() {
        let mut page = new_page(GEOMETRY);
        let state = HeaderState {
            state_seq: 9,
            clean: true,
            boot_id: [7; 16],
        };
        write_state(&mut page, state);
        let (_, read) = validate(&page, GEOMETRY.pool_size_bytes()).unwrap();
        assert_eq!(read, state);
    }
}
