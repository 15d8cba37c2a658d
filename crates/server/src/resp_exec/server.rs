//! Server commands: INFO, CONFIG GET/SET/RESETSTAT, COMMAND (COUNT, INFO, DOCS, LIST),
//! LASTSAVE, SAVE, BGSAVE.
//!
//! INFO's figures come from the same counters as memcached `stats` and `/metrics`
//! (`ServerStats`, `Engine::stats`), so the three agree. strata has no RDB or AOF: SAVE and
//! BGSAVE answer an error saying so rather than pretending, and LASTSAVE reports the start time.
//! CONFIG SET accepts the settings strata knows, but only their current values: none of them
//! can change while the server runs (the pool and index are sized at start).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use strata_engine::{Engine, EngineStats, EvictionPolicy};
use strata_protocol::resp::{encode, errors, glob_match, name_eq, Version};

use super::latency_tracking::parse_percentiles;
use super::table::{Command, COMMANDS};
use super::{Call, State, REDIS_VERSION_COMPATIBLE};
use crate::context::ServerContext;

/// INFO sections, in the order Redis prints them, and whether `INFO` alone includes them.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("commandstats", false),
    ("errorstats", true),
    ("latencystats", false),
    ("keyspace", true),
    ("strata", true),
];

/// `INFO [section ...]`.
pub(crate) fn info(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    // No section or `default`: the default sections; `all` or `everything`: every section.
    let all = call
        .args_from(1)
        .any(|arg| name_eq(arg, b"all") || name_eq(arg, b"everything"));
    let defaults = call.len() == 1 || call.args_from(1).any(|arg| name_eq(arg, b"default"));
    let engine = call.engine().stats();
    let mut text = InfoText(String::new());
    for &(section, default) in SECTIONS {
        let wanted = all
            || (defaults && default)
            || call
                .args_from(1)
                .any(|arg| name_eq(arg, section.as_bytes()));
        if !wanted {
            continue;
        }
        if !text.0.is_empty() {
            text.0.push_str("\r\n");
        }
        write_section(&mut text, section, call.ctx, &engine);
    }
    encode::verbatim(out, state.version, b"txt", text.0.as_bytes());
}

/// INFO text being built: `# Section` headers and `field:value` lines, each ending in CRLF.
struct InfoText(String);

impl InfoText {
    fn header(&mut self, name: &str) {
        self.0.push_str("# ");
        self.0.push_str(name);
        self.0.push_str("\r\n");
    }

    fn field(&mut self, name: &str, value: impl std::fmt::Display) {
        // Writing to a String cannot fail.
        let _ = write!(self.0, "{name}:{value}\r\n");
    }
}

/// INFO persistence: Redis's fields (no RDB, no AOF), then strata's pool, durability, and
/// whether writes are refused since a persist failed.
fn write_persistence(text: &mut InfoText, ctx: &ServerContext) {
    text.header("Persistence");
    text.field("loading", 0);
    text.field("rdb_changes_since_last_save", 0);
    text.field("rdb_bgsave_in_progress", 0);
    text.field("rdb_last_save_time", start_unix_secs(ctx));
    text.field("aof_enabled", 0);
    text.field("strata_pool_backend", ctx.engine.backend().name());
    let domain = ctx.engine.persistence_domain();
    text.field("strata_persistence_domain", domain.summary());
    text.field("strata_durability", &ctx.settings.durability);
    text.field(
        "strata_index_placement",
        ctx.engine.index_placement().name(),
    );
    // A persist that failed latches the engine: writes are refused until restart.
    let failure = ctx.engine.write_failure();
    text.field("strata_writes_refused", u8::from(failure.is_some()));
    if let Some(failure) = failure {
        let reason = failure.to_string().replace(['\r', '\n'], " ");
        text.field("strata_write_failure", reason);
    }
}

/// The largest read buffer of the clients connected now (its size, as Redis reports its query
/// buffer's allocation) and the largest output memory (`omem` in CLIENT LIST: what a write
/// buffer holds past its first 16 KiB), as their workers last published them: INFO clients'
/// `client_recent_max_input_buffer` and `client_recent_max_output_buffer`. Redis keeps the
/// peaks of the last few seconds; these are the current ones (a buffer grown for a large
/// request stays about a second after it, `BUFFER_SWEEP_INTERVAL`).
fn largest_buffers(ctx: &ServerContext) -> (u64, u64) {
    ctx.clients
        .all()
        .iter()
        .map(|client| client.buffers.load())
        .fold((0, 0), |(input, output), buffers| {
            (
                input.max(buffers.input_capacity_bytes),
                output.max(buffers.output_memory_bytes()),
            )
        })
}

