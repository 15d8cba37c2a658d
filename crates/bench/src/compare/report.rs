//! REPORT.md: the machine, the servers, and one table (plus chart) per scenario.

use std::fmt::Write as _;
use std::process::Command;

use super::charts::human;
use super::disk::DiskProbe;
use super::flash_report::{disk_paragraph, flash_tables};
use super::scenarios::{Scenario, ScenarioKind};
use super::servers::version;
use super::summary::{ScenarioSummary, TargetSummary};
use super::CompareArgs;

/// Renders the whole report.
#[must_use]
pub fn render(
    args: &CompareArgs,
    scenarios: &[Scenario],
    summaries: &[ScenarioSummary],
    charts: &[(String, String)],
    loads: (Option<f64>, Option<f64>),
    disk: Option<DiskProbe>,
) -> String {
    let mut md = String::from("# strata vs memcached vs Redis\n\n");
    let _ = writeln!(
        md,
        "Generated {} by `strata-bench compare`.\n",
        shell("date -u '+%Y-%m-%d %H:%M UTC'")
    );
    md.push_str(&machine_section(args));
    let load = |l: Option<f64>| l.map_or("?".to_owned(), |l| format!("{l:.2}"));
    let _ = writeln!(
        md,
        "Load average (1 min) at start {} and end {}. The servers and the generator account for \
         up to about 2 on this 2-CPU machine; more means other work shared the cores, and the \
         tail latencies in particular are then unreliable.\n",
        load(loads.0),
        load(loads.1)
    );
    md.push_str(
        "Each figure is the median over the repeats. \"vs best peer\" is the median, over \
         repeats, of this server's headline figure divided by the better of memcached and Redis \
         in the same repeat: above 1 is better for throughput, below 1 is better for latency, \
         CPU per request and bytes per item. \"gen CPU\" is the load generator's own CPU use in \
         cores: in closed loop, 1.00 means its core is saturated and the figure is a generator \
         limit; in open loop it busy-polls between close arrivals, so read saturation there from \
         achieved < offered instead.\n\n",
    );
    for (scenario, summary) in scenarios.iter().zip(summaries) {
        let _ = writeln!(md, "## {}\n\n{}\n", scenario.name, scenario.title);
        if let (ScenarioKind::Flash, Some(disk)) = (scenario.kind, &disk) {
            md.push_str(&disk_paragraph(disk));
        }
        match scenario.kind {
            ScenarioKind::Flash => flash_tables(&mut md, &summary.targets),
            ScenarioKind::Memory => memory_table(&mut md, scenario, summary),
            ScenarioKind::Restart => restart_table(&mut md, summary),
            ScenarioKind::Sweep => sweep_tables(&mut md, scenario, summary),
            ScenarioKind::Throughput => throughput_table(&mut md, summary),
        }
        for (_, file) in charts.iter().filter(|(name, _)| name == &scenario.name) {
            let _ = writeln!(md, "\n![{}]({file})\n", scenario.name);
        }
        for target in summary.targets.iter().filter(|t| t.status != "ok") {
            let _ = writeln!(
                md,
                "- {} {}: {}",
                target.server, target.protocol, target.status
            );
        }
        md.push('\n');
    }
    md
}

fn machine_section(args: &CompareArgs) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("unknown")
        .to_owned();
    let cores = cpu.lines().filter(|l| l.starts_with("processor")).count();
    let mut md = String::from("## Machine and servers\n\n");
    let _ = writeln!(
        md,
        "- CPU: {model}, {cores} logical CPUs; kernel {}",
        shell("uname -r")
    );
    let _ = writeln!(md, "- memcached: {}", version("memcached", "-V"));
    for build in &args.memcached_builds {
        let program = build.display().to_string();
        let _ = writeln!(md, "- {program}: {}", version(&program, "-V"));
    }
    let _ = writeln!(md, "- Redis: {}", version("redis-server", "-v"));
    let _ = writeln!(
        md,
        "- Every server: {} worker thread(s), {} MiB, pinned to CPU {}; generator pinned to CPU {}; loopback.",
        args.server_threads, args.memory_mib, args.server_cpu, args.client_cpu
    );
    let _ = writeln!(md, "- memcached: `{}`", args.memcached_cmd);
    let _ = writeln!(md, "- Redis: `{}`", args.redis_cmd);
    if let Some(valkey) = &args.valkey {
        let program = valkey.display().to_string();
        let _ = writeln!(
            md,
            "- Valkey: {} (Redis's command template)",
            version(&program, "-v")
        );
    }
    let _ = writeln!(md, "- strata: `{}`", args.strata_cmd);
    let _ = writeln!(
        md,
        "- Flash scenarios add memcached `{}` and strata `{}`; sizes × {}.\n",
        args.memcached_flash_args, args.strata_flash_args, args.size_scale
    );
    md
}

/// "not run" or "failed", for a row with no successful run.
fn short_status(target: &TargetSummary) -> &'static str {
    if target.status.starts_with("failed") {
        "failed"
    } else {
        "not run"
    }
}

