//! Medians over repeats, and ratios against the better reference server from the same repeat.
//!
//! Ratios are `target / best peer` of the scenario's headline figure, computed per repeat (so
//! both sides of a ratio ran minutes apart at most, under the same machine noise) and then
//! reduced to their median. For throughput a ratio above 1 is better; for latency, CPU per
//! request and bytes per item, below 1 is better.

use serde::{Deserialize, Serialize};

use super::flash_report::FlashSummary;
use super::restart::{RestartResult, StopKind};
use super::runner::{RunRecord, RunStatus};
use super::scenarios::{Headline, Scenario, ScenarioKind};
use crate::protocol::Protocol;
use crate::report::PhaseReport;

/// One sweep point's medians.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Offered rate, requests per second.
    pub offered_per_sec: f64,
    /// Completed requests per second.
    pub achieved_per_sec: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// Generator CPU, cores.
    pub client_cpu_cores: f64,
}

/// A restart scenario's medians for one kind of stop.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestartSummary {
    /// The stop.
    pub stop: StopKind,
    /// How it was done.
    pub stop_how: String,
    /// Restarts measured.
    pub runs: usize,
    /// Of those, restarts whose first GET hit (warm).
    pub warm_runs: usize,
    /// Median process start → first answer, ms.
    pub serving_ms: Option<f64>,
    /// Median process start → first hit over the warm restarts, ms.
    pub first_hit_ms: Option<f64>,
    /// Median items found on read-back after the restart.
    pub items_retained: Option<f64>,
    /// Items preloaded (median).
    pub items_offered: Option<f64>,
}

/// One server and protocol in one scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TargetSummary {
    /// Server name.
    pub server: String,
    /// Reference server or strata.
    pub is_peer: bool,
    /// Protocol.
    pub protocol: Protocol,
    /// "ok", or why it did not run.
    pub status: String,
    /// Successful runs (sweep: per point).
    pub runs: usize,
    /// Median completed requests per second.
    pub requests_per_sec: Option<f64>,
    /// Median keys per second.
    pub keys_per_sec: Option<f64>,
    /// Median p50, µs.
    pub p50_us: Option<f64>,
    /// Median p99, µs.
    pub p99_us: Option<f64>,
    /// Median p99.9, µs.
    pub p999_us: Option<f64>,
    /// Median server CPU per request, µs.
    pub server_cpu_us_per_request: Option<f64>,
    /// Median generator CPU, cores.
    pub client_cpu_cores: Option<f64>,
    /// Median hit ratio.
    pub hit_ratio: Option<f64>,
    /// Error replies over all runs.
    pub errors: u64,
    /// Memory: median items found on read-back.
    pub items_retained: Option<f64>,
    /// Memory: median RSS growth per retained item, bytes.
    pub bytes_per_item: Option<f64>,
    /// Sweep: per-rate medians.
    pub sweep: Vec<SweepPoint>,
    /// Sweep: median over repeats of the highest offered rate meeting the p99.9 objective.
    pub rate_within_slo_per_sec: Option<f64>,
    /// The headline figure's median.
    pub headline: Option<f64>,
    /// Median over repeats of headline / best peer's headline in the same repeat.
    pub ratio_vs_best_peer: Option<f64>,
    /// Restart: medians per kind of stop.
    #[serde(default)]
    pub restart: Vec<RestartSummary>,
    /// Flash: medians of the flash figures.
    #[serde(default)]
    pub flash: Option<FlashSummary>,
}

/// One scenario's summaries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScenarioSummary {
    /// Scenario name.
    pub scenario: String,
    /// Headline label, e.g. "requests/s".
    pub headline_label: String,
    /// True when a larger headline is better.
    pub higher_is_better: bool,
    /// Per server and protocol.
    pub targets: Vec<TargetSummary>,
}

/// The median of the values present, or `None`.
#[must_use]
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

