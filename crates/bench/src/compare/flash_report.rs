//! A flash scenario's summary (medians over repeats of each derived figure) and its tables in
//! REPORT.md, plus the raw-disk paragraph.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::charts::human;
use super::disk::{DiskProbe, FioOutcome};
use super::flash::{FlashRestart, FlashResult, DEMOTED_ITEMS_STATS, FLASH_BYTES_WRITTEN_STATS};
use super::flash_math::{
    dram_per_flash_item, index_bytes_per_flash_item, write_amplification, MIB,
};
use super::summary::{median, TargetSummary};

/// Server stats shown beside the derived figures, where the server reports them.
/// strata's `strata_flash_refused_items` counts evicted items its flash tier dropped (behind, or
/// at its write rate); its write and read errors should stay 0.
pub const SHOWN_STATS: [&str; 10] = [
    "curr_items",
    "evictions",
    "extstore_objects_used",
    "extstore_objects_written",
    "extstore_bytes_written",
    "extstore_objects_evicted",
    "strata_flash_refused_items",
    "strata_flash_write_errors",
    "strata_flash_read_errors",
    "strata_flash_damaged_records",
];

/// One mixed phase's medians.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlashPhaseSummary {
    /// "zipf:0.9", "uniform", "zipf:0.9 at 20000/s".
    pub label: String,
    /// Completed requests per second.
    pub requests_per_sec: Option<f64>,
    /// GET hit ratio.
    pub hit_ratio: Option<f64>,
    /// Latency percentiles of all requests, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile, µs.
    pub p99_us: Option<f64>,
    /// 99.9th percentile, µs.
    pub p999_us: Option<f64>,
    /// Server CPU per request, µs.
    pub server_cpu_us_per_request: Option<f64>,
    /// Bytes the server read from the disk per GET (page-cache hits read nothing).
    pub disk_read_bytes_per_get: Option<f64>,
    /// Flash reads made for requests per GET served from flash, by the server's own counters.
    #[serde(default)]
    pub flash_reads_per_flash_hit: Option<f64>,
    /// The machine's CPU steal over the phase, percent (a shared VM's tails follow it).
    #[serde(default)]
    pub steal_percent: Option<f64>,
    /// The phase's fixed rate (an open loop), requests per second; `None`: as fast as the
    /// server answers (a closed loop).
    #[serde(default)]
    pub rate_per_sec: Option<f64>,
}

/// One stop and start's medians.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlashRestartSummary {
    /// "clean stop", "kill -9".
    pub stop: String,
    /// Process start → first GET answered, ms.
    pub serving_ms: Option<f64>,
    /// Process start → first GET hit, ms; `None` when every start was cold.
    pub first_hit_ms: Option<f64>,
    /// Items kept before the stop.
    pub items_before: Option<f64>,
    /// Items kept after the start.
    pub items_after: Option<f64>,
}

/// One server's flash figures: medians over repeats.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FlashSummary {
    /// Memory budget, MiB.
    pub memory_mib: u64,
    /// Flash file size, MiB.
    pub flash_mib: u64,
    /// Key + value bytes offered.
    pub offered_bytes: u64,
    /// Keys offered.
    pub keys: u64,
    /// Mean value length, bytes.
    pub value_bytes: f64,
    /// Fill rate, SETs per second.
    pub fill_sets_per_sec: Option<f64>,
    /// Items kept (estimated from the check's sample).
    pub items_kept: Option<f64>,
    /// What the memory tier alone keeps: measured, or the budget's worth of key + value bytes.
    pub memory_only_kept: Option<f64>,
    /// RSS growth, start → after the check, bytes.
    pub rss_growth_bytes: Option<f64>,
    /// RSS growth of the memory-only run, bytes.
    pub memory_only_rss_growth_bytes: Option<f64>,
    /// DRAM bytes per item kept beyond memory alone (see `flash_math`).
    pub dram_per_flash_item: Option<f64>,
    /// "memory-only run" or "budget": what the DRAM figure subtracts.
    pub dram_basis: String,
    /// Index and key-filter bytes per flash item by the server's own stats (strata only).
    #[serde(default)]
    pub index_bytes_per_flash_item: Option<f64>,
    /// Bytes the server wrote to the disk during fill, settle and check (/proc/PID/io).
    pub disk_write_bytes: Option<f64>,
    /// Bytes written to flash by the server's own count, where it has one.
    pub flash_bytes_written: Option<f64>,
    /// The flash file's allocated bytes after the check.
    pub flash_file_bytes: Option<f64>,
    /// Values written to flash.
    pub values_demoted: Option<f64>,
    /// Where `values_demoted` came from: a server stat, or a lower bound.
    pub demoted_source: String,
    /// Bytes written to the disk per byte of values demoted.
    pub write_amplification: Option<f64>,
    /// The mixed phases, in order.
    pub phases: Vec<FlashPhaseSummary>,
    /// The stops and starts after them, in order.
    #[serde(default)]
    pub restarts: Vec<FlashRestartSummary>,
    /// Why the first run's restarts failed, if they did.
    #[serde(default)]
    pub restart_error: Option<String>,
    /// [`SHOWN_STATS`] present in the first run's stats after the check.
    pub stats: BTreeMap<String, String>,
}

