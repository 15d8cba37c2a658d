//! # strata-bench
//!
//! A load generator for memcached-protocol and Redis-protocol servers, and a runner that
//! benchmarks strata side by side with memcached and Redis on the same machine.
//!
//! **Goals:** trustworthy figures. Latency comes from HdrHistograms; open-loop runs measure
//! from the *intended* send time (no coordinated omission); every figure comes with the
//! generator's own CPU use, so a saturated generator is visible; with `--server-pid` the
//! server's CPU time per request is reported, the headline efficiency figure.
//!
//! **Non-goals:** TLS, cluster topologies, the memcached binary protocol, RESP3.
//!
//! ```text
//!  BenchArgs ─▶ run() ─▶ preload phase ─▶ measured phase ─▶ read-back phase ─▶ Report
//!                          │ each phase: driver::run_phase
//!                          ▼
//!              T load threads (mio event loop each, pinned with --cpu)
//!              each: C/T connections × pipeline depth, RequestMaker (workload + protocol)
//!
//!  compare::run_compare ─▶ for each scenario TOML × repeat × server:
//!       start server (taskset core 0) ─▶ run() (core 1) ─▶ stop ─▶ REPORT.md, charts, JSON
//! ```
//!
//! Use from another binary:
//!
//! ```no_run
//! let args = strata_bench::BenchArgs::parse_from_args(["bench", "--target", "127.0.0.1:11211"])
//!     .expect("valid arguments");
//! let report = strata_bench::run(&args).expect("server reachable");
//! print!("{}", report.render_text());
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod affinity;
pub mod args;
pub mod arrival;
pub mod compare;
pub mod cpu;
pub mod driver;
pub mod error;
pub mod histogram;
pub mod protocol;
pub mod report;
pub mod workload;
pub mod zipf;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

pub use args::BenchArgs;
pub use error::BenchError;
pub use report::Report;

use args::BULK_PIPELINE_MIN;
use driver::{run_phase, PhaseKind, PhasePlan};
use report::{PhaseReport, RunConfig};
use workload::{OpKind, Workload, WorkloadSpec};

/// Runs the preload (if asked), the measured phase (unless `--duration-secs 0`) and the
/// read-back (if asked) against one server, and writes `--json` if given.
///
/// # Errors
/// On invalid arguments, an unreachable server, a broken connection or invalid replies,
/// replies that stall, or an unwritable JSON file.
pub fn run(args: &BenchArgs) -> Result<Report, BenchError> {
    args.validate().map_err(BenchError::Config)?;
    let addr = resolve(&args.target)?;
    let spec = workload_spec(args, args.batch_keys);
    let workload = Arc::new(Workload::new(&spec)?);
    let plan = PhasePlan {
        addr,
        protocol: args.protocol,
        threads: args.threads,
        connections: args.connections,
        pipeline: args.pipeline,
        pipeline_batches: args.pipeline_batches,
        workload: Arc::clone(&workload),
        kind: PhaseKind::Sequential(OpKind::Set),
        cpus: args.cpu.clone(),
        seed: args.seed,
        server_pid: args.server_pid,
        drain_ns: args.drain_secs * 1_000_000_000,
        backlog_max: args.backlog_max,
        stride: 1,
    };
    let bulk = PhasePlan {
        pipeline: args.pipeline.max(BULK_PIPELINE_MIN),
        ..plan.clone()
    };
    let preload = args.preload.then(|| run_phase(&bulk)).transpose()?;
    let measured = (args.duration_secs > 0.0)
        .then(|| {
            let kind = PhaseKind::Timed {
                warmup_ns: secs_to_ns(args.warmup_secs),
                duration_ns: secs_to_ns(args.duration_secs),
                rate: args.rate.map(|rate| (args.arrival, rate)),
            };
            run_phase(&PhasePlan {
                kind,
                ..plan.clone()
            })
        })
        .transpose()?;
    let readback = if args.readback {
        let readback_workload = Workload::new(&workload_spec(args, args.readback_batch_keys))?;
        let kind = PhaseKind::Sequential(OpKind::Get);
        Some(run_phase(&PhasePlan {
            kind,
            workload: Arc::new(readback_workload),
            stride: args.readback_stride,
            ..bulk
        })?)
    } else {
        None
    };
    let report = Report {
        target: args.target.clone(),
        protocol: args.protocol,
        config: run_config(args),
        preload: preload.map(|outcome| PhaseReport::from_outcome(&outcome, None)),
        measured: measured.map(|outcome| PhaseReport::from_outcome(&outcome, args.rate)),
        readback: readback.map(|outcome| PhaseReport::from_outcome(&outcome, None)),
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).expect("reports serialise");
        std::fs::write(path, text).map_err(|source| BenchError::File {
            path: path.clone(),
            source,
        })?;
    }
    Ok(report)
}

fn resolve(target: &str) -> Result<SocketAddr, BenchError> {
    let connect_error = |source| BenchError::Connect {
        addr: target.to_owned(),
        source,
    };
    target
        .to_socket_addrs()
        .map_err(connect_error)?
        .next()
        .ok_or_else(|| BenchError::Config(format!("{target} resolves to no address")))
}

fn workload_spec(args: &BenchArgs, batch_keys: usize) -> WorkloadSpec {
    WorkloadSpec {
        keys_count: args.keyspace,
        key_dist: args.key_dist,
        key_size: args.key_size,
        value_size: args.value_size,
        ratio: args.ratio,
        batch_keys,
        ttl_secs: args.ttl_secs,
        seed: args.seed,
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn secs_to_ns(secs: f64) -> u64 {
    (secs * 1e9) as u64
}

fn run_config(args: &BenchArgs) -> RunConfig {
    RunConfig {
        threads: args.threads,
        connections: args.connections,
        pipeline: args.pipeline,
        pipeline_batches: args.pipeline_batches,
        rate_per_sec: args.rate,
        arrival: format!("{:?}", args.arrival).to_lowercase(),
        keyspace: args.keyspace,
        key_dist: args.key_dist.to_string(),
        key_size: args.key_size.to_string(),
        value_size: args.value_size.to_string(),
        ratio: args.ratio.to_string(),
        batch_keys: args.batch_keys,
        ttl_secs: args.ttl_secs,
        warmup_secs: args.warmup_secs,
        duration_secs: args.duration_secs,
        cpus: args.cpu.clone(),
        server_pid: args.server_pid,
    }
}