/// Appends one INFO section.
fn write_section(text: &mut InfoText, section: &str, ctx: &ServerContext, engine: &EngineStats) {
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    match section {
        "server" => {
            text.header("Server");
            text.field("redis_version", REDIS_VERSION_COMPATIBLE);
            text.field("strata_version", env!("CARGO_PKG_VERSION"));
            text.field("redis_mode", "standalone");
            text.field("arch_bits", usize::BITS);
            text.field("multiplexing_api", "epoll");
            text.field("process_id", std::process::id());
            text.field("tcp_port", ctx.settings.resp_port.unwrap_or(0));
            text.field("server_time_usec", ctx.engine.now_ms() * 1000);
            text.field("uptime_in_seconds", ctx.uptime_secs());
            text.field("uptime_in_days", ctx.uptime_secs() / 86_400);
            text.field("strata_threads", ctx.settings.threads);
        }
        "clients" => {
            text.header("Clients");
            text.field("connected_clients", load(&ctx.stats.connections_current));
            text.field("maxclients", ctx.settings.connections_max);
            let (input_max, output_max) = largest_buffers(ctx);
            text.field("client_recent_max_input_buffer", input_max);
            text.field("client_recent_max_output_buffer", output_max);
            text.field("blocked_clients", 0);
        }
        "memory" => write_memory(text, ctx, engine),
        "persistence" => write_persistence(text, ctx),
        "stats" => write_stats(text, ctx, engine),
        "replication" => {
            text.header("Replication");
            text.field("role", "master");
            text.field("connected_slaves", 0);
            text.field("master_repl_offset", 0);
        }
        "commandstats" => {
            text.header("Commandstats");
            ctx.resp_commands.write_commandstats(&mut text.0);
        }
        "errorstats" => {
            text.header("Errorstats");
            ctx.resp_commands.write_errorstats(&mut text.0);
        }
        "latencystats" => {
            text.header("Latencystats");
            ctx.resp_commands.latency.write_latencystats(&mut text.0);
        }
        "keyspace" => {
            text.header("Keyspace");
            if engine.items > 0 {
                let (expires, avg_ttl) = expires_and_avg_ttl(ctx, engine.items);
                let db = format!("keys={},expires={expires},avg_ttl={avg_ttl}", engine.items);
                text.field("db0", db);
            }
        }
        _ => write_strata(text, ctx, engine),
    }
}

/// Items INFO keyspace reads at most to count the keys with an expiry (a few milliseconds):
/// past that, `expires` is estimated from that many, spread over every shard.
const EXPIRES_SAMPLE_ITEMS_MAX: usize = 20_000;

/// How long INFO keeps a sampled (not exact) expiry figure before it samples again.
const EXPIRES_SAMPLE_KEPT_MS: u64 = 1_000;

/// `INFO keyspace`'s `expires` and `avg_ttl` (ms), from the items in memory
/// (`Engine::sample_expiry`): exact up to [`EXPIRES_SAMPLE_ITEMS_MAX`] items in memory, an
/// estimate scaled to `items` past that or when some are on flash (a sample is kept for
/// [`EXPIRES_SAMPLE_KEPT_MS`]: taking one reads 20,000 items, 1–2 ms of a worker); `avg_ttl` is
/// an estimate in Redis too.
fn expires_and_avg_ttl(ctx: &ServerContext, items: u64) -> (u64, u64) {
    let now_ms = ctx.engine.now_ms();
    let kept = *ctx.expiry_sample.lock();
    let sample = match kept {
        Some((at_ms, sample)) if now_ms.saturating_sub(at_ms) < EXPIRES_SAMPLE_KEPT_MS => sample,
        _ => {
            let sample = ctx.engine.sample_expiry(EXPIRES_SAMPLE_ITEMS_MAX, now_ms);
            // An exact count is cheap (few items) and must follow every write: never kept.
            *ctx.expiry_sample.lock() = Some((now_ms, sample)).filter(|_| !sample.exact);
            sample
        }
    };
    if sample.sampled == 0 || sample.with_expiry == 0 {
        return (0, 0);
    }
    let avg_ttl = sample.ttl_ms_sum / sample.with_expiry;
    if sample.exact && sample.memory_items == items {
        return (sample.with_expiry, avg_ttl);
    }
    let share = sample.with_expiry as f64 / sample.sampled as f64;
    let expires = (share * items as f64).round() as u64;
    (expires.min(items), avg_ttl)
}