/// Per-run derived figures.
struct Derived {
    memory_only_kept: f64,
    memory_tier_bytes: u64,
    dram: Option<f64>,
    index_per_flash_item: Option<f64>,
    demoted: Option<f64>,
    flash_bytes_written: Option<f64>,
    write_amplification: Option<f64>,
}

/// The first of `names` that the server's stats after the check hold as a number.
fn stat(result: &FlashResult, names: &[&str]) -> Option<(f64, String)> {
    names.iter().find_map(|name| {
        let value = result.stats_after_check.get(*name)?.parse::<f64>().ok()?;
        Some((value, format!("server stat {name}")))
    })
}

fn derive(result: &FlashResult) -> (Derived, String, String) {
    let (memory_tier_bytes, memory_only_kept, basis) = match &result.memory_only {
        Some(m) => (m.rss_growth_bytes, m.items_kept, "memory-only run"),
        None => (
            result.sizes.memory_mib * MIB,
            result.sizes.budget_items(),
            "budget",
        ),
    };
    let rss_growth = result
        .rss_bytes_after_check
        .saturating_sub(result.rss_bytes_start);
    let dram = dram_per_flash_item(
        rss_growth,
        memory_tier_bytes,
        result.items_kept,
        memory_only_kept,
    );
    let (demoted, source) = stat(result, &DEMOTED_ITEMS_STATS).unwrap_or_else(|| {
        let beyond = (result.items_kept - memory_only_kept).max(0.0);
        (
            beyond,
            "lower bound: items kept beyond memory alone".to_owned(),
        )
    });
    let count = |name: &str| result.stats_after_check.get(name)?.parse::<u64>().ok();
    let index_per_flash_item = (|| {
        index_bytes_per_flash_item(
            count("strata_index_bytes")?,
            count("curr_items")?,
            count("strata_flash_filter_bytes")?,
            count("strata_flash_items")?,
        )
    })();
    let flash_bytes_written = stat(result, &FLASH_BYTES_WRITTEN_STATS).map(|(v, _)| v);
    // The server's own count where it has one; /proc/PID/io otherwise (exact for O_DIRECT).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let written = flash_bytes_written.map_or(result.io_fill.write_bytes, |v| v as u64);
    let write_amplification = write_amplification(written, demoted, result.value_bytes);
    let derived = Derived {
        memory_only_kept,
        memory_tier_bytes,
        dram,
        index_per_flash_item,
        demoted: Some(demoted),
        flash_bytes_written,
        write_amplification,
    };
    (derived, basis.to_owned(), source)
}

