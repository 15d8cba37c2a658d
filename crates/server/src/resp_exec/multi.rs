//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH, with Redis 7.0's replies.
//!
//! - After `MULTI` every command but `EXEC DISCARD MULTI WATCH QUIT RESET` is checked (known,
//!   arity, authentication) and queued with its exact bytes (`+QUEUED`); one that fails a check
//!   gets its error and marks the transaction, which `EXEC` then refuses (`-EXECABORT`).
//!   `MULTI` and `WATCH` inside one are refused without marking it, as in Redis.
//! - `EXEC` runs the queued commands in order, each parsed again and run as if sent alone (its
//!   errors are its own elements of the reply; the others still run), inside one transaction
//!   over every key they name and the watched ones (`held`: their shards locked in one order):
//!   nobody sees part of it, nothing runs between its commands on its keys, and other keys'
//!   commands run on meanwhile. An `EXEC` queuing a command that acts on the whole keyspace
//!   (FLUSHALL, SCAN, DBSIZE...) runs alone instead, while no other client's command runs on
//!   any worker (`crate::exclusive`). Before either, the keys the queued commands read that
//!   are on flash are read ahead like any command's (`resp_exec::flash_keys`).
//! - `WATCH` notes, per key, what `Engine::observe` sees: the item's CAS and expiry (or its
//!   absence) and how many entries of the key's hash slot left the index. `EXEC` compares them
//!   again inside its transaction: a write, delete, expiry, eviction, flush or TTL change by
//!   anyone since, this client included, changes one, even for a key absent both times that
//!   was created and removed in between, and `EXEC` answers the null array and runs nothing.
//!   (The removal of another key sharing the slot, 1 in 1024, aborts too: a retry, never a
//!   lost update.)
//! - Crash atomicity: the transaction logs the before-images of every key it holds (alone:
//!   every key its write commands name), so a `kill -9` in the middle of it leaves all of it
//!   or none (the transaction log beside the pool). FLUSHALL and FLUSHDB inside it name no
//!   key: not covered.

use strata_engine::{Door, Observed};
use strata_protocol::resp::{encode, errors, parse_command, Args, Limits};

use super::{held, table, Call, State, ARGS_MAX, BULK_LEN_DISCARD_MAX};
use crate::context::ServerContext;

/// Most bytes of commands one transaction queues: past it a command is refused and the
/// transaction marked (a client cannot grow a connection's memory without limit).
pub const QUEUED_BYTES_MAX: usize = 256 << 20;
/// Most keys one connection watches at once.
pub const WATCHED_KEYS_MAX: usize = 1 << 20;

const ERR_EXECABORT: &[u8] = b"-EXECABORT Transaction discarded because of previous errors.\r\n";
const ERR_NESTED: &[u8] = b"-ERR MULTI calls can not be nested\r\n";
const ERR_WATCH_IN_MULTI: &[u8] = b"-ERR WATCH inside MULTI is not allowed\r\n";
const ERR_EXEC_WITHOUT: &[u8] = b"-ERR EXEC without MULTI\r\n";
const ERR_DISCARD_WITHOUT: &[u8] = b"-ERR DISCARD without MULTI\r\n";
const ERR_QUEUE_FULL: &[u8] =
    b"-ERR strata's transaction limit reached: at most 256 MiB of queued commands\r\n";
const ERR_WATCH_FULL: &[u8] =
    b"-ERR strata's limit of 1048576 watched keys per connection reached\r\n";

/// A transaction being queued.
#[derive(Debug, Default)]
pub(crate) struct Multi {
    /// The queued commands' bytes, back to back; `ends` says where each ends.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// A command failed to queue: `EXEC` refuses the transaction.
    dirty: bool,
}

impl Multi {
    /// Commands queued so far.
    pub(crate) fn queued(&self) -> usize {
        self.ends.len()
    }

    /// The queued commands' bytes, in order.
    fn commands(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter())
            .map(|(start, &end)| &self.bytes[start..end])
    }
}

/// A watched key and what the engine observed of it when watched.
#[derive(Debug)]
pub(crate) struct Watched {
    key: Vec<u8>,
    seen: Observed,
}

