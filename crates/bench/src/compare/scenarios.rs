//! Scenario files: one TOML file per scenario under `bench/scenarios/`.
//!
//! ```toml
//! name = "small-pipelined"                   # file-unique id, used in chart names
//! title = "64 B values, 90:10, 20 conns x 16" # shown in the report
//! kind = "throughput"                        # throughput | sweep | memory | restart
//! protocols = ["memcache-text", "resp"]      # run for each server speaking one of these
//! repeats = 3                                # medians over this many runs
//! headline = "requests_per_sec"              # the figure charted and ranked
//!
//! [load]                                     # any `strata-bench run` flag, `_` for `-`
//! connections = 20
//! pipeline = 16
//! value_size = "64"
//! ratio = "9:1"
//! preload = true
//!
//! [sweep]                                    # kind = "sweep" only
//! rates = [20000, 50000, 100000]             # open-loop requests per second
//! p999_us_max = 1000                         # the SLO for "highest rate within p99.9"
//!
//! [restart]                                  # kind = "restart" only (see restart.rs)
//! dir = "/dev/shm"                           # where pools, memory files and dumps go
//! stops = ["clean", "kill"]                  # each stop is followed by a timed restart
//! memory_mib = 512                           # instead of --memory-mib, for this scenario
//!
//! [flash]                                    # kind = "flash" only (see flash.rs)
//! memory_mib = 256                           # the memory budget, × --size-scale
//! flash_mib = 4096                           # the flash file, × --size-scale
//! offered_mib = 8192                         # key + value bytes the fill offers, × --size-scale
//! key_dists = ["zipf:0.9", "uniform"]        # one closed-loop mixed phase each
//! fixed_rate = 20000                         # then one open-loop phase at this rate
//! ```
//!
//! The `[load]` table becomes command-line flags parsed by the same `BenchArgs` as
//! `strata-bench run`, so every generator option is available and validated one way.

use std::path::Path;

use serde::Deserialize;

use super::flash::FlashSpec;
use super::restart::RestartSpec;
use crate::args::BenchArgs;
use crate::error::BenchError;
use crate::protocol::Protocol;

/// What a scenario measures and how its results are summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScenarioKind {
    /// One run per repeat; throughput, latency and CPU.
    #[default]
    Throughput,
    /// Open-loop runs at increasing rates; the highest rate within the p99.9 SLO.
    Sweep,
    /// Preload then read back; items retained and RSS growth per item.
    Memory,
    /// Preload, stop, restart: process start to first hit (see `restart.rs`).
    Restart,
    /// A flash tier below a small memory budget: items kept, hit ratio, DRAM per flash item
    /// (see `flash.rs`).
    Flash,
}

/// The figure a throughput scenario ranks servers by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Headline {
    /// Completed requests per second (higher is better).
    #[default]
    RequestsPerSec,
    /// Keys per second (higher is better): for multi-gets.
    KeysPerSec,
    /// 99th percentile latency (lower is better).
    P99Us,
    /// 99.9th percentile latency (lower is better).
    P999Us,
    /// Server CPU per request (lower is better).
    ServerCpuUsPerRequest,
}

/// An open-loop rate sweep.
#[derive(Debug, Clone, Deserialize)]
pub struct Sweep {
    /// Offered rates, requests per second, ascending.
    pub rates: Vec<f64>,
    /// The p99.9 latency objective, µs.
    #[serde(default = "default_p999_us_max")]
    pub p999_us_max: f64,
}

fn default_p999_us_max() -> f64 {
    1000.0
}

fn default_protocols() -> Vec<Protocol> {
    vec![Protocol::MemcacheText, Protocol::Resp]
}

/// One scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short id.
    pub name: String,
    /// One-line description.
    pub title: String,
    /// What it measures.
    #[serde(default)]
    pub kind: ScenarioKind,
    /// Protocols to run; each server runs those it speaks.
    #[serde(default = "default_protocols")]
    pub protocols: Vec<Protocol>,
    /// Runs per server (medians are reported); the CLI may override.
    #[serde(default)]
    pub repeats: Option<usize>,
    /// The figure to rank and chart.
    #[serde(default)]
    pub headline: Headline,
    /// `strata-bench run` flags.
    #[serde(default)]
    pub load: toml::Table,
    /// Rates for a sweep.
    #[serde(default)]
    pub sweep: Option<Sweep>,
    /// Stops and files for a restart scenario.
    #[serde(default)]
    pub restart: Option<RestartSpec>,
    /// Sizes and phases of a flash scenario.
    #[serde(default)]
    pub flash: Option<FlashSpec>,
}

impl Scenario {
    /// The sweep's p99.9 latency objective, µs (the default when the scenario has no sweep).
    #[must_use]
    pub fn p999_us_max(&self) -> f64 {
        self.sweep
            .as_ref()
            .map_or_else(default_p999_us_max, |s| s.p999_us_max)
    }