/// The medians of the flash results among `results` (one per repeat), or `None` if none.
#[must_use]
pub fn summarise(results: &[&FlashResult]) -> Option<FlashSummary> {
    let first = results.first()?;
    let derived: Vec<(Derived, String, String)> = results.iter().map(|r| derive(r)).collect();
    let med = |f: &dyn Fn(&FlashResult) -> Option<f64>| {
        median(results.iter().filter_map(|r| f(r)).collect())
    };
    let med_derived = |f: &dyn Fn(&Derived) -> Option<f64>| {
        median(derived.iter().filter_map(|(d, ..)| f(d)).collect())
    };
    #[allow(clippy::cast_precision_loss)]
    let bytes = |v: u64| Some(v as f64);
    Some(FlashSummary {
        memory_mib: first.sizes.memory_mib,
        flash_mib: first.sizes.flash_mib,
        offered_bytes: first.sizes.offered_bytes,
        keys: first.sizes.keys,
        value_bytes: first.value_bytes,
        fill_sets_per_sec: med(&|r| Some(r.fill.requests_per_sec)),
        items_kept: med(&|r| Some(r.items_kept)),
        memory_only_kept: med_derived(&|d| Some(d.memory_only_kept)),
        rss_growth_bytes: med(&|r| {
            bytes(r.rss_bytes_after_check.saturating_sub(r.rss_bytes_start))
        }),
        memory_only_rss_growth_bytes: med_derived(&|d| bytes(d.memory_tier_bytes))
            .filter(|_| first.memory_only.is_some()),
        dram_per_flash_item: med_derived(&|d| d.dram),
        dram_basis: derived[0].1.clone(),
        index_bytes_per_flash_item: med_derived(&|d| d.index_per_flash_item),
        disk_write_bytes: med(&|r| bytes(r.io_fill.write_bytes)),
        flash_bytes_written: med_derived(&|d| d.flash_bytes_written),
        flash_file_bytes: med(&|r| bytes(r.flash_file_bytes)),
        values_demoted: med_derived(&|d| d.demoted),
        demoted_source: derived[0].2.clone(),
        write_amplification: med_derived(&|d| d.write_amplification),
        phases: phase_summaries(results),
        restarts: restart_summaries(results),
        restart_error: first.restart_error.clone(),
        stats: SHOWN_STATS
            .iter()
            .filter_map(|&name| Some((name.to_owned(), first.stats_after_check.get(name)?.clone())))
            .collect(),
    })
}

fn phase_summaries(results: &[&FlashResult]) -> Vec<FlashPhaseSummary> {
    let labels: Vec<String> = results[0].phases.iter().map(|p| p.label.clone()).collect();
    labels
        .into_iter()
        .map(|label| {
            let phases: Vec<_> = results
                .iter()
                .flat_map(|r| r.phases.iter().filter(|p| p.label == label))
                .collect();
            let med = |f: &dyn Fn(&super::flash::FlashPhase) -> Option<f64>| {
                median(phases.iter().filter_map(|p| f(p)).collect())
            };
            FlashPhaseSummary {
                requests_per_sec: med(&|p| Some(p.report.requests_per_sec)),
                hit_ratio: med(&|p| p.report.hit_ratio),
                p50_us: med(&|p| Some(p.report.latency.p50_us)),
                p99_us: med(&|p| Some(p.report.latency.p99_us)),
                p999_us: med(&|p| Some(p.report.latency.p999_us)),
                server_cpu_us_per_request: med(&|p| p.report.server_cpu_us_per_request),
                disk_read_bytes_per_get: med(&disk_read_bytes_per_get),
                flash_reads_per_flash_hit: med(&|p| flash_reads_per_flash_hit(&p.stats_delta)),
                steal_percent: med(&|p| p.steal_percent),
                rate_per_sec: phases.first().and_then(|p| p.rate_per_sec),
                label,
            }
        })
        .collect()
}

fn restart_summaries(results: &[&FlashResult]) -> Vec<FlashRestartSummary> {
    (0..results[0].restarts.len())
        .map(|n| {
            let restarts: Vec<&FlashRestart> =
                results.iter().filter_map(|r| r.restarts.get(n)).collect();
            let med = |f: &dyn Fn(&FlashRestart) -> Option<f64>| {
                median(restarts.iter().filter_map(|r| f(r)).collect())
            };
            FlashRestartSummary {
                stop: restarts[0].stop.name().to_owned(),
                serving_ms: med(&|r| Some(r.serving_ms)),
                first_hit_ms: med(&|r| r.first_hit_ms),
                items_before: med(&|r| Some(r.items_before)),
                items_after: med(&|r| Some(r.items_after)),
            }
        })
        .collect()
}

/// Flash reads made for requests over GETs served from flash, from a phase's counter deltas:
/// strata's `strata_flash_reads` less `strata_flash_settle_reads` (the flash thread's own
/// reads) over `strata_flash_hits`; memcached's `extstore_objects_read` over `get_extstore` less
/// `miss_from_extstore`. `None` for a server with neither, or no flash hits.
pub fn flash_reads_per_flash_hit(delta: &BTreeMap<String, f64>) -> Option<f64> {
    let get = |name: &str| delta.get(name).copied();
    let (reads, hits) = if let Some(reads) = get("strata_flash_reads") {
        let settle = get("strata_flash_settle_reads").unwrap_or(0.0);
        (reads - settle, get("strata_flash_hits")?)
    } else {
        let hits = get("get_extstore")? - get("miss_from_extstore").unwrap_or(0.0);
        (get("extstore_objects_read")?, hits)
    };
    (hits > 0.0).then(|| reads / hits)
}

