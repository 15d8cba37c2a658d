//! Running one command (the driver): MULTI queueing, lookup, arity, authentication, the
//! handler held with its keys where it needs them (several keys, a large hash, a write only a
//! transaction makes), then MONITOR, latency, command stats and SLOWLOG. The session
//! (`resp_exec.rs`) parses the input into commands and hands each here.

use strata_protocol::resp::{errors, Args};

use crate::context::ServerContext;

use super::held::{self, Keys};
use super::{authenticated, commandstats, hash_chunks, multi, publish, table, types, Call, State};

/// Runs the command `args` (parsed from `input`), whose table row is `found` (`None`: a name
/// the table lacks, looked up by the caller), and appends its reply.
pub(super) fn execute(
    state: &mut State,
    (args, found): (&Args, Option<&'static table::Command>),
    input: &[u8],
    (ctx, keys): (&ServerContext, Keys<'_>),
    out: &mut Vec<u8>,
) {
    debug_assert!(!args.is_empty());
    let reply_start = out.len();
    let skip_this = state.reply_skip_next;
    state.reply_skip_next = false;
    if state.multi.is_some() && multi::queue(state, ctx, (input, args, found), out) {
        if state.reply_off || skip_this {
            out.truncate(reply_start);
        }
        return;
    }
    debug_assert_eq!(
        found.map(|c| c.name),
        table::lookup(args.arg(input, 0)).map(|c| c.name)
    );
    match found {
        Some(command) => run_known(state, args, input, command, (ctx, keys), out),
        None => {
            types::unknown(state, ctx, input, args, out);
            ctx.resp_commands.count_error(&out[reply_start..]);
        }
    }
    if state.reply_off || skip_this {
        out.truncate(reply_start);
    }
}

/// Runs `command`, already parsed (`args`) and looked up: a command sent now, or one `EXEC`
/// queued.
pub(super) fn run_known(
    state: &mut State,
    args: &Args,
    input: &[u8],
    command: &'static table::Command,
    (ctx, keys): (&ServerContext, Keys<'_>),
    out: &mut Vec<u8>,
) {
    let key_found = std::cell::Cell::new(None);
    let call = Call {
        ctx,
        input,
        args,
        command,
        keys,
        in_chunk: false,
        wants_held: std::cell::Cell::new(false),
        key_found: &key_found,
    };
    run(state, &call, out);
    if let Some((keys, hits)) = key_found.get() {
        state.pending.count_gets(keys, hits);
    }
}

/// Runs the command's handler: held with its keys when it names several; on the chunks at
/// once when its key is the connection's last large hash; else as it is, and then again held
/// if it asked to be (a large hash met, a write only a transaction makes).
fn dispatch(state: &mut State, call: &Call<'_>, reply_start: usize, out: &mut Vec<u8>) {
    let command = call.command;
    let several = command.may_name_several_keys()
        && command.key_positions(call.len()).nth(1).is_some()
        && !call.keys.held()
        && !call.ctx.exclusive.is_alone();
    if several {
        // Several keys: held together for the whole command (`held`). Inside a transaction,
        // or an EXEC running alone, the EXEC holds them already.
        let keys: Vec<&[u8]> = command
            .key_positions(call.len())
            .map(|position| call.arg(position))
            .collect();
        let hold = held::Hold::for_writes(command.writes);
        held::run_held(call, &keys, hold, out, |call, out| {
            (command.run)(state, call, out);
        });
    } else if is_hinted_large_hash(state, call) {
        run_on_chunks(state, call, out);
    } else {
        (command.run)(state, call, out);
    }
    if call.wants_held.get() {
        out.truncate(reply_start);
        if command.kind == Some(strata_engine::Kind::Hash) {
            state.large_hash_hint = Some(call.arg(1).to_vec());
        }
        run_on_chunks(state, call, out);
    } else if held::asked_to_hold() {
        out.truncate(reply_start);
        run_held_again(state, call, out);
    }
}

/// Whether `call` is a hash command on the key of the last large hash this connection met
/// (`State::large_hash_hint`), not held yet: it then runs on the chunks at once.
fn is_hinted_large_hash(state: &State, call: &Call<'_>) -> bool {
    call.command.kind == Some(strata_engine::Kind::Hash)
        && !call.keys.held()
        && state.large_hash_hint.as_deref() == Some(call.arg(1))
}

/// Runs a command that met a large hash again, on its chunks, with its key held
/// (`hash_chunks`): by the transaction it runs in, or by one of its own.
fn run_on_chunks(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.keys.held() {
        hash_chunks::run(state, call, out);
        return;
    }
    let writes = call.command.writes;
    // Logged: a command's writes to several chunks are all there after a crash or none. Inside
    // an atomic group (an EXEC running alone) the group's log holds the hash already.
    let hold = match (writes, call.ctx.exclusive.is_alone()) {
        (false, _) => held::Hold::Read,
        (true, false) => held::Hold::Logged,
        (true, true) => held::Hold::Unlogged,
    };
    held::run_held(call, &[call.arg(1)], hold, out, |call, out| {
        hash_chunks::run(state, call, out);
    });
}

/// Runs a command that met a write only a transaction makes (a string of several records,
/// `WriteError::NeedsTransaction`) again with its keys held, logged; inside an EXEC that runs
/// alone, unlogged (the group's log holds its keys already). Nothing was changed by the first
/// run: the engine refused the write before making it.
fn run_held_again(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let command = call.command;
    if call.keys.held() {
        // A transaction writes such strings itself and never asks: a handler's bug.
        strata_protocol::resp::encode::error(
            out,
            b"ERR strata could not write a large string here",
        );
        return;
    }
    let keys: Vec<&[u8]> = command
        .key_positions(call.len())
        .map(|position| call.arg(position))
        .collect();
    let hold = if call.ctx.exclusive.is_alone() {
        held::Hold::Unlogged
    } else {
        held::Hold::Logged
    };
    held::run_held(call, &keys, hold, out, |call, out| {
        (command.run)(state, call, out);
    });
    held::asked_to_hold(); // Held, it cannot ask again; a stale ask must not outlive it.
}

/// Sends the command's MONITOR line to every monitor (see `crate::monitor`); admin commands
/// (CONFIG, SHUTDOWN, MONITOR...) are not shown, as in Redis.
fn feed_monitors(state: &State, call: &Call<'_>) {
    let unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let addr = state
        .peer
        .map_or_else(|| "?".to_owned(), |peer| peer.to_string());
    let name = call.command.name;
    let mut redact_from = usize::MAX;
    let args = (0..call.len()).map(|index| {
        let arg = call.arg(index);
        if name == "hello" && strata_protocol::resp::name_eq(arg, b"auth") {
            redact_from = index + 1;
        }
        let redacted = (name == "auth" && index > 0)
            || (index >= redact_from && index < redact_from.saturating_add(2));
        (redacted, arg)
    });
    let mut line = Vec::with_capacity(64);
    crate::monitor::line(&mut line, unix_us, &addr, args);
    call.ctx.monitors.feed(&line, &call.ctx.clients);
}

/// Checks arity and authentication, counts the command and runs its handler.
fn run(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let command = call.command;
    let row = commandstats::row_of(command);
    let reply_start = out.len();
    if !command.arity_ok(call.len()) {
        errors::wrong_args(out, command.name.as_bytes());
        rejected(call, row, &out[reply_start..]);
        return;
    }
    if !authenticated(state, call.ctx) && !command.allowed_before_auth() {
        out.extend_from_slice(errors::ERR_NOAUTH);
        rejected(call, row, &out[reply_start..]);
        return;
    }
    let hot = state.pending.count_command(command.stat);
    if !hot && !command.batches {
        // Whatever runs may read the counters (INFO): bring them up to date. A data command
        // (`Command::batches`: a string, bitmap, hash or keyspace command on its key) reads
        // none, so the run times of a pipeline of HSETs stay buffered (`HotCounts`) until a
        // command that may read them, or the batch's end.
        state.pending.publish(&call.ctx.stats);
        state.hot.publish(&call.ctx.resp_commands);
    }
    // quanta reads the CPU's time-stamp counter: clock_gettime cost 7% of a pipelined GET's
    // server CPU on a virtual machine, two reads per command. One read where a command
    // follows another in its batch: it starts when that one ended (what the session does
    // between them, a few checks, is counted in its time).
    let started = state
        .command_ended
        .take()
        .unwrap_or_else(quanta::Instant::now);
    state.last_row = Some(row);
    dispatch(state, call, reply_start, out);
    // After it ran, as Redis does: an EXEC's line follows those of the commands it ran.
    if call.ctx.monitors.active() && !command.admin {
        feed_monitors(state, call);
    }
    let ended = quanta::Instant::now();
    state.command_ended = Some(ended);
    let elapsed_ns = u64::try_from((ended - started).as_nanos()).unwrap_or(u64::MAX);
    let elapsed_us = elapsed_ns / 1000;
    if call.ctx.latency.threshold_ms() > 0 {
        let fast = command.fast;
        call.ctx.latency.command(fast, elapsed_us);
    }
    let failed = out.get(reply_start) == Some(&b'-');
    if failed {
        call.ctx.resp_commands.count_error(&out[reply_start..]);
    }
    let stats = &call.ctx.resp_commands;
    if row < 2 {
        state.hot.count(row, elapsed_ns, failed, stats);
    } else {
        stats.add(row, 1, elapsed_us, u64::from(failed));
        state.hot.count_latency(row, elapsed_ns, stats);
    }
    log_if_slow(state, call, elapsed_us);
    if command.changes_client {
        // What CLIENT LIST shows of this client may have changed (name, protocol, MULTI).
        publish(state);
    }
    // Counted after running, as Redis does, so INFO does not count itself (GET and SET were
    // counted in `pending` above, which nothing reads before the batch ends).
    if !hot {
        call.ctx.stats.count_command(command.stat);
    }
}

/// Adds the command to SLOWLOG when it ran at least `slowlog-log-slower-than` (never `AUTH` or
/// `HELLO`, whose arguments hold passwords, as in Redis).
/// Counts a call of row `row` refused before it ran, with its error `reply`.
fn rejected(call: &Call<'_>, row: usize, reply: &[u8]) {
    call.ctx.resp_commands.reject(row);
    call.ctx.resp_commands.count_error(reply);
}

fn log_if_slow(state: &State, call: &Call<'_>, elapsed_us: u64) {
    let slowlog = &call.ctx.slowlog;
    // (EXEC's commands are logged one by one, as in Redis.)
    if !slowlog.is_slow(elapsed_us) || matches!(call.command.name, "auth" | "hello" | "exec") {
        return;
    }
    let unix_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    slowlog.push(
        call.args_from(0),
        unix_secs,
        elapsed_us,
        state.peer,
        state.name.as_deref().unwrap_or_default(),
    );
}
