//! `get`, `gets`, `gat`, `gats`.
//!
//! Hits are written into `out` from inside the engine's closure, while the item is borrowed:
//! no copy of the value and no allocation per key. `gat`/`gats` change the expiry under the
//! shard's write lock and keep the CAS, as memcached's touch does. A miss writes nothing; the
//! reply always ends in `END`.
//!
//! A multiget streams, as memcached's does: before each key it checks the connection's output
//! buffer (`out`) against the soft output limit, and past it stops with the keys answered so
//! far ([`Paused`]). The session then leaves the request unconsumed; the connection reads no
//! more input until the client has taken the buffered output, and calls the session again with
//! the same request, which resumes from its next key. So `get k1 ... k1024` over 1 MiB values
//! holds about the soft limit plus one value at a time, not a gigabyte, and the client gets
//! every value without being disconnected. It pauses the same way once the buffer has grown
//! during the call while all connections together hold more output than the budget
//! (`--client-output-memory`): a multiget is never closed for its output, it waits for its
//! client. A resumed multiget answers at least one key per call, so it always moves on. A
//! `gat` that fails after a pause ends its reply with the error line after the values already
//! sent (before a pause the values are dropped, as before).

use crate::memcache_exec::strings_only;
use strata_engine::{Change, Expiry, ItemRef};
use strata_protocol::memcache::{encode, Get};

use super::{expiry, now_ms, write_error_reply};
use crate::context::ServerContext;
use crate::stats::{command_index, PendingCounts};

/// A multiget stopped at the output soft limit: its first `keys_done` keys are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Paused {
    /// Keys answered, in request order.
    pub keys_done: usize,
}

/// Runs a retrieval command, from where `paused` says a previous call of the same request
/// stopped. Returns where this call stopped at the output soft limit or the output budget (the
/// session keeps the request and calls again once the output has drained), or `None` once the
/// reply is complete. Below `stop_len` bytes of output ([`stop_len`]) neither limit can be
/// passed, so each key costs one comparison.
pub(super) fn execute(
    get: Get<'_>,
    paused: Option<Paused>,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
    stop_len: usize,
    pending: &mut PendingCounts,
) -> Option<Paused> {
    let returns_cas = get.command.returns_cas();
    let (command, touch) = match get.exptime {
        Some(exptime) => (
            const { command_index("touch") },
            Some(expiry(exptime, || now_ms(ctx))),
        ),
        None => (const { command_index("get") }, None),
    };
    let keys_skipped = match paused {
        Some(paused) => paused.keys_done,
        None => {
            if !pending.count_command(command) {
                ctx.stats.count_command(command);
            }
            0
        }
    };
    assert!(
        keys_skipped < get.keys.len() || keys_skipped == 0,
        "a multiget resumes inside its own keys"
    );
    let start = out.len();
    let (mut hits, mut keys_done) = (0u64, keys_skipped);
    for key in get.keys.iter().skip(keys_skipped) {
        let progressed = paused.is_none() || keys_done > keys_skipped;
        if progressed && out.len() > stop_len && output_stop(ctx, out, stop_len) {
            pending.count_gets((keys_done - keys_skipped) as u64, hits);
            return Some(Paused { keys_done });
        }
        keys_done += 1;
        let hit = match touch {
            None => ctx
                .engine
                .get_pieces(key, true, |item, pieces| {
                    let string = strings_only(Some(item)).is_some();
                    if string {
                        write_hit(out, key, &item, pieces, returns_cas);
                    }
                    string
                })
                .unwrap_or(false),
            Some(expiry) => match touch_one(key, expiry, returns_cas, ctx, out) {
                Ok(hit) => hit,
                Err(reply) => {
                    out.truncate(start);
                    out.extend_from_slice(reply);
                    return None;
                }
            },
        };
        hits += u64::from(hit);
    }
    pending.count_gets((keys_done - keys_skipped) as u64, hits);
    encode::write_end(out);
    None
}

/// The output length up to which a multiget need not look at its limits, for a session call
/// that began with `out`: the smaller of the soft limit and the buffer's capacity then (all of
/// it published to the output budget). Below the soft limit only a buffer that grew during the
/// call can pass the budget, and it grew only if its length passed that capacity.
pub(super) fn stop_len(ctx: &ServerContext, out: &Vec<u8>) -> usize {
    ctx.live.output().buffered_bytes_soft.min(out.capacity())
}

/// Past [`stop_len`]: whether the multiget must pause, because `out` is past the soft limit or
/// because it grew during the call (`stop_len` is then its capacity when the call began) while
/// all connections together hold more output than the budget. Out of line: small replies never
/// get here.
#[cold]
#[inline(never)]
fn output_stop(ctx: &ServerContext, out: &Vec<u8>, stop_len: usize) -> bool {
    ctx.live.output().past_soft(out) || ctx.output_budget.passed_by(out, stop_len)
}

/// Writes `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`, the data from the value's
/// pieces (a large string's parts, copied straight into `out`, not joined first).
fn write_hit(
    out: &mut Vec<u8>,
    key: &[u8],
    item: &ItemRef<'_>,
    pieces: &[&[u8]],
    returns_cas: bool,
) {
    let cas = returns_cas.then_some(item.cas);
    encode::write_value_pieces(out, key, item.client_flags, pieces, cas);
}