fn write_memory(text: &mut InfoText, ctx: &ServerContext, engine: &EngineStats) {
    // Live data and the index, as Redis counts what it allocated for the dataset; the
    // segments that hold it (dead records and free room too) are the "resident" figure, and
    // their ratio is what fragmentation means here.
    let used = engine.live_bytes + engine.index_bytes;
    let resident = engine.segments_used * engine.segment_size_bytes + engine.index_bytes;
    text.header("Memory");
    text.field("used_memory", used);
    text.field("used_memory_human", human_bytes(used));
    text.field("used_memory_dataset", engine.live_bytes);
    text.field("used_memory_segments", resident);
    text.field(
        "mem_fragmentation_ratio",
        format!("{:.2}", resident as f64 / used.max(1) as f64),
    );
    text.field("mem_dead_bytes", engine.dead_bytes);
    text.field("maxmemory", engine.memory_limit_bytes);
    text.field("maxmemory_human", human_bytes(engine.memory_limit_bytes));
    text.field("maxmemory_policy", policy_name(ctx));
    // Output buffers only (what `--client-output-memory` bounds), not Redis's whole clients.
    text.field("mem_clients_normal", ctx.output_budget.held_bytes());
    text.field("maxmemory_clients", ctx.output_budget.limit_bytes());
    text.field("mem_allocator", "strata-segments");
}

fn write_stats(text: &mut InfoText, ctx: &ServerContext, engine: &EngineStats) {
    let stats = &ctx.stats;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let commands: u64 = stats.commands.iter().map(load).sum();
    let (keys, hits) = (load(&stats.get_keys), load(&stats.get_hits));
    text.header("Stats");
    text.field("total_connections_received", load(&stats.connections_total));
    text.field("total_commands_processed", commands);
    text.field("total_net_input_bytes", load(&stats.bytes_read));
    text.field("total_net_output_bytes", load(&stats.bytes_written));
    text.field("rejected_connections", load(&stats.connections_rejected));
    // A Redis 7.2 field: strata enforces a hard limit on normal clients (see `OutputLimits`).
    text.field(
        "client_output_buffer_limit_disconnections",
        load(&stats.output_limit_disconnections),
    );
    text.field("expired_keys", engine.expired_items);
    // Every item that left the server for lack of room: dropped from memory (demotions to
    // flash are not: the item stays), and dropped by the flash tier's reclaim; then per tier.
    let flash_evicted = engine.flash.as_ref().map_or(0, |flash| flash.evicted_items);
    text.field("evicted_keys", engine.evicted_items + flash_evicted);
    text.field("evicted_keys_memory", engine.evicted_items);
    text.field("evicted_keys_flash", flash_evicted);
    // Closed over `--client-output-memory`, strata's `maxmemory-clients` for output buffers.
    text.field("evicted_clients", load(&stats.evicted_clients));
    text.field("keyspace_hits", hits);
    text.field("keyspace_misses", keys.saturating_sub(hits));
    text.field("total_error_replies", load(&stats.errors));
}

fn write_strata(text: &mut InfoText, ctx: &ServerContext, engine: &EngineStats) {
    let backend = ctx.engine.backend().name();
    text.header("Strata");
    text.field("pool_backend", backend);
    text.field("pool_path", ctx.engine.pool_path().display());
    text.field(
        "persistence_domain",
        ctx.engine.persistence_domain().summary(),
    );
    text.field("durability", &ctx.settings.durability);
    text.field("index_placement", ctx.engine.index_placement().name());
    let recovery = ctx.engine.recovery_report();
    text.field("recovery_items", recovery.items_recovered);
    text.field("recovery_from_snapshot", u8::from(recovery.from_snapshot));
    text.field(
        "recovery_shards_from_index_files",
        recovery.shards_from_index_files,
    );
    text.field("eviction_policy", ctx.engine.eviction_policy().name());
    write_strata_segments(text, engine, recovery.records_torn);
    write_strata_tiers(text, ctx, engine);
}

/// INFO strata's items, segments, cleaner, damage (with the records recovery found torn) and
/// index lines.
fn write_strata_segments(text: &mut InfoText, engine: &EngineStats, records_torn: u64) {
    let segment_bytes = engine.segment_size_bytes;
    text.field("shards", engine.shards);
    text.field("items", engine.items);
    text.field("live_bytes", engine.live_bytes);
    text.field("writes", engine.writes);
    text.field("segment_size_bytes", segment_bytes);
    text.field("segments_total", engine.segments_total);
    text.field("segments_used", engine.segments_used);
    text.field("segments_free", engine.segments_free);
    text.field("segments_untouched", engine.segments_untouched);
    text.field("segments_released", engine.segments_released);
    text.field("segments_retired", engine.segments_retired);
    text.field("evicted_segments", engine.evicted_segments);
    text.field("expired_segments", engine.expired_segments);
    text.field("merged_items", engine.merged_items);
    for field in crate::tiers::memory_fields(engine) {
        text.field(&format!("memory_{}", field.name), field.value);
    }
    text.field(
        "memory_write_amplification",
        format!(
            "{:.3}",
            crate::tiers::write_amplification_milli(engine) as f64 / 1000.0
        ),
    );
    for (cause, count) in strata_engine::DAMAGE_CAUSES
        .iter()
        .zip(engine.records_damaged)
    {
        text.field(&format!("records_damaged_{cause}"), count);
    }
    text.field("damaged_items_dropped", engine.damaged_items_dropped);
    text.field("segments_unverified", engine.segments_unverified);
    text.field("recovery_records_torn", records_torn);
    text.field("index_bytes", engine.index_bytes);
    text.field("index_buckets", engine.index_buckets);
    text.field("index_overflow_buckets", engine.index_overflow_buckets);
}

