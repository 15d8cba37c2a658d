//! `strata pool inspect PATH` and `strata pool verify PATH`: look at a pool file offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use strata_engine::PoolReport;

/// Pool file tools.
#[derive(clap::Subcommand)]
pub enum PoolCommand {
    /// Print a pool file's header (format, geometry, identity, clean flag) and its occupancy:
    /// segments in use, bytes, live and dead records (reads only).
    Inspect {
        /// The pool file.
        path: PathBuf,
    },
    /// Check the pool read-only: header, engine root, every segment header and every record's
    /// checksum; exit 0 when sound, 1 otherwise. Refused while a server has the pool open.
    Verify {
        /// The pool file.
        path: PathBuf,
    },
}

/// Runs a pool command: 0 when the pool is sound, 1 otherwise.
pub fn run(command: PoolCommand) -> ExitCode {
    let result = match command {
        PoolCommand::Inspect { path } => inspect(&path),
        PoolCommand::Verify { path } => verify(&path),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("strata pool: {message}");
            ExitCode::FAILURE
        }
    }
}

fn inspect(path: &Path) -> Result<(), String> {
    let report = strata_engine::check_pool_file(path).map_err(|err| err.to_string())?;
    let (info, state) = (report.info, report.state);
    let geometry = info.geometry;
    println!("path:            {}", path.display());
    println!("format version:  {}", info.format_version);
    println!("pool id:         {:016x}", info.pool_id);
    println!("created (unix):  {}", info.created_unix_secs);
    println!("segment size:    {} bytes", geometry.segment_size_bytes);
    println!("segments:        {}", geometry.segment_count);
    println!("pool size:       {} bytes", geometry.pool_size_bytes());
    println!("closed cleanly:  {}", state.clean);
    println!("state sequence:  {}", state.state_seq);
    let same_boot = state.boot_id == strata_pool::current_boot_id();
    println!("opened this boot: {same_boot}");
    print_occupancy(&report);
    Ok(())
}

fn print_occupancy(report: &PoolReport) {
    let segment_size_bytes = report.info.geometry.segment_size_bytes;
    println!("shards:          {}", report.shards);
    println!("durability:      {}", report.durability);
    println!(
        "segments:        {} in use, {} free, {} corrupt",
        report.segments_in_use, report.segments_free, report.segments_corrupt
    );
    let capacity = report.segments_in_use * segment_size_bytes;
    let percent = |part: u64| {
        if capacity == 0 {
            0.0
        } else {
            part as f64 * 100.0 / capacity as f64
        }
    };
    println!(
        "bytes:           {} appended ({:.1}% of in-use segments), {} live ({:.1}%)",
        report.used_bytes,
        percent(report.used_bytes),
        report.live_bytes,
        percent(report.live_bytes)
    );
    println!(
        "records:         {} live, {} dead",
        report.records_live, report.records_dead
    );
    println!("torn log ends:   {}", report.logs_ending_invalid);
    println!("damaged records: {}", report.records_damaged);
}

/// Read-only: validates the header, the engine root, every segment header and every record's
/// checksum. Exit 0 when sound (a torn last record, left by a crash, is reported but sound:
/// recovery drops it), 1 otherwise: a damaged record anywhere (each is listed with its segment,
/// offset and cause; the records around it are still read), or any invalid record in a pool
/// closed cleanly. Never writes the file.
fn verify(path: &Path) -> Result<(), String> {
    let report = strata_engine::check_pool_file(path).map_err(|err| err.to_string())?;
    print_occupancy(&report);
    println!(
        "items: {} (live records; a key written twice before a crash counts twice)",
        report.records_live
    );
    if report.problems.is_empty() {
        println!("ok");
        Ok(())
    } else {
        for problem in &report.problems {
            println!("problem: {problem}");
        }
        Err(format!(
            "{} problem(s) found; the pool is not sound",
            report.problems.len()
        ))
    }
}
