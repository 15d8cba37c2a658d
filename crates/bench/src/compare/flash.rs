//! `kind = "flash"`: a flash tier below the memory budget (issue 11). Each server runs with a
//! small memory budget and a flash file on the disk, is offered far more data than the budget
//! holds, and is measured on what it kept and how it serves a mixed load afterwards.
//!
//! ```text
//!  per server that has a flash tier (memcached: -o ext_path=FILE:SIZE; strata: --flash):
//!    start with the flash flags ──(refused: "not run")
//!    fill: SET every key once, pipelined, flat out ─▶ settle ─▶ RSS, /proc/PID/io, file blocks,
//!    `stats` ─▶ check: GET every stride-th key once (items kept) ─▶ for each key_dists entry:
//!    closed-loop GET:SET mix ─▶ open loop at fixed_rate (first key_dists entry) ─▶ stop
//!  then the same server without its flash flags: fill 2 × the budget, check (memory alone)
//! ```
//!
//! The mixed phases draw their requests with seeds `seed`, `seed + 1`, … in order, so no phase
//! replays an earlier one's keys, and every server gets the same requests.
//!
//! The memory budget, flash size and data offered come from `[flash]`, times `--size-scale`;
//! the key space is the data offered divided by key + value bytes, so `[load]` may not set
//! `keyspace`. Flash files go under `--flash-dir` (default `OUT/flash`), which must be on the
//! disk under test, not tmpfs; the report names its file system. The arithmetic of the derived
//! figures is in [`super::flash_math`].

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::flash_math::{check_stride, items_kept, FlashSizes};
use super::restart::{self, remove_files, Answer, Recipe, StopKind};
use super::runner::{target_flags, RunRecord, RunStatus, Target};
use super::scenarios::Scenario;
use super::servers::{ServerProcess, ServerResources, ServerSpec};
use super::CompareArgs;
use crate::cpu::{cpu_steal_ticks, io_bytes, rss_bytes, IoBytes};
use crate::error::BenchError;
use crate::protocol::Protocol;
use crate::report::PhaseReport;
use crate::workload::{KeyBatch, KeyDist, KeySpace};
use crate::BenchArgs;

/// How long the `stats` probe waits for memcached's `END`.
const STATS_TIMEOUT: Duration = Duration::from_secs(10);
/// Counters, in servers' own `stats`, of values written to flash; the first present is used.
/// memcached names it `extstore_objects_written`; strata reports the same name (and its own,
/// `strata_flash_demoted_items`).
pub const DEMOTED_ITEMS_STATS: [&str; 2] =
    ["extstore_objects_written", "strata_flash_demoted_items"];
/// Counters, in servers' own `stats`, of bytes written to flash; the first present is used.
/// `/proc/PID/io` undercounts a writer that goes through the page cache (memcached's extstore
/// does): a page rewritten before writeback counts once.
pub const FLASH_BYTES_WRITTEN_STATS: [&str; 2] =
    ["extstore_bytes_written", "strata_flash_written_bytes"];

/// The `[flash]` table of a flash scenario.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlashSpec {
    /// The memory tier's budget, MiB (× `--size-scale`).
    pub memory_mib: u64,
    /// The flash file's size, MiB (× `--size-scale`).
    pub flash_mib: u64,
    /// Key and value bytes the fill offers, MiB (× `--size-scale`).
    pub offered_mib: u64,
    /// One closed-loop mixed phase per entry: `uniform`, `zipf` or `zipf:S`.
    #[serde(default = "default_key_dists")]
    pub key_dists: Vec<String>,
    /// Then one open-loop phase at this many requests per second, with the first key_dists.
    #[serde(default)]
    pub fixed_rate: Option<f64>,
    /// The items-kept check reads at most this many keys, evenly spread over the key space.
    #[serde(default = "default_check_keys_max")]
    pub check_keys_max: u64,
    /// Seconds between the fill and the check, for background writes to flash to finish.
    #[serde(default = "default_settle_secs")]
    pub settle_secs: f64,
    /// Also run each server without its flash tier, to measure what memory alone keeps.
    #[serde(default = "default_true")]
    pub memory_only_run: bool,
    /// After the mixed phases, stop the server this way and start it again, in order (`clean`,
    /// `kill`): each start is timed to its first hit and followed by the items-kept check. The
    /// server then runs with its restart recipe from the start (strata `--pool FILE`,
    /// memcached `-e FILE`; `compare/restart.rs`), its file in `restart_dir`.
    #[serde(default)]
    pub restarts: Vec<StopKind>,
    /// Where the restart recipes' files go: the memory tier's persistence (tmpfs stands in for
    /// PMem).
    #[serde(default = "default_restart_dir")]
    pub restart_dir: PathBuf,
    /// Flags strata gets besides `--pool FILE` when restarts are measured (e.g.
    /// `--index-placement pool`, whose index, flash entries included, survives a kill).
    #[serde(default)]
    pub strata_restart_args: String,
}

