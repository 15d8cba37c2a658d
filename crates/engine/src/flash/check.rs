//! `strata flash verify`: a flash tier's file or block device checked offline, read-only, as
//! docs/FLASH_FORMAT.md defines it: the superblock, every region header, and in each written
//! region the payload checksum, the directory checksum, and every record the directory names
//! (its stamp, its own CRC32C, lengths and state, and for a record that owns parts the bundle
//! its value holds, whose lengths must add up to it, as a read requires).
//!
//! A server holds the medium under an exclusive `flock` while it runs; the check takes a
//! shared one and is refused while a server has it. It never writes.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::format::{self, BLOCK_SIZE_BYTES, DIRECTORY_ENTRY_BYTES};
use super::stamped_record;

/// What [`check_flash_file`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlashReport {
    /// The superblock, if it holds (else nothing below it is read).
    pub superblock: Option<format::Superblock>,
    /// Regions holding records.
    pub regions_written: u64,
    /// Regions never written, reclaimed, or left by an earlier format of the medium.
    pub regions_free: u64,
    /// Regions whose header fails its checks (free at the next start: their records are lost).
    pub regions_damaged: u64,
    /// Written regions whose payload checksum is wrong (a damaged record, or damaged padding
    /// between records, which costs nothing).
    pub payloads_damaged: u64,
    /// Records the directories of written regions name.
    pub records: u64,
    /// Of those, records that fail their checks (each is a miss for the server, never a value).
    pub records_damaged: u64,
    /// Bytes of records in written regions.
    pub payload_bytes: u64,
    /// What is wrong, one line each (the first 100; the counts above count them all).
    pub problems: Vec<String>,
}

/// Most problems listed one by one.
const PROBLEMS_LISTED_MAX: usize = 100;

impl FlashReport {
    fn problem(&mut self, line: String) {
        if self.problems.len() < PROBLEMS_LISTED_MAX {
            self.problems.push(line);
        }
    }

    /// Whether nothing was found wrong.
    #[must_use]
    pub fn is_sound(&self) -> bool {
        self.superblock.is_some()
            && self.problems.is_empty()
            && self.regions_damaged == 0
            && self.payloads_damaged == 0
            && self.records_damaged == 0
    }
}

/// Checks the flash medium at `path` (see the module docs). Errors when it cannot be opened or
/// read, or a server holds it; everything else is in the report.
///
/// # Errors
/// The file cannot be opened, locked or read.
pub fn check_flash_file(path: &Path) -> std::io::Result<FlashReport> {
    let file = File::open(path)?;
    if !strata_pool::try_lock_shared(&file) {
        return Err(std::io::Error::other(
            "a server has it open (it holds the medium's lock); stop it first",
        ));
    }
    let mut report = FlashReport::default();
    let mut block = vec![0u8; BLOCK_SIZE_BYTES];
    match file.read_exact_at(&mut block, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            report.problem("shorter than a superblock (4 KiB): never formatted".into());
            return Ok(report);
        }
        Err(e) => return Err(e),
    }
    let Some(superblock) = format::read_superblock(&block) else {
        let why = match format::superblock_version(&block) {
            Some(version) if !format::reads_version(version) => {
                format!(
                    "superblock: format version {version}, this strata reads {} to {}",
                    format::FORMAT_VERSION_READ_MIN,
                    format::FORMAT_VERSION
                )
            }
            Some(_) => "superblock: checksum, record alignment or reserved bytes wrong".into(),
            None => "superblock: no strata flash magic (never formatted, or foreign)".into(),
        };
        report.problem(why);
        return Ok(report);
    };
    report.superblock = Some(superblock);
    let region_size = superblock.region_size_bytes;
    if region_size < 2 * BLOCK_SIZE_BYTES as u64
        || !region_size.is_multiple_of(BLOCK_SIZE_BYTES as u64)
    {
        report.problem(format!(
            "superblock: region size {region_size} is not a multiple of 4 KiB over 4 KiB"
        ));
        return Ok(report);
    }
    // A block device's metadata says 0 bytes: its end is where a seek to the end lands.
    let medium_bytes = (&file).seek(SeekFrom::End(0))?;
    for index in 0..superblock.region_count {
        let start = index
            .checked_mul(region_size)
            .and_then(|at| at.checked_add(BLOCK_SIZE_BYTES as u64));
        // A region past the medium's end is never read (nor its buffers sized from a header).
        let within = |at: &u64| {
            at.checked_add(region_size)
                .is_some_and(|end| end <= medium_bytes)
        };
        let Some(start) = start.filter(within) else {
            report.problem(format!(
                "superblock: {} regions, but the medium ends within region {index}",
                superblock.region_count
            ));
            report.regions_damaged += 1;
            break;
        };
        file.read_exact_at(&mut block, start)?;
        check_region(&file, &superblock, index, start, &block, &mut report)?;
    }
    Ok(report)
}