/// `gat`: writes the hit and gives the item its new expiry, keeping value, flags and CAS.
fn touch_one(
    key: &[u8],
    expiry: Expiry,
    returns_cas: bool,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) -> Result<bool, &'static [u8]> {
    let mut hit = false;
    ctx.engine
        .modify(key, |current, _| match strings_only(current) {
            None => Change::Keep,
            Some(item) => {
                hit = true;
                write_hit(out, key, &item, &[item.value], returns_cas);
                Change::Touch { expiry }
            }
        })
        .map_err(|error| write_error_reply(&error))?;
    Ok(hit)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use strata_engine::{Engine, EngineConfig};

    use crate::context::{OutputLimits, ServerContext, Session, Settings};
    use crate::memcache_exec::MemcacheSession;
    use crate::stats::command_index;

    /// Bytes of each stored value.
    const VALUE_BYTES: usize = 10 << 10;
    /// Soft output limit of the tests: six values and a bit.
    const SOFT: usize = 64 << 10;

    /// A context with a soft output limit of [`SOFT`], holding `k0` .. `k4`.
    fn context() -> ServerContext {
        context_with(Settings {
            output: OutputLimits::new(SOFT * OutputLimits::SOFT_DIVISOR),
            ..Settings::default()
        })
    }

    /// A context with `settings`, holding `k0` .. `k4`.
    fn context_with(settings: Settings) -> ServerContext {
        let engine = Engine::open(EngineConfig::default()).expect("a DRAM engine opens");
        let ctx = ServerContext::new(Arc::new(engine), settings);
        let mut session = MemcacheSession::new();
        for i in 0..5 {
            let mut input = format!("set k{i} {i} 0 {VALUE_BYTES}\r\n").into_bytes();
            input.extend([b'a' + i; VALUE_BYTES]);
            input.extend(b"\r\n");
            let mut out = Vec::new();
            session.process(&input, &ctx, &mut out);
            assert_eq!(out, b"STORED\r\n");
        }
        ctx
    }

    /// Runs `input` as a connection would: after each call the client takes the output, and
    /// the unconsumed rest goes round again. Returns everything sent and the number of calls.
    fn run_streaming(ctx: &ServerContext, input: &[u8]) -> (Vec<u8>, usize) {
        let mut session = MemcacheSession::new();
        let (mut sent, mut calls, mut at) = (Vec::new(), 0, 0);
        while at < input.len() {
            let mut out = Vec::new();
            let processed = session.process(&input[at..], ctx, &mut out);
            assert!(!processed.close);
            assert!(
                out.len() <= SOFT + VALUE_BYTES + 64,
                "buffered {} bytes",
                out.len()
            );
            assert!(
                processed.consumed > 0 || !out.is_empty(),
                "every call moves on"
            );
            at += processed.consumed;
            sent.extend(out);
            calls += 1;
        }
        (sent, calls)
    }

    /// The reply memcached sends to a multiget of `keys` (indexes of `k0` .. `k4`).
    fn values(keys: &[u8]) -> Vec<u8> {
        let mut want = Vec::new();
        for &i in keys {
            want.extend(format!("VALUE k{i} {i} {VALUE_BYTES}\r\n").bytes());
            want.extend([b'a' + i; VALUE_BYTES]);
            want.extend(b"\r\n");
        }
        want.extend(b"END\r\n");
        want
    }

    #[test]
    fn a_multiget_past_the_soft_limit_streams_in_parts_with_every_value_in_order() {
        let ctx = context();
        let keys: Vec<u8> = (0..40).map(|i| i % 5).collect();
        let line: Vec<String> = keys.iter().map(|i| format!("k{i}")).collect();
        let input = format!("get {} nosuch\r\nset after 0 0 1\r\n1\r\n", line.join(" "));
        let (sent, calls) = run_streaming(&ctx, input.as_bytes());
        assert!(calls >= 400 / 64, "{calls} calls for 400 KiB of values");
        assert_eq!(sent, [values(&keys), b"STORED\r\n".to_vec()].concat());
        let stats = &ctx.stats;
        let get = stats.commands[command_index("get")].load(Ordering::Relaxed);
        assert_eq!(get, 1, "one request, counted once");
        assert_eq!(stats.get_keys.load(Ordering::Relaxed), 41);
        assert_eq!(stats.get_hits.load(Ordering::Relaxed), 40);
    }

    #[test]
    fn multigets_pipelined_behind_a_full_buffer_wait_and_then_answer_whole() {
        let ctx = context();
        // Each of these fits; together they pass the soft limit in the second one.
        let input = "get k0 k1 k2 k3\r\ngets k4 k3 k2 k1\r\ngat 0 k0 k1\r\n";
        let (sent, calls) = run_streaming(&ctx, input.as_bytes());
        assert!(calls >= 2, "{calls}");
        let text = String::from_utf8_lossy(&sent);
        assert_eq!(text.matches("VALUE ").count(), 10);
        assert_eq!(text.matches("END\r\n").count(), 3);
        assert!(sent.starts_with(&values(&[0, 1, 2, 3])));
        assert!(sent.ends_with(&values(&[0, 1])));
    }

    #[test]
    fn a_multiget_past_the_output_budget_pauses_as_at_the_soft_limit() {
        // The soft limit is far away; the budget of all connections is what stops it.
        let ctx = context_with(Settings {
            client_output_bytes_max: SOFT,
            ..Settings::default()
        });
        assert!(ctx.live.output().buffered_bytes_soft > 1 << 20);
        let keys: Vec<u8> = (0..40).map(|i| i % 5).collect();
        let line: Vec<String> = keys.iter().map(|i| format!("k{i}")).collect();
        let input = format!("get {}\r\n", line.join(" "));
        let (sent, calls) = run_streaming(&ctx, input.as_bytes());
        assert!(calls >= 400 / 128, "{calls} calls for 400 KiB of values");
        assert_eq!(sent, values(&keys), "every value, in order, never closed");
    }
}
