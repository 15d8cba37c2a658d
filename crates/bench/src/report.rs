//! The results of one `strata-bench run`: per-phase throughput, latency percentiles, hit ratio,
//! errors, and the CPU time of the generator and (optionally) the server, as a human table
//! and as JSON.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::driver::counts::Counts;
use crate::driver::PhaseOutcome;
use crate::histogram::LatencySummary;
use crate::protocol::Protocol;

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The server address.
    pub target: String,
    /// The wire protocol.
    pub protocol: Protocol,
    /// The run's settings, as given.
    pub config: RunConfig,
    /// Writing every key once before measuring.
    pub preload: Option<PhaseReport>,
    /// The measured run.
    pub measured: Option<PhaseReport>,
    /// Reading every key once after measuring.
    pub readback: Option<PhaseReport>,
}

/// The settings a report was made with (the CLI arguments, resolved).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct RunConfig {
    pub threads: usize,
    pub connections: usize,
    pub pipeline: usize,
    pub pipeline_batches: bool,
    pub rate_per_sec: Option<f64>,
    pub arrival: String,
    pub keyspace: u64,
    pub key_dist: String,
    pub key_size: String,
    pub value_size: String,
    pub ratio: String,
    pub batch_keys: usize,
    pub ttl_secs: u32,
    pub warmup_secs: f64,
    pub duration_secs: f64,
    pub cpus: Vec<usize>,
    pub server_pid: Option<u32>,
}

/// One phase's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseReport {
    /// The measured window (timed phase) or wall time (preload, read-back), in seconds.
    pub elapsed_secs: f64,
    /// From the window's start to the last measured reply, in seconds.
    pub completion_secs: f64,
    /// Raw counters.
    pub counts: Counts,
    /// Completed requests per second.
    pub requests_per_sec: f64,
    /// Keys read or written per second (a 100-key multi-get counts 100).
    pub keys_per_sec: f64,
    /// Open loop: the offered rate, requests per second.
    pub offered_per_sec: Option<f64>,
    /// Hits over keys read.
    pub hit_ratio: Option<f64>,
    /// All requests.
    pub latency: LatencySummary,
    /// GETs only.
    pub get_latency: LatencySummary,
    /// SETs only.
    pub set_latency: LatencySummary,
    /// The generator's CPU time over the phase, in seconds (all its threads).
    pub client_cpu_secs: f64,
    /// The generator's CPU time per completed request, in µs.
    pub client_cpu_us_per_request: f64,
    /// The generator's CPU time over the elapsed time (1.0 = one core busy).
    pub client_cpu_cores: f64,
    /// The server's CPU time over the phase, in seconds, when its PID was given.
    pub server_cpu_secs: Option<f64>,
    /// The server's CPU time per completed request, in µs: the headline efficiency figure.
    pub server_cpu_us_per_request: Option<f64>,
    /// Open loop: the deepest the client-side backlog got (saturation shows up here).
    pub backlog_depth_max: usize,
}

impl PhaseReport {
    /// Derives rates from a phase's raw outcome.
    #[must_use]
    pub fn from_outcome(outcome: &PhaseOutcome, offered_per_sec: Option<f64>) -> Self {
        let counts = outcome.tally.counts;
        // Rates use the longer of the window and the time to the last reply, so an open-loop
        // run that fell behind and caught up after the window does not look on time.
        let secs = outcome.elapsed_secs.max(outcome.completion_secs).max(1e-9);
        #[allow(clippy::cast_precision_loss)]
        let requests = counts.requests_completed as f64;
        #[allow(clippy::cast_precision_loss)]
        let keys = (counts.get_keys_sent + counts.sets_sent) as f64;
        let per_request = |cpu: f64| {
            if requests > 0.0 {
                cpu * 1e6 / requests
            } else {
                0.0
            }
        };
        PhaseReport {
            elapsed_secs: outcome.elapsed_secs,
            completion_secs: outcome.completion_secs,
            counts,
            requests_per_sec: requests / secs,
            keys_per_sec: keys / secs,
            offered_per_sec,
            hit_ratio: counts.hit_ratio(),
            latency: outcome.tally.all().summary(),
            get_latency: outcome.tally.get.summary(),
            set_latency: outcome.tally.set.summary(),
            client_cpu_secs: outcome.client_cpu_secs,
            client_cpu_us_per_request: per_request(outcome.client_cpu_secs),
            client_cpu_cores: outcome.client_cpu_secs / outcome.elapsed_secs.max(1e-9),
            server_cpu_secs: outcome.server_cpu_secs,
            server_cpu_us_per_request: outcome.server_cpu_secs.map(per_request),
            backlog_depth_max: outcome.backlog_depth_max,
        }
    }
}