/// The phase's disk reads per second over its GETs per second (the reads span the warm-up and
/// drain too, the GET count only the measured window).
fn disk_read_bytes_per_get(phase: &super::flash::FlashPhase) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    let gets_per_sec = phase.report.counts.gets_sent as f64 / phase.report.elapsed_secs;
    #[allow(clippy::cast_precision_loss)]
    let reads_per_sec = phase.io.read_bytes as f64 / phase.wall_secs;
    (gets_per_sec > 0.0 && phase.wall_secs > 0.0).then(|| reads_per_sec / gets_per_sec)
}

/// The paragraph on the raw disk under the flash files.
#[must_use]
pub fn disk_paragraph(disk: &DiskProbe) -> String {
    let mut md = format!(
        "Raw disk under the flash files ({}, {}): fio, 4 KiB random reads, O_DIRECT, libaio: ",
        disk.dir, disk.file_system
    );
    match &disk.fio {
        FioOutcome::NotInstalled => md.push_str("fio not installed (`apt-get install fio`)."),
        FioOutcome::Skipped => md.push_str("skipped (`--fio-secs 0`)."),
        FioOutcome::Failed(why) => {
            let _ = write!(md, "failed: {why}.");
        }
        FioOutcome::Measured(jobs) => {
            let parts: Vec<String> = jobs
                .iter()
                .map(|j| {
                    format!(
                        "QD{} {} IOPS, latency mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs",
                        j.queue_depth,
                        human(j.iops),
                        j.mean_us,
                        j.p50_us,
                        j.p99_us
                    )
                })
                .collect();
            let _ = write!(md, "{}.", parts.join("; "));
        }
    }
    md.push_str("\n\n");
    md
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{v:.decimals$}"))
}

fn mib(value: Option<f64>) -> String {
    opt(value.map(|v| v / 1_048_576.0), 0)
}

/// The flash scenario's tables.
pub fn flash_tables(md: &mut String, targets: &[TargetSummary]) {
    let Some(sizes) = targets.iter().find_map(|t| t.flash.as_ref()) else {
        md.push_str("No server ran.\n");
        return;
    };
    #[allow(clippy::cast_precision_loss)]
    let offered_gib = sizes.offered_bytes as f64 / (1u64 << 30) as f64;
    let _ = writeln!(
        md,
        "Memory budget {} MiB, flash file {} MiB, {offered_gib:.2} GiB offered: {} keys of \
         {:.0} B values, written once each, pipelined, as fast as the server takes them; then \
         every k-th key read once (items kept), then the mixed phases.\n",
        sizes.memory_mib, sizes.flash_mib, sizes.keys, sizes.value_bytes
    );
    md.push_str(
        "DRAM per flash item = (RSS growth with flash − RSS growth of the same server with the \
         same budget and no flash, filled to twice its budget) ÷ (items kept with flash − items \
         kept without). It charges only DRAM outside the memory tier: a server that keeps flash \
         items' headers inside its budget (memcached does, ~100 B each) pays with fewer items \
         kept instead; fixed costs (write buffers, a larger hash table) are spread over the \
         flash items, so small runs overstate it. Index + filter B per flash item (strata, \
         from its stats after the check) = strata_index_bytes ÷ curr_items + \
         strata_flash_filter_bytes ÷ strata_flash_items: the DRAM each flash item costs for its \
         lookup, inside the budget or not, without fixed costs. Written per value byte = bytes written to \
         flash during the fill, settle and check ÷ (values demoted × value bytes). Bytes \
         written: the server's own counter where it has one (memcached: \
         extstore_bytes_written), else /proc/PID/io write_bytes (\"disk writes\": exact for \
         O_DIRECT writers, an undercount for writers through the page cache, where a page \
         rewritten before writeback counts once). Values demoted: the server's counter \
         (memcached: extstore_objects_written), else the items kept beyond memory alone (a \
         lower bound, marked ≥, so the ratio is an upper bound).\n\n",
    );
    md.push_str(
        "| server | fill SETs/s | items kept | kept % | memory alone keeps | RSS growth MiB \
         | DRAM B per flash item | index + filter B per flash item | disk writes MiB \
         | flash writes MiB (server) | flash file MiB | values demoted | written per value byte |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for t in targets {
        summary_row(md, t);
    }
    phase_table(md, targets);
    md.push('\n');
    restart_table(md, targets);
    for t in targets {
        if let Some(f) = t.flash.as_ref().filter(|f| !f.stats.is_empty()) {
            let stats: Vec<String> = f.stats.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(
                md,
                "- {} stats after the check: {}",
                t.server,
                stats.join(", ")
            );
        }
    }
}