/// The headline's label and direction.
#[must_use]
pub fn headline_meta(scenario: &Scenario) -> (&'static str, bool) {
    match (scenario.kind, scenario.headline) {
        (ScenarioKind::Sweep, _) => ("highest req/s with p99.9 within SLO", true),
        (ScenarioKind::Memory, _) => ("bytes per retained item (RSS growth)", false),
        (ScenarioKind::Restart, _) => ("process start → first hit after a clean stop, ms", false),
        (ScenarioKind::Flash, Headline::RequestsPerSec) => {
            ("requests/s in the first mixed phase", true)
        }
        (_, Headline::RequestsPerSec) => ("requests/s", true),
        (_, Headline::KeysPerSec) => ("keys/s", true),
        (_, Headline::P99Us) => ("p99 latency, µs", false),
        (_, Headline::P999Us) => ("p99.9 latency, µs", false),
        (_, Headline::ServerCpuUsPerRequest) => ("server CPU µs per request", false),
    }
}

/// Summarises every scenario.
#[must_use]
pub fn summarise(scenarios: &[Scenario], records: &[RunRecord]) -> Vec<ScenarioSummary> {
    scenarios
        .iter()
        .map(|scenario| {
            let mine: Vec<&RunRecord> = records
                .iter()
                .filter(|r| r.scenario == scenario.name)
                .collect();
            let (label, higher_is_better) = headline_meta(scenario);
            let mut keys: Vec<(String, Protocol, bool)> = mine
                .iter()
                .map(|r| (r.server.clone(), r.protocol, r.is_peer))
                .collect();
            keys.sort_by_key(|k| (!k.2, k.0.clone(), k.1));
            keys.dedup();
            let targets = keys
                .iter()
                .map(|(server, protocol, is_peer)| {
                    let runs: Vec<&RunRecord> = mine
                        .iter()
                        .copied()
                        .filter(|r| &r.server == server && r.protocol == *protocol)
                        .collect();
                    summarise_target(scenario, &runs, &mine, higher_is_better, *is_peer)
                })
                .collect();
            ScenarioSummary {
                scenario: scenario.name.clone(),
                headline_label: label.into(),
                higher_is_better,
                targets,
            }
        })
        .collect()
}

fn summarise_target(
    scenario: &Scenario,
    runs: &[&RunRecord],
    all: &[&RunRecord],
    higher_is_better: bool,
    is_peer: bool,
) -> TargetSummary {
    let first = runs[0];
    let ok: Vec<&RunRecord> = runs
        .iter()
        .copied()
        .filter(|r| r.status == RunStatus::Ok)
        .collect();
    let status = status_text(runs, ok.len());
    let phases: Vec<&PhaseReport> = ok.iter().filter_map(|r| measured_phase(r)).collect();
    let med = |f: &dyn Fn(&PhaseReport) -> Option<f64>| {
        median(phases.iter().filter_map(|p| f(p)).collect())
    };
    let repeats = runs.iter().map(|r| r.repeat).max().map_or(0, |m| m + 1);
    let per_repeat: Vec<f64> = (0..repeats)
        .filter_map(|repeat| headline_of(scenario, all, repeat, &first.server, first.protocol))
        .collect();
    let ratios = ratios_vs_best_peer(scenario, all, first, repeats, higher_is_better);
    TargetSummary {
        server: first.server.clone(),
        is_peer,
        protocol: first.protocol,
        status,
        runs: ok.len(),
        requests_per_sec: med(&|p| Some(p.requests_per_sec)),
        keys_per_sec: med(&|p| Some(p.keys_per_sec)),
        p50_us: med(&|p| Some(p.latency.p50_us)),
        p99_us: med(&|p| Some(p.latency.p99_us)),
        p999_us: med(&|p| Some(p.latency.p999_us)),
        server_cpu_us_per_request: med(&|p| p.server_cpu_us_per_request),
        client_cpu_cores: med(&|p| Some(p.client_cpu_cores)),
        hit_ratio: med(&|p| p.hit_ratio),
        errors: phases.iter().map(|p| p.counts.errors).sum(),
        items_retained: median(ok.iter().filter_map(|r| retained(r)).collect()),
        bytes_per_item: median(ok.iter().filter_map(|r| bytes_per_item(r)).collect()),
        sweep: sweep_points(&ok),
        rate_within_slo_per_sec: (scenario.kind == ScenarioKind::Sweep)
            .then(|| median(per_repeat.clone()))
            .flatten(),
        headline: median(per_repeat),
        ratio_vs_best_peer: median(ratios),
        restart: restart_summaries(&ok),
        flash: super::flash_report::summarise(
            &ok.iter()
                .filter_map(|r| r.flash.as_ref())
                .collect::<Vec<_>>(),
        ),
    }
}