    /// Parses one scenario file.
    ///
    /// # Errors
    /// On unreadable files, bad TOML, unknown fields or `[load]` flags the generator rejects.
    pub fn load(path: &Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::File {
            path: path.to_path_buf(),
            source,
        })?;
        let scenario: Scenario = toml::from_str(&text)
            .map_err(|e| BenchError::Config(format!("{}: {e}", path.display())))?;
        let no_rates = match &scenario.sweep {
            Some(sweep) => sweep.rates.is_empty(),
            None => true,
        };
        if scenario.kind == ScenarioKind::Sweep && no_rates {
            return Err(BenchError::Config(format!(
                "{}: a sweep needs [sweep] rates",
                path.display()
            )));
        }
        scenario
            .bench_args(&[])
            .and_then(|_| scenario.check_flash())
            .map_err(|e| BenchError::Config(format!("{}: {e}", path.display())))?;
        Ok(scenario)
    }

    /// A flash scenario needs a valid `[flash]` table and sizes its own key space.
    ///
    /// # Errors
    /// Saying what to fix.
    pub fn check_flash(&self) -> Result<(), String> {
        match (&self.flash, self.kind == ScenarioKind::Flash) {
            (None, true) => Err("a flash scenario needs a [flash] table".into()),
            (Some(_), false) => Err("[flash] belongs to kind = \"flash\" only".into()),
            (Some(_), true) if self.load.contains_key("keyspace") => Err(
                "a flash scenario's key space is [flash] offered_mib / (key + value bytes): \
                 remove keyspace from [load]"
                    .into(),
            ),
            (Some(flash), true) => flash.validate(),
            (None, false) => Ok(()),
        }
    }

    /// The generator arguments: `[load]` plus `extra` flags (target, protocol, CPU...).
    ///
    /// # Errors
    /// With clap's or the validator's message.
    pub fn bench_args(&self, extra: &[String]) -> Result<BenchArgs, String> {
        let mut argv = vec!["strata-bench".to_owned()];
        for (key, value) in &self.load {
            let flag = format!("--{}", key.replace('_', "-"));
            match value {
                toml::Value::Boolean(true) => argv.push(flag),
                toml::Value::Boolean(false) => {}
                toml::Value::String(text) => argv.extend([flag, text.clone()]),
                toml::Value::Array(items) => {
                    let items: Vec<String> = items.iter().map(plain).collect();
                    argv.extend([flag, items.join(",")]);
                }
                other => argv.extend([flag, plain(other)]),
            }
        }
        argv.extend(extra.iter().cloned());
        let args = BenchArgs::parse_from_args(argv).map_err(|e| e.to_string())?;
        args.validate()?;
        Ok(args)
    }
}

/// A TOML scalar as the command line would spell it.
fn plain(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Every `*.toml` in `dir`, sorted by file name.
///
/// # Errors
/// On an unreadable directory or any invalid scenario.
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, BenchError> {
    let entries = std::fs::read_dir(dir).map_err(|source| BenchError::File {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    paths.sort();
    paths.iter().map(|path| Scenario::load(path)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        name = "x"
        title = "an example"
        protocols = ["resp"]
        [load]
        connections = 20
        pipeline = 16
        value_size = "64"
        preload = true
        readback = false
        cpu = [1]
        rate = 5000.5
    "#;

    #[test]
    fn load_table_becomes_flags() {
        let scenario: Scenario = toml::from_str(EXAMPLE).unwrap();
        assert_eq!(scenario.kind, ScenarioKind::Throughput);
        assert_eq!(scenario.headline, Headline::RequestsPerSec);
        let args = scenario
            .bench_args(&["--target".into(), "127.0.0.1:1".into()])
            .unwrap();
        assert_eq!((args.connections, args.pipeline), (20, 16));
        assert!(args.preload && !args.readback);
        assert_eq!(args.cpu, [1]);
        assert_eq!(args.rate, Some(5000.5));
        assert_eq!(args.target, "127.0.0.1:1");
    }

    #[test]
    fn bad_flags_and_fields_are_rejected() {
        let mut scenario: Scenario = toml::from_str(EXAMPLE).unwrap();
        scenario
            .load
            .insert("no_such_flag".into(), toml::Value::Integer(1));
        assert!(scenario.bench_args(&[]).is_err());
        assert!(toml::from_str::<Scenario>("name='a'\ntitle='b'\nbogus=1").is_err());
    }

    #[test]
    fn shipped_scenarios_are_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
        let scenarios = load_dir(&dir).unwrap();
        assert!(scenarios.len() >= 7, "{} scenarios", scenarios.len());
        let mut names: Vec<_> = scenarios.iter().map(|s| s.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), scenarios.len(), "scenario names are unique");
    }
}