/// Whether `name` (lower case) runs at once inside a transaction rather than being queued.
fn runs_at_once(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

/// Inside `MULTI`: queues the command `input` (parsed as `args`), or refuses it and marks the
/// transaction. Returns false when the command runs at once instead (see [`runs_at_once`]).
pub(crate) fn queue(
    state: &mut State,
    ctx: &ServerContext,
    input: &[u8],
    args: &Args,
    out: &mut Vec<u8>,
) -> bool {
    let Some(queued_bytes) = state.multi.as_ref().map(|m| m.bytes.len()) else {
        return false;
    };
    let command = table::lookup(args.arg(input, 0));
    if command.is_some_and(|c| runs_at_once(c.name)) {
        return false;
    }
    let reply_start = out.len();
    match command {
        None => super::types::unknown(state, ctx, input, args, out),
        Some(c) => {
            if !c.arity_ok(args.len()) {
                errors::wrong_args(out, c.name.as_bytes());
            } else if !super::authenticated(state, ctx) && !c.allowed_before_auth() {
                out.extend_from_slice(errors::ERR_NOAUTH);
            } else if queued_bytes + input.len() > QUEUED_BYTES_MAX {
                out.extend_from_slice(ERR_QUEUE_FULL);
            } else {
                let multi = state.multi.as_mut().expect("checked above");
                multi.bytes.extend_from_slice(input);
                multi.ends.push(multi.bytes.len());
                // CLIENT LIST names a queued command as the client's last, as Redis does.
                state.last_row = Some(super::commandstats::row_of(c));
                encode::simple(out, b"QUEUED");
                return true;
            }
            ctx.resp_commands.reject(super::commandstats::row_of(c));
        }
    }
    ctx.resp_commands.count_error(&out[reply_start..]);
    mark_dirty(state);
    true
}

/// A command failed to queue: `EXEC` will refuse the transaction (no-op outside one).
pub(crate) fn mark_dirty(state: &mut State) {
    if let Some(multi) = state.multi.as_mut() {
        multi.dirty = true;
    }
}

/// `MULTI`.
pub(crate) fn multi(state: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    if state.multi.is_some() {
        out.extend_from_slice(ERR_NESTED);
        return;
    }
    state.multi = Some(Multi::default());
    encode::ok(out);
}

/// `DISCARD`: drops the queued commands and the watched keys.
pub(crate) fn discard(state: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    if state.multi.take().is_none() {
        out.extend_from_slice(ERR_DISCARD_WITHOUT);
        return;
    }
    state.watched.clear();
    encode::ok(out);
}

/// `WATCH key [key ...]`.
pub(crate) fn watch(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if state.multi.is_some() {
        out.extend_from_slice(ERR_WATCH_IN_MULTI);
        return;
    }
    if state.watched.len() + call.len() - 1 > WATCHED_KEYS_MAX {
        out.extend_from_slice(ERR_WATCH_FULL);
        return;
    }
    for key in call.args_from(1) {
        if state.watched.iter().any(|w| w.key == key) {
            continue;
        }
        let seen = call.keys().observe(key);
        state.watched.push(Watched {
            key: key.to_vec(),
            seen,
        });
    }
    encode::ok(out);
}

/// `UNWATCH`.
pub(crate) fn unwatch(state: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    state.watched.clear();
    encode::ok(out);
}

/// `EXEC`.
pub(crate) fn exec(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(multi) = state.multi.take() else {
        out.extend_from_slice(ERR_EXEC_WITHOUT);
        return;
    };
    let watched = std::mem::take(&mut state.watched);
    if multi.dirty {
        out.extend_from_slice(ERR_EXECABORT);
        return;
    }
    let plan = plan(&multi, &watched);
    let run = |state: &mut State, call: &Call<'_>, out: &mut Vec<u8>| {
        let keys = call.keys();
        if watched.iter().any(|w| keys.observe(&w.key) != w.seen) {
            encode::null_array(out, state.version);
            return;
        }
        encode::array_len(out, multi.ends.len());
        run_queued(state, call, &multi, out);
    };
    if plan.on_its_keys {
        let keys: Vec<&[u8]> = plan.keys.iter().map(Vec::as_slice).collect();
        // Logged whole: a key a queued command only reads costs a look and a few bytes.
        held::run_held(call, &keys, plan.writes, out, |call, out| {
            run(state, call, out)
        });
    } else {
        let written: Vec<&[u8]> = plan.written.iter().map(Vec::as_slice).collect();
        super::alone_and_atomic(call.ctx, &written, out, |out| run(state, call, out));
    }
}