fn default_restart_dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

fn default_key_dists() -> Vec<String> {
    vec!["zipf:0.9".to_owned(), "uniform".to_owned()]
}

fn default_check_keys_max() -> u64 {
    200_000
}

fn default_settle_secs() -> f64 {
    2.0
}

fn default_true() -> bool {
    true
}

impl FlashSpec {
    /// The key distributions of the mixed phases.
    ///
    /// # Errors
    /// Naming the first entry that is not `uniform`, `zipf` or `zipf:S`.
    pub fn key_dists(&self) -> Result<Vec<KeyDist>, String> {
        self.key_dists.iter().map(|d| d.parse()).collect()
    }

    /// Checks sizes, distributions and the rate.
    ///
    /// # Errors
    /// Naming the first field out of range.
    pub fn validate(&self) -> Result<(), String> {
        if self.memory_mib == 0 || self.flash_mib == 0 || self.offered_mib == 0 {
            return Err("[flash] memory_mib, flash_mib and offered_mib must be > 0".into());
        }
        if self.key_dists()?.is_empty() {
            return Err("[flash] key_dists needs at least one distribution".into());
        }
        if self.fixed_rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err("[flash] fixed_rate must be a positive number per second".into());
        }
        if self.check_keys_max == 0 || !(self.settle_secs.is_finite() && self.settle_secs >= 0.0) {
            return Err("[flash] check_keys_max must be > 0 and settle_secs >= 0".into());
        }
        Ok(())
    }

    /// The sizes after `scale`, for items of `item_bytes` (key + value).
    #[must_use]
    pub fn sizes(&self, scale: f64, item_bytes: f64) -> FlashSizes {
        FlashSizes::new(
            self.memory_mib,
            self.flash_mib,
            self.offered_mib,
            scale,
            item_bytes,
        )
    }
}

/// One mixed phase after the fill.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlashPhase {
    /// "zipf:0.9", "uniform", "zipf:0.9 at 20000/s".
    pub label: String,
    /// Open loop: the offered rate.
    pub rate_per_sec: Option<f64>,
    /// The generator's figures.
    pub report: PhaseReport,
    /// Storage I/O of the server over the phase (warm-up and drain included).
    pub io: IoBytes,
    /// Wall time of the phase, warm-up and drain included: the span `io` covers, seconds.
    pub wall_secs: f64,
    /// How the server's own counters (`stats`) moved over the phase, warm-up and drain
    /// included (numeric ones only; empty where `stats` failed).
    #[serde(default)]
    pub stats_delta: BTreeMap<String, f64>,
    /// The machine's CPU steal over the phase, percent of all CPU time (`/proc/stat`).
    #[serde(default)]
    pub steal_percent: Option<f64>,
}

/// What each numeric counter of `after` gained over `before`.
fn stats_delta(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(name, value)| {
            let after: f64 = value.parse().ok()?;
            let before: f64 = before.get(name)?.parse().ok()?;
            Some((name.clone(), after - before))
        })
        .collect()
}

/// One stop and start after the mixed phases.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlashRestart {
    /// How the server was stopped.
    pub stop: StopKind,
    /// Exactly how (the signal).
    pub stop_how: String,
    /// Process start → first GET answered, ms.
    pub serving_ms: f64,
    /// Process start → first GET hit, ms; `None` when the first answer was a miss (cold).
    pub first_hit_ms: Option<f64>,
    /// Items kept just before the stop (estimated from the check's sample).
    pub items_before: f64,
    /// Items kept after the start (the same check).
    pub items_after: f64,
    /// The check after the start.
    pub check: PhaseReport,
}

