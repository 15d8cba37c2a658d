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
use crate::header::{read_u32, read_u64, write_u32, write_u64};

const MAGIC: [u8; 8] = *b"STRATASC";
const VERSION: u32 = 2;
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
    write_u32(&mut header, 8, VERSION);
    write_u64(&mut header, 16, pool_id);
    write_u64(&mut header, 24, clean_state_seq);
    write_u32(&mut header, 32, crc32c::crc32c(payload));
    write_u64(&mut header, 40, payload.len() as u64);
    let header_crc = crc32c::crc32c(&header[..36]) ^ crc32c::crc32c(&header[40..48]);
    write_u32(&mut header, 36, header_crc);
    let mut file =
        std::fs::File::create(path).map_err(|e| crate::io_err("create sidecar", path, e))?;
    file.write_all(&header)
        .map_err(|e| crate::io_err("write sidecar", path, e))?;
    file.write_all(payload)
        .map_err(|e| crate::io_err("write sidecar", path, e))?;
    file.sync_all()
        .map_err(|e| crate::io_err("fsync sidecar", path, e))
}

/// Reads the sidecar's payload if it is valid for this pool and clean state; otherwise says
/// why not (`None`: there is no sidecar).
pub(crate) fn read(
    path: &Path,
    pool_id: u64,
    clean_state_seq: u64,
) -> Result<Vec<u8>, Option<&'static str>> {
    let bytes = std::fs::read(path).map_err(|_| None)?;
    let header = bytes
        .get(..HEADER_SIZE_BYTES)
        .ok_or(Some("shorter than its header"))?;
    let header_crc = crc32c::crc32c(&header[..36]) ^ crc32c::crc32c(&header[40..48]);
    if header[..8] != MAGIC || read_u32(header, 12) != 0 || read_u32(header, 36) != header_crc {
        return Err(Some("its header is damaged"));
    }
    if read_u32(header, 8) != VERSION {
        return Err(Some("another version of strata wrote it"));
    }
    if read_u64(header, 16) != pool_id || read_u64(header, 24) != clean_state_seq {
        return Err(Some("it was written for another pool or pool state"));
    }
    let payload = &bytes[HEADER_SIZE_BYTES..];
    if read_u64(header, 40) != payload.len() as u64 {
        return Err(Some("it is cut short or extended"));
    }
    if crc32c::crc32c(payload) != read_u32(header, 32) {
        return Err(Some("its payload fails its checksum"));
    }
    Ok(payload.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_is_read_only_for_its_pool_and_state() {
        let path = std::env::temp_dir().join(format!("strata-sidecar-{}", std::process::id()));
        write(&path, 7, 12, b"payload").unwrap();
        assert_eq!(read(&path, 7, 12).as_deref(), Ok(&b"payload"[..]));
        assert!(read(&path, 8, 12).is_err(), "other pool");
        assert!(read(&path, 7, 13).is_err(), "other state");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            read(&path, 7, 12),
            Err(Some("its payload fails its checksum")),
            "damaged payload"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
