//! The engine's root area in the pool header page (1024 bytes; see docs/POOL_FORMAT.md).
//!
//! ```text
//!  0                 8         12      14      16                24    25   28          32
//!  +-----------------+---------+-------+-------+-----------------+-----+----+-----------+
//!  | magic STRATAEN  | version | shards| zero  | seq_reserved    |dur. |zero|interval_ms|
//!  +-----------------+---------+-------+-------+-----------------+-----+----+-----------+
//!  | zero ...................................................... 60 | crc32c of 0..60  |
//! ```
//!
//! `durability` (0 none, 1 interval, 2 sync) and `interval_ms` record the level the pool was
//! last opened with: after a power loss, recovery applies *that* level's promise.
//!
//! `seq_reserved` is the high-water mark of segment sequence numbers handed out: the engine
//! reserves them in blocks of [`SEQ_RESERVATION`], persisting the mark before using any of a
//! block, so a restart (even after a crash) never hands out a seq, and so a CAS, twice.

/// Magic of an engine root area.
pub const ROOT_MAGIC: [u8; 8] = *b"STRATAEN";
/// Engine format version: 2 since records may be marked superseded (state `0xB`, see
/// `record`); 3 since a wide record's byte 1 says its kind (string, hash); 4 since items may
/// be several records (a wide record's byte 2 flags an owner's part count; kind 2 is a part);
/// 5 since a string may be several records (an owner of kind 0 whose value is a header,
/// `api::large`); 6 since a large hash's owner may be version 3 of the chunked encoding
/// (`strata_types::hash_chunks`, with a bound on its fields' expiries). An older pool has none
/// of these (its wide records have zero bytes 1..4: strings; a version 4 pool's owners are
/// hashes; a version 5 pool's hash owners are version 2) and is opened as it is; the open
/// rewrites the root as version 6, which older binaries refuse, so none of them ever reads a
/// typed record or a part as damage, a string or a key, a large string's header as its value,
/// or a version 3 owner as a damaged hash.
pub const ROOT_VERSION: u32 = 6;
/// The oldest engine format version this binary opens.
const ROOT_VERSION_OLDEST: u32 = 1;
/// Seqs reserved per root update.
pub const SEQ_RESERVATION: u64 = 1024;

const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const SHARDS_OFFSET: usize = VERSION_OFFSET + 4;
const SEQ_RESERVED_OFFSET: usize = SHARDS_OFFSET + 4;
const DURABILITY_OFFSET: usize = SEQ_RESERVED_OFFSET + 8;
const INTERVAL_MS_OFFSET: usize = DURABILITY_OFFSET + 4;
const CRC_OFFSET: usize = 60;

const _: () = assert!(INTERVAL_MS_OFFSET + 4 <= CRC_OFFSET);

/// The root's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// Shard count the pool was created with.
    pub shard_count: u16,
    /// High-water mark of seqs.
    pub seq_reserved: u64,
    /// Durability code and interval the pool was last opened with.
    pub durability: (u8, u32),
}

/// Writes a root.
pub fn write(area: &mut [u8], root: Root) {
    area.fill(0);
    area[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&ROOT_MAGIC);
    area[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&ROOT_VERSION.to_le_bytes());
    area[SHARDS_OFFSET..SHARDS_OFFSET + 2].copy_from_slice(&root.shard_count.to_le_bytes());
    area[DURABILITY_OFFSET] = root.durability.0;
    area[INTERVAL_MS_OFFSET..INTERVAL_MS_OFFSET + 4]
        .copy_from_slice(&root.durability.1.to_le_bytes());
    write_seq_reserved(area, root.seq_reserved);
}