/// INFO strata's panic counters and per-tier summaries.
fn write_strata_tiers(text: &mut InfoText, ctx: &ServerContext, engine: &EngineStats) {
    let backend = ctx.engine.backend().name();
    let segment_bytes = engine.segment_size_bytes;
    let stats = &ctx.stats;
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    text.field("worker_panics", load(&stats.worker_panics));
    text.field(
        "panic_closed_connections",
        load(&stats.panic_closed_connections),
    );
    text.field("cross_protocol_closes", load(&stats.cross_protocol_closes));
    let index_tier = format!("medium=dram,bytes={}", engine.index_bytes);
    text.field("tier_index", index_tier);
    let pool_tier = format!(
        "medium={backend},bytes={},used_bytes={},live_bytes={}",
        engine.segments_total * segment_bytes,
        engine.segments_used * segment_bytes,
        engine.live_bytes
    );
    text.field("tier_pool", pool_tier);
    if let Some(flash) = &engine.flash {
        text.field("tier_flash", crate::tiers::flash_summary(flash));
        text.field("flash_io_engine", flash.io_engine);
        text.field(
            "flash_read_rings_kernel_polled",
            load(&stats.flash_read_rings_kernel_polled),
        );
        for field in crate::tiers::flash_fields(flash) {
            text.field(&format!("flash_{}", field.name), field.value);
        }
    }
}

/// Redis's `bytesToHuman`: two decimals and a B/K/M/G/T suffix.
fn human_bytes(bytes: u64) -> String {
    const UNITS: &[(u64, &str)] = &[
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for &(size, suffix) in UNITS {
        if bytes >= size {
            return format!("{:.2}{suffix}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes}B")
}

/// The eviction policy as CONFIG and INFO report it: Redis's `noeviction` when strata evicts
/// nothing, else strata's own policy name (`merge`, `fifo`, `random`).
fn policy_name(ctx: &ServerContext) -> &'static str {
    match ctx.engine.eviction_policy().name() {
        "none" => "noeviction",
        other => other,
    }
}

/// The eviction policy `CONFIG SET maxmemory-policy` names: strata's own (`merge`, `fifo`,
/// `random`, `none`) or Redis's closest (`noeviction`, `allkeys-random`; `allkeys-lru` and
/// `allkeys-lfu` are `merge`, which keeps the items read since they were written). strata
/// evicts whole segments of any key: the `volatile-*` policies are refused.
fn policy_named(name: &str) -> Result<EvictionPolicy, &'static str> {
    match name.to_ascii_lowercase().as_str() {
        "noeviction" => Ok(EvictionPolicy::None),
        "allkeys-random" => Ok(EvictionPolicy::Random),
        "allkeys-lru" | "allkeys-lfu" => Ok(EvictionPolicy::Merge),
        "volatile-lru" | "volatile-lfu" | "volatile-random" | "volatile-ttl" => {
            Err("strata evicts any key (allkeys-lru, allkeys-lfu, allkeys-random, or its own merge, fifo, random), never only keys with a TTL")
        }
        other => EvictionPolicy::parse(other).ok_or(
            "argument(s) must be one of the following: volatile-lru, volatile-lfu, \
             volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction",
        ),
    }
}

fn start_unix_secs(ctx: &ServerContext) -> u64 {
    (ctx.engine.now_ms() / 1000).saturating_sub(ctx.uptime_secs())
}

/// `LASTSAVE`: strata never snapshots; the pool has held the data since the server started.
pub(crate) fn lastsave(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    encode::integer(out, i64::try_from(start_unix_secs(call.ctx)).unwrap_or(0));
}

/// `SAVE`, `BGSAVE`: strata has no RDB file to write.
pub(crate) fn save(_: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    encode::error(
        out,
        b"ERR strata writes no RDB snapshot: items live in its pool; see INFO persistence for \
what survives a restart",
    );
}

/// A limit as CONFIG GET shows it: 0 for none, as Redis writes it.
fn unlimited_as_zero(bytes: usize) -> usize {
    if bytes == usize::MAX {
        0
    } else {
        bytes
    }
}

/// A boolean setting's value, as Redis writes it.
fn yes_no(on: bool) -> &'static str {
    if on {
        "yes"
    } else {
        "no"
    }
}

