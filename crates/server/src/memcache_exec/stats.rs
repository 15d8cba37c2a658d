//! `stats` and its sub-commands.
//!
//! - `stats`: memcached's general statistics that strata has figures for, under memcached's
//!   names, plus `strata_*` lines (pool backend, persistence domain, segments). Counters come
//!   from the shared [`crate::stats::ServerStats`] and [`strata_engine::EngineStats`], the same
//!   sources Redis INFO and `/metrics` read, so all three agree.
//! - `stats settings`: the memcached settings that have a strata equivalent.
//! - `stats items` / `stats slabs`: strata has segments, not slab classes; both report one
//!   class (1) standing for the whole pool, in memcached's format, so `memcached-tool` and
//!   monitoring scripts parse them. With no items, `stats items` is just `END`, as memcached's.
//! - `stats sizes`: `sizes_status disabled`, as memcached answers by default.
//! - `stats conns`: every client connection, both protocols (`crate::clients`); `stats
//!   extstore`: `END` (no extstore).
//! - `stats reset`: `RESET`, clearing the resettable counters.
//! - `stats cachedump <class> <limit>`: the items of class 1 (`dump.rs`).
//! - `stats detail on|off|dump`: `OK` / `OK` / `END`; anything else after `detail` is memcached's
//!   usage error. Any other argument is `ERROR`.
//!
//! Formatting allocates; `stats` is not on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};

use strata_engine::EngineStats;
use strata_protocol::memcache::{encode, Stats};

use super::VERSION;
use crate::context::ServerContext;
use crate::stats::{command_index, ServerStats};

/// memcached's reply to `stats detail` without a valid sub-command.
const CLIENT_ERROR_DETAIL_USAGE: &[u8] = b"CLIENT_ERROR usage: stats detail on|off|dump\r\n";

