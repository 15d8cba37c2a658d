//! Offline, read-only examination of a pool file: what `strata pool inspect` and
//! `strata pool verify` print. Decodes the engine root, every segment header and every record,
//! validating checksums, without writing a byte.

use std::path::Path;

use strata_pool::{HeaderInfo, HeaderState, PoolError, PoolFile};

use crate::record::{self, Step};
use crate::root;
use crate::segment::{self, HeaderRead};

/// What a pool file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolReport {
    /// The validated header: format, geometry, identity.
    pub info: HeaderInfo,
    /// The header's state line: clean flag, boot id.
    pub state: HeaderState,
    /// Shards the pool was created with.
    pub shards: u16,
    /// Durability level it was last opened with.
    pub durability: String,
    /// Segments holding data.
    pub segments_in_use: u64,
    /// Free segments.
    pub segments_free: u64,
    /// Segments whose header is damaged.
    pub segments_corrupt: u64,
    /// Live records (before resolving keys written more than once).
    pub records_live: u64,
    /// Dead (deleted or overwritten) records.
    pub records_dead: u64,
    /// Bytes of live records.
    pub live_bytes: u64,
    /// Bytes appended in in-use segments.
    pub used_bytes: u64,
    /// Logs that end in bytes failing validation: in a pool left by a crash, a write the crash
    /// tore (recovery drops it); in a cleanly closed pool, damage (listed in `problems`).
    pub logs_ending_invalid: u64,
    /// Records failing validation between valid ones, or anywhere in a cleanly closed pool:
    /// damage (each listed in `problems`). The records around them are sound.
    pub records_damaged: u64,
    /// Problems that make the pool unsound, one line each.
    pub problems: Vec<String>,
}

/// Examines the pool file at `path` read-only. Errors when the header itself is invalid or the
/// pool is in use; everything else is reported in `PoolReport::problems`.
pub fn check_pool_file(path: &Path) -> Result<PoolReport, PoolError> {
    let file = PoolFile::open(path)?;
    let mut report = PoolReport {
        info: *file.info(),
        state: file.state(),
        shards: 0,
        durability: String::new(),
        segments_in_use: 0,
        segments_free: 0,
        segments_corrupt: 0,
        records_live: 0,
        records_dead: 0,
        live_bytes: 0,
        used_bytes: 0,
        logs_ending_invalid: 0,
        records_damaged: 0,
        problems: Vec::new(),
    };
    match root::read(file.root()) {
        Ok(root) => {
            report.shards = root.shard_count;
            report.durability = crate::Durability::from_code(root.durability.0, root.durability.1)
                .map_or_else(|| "unknown".to_string(), |d| d.name());
        }
        Err(why) => report.problems.push(format!("engine root area: {why}")),
    }
    for id in 0..file.info().geometry.segment_count as u32 {
        let (header, data) = file.segment(id);
        match segment::read_header(header) {
            HeaderRead::Free => report.segments_free += 1,
            HeaderRead::Corrupt => {
                report.segments_corrupt += 1;
                report
                    .problems
                    .push(format!("segment {id}: header fails its checksum"));
            }
            HeaderRead::InUse(fields) => {
                report.segments_in_use += 1;
                if report.shards != 0 && fields.shard >= report.shards {
                    report
                        .problems
                        .push(format!("segment {id}: shard {} out of range", fields.shard));
                }
                scan_records(id, data, &mut report);
            }
        }
    }
    Ok(report)
}

/// At most this many damaged records are listed one by one in `problems`; the count is exact.
const DAMAGE_LISTED_MAX: u64 = 100;

fn scan_records(id: u32, data: &[u8], report: &mut PoolReport) {
    let clean = report.state.clean;
    let mut walk = record::walk(data);
    let damage = |report: &mut PoolReport, offset: usize, cause: record::Damage, what: &str| {
        report.records_damaged += 1;
        if report.records_damaged <= DAMAGE_LISTED_MAX {
            report.problems.push(format!(
                "segment {id} offset {offset}: damaged record ({}){what}",
                cause.name()
            ));
        }
    };
    let mut end = None;
    for step in walk.by_ref() {
        match step {
            Step::Record { view, .. } if view.live => {
                report.records_live += 1;
                report.live_bytes += view.size_bytes as u64;
            }
            Step::Record { .. } => report.records_dead += 1,
            Step::Damaged { offset, len, cause } => {
                damage(report, offset, cause, &format!(", {len} bytes skipped"));
            }
            Step::Tail { offset, cause } => {
                report.logs_ending_invalid += 1;
                end = Some(offset);
                if clean {
                    damage(
                        report,
                        offset,
                        cause,
                        " at the end of the log of a clean pool",
                    );
                }
            }
        }
    }
    report.used_bytes += end.unwrap_or(walk.offset()) as u64;
}