fn check_region(
    file: &File,
    superblock: &format::Superblock,
    index: u64,
    start: u64,
    block: &[u8],
    report: &mut FlashReport,
) -> std::io::Result<()> {
    let header = match format::read_region_header(block) {
        Some(header) if header.flash_id == superblock.flash_id && !header.reclaimed => header,
        Some(_) => {
            report.regions_free += 1;
            return Ok(());
        }
        None if block.iter().all(|&b| b == 0) => {
            report.regions_free += 1;
            return Ok(());
        }
        None => {
            report.regions_damaged += 1;
            report.problem(format!("region {index}: header fails its checks"));
            return Ok(());
        }
    };
    if !header.fits(superblock.region_size_bytes) {
        report.regions_damaged += 1;
        report.problem(format!(
            "region {index}: header's payload ({} B) and records ({}) do not fit the region",
            header.payload_bytes, header.records
        ));
        return Ok(());
    }
    let directory_at = format::directory_start(header.payload_bytes);
    let directory_len = header.records * DIRECTORY_ENTRY_BYTES as u64;
    report.regions_written += 1;
    report.payload_bytes += header.payload_bytes;
    let mut payload = vec![0u8; header.payload_bytes as usize];
    file.read_exact_at(&mut payload, start + BLOCK_SIZE_BYTES as u64)?;
    if crc32c::crc32c(&payload) != header.payload_crc {
        report.payloads_damaged += 1;
        report.problem(format!("region {index}: payload checksum wrong"));
    }
    let mut directory = vec![0u8; directory_len as usize];
    file.read_exact_at(&mut directory, start + directory_at)?;
    if crc32c::crc32c(&directory) != header.directory_crc {
        report.problem(format!(
            "region {index}: directory checksum wrong (its records are not checked one by one)"
        ));
        report.records += header.records;
        report.records_damaged += header.records;
        return Ok(());
    }
    let stamp = format::record_stamp(superblock.flash_id, header.seq).to_le_bytes();
    for entry in directory.chunks_exact(DIRECTORY_ENTRY_BYTES) {
        let (offset, _hash) = format::read_directory_entry(entry);
        report.records += 1;
        if let Some(wrong) = record_problem(&payload, offset as usize, &stamp) {
            report.records_damaged += 1;
            report.problem(format!(
                "region {index}: record at payload offset {offset}: {wrong}"
            ));
        }
    }
    Ok(())
}