/// The same server without its flash tier, filled past its budget.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryOnly {
    /// Keys written.
    pub keys: u64,
    /// Keys it kept (estimated from the check's sample).
    pub items_kept: f64,
    /// RSS growth from start to after the check, bytes.
    pub rss_growth_bytes: u64,
    /// The check's figures.
    pub check: PhaseReport,
}

/// What one flash run measured for one server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlashResult {
    /// Sizes after `--size-scale`.
    pub sizes: FlashSizes,
    /// Mean value length, bytes.
    pub value_bytes: f64,
    /// The flash file.
    pub flash_path: String,
    /// The fill's figures (SETs).
    pub fill: PhaseReport,
    /// The items-kept check's figures (GETs of every `check_stride`-th key).
    pub check: PhaseReport,
    /// The check's stride.
    pub check_stride: u64,
    /// Items kept, estimated from the check.
    pub items_kept: f64,
    /// RSS right after start, bytes.
    pub rss_bytes_start: u64,
    /// RSS after the check, bytes.
    pub rss_bytes_after_check: u64,
    /// RSS after the last phase, bytes.
    pub rss_bytes_end: u64,
    /// Storage I/O from start to after the check (fill, settle, check).
    pub io_fill: IoBytes,
    /// The flash file's allocated bytes after the check.
    pub flash_file_bytes: u64,
    /// The server's `stats` after the check (empty if it has none).
    pub stats_after_check: BTreeMap<String, String>,
    /// The mixed phases.
    pub phases: Vec<FlashPhase>,
    /// The stops and starts after the mixed phases, in order.
    #[serde(default)]
    pub restarts: Vec<FlashRestart>,
    /// Why the restarts failed, if they did (the rest of the run stands).
    #[serde(default)]
    pub restart_error: Option<String>,
    /// The memory-only run, if made and successful.
    pub memory_only: Option<MemoryOnly>,
    /// Why the memory-only run failed, if it did.
    pub memory_only_error: Option<String>,
}

/// Runs a flash scenario against one server: one record.
pub(crate) fn run_flash(
    args: &CompareArgs,
    scenario: &Scenario,
    target: &Target<'_>,
    logs: &Path,
) -> Vec<RunRecord> {
    let record = |status| vec![target.record(scenario, None, status)];
    let Some(flash_args) = target.server.flash_args.clone() else {
        return record(RunStatus::NotRun(format!(
            "{} has no flash tier",
            target.server.name
        )));
    };
    let session = match Session::new(args, scenario, target, logs) {
        Ok(session) => session,
        Err(error) => return record(RunStatus::Failed(error.to_string())),
    };
    let path = session.flash_path();
    let _ = std::fs::remove_file(&path);
    let flash_args = flash_args
        .replace("{flash_path}", &path.display().to_string())
        .replace("{flash_mib}", &session.sizes.flash_mib.to_string());
    let recipe = session.restart_recipe();
    let mut command = format!("{} {flash_args}", target.server.command);
    if let Some(recipe) = &recipe {
        remove_files(&session.spec.restart_dir, &recipe.prefix);
        command = format!("{command} {}", recipe.args);
        if target.server.name.starts_with("strata") {
            command = format!("{command} {}", session.spec.strata_restart_args);
        }
    }
    let spec = ServerSpec {
        command,
        ..target.server.clone()
    };
    let log = session.log("flash");
    let server = match ServerProcess::start(&spec, session.resources(), &log) {
        Ok(server) => server,
        Err(error) => {
            let reason = refused_flash_reason(&target.server.name, &log, &error);
            eprintln!("  not run: {reason}");
            return record(RunStatus::NotRun(reason));
        }
    };
    let result = session.run_tier(server, &path, &spec, recipe.as_ref());
    let _ = std::fs::remove_file(&path);
    if let Some(recipe) = &recipe {
        remove_files(&session.spec.restart_dir, &recipe.prefix);
    }
    let mut flash = match result {
        Ok(flash) => flash,
        Err(error) => {
            eprintln!("  failed: {error}");
            return record(RunStatus::Failed(error.to_string()));
        }
    };
    if session.spec.memory_only_run {
        match session.run_memory_only() {
            Ok(memory_only) => flash.memory_only = Some(memory_only),
            Err(error) => flash.memory_only_error = Some(error.to_string()),
        }
    }
    let mut record = target.record(scenario, None, RunStatus::Ok);
    record.rss_bytes_before = Some(flash.rss_bytes_start);
    record.rss_bytes_after = Some(flash.rss_bytes_after_check);
    record.flash = Some(flash);
    vec![record]
}

