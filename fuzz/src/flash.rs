//! The `flash_verify` target: `strata flash verify` ([`strata_engine::check_flash_file`]) on a
//! flash medium's bytes (docs/FLASH_FORMAT.md).
//!
//! The input is an options byte, then the medium: as it is, or with [`OPT_SPARSE`] as runs of
//! non-zero bytes laid on zeros (the pool target's sparse form, [`crate::pool::unpack_sparse`]),
//! padded with zeros to the length the superblock's geometry gives, so a seed holds only a
//! medium's headers, records and directories. With
//! [`OPT_FIX_CHECKSUMS`] the harness recomputes, after the fuzzer's changes, the superblock's
//! checksum and, in every region whose header has the region magic, each record's own CRC32C
//! (at the offsets its directory names), the payload's and the directory's checksums and the
//! header's: the fuzzer then reaches the checks behind them (lengths, stamps, states, bundles,
//! a header's numbers).
//!
//! Invariants checked, on any bytes:
//! - The check neither panics nor errs on a medium it can read: every problem is in the report,
//!   and it reads nothing past the medium's end (a header's sizes never size a buffer past it).
//! - Its counts hold together: no more damaged records than records, no more regions counted
//!   than the superblock names, at most 100 problems listed, and a report is sound exactly when
//!   it has a superblock, no problem and nothing damaged.
//! - A medium as the engine wrote it (the seeds named `*-unchanged`) is sound: the replay
//!   tests check that ([`check_sound`]), not the target, whose inputs could forge any claim.

use std::path::PathBuf;

use strata_engine::{check_flash_file, FlashReport};

use crate::pool::{put_crc, read_u64};

/// Options byte: recompute every checksum after the fuzzer's changes.
pub const OPT_FIX_CHECKSUMS: u8 = 0x01;
/// Options byte: the medium is sparse (runs of bytes laid on zeros).
pub const OPT_SPARSE: u8 = 0x02;

/// The superblock's and a region header's length.
const BLOCK_BYTES: usize = 4096;
/// A directory entry: payload offset `u32`, key hash `u64`.
const DIRECTORY_ENTRY_BYTES: usize = 12;
/// The region header's magic.
const REGION_MAGIC: &[u8; 8] = b"STRATARG";
/// Longest medium the harness writes (a sparse input may describe more).
const MEDIUM_LEN_MAX: usize = 1 << 20;

/// Runs every invariant on `data` (see the module docs); panics when one fails.
pub fn check(data: &[u8]) {
    run(data);
}

/// [`check`], and the medium must check sound: for the seeds as the engine wrote them (the
/// replay tests' check; a claim inside the input would be one a fuzzer learns to forge).
pub fn check_sound(data: &[u8]) {
    let report = run(data).expect("a medium");
    assert!(
        report.is_sound(),
        "a medium as the engine wrote it: {report:?}"
    );
}

/// [`check`], returning the report (`None` for an empty input).
pub fn run(data: &[u8]) -> Option<FlashReport> {
    let (&options, rest) = data.split_first()?;
    let mut medium = if options & OPT_SPARSE != 0 {
        crate::pool::unpack_sparse(rest)
    } else {
        rest.to_vec()
    };
    if options & OPT_SPARSE != 0 {
        pad_to_geometry(&mut medium);
    }
    medium.truncate(MEDIUM_LEN_MAX);
    if options & OPT_FIX_CHECKSUMS != 0 {
        fix_medium_checksums(&mut medium);
    }
    let path = scratch_file();
    std::fs::write(&path, &medium).expect("write the medium");
    let report = check_flash_file(&path);
    let _ = std::fs::remove_file(&path);
    let report = report.unwrap_or_else(|error| panic!("the check erred: {error}"));
    assert!(report.records_damaged <= report.records, "{report:?}");
    assert!(report.problems.len() <= 100, "{report:?}");
    if let Some(superblock) = &report.superblock {
        let counted = report.regions_written + report.regions_free + report.regions_damaged;
        assert!(counted <= superblock.region_count, "{report:?}");
        assert!(
            report.payloads_damaged <= report.regions_written,
            "{report:?}"
        );
    }
    let clean = report.superblock.is_some()
        && report.problems.is_empty()
        && report.regions_damaged + report.payloads_damaged + report.records_damaged == 0;
    assert_eq!(report.is_sound(), clean, "{report:?}");
    Some(report)
}

