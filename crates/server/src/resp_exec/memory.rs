//! `MEMORY USAGE|STATS|DOCTOR|HELP`, with strata's figures in Redis 7.0's shapes.
//!
//! USAGE is what a key costs strata's memory (`Engine::memory_usage`: its record and index
//! slot; for an item on flash, the slot alone). STATS answers every field Redis 7.0 answers, in
//! its order and types, from what strata has: the dataset is the live records, the overhead the
//! index and the clients' output buffers, "allocated" their sum and "resident" the segments in
//! use plus the index (dead records and free room in segments are the fragmentation). Fields
//! strata has no such thing for (replication backlog, AOF buffer, Lua and function caches,
//! cluster links, the expires table) are 0; strata keeps no peak, so the peak is the current
//! figure. DOCTOR reports on those same figures.

use strata_engine::Door;
use strata_engine::EngineStats;
use strata_protocol::resp::{encode, errors, name_eq, Version};

use super::{Call, State};
use crate::context::ServerContext;

/// `MEMORY <subcommand> ...`.
pub(crate) fn memory(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let sub = call.arg(1);
    let len = call.len();
    if name_eq(sub, b"help") && len == 2 {
        help(out);
    } else if name_eq(sub, b"usage") {
        usage(state, call, out);
    } else if name_eq(sub, b"stats") && len == 2 {
        stats(state.version, call.ctx, out);
    } else if name_eq(sub, b"doctor") && len == 2 {
        let report = doctor(call.ctx, &call.engine().stats());
        encode::verbatim(out, state.version, b"txt", report.as_bytes());
    } else if name_eq(sub, b"stats") || name_eq(sub, b"doctor") {
        let name = String::from_utf8_lossy(sub).to_ascii_lowercase();
        errors::wrong_args(out, format!("memory|{name}").as_bytes());
    } else {
        errors::unknown_subcommand(out, b"memory", sub);
    }
}

fn help(out: &mut Vec<u8>) {
    let lines: [&[u8]; 8] = [
        b"MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"DOCTOR",
        b"    Return memory problems reports.",
        b"STATS",
        b"    Return information about the memory usage of the server.",
        b"USAGE <key> [SAMPLES <count>]",
        b"    Return memory in bytes used by <key> and its value (strata: its record and",
        b"    index slot; for an item on flash, the slot alone).",
    ];
    super::write_help(out, &lines);
}

/// `MEMORY USAGE key [SAMPLES n]`, or the null reply for a missing key.
fn usage(state: &State, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.len() < 3 {
        errors::wrong_args(out, b"memory|usage");
        return;
    }
    match call.len() {
        3 => {}
        5 if name_eq(call.arg(3), b"samples") => {
            if strata_protocol::resp::parse_i64(call.arg(4)).is_none() {
                out.extend_from_slice(errors::ERR_NOT_INTEGER);
                return;
            }
        }
        _ => {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return;
        }
    }
    match call.keys().memory_usage(call.arg(2)) {
        Some(bytes) => encode::integer(out, i64::try_from(bytes).unwrap_or(i64::MAX)),
        None => encode::null(out, state.version),
    };
}