fn fmt(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), human)
}

/// `value` with `decimals` digits after the point, or "—".
fn fixed(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{v:.decimals$}"))
}

fn fmt_ratio(target: &TargetSummary) -> String {
    target
        .ratio_vs_best_peer
        .map_or_else(|| "—".to_owned(), |r| format!("{r:.2}×"))
}

fn throughput_table(md: &mut String, summary: &ScenarioSummary) {
    let _ = writeln!(md, "Headline: {}.\n", summary.headline_label);
    md.push_str("| server | protocol | req/s | keys/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/req | gen CPU | hit % | errors | headline | vs best peer |\n");
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for t in &summary.targets {
        if t.runs == 0 {
            let _ = writeln!(
                md,
                "| {} | {} | {} | | | | | | | | | | |",
                t.server,
                t.protocol,
                short_status(t)
            );
            continue;
        }
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.server,
            t.protocol,
            fmt(t.requests_per_sec),
            fmt(t.keys_per_sec),
            fmt(t.p50_us),
            fmt(t.p99_us),
            fmt(t.p999_us),
            fixed(t.server_cpu_us_per_request, 2),
            fixed(t.client_cpu_cores, 2),
            fixed(t.hit_ratio.map(|v| v * 100.0), 1),
            t.errors,
            fmt(t.headline),
            fmt_ratio(t),
        );
    }
}

fn memory_table(md: &mut String, scenario: &Scenario, summary: &ScenarioSummary) {
    let offered = scenario
        .load
        .get("keyspace")
        .map_or("?".into(), ToString::to_string);
    let _ = writeln!(md, "Items offered: {offered}. Bytes per item = server RSS growth from start to after the read-back, divided by items found on read-back.\n");
    md.push_str("| server | protocol | items retained | bytes per item | server CPU µs/req (read-back) | vs best peer |\n");
    md.push_str("|---|---|---:|---:|---:|---:|\n");
    for t in &summary.targets {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            t.server,
            t.protocol,
            t.items_retained
                .map_or(short_status(t).into(), |v| format!("{v:.0}")),
            fixed(t.bytes_per_item, 1),
            fixed(t.server_cpu_us_per_request, 2),
            fmt_ratio(t),
        );
    }
}

fn restart_table(md: &mut String, summary: &ScenarioSummary) {
    md.push_str(
        "Process start (spawn) → first GET hit of the last preloaded key, after each kind of \
         stop; \"cold\" when the first answer was a miss. Items retained: keys found when \
         reading every preloaded key back after the restart. Medians over the repeats.\n\n",
    );
    md.push_str("| server | protocol | stop | start → first hit, ms | start → serving, ms | warm restarts | items retained / preloaded | vs best peer (clean) |\n");
    md.push_str("|---|---|---|---:|---:|---:|---:|---:|\n");
    for t in &summary.targets {
        if t.restart.is_empty() {
            let _ = writeln!(
                md,
                "| {} | {} | — | {} | | | | |",
                t.server,
                t.protocol,
                short_status(t)
            );
            continue;
        }
        for r in &t.restart {
            let ratio = if r.stop == super::restart::StopKind::Clean {
                fmt_ratio(t)
            } else {
                String::new()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} ({}) | {} | {} | {} of {} | {} / {} | {} |",
                t.server,
                t.protocol,
                r.stop.name(),
                r.stop_how,
                r.first_hit_ms
                    .map_or_else(|| "cold".to_owned(), |v| format!("{v:.1}")),
                fixed(r.serving_ms, 1),
                r.warm_runs,
                r.runs,
                fixed(r.items_retained, 0),
                fixed(r.items_offered, 0),
                ratio,
            );
        }
    }
}

fn sweep_tables(md: &mut String, scenario: &Scenario, summary: &ScenarioSummary) {
    let slo = scenario.p999_us_max();
    let _ = writeln!(md, "Highest offered rate whose p99.9 ≤ {slo:.0} µs (with achieved ≥ 95% of offered, nothing dropped):\n");
    md.push_str(
        "| server | protocol | highest rate within SLO | vs best peer |\n|---|---|---:|---:|\n",
    );
    for t in &summary.targets {
        let rate = if t.runs == 0 {
            short_status(t).to_owned()
        } else {
            fmt(t.rate_within_slo_per_sec)
        };
        let _ = writeln!(
            md,
            "| {} | {} | {rate} | {} |",
            t.server,
            t.protocol,
            fmt_ratio(t)
        );
    }
    md.push_str(
        "\n| server | protocol | offered/s | achieved/s | p50 µs | p99 µs | p99.9 µs | gen CPU |\n",
    );
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for t in &summary.targets {
        for p in &t.sweep {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} |",
                t.server,
                t.protocol,
                human(p.offered_per_sec),
                human(p.achieved_per_sec),
                p.p50_us,
                p.p99_us,
                p.p999_us,
                p.client_cpu_cores
            );
        }
    }
}

fn shell(command: &str) -> String {
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "unknown".to_owned(), |text| text.trim().to_owned())
}
