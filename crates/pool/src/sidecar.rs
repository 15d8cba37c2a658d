//! The sidecar file: DRAM state the engine saved at a clean close (its index), kept next to a
//! file pool as `<pool>.sidecar` and valid only for the pool state it was written for.
//!
//! ```text
//!  0             8          12         16                24                32        36    40
//!  +-------------+----------+----------+-----------------+-----------------+---------+-----+
//!  | "STRATASC"  | version  | zero     | pool_id         | clean_state_seq | payload | hdr |
//!  |             | (u32 1)  |          |                 |                 | crc32c  | crc |
//!  +-------------+----------+----------+-----------------+-----------------+---------+-----+
//!  | payload_len (u64) at 40 | payload ...                                                 |
//! ```
//!
//! It is written (and fsynced) before the pool's clean flag, for the state sequence number the
//! clean close writes; at the next open it is used only if the pool is clean with exactly that
//! sequence number and the same pool id, and it is deleted whether used or not.

use std::io::Write;
use std::path::Path;

use crate::error::PoolError;

const MAGIC: [u8; 8] = *b"STRATASC";
const VERSION: u32 = 1;
const HEADER_SIZE_BYTES: usize = 48;

/// Writes the sidecar and fsyncs it.
pub(crate) fn write(
    path: &Path,
    pool_id: u64,
    clean_state_seq: u64,
    payload: &[u8],
) -> Result<(), PoolError> {
    let mut header = [0u8; HEADER_SIZE_BYTES];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&pool_id.to_le_bytes());
    header[24..32].copy_from_slice(&clean_state_seq.to_le_bytes());
    header[32..36].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    header[40..48].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let header_crc = crc32c::crc32c(&header[..36]) ^ crc32c::crc32c(&header[40..48]);
    header[36..40].copy_from_slice(&header_crc.to_le_bytes());
    let mut file =
        std::fs::File::create(path).map_err(|e| crate::io_err("create sidecar", path, e))?;
    file.write_all(&header)
        .map_err(|e| crate::io_err("write sidecar", path, e))?;
    file.write_all(payload)
        .map_err(|e| crate::io_err("write sidecar", path, e))?;
    file.sync_all()
        .map_err(|e| crate::io_err("fsync sidecar", path, e))
}

/// Reads the sidecar's payload if it is valid for this pool and clean state.
pub(crate) fn read(path: &Path, pool_id: u64, clean_state_seq: u64) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let header = bytes.get(..HEADER_SIZE_BYTES)?;
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let header_crc = crc32c::crc32c(&header[..36]) ^ crc32c::crc32c(&header[40..48]);
    let valid = header[..8] == MAGIC
        && u32_at(8) == VERSION
        && u32_at(12) == 0
        && u32_at(36) == header_crc
        && u64_at(16) == pool_id
        && u64_at(24) == clean_state_seq
        && u64_at(40) == (bytes.len() - HEADER_SIZE_BYTES) as u64;
    let payload = &bytes[HEADER_SIZE_BYTES..];
    (valid && crc32c::crc32c(payload) == u32_at(32)).then(|| payload.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_is_read_only_for_its_pool_and_state() {
        let path = std::env::temp_dir().join(format!("strata-sidecar-{}", std::process::id()));
        write(&path, 7, 12, b"payload").unwrap();
        assert_eq!(read(&path, 7, 12).as_deref(), Some(&b"payload"[..]));
        assert_eq!(read(&path, 8, 12), None, "other pool");
        assert_eq!(read(&path, 7, 13), None, "other state");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path, 7, 12), None, "damaged payload");
        std::fs::remove_file(&path).unwrap();
    }
}
