//! The side-by-side comparison: memcached, Redis and strata on the same machine, the same
//! loopback, the same generator, the same threads and memory, one pinned core each.
//!
//! ```text
//!  for scenario in bench/scenarios/*.toml
//!    for repeat in 1..=R                       (servers interleaved within a repeat, so
//!      for server in memcached, redis, strata   each ratio compares runs made side by side)
//!        for protocol the server speaks
//!          start server (taskset -c 0) ─▶ strata_bench::run (pinned to core 1) ─▶ kill
//!  ─▶ bench-results/results.json (every run), REPORT.md (medians, ratios), *.svg charts
//! ```
//!
//! A server that is missing or fails to start is recorded as "not run" and the comparison
//! carries on with the others.

pub mod charts;
pub mod disk;
pub mod flash;
pub mod flash_math;
pub mod flash_report;
pub mod report;
pub mod restart;
pub mod runner;
pub mod scenarios;
pub mod servers;
pub mod summary;

use std::path::PathBuf;

pub use runner::run_compare;

/// `strata-bench compare` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// Directory of scenario TOML files.
    #[arg(long, default_value = "bench/scenarios")]
    pub scenarios: PathBuf,
    /// Output directory for REPORT.md, charts, results.json and server logs.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Only run scenarios with these names (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only run these servers (comma-separated: memcached, redis, strata).
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    /// Override every scenario's repeat count.
    #[arg(long)]
    pub repeats: Option<usize>,
    /// Multiply every warm-up and measured duration (e.g. 0.2 for a quick look).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Worker threads for every server.
    #[arg(long, default_value_t = 1)]
    pub server_threads: usize,
    /// Memory budget for every server, MiB.
    #[arg(long, default_value_t = 256)]
    pub memory_mib: u64,
    /// The CPU servers are pinned to (taskset).
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// The CPU the generator's threads are pinned to.
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
    /// memcached's command template.
    #[arg(long, default_value = servers::MEMCACHED_COMMAND)]
    pub memcached_cmd: String,
    /// Redis's command template.
    #[arg(long, default_value = servers::REDIS_COMMAND)]
    pub redis_cmd: String,
    /// A valkey-server binary (Valkey 8, built from its public source with `make
    /// BUILD_TLS=no`): compared as the peer `valkey`, with Redis's command template.
    #[arg(long)]
    pub valkey: Option<PathBuf>,
    /// Do not run anything: re-render REPORT.md and the charts from `--out`/results.json.
    #[arg(long)]
    pub rerender: bool,
    /// strata's command template (relative paths are from the current directory).
    #[arg(long, default_value = servers::STRATA_COMMAND)]
    pub strata_cmd: String,
    /// More memcached binaries to compare, e.g. one built from a newer release: each runs
    /// memcached's command template with its own program, as the peer `memcached-VERSION`.
    #[arg(long, value_delimiter = ',')]
    pub memcached_builds: Vec<PathBuf>,
    /// memcached's flash-tier flags (extstore), appended in flash scenarios.
    #[arg(long, default_value = servers::MEMCACHED_FLASH_ARGS)]
    pub memcached_flash_args: String,
    /// strata's flash-tier flags, appended in flash scenarios.
    #[arg(long, default_value = servers::STRATA_FLASH_ARGS)]
    pub strata_flash_args: String,
    /// Multiply the flash scenarios' memory budget, flash size and data offered (e.g. 0.25 for
    /// a smoke run: 64 MiB of memory and 2 GiB offered instead of 256 MiB and 8 GiB).
    #[arg(long, default_value_t = 1.0)]
    pub size_scale: f64,
    /// Where flash scenarios put their flash files and fio its test file (default: OUT/flash).
    /// Use a directory on the disk under test, not tmpfs.
    #[arg(long)]
    pub flash_dir: Option<PathBuf>,
    /// Seconds of fio per queue depth for the raw-disk figures of flash scenarios (0: skip).
    #[arg(long, default_value_t = 10)]
    pub fio_secs: u64,
}

impl CompareArgs {
    /// The directory for flash files: `--flash-dir`, or `flash` under `--out`.
    #[must_use]
    pub fn flash_dir(&self) -> PathBuf {
        self.flash_dir
            .clone()
            .unwrap_or_else(|| self.out.join("flash"))
    }
}
