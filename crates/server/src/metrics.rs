//! Prometheus metrics: the request latency histogram the workers fill, and the text exposition
//! that `/metrics` serves from the same counters memcached `stats` and Redis INFO read.
//!
//! Invariants: a histogram is written by one worker only (one per worker, padded to its own
//! cache lines, so recording is three uncontended relaxed adds and never allocates); readers
//! sum the workers' histograms. Each bucket counts observations `<=` its bound; the exposition
//! makes them cumulative, as Prometheus requires.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::context::ServerContext;
use crate::stats::{ServerStats, COMMAND_NAMES};

/// Upper bounds of the latency buckets, in nanoseconds (250 ns to 1 s): a batch of small
/// requests takes well under a microsecond, a large multi-get or a synced write much longer.
pub const LATENCY_BUCKETS_NS: [u64; 18] = [
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    50_000_000,
    250_000_000,
    1_000_000_000,
];

/// A fixed-bucket latency histogram written by one thread.
#[derive(Debug)]
#[repr(align(128))]
pub struct LatencyHistogram {
    /// Observations per bucket; the last counts those above every bound.
    buckets: [AtomicU64; LATENCY_BUCKETS_NS.len() + 1],
    /// Sum of all observations in nanoseconds.
    sum_ns: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

impl LatencyHistogram {
    /// Records one observation.
    pub fn record(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BUCKETS_NS.partition_point(|&bound| bound < ns);
        // Relaxed: each counter is independent; a scrape may see one observation's bucket
        // before its sum, which Prometheus tolerates.
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// Metrics owned by the network core (the counters shared with the sessions are in `stats`).
#[derive(Debug)]
pub struct Metrics {
    /// Per-batch processing latency, one histogram per worker.
    pub latency: Box<[LatencyHistogram]>,
}

impl Metrics {
    /// Metrics for `workers` worker threads.
    pub fn new(workers: usize) -> Self {
        Metrics {
            latency: (0..workers).map(|_| LatencyHistogram::default()).collect(),
        }
    }

    /// Cumulative bucket counts, sum in ns, and count, over all workers.
    fn latency_totals(&self) -> ([u64; LATENCY_BUCKETS_NS.len() + 1], u64, u64) {
        let mut buckets = [0u64; LATENCY_BUCKETS_NS.len() + 1];
        let mut sum_ns = 0u64;
        for histogram in self.latency.iter() {
            for (total, bucket) in buckets.iter_mut().zip(&histogram.buckets) {
                *total += bucket.load(Ordering::Relaxed);
            }
            sum_ns = sum_ns.wrapping_add(histogram.sum_ns.load(Ordering::Relaxed));
        }
        let mut running = 0;
        for bucket in &mut buckets {
            running += *bucket;
            *bucket = running;
        }
        (buckets, sum_ns, running)
    }
}

/// Appends one metric's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Appends a metric with one sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

/// Renders every metric in the Prometheus text format (version 0.0.4).
pub fn render(ctx: &ServerContext, metrics: &Metrics) -> String {
    let mut out = String::with_capacity(8 << 10);
    render_server(&mut out, ctx);
    render_faults(&mut out, ctx);
    render_engine(&mut out, ctx);
    render_damage(&mut out, ctx);
    render_tiers(&mut out, ctx);
    render_latency(&mut out, metrics);
    out
}

/// The server's counters: name, help, value.
fn server_counters(stats: &crate::stats::ServerStats) -> [(&'static str, &'static str, u64); 11] {
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let get_keys = load(&stats.get_keys);
    let get_hits = load(&stats.get_hits);
    [
        (
            "strata_get_hits_total",
            "Keys read that were found.",
            get_hits,
        ),
        (
            "strata_get_misses_total",
            "Keys read that were not found.",
            get_keys.saturating_sub(get_hits),
        ),
        (
            "strata_connections_total",
            "Client connections accepted.",
            load(&stats.connections_total),
        ),
        (
            "strata_connections_rejected_total",
            "Client connections refused at the connection limit.",
            load(&stats.connections_rejected),
        ),
        (
            "strata_output_limit_disconnections_total",
            "Client connections closed because their output buffer passed its hard limit.",
            load(&stats.output_limit_disconnections),
        ),
        (
            "strata_evicted_clients_total",
            "Client connections closed because all clients' output passed \
             --client-output-memory and they held the most.",
            load(&stats.evicted_clients),
        ),
        (
            "strata_read_bytes_total",
            "Bytes read from clients.",
            load(&stats.bytes_read),
        ),
        (
            "strata_written_bytes_total",
            "Bytes written to clients.",
            load(&stats.bytes_written),
        ),
        (
            "strata_protocol_errors_total",
            "Protocol errors answered.",
            load(&stats.errors),
        ),
        (
            "strata_memcache_auth_commands_total",
            "memcached authentication tokens checked (--memcache-auth-file).",
            load(&stats.auth_commands),
        ),
        (
            "strata_memcache_auth_errors_total",
            "memcached authentication tokens refused.",
            load(&stats.auth_errors),
        ),
    ]
}

fn render_server(out: &mut String, ctx: &ServerContext) {
    let stats = &ctx.stats;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    render_commands(out, stats);
    for (name, help, value) in server_counters(stats) {
        single(out, name, "counter", help, value);
    }
    let current = load(&stats.connections_current);
    single(
        out,
        "strata_connections_current",
        "gauge",
        "Client connections open.",
        current,
    );
    let limit = ctx.settings.connections_max as u64;
    single(
        out,
        "strata_connections_max",
        "gauge",
        "Client connection limit.",
        limit,
    );
    render_client_output(out, ctx);
    single(
        out,
        "strata_uptime_seconds",
        "gauge",
        "Seconds since start.",
        ctx.uptime_secs(),
    );
}

/// Counters of what went wrong: panics caught, HTTP requests hung up on.
fn render_faults(out: &mut String, ctx: &ServerContext) {
    let stats = &ctx.stats;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let counters = [
        (
            "strata_worker_panics_total",
            "Panics caught on worker threads; each closed that worker's connections.",
            load(&stats.worker_panics),
        ),
        (
            "strata_panic_closed_connections_total",
            "Client connections closed because their worker panicked.",
            load(&stats.panic_closed_connections),
        ),
        (
            "strata_cross_protocol_closes_total",
            "Client connections closed for sending an HTTP request to a cache port.",
            load(&stats.cross_protocol_closes),
        ),
    ];
    for (name, help, value) in counters {
        single(out, name, "counter", help, value);
    }
    single(
        out,
        "strata_writes_refused",
        "gauge",
        "1 once a persist of the pool failed: writes are refused until restart (the health \
         check says why).",
        u64::from(ctx.engine.write_failure().is_some()),
    );
}

/// Damage found in the pool (issue 17): records that failed validation, by cause, and what it
/// cost.
fn render_damage(out: &mut String, ctx: &ServerContext) {
    let engine = ctx.engine.stats();
    header(
        out,
        "strata_records_damaged_total",
        "counter",
        "Damaged records found in the pool (never served), by cause.",
    );
    for (cause, count) in strata_engine::DAMAGE_CAUSES
        .iter()
        .zip(engine.records_damaged)
    {
        let _ = writeln!(
            out,
            "strata_records_damaged_total{{cause=\"{cause}\"}} {count}"
        );
    }
    single(
        out,
        "strata_damaged_items_dropped_total",
        "counter",
        "Items dropped from the index because their record was found damaged.",
        engine.damaged_items_dropped,
    );
    single(
        out,
        "strata_segments_unverified",
        "gauge",
        "Segments adopted at open not yet checked by the scrub (their reads validate).",
        engine.segments_unverified,
    );
    let report = ctx.engine.recovery_report();
    single(
        out,
        "strata_recovery_records_torn",
        "gauge",
        "Writes torn by the crash before this start (dropped at recovery; never acknowledged).",
        report.records_torn,
    );
}

/// Each storage tier (memory; flash with `--flash`): items, capacity, hits, evictions, and
/// the flash tier's own counters and read latency histogram.
/// A tier's fields as `<prefix>_<name>`, counters with Prometheus's `_total`.
fn render_fields(out: &mut String, prefix: &str, fields: &[crate::tiers::Field]) {
    for field in fields {
        let (kind, suffix) = match field.kind {
            crate::tiers::Kind::Counter => ("counter", "_total"),
            crate::tiers::Kind::Gauge => ("gauge", ""),
        };
        let name = format!("{prefix}_{}{suffix}", field.name);
        single(out, &name, kind, field.help, field.value);
    }
}

fn render_tiers(out: &mut String, ctx: &ServerContext) {
    use crate::tiers;
    let engine = ctx.engine.stats();
    let memory_capacity = engine.segments_total * engine.segment_size_bytes;
    let flash = engine.flash.as_ref();
    // `items` counts a key once; the flash tier's entries include suspects (flash entries
    // beside a newer memory copy of the same key), which `items` leaves out.
    let memory_items = flash.map_or(engine.items, |f| {
        (engine.items + f.suspects).saturating_sub(f.items)
    });
    let families = [
        (
            "strata_tier_items",
            "gauge",
            "Items whose record is in the tier.",
            memory_items,
            flash.map(|f| f.items),
        ),
        (
            "strata_tier_capacity_bytes",
            "gauge",
            "Bytes the tier holds data in.",
            memory_capacity,
            flash.map(|f| f.medium_bytes),
        ),
        (
            "strata_tier_hits_total",
            "counter",
            "Reads the tier served.",
            tiers::memory_hits(&engine),
            flash.map(|f| f.hits),
        ),
        (
            "strata_tier_evictions_total",
            "counter",
            "Items that left the server from the tier for lack of room (from memory: those the \
             flash tier did not take; a demotion is not one).",
            engine.evicted_items,
            flash.map(|f| f.evicted_items),
        ),
    ];
    for (name, kind, help, memory, flash) in families {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name}{{tier=\"memory\"}} {memory}");
        if let Some(flash) = flash {
            let _ = writeln!(out, "{name}{{tier=\"flash\"}} {flash}");
        }
    }
    render_fields(out, "strata_memory", &tiers::memory_fields(&engine));
    let Some(flash) = flash else {
        return;
    };
    render_fields(out, "strata_flash", &tiers::flash_fields(flash));
    render_flash_read_latency(out, flash);
}

/// The flash medium's read latency as a Prometheus histogram.
fn render_flash_read_latency(out: &mut String, flash: &strata_engine::FlashStats) {
    use crate::tiers;
    let name = "strata_flash_read_latency_seconds";
    header(
        out,
        name,
        "histogram",
        "Latency of reads of the flash medium.",
    );
    let cumulative = tiers::flash_read_latency_cumulative(flash);
    for &(bound_us, count) in &cumulative {
        match bound_us {
            Some(us) => {
                let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {count}", us as f64 / 1e6);
            }
            None => {
                let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
            }
        }
    }
    let total = cumulative.last().map_or(0, |&(_, count)| count);
    let _ = writeln!(out, "{name}_sum {}", flash.read_latency_us_sum as f64 / 1e6);
    let _ = writeln!(out, "{name}_count {total}");
}

/// Requests handled, by command.
fn render_commands(out: &mut String, stats: &ServerStats) {
    header(
        out,
        "strata_commands_total",
        "counter",
        "Requests handled, by command.",
    );
    for (name, counter) in COMMAND_NAMES.iter().zip(&stats.commands) {
        let _ = writeln!(
            out,
            "strata_commands_total{{command=\"{name}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
}

/// The output buffer memory all clients hold, and its budget (`--client-output-memory`).
fn render_client_output(out: &mut String, ctx: &ServerContext) {
    let budget = &ctx.output_budget;
    single(
        out,
        "strata_client_output_bytes",
        "gauge",
        "Output buffer memory all clients hold, beyond each connection's initial buffer.",
        budget.held_bytes() as u64,
    );
    single(
        out,
        "strata_client_output_bytes_max",
        "gauge",
        "Most output buffer memory all clients may hold (--client-output-memory).",
        budget.limit_bytes() as u64,
    );
    single(
        out,
        "strata_client_input_bytes",
        "gauge",
        "Read buffer memory all clients hold, beyond each connection's initial buffer.",
        ctx.stats.client_input_bytes.load(Ordering::Relaxed),
    );
}

fn render_engine(out: &mut String, ctx: &ServerContext) {
    let engine = ctx.engine.stats();
    let counters = [
        (
            "strata_evictions_total",
            "Items dropped by eviction.",
            engine.evicted_items,
        ),
        (
            "strata_expirations_total",
            "Items dropped because they expired.",
            engine.expired_items,
        ),
        (
            "strata_engine_hits_total",
            "Engine reads that found an item.",
            engine.hits,
        ),
        (
            "strata_engine_misses_total",
            "Engine reads that found none.",
            engine.misses,
        ),
        (
            "strata_engine_writes_total",
            "Records written.",
            engine.writes,
        ),
        (
            "strata_merged_items_total",
            "Items carried forward by merge eviction.",
            engine.merged_items,
        ),
        (
            "strata_segments_released_total",
            "Free segments whose pages were given back to the OS once quiet shards were \
             compacted (DRAM).",
            engine.segments_released,
        ),
    ];
    for (name, help, value) in counters {
        single(out, name, "counter", help, value);
    }
    render_engine_gauges(out, &engine);
}

/// The engine's gauges: items, bytes and segments.
fn render_engine_gauges(out: &mut String, engine: &strata_engine::EngineStats) {
    let gauges = [
        (
            "strata_items",
            "Items indexed (expired ones until reclaimed).",
            engine.items,
        ),
        ("strata_bytes", "Bytes of live records.", engine.live_bytes),
        (
            "strata_memory_bytes",
            "Memory budget: pool segments.",
            engine.memory_bytes,
        ),
        (
            "strata_index_bytes",
            "Bytes held by the index.",
            engine.index_bytes,
        ),
        (
            "strata_segments_used",
            "Segments holding data.",
            engine.segments_used,
        ),
        (
            "strata_segments_free",
            "Segments ready for use.",
            engine.segments_free,
        ),
        (
            "strata_segments_untouched",
            "Free segments never written since start (DRAM): memory not yet touched.",
            engine.segments_untouched,
        ),
    ];
    for (name, help, value) in gauges {
        single(out, name, "gauge", help, value);
    }
}

fn render_latency(out: &mut String, metrics: &Metrics) {
    let name = "strata_request_batch_duration_seconds";
    header(
        out,
        name,
        "histogram",
        "Time to process one read batch of (pipelined) requests on a worker.",
    );
    let (cumulative, sum_ns, count) = metrics.latency_totals();
    for (bound_ns, total) in LATENCY_BUCKETS_NS.iter().zip(&cumulative) {
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{}\"}} {total}",
            seconds(*bound_ns)
        );
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum {}", seconds(sum_ns));
    let _ = writeln!(out, "{name}_count {count}");
}

/// Nanoseconds as decimal seconds without float rounding noise (`0.000025`).
fn seconds(ns: u64) -> String {
    let fraction = format!("{:09}", ns % 1_000_000_000);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{}", ns / 1_000_000_000)
    } else {
        format!("{}.{fraction}", ns / 1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_at_or_above_them() {
        let metrics = Metrics::new(2);
        metrics.latency[0].record(Duration::from_nanos(1_000));
        metrics.latency[1].record(Duration::from_nanos(1_001));
        metrics.latency[1].record(Duration::from_secs(5));
        let (cumulative, sum_ns, count) = metrics.latency_totals();
        assert_eq!(count, 3);
        assert_eq!(cumulative[2], 1, "1 µs is <= the 1 µs bound");
        assert_eq!(cumulative[3], 2);
        assert_eq!(
            cumulative[LATENCY_BUCKETS_NS.len() - 1],
            2,
            "5 s is above every bound"
        );
        assert_eq!(sum_ns, 2_001 + 5_000_000_000);
    }

    #[test]
    fn the_exposition_is_well_formed_prometheus_text() {
        let config = strata_engine::EngineConfig {
            memory_bytes: 4 << 20,
            ..strata_engine::EngineConfig::default()
        };
        let engine = std::sync::Arc::new(strata_engine::Engine::open(config).expect("engine"));
        let ctx = ServerContext::new(engine, crate::context::Settings::default());
        let metrics = Metrics::new(1);
        metrics.latency[0].record(Duration::from_micros(3));
        let text = render(&ctx, &metrics);
        let mut typed = std::collections::HashSet::new();
        let mut previous_bucket = 0;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                assert!(
                    typed.insert(parts.next().expect("name").to_string()),
                    "{line}"
                );
                let kind = parts.next().expect("kind");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("series and value");
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("value in {line}"));
            let name = series.split('{').next().expect("name");
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "sample before its TYPE: {line}");
            assert!(
                name.starts_with("strata_")
                    && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            );
            if name.ends_with("_bucket") {
                let count: u64 = value.parse().expect("integer bucket");
                assert!(count >= previous_bucket, "buckets are cumulative: {line}");
                previous_bucket = count;
            }
        }
        assert!(text.contains("strata_request_batch_duration_seconds_count 1\n"));
    }

    #[test]
    fn seconds_are_exact_decimals() {
        assert_eq!(seconds(1_000), "0.000001");
        assert_eq!(seconds(250), "0.00000025");
        assert_eq!(seconds(2_500_000), "0.0025");
        assert_eq!(seconds(1_000_000_000), "1");
        assert_eq!(seconds(1_500_000_000), "1.5");
    }
}