/// Per kind of stop, in the order first seen: medians of the restarts measured.
fn restart_summaries(ok: &[&RunRecord]) -> Vec<RestartSummary> {
    let mut stops: Vec<StopKind> = Vec::new();
    for record in ok {
        if let Some(r) = &record.restart {
            if !stops.contains(&r.stop) {
                stops.push(r.stop);
            }
        }
    }
    stops
        .into_iter()
        .map(|stop| {
            let these: Vec<_> = ok
                .iter()
                .filter_map(|r| r.restart.as_ref())
                .filter(|r| r.stop == stop)
                .collect();
            #[allow(clippy::cast_precision_loss)]
            let med = |f: &dyn Fn(&RestartResult) -> Option<f64>| {
                median(these.iter().filter_map(|r| f(r)).collect())
            };
            RestartSummary {
                stop,
                stop_how: these
                    .first()
                    .map_or_else(String::new, |r| r.stop_how.clone()),
                runs: these.len(),
                warm_runs: these.iter().filter(|r| r.first_hit_ms.is_some()).count(),
                serving_ms: med(&|r| Some(r.serving_ms)),
                first_hit_ms: med(&|r| r.first_hit_ms),
                items_retained: med(&|r| r.items_retained.map(|n| n as f64)),
                items_offered: med(&|r| Some(r.items_offered as f64)),
            }
        })
        .collect()
}

/// "ok", "not run: why", or "failed (n of m runs): why".
fn status_text(runs: &[&RunRecord], ok_count: usize) -> String {
    match runs
        .iter()
        .find(|r| r.status != RunStatus::Ok)
        .map(|r| &r.status)
    {
        Some(RunStatus::NotRun(reason)) if ok_count == 0 => format!("not run: {reason}"),
        Some(RunStatus::NotRun(reason) | RunStatus::Failed(reason)) => {
            format!(
                "failed ({} of {} runs): {reason}",
                runs.len() - ok_count,
                runs.len()
            )
        }
        _ => "ok".to_owned(),
    }
}

/// The headline of one target in one repeat.
fn headline_of(
    scenario: &Scenario,
    all: &[&RunRecord],
    repeat: usize,
    server: &str,
    protocol: Protocol,
) -> Option<f64> {
    let these: Vec<&RunRecord> = all
        .iter()
        .copied()
        .filter(|r| r.repeat == repeat && r.server == server && r.protocol == protocol)
        .collect();
    headline_value(scenario, &these)
}

/// Per repeat: this target's headline over the best peer's in the same repeat.
fn ratios_vs_best_peer(
    scenario: &Scenario,
    all: &[&RunRecord],
    target: &RunRecord,
    repeats: usize,
    higher_is_better: bool,
) -> Vec<f64> {
    (0..repeats)
        .filter_map(|repeat| {
            let mine = headline_of(scenario, all, repeat, &target.server, target.protocol)?;
            let mut peers: Vec<(&str, Protocol)> = all
                .iter()
                .filter(|r| r.is_peer && r.repeat == repeat)
                .map(|r| (r.server.as_str(), r.protocol))
                .collect();
            peers.dedup();
            let values = peers
                .iter()
                .filter_map(|&(s, p)| headline_of(scenario, all, repeat, s, p));
            let best = if higher_is_better {
                values.fold(f64::NAN, f64::max)
            } else {
                values.fold(f64::NAN, f64::min)
            };
            (best.is_finite() && best > 0.0).then(|| mine / best)
        })
        .collect()
}