/// The settings CONFIG GET reports, with their current values.
fn config_values(ctx: &ServerContext) -> Vec<(&'static str, String)> {
    let settings = &ctx.settings;
    vec![
        (
            "maxmemory",
            ctx.engine.stats().memory_limit_bytes.to_string(),
        ),
        ("maxmemory-policy", policy_name(ctx).to_string()),
        (
            "requirepass",
            settings.requirepass.clone().unwrap_or_default(),
        ),
        ("save", String::new()),
        ("appendonly", "no".to_string()),
        ("databases", "1".to_string()),
        ("port", settings.resp_port.unwrap_or(0).to_string()),
        ("proto-max-bulk-len", settings.value_len_max.to_string()),
        ("maxclients", settings.connections_max.to_string()),
        (
            "maxmemory-clients",
            unlimited_as_zero(ctx.output_budget.limit_bytes()).to_string(),
        ),
        ("timeout", ctx.live.idle_timeout_secs().to_string()),
        (
            "slowlog-log-slower-than",
            ctx.slowlog.slower_than_us().to_string(),
        ),
        ("slowlog-max-len", ctx.slowlog.max_len().to_string()),
        (
            "latency-monitor-threshold",
            ctx.latency.threshold_ms().to_string(),
        ),
        (
            "latency-tracking",
            yes_no(ctx.resp_commands.latency.enabled()).to_string(),
        ),
        (
            "latency-tracking-info-percentiles",
            crate::config::rewrite::percentiles_text(ctx.resp_commands.latency.percentiles()),
        ),
        ("io-threads", settings.threads.to_string()),
        (
            "enable-debug-command",
            yes_no(settings.debug_command_enabled).to_string(),
        ),
        // Only the hard limit of normal clients applies: strata has no replicas or pub/sub,
        // and past its soft limit it stops reading from the client instead of timing it out.
        (
            "client-output-buffer-limit",
            format!(
                "normal {} 0 0 slave 0 0 0 pubsub 0 0 0",
                unlimited_as_zero(ctx.live.output().buffered_bytes_hard)
            ),
        ),
    ]
}

/// `CONFIG GET|SET|RESETSTAT|HELP ...`.
pub(crate) fn config(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let sub = call.arg(1);
    if name_eq(sub, b"get") {
        if call.len() < 3 {
            errors::wrong_args(out, b"config|get");
        } else {
            config_get(state, call, out);
        }
    } else if name_eq(sub, b"set") {
        if call.len() < 4 {
            errors::wrong_args(out, b"config|set");
        } else if !call.len().is_multiple_of(2) {
            out.extend_from_slice(errors::ERR_SYNTAX);
        } else {
            config_set(call, out);
        }
    } else if name_eq(sub, b"rewrite") {
        if call.len() == 2 {
            config_rewrite(call.ctx, out);
        } else {
            errors::wrong_args(out, b"config|rewrite");
        }
    } else if name_eq(sub, b"resetstat") {
        if call.len() == 2 {
            call.ctx.stats.reset();
            call.ctx.resp_commands.reset();
            encode::ok(out);
        } else {
            errors::wrong_args(out, b"config|resetstat");
        }
    } else {
        errors::unknown_subcommand(out, b"config", sub);
    }
}

fn config_get(state: &State, call: &Call<'_>, out: &mut Vec<u8>) {
    let values = config_values(call.ctx);
    let matched: Vec<&(&str, String)> = values
        .iter()
        .filter(|(name, _)| {
            call.args_from(2)
                .any(|pattern| glob_match(pattern, name.as_bytes(), true))
        })
        .collect();
    encode::map_len(out, state.version, matched.len());
    for (name, value) in matched {
        encode::bulk(out, name.as_bytes());
        encode::bulk(out, value.as_bytes());
    }
}