/// "not run" when the server refused its flash flags (strata before issue 11 lands), with its
/// own words; otherwise the start-up error.
fn refused_flash_reason(server: &str, log: &Path, error: &BenchError) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let refused = text
        .lines()
        .find(|line| line.contains("--flash") && line.contains("unexpected argument"));
    match refused {
        Some(line) => format!("{server} has no --flash yet ({})", line.trim()),
        None => error.to_string(),
    }
}

/// One server's flash run.
struct Session<'a> {
    args: &'a CompareArgs,
    scenario: &'a Scenario,
    target: &'a Target<'a>,
    logs: &'a Path,
    spec: FlashSpec,
    sizes: FlashSizes,
    value_bytes: f64,
    dir: PathBuf,
}

impl<'a> Session<'a> {
    fn new(
        args: &'a CompareArgs,
        scenario: &'a Scenario,
        target: &'a Target<'a>,
        logs: &'a Path,
    ) -> Result<Self, BenchError> {
        let spec = scenario
            .flash
            .clone()
            .ok_or_else(|| BenchError::Config(format!("{}: no [flash] table", scenario.name)))?;
        let bench = scenario.bench_args(&[]).map_err(BenchError::Config)?;
        let mean = |min: usize, max: usize| f64::midpoint(min as f64, max as f64);
        let value_bytes = mean(bench.value_size.min, bench.value_size.max);
        let key_bytes = mean(bench.key_size.min, bench.key_size.max);
        let sizes = spec.sizes(args.size_scale, key_bytes + value_bytes);
        let dir = args.flash_dir();
        prepare_dir(&dir)?;
        Ok(Session {
            args,
            scenario,
            target,
            logs,
            spec,
            sizes,
            value_bytes,
            dir,
        })
    }

    fn flash_path(&self) -> PathBuf {
        let name = format!(
            "{}-{}-{}.flash",
            self.scenario.name,
            self.target.server.name,
            std::process::id()
        );
        self.dir.join(name)
    }

    fn log(&self, what: &str) -> PathBuf {
        self.logs.join(format!(
            "{}-{}-{}-{what}.log",
            self.scenario.name, self.target.server.name, self.target.repeat
        ))
    }

    fn resources(&self) -> ServerResources {
        ServerResources {
            threads: self.args.server_threads,
            memory_mib: self.sizes.memory_mib,
            cpu: self.args.server_cpu,
        }
    }

    /// The generator's arguments against `server` for `keys` keys, with no phase selected.
    fn bench_args(&self, server: &ServerProcess, keys: u64) -> Result<BenchArgs, BenchError> {
        let extra = target_flags(self.args, self.target.protocol, server);
        let mut bench = self
            .scenario
            .bench_args(&extra)
            .map_err(BenchError::Config)?;
        bench.keyspace = keys;
        bench.preload = false;
        bench.readback = false;
        bench.duration_secs = 0.0;
        bench.warmup_secs = 0.0;
        Ok(bench)
    }

    /// Writes keys `0..keys` once; returns the fill's figures.
    fn fill(&self, server: &ServerProcess, keys: u64) -> Result<PhaseReport, BenchError> {
        let mut bench = self.bench_args(server, keys)?;
        bench.preload = true;
        eprintln!("  fill: {keys} keys");
        let report = crate::run(&bench)?;
        report.preload.ok_or_else(|| missing("fill"))
    }

