//! `strata pool inspect PATH` and `strata pool verify PATH`: look at a pool file offline.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use strata_engine::{Engine, EngineConfig, PoolLocation};

/// Pool file tools.
#[derive(clap::Subcommand)]
pub enum PoolCommand {
    /// Print a pool file's header: format, geometry, identity, clean flag (reads only).
    Inspect {
        /// The pool file.
        path: PathBuf,
    },
    /// Open the pool as the server would (recovering it if it was not closed cleanly), check
    /// every index and segment invariant, print what recovery found, and close it cleanly.
    /// Refused while a server has the pool open.
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
    let (info, state, _) = strata_pool::read_header(path).map_err(|err| err.to_string())?;
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
    Ok(())
}

fn verify(path: &Path) -> Result<(), String> {
    let (info, _, _) = strata_pool::read_header(path).map_err(|err| err.to_string())?;
    let geometry = info.geometry;
    let config = EngineConfig {
        memory_bytes: geometry.segment_size_bytes * geometry.segment_count,
        segment_size_bytes: geometry.segment_size_bytes,
        pool: PoolLocation::File(path.to_path_buf()),
        ..EngineConfig::default()
    };
    let engine = Engine::open(config).map_err(|err| err.to_string())?;
    println!("{:?}", engine.recovery_report());
    let stats = engine.stats();
    println!("items: {}  live bytes: {}", stats.items, stats.live_bytes);
    let checked = engine.check_integrity();
    engine
        .close()
        .map_err(|err| format!("closing the pool failed: {err}"))?;
    checked.map_err(|problem| format!("integrity check failed: {problem}"))?;
    println!("ok");
    Ok(())
}