/// `CONFIG REWRITE`: the settings CONFIG SET changes, written to the `--config` file.
fn config_rewrite(ctx: &ServerContext, out: &mut Vec<u8>) {
    let Some(path) = ctx.settings.config_file.as_deref() else {
        encode::error(out, b"ERR The server is running without a config file");
        return;
    };
    let memory_limit_bytes = ctx.engine.stats().memory_limit_bytes;
    let live = crate::config::rewrite::LiveSettings {
        slowlog_slower_than_us: ctx.slowlog.slower_than_us(),
        slowlog_max_len: ctx.slowlog.max_len(),
        latency_monitor_threshold_ms: ctx.latency.threshold_ms(),
        latency_tracking: ctx.resp_commands.latency.enabled(),
        latency_percentiles: crate::config::rewrite::percentiles_text(
            ctx.resp_commands.latency.percentiles(),
        ),
        memory_limit_bytes: ctx.engine.memory_cap_for(memory_limit_bytes).ok().flatten(),
        eviction: ctx.engine.eviction_policy().name(),
        idle_timeout_secs: ctx.live.idle_timeout_secs(),
        output_bytes_hard: ctx.live.output().buffered_bytes_hard,
        client_output_bytes: ctx.output_budget.limit_bytes(),
    };
    // A file's maxmemory is compared with the cap it would set (rounded to whole segments).
    let cap_for = |bytes| ctx.engine.memory_cap_for(bytes).ok().flatten();
    match crate::config::rewrite::rewrite(path, &live, cap_for) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "CONFIG REWRITE wrote the config file");
            encode::ok(out);
        }
        Err(why) => {
            tracing::warn!(path = %path.display(), %why, "CONFIG REWRITE failed");
            encode::error(out, format!("ERR Rewriting config file: {why}").as_bytes());
        }
    }
}

/// A setting `CONFIG SET` changes at run time, with its new value.
enum LiveSetting {
    SlowerThanUs(i64),
    MaxLen(usize),
    LatencyThresholdMs(u64),
    /// `maxmemory`: the memory tier's cap in bytes (`None`: the whole pool).
    MaxMemory(Option<u64>),
    /// `maxmemory-policy`.
    Policy(EvictionPolicy),
    /// `latency-tracking`.
    LatencyTracking(bool),
    /// `latency-tracking-info-percentiles`.
    LatencyPercentiles(Vec<f64>),
    /// `timeout`, seconds (0: never).
    IdleTimeoutSecs(u64),
    /// `client-output-buffer-limit`'s normal hard limit, bytes.
    OutputBytesHard(usize),
    /// `maxmemory-clients`, bytes.
    ClientOutputBytes(usize),
}

/// The live setting `name` set to `value`, `None` for a setting fixed at start, or the error
/// for a value it cannot take.
fn live_setting(
    name: &str,
    value: &[u8],
    engine: &Engine,
    value_len_max: usize,
) -> Option<Result<LiveSetting, String>> {
    let parsed = strata_protocol::resp::parse_i64(value);
    let bad = |why: &str| {
        Err(format!(
            "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
        ))
    };
    Some(match name {
        "slowlog-log-slower-than" => match parsed {
            Some(us) => Ok(LiveSetting::SlowerThanUs(us)),
            None => bad("argument couldn't be parsed into an integer"),
        },
        "latency-monitor-threshold" => match parsed.map(u64::try_from) {
            Some(Ok(ms)) => Ok(LiveSetting::LatencyThresholdMs(ms)),
            Some(Err(_)) => bad("argument must be between 0 and 9223372036854775807 inclusive"),
            None => bad("argument couldn't be parsed into an integer"),
        },
        "slowlog-max-len" => match parsed.map(usize::try_from) {
            Some(Ok(len)) => Ok(LiveSetting::MaxLen(len)),
            Some(Err(_)) => bad("argument must be between 0 and 9223372036854775807 inclusive"),
            None => bad("argument couldn't be parsed into an integer"),
        },
        "maxmemory" => {
            let bytes = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse::<strata_pool::ByteSize>().ok());
            match bytes.map(|bytes| engine.memory_cap_for(bytes.0)) {
                None => bad("argument must be a memory value"),
                Some(Ok(cap)) => Ok(LiveSetting::MaxMemory(cap)),
                Some(Err(min)) => bad(&format!(
                    "strata needs at least {min} bytes (two segments per shard and the \
                     cleaner's two)"
                )),
            }
        }
        "maxmemory-policy" => match std::str::from_utf8(value).map(policy_named) {
            Ok(Ok(policy)) => Ok(LiveSetting::Policy(policy)),
            Ok(Err(why)) => bad(why),
            Err(_) => bad("argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction"),
        },
        "timeout" => match parsed.map(u64::try_from) {
            Some(Ok(secs)) if secs <= i32::MAX as u64 => Ok(LiveSetting::IdleTimeoutSecs(secs)),
            Some(_) => bad("argument must be between 0 and 2147483647 inclusive"),
            None => bad("argument couldn't be parsed into an integer"),
        },
        "client-output-buffer-limit" => output_buffer_limit(value, value_len_max).map_or_else(
            |why| bad(&why),
            |bytes| Ok(LiveSetting::OutputBytesHard(bytes)),
        ),
        "maxmemory-clients" => match output_bytes(value, value_len_max) {
            Ok(bytes) => Ok(LiveSetting::ClientOutputBytes(bytes)),
            Err(why) => bad(&why),
        },
        "latency-tracking" => match value.to_ascii_lowercase().as_slice() {
            b"yes" => Ok(LiveSetting::LatencyTracking(true)),
            b"no" => Ok(LiveSetting::LatencyTracking(false)),
            _ => bad("argument must be 'yes' or 'no'"),
        },
        "latency-tracking-info-percentiles" => match parse_percentiles(value) {
            Ok(percentiles) => Ok(LiveSetting::LatencyPercentiles(percentiles)),
            Err(why) => bad(why),
        },
        _ => return None,
    })
}