    /// GETs every stride-th key of `0..keys` once; returns the figures and the stride.
    fn check(&self, server: &ServerProcess, keys: u64) -> Result<(PhaseReport, u64), BenchError> {
        let stride = check_stride(keys, self.spec.check_keys_max);
        let mut bench = self.bench_args(server, keys)?;
        bench.readback = true;
        bench.readback_stride = stride;
        let report = crate::run(&bench)?;
        let check = report.readback.ok_or_else(|| missing("check"))?;
        eprintln!(
            "  check: {} of {} sampled keys found (every {stride}th)",
            check.counts.hits,
            keys.div_ceil(stride)
        );
        Ok((check, stride))
    }

    /// The restart recipe, when the scenario measures restarts and the server has one.
    fn restart_recipe(&self) -> Option<Recipe> {
        if self.spec.restarts.is_empty() {
            return None;
        }
        restart::recipe(&self.target.server.name, &self.spec.restart_dir)
    }

    /// The fill, the check and the mixed phases against a server started with its flash tier
    /// (as `spec`), then the restarts if `recipe` is given.
    fn run_tier(
        &self,
        server: ServerProcess,
        path: &Path,
        spec: &ServerSpec,
        recipe: Option<&Recipe>,
    ) -> Result<FlashResult, BenchError> {
        let pid = server.pid;
        let rss_bytes_start = rss_bytes(pid)?;
        let io_start = io_bytes(pid)?;
        let fill = self.fill(&server, self.sizes.keys)?;
        std::thread::sleep(Duration::from_secs_f64(self.spec.settle_secs));
        let (check, check_stride) = self.check(&server, self.sizes.keys)?;
        let rss_bytes_after_check = rss_bytes(pid)?;
        let io_fill = io_delta(io_start, io_bytes(pid)?);
        let flash_file_bytes = std::fs::metadata(path).map_or(0, |m| m.blocks() * 512);
        let stats_after_check = memcache_stats(server.port(Protocol::MemcacheText))
            .unwrap_or_else(|error| BTreeMap::from([("error".to_owned(), error)]));
        let phases = self.mixed_phases(&server)?;
        let rss_bytes_end = rss_bytes(pid)?;
        let (restarts, restart_error) = match recipe {
            Some(recipe) => self.restarts(server, spec, recipe),
            None => (Vec::new(), None),
        };
        Ok(FlashResult {
            sizes: self.sizes,
            value_bytes: self.value_bytes,
            flash_path: path.display().to_string(),
            items_kept: items_kept(check.counts.hits, self.sizes.keys, check_stride),
            fill,
            check,
            check_stride,
            rss_bytes_start,
            rss_bytes_after_check,
            rss_bytes_end,
            io_fill,
            flash_file_bytes,
            stats_after_check,
            phases,
            restarts,
            restart_error,
            memory_only: None,
            memory_only_error: None,
        })
    }

    /// Stops and starts `server` once per entry of `restarts`; the figures of those that
    /// completed, and why the next failed if one did.
    fn restarts(
        &self,
        mut server: ServerProcess,
        spec: &ServerSpec,
        recipe: &Recipe,
    ) -> (Vec<FlashRestart>, Option<String>) {
        let mut done = Vec::new();
        let Ok((check, stride)) = self.check(&server, self.sizes.keys) else {
            return (done, Some("the check before the first stop failed".into()));
        };
        let mut items_before = items_kept(check.counts.hits, self.sizes.keys, stride);
        for (n, &stop) in self.spec.restarts.iter().enumerate() {
            match self.restart_once(&mut server, spec, recipe, stop, n) {
                Ok((stop_how, serving, first_hit, check)) => {
                    let items_after = items_kept(check.counts.hits, self.sizes.keys, stride);
                    done.push(FlashRestart {
                        stop,
                        stop_how,
                        serving_ms: serving.as_secs_f64() * 1e3,
                        first_hit_ms: first_hit.map(|d| d.as_secs_f64() * 1e3),
                        items_before,
                        items_after,
                        check,
                    });
                    items_before = items_after;
                }
                Err(error) => {
                    eprintln!("  restart failed: {error}");
                    return (done, Some(error.to_string()));
                }
            }
        }
        (done, None)
    }