/// One field of MEMORY STATS.
enum Value {
    Int(u64),
    Ratio(f64),
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// MEMORY STATS's fields before `db.0`, and after it.
type Fields = ([(&'static str, Value); 10], [(&'static str, Value); 17]);

/// The figures of MEMORY STATS (see the module docs).
fn stats_fields(ctx: &ServerContext, engine: &EngineStats) -> Fields {
    let clients = ctx.output_budget.held_bytes() as u64;
    let overhead = engine.index_bytes + clients;
    let allocated = engine.live_bytes + overhead;
    let resident = engine.segments_used * engine.segment_size_bytes + engine.index_bytes + clients;
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let head = [
        ("peak.allocated", Value::Int(allocated)),
        ("total.allocated", Value::Int(allocated)),
        ("startup.allocated", Value::Int(0)),
        ("replication.backlog", Value::Int(0)),
        ("clients.slaves", Value::Int(0)),
        ("clients.normal", Value::Int(clients)),
        ("cluster.links", Value::Int(0)),
        ("aof.buffer", Value::Int(0)),
        ("lua.caches", Value::Int(0)),
        ("functions.caches", Value::Int(0)),
    ];
    let fragmentation = ratio(resident, allocated);
    let spare = resident.saturating_sub(allocated);
    let tail = [
        ("overhead.total", Value::Int(overhead)),
        ("keys.count", Value::Int(engine.items)),
        (
            "keys.bytes-per-key",
            Value::Int(allocated / engine.items.max(1)),
        ),
        ("dataset.bytes", Value::Int(engine.live_bytes)),
        (
            "dataset.percentage",
            Value::Ratio(100.0 * ratio(engine.live_bytes, allocated)),
        ),
        ("peak.percentage", Value::Ratio(100.0)),
        ("allocator.allocated", Value::Int(allocated)),
        ("allocator.active", Value::Int(resident)),
        ("allocator.resident", Value::Int(resident)),
        ("allocator-fragmentation.ratio", Value::Ratio(fragmentation)),
        ("allocator-fragmentation.bytes", Value::Int(spare)),
        ("allocator-rss.ratio", Value::Ratio(1.0)),
        ("allocator-rss.bytes", Value::Int(0)),
        ("rss-overhead.ratio", Value::Ratio(1.0)),
        ("rss-overhead.bytes", Value::Int(0)),
        ("fragmentation", Value::Ratio(fragmentation)),
        ("fragmentation.bytes", Value::Int(spare)),
    ];
    (head, tail)
}

/// `MEMORY STATS`: Redis 7.0's fields, in its order and types (see the module docs).
fn stats(version: Version, ctx: &ServerContext, out: &mut Vec<u8>) {
    let engine = ctx.engine.stats();
    let (head, tail) = stats_fields(ctx, &engine);
    encode::map_len(out, version, head.len() + 1 + tail.len());
    let write = |out: &mut Vec<u8>, (name, value): (&str, Value)| {
        encode::bulk(out, name.as_bytes());
        match value {
            Value::Int(n) => encode::integer(out, int(n)),
            Value::Ratio(r) => encode::double(out, version, r),
        };
    };
    for field in head {
        write(out, field);
    }
    // Redis's hash tables' overhead, per database: strata's index.
    encode::bulk(out, b"db.0");
    encode::map_len(out, version, 2);
    encode::bulk(out, b"overhead.hashtable.main");
    encode::integer(out, int(engine.index_bytes));
    encode::bulk(out, b"overhead.hashtable.expires");
    encode::integer(out, 0);
    for field in tail {
        write(out, field);
    }
}

/// MEMORY DOCTOR's report.
fn doctor(ctx: &ServerContext, engine: &EngineStats) -> String {
    if engine.items == 0 {
        return "The store is empty: there is nothing to report on yet.\n".to_owned();
    }
    let used = engine.live_bytes + engine.index_bytes;
    let resident = engine.segments_used * engine.segment_size_bytes + engine.index_bytes;
    let mut report = format!(
        "{} items: {} bytes of live records and {} of index, in {resident} bytes of segments \
         and index (the budget, --memory: {}).\n",
        engine.items, engine.live_bytes, engine.index_bytes, engine.memory_bytes
    );
    let fragmentation = resident as f64 / used.max(1) as f64;
    if fragmentation > 1.4 && engine.dead_bytes > (engine.live_bytes / 2).max(1 << 20) {
        report.push_str(&format!(
            "* Fragmentation {fragmentation:.2}: {} bytes of dead records wait for the cleaner, \
             which moves live records out of mostly dead segments as room is needed.\n",
            engine.dead_bytes
        ));
    }
    if engine.evicted_items > 0 {
        report.push_str(&format!(
            "* {} items were evicted for lack of room: the working set is larger than \
             --memory (or a flash tier, --flash, would keep them).\n",
            engine.evicted_items
        ));
    }
    let clients = ctx.output_budget.held_bytes() as u64;
    if clients > used / 4 {
        report.push_str(&format!(
            "* Clients' output buffers hold {clients} bytes: slow readers or large replies.\n"
        ));
    }
    if report.lines().count() == 1 {
        report.push_str("Nothing to report: no fragmentation, eviction or client memory issue.\n");
    }
    report
}
