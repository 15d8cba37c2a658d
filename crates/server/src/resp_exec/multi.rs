//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH, with Redis 7.0's replies.
//!
//! - After `MULTI` every command but `EXEC DISCARD MULTI WATCH QUIT RESET` is checked (known,
//!   arity, authentication) and queued with its exact bytes (`+QUEUED`); one that fails a check
//!   gets its error and marks the transaction, which `EXEC` then refuses (`-EXECABORT`).
//!   `MULTI` and `WATCH` inside one are refused without marking it, as in Redis.
//! - `EXEC` runs the queued commands in order, each as parsed and looked up when queued and as
//!   if sent alone (its errors are its own elements of the reply; the others still run), inside
//!   one transaction over every key they name and the watched ones (`held`: their shards locked
//!   in one order): nobody sees part of it, nothing runs between its commands on its keys, and
//!   other keys' commands run on meanwhile. An `EXEC` queuing a command that acts on the whole
//!   keyspace (FLUSHALL, SCAN, DBSIZE...) runs alone instead, while no other client's command
//!   runs on any worker (`crate::exclusive`). Before either, the keys the queued commands read
//!   that are on flash are read ahead like any command's (`resp_exec::flash_keys`).
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
use strata_protocol::resp::{encode, errors, Args};

use super::{held, table, Call, State};
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
    /// The queued commands' bytes, back to back; each [`Queued`] says where one ends.
    bytes: Vec<u8>,
    queued: Vec<Queued>,
    /// What the queued commands take in memory, their bytes and parsed arguments (bounded by
    /// [`QUEUED_BYTES_MAX`]: a client queuing millions of tiny commands holds their arguments
    /// too).
    memory_bytes: usize,
    /// A command failed to queue: `EXEC` refuses the transaction.
    dirty: bool,
    /// Argument lists of an earlier transaction's commands, kept for the next to fill
    /// (`Multi::recycled`).
    spare_args: Vec<Args>,
    /// The allocations of an earlier `EXEC`'s [`Plan`], emptied, for the next one's.
    spare_keys: KeyBuffers,
}

/// Two empty vectors of keys whose allocations a finished `EXEC` leaves for the next
/// ([`Plan::into_buffers`]): callgrind counted two allocations, two reallocations and two
/// frees per transaction there. With the engine's shards marked in a bit set instead of a
/// sorted vector, a command of MULTI + 5 SETs + EXEC went from 3,872 to 3,755 instructions
/// (`bench/instructions-ab.sh`).
#[derive(Debug, Default)]
struct KeyBuffers {
    keys: Vec<&'static [u8]>,
    written: Vec<&'static [u8]>,
}

/// Most keys each of a finished transaction's key buffers keeps for the next.
const RECYCLED_KEYS_MAX: usize = 1024;

/// Most bytes of queued commands a finished transaction's buffer keeps for the connection's
/// next one; a larger buffer is freed.
const RECYCLED_BYTES_MAX: usize = 64 << 10;
/// Most argument lists a finished transaction keeps for the next.
const RECYCLED_ARGS_MAX: usize = 64;

/// A queued command, parsed and looked up once, when it was queued: `EXEC` neither parses
/// nor looks it up again.
#[derive(Debug)]
struct Queued {
    /// Where its bytes end in `Multi::bytes`.
    end: usize,
    /// Its arguments, as positions into its own bytes.
    args: Args,
    /// Its table row.
    entry: &'static table::Command,
}

impl Queued {
    /// What queuing `input`, parsed as `args`, takes in memory.
    fn memory_bytes(input: &[u8], args: &Args) -> usize {
        input.len()
            + std::mem::size_of::<Queued>()
            + args.len() * std::mem::size_of::<strata_protocol::resp::Arg>()
    }
}

impl Multi {
    /// This transaction emptied for the connection's next one, keeping what it allocated (up
    /// to [`RECYCLED_BYTES_MAX`] and [`RECYCLED_ARGS_MAX`]): a client that runs transactions
    /// back to back allocates nothing per transaction.
    fn recycled(mut self) -> Multi {
        let mut spare_args = std::mem::take(&mut self.spare_args);
        let room = RECYCLED_ARGS_MAX.saturating_sub(spare_args.len());
        spare_args.extend(self.queued.drain(..).map(|q| q.args).take(room));
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        if bytes.capacity() > RECYCLED_BYTES_MAX {
            bytes = Vec::new();
        }
        Multi {
            bytes,
            queued: self.queued,
            memory_bytes: 0,
            dirty: false,
            spare_args,
            spare_keys: self.spare_keys,
        }
    }