/// What `EXEC` holds while it runs (see `held`).
struct Plan {
    /// Every key a queued command names, and the watched ones (each once).
    keys: Vec<Vec<u8>>,
    /// The keys the queued write commands name (each once).
    written: Vec<Vec<u8>>,
    /// A queued command writes.
    writes: bool,
    /// Every queued command acts on its keys only: `EXEC` holds them, not the whole server.
    on_its_keys: bool,
}

/// The keys `EXEC` holds, and how (see [`Plan`]).
fn plan(multi: &Multi, watched: &[Watched]) -> Plan {
    let limits = queued_limits();
    let mut plan = Plan {
        keys: watched.iter().map(|w| w.key.clone()).collect(),
        written: Vec::new(),
        writes: false,
        on_its_keys: true,
    };
    let mut seen: std::collections::HashSet<Vec<u8>> = plan.keys.iter().cloned().collect();
    let mut seen_written = std::collections::HashSet::new();
    let mut args = Args::with_capacity(8, 0);
    for command in multi.commands() {
        if parse_command(command, &limits, &mut args).is_err() {
            continue;
        }
        let name = args.get(command, 0).unwrap_or_default();
        let Some(entry) = table::lookup(name) else {
            continue;
        };
        plan.on_its_keys &= held::runs_on_its_keys(entry);
        let writes = entry.flags.contains(&"write");
        plan.writes |= writes;
        for position in entry.key_positions(args.len()) {
            let Some(key) = args.get(command, position) else {
                continue;
            };
            if writes && seen_written.insert(key.to_vec()) {
                plan.written.push(key.to_vec());
            }
            if seen.insert(key.to_vec()) {
                plan.keys.push(key.to_vec());
            }
        }
    }
    plan
}

/// Whether a queued command writes (CLIENT PAUSE WRITE holds such an EXEC).
pub(crate) fn queues_a_write(multi: &Multi) -> bool {
    let limits = queued_limits();
    let mut args = Args::with_capacity(8, 0);
    multi.commands().any(|command| {
        parse_command(command, &limits, &mut args).is_ok()
            && table::lookup(args.get(command, 0).unwrap_or_default())
                .is_some_and(|c| c.flags.contains(&"write"))
    })
}

/// Runs the queued commands, each reply an element of `EXEC`'s.
fn run_queued(state: &mut State, call: &Call<'_>, multi: &Multi, out: &mut Vec<u8>) {
    let ctx = call.ctx;
    let limits = queued_limits();
    let mut args = Args::with_capacity(8, 0);
    let halfway = multi.ends.len() / 2;
    for (index, command) in multi.commands().enumerate() {
        let stall_ms = ctx.settings.exec_stall_for_tests_ms;
        if stall_ms > 0 && index == halfway {
            tracing::warn!(stall_ms, "stalling inside EXEC for a test");
            std::thread::sleep(std::time::Duration::from_millis(stall_ms));
        }
        let parsed = parse_command(command, &limits, &mut args);
        debug_assert_eq!(parsed.ok(), Some(command.len()), "queued whole");
        // Each reply is one element, whatever CLIENT REPLY says meanwhile.
        let reply_off = std::mem::take(&mut state.reply_off);
        state.reply_skip_next = false;
        super::execute(state, &args, command, (ctx, call.keys()), out);
        state.reply_off |= reply_off;
    }
}

/// The keys `EXEC` will read: those of its queued commands that may be on flash, and the
/// watched ones, for the flash read-ahead before it runs.
pub(crate) fn exec_keys(state: &State) -> Vec<Vec<u8>> {
    let Some(multi) = state.multi.as_ref() else {
        return Vec::new();
    };
    let limits = queued_limits();
    let mut keys: Vec<Vec<u8>> = state.watched.iter().map(|w| w.key.clone()).collect();
    let mut args = Args::with_capacity(8, 0);
    for command in multi.commands() {
        if parse_command(command, &limits, &mut args).is_ok() {
            keys.extend(super::flash_keys(&args, command).map(<[u8]>::to_vec));
        }
    }
    keys
}

/// Parse limits for queued commands: any that was queued passed the connection's limits then.
fn queued_limits() -> Limits {
    Limits {
        args_max: ARGS_MAX,
        bulk_len_max: BULK_LEN_DISCARD_MAX,
        bulk_len_discard_max: BULK_LEN_DISCARD_MAX,
        inline_len_max: QUEUED_BYTES_MAX,
        auth_pending: false,
    }
}