/// Runs `stats [args]`.
pub(super) fn execute(request: Stats<'_>, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("stats"));
    let mut args = request.args;
    match (args.next(), args.next()) {
        (None, _) => general(ctx, out),
        (Some(b"settings"), _) => settings(ctx, out),
        (Some(b"items"), _) => items(&ctx.engine.stats(), out),
        (Some(b"slabs"), _) => slabs(ctx, &ctx.engine.stats(), out),
        (Some(b"sizes"), _) => {
            encode::write_stat(out, b"sizes_status", b"disabled");
            encode::write_end(out);
        }
        (Some(b"conns"), _) => conns(ctx, out),
        (Some(b"extstore"), _) => {
            encode::write_end(out);
        }
        (Some(b"reset"), _) => {
            ctx.stats.reset();
            out.extend_from_slice(encode::RESET);
        }
        (Some(b"detail"), Some(b"on" | b"off")) => out.extend_from_slice(encode::OK),
        (Some(b"detail"), Some(b"dump")) => {
            encode::write_end(out);
        }
        (Some(b"detail"), _) => out.extend_from_slice(CLIENT_ERROR_DETAIL_USAGE),
        (Some(b"cachedump"), _) => {
            let mut args = request.args;
            args.next();
            super::dump::cachedump(&mut args, ctx, out);
        }
        (Some(_), _) => out.extend_from_slice(encode::ERROR),
    }
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

fn command(stats: &ServerStats, name: &str) -> u64 {
    load(&stats.commands[command_index(name)])
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// CPU seconds this process used in user and system mode, from `/proc/self/stat`, assuming
/// the kernel's usual 100 clock ticks per second (reading `CLK_TCK` needs `sysconf`, which this
/// crate cannot call without `unsafe`). `None` where `/proc` is not available.
fn rusage_secs() -> Option<(f64, f64)> {
    const CLOCK_TICKS_PER_SEC: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some((user / CLOCK_TICKS_PER_SEC, system / CLOCK_TICKS_PER_SEC))
}

/// Plain `stats`.
fn general(ctx: &ServerContext, out: &mut Vec<u8>) {
    let stats = &ctx.stats;
    let engine = ctx.engine.stats();
    let (user, system) = rusage_secs().unwrap_or_default();
    let stat = |out: &mut Vec<u8>, name: &str, value: u64| {
        encode::write_stat_u64(out, name.as_bytes(), value);
    };
    stat(out, "pid", u64::from(std::process::id()));
    stat(out, "uptime", ctx.uptime_secs());
    stat(out, "time", unix_secs());
    encode::write_stat(out, b"version", VERSION.as_bytes());
    stat(out, "pointer_size", usize::BITS.into());
    encode::write_stat(out, b"rusage_user", format!("{user:.6}").as_bytes());
    encode::write_stat(out, b"rusage_system", format!("{system:.6}").as_bytes());
    stat(out, "max_connections", ctx.settings.connections_max as u64);
    stat(out, "curr_connections", load(&stats.connections_current));
    stat(out, "total_connections", load(&stats.connections_total));
    stat(
        out,
        "rejected_connections",
        load(&stats.connections_rejected),
    );
    let get_keys = load(&stats.get_keys);
    let get_hits = load(&stats.get_hits);
    let sets = ["set", "add", "replace", "append", "prepend", "cas"]
        .iter()
        .map(|name| command(stats, name))
        .sum();
    stat(out, "cmd_get", get_keys);
    stat(out, "cmd_set", sets);
    stat(out, "cmd_flush", command(stats, "flush"));
    stat(out, "cmd_touch", command(stats, "touch"));
    stat(out, "cmd_meta", command(stats, "meta"));
    stat(out, "get_hits", get_hits);
    stat(out, "get_misses", get_keys.saturating_sub(get_hits));
    stat(out, "get_expired", 0);
    for (name, counter) in crate::stats::OUTCOME_NAMES.iter().zip(&stats.outcomes) {
        stat(out, name, load(counter));
    }
    stat(out, "auth_cmds", load(&stats.auth_commands));
    stat(out, "auth_errors", load(&stats.auth_errors));
    stat(out, "bytes_read", load(&stats.bytes_read));
    stat(out, "bytes_written", load(&stats.bytes_written));
    stat(out, "limit_maxbytes", engine.memory_limit_bytes);
    let accepting = !ctx.shutdown.load(Ordering::Relaxed);
    stat(out, "accepting_conns", u64::from(accepting));
    stat(out, "threads", ctx.settings.threads as u64);
    general_items(ctx, &engine, out);
    encode::write_end(out);
}

/// The item and strata lines of plain `stats`.
fn general_items(ctx: &ServerContext, engine: &EngineStats, out: &mut Vec<u8>) {
    let stat = |out: &mut Vec<u8>, name: &str, value: u64| {
        encode::write_stat_u64(out, name.as_bytes(), value);
    };
    stat(out, "bytes", engine.live_bytes);
    stat(out, "curr_items", engine.items);
    stat(out, "total_items", engine.writes);
    stat(out, "expired_unfetched", 0);
    stat(out, "evicted_unfetched", 0);
    stat(out, "evictions", engine.evicted_items);
    stat(out, "reclaimed", engine.expired_items);
    stat(out, "protocol_errors", load(&ctx.stats.errors));
    server_lines(ctx, out);
    engine_lines(ctx, engine, out);
}

/// The server's own `strata_*` lines: panics, closes, flash waits.
fn server_lines(ctx: &ServerContext, out: &mut Vec<u8>) {
    let stat = |out: &mut Vec<u8>, name: &str, value: u64| {
        encode::write_stat_u64(out, name.as_bytes(), value);
    };
    stat(out, "strata_worker_panics", load(&ctx.stats.worker_panics));
    let closed = load(&ctx.stats.panic_closed_connections);
    stat(out, "strata_panic_closed_connections", closed);
    let cross = load(&ctx.stats.cross_protocol_closes);
    stat(out, "strata_cross_protocol_closes", cross);
    stat(out, "strata_flash_waits", load(&ctx.stats.flash_waits));
    stat(
        out,
        "strata_flash_waits_done",
        load(&ctx.stats.flash_waits_done),
    );
    stat(
        out,
        "strata_flash_waits_abandoned",
        load(&ctx.stats.flash_waits_abandoned),
    );
    stat(
        out,
        "strata_flash_read_rings_kernel_polled",
        load(&ctx.stats.flash_read_rings_kernel_polled),
    );
}

/// The engine's `strata_*` lines: settings, segments, damage, tiers.
fn engine_lines(ctx: &ServerContext, engine: &EngineStats, out: &mut Vec<u8>) {
    let stat = |out: &mut Vec<u8>, name: &str, value: u64| {
        encode::write_stat_u64(out, name.as_bytes(), value);
    };
    let backend = ctx.engine.backend().name();
    let domain = ctx.engine.persistence_domain().summary();
    encode::write_stat(out, b"strata_pool_backend", backend.as_bytes());
    encode::write_stat(out, b"strata_persistence_domain", domain.as_bytes());
    let eviction = ctx.engine.eviction_policy().name();
    encode::write_stat(out, b"strata_eviction", eviction.as_bytes());
    encode::write_stat(
        out,
        b"strata_durability",
        ctx.settings.durability.as_bytes(),
    );
    let placement = ctx.engine.index_placement().name();
    encode::write_stat(out, b"strata_index_placement", placement.as_bytes());
    stat(out, "strata_segment_size_bytes", engine.segment_size_bytes);
    stat(out, "strata_segments_total", engine.segments_total);
    stat(out, "strata_segments_used", engine.segments_used);
    stat(out, "strata_segments_free", engine.segments_free);
    stat(out, "strata_segments_untouched", engine.segments_untouched);
    stat(out, "strata_segments_released", engine.segments_released);
    stat(out, "strata_evicted_segments", engine.evicted_segments);
    stat(out, "strata_expired_segments", engine.expired_segments);
    stat(out, "strata_merged_items", engine.merged_items);
    stat(out, "strata_index_bytes", engine.index_bytes);
    for (cause, count) in strata_engine::DAMAGE_CAUSES
        .iter()
        .zip(engine.records_damaged)
    {
        stat(out, &format!("strata_records_damaged_{cause}"), count);
    }
    stat(
        out,
        "strata_damaged_items_dropped",
        engine.damaged_items_dropped,
    );
    stat(
        out,
        "strata_segments_unverified",
        engine.segments_unverified,
    );
    for field in crate::tiers::memory_fields(engine) {
        let name = format!("strata_memory_{}", field.name);
        encode::write_stat_u64(out, name.as_bytes(), field.value);
    }
    encode::write_stat_u64(
        out,
        b"strata_memory_write_amplification_milli",
        crate::tiers::write_amplification_milli(engine),
    );
    if let Some(flash) = &engine.flash {
        flash_items(flash, out);
    }
}

/// The flash tier's lines: every field as `strata_flash_<name>`, and memcached extstore's
/// names for the ones its users' dashboards read.
fn flash_items(flash: &strata_engine::FlashStats, out: &mut Vec<u8>) {
    encode::write_stat(out, b"strata_flash_io_engine", flash.io_engine.as_bytes());
    for field in crate::tiers::flash_fields(flash) {
        encode::write_stat_u64(
            out,
            format!("strata_flash_{}", field.name).as_bytes(),
            field.value,
        );
    }
    let extstore = [
        ("get_extstore", flash.hits),
        ("recache_from_extstore", flash.promoted_items),
        ("extstore_objects_used", flash.items),
        ("extstore_objects_written", flash.appended_items),
        ("extstore_objects_evicted", flash.evicted_items),
        ("extstore_bytes_written", flash.written_bytes),
        ("extstore_bytes_read", flash.read_bytes),
        ("extstore_page_reclaims", flash.reclaimed_regions),
        ("extstore_limit_maxbytes", flash.medium_bytes),
    ];
    for (name, value) in extstore {
        encode::write_stat_u64(out, name.as_bytes(), value);
    }
}

/// `stats settings`.
fn settings(ctx: &ServerContext, out: &mut Vec<u8>) {
    let settings = &ctx.settings;
    let engine = ctx.engine.stats();
    let text = |out: &mut Vec<u8>, name: &str, value: &str| {
        encode::write_stat(out, name.as_bytes(), value.as_bytes());
    };
    let yes_no = |on: bool| if on { "yes" } else { "no" };
    encode::write_stat_u64(out, b"maxbytes", engine.memory_limit_bytes);
    encode::write_stat_u64(out, b"maxconns", settings.connections_max as u64);
    encode::write_stat_u64(out, b"tcpport", settings.memcache_port.map_or(0, u64::from));
    encode::write_stat_u64(out, b"udpport", 0);
    encode::write_stat_u64(out, b"verbosity", 0);
    encode::write_stat_u64(out, b"oldest", 0);
    let eviction = ctx.engine.eviction_policy().name();
    let evictions = if eviction == "none" { "off" } else { "on" };
    text(out, "evictions", evictions);
    text(out, "shutdown_command", "no");
    encode::write_stat_u64(out, b"num_threads", settings.threads as u64);
    text(out, "cas_enabled", "yes");
    text(out, "binding_protocol", "ascii");
    text(out, "auth_enabled_sasl", "no");
    let auth_file = settings
        .memcache_auth
        .as_ref()
        .map(|c| c.path().display().to_string());
    text(
        out,
        "auth_enabled_ascii",
        auth_file.as_deref().unwrap_or("no"),
    );
    encode::write_stat_u64(out, b"item_size_max", settings.value_len_max as u64);
    encode::write_stat_u64(out, b"idle_timeout", ctx.live.idle_timeout_secs());
    text(out, "flush_enabled", yes_no(settings.flush_enabled));
    let key_len_max = settings.memcache_key_len_max as u64;
    encode::write_stat_u64(out, b"strata_key_len_max", key_len_max);
    text(out, "strata_eviction", eviction);
    text(out, "strata_durability", &settings.durability);
    text(
        out,
        "strata_index_placement",
        ctx.engine.index_placement().name(),
    );
    encode::write_end(out);
}

/// `stats items`: one class for the whole pool, or nothing when it is empty.
fn items(engine: &EngineStats, out: &mut Vec<u8>) {
    if engine.items > 0 {
        let fields: [(&str, u64); 8] = [
            ("number", engine.items),
            ("number_hot", 0),
            ("number_warm", 0),
            ("number_cold", engine.items),
            ("age", 0),
            ("mem_requested", engine.live_bytes),
            ("evicted", engine.evicted_items),
            ("reclaimed", engine.expired_items),
        ];
        for (name, value) in fields {
            encode::write_stat_u64(out, format!("items:1:{name}").as_bytes(), value);
        }
    }
    encode::write_end(out);
}

/// `stats slabs`: segments reported as the chunks of one class.
fn slabs(ctx: &ServerContext, engine: &EngineStats, out: &mut Vec<u8>) {
    let active = u64::from(engine.segments_used > 0);
    if active == 1 {
        let hits = load(&ctx.stats.get_hits);
        let sets = command(&ctx.stats, "set");
        let fields: [(&str, u64); 9] = [
            ("chunk_size", engine.segment_size_bytes),
            ("chunks_per_page", 1),
            ("total_pages", engine.segments_used),
            ("total_chunks", engine.segments_used),
            ("used_chunks", engine.segments_used),
            ("free_chunks", 0),
            ("free_chunks_end", 0),
            ("get_hits", hits),
            ("cmd_set", sets),
        ];
        for (name, value) in fields {
            encode::write_stat_u64(out, format!("1:{name}").as_bytes(), value);
        }
    }
    encode::write_stat_u64(out, b"active_slabs", active);
    let malloced = engine.segments_used * engine.segment_size_bytes;
    encode::write_stat_u64(out, b"total_malloced", malloced);
    encode::write_end(out);
}

/// `stats conns`: every client connection of the server (both protocols, from the registry of
/// `crate::clients`), memcached's lines keyed by the client's id where memcached uses its fd:
/// `addr`, `listen_addr`, `state` (`conn_waiting`: strata does not track a connection's state)
/// and `secs_since_last_cmd`.
fn conns(ctx: &ServerContext, out: &mut Vec<u8>) {
    let now_ms = ctx.clients.coarse_ms();
    let address = |a: Option<std::net::SocketAddr>| {
        a.map_or_else(|| "unknown".to_owned(), |a| format!("tcp:{a}"))
    };
    for client in ctx.clients.all() {
        let id = client.id;
        let lines = [
            ("addr", address(client.peer)),
            ("listen_addr", address(client.local)),
            ("state", "conn_waiting".to_owned()),
            ("secs_since_last_cmd", client.idle_secs(now_ms).to_string()),
        ];
        for (name, value) in lines {
            let name = format!("{id}:{name}");
            encode::write_stat(out, name.as_bytes(), value.as_bytes());
        }
    }
    encode::write_end(out);
}