/// Each server's mixed phases: rate, hits, latency, CPU, disk reads.
fn phase_table(md: &mut String, targets: &[TargetSummary]) {
    md.push_str(
        "\n| server | phase | req/s | GET hit % | p50 µs | p99 µs | p99.9 µs | server CPU µs/req \
         | disk read B/GET | flash reads per flash hit | CPU steal % |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for t in targets {
        for p in t.flash.iter().flat_map(|f| &f.phases) {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                t.server,
                p.label,
                p.requests_per_sec.map_or_else(|| "—".into(), human),
                opt(p.hit_ratio.map(|h| h * 100.0), 1),
                opt(p.p50_us, 0),
                opt(p.p99_us, 0),
                opt(p.p999_us, 0),
                opt(p.server_cpu_us_per_request, 2),
                opt(p.disk_read_bytes_per_get, 0),
                opt(p.flash_reads_per_flash_hit, 2),
                opt(p.steal_percent, 1),
            );
        }
    }
}

/// The stops and starts after the mixed phases, where any server made them.
fn restart_table(md: &mut String, targets: &[TargetSummary]) {
    if targets
        .iter()
        .flat_map(|t| &t.flash)
        .all(|f| f.restarts.is_empty() && f.restart_error.is_none())
    {
        return;
    }
    md.push_str(
        "Restarts with the flash tier full, after the mixed phases (each server with its warm \
         restart file on tmpfs; items kept by the same sampled check before the stop and after \
         the start):\n\n| server | stop | start → serving ms | start → first hit ms | items \
         before | items after | kept % |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    for t in targets {
        let Some(f) = &t.flash else { continue };
        for r in &f.restarts {
            let kept = r
                .items_before
                .zip(r.items_after)
                .and_then(|(b, a)| (b > 0.0).then(|| a / b * 100.0));
            let first_hit = r
                .first_hit_ms
                .map_or_else(|| "cold".to_owned(), |ms| format!("{ms:.0}"));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {first_hit} | {} | {} | {} |",
                t.server,
                r.stop,
                opt(r.serving_ms, 0),
                opt(r.items_before, 0),
                opt(r.items_after, 0),
                opt(kept, 1),
            );
        }
        if let Some(error) = &f.restart_error {
            let _ = writeln!(md, "| {} | failed: {error} | | | | | |", t.server);
        }
    }
    md.push('\n');
}

fn summary_row(md: &mut String, t: &TargetSummary) {
    let Some(f) = &t.flash else {
        let status = if t.status.starts_with("failed") {
            "failed"
        } else {
            "not run"
        };
        let _ = writeln!(md, "| {} | {status} | | | | | | | | | | | |", t.server);
        return;
    };
    #[allow(clippy::cast_precision_loss)]
    let kept_pct = f.items_kept.map(|k| k / f.keys as f64 * 100.0);
    let memory_alone = match f.dram_basis.as_str() {
        "budget" => format!("{} (budget ÷ item)", opt(f.memory_only_kept, 0)),
        _ => opt(f.memory_only_kept, 0),
    };
    let demoted_note = if f.demoted_source.starts_with("lower") {
        " (≥)"
    } else {
        ""
    };
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {memory_alone} | {} | {} | {} | {} | {} | {} | {}{demoted_note} | {} |",
        t.server,
        f.fill_sets_per_sec.map_or_else(|| "—".into(), human),
        opt(f.items_kept, 0),
        opt(kept_pct, 1),
        mib(f.rss_growth_bytes),
        opt(f.dram_per_flash_item, 1),
        opt(f.index_bytes_per_flash_item, 1),
        mib(f.disk_write_bytes),
        mib(f.flash_bytes_written),
        mib(f.flash_file_bytes),
        opt(f.values_demoted, 0),
        opt(f.write_amplification, 2),
    );
}
