//! Runs the scenario matrix and writes the results.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::disk::DiskProbe;
use super::flash::{run_flash, FlashResult};
use super::restart::{run_restart, RestartResult};
use super::scenarios::{load_dir, Scenario, ScenarioKind};
use super::servers::{version, ServerProcess, ServerResources, ServerSpec};
use super::summary::summarise;
use super::{charts, report, CompareArgs};
use crate::cpu::rss_bytes;
use crate::error::BenchError;
use crate::protocol::Protocol;
use crate::report::Report;

/// The default number of runs per server and scenario.
const REPEATS_DEFAULT: usize = 3;
/// A sweep stops for a server once it completes less than this fraction of the offered rate.
const SATURATION_FRACTION: f64 = 0.9;

/// Whether a run happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum RunStatus {
    /// It ran and produced a report.
    Ok,
    /// The server could not be started (e.g. strata's binary is not built yet).
    NotRun(String),
    /// The server started but the run failed.
    Failed(String),
}

/// One run of one scenario (one sweep point) against one server and protocol.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Scenario name.
    pub scenario: String,
    /// Server name.
    pub server: String,
    /// Whether the server is a reference peer (memcached, Redis).
    pub is_peer: bool,
    /// Protocol.
    pub protocol: Protocol,
    /// 0-based repeat.
    pub repeat: usize,
    /// Sweep: the offered rate of this point.
    pub rate_per_sec: Option<f64>,
    /// Whether it ran.
    #[serde(flatten)]
    pub status: RunStatus,
    /// The generator's report.
    pub report: Option<Report>,
    /// Server RSS right after start, bytes.
    pub rss_bytes_before: Option<u64>,
    /// Server RSS after the run, bytes.
    pub rss_bytes_after: Option<u64>,
    /// Restart scenarios: what the restart after one stop measured.
    #[serde(default)]
    pub restart: Option<RestartResult>,
    /// Flash scenarios: everything the flash run measured.
    #[serde(default)]
    pub flash: Option<FlashResult>,
}

/// The servers to compare, from the CLI.
#[must_use]
pub fn server_specs(args: &CompareArgs) -> Vec<ServerSpec> {
    let text = vec![Protocol::MemcacheText, Protocol::MemcacheMeta];
    let memcached = ServerSpec {
        name: "memcached".to_owned(),
        command: args.memcached_cmd.clone(),
        protocols: text.clone(),
        is_peer: true,
        flash_args: Some(args.memcached_flash_args.clone()),
    };
    let mut all = vec![memcached.clone()];
    all.extend(args.memcached_builds.iter().map(|program| {
        let program = program.display().to_string();
        // memcached -V prints "memcached 1.6.45".
        let version = version(&program, "-V").replace(' ', "-");
        ServerSpec {
            name: version,
            command: args.memcached_cmd.replacen("memcached", &program, 1),
            ..memcached.clone()
        }
    }));
    all.push(ServerSpec {
        name: "redis".to_owned(),
        command: args.redis_cmd.clone(),
        protocols: vec![Protocol::Resp],
        is_peer: true,
        flash_args: None,
    });
    if let Some(valkey) = &args.valkey {
        all.push(ServerSpec {
            name: "valkey".to_owned(),
            command: args
                .redis_cmd
                .replacen("redis-server", &valkey.display().to_string(), 1),
            protocols: vec![Protocol::Resp],
            is_peer: true,
            flash_args: None,
        });
    }
    all.push(ServerSpec {
        name: "strata".to_owned(),
        command: args.strata_cmd.clone(),
        protocols: [text, vec![Protocol::Resp]].concat(),
        is_peer: false,
        flash_args: Some(args.strata_flash_args.clone()),
    });
    all.into_iter()
        .filter(|spec| {
            let family = spec.name.split('-').next().unwrap_or_default();
            args.servers.is_empty() || args.servers.iter().any(|s| *s == spec.name || s == family)
        })
        .collect()
}