    /// Commands queued so far.
    pub(crate) fn queued(&self) -> usize {
        self.queued.len()
    }

    /// The queued commands in order: each one's bytes, arguments and table row.
    fn commands(&self) -> impl Iterator<Item = (&[u8], &Args, &'static table::Command)> {
        let starts = std::iter::once(0).chain(self.queued.iter().map(|q| q.end));
        starts
            .zip(self.queued.iter())
            .map(|(start, queued)| (&self.bytes[start..queued.end], &queued.args, queued.entry))
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
/// `command` is its table row (`None`: a name the table lacks), looked up by the caller.
pub(crate) fn queue(
    state: &mut State,
    ctx: &ServerContext,
    (input, args, command): (&[u8], &Args, Option<&'static table::Command>),
    out: &mut Vec<u8>,
) -> bool {
    let Some(queued_bytes) = state.multi.as_ref().map(|m| m.memory_bytes) else {
        return false;
    };
    debug_assert_eq!(
        command.map(|c| c.name),
        table::lookup(args.arg(input, 0)).map(|c| c.name)
    );
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
            } else if queued_bytes + Queued::memory_bytes(input, args) > QUEUED_BYTES_MAX {
                out.extend_from_slice(ERR_QUEUE_FULL);
            } else {
                let multi = state.multi.as_mut().expect("checked above");
                multi.bytes.extend_from_slice(input);
                multi.memory_bytes += Queued::memory_bytes(input, args);
                let mut queued_args = multi.spare_args.pop().unwrap_or_default();
                queued_args.clone_from(args);
                multi.queued.push(Queued {
                    end: multi.bytes.len(),
                    args: queued_args,
                    entry: c,
                });
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
    state.multi = Some(state.spare_multi.take().unwrap_or_default());
    encode::ok(out);
}

/// `DISCARD`: drops the queued commands and the watched keys.
pub(crate) fn discard(state: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    let Some(multi) = state.multi.take() else {
        out.extend_from_slice(ERR_DISCARD_WITHOUT);
        return;
    };
    state.spare_multi = Some(multi.recycled());
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
    let Some(mut multi) = state.multi.take() else {
        out.extend_from_slice(ERR_EXEC_WITHOUT);
        return;
    };
    let watched = std::mem::take(&mut state.watched);
    if multi.dirty {
        out.extend_from_slice(ERR_EXECABORT);
        state.spare_multi = Some(multi.recycled());
        return;
    }
    let buffers = std::mem::take(&mut multi.spare_keys);
    let plan = plan(&multi, &watched, buffers);
    // The keys' index buckets and records start loading before any is held, so their cache
    // misses overlap (nothing read them while the commands were queued).
    call.ctx.engine.prefetch(&plan.keys);
    let run = |state: &mut State, call: &Call<'_>, out: &mut Vec<u8>| {
        let keys = call.keys();
        if watched.iter().any(|w| keys.observe(&w.key) != w.seen) {
            encode::null_array(out, state.version);
            return;
        }
        encode::array_len(out, multi.queued());
        run_queued(state, call, &multi, out);
    };
    if plan.on_its_keys {
        // Logged whole: a key a queued command only reads costs a look and a few bytes.
        let hold = held::Hold::for_writes(plan.writes);
        held::run_held(call, &plan.keys, hold, out, |call, out| {
            run(state, call, out);
        });
    } else {
        super::alone_and_atomic(call.ctx, &plan.written, out, |out| run(state, call, out));
    }
    multi.spare_keys = plan.into_buffers();
    state.spare_multi = Some(multi.recycled());
}

/// What `EXEC` holds while it runs (see `held`).
struct Plan<'m> {
    /// Every key a queued command names, and the watched ones (each once).
    keys: Vec<&'m [u8]>,
    /// The keys the queued write commands name (each once).
    written: Vec<&'m [u8]>,
    /// A queued command writes.
    writes: bool,
    /// Every queued command acts on its keys only: `EXEC` holds them, not the whole server.
    on_its_keys: bool,
}

impl Plan<'_> {
    /// The plan's vectors, emptied, their allocations kept (up to [`RECYCLED_KEYS_MAX`] keys)
    /// for the next `EXEC`.
    fn into_buffers(self) -> KeyBuffers {
        KeyBuffers {
            keys: emptied(self.keys),
            written: emptied(self.written),
        }
    }
}

