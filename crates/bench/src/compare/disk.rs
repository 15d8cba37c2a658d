//! The raw disk under the flash files: fio's 4 KiB random-read latency and IOPS at queue depth
//! 1 and 32 (O_DIRECT, libaio) on a file in the same directory, so readers can scale the flash
//! figures to their own drives; and the file system the directory is on.
//!
//! A missing fio is reported ("fio not installed"), never an error: the comparison runs
//! without it.

use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::servers::program_exists;

/// The queue depths measured.
pub const QUEUE_DEPTHS: [u32; 2] = [1, 32];
/// The size of fio's test file, MiB: larger than any drive cache a VM's disk is likely to have
/// in front of it, small enough to lay out in seconds.
pub const FIO_FILE_MIB: u64 = 1024;
/// The block size read, bytes.
pub const BLOCK_BYTES: u64 = 4096;

/// One fio run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FioJob {
    /// Requests in flight.
    pub queue_depth: u32,
    /// Completed reads per second.
    pub iops: f64,
    /// Mean completion latency, µs.
    pub mean_us: f64,
    /// Median completion latency, µs.
    pub p50_us: f64,
    /// 99th percentile completion latency, µs.
    pub p99_us: f64,
}

/// What the disk probe found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "detail", rename_all = "kebab-case")]
pub enum FioOutcome {
    /// `fio` is not on `PATH`.
    NotInstalled,
    /// `--fio-secs 0`.
    Skipped,
    /// fio ran but failed or printed something unreadable.
    Failed(String),
    /// One job per queue depth.
    Measured(Vec<FioJob>),
}

/// The disk probe: where, on what, and what fio measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskProbe {
    /// The directory probed (where the flash files go).
    pub dir: String,
    /// "ext4 on /dev/vda", from /proc/mounts.
    pub file_system: String,
    /// fio's figures.
    pub fio: FioOutcome,
}

/// Runs fio in `dir` for `secs` per queue depth (0: skip), then removes its file.
#[must_use]
pub fn probe(dir: &Path, secs: u64) -> DiskProbe {
    let fio = if secs == 0 {
        FioOutcome::Skipped
    } else if !program_exists("fio") {
        FioOutcome::NotInstalled
    } else {
        let file = dir.join(format!("fio-probe-{}.dat", std::process::id()));
        let jobs: Result<Vec<FioJob>, String> = QUEUE_DEPTHS
            .iter()
            .map(|&depth| run_fio(&file, depth, secs))
            .collect();
        let _ = std::fs::remove_file(&file);
        jobs.map_or_else(FioOutcome::Failed, FioOutcome::Measured)
    };
    DiskProbe {
        dir: dir.display().to_string(),
        file_system: file_system(dir),
        fio,
    }
}

fn run_fio(file: &Path, depth: u32, secs: u64) -> Result<FioJob, String> {
    eprintln!("[disk] fio 4 KiB random reads, O_DIRECT, queue depth {depth}, {secs} s");
    let output = Command::new("fio")
        .arg(format!("--name=randread-qd{depth}"))
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--size={FIO_FILE_MIB}M"))
        .args(["--rw=randread", "--direct=1", "--ioengine=libaio"])
        .arg(format!("--bs={BLOCK_BYTES}"))
        .arg(format!("--iodepth={depth}"))
        .arg(format!("--runtime={secs}"))
        .args(["--time_based", "--output-format=json"])
        .output()
        .map_err(|e| format!("fio: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "fio exited with {}: {}",
            output.status,
            stderr.trim()
        ));
    }
    parse_fio_json(&String::from_utf8_lossy(&output.stdout), depth)
}

/// The first job's read figures from fio's `--output-format=json`.
///
/// # Errors
/// When the text is not fio's JSON or lacks the read section's IOPS or latencies.
pub fn parse_fio_json(text: &str, queue_depth: u32) -> Result<FioJob, String> {
    // fio may print notes before the JSON object.
    let start = text.find('{').ok_or("no JSON in fio's output")?;
    let json: Value = serde_json::from_str(&text[start..]).map_err(|e| format!("fio JSON: {e}"))?;
    let read = &json["jobs"][0]["read"];
    let number = |value: &Value, what: &str| {
        value
            .as_f64()
            .ok_or_else(|| format!("fio JSON has no {what}"))
    };
    let clat = &read["clat_ns"];
    Ok(FioJob {
        queue_depth,
        iops: number(&read["iops"], "read.iops")?,
        mean_us: number(&clat["mean"], "read.clat_ns.mean")? / 1e3,
        p50_us: number(&clat["percentile"]["50.000000"], "the p50")? / 1e3,
        p99_us: number(&clat["percentile"]["99.000000"], "the p99")? / 1e3,
    })
}

/// "FSTYPE on DEVICE" for the mount holding `dir`, from /proc/mounts ("unknown" if unreadable).
#[must_use]
pub fn file_system(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mount_of(&mounts, &dir.display().to_string()).map_or_else(
        || "unknown".to_owned(),
        |(device, fs_type)| format!("{fs_type} on {device}"),
    )
}

/// The (device, type) of the longest mount point in `mounts` (the text of /proc/mounts) that
/// contains `path`.
#[must_use]
pub fn mount_of(mounts: &str, path: &str) -> Option<(String, String)> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let (device, point, fs_type) = (fields.next()?, fields.next()?, fields.next()?);
            let inside = point == "/"
                || path == point
                || path.strip_prefix(point).is_some_and(|r| r.starts_with('/'));
            inside.then(|| (point.len(), device.to_owned(), fs_type.to_owned()))
        })
        .max_by_key(|(len, ..)| *len)
        .map(|(_, device, fs_type)| (device, fs_type))
}