impl Report {
    /// A plain-text table for terminals.
    #[must_use]
    pub fn render_text(&self) -> String {
        let c = &self.config;
        let mut out = String::new();
        let pace = match c.rate_per_sec {
            Some(rate) => format!("open loop {rate:.0} req/s ({})", c.arrival),
            None => "closed loop".to_owned(),
        };
        let _ = writeln!(
            out,
            "{} -> {}: {} threads, {} conns x {} pipeline, {pace}",
            self.protocol, self.target, c.threads, c.connections, c.pipeline
        );
        let _ = writeln!(
            out,
            "{} keys {}, key {} B, value {} B, GET:SET {}, {} keys/GET, ttl {} s\n",
            c.keyspace, c.key_dist, c.key_size, c.value_size, c.ratio, c.batch_keys, c.ttl_secs
        );
        let _ = writeln!(
            out,
            "{:<9} {:>7} {:>10} {:>10} {:>11} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} \
             {:>6} {:>8} {:>8}",
            "phase",
            "secs",
            "requests",
            "req/s",
            "keys/s",
            "hit%",
            "errors",
            "p50 us",
            "p90 us",
            "p99 us",
            "p99.9 us",
            "p99.99",
            "max us",
            "cli %",
            "cli us/r",
            "srv us/r"
        );
        let phases = [
            ("preload", &self.preload),
            ("measured", &self.measured),
            ("readback", &self.readback),
        ];
        for (name, phase) in phases {
            if let Some(phase) = phase {
                render_phase(&mut out, name, phase);
            }
        }
        out
    }
}

fn render_phase(out: &mut String, name: &str, phase: &PhaseReport) {
    let hit = phase
        .hit_ratio
        .map_or("-".to_owned(), |h| format!("{:.1}", h * 100.0));
    let server = phase
        .server_cpu_us_per_request
        .map_or("-".to_owned(), |v| format!("{v:.2}"));
    let _ = writeln!(
        out,
        "{name:<9} {:>7.2} {:>10} {:>10.0} {:>11.0} {hit:>6} {:>6} {} {:>6.0} {:>8.2} {server:>8}",
        phase.elapsed_secs,
        phase.counts.requests_completed,
        phase.requests_per_sec,
        phase.keys_per_sec,
        phase.counts.errors,
        latency_columns(&phase.latency),
        phase.client_cpu_cores * 100.0,
        phase.client_cpu_us_per_request,
    );
    for (verb, latency) in [("  get", &phase.get_latency), ("  set", &phase.set_latency)] {
        if latency.count > 0 && latency.count != phase.latency.count {
            let _ = writeln!(
                out,
                "{verb:<9} {:>59} {}",
                latency.count,
                latency_columns(latency)
            );
        }
    }
}

fn latency_columns(l: &LatencySummary) -> String {
    format!(
        "{:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
        l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.p9999_us, l.max_us
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::counts::Tally;
    use crate::workload::OpKind;

    #[test]
    fn rates_and_cpu_per_request() {
        let mut tally = Tally::default();
        for _ in 0..1000 {
            tally.sent(OpKind::Get, 10);
            let reply = crate::protocol::Reply {
                consumed: 1,
                hits: 5,
                ..Default::default()
            };
            tally.replied(OpKind::Get, 10, &reply, 100_000);
        }
        let outcome = PhaseOutcome {
            tally,
            elapsed_secs: 2.0,
            completion_secs: 1.9,
            client_cpu_secs: 0.5,
            server_cpu_secs: Some(0.01),
            backlog_depth_max: 0,
        };
        let phase = PhaseReport::from_outcome(&outcome, None);
        assert!((phase.requests_per_sec - 500.0).abs() < 1e-9);
        assert!((phase.keys_per_sec - 5000.0).abs() < 1e-9);
        assert_eq!(phase.hit_ratio, Some(0.5));
        assert!((phase.client_cpu_us_per_request - 500.0).abs() < 1e-9);
        assert!((phase.server_cpu_us_per_request.unwrap() - 10.0).abs() < 1e-9);
        assert!((phase.client_cpu_cores - 0.25).abs() < 1e-9);
        assert!((phase.latency.p50_us - 100.0).abs() < 0.1);
    }
}