/// An output limit in bytes as CONFIG SET takes it: a memory value, 0 for none (as in Redis;
/// the other limit still bounds), else at least four of the largest values (what
/// `--output-buffer-limit` and `--client-output-memory` accept at start).
fn output_bytes(value: &[u8], value_len_max: usize) -> Result<usize, String> {
    let bytes = std::str::from_utf8(value)
        .ok()
        .and_then(|text| text.parse::<strata_pool::ByteSize>().ok())
        .ok_or_else(|| "argument must be a memory value".to_owned())?;
    let bytes = usize::try_from(bytes.0).unwrap_or(usize::MAX);
    let min = value_len_max * crate::config::OUTPUT_BUFFER_LIMIT_VALUES_MIN;
    match bytes {
        0 => Ok(usize::MAX),
        bytes if bytes < min => Err(format!(
            "strata needs at least {min} bytes ({} times --max-value-size): a smaller limit \
             would close clients for one large reply",
            crate::config::OUTPUT_BUFFER_LIMIT_VALUES_MIN
        )),
        bytes => Ok(bytes),
    }
}

/// `client-output-buffer-limit <class> <hard> <soft> <seconds> ...`: the `normal` class's hard
/// limit (strata's soft limit is a quarter of it, and has no time: `soft` and `seconds` must
/// be 0); `replica`/`slave` and `pubsub`, classes strata has no clients of, must say 0 0 0.
fn output_buffer_limit(value: &[u8], value_len_max: usize) -> Result<usize, String> {
    let text = std::str::from_utf8(value).map_err(|_| "Wrong number of arguments".to_owned())?;
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".to_owned());
    }
    let mut hard = None;
    for class in words.chunks_exact(4) {
        let zero = |word: &str| {
            word.parse::<strata_pool::ByteSize>()
                .is_ok_and(|b| b.0 == 0)
        };
        match class[0].to_ascii_lowercase().as_str() {
            "normal" if zero(class[2]) && zero(class[3]) => {
                hard = Some(output_bytes(class[1].as_bytes(), value_len_max)?);
            }
            "normal" => {
                return Err(
                    "strata's soft limit is a quarter of the hard one, with no time: give \
                            normal <hard> 0 0"
                        .to_owned(),
                )
            }
            "replica" | "slave" | "pubsub" if class[1..].iter().all(|w| zero(w)) => {}
            "replica" | "slave" | "pubsub" => {
                return Err(format!(
                    "strata has no {} clients: their limits stay 0 0 0",
                    class[0]
                ))
            }
            _ => {
                return Err("Invalid client class specified in buffer limit configuration.".into())
            }
        }
    }
    hard.ok_or_else(|| "strata limits the normal class only: give normal <hard> 0 0".to_owned())
}

fn config_set(call: &Call<'_>, out: &mut Vec<u8>) {
    let values = config_values(call.ctx);
    let mut live = Vec::new();
    for pair in 0..(call.len() - 2) / 2 {
        let (name, value) = (call.arg(2 + 2 * pair), call.arg(3 + 2 * pair));
        let Some((known, current)) = values
            .iter()
            .find(|(known, _)| name_eq(name, known.as_bytes()))
        else {
            let mut message =
                b"ERR Unknown option or number of arguments for CONFIG SET - '".to_vec();
            message.extend_from_slice(name);
            message.push(b'\'');
            encode::error(out, &message);
            return;
        };
        match live_setting(
            known,
            value,
            &call.ctx.engine,
            call.ctx.settings.value_len_max,
        ) {
            Some(Ok(setting)) => {
                live.push(setting);
                continue;
            }
            Some(Err(message)) => {
                encode::error(out, message.as_bytes());
                return;
            }
            None => {}
        }
        if current.as_bytes() != value {
            let message = format!(
                "ERR CONFIG SET failed (possibly related to argument '{known}') - strata cannot \
                 change this setting while running; restart it with the new value"
            );
            encode::error(out, message.as_bytes());
            return;
        }
    }
    // All or nothing, as Redis: applied once every pair is valid.
    for setting in live {
        if let Err(message) = apply(call.ctx, setting) {
            // Checked above against the same bounds: only a bug gets here.
            encode::error(out, format!("ERR {message}").as_bytes());
            return;
        }
    }
    encode::ok(out);
}