/// Updates the seq high-water mark and the checksum.
pub fn write_seq_reserved(area: &mut [u8], seq_reserved: u64) {
    area[SEQ_RESERVED_OFFSET..SEQ_RESERVED_OFFSET + 8].copy_from_slice(&seq_reserved.to_le_bytes());
    let crc = crc32c::crc32c(&area[..CRC_OFFSET]);
    area[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Reads and validates a root.
pub fn read(area: &[u8]) -> Result<Root, &'static str> {
    if area[MAGIC_OFFSET..MAGIC_OFFSET + 8] != ROOT_MAGIC {
        return Err("bad root magic");
    }
    let crc = u32::from_le_bytes(
        area[CRC_OFFSET..CRC_OFFSET + 4]
            .try_into()
            .expect("4 bytes"),
    );
    if crc32c::crc32c(&area[..CRC_OFFSET]) != crc {
        return Err("root checksum mismatch");
    }
    let version = u32::from_le_bytes(
        area[VERSION_OFFSET..VERSION_OFFSET + 4]
            .try_into()
            .expect("4"),
    );
    if !(ROOT_VERSION_OLDEST..=ROOT_VERSION).contains(&version) {
        return Err("unsupported engine root version");
    }
    if area[SHARDS_OFFSET + 2..SEQ_RESERVED_OFFSET]
        .iter()
        .any(|&b| b != 0)
        || area[DURABILITY_OFFSET + 1..INTERVAL_MS_OFFSET]
            .iter()
            .any(|&b| b != 0)
        || area[INTERVAL_MS_OFFSET + 4..CRC_OFFSET]
            .iter()
            .any(|&b| b != 0)
        || area[CRC_OFFSET + 4..].iter().any(|&b| b != 0)
    {
        return Err("reserved root bytes are not zero");
    }
    let shard_count = u16::from_le_bytes(
        area[SHARDS_OFFSET..SHARDS_OFFSET + 2]
            .try_into()
            .expect("2"),
    );
    if shard_count == 0 || usize::from(shard_count) > crate::config::SHARD_COUNT_MAX {
        return Err("shard count out of range (1..=1024)");
    }
    let seq_reserved = u64::from_le_bytes(
        area[SEQ_RESERVED_OFFSET..SEQ_RESERVED_OFFSET + 8]
            .try_into()
            .expect("8 bytes"),
    );
    let interval_ms = u32::from_le_bytes(
        area[INTERVAL_MS_OFFSET..INTERVAL_MS_OFFSET + 4]
            .try_into()
            .expect("4"),
    );
    if area[DURABILITY_OFFSET] > 2 {
        return Err("unknown durability level");
    }
    // Room is left for a few reservations above it; seqs stay below `SEQ_LIMIT` (CAS values).
    if seq_reserved >= crate::segment::SEQ_LIMIT / 2 {
        return Err("segment seq reservation out of range");
    }
    Ok(Root {
        shard_count,
        seq_reserved,
        durability: (area[DURABILITY_OFFSET], interval_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_round_trips_and_rejects_damage() {
        let mut area = vec![0u8; 1024];
        let root = Root {
            shard_count: 8,
            seq_reserved: 4096,
            durability: (1, 250),
        };
        write(&mut area, root);
        assert_eq!(read(&area), Ok(root));
        for byte in [0, 9, 12, 20, 24, 26, 29, 61, 900] {
            let mut bad = area.clone();
            bad[byte] ^= 4;
            assert!(read(&bad).is_err(), "byte {byte}");
        }
    }

    #[test]
    fn version_1_to_6_roots_are_read_and_newer_ones_refused() {
        let root = Root {
            shard_count: 4,
            seq_reserved: 1024,
            durability: (2, 0),
        };
        let with_version = |version: u32| {
            let mut area = vec![0u8; 1024];
            write(&mut area, root);
            area[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&version.to_le_bytes());
            write_seq_reserved(&mut area, root.seq_reserved); // the checksum again
            area
        };
        assert_eq!(read(&with_version(1)), Ok(root));
        assert_eq!(read(&with_version(2)), Ok(root));
        assert_eq!(read(&with_version(3)), Ok(root));
        assert_eq!(read(&with_version(4)), Ok(root));
        assert_eq!(read(&with_version(5)), Ok(root));
        assert_eq!(read(&with_version(6)), Ok(root));
        for version in [0, 7] {
            assert_eq!(
                read(&with_version(version)),
                Err("unsupported engine root version")
            );
        }
    }
}