    /// One stop and start: how it stopped, start → serving, start → first hit, and the check.
    fn restart_once(
        &self,
        server: &mut ServerProcess,
        spec: &ServerSpec,
        recipe: &Recipe,
        stop: StopKind,
        n: usize,
    ) -> Result<(String, Duration, Option<Duration>, PhaseReport), BenchError> {
        // The oldest key still held: for a tiered server, most likely a flash item.
        let probe_key = self.present_key(server)?;
        let stop_how = restart::stop_server(server, &self.target.server.name, recipe, stop)?;
        // memcached restarts cold when started in the same second as its stop.
        std::thread::sleep(Duration::from_millis(1100));
        let log = self.log(&format!("restart{}", n + 1));
        let (started, serving, first_hit) = restart::start_and_probe(
            spec,
            self.resources(),
            &log,
            self.target.protocol,
            &probe_key,
            stop,
        )?;
        *server = started;
        let (check, _) = self.check(server, self.sizes.keys)?;
        Ok((stop_how, serving, first_hit, check))
    }

    /// The first of every stride-th key (from key 0, the oldest) that `server` holds; key 0
    /// when it holds none of the first thousand tried.
    fn present_key(&self, server: &ServerProcess) -> Result<KeyBatch, BenchError> {
        let bench = self.bench_args(server, self.sizes.keys)?;
        let keys = KeySpace::new(self.sizes.keys, bench.key_size)?;
        let stride = check_stride(self.sizes.keys, self.spec.check_keys_max);
        let key = |index: u64| {
            let mut key = KeyBatch::default();
            key.push(&keys, index);
            key
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], server.port(Protocol::MemcacheText)));
        let io = |e: std::io::Error| BenchError::Server {
            server: self.target.server.name.clone(),
            detail: format!("finding a present key: {e}"),
        };
        let mut stream = TcpStream::connect(addr).map_err(io)?;
        stream.set_read_timeout(Some(STATS_TIMEOUT)).map_err(io)?;
        let mut input = Vec::new();
        for index in (0..self.sizes.keys)
            .step_by(stride.try_into().unwrap_or(1))
            .take(1000)
        {
            let mut request = Vec::new();
            Protocol::MemcacheText.encode_get(&mut request, &key(index));
            let answer =
                restart::get_once(&mut stream, Protocol::MemcacheText, &request, &mut input)
                    .map_err(io)?;
            if matches!(answer, Answer::Hit) {
                return Ok(key(index));
            }
        }
        Ok(key(0))
    }

    /// One closed-loop phase per key distribution, then the fixed-rate phase.
    fn mixed_phases(&self, server: &ServerProcess) -> Result<Vec<FlashPhase>, BenchError> {
        let dists = self.spec.key_dists().map_err(BenchError::Config)?;
        let mut runs: Vec<(KeyDist, Option<f64>)> = dists.iter().map(|&d| (d, None)).collect();
        if let Some(rate) = self.spec.fixed_rate {
            runs.push((dists[0], Some(rate)));
        }
        let template = self.scenario.bench_args(&[]).map_err(BenchError::Config)?;
        let mut phases = Vec::new();
        for (phase, (dist, rate)) in (0u64..).zip(runs) {
            let mut bench = self.bench_args(server, self.sizes.keys)?;
            bench.key_dist = dist;
            bench.rate = rate;
            // Each phase draws its own requests (the same ones for every server): with one
            // seed, the fixed-rate phase replayed the start of the first phase's sequence, keys
            // that phase had just read (and a tiering server had moved to memory).
            bench.seed = template.seed + phase;
            bench.warmup_secs = template.warmup_secs * self.args.time_scale;
            bench.duration_secs = template.duration_secs * self.args.time_scale;
            let label = match rate {
                Some(rate) => format!("{dist} at {rate:.0}/s"),
                None => dist.to_string(),
            };
            eprintln!("  mixed: {label}");
            let port = server.port(Protocol::MemcacheText);
            let stats_start = memcache_stats(port).unwrap_or_default();
            let io_start = io_bytes(server.pid)?;
            let steal_start = cpu_steal_ticks().ok();
            let started = Instant::now();
            let report = crate::run(&bench)?;
            let wall_secs = started.elapsed().as_secs_f64();
            let io = io_delta(io_start, io_bytes(server.pid)?);
            let steal_percent =
                steal_start
                    .zip(cpu_steal_ticks().ok())
                    .and_then(|((s0, t0), (s1, t1))| {
                        #[allow(clippy::cast_precision_loss)]
                        (t1 > t0).then(|| 100.0 * s1.saturating_sub(s0) as f64 / (t1 - t0) as f64)
                    });
            let stats_delta = stats_delta(&stats_start, &memcache_stats(port).unwrap_or_default());
            let report = report.measured.ok_or_else(|| missing("mixed phase"))?;
            phases.push(FlashPhase {
                label,
                rate_per_sec: rate,
                report,
                io,
                wall_secs,
                stats_delta,
                steal_percent,
            });
        }
        Ok(phases)
    }

    /// The same server without its flash tier, offered twice its budget.
    fn run_memory_only(&self) -> Result<MemoryOnly, BenchError> {
        eprintln!("  memory only ({} MiB)", self.sizes.memory_mib);
        let log = self.log("memory-only");
        let server = ServerProcess::start(self.target.server, self.resources(), &log)?;
        let keys = self.sizes.memory_only_keys();
        let rss_start = rss_bytes(server.pid)?;
        self.fill(&server, keys)?;
        let (check, stride) = self.check(&server, keys)?;
        let rss_growth_bytes = rss_bytes(server.pid)?.saturating_sub(rss_start);
        Ok(MemoryOnly {
            keys,
            items_kept: items_kept(check.counts.hits, keys, stride),
            rss_growth_bytes,
            check,
        })
    }
}