/// Puts a checked live setting in force.
fn apply(ctx: &ServerContext, setting: LiveSetting) -> Result<(), String> {
    match setting {
        LiveSetting::SlowerThanUs(us) => ctx.slowlog.set_slower_than_us(us),
        LiveSetting::MaxLen(len) => ctx.slowlog.set_max_len(len),
        LiveSetting::LatencyThresholdMs(ms) => ctx.latency.set_threshold_ms(ms),
        LiveSetting::MaxMemory(bytes) => {
            ctx.engine.set_memory_limit(bytes)?;
            tracing::info!(bytes = ?bytes, "maxmemory changed by CONFIG SET");
        }
        LiveSetting::LatencyTracking(on) => ctx.resp_commands.latency.set_enabled(on),
        LiveSetting::IdleTimeoutSecs(secs) => {
            ctx.live.set_idle_timeout_secs(secs);
            // A worker asleep with no timeout learns of it now, not at its next event.
            ctx.clients.wake_all();
        }
        LiveSetting::OutputBytesHard(bytes) => ctx.live.set_output_bytes_hard(bytes),
        LiveSetting::ClientOutputBytes(bytes) => ctx.output_budget.set_limit_bytes(bytes),
        LiveSetting::LatencyPercentiles(percentiles) => {
            ctx.resp_commands.latency.set_percentiles(percentiles);
        }
        LiveSetting::Policy(policy) => {
            ctx.engine.set_eviction_policy(policy);
            tracing::info!(
                policy = policy.name(),
                "eviction policy changed by CONFIG SET"
            );
        }
    }
    Ok(())
}

/// `COMMAND [COUNT | INFO name ... | DOCS [name ...] | LIST]`.
pub(crate) fn command(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.len() == 1 {
        encode::array_len(out, COMMANDS.len());
        for command in COMMANDS {
            command_info(state.version, command, out);
        }
        return;
    }
    let sub = call.arg(1);
    if name_eq(sub, b"count") && call.len() == 2 {
        encode::integer(out, i64::try_from(COMMANDS.len()).unwrap_or(0));
    } else if name_eq(sub, b"info") {
        command_info_reply(state.version, call, out);
    } else if name_eq(sub, b"docs") {
        // Redis allows an empty reply; clients then fall back to COMMAND INFO.
        encode::map_len(out, state.version, 0);
    } else if name_eq(sub, b"list") && call.len() == 2 {
        encode::array_len(out, COMMANDS.len());
        for command in COMMANDS {
            encode::bulk(out, command.name.as_bytes());
        }
    } else if name_eq(sub, b"count") {
        errors::wrong_args(out, b"command|count");
    } else if name_eq(sub, b"list") {
        // FILTERBY needs module and ACL data strata does not have.
        out.extend_from_slice(errors::ERR_SYNTAX);
    } else {
        errors::unknown_subcommand(out, b"command", sub);
    }
}

fn command_info_reply(version: Version, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.len() == 2 {
        encode::array_len(out, COMMANDS.len());
        for command in COMMANDS {
            command_info(version, command, out);
        }
        return;
    }
    encode::array_len(out, call.len() - 2);
    for name in call.args_from(2) {
        match super::table::lookup(name) {
            Some(command) => command_info(version, command, out),
            None => {
                encode::null(out, version);
            }
        }
    }
}

/// One `COMMAND INFO` entry in Redis 7.0's ten-field shape (no tips, key specs or
/// subcommands).
fn command_info(version: Version, command: &Command, out: &mut Vec<u8>) {
    encode::array_len(out, 10);
    encode::bulk(out, command.name.as_bytes());
    encode::integer(out, i64::from(command.arity));
    encode::set_len(out, version, command.flags.len());
    for flag in command.flags {
        encode::simple(out, flag.as_bytes());
    }
    let (first, last, step) = command.keys;
    encode::integer(out, i64::from(first));
    encode::integer(out, i64::from(last));
    encode::integer(out, i64::from(step));
    let access = if command.writes {
        "@write"
    } else if command.readonly {
        "@read"
    } else {
        "@slow"
    };
    let group = format!("@{}", command.group);
    encode::set_len(out, version, 2);
    encode::simple(out, access.as_bytes());
    encode::simple(out, group.as_bytes());
    encode::array_len(out, 0);
    encode::array_len(out, 0);
    encode::array_len(out, 0);
}
