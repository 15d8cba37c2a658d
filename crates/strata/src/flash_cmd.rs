//! `strata flash verify PATH`: check a flash tier's medium offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flash medium tools.
#[derive(clap::Subcommand)]
pub enum FlashCommand {
    /// Check a flash tier's file or block device read-only (docs/FLASH_FORMAT.md): the
    /// superblock, every region header, and in each written region its payload and directory
    /// checksums and every record (stamp, checksum, lengths, state); exit 0 when sound, 1
    /// otherwise. Refused while a server has the medium open.
    Verify {
        /// The flash file or block device (`--flash` of the server).
        path: PathBuf,
    },
}

/// Runs a flash command: 0 when the medium is sound, 1 otherwise.
pub fn run(command: FlashCommand) -> ExitCode {
    let FlashCommand::Verify { path } = command;
    match verify(&path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("strata flash: {message}");
            ExitCode::FAILURE
        }
    }
}

fn verify(path: &Path) -> Result<(), String> {
    let report = strata_engine::check_flash_file(path)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    if let Some(sb) = &report.superblock {
        println!("path:            {}", path.display());
        println!("flash id:        {:016x}", sb.flash_id);
        println!("pool id:         {:016x}", sb.pool_id);
        println!("created (unix):  {}", sb.created_unix_secs);
        println!(
            "regions:         {} × {} bytes: {} written, {} free, {} damaged",
            sb.region_count,
            sb.region_size_bytes,
            report.regions_written,
            report.regions_free,
            report.regions_damaged
        );
        println!("record align:    {} bytes", sb.record_align_bytes);
        println!(
            "records:         {} in written regions ({} bytes), {} damaged",
            report.records, report.payload_bytes, report.records_damaged
        );
    }
    if report.is_sound() {
        println!("ok");
        return Ok(());
    }
    for problem in &report.problems {
        println!("problem: {problem}");
    }
    Err(format!(
        "{} problem(s) found; the flash medium is not sound (a server drops what is damaged, \
         never serves it)",
        report.problems.len()
    ))
}