/// Pads a sparse medium with the zeros its packing left off its end, to the length its
/// superblock's geometry gives (when that is within [`MEDIUM_LEN_MAX`]).
fn pad_to_geometry(medium: &mut Vec<u8>) {
    let geometry = read_u64(medium, 32)
        .zip(read_u64(medium, 40))
        .and_then(|(region_bytes, regions)| region_bytes.checked_mul(regions))
        .and_then(|bytes| bytes.checked_add(BLOCK_BYTES as u64))
        .and_then(|bytes| usize::try_from(bytes).ok());
    if let Some(len) = geometry.filter(|&len| len <= MEDIUM_LEN_MAX && len > medium.len()) {
        medium.resize(len, 0);
    }
}

/// The medium's file in this thread's scratch directory (the pool target's).
fn scratch_file() -> PathBuf {
    crate::pool::scratch_dir().join("flash-medium")
}

/// Recomputes a medium's checksums as docs/FLASH_FORMAT.md defines them (module docs).
pub fn fix_medium_checksums(medium: &mut [u8]) {
    put_crc(medium, 56, 0..56);
    let (Some(region_bytes), Some(regions)) = (read_u64(medium, 32), read_u64(medium, 40)) else {
        return;
    };
    let region_bytes = usize::try_from(region_bytes).unwrap_or(usize::MAX);
    if region_bytes < 2 * BLOCK_BYTES {
        return;
    }
    for index in 0..usize::try_from(regions).unwrap_or(usize::MAX) {
        let Some(start) = index
            .checked_mul(region_bytes)
            .and_then(|at| at.checked_add(BLOCK_BYTES))
            .filter(|&at| at < medium.len() && medium.len() - at >= BLOCK_BYTES)
        else {
            return;
        };
        let end = start.saturating_add(region_bytes).min(medium.len());
        fix_region_checksums(&mut medium[start..end]);
    }
}

/// A region's records, payload, directory and header checksums, where its header has the
/// region magic and its numbers fit the bytes there are.
fn fix_region_checksums(region: &mut [u8]) {
    if &region[..8] != REGION_MAGIC {
        return;
    }
    let (Some(payload_bytes), Some(records)) = (read_u64(region, 48), read_u64(region, 56)) else {
        return;
    };
    let payload_end = usize::try_from(payload_bytes)
        .ok()
        .and_then(|len| len.checked_add(BLOCK_BYTES));
    let directory_at = payload_end.and_then(|end| end.checked_next_multiple_of(64));
    let directory_end = usize::try_from(records)
        .ok()
        .and_then(|records| records.checked_mul(DIRECTORY_ENTRY_BYTES))
        .zip(directory_at)
        .and_then(|(len, at)| at.checked_add(len));
    let (Some(payload_end), Some(directory_at), Some(directory_end)) =
        (payload_end, directory_at, directory_end)
    else {
        return;
    };
    if directory_end > region.len() {
        return;
    }
    let offsets: Vec<usize> = region[directory_at..directory_end]
        .chunks_exact(DIRECTORY_ENTRY_BYTES)
        .map(|entry| u32::from_le_bytes(entry[..4].try_into().expect("4 bytes")) as usize)
        .collect();
    for offset in offsets {
        // The record follows its 8-byte stamp.
        if let Some(record) = region.get_mut(BLOCK_BYTES + offset + 8..payload_end) {
            crate::pool::fix_record_checksum(record);
        }
    }
    put_crc(region, 64, BLOCK_BYTES..payload_end);
    put_crc(region, 68, directory_at..directory_end);
    put_crc(region, 72, 0..72);
}