/// The phase a scenario's figures come from: the measured run, or the read-back for memory.
fn measured_phase(record: &RunRecord) -> Option<&PhaseReport> {
    let report = record.report.as_ref()?;
    report.measured.as_ref().or(report.readback.as_ref())
}

fn retained(record: &RunRecord) -> Option<f64> {
    let readback = record.report.as_ref()?.readback.as_ref()?;
    #[allow(clippy::cast_precision_loss)]
    let hits = readback.counts.hits as f64;
    Some(hits)
}

fn bytes_per_item(record: &RunRecord) -> Option<f64> {
    let items = retained(record)?;
    let growth = record
        .rss_bytes_after?
        .checked_sub(record.rss_bytes_before?)?;
    #[allow(clippy::cast_precision_loss)]
    let growth = growth as f64;
    (items > 0.0).then(|| growth / items)
}

/// The headline figure of one repeat's records for one target (one record, or a sweep's points).
fn headline_value(scenario: &Scenario, records: &[&RunRecord]) -> Option<f64> {
    match scenario.kind {
        ScenarioKind::Memory => bytes_per_item(records.first()?),
        ScenarioKind::Restart => {
            records
                .iter()
                .filter(|r| r.status == RunStatus::Ok)
                .filter_map(|r| r.restart.as_ref())
                .find(|r| r.stop == StopKind::Clean)?
                .first_hit_ms
        }
        ScenarioKind::Sweep => {
            let slo = scenario.p999_us_max();
            records
                .iter()
                .filter_map(|r| Some((r.rate_per_sec?, r.report.as_ref()?.measured.as_ref()?)))
                .filter(|(rate, p)| meets_slo(*rate, p, slo))
                .map(|(rate, _)| rate)
                .fold(None, |best: Option<f64>, rate| {
                    Some(best.map_or(rate, |b| b.max(rate)))
                })
        }
        ScenarioKind::Flash => {
            let phase = &records.first()?.flash.as_ref()?.phases.first()?.report;
            headline_of_phase(scenario.headline, phase)
        }
        ScenarioKind::Throughput => {
            let phase = measured_phase(records.first()?)?;
            headline_of_phase(scenario.headline, phase)
        }
    }
}

/// The headline figure of one phase.
fn headline_of_phase(headline: Headline, phase: &PhaseReport) -> Option<f64> {
    match headline {
        Headline::RequestsPerSec => Some(phase.requests_per_sec),
        Headline::KeysPerSec => Some(phase.keys_per_sec),
        Headline::P99Us => Some(phase.latency.p99_us),
        Headline::P999Us => Some(phase.latency.p999_us),
        Headline::ServerCpuUsPerRequest => phase.server_cpu_us_per_request,
    }
}

/// A sweep point counts when p99.9 is within the objective, nothing was dropped, and the
/// achieved rate is within 5% of the offered one (otherwise the generator or server fell behind).
fn meets_slo(rate: f64, phase: &PhaseReport, p999_us_max: f64) -> bool {
    phase.latency.p999_us <= p999_us_max
        && phase.counts.dropped == 0
        && phase.counts.errors == 0
        && phase.requests_per_sec >= 0.95 * rate
}

fn sweep_points(ok: &[&RunRecord]) -> Vec<SweepPoint> {
    let mut rates: Vec<f64> = ok.iter().filter_map(|r| r.rate_per_sec).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    rates
        .into_iter()
        .filter_map(|rate| {
            let phases: Vec<&PhaseReport> = ok
                .iter()
                .filter(|r| r.rate_per_sec == Some(rate))
                .filter_map(|r| r.report.as_ref()?.measured.as_ref())
                .collect();
            let med = |f: fn(&PhaseReport) -> f64| median(phases.iter().map(|p| f(p)).collect());
            Some(SweepPoint {
                offered_per_sec: rate,
                achieved_per_sec: med(|p| p.requests_per_sec)?,
                p50_us: med(|p| p.latency.p50_us)?,
                p99_us: med(|p| p.latency.p99_us)?,
                p999_us: med(|p| p.latency.p999_us)?,
                client_cpu_cores: med(|p| p.client_cpu_cores)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![f64::NAN, 5.0]), Some(5.0));
    }
}