/// Runs every selected scenario and writes REPORT.md, charts and results.json under `--out`.
///
/// # Errors
/// On invalid scenarios or an unwritable output directory; failed runs are recorded instead.
pub fn run_compare(args: &CompareArgs) -> Result<Vec<RunRecord>, BenchError> {
    let scenarios: Vec<Scenario> = load_dir(&args.scenarios)?
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.contains(&s.name))
        .collect();
    if scenarios.is_empty() {
        return Err(BenchError::Config(format!(
            "no scenarios selected in {}",
            args.scenarios.display()
        )));
    }
    let meta_path = args.out.join("meta.json");
    let disk_path = args.out.join("disk.json");
    // The 1-minute load averages at the start and end of the runs, kept beside results.json;
    // re-rendering reuses the ones the run recorded.
    let (records, loads) = if args.rerender {
        let path = args.out.join("results.json");
        let text = std::fs::read_to_string(&path).map_err(|source| BenchError::File {
            path: path.clone(),
            source,
        })?;
        let records = serde_json::from_str(&text)
            .map_err(|e| BenchError::Config(format!("{}: {e}", path.display())))?;
        (records, read_meta(&meta_path).unwrap_or_default())
    } else {
        let _ = std::fs::remove_file(&disk_path);
        if scenarios.iter().any(|s| s.kind == ScenarioKind::Flash) {
            // The raw disk under the flash files, once per comparison, before any server runs.
            let dir = args.flash_dir();
            std::fs::create_dir_all(&dir).map_err(|source| BenchError::File {
                path: dir.clone(),
                source,
            })?;
            std::fs::create_dir_all(&args.out).map_err(|source| BenchError::File {
                path: args.out.clone(),
                source,
            })?;
            write_json(&disk_path, &super::disk::probe(&dir, args.fio_secs))?;
        }
        let load_start = load_average();
        let records = run_matrix(args, &scenarios)?;
        let loads = (load_start, load_average());
        write_json(&meta_path, &loads)?;
        (records, loads)
    };
    let summaries = summarise(&scenarios, &records);
    let chart_files = charts::write_all(&args.out, &scenarios, &summaries)?;
    let disk: Option<DiskProbe> = std::fs::read_to_string(&disk_path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    let markdown = report::render(args, &scenarios, &summaries, &chart_files, loads, disk);
    let path = args.out.join("REPORT.md");
    std::fs::write(&path, markdown).map_err(|source| BenchError::File { path, source })?;
    write_json(&args.out.join("summary.json"), &summaries)?;
    Ok(records)
}

/// Runs every scenario × repeat × server × protocol, saving results.json after each scenario.
fn run_matrix(args: &CompareArgs, scenarios: &[Scenario]) -> Result<Vec<RunRecord>, BenchError> {
    let logs = args.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|source| BenchError::File {
        path: logs.clone(),
        source,
    })?;
    let servers = server_specs(args);
    let mut records = Vec::new();
    for scenario in scenarios {
        let repeats = args
            .repeats
            .or(scenario.repeats)
            .unwrap_or(REPEATS_DEFAULT)
            .max(1);
        let servers = with_variants(&servers, scenario);
        for repeat in 0..repeats {
            for server in &servers {
                // A restart's time or a flash run does not depend on the protocol: one per
                // server.
                let take = if matches!(scenario.kind, ScenarioKind::Restart | ScenarioKind::Flash) {
                    1
                } else {
                    usize::MAX
                };
                for &protocol in scenario
                    .protocols
                    .iter()
                    .filter(|p| server.protocols.contains(p))
                    .take(take)
                {
                    eprintln!(
                        "[{}] repeat {}/{repeats}: {} {protocol}",
                        scenario.name,
                        repeat + 1,
                        server.name
                    );
                    let target = Target {
                        server,
                        protocol,
                        repeat,
                    };
                    records.extend(run_target(args, scenario, &target, &logs));
                }
            }
        }
        write_json(&args.out.join("results.json"), &records)?;
    }
    Ok(records)
}

/// The servers plus the scenario's strata variants (strata's command with extra flags, under
/// their own names), when strata is selected.
fn with_variants(servers: &[ServerSpec], scenario: &Scenario) -> Vec<ServerSpec> {
    let mut all = servers.to_vec();
    let variants = scenario
        .restart
        .as_ref()
        .map_or(&[][..], |r| &r.strata_variants[..]);
    if let Some(strata) = servers.iter().find(|s| s.name == "strata") {
        all.extend(variants.iter().map(|variant| ServerSpec {
            name: variant.name.clone(),
            command: format!("{} {}", strata.command, variant.args),
            ..strata.clone()
        }));
    }
    all
}

/// One server, protocol and repeat.
pub(crate) struct Target<'a> {
    pub(crate) server: &'a ServerSpec,
    pub(crate) protocol: Protocol,
    pub(crate) repeat: usize,
}