/// What is wrong with the record a directory entry puts at `offset` of `payload`, as a read
/// would find it: its stamp, its own checks, and for an item of several records (a record that
/// owns parts) the bundle its value must hold, whose lengths must add up to it
/// (docs/FLASH_FORMAT.md, "Items of several records"). `None`: nothing.
fn record_problem(payload: &[u8], offset: usize, stamp: &[u8; 8]) -> Option<&'static str> {
    let Some(view) = stamped_record(payload, offset, stamp) else {
        return Some("stamp, checksum, lengths or state wrong");
    };
    let parts = view.meta.parts;
    (parts > 0 && super::bundle::Bundle::parse(view.value, parts).is_none())
        .then_some("an item of several records whose bundle's lengths do not add up")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock(region_size_bytes: u64, region_count: u64) -> format::Superblock {
        format::Superblock {
            flash_id: 7,
            pool_id: 9,
            region_size_bytes,
            region_count,
            created_unix_secs: 1,
            record_align_bytes: 8,
        }
    }

    fn medium(name: &str, blocks: &[Vec<u8>]) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("strata-flash-check-{name}-{}", std::process::id()));
        std::fs::write(&path, blocks.concat()).unwrap();
        path
    }

    fn block() -> Vec<u8> {
        vec![0u8; BLOCK_SIZE_BYTES]
    }

    /// A written region's header block of [`superblock`]'s medium, its checksums of the
    /// payload and directory zero.
    fn header_block(payload_bytes: u64, records: u64) -> Vec<u8> {
        let mut header = block();
        format::write_region_header(
            &mut header,
            &format::RegionHeader {
                flash_id: 7,
                seq: 1,
                created_ms: 0,
                expires_at_ms: u64::MAX,
                payload_bytes,
                records,
                payload_crc: 0,
                directory_crc: 0,
                reclaimed: false,
            },
        );
        header
    }

    /// Headers whose checksums hold but whose numbers are hostile: more regions than the file
    /// holds, a region size that is no multiple of 4 KiB, a payload and record count past the
    /// region. Each is a reported problem, never a panic or a huge allocation.
    #[test]
    fn hostile_headers_are_problems() {
        let path = medium("empty", &[]);
        let report = check_flash_file(&path).unwrap();
        assert!(
            report.problems[0].contains("shorter than a superblock"),
            "{report:?}"
        );
        assert!(!report.is_sound());

        let mut sb = block();
        format::write_superblock(&mut sb, &superblock(1000, 4));
        let path = medium("odd-size", &[sb]);
        let report = check_flash_file(&path).unwrap();
        assert!(
            report.problems[0].contains("region size 1000"),
            "{report:?}"
        );
        assert!(!report.is_sound());

        let region_size = 4 * BLOCK_SIZE_BYTES as u64;
        let mut sb = block();
        format::write_superblock(&mut sb, &superblock(region_size, u64::MAX));
        let header = header_block(u64::MAX - 100, u64::MAX);
        let region = [header, block(), block(), block()].concat();
        let path = medium("hostile", &[sb, region]);
        let report = check_flash_file(&path).unwrap();
        assert_eq!(report.regions_damaged, 2, "{report:?}");
        assert!(
            report.problems[0].contains("do not fit the region"),
            "{report:?}"
        );
        assert!(
            report.problems[1].contains("the medium ends within region 1"),
            "{report:?}"
        );
        let _ = std::fs::remove_file(&path);
    }

    /// A medium cut short inside a region whose header is there (a truncated file), and a
    /// superblock whose regions would end past the last byte a u64 reaches: each is a
    /// reported problem, never an error of the check or a read past the medium's end.
    #[test]
    fn a_medium_cut_inside_a_region_is_a_problem() {
        let region_size = 4 * BLOCK_SIZE_BYTES as u64;
        let mut sb = block();
        format::write_superblock(&mut sb, &superblock(region_size, 2));
        let header = header_block(2 * BLOCK_SIZE_BYTES as u64, 0);
        let whole = [header.clone(), block(), block(), block()].concat();
        let path = medium("cut", &[sb, whole, header, block()]);
        let report = check_flash_file(&path).unwrap();
        assert_eq!((report.regions_written, report.regions_damaged), (1, 1));
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains("ends within region 1")),
            "{report:?}"
        );
        let _ = std::fs::remove_file(&path);
        let mut sb = block();
        format::write_superblock(&mut sb, &superblock(!4095, 3));
        let path = medium("past-u64", &[sb, block(), block()]);
        let report = check_flash_file(&path).unwrap();
        assert!(
            report.problems[0].contains("ends within region 0"),
            "{report:?}"
        );
        let _ = std::fs::remove_file(&path);
    }

    /// One region of `records` (each `(value, parts)`, a record of key `k{i}`), every
    /// checksum right: what a check of the records themselves reads.
    fn medium_of_records(name: &str, records: &[(&[u8], u32)]) -> std::path::PathBuf {
        let sb_fields = superblock(4 * BLOCK_SIZE_BYTES as u64, 1);
        let stamp = format::record_stamp(sb_fields.flash_id, 1).to_le_bytes();
        let (mut payload, mut directory) = (Vec::new(), Vec::new());
        for (i, &(value, parts)) in records.iter().enumerate() {
            let key = format!("k{i}");
            let meta = crate::record::RecordMeta {
                kind: crate::record::Kind::Hash,
                parts,
                ..Default::default()
            };
            let mut bytes = vec![0u8; crate::record::record_size(key.len(), value.len(), &meta)];
            crate::record::write(&mut bytes, key.as_bytes(), value, &meta);
            let mut entry = [0u8; DIRECTORY_ENTRY_BYTES];
            format::write_directory_entry(&mut entry, payload.len() as u32, i as u64);
            directory.extend_from_slice(&entry);
            payload.extend_from_slice(&stamp);
            payload.extend_from_slice(&bytes);
        }
        let header = format::RegionHeader {
            flash_id: sb_fields.flash_id,
            seq: 1,
            created_ms: 0,
            expires_at_ms: u64::MAX,
            payload_bytes: payload.len() as u64,
            records: records.len() as u64,
            payload_crc: crc32c::crc32c(&payload),
            directory_crc: crc32c::crc32c(&directory),
            reclaimed: false,
        };
        let mut region = vec![0u8; 4 * BLOCK_SIZE_BYTES];
        format::write_region_header(&mut region[..BLOCK_SIZE_BYTES], &header);
        region[BLOCK_SIZE_BYTES..BLOCK_SIZE_BYTES + payload.len()].copy_from_slice(&payload);
        let at = format::directory_start(header.payload_bytes) as usize;
        region[at..at + directory.len()].copy_from_slice(&directory);
        let mut sb = block();
        format::write_superblock(&mut sb, &sb_fields);
        medium(name, &[sb, region])
    }

    /// A record that owns parts must hold a bundle whose lengths add up, as a read requires:
    /// one whose record checksum holds but whose bundle does not is a damaged record, reported,
    /// beside a sound bundle and a plain record that pass.
    #[test]
    fn a_bundle_whose_lengths_do_not_add_up_is_a_damaged_record() {
        let mut sound = vec![0u8; super::super::bundle::encoded_len(b"owner", &[b"p1", b"p22"])];
        super::super::bundle::encode_into(&mut sound, b"owner", &[b"p1", b"p22"]);
        let mut short = sound.clone();
        short.pop();
        let path = medium_of_records(
            "bundles",
            &[(b"plain value", 0), (&sound, 2), (&short, 2), (&sound, 3)],
        );
        let report = check_flash_file(&path).unwrap();
        assert_eq!(
            (report.records, report.records_damaged),
            (4, 2),
            "{report:?}"
        );
        for (problem, record) in report.problems.iter().zip([2, 3]) {
            assert!(
                problem.contains("bundle's lengths do not add up"),
                "record {record}: {problem}"
            );
        }
        let _ = std::fs::remove_file(&path);
    }
}