/// `keys` emptied, with its allocation when it is not past [`RECYCLED_KEYS_MAX`], as a
/// vector that borrows nothing (collected in place from an iterator of nothing).
fn emptied(mut keys: Vec<&[u8]>) -> Vec<&'static [u8]> {
    if keys.capacity() > RECYCLED_KEYS_MAX {
        return Vec::new();
    }
    keys.clear();
    keys.into_iter()
        .map(|_| -> &'static [u8] { unreachable!("the vector was cleared") })
        .collect()
}

/// The keys `EXEC` holds, and how (see [`Plan`]), from the commands as they were queued, in
/// the vectors of `buffers` (empty).
fn plan<'m>(multi: &'m Multi, watched: &'m [Watched], buffers: KeyBuffers) -> Plan<'m> {
    debug_assert!(buffers.keys.is_empty() && buffers.written.is_empty());
    let mut plan = Plan {
        keys: buffers.keys,
        written: buffers.written,
        writes: false,
        on_its_keys: true,
    };
    plan.keys.extend(watched.iter().map(|w| &w.key[..]));
    for (command, args, entry) in multi.commands() {
        plan.on_its_keys &= held::runs_on_its_keys(entry);
        let writes = entry.writes;
        plan.writes |= writes;
        for position in entry.key_positions(args.len()) {
            let Some(key) = args.get(command, position) else {
                continue;
            };
            plan.keys.push(key);
            if writes {
                plan.written.push(key);
            }
        }
    }
    for keys in [&mut plan.keys, &mut plan.written] {
        keys.sort_unstable();
        keys.dedup();
    }
    plan
}

/// Whether a queued command writes (CLIENT PAUSE WRITE holds such an EXEC).
pub(crate) fn queues_a_write(multi: &Multi) -> bool {
    multi.commands().any(|(_, _, entry)| entry.writes)
}

/// Runs the queued commands, each reply an element of `EXEC`'s.
fn run_queued(state: &mut State, call: &Call<'_>, multi: &Multi, out: &mut Vec<u8>) {
    let ctx = call.ctx;
    let halfway = multi.queued() / 2;
    for (index, (command, args, entry)) in multi.commands().enumerate() {
        let stall_ms = ctx.settings.exec_stall_for_tests_ms;
        if stall_ms > 0 && index == halfway {
            tracing::warn!(stall_ms, "stalling inside EXEC for a test");
            std::thread::sleep(std::time::Duration::from_millis(stall_ms));
        }
        // Each reply is one element, whatever CLIENT REPLY says meanwhile.
        let reply_off = std::mem::take(&mut state.reply_off);
        state.reply_skip_next = false;
        debug_assert!(state.multi.is_none(), "EXEC took its transaction");
        super::run_known(state, args, command, entry, (ctx, call.keys()), out);
        state.reply_off |= reply_off;
    }
}

/// The keys `EXEC` will read: those of its queued commands that may be on flash, and the
/// watched ones, for the flash read-ahead before it runs.
pub(crate) fn exec_keys(state: &State) -> Vec<Vec<u8>> {
    let Some(multi) = state.multi.as_ref() else {
        return Vec::new();
    };
    let mut keys: Vec<Vec<u8>> = state.watched.iter().map(|w| w.key.clone()).collect();
    for (command, args, _) in multi.commands() {
        keys.extend(super::flash_keys(args, command).map(<[u8]>::to_vec));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `EXEC` allocates nothing for its plan when the one before it left its buffers: the
    /// in-place collect that drops the borrow keeps the allocation.
    #[test]
    fn an_emptied_key_buffer_keeps_its_allocation() {
        let owned = vec![b"key".to_vec(); 10];
        let mut keys: Vec<&[u8]> = Vec::with_capacity(16);
        keys.extend(owned.iter().map(Vec::as_slice));
        let spare = emptied(keys);
        assert!(spare.is_empty());
        assert_eq!(spare.capacity(), 16);
        let large: Vec<&[u8]> = Vec::with_capacity(RECYCLED_KEYS_MAX + 1);
        assert_eq!(emptied(large).capacity(), 0, "a large one is freed");
    }
}