fn missing(phase: &str) -> BenchError {
    BenchError::Config(format!("the generator returned no {phase} figures"))
}

fn io_delta(start: IoBytes, end: IoBytes) -> IoBytes {
    IoBytes {
        read_bytes: end.read_bytes.saturating_sub(start.read_bytes),
        write_bytes: end.write_bytes.saturating_sub(start.write_bytes),
    }
}

/// Creates the flash directory, writable by all with the sticky bit (like /tmp): memcached
/// started as root drops to `-u nobody` before it opens its extstore file.
fn prepare_dir(dir: &Path) -> Result<(), BenchError> {
    let file_error = |source| BenchError::File {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(file_error)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).map_err(file_error)
}

/// The `STAT name value` lines of memcached's `stats` on `port`.
///
/// # Errors
/// When the server cannot be reached or does not answer with `END`.
pub fn memcache_stats(port: u16) -> Result<BTreeMap<String, String>, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("stats: {e}"))?;
    stream
        .set_read_timeout(Some(STATS_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"stats\r\n")
        .map_err(|e| format!("stats: {e}"))?;
    let mut stats = BTreeMap::new();
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(|e| format!("stats: {e}"))?;
        if line == "END" {
            return Ok(stats);
        }
        if let Some((name, value)) = parse_stat_line(&line) {
            stats.insert(name, value);
        } else {
            return Err(format!("stats: unexpected line {line:?}"));
        }
    }
    Err("stats: the connection closed before END".into())
}

/// `("name", "value")` from `STAT name value`.
#[must_use]
pub fn parse_stat_line(line: &str) -> Option<(String, String)> {
    let (name, value) = line.strip_prefix("STAT ")?.split_once(' ')?;
    Some((name.to_owned(), value.trim_end().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_flash_flag_reads_not_run_with_the_servers_words() {
        let log = std::env::temp_dir().join(format!("strata-flash-refused-{}", std::process::id()));
        let error = BenchError::Server {
            server: "strata".into(),
            detail: "exited during start-up (exit status: 2)".into(),
        };
        // What clap prints for a flag it does not know (strata before issue 11's tier).
        let clap = "error: unexpected argument '--flash' found\n\n  tip: a similar argument \
                    exists: '--fresh'\n";
        std::fs::write(&log, clap).unwrap();
        assert_eq!(
            refused_flash_reason("strata", &log, &error),
            "strata has no --flash yet (error: unexpected argument '--flash' found)"
        );
        // Any other start-up failure keeps its own message.
        std::fs::write(&log, "error: --flash-size 0 is too small\n").unwrap();
        assert_eq!(
            refused_flash_reason("strata", &log, &error),
            error.to_string()
        );
        std::fs::remove_file(&log).unwrap();
    }
}