impl Target<'_> {
    /// A record of this target's run at `rate`.
    pub(crate) fn record(
        &self,
        scenario: &Scenario,
        rate: Option<f64>,
        status: RunStatus,
    ) -> RunRecord {
        RunRecord {
            scenario: scenario.name.clone(),
            server: self.server.name.clone(),
            is_peer: self.server.is_peer,
            protocol: self.protocol,
            repeat: self.repeat,
            rate_per_sec: rate,
            status,
            report: None,
            rss_bytes_before: None,
            rss_bytes_after: None,
            restart: None,
            flash: None,
        }
    }
}

/// Starts the server, runs the scenario (every sweep point) against it, stops it.
fn run_target(
    args: &CompareArgs,
    scenario: &Scenario,
    target: &Target<'_>,
    logs: &Path,
) -> Vec<RunRecord> {
    if scenario.kind == ScenarioKind::Restart {
        return run_restart(args, scenario, target, logs);
    }
    if scenario.kind == ScenarioKind::Flash {
        return run_flash(args, scenario, target, logs);
    }
    let rates: Vec<Option<f64>> = match (&scenario.kind, &scenario.sweep) {
        (ScenarioKind::Sweep, Some(sweep)) => sweep.rates.iter().copied().map(Some).collect(),
        _ => vec![None],
    };
    let resources = ServerResources {
        threads: args.server_threads,
        memory_mib: args.memory_mib,
        cpu: args.server_cpu,
    };
    let name = format!(
        "{}-{}-{}.log",
        scenario.name, target.server.name, target.protocol
    );
    let server = match ServerProcess::start(target.server, resources, &logs.join(name)) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("  not run: {error}");
            let status = RunStatus::NotRun(error.to_string());
            return rates
                .iter()
                .map(|&r| target.record(scenario, r, status.clone()))
                .collect();
        }
    };
    let rss_bytes_before = rss_bytes(server.pid).ok();
    let mut records = Vec::new();
    for (index, &rate) in rates.iter().enumerate() {
        let result = bench_once(args, scenario, target.protocol, &server, rate, index == 0);
        let mut record = target.record(scenario, rate, RunStatus::Ok);
        record.rss_bytes_before = rss_bytes_before;
        record.rss_bytes_after = rss_bytes(server.pid).ok();
        match result {
            Ok(report) => {
                let saturated = rate.is_some_and(|rate| is_saturated(&report, rate));
                record.report = Some(report);
                records.push(record);
                if saturated {
                    // Higher offered rates can only fall further behind; skip them.
                    eprintln!("  saturated at {rate:?} req/s; skipping higher rates");
                    break;
                }
            }
            Err(error) => {
                eprintln!("  failed: {error}");
                record.status = RunStatus::Failed(error.to_string());
                records.push(record);
            }
        }
    }
    records
}

/// The generator flags naming the target: its address, protocol, the client's CPU and the
/// server's PID.
pub(crate) fn target_flags(
    args: &CompareArgs,
    protocol: Protocol,
    server: &ServerProcess,
) -> Vec<String> {
    vec![
        "--target".to_owned(),
        format!("127.0.0.1:{}", server.port(protocol)),
        "--protocol".to_owned(),
        protocol.name().to_owned(),
        "--cpu".to_owned(),
        args.client_cpu.to_string(),
        "--server-pid".to_owned(),
        server.pid.to_string(),
    ]
}

/// One generator run with the scenario's flags plus target, protocol, pinning and PID.
fn bench_once(
    args: &CompareArgs,
    scenario: &Scenario,
    protocol: Protocol,
    server: &ServerProcess,
    rate: Option<f64>,
    first_point: bool,
) -> Result<Report, BenchError> {
    let mut extra = target_flags(args, protocol, server);
    if let Some(rate) = rate {
        extra.extend(["--rate".to_owned(), rate.to_string()]);
    }
    let mut bench = scenario.bench_args(&extra).map_err(BenchError::Config)?;
    // A sweep preloads once per server, before its first point.
    bench.preload &= first_point;
    bench.warmup_secs *= args.time_scale;
    bench.duration_secs *= args.time_scale;
    crate::run(&bench)
}

/// True when an open-loop run completed less than [`SATURATION_FRACTION`] of the offered rate.
fn is_saturated(report: &Report, rate: f64) -> bool {
    report
        .measured
        .as_ref()
        .is_some_and(|m| m.requests_per_sec < SATURATION_FRACTION * rate)
}

/// The load averages a run recorded at its start and end.
fn read_meta(path: &Path) -> Option<(Option<f64>, Option<f64>)> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// The 1-minute load average, from /proc/loadavg.
fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), BenchError> {
    let text = serde_json::to_string_pretty(value).expect("results serialise");
    std::fs::write(path, text).map_err(|source| BenchError::File {
        path: path.to_path_buf(),
        source,
    })
}
