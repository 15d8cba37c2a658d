//! The Redis session: executes RESP2/RESP3 commands against the engine.
//!
//! ```text
//!   input ──► parse_command(rest, limits, &mut args) ──► lookup(name) ──► arity ──► auth
//!                                                          │                          │
//!                   unknown: data-type command on a key? ──┴─► -WRONGTYPE / -ERR unknown
//!                                                                                     ▼
//!                                       family handler (connection, strings, counters,
//!                                       keyspace, server) writes its reply into `out`
//! ```
//!
//! | file             | commands                                                          |
//! |------------------|-------------------------------------------------------------------|
//! | `table.rs`       | the command table: `Command`, its lookup (rows: `table/commands.rs`) |
//! | `connection.rs`  | PING ECHO HELLO AUTH SELECT QUIT RESET CLIENT TIME SHUTDOWN       |
//! | `strings.rs`     | GET SET GETEX GETDEL GETSET SETNX SETEX PSETEX MGET MSET MSETNX    |
//! | `ranges.rs`      | APPEND STRLEN GETRANGE SETRANGE                                   |
//! | `bits.rs`        | GETBIT SETBIT BITCOUNT BITPOS                                     |
//! | `hashes.rs`      | HSET HMSET HSETNX HGET HMGET HGETALL HKEYS HVALS HLEN HSTRLEN     |
//! |                  | HEXISTS HDEL HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN                |
//! | `hash_expiry.rs` | HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT HTTL HPTTL HEXPIRETIME      |
//! |                  | HPEXPIRETIME HPERSIST (Redis 7.4's field expiry)                  |
//! | `object.rs`      | OBJECT                                                            |
//! | `counters.rs`    | INCR DECR INCRBY DECRBY INCRBYFLOAT                               |
//! | `keyspace.rs`    | DEL UNLINK EXISTS TOUCH TYPE RENAME RENAMENX COPY SCAN KEYS       |
//! |                  | RANDOMKEY DBSIZE FLUSHDB FLUSHALL                                 |
//! | `expire.rs`      | EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME  |
//! |                  | PERSIST, and the expiry arithmetic SET and GETEX share            |
//! | `server.rs`      | INFO CONFIG COMMAND LASTSAVE SAVE BGSAVE                          |
//! | `slowlog.rs`     | SLOWLOG                                                           |
//! | `latency.rs`     | LATENCY                                                           |
//! | `memory.rs`      | MEMORY                                                            |
//! | `multi.rs`       | MULTI EXEC DISCARD WATCH UNWATCH                                  |
//! | `driver.rs`      | (shared) running one command: queueing, lookup, arity, auth, the  |
//! |                  | handler held with its keys where it needs them, stats, SLOWLOG    |
//! | `call.rs`        | (shared) `Call`, typed key access, write errors, HELP layout      |
//! | `held.rs`        | (shared) how a command reaches its keys: one at a time, or held   |
//! | `compatibility.rs` | (tests) generates docs/COMPATIBILITY.md from the table          |
//! | `types.rs`       | Redis data-type commands strata does not store (LPUSH, SADD, ...)  |
//! |                  | and HTTP requests (`POST`, `Host:`), which close the connection    |
//! | `debug.rs`       | DEBUG (tests only: `--enable-debug-command`)                      |
//!
//! Invariants:
//! * Every complete command in the input gets exactly one reply, in order, except those Redis
//!   itself answers with nothing: empty commands (`*0`, blank inline lines), `SHUTDOWN`, and
//!   commands under `CLIENT REPLY OFF|SKIP`.
//! * A protocol error is answered and closes the connection; nothing after it is executed.
//! * A command with a bulk argument longer than the value limit allows (but within
//!   [`BULK_LEN_DISCARD_MAX`]) is refused with [`ERR_VALUE_TOO_LARGE`] once its bytes have been
//!   read and dropped as they arrived, never buffered: the client sees the error rather than a
//!   connection closed while it is still sending (what Redis does past `proto-max-bulk-len`).
//! * The GET and SET paths allocate nothing: arguments are positions into the input, replies
//!   are written straight into `out` while the engine holds the item.
//!
//! Replies and errors follow Redis 7.0.15 byte for byte where strata claims compatibility;
//! `tests/resp_exec_redis_compat.rs` checks them against a real redis-server. Departures are
//! listed where they happen (one database, strings and hashes only, f64 for INCRBYFLOAT, no RDB) and in
//! docs/COMPATIBILITY.md, generated from the table.

mod bits;
mod call;
pub(crate) mod commandstats;
#[cfg(test)]
mod compatibility;
mod connection;
mod counters;
mod debug;
mod driver;
mod expire;
mod hash_chunks;
mod hash_expiry;
mod hash_rewrite;
mod hashes;
mod held;
mod keyspace;
mod latency;
pub(crate) mod latency_tracking;
mod memory;
mod multi;
mod object;
mod ranges;
mod server;
mod slowlog;
mod strings;
mod table;
#[cfg(test)]
mod tests;
mod types;

use std::time::Instant;

use strata_engine::PREFETCH_KEYS_MAX;
use strata_protocol::resp::{
    errors, parse_bulk_header, parse_command, too_long_at, Arg, Args, Limits, ParseError, Version,
    BULK_LEN_MAX_DEFAULT, INLINE_LEN_MAX_DEFAULT,
};

use crate::context::{Processed, ServerContext, Session};
use crate::stats::PendingCounts;
use driver::{execute, run_known};
use held::Keys;

pub(crate) use call::{alone_and_atomic, rewrite, write_error, write_help, Call};
pub(crate) use latency_tracking::{format_percentile, parse_percentiles, PERCENTILES_DEFAULT};

/// The Redis version strata reports (`HELLO`, `INFO`): the release its replies are checked
/// against, so clients enable exactly the features strata answers like Redis does.
pub const REDIS_VERSION_COMPATIBLE: &str = "7.0.15";

/// Bytes a bulk argument may exceed the largest value by: room for the key-sized arguments of
/// commands that carry no value, so `bulk_len_max` tracks the value limit without cutting keys.
pub const BULK_LEN_MARGIN_BYTES: usize = 64 * 1024;

/// Longest bulk argument strata reads at all: Redis's `proto-max-bulk-len` default, 512 MiB. A
/// longer one is Redis's `-ERR Protocol error: invalid bulk length`, and the connection is
/// closed; one over the value limit but within this is read and dropped as it arrives, and its
/// command refused with [`ERR_VALUE_TOO_LARGE`].
pub const BULK_LEN_DISCARD_MAX: usize = BULK_LEN_MAX_DEFAULT;

/// The reply to a value, or any argument, larger than `--max-value-size` allows: Redis's text
/// for a string over its `proto-max-bulk-len`, naming the strata setting to raise instead.
/// (`CONFIG GET proto-max-bulk-len` reports the same limit.)
pub const ERR_VALUE_TOO_LARGE: &[u8] =
    b"-ERR string exceeds maximum allowed size (max-value-size)\r\n";

/// The reply to a string of `len` bytes over the value limit: Redis's exact reply where Redis
/// refuses it too (past its `proto-max-bulk-len`), else [`ERR_VALUE_TOO_LARGE`].
pub(crate) fn too_large_reply(len: usize) -> &'static [u8] {
    if len > BULK_LEN_DISCARD_MAX {
        errors::ERR_STRING_TOO_LONG
    } else {
        ERR_VALUE_TOO_LARGE
    }
}

/// Most arguments in one command. Redis allows `INT_MAX`; strata bounds it so one `MGET`
/// cannot make the argument list of a connection grow without limit.
pub const ARGS_MAX: usize = 1 << 20;

/// Longest client name (`CLIENT SETNAME`, `HELLO ... SETNAME`) and library name or version
/// (`CLIENT SETINFO`) kept per connection.
pub const CLIENT_NAME_LEN_MAX: usize = 256;

const _: () = assert!(BULK_LEN_MARGIN_BYTES >= strata_engine::KEY_LEN_MAX);
const _: () = assert!(CLIENT_NAME_LEN_MAX <= BULK_LEN_MARGIN_BYTES);
// The largest `--max-value-size` (a segment, 8 MiB) plus the margin stays below it.
const _: () = assert!(
    strata_engine::SEGMENT_SIZE_BYTES_MAX as usize + BULK_LEN_MARGIN_BYTES < BULK_LEN_DISCARD_MAX
);

/// Per-connection state the handlers read and change (everything but the argument list, so a
/// handler can borrow both at once).
#[derive(Debug)]
pub(crate) struct State {
    /// `CLIENT ID`.
    pub client_id: u64,
    /// RESP2 until `HELLO 3`.
    pub version: Version,
    /// False while `requirepass` is set and the client has not authenticated.
    pub authenticated: bool,
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-NAME`.
    pub lib_name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-VER`.
    pub lib_ver: Option<Vec<u8>>,
    /// When the connection was made (`CLIENT INFO age=`).
    pub created: Instant,
    /// `CLIENT REPLY OFF`: replies are dropped until `CLIENT REPLY ON`.
    pub reply_off: bool,
    /// `CLIENT NO-TOUCH ON`: this client's reads do not count as accesses (the index slot's
    /// read count and fetched bit, which merge eviction and memcached's `h` read), TOUCH aside.
    pub no_touch: bool,
    /// `CLIENT REPLY SKIP`: the next command's reply is dropped.
    pub reply_skip_next: bool,
    /// Close once the current reply is written (QUIT, SHUTDOWN).
    pub close: bool,
    /// With `close`: close without writing any reply still buffered (an HTTP request).
    pub hang_up: bool,
    /// A reply was cut short because all connections' output passed the budget and this one
    /// holds the most: close without writing anything (`strings::output_limit_passed`).
    pub over_budget: bool,
    /// The output buffer's capacity when the current `process` call began, all of it published
    /// to the output budget: what the buffer grows beyond it is this call's own.
    pub output_capacity_at_call: usize,
    /// xorshift state for RANDOMKEY.
    pub random_state: u64,
    /// The key of the last large hash (kept in chunks) a hash command of this connection met:
    /// the next hash command on it goes straight to its chunks, held, instead of first finding
    /// it large and asking to run again (`driver::dispatch`). A hint only: a key that holds no
    /// large hash by then runs the command as it is, held, and forgets it.
    pub large_hash_hint: Option<Vec<u8>>,
    /// Room a large hash's command builds its chunk's and owner's new encodings in, kept from
    /// one command to the next (`hash_chunks`): at most `hash_chunks::SCRATCH_KEPT_BYTES_MAX`.
    pub chunk_scratch: Vec<u8>,
    /// GET/SET counts not yet added to the shared counters (published once per batch).
    pub pending: PendingCounts,
    /// A KEYS that waits for, or ran on, the walk thread (`keyspace::keys_walk`): where its
    /// keys are left for it.
    pub keys_walk: Option<std::sync::Arc<keyspace::KeysWalk>>,
    /// The client's address, when the session serves a socket (SLOWLOG, CLIENT INFO).
    pub peer: Option<std::net::SocketAddr>,
    /// The address the client connected to.
    pub local: Option<std::net::SocketAddr>,
    /// GET and SET calls not yet added to `INFO commandstats`.
    pub hot: commandstats::HotCounts,
    /// The transaction being queued, after `MULTI`.
    pub multi: Option<multi::Multi>,
    /// A finished transaction's buffers, for the next `MULTI` to reuse.
    pub spare_multi: Option<multi::Multi>,
    /// Keys under `WATCH`.
    pub watched: Vec<multi::Watched>,
    /// MONITOR's backlog, while the connection monitors.
    pub monitor: Option<std::sync::Arc<crate::monitor::Sink>>,
    /// What other clients see of this one (`CLIENT LIST`), once attached to a connection.
    pub client: Option<std::sync::Arc<crate::clients::Client>>,
    /// The table row of the last command run or queued in this `process` call: published to
    /// `client` once per call (`publish_activity`), not per command.
    pub last_row: Option<usize>,
    /// When the last command of the batch running ended (`None` before its first): the next
    /// one's start, so a pipelined command reads the time-stamp counter once, not twice.
    pub command_ended: Option<quanta::Instant>,
}

/// A Redis connection's protocol state: see the module documentation.
#[derive(Debug)]
pub struct RespSession {
    state: State,
    /// The arguments of the batch of commands being run (see `process_commands`), one entry
    /// per command. It grows to the deepest batch this connection has sent, at most
    /// [`PREFETCH_KEYS_MAX`] entries, and keeps its capacity.
    batch: Vec<Args>,
    /// The table row of each of `batch`'s commands (`None`: a name the table lacks), looked up
    /// once, when the batch is parsed.
    batch_commands: Vec<Option<&'static table::Command>>,
    /// A command refused for a too-long argument, whose bytes are still being dropped.
    discard: Option<Discard>,
    /// A GET or MGET whose keys are on flash waits for I/O threads to read them ahead.
    flash_wait: crate::flash_io::FlashWait,
    /// The parsed rest of the batch whose command waits for flash, from that command on: it
    /// runs from its parsed arguments when the input comes back, not parsed again.
    parked: Option<Parked>,
    /// The registry this session joined (`Session::attach`), which it leaves when dropped.
    clients: Option<std::sync::Arc<crate::clients::Clients>>,
}

impl Drop for RespSession {
    fn drop(&mut self) {
        if let Some(clients) = &self.clients {
            clients.remove(self.state.client_id);
        }
        if let Some(sink) = &self.state.monitor {
            sink.close();
        }
    }
}

/// The commands of a parsed batch from one that waits for flash on: where they start in
/// `RespSession::batch`, and their byte ranges in the input from the waiting command's start
/// (where the connection's input starts when it hands it back: the commands before it were
/// consumed, the waiting one was not).
#[derive(Debug)]
struct Parked {
    first: usize,
    ranges: Vec<(usize, usize)>,
}

/// The commands of `ranges` (the first waits), from the waiting one's `start`, parked.
fn park(first: usize, ranges: &[(usize, usize)], start: usize) -> Parked {
    debug_assert_eq!(ranges.first().map(|&(s, _)| s), Some(start));
    Parked {
        first,
        ranges: ranges
            .iter()
            .map(|&(s, e)| (s - start, e - start))
            .collect(),
    }
}

/// What is left to drop of a command refused for a too-long bulk argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Discard {
    /// Bytes of the current argument still to come (its data and the two bytes after it).
    bytes_left: usize,
    /// Arguments after it, each `$<len>` line, data and two bytes.
    args_left: usize,
}

impl RespSession {
    /// A session for the connection with id `client_id` (from `ServerContext::next_client_id`).
    /// It speaks RESP2 until `HELLO 3` and must `AUTH` first when `requirepass` is set.
    #[must_use]
    pub fn new(client_id: u64) -> Self {
        RespSession {
            state: State {
                client_id,
                version: Version::Resp2,
                authenticated: false,
                name: None,
                lib_name: None,
                lib_ver: None,
                created: Instant::now(),
                reply_off: false,
                no_touch: false,
                reply_skip_next: false,
                close: false,
                hang_up: false,
                over_budget: false,
                output_capacity_at_call: 0,
                random_state: client_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
                large_hash_hint: None,
                chunk_scratch: Vec::new(),
                pending: PendingCounts::default(),
                keys_walk: None,
                peer: None,
                local: None,
                hot: commandstats::HotCounts::default(),
                multi: None,
                spare_multi: None,
                watched: Vec::new(),
                monitor: None,
                client: None,
                last_row: None,
                command_ended: None,
            },
            batch: Vec::new(),
            batch_commands: Vec::new(),
            discard: None,
            flash_wait: Default::default(),
            parked: None,
            clients: None,
        }
    }

    /// The protocol version negotiated so far.
    #[must_use]
    pub fn version(&self) -> Version {
        self.state.version
    }

    /// Parse limits for the next command: the value limit plus a margin for bulks, and Redis's
    /// small pre-authentication limits while `AUTH` is pending.
    fn limits(&self, ctx: &ServerContext) -> Limits {
        Limits {
            args_max: ARGS_MAX,
            bulk_len_max: ctx.settings.value_len_max + BULK_LEN_MARGIN_BYTES,
            bulk_len_discard_max: BULK_LEN_DISCARD_MAX,
            inline_len_max: INLINE_LEN_MAX_DEFAULT,
            auth_pending: !authenticated(&self.state, ctx),
        }
    }
}

/// Copies what other clients see of this one (`CLIENT LIST`) into its registry entry.
fn publish(state: &State) {
    let Some(client) = &state.client else {
        return;
    };
    client.update(|info| {
        info.name.clone_from(&state.name);
        info.lib_name.clone_from(&state.lib_name);
        info.lib_ver.clone_from(&state.lib_ver);
        info.resp = match state.version {
            Version::Resp2 => 2,
            Version::Resp3 => 3,
        };
        info.no_touch = state.no_touch;
    });
    publish_multi(state);
}

/// Publishes what this `process` call did to the client's registry entry: its last command
/// and when (by the coarse clock), and the commands queued after MULTI. Once per call: a
/// pipeline of a hundred commands pays for it once.
fn publish_activity(state: &mut State, ctx: &ServerContext) {
    let Some(row) = state.last_row.take() else {
        return;
    };
    if let Some(client) = &state.client {
        client.ran(row, ctx.clients.coarse_ms());
    }
    publish_multi(state);
}

/// Copies the number of commands queued after MULTI (-1 outside a transaction) into the
/// client's registry entry: one relaxed store.
fn publish_multi(state: &State) {
    if let Some(client) = &state.client {
        let queued = state
            .multi
            .as_ref()
            .map_or(-1, |m| i64::try_from(m.queued()).unwrap_or(i64::MAX));
        client
            .multi
            .store(queued, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether CLIENT PAUSE holds this command now (see `crate::pause`): every command but CLIENT
/// under `ALL`; under `WRITE`, a write (queued or not) or an EXEC whose queue holds one.
fn held_by_pause(held: crate::pause::Held, state: &State, args: &Args, command: &[u8]) -> bool {
    let name = args.get(command, 0).unwrap_or_default();
    let Some(entry) = table::lookup(name) else {
        return held == crate::pause::Held::All;
    };
    match held {
        _ if entry.name == "client" => false,
        crate::pause::Held::All => true,
        crate::pause::Held::Writes => {
            entry.writes
                || (entry.name == "exec" && state.multi.as_ref().is_some_and(multi::queues_a_write))
        }
    }
}

/// Whether the connection may run commands: it authenticated, or no password is set.
fn authenticated(state: &State, ctx: &ServerContext) -> bool {
    state.authenticated || ctx.settings.requirepass.is_none()
}

impl Session for RespSession {
    fn connected(
        &mut self,
        peer: Option<std::net::SocketAddr>,
        local: Option<std::net::SocketAddr>,
    ) {
        (self.state.peer, self.state.local) = (peer, local);
    }

    fn attach(&mut self, ctx: &ServerContext, worker: usize, slot: usize) {
        let client = std::sync::Arc::new(crate::clients::Client::new(
            self.state.client_id,
            (self.state.peer, self.state.local),
            (worker, slot),
            ctx.clients.coarse_ms(),
        ));
        ctx.clients.add(std::sync::Arc::clone(&client));
        self.state.client = Some(client);
        self.clients = Some(std::sync::Arc::clone(&ctx.clients));
        publish(&self.state);
    }

    fn take_pushed(&mut self, out: &mut Vec<u8>) -> bool {
        self.state
            .monitor
            .as_ref()
            .is_some_and(|sink| sink.drain_into(out))
    }

    fn killed(&self) -> bool {
        self.state
            .client
            .as_ref()
            .is_some_and(|c| c.killed.load(std::sync::atomic::Ordering::Acquire))
    }

    fn registry_entry(&self) -> Option<std::sync::Arc<crate::clients::Client>> {
        self.state.client.clone()
    }

    fn input_needed(&self, input: &[u8], ctx: &ServerContext) -> Option<usize> {
        strata_protocol::resp::bytes_needed(input, &self.limits(ctx))
    }

    fn process(&mut self, input: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) -> Processed {
        self.state.output_capacity_at_call = out.capacity();
        let processed = self.process_commands(input, ctx, out);
        self.state.pending.publish(&ctx.stats);
        self.state.hot.publish(&ctx.resp_commands);
        publish_activity(&mut self.state, ctx);
        processed
    }

    fn hang_up(&self) -> bool {
        self.state.hang_up
    }

    fn take_flash_locations(&mut self) -> Option<Vec<u64>> {
        self.flash_wait.take_locations()
    }

    fn take_flash_walk(&mut self) -> Option<crate::flash_io::Walk> {
        self.flash_wait.take_walk()
    }

    fn flash_keys_staged(&mut self) {
        self.flash_wait.staged();
    }
}

impl RespSession {
    /// Handles the complete commands at the start of `input` (see [`Session::process`]).
    ///
    /// Commands are parsed a batch at a time ([`PREFETCH_KEYS_MAX`] at most), the engine starts
    /// loading the first keys of the batch's data commands (index buckets, then records), and
    /// then the batch runs in order: a pipeline's cache misses overlap, and each command is
    /// parsed once. A batch ends after any command that is not a data command with its key
    /// first (`Command::batches`: GET, HSET, DEL, EXPIRE...), because such a command may
    /// change how the next one parses (`AUTH` lifts the pre-authentication limits) or end the
    /// connection, so the bytes after it are parsed only once it has run, as Redis does. A
    /// command that waits for flash leaves the rest of its batch parked as parsed ([`Parked`]):
    /// when the connection hands the input back from it, the batch runs on from there.
    fn process_commands(
        &mut self,
        input: &[u8],
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Processed {
        let mut consumed = match self.run_parked(input, ctx, out) {
            Ok(consumed) => consumed,
            Err(stop) => return stop,
        };
        while consumed < input.len() {
            if self.discard.is_some() {
                let Some(dropped) = self.discard(&input[consumed..], ctx, out) else {
                    return Processed::closing(input.len());
                };
                consumed += dropped;
                if self.discard.is_none() {
                    continue;
                }
                break; // The rest of it is still to come.
            }
            let limits = self.limits(ctx);
            // Each command's input range, and the keys to prefetch.
            let mut ranges = [(0, 0); PREFETCH_KEYS_MAX];
            let mut keys: [&[u8]; PREFETCH_KEYS_MAX] = [&[]; PREFETCH_KEYS_MAX];
            let (mut count, mut keys_len, mut parsed_to) = (0, 0, consumed);
            let stop = loop {
                if count == PREFETCH_KEYS_MAX || parsed_to == input.len() {
                    break None;
                }
                if self.batch.len() == count {
                    self.batch.push(Args::with_capacity(8, 0));
                    self.batch_commands.push(None);
                }
                let rest = &input[parsed_to..];
                let args = &mut self.batch[count];
                let len = match parse_command(rest, &limits, args) {
                    Ok(len) => len,
                    Err(error) => break Some(error),
                };
                debug_assert!(len > 0 && len <= rest.len());
                ranges[count] = (parsed_to, parsed_to + len);
                parsed_to += len;
                if args.is_empty() {
                    // `*0`, `*-1` or an empty inline line: skipped without a reply.
                    continue;
                }
                let command = args.get(rest, 0).and_then(table::lookup);
                self.batch_commands[count] = command;
                count += 1;
                match batch_key(rest, args, command) {
                    Some(key) => {
                        keys[keys_len] = key;
                        keys_len += 1;
                    }
                    None => break None,
                }
            };
            // Inside MULTI the batch's GETs and SETs are only queued (EXEC ends a batch): their
            // keys are not read now.
            if keys_len > 1 && self.state.multi.is_none() {
                ctx.engine.prefetch(&keys[..keys_len]);
            }
            if let Some(closing) = self.run_batch(input, 0, &ranges[..count], ctx, out) {
                return closing;
            }
            consumed = parsed_to;
            match stop {
                None => {}
                Some(ParseError::Incomplete) => break,
                Some(ParseError::TooLong) => consumed = self.discard_from(input, consumed, &limits),
                Some(error) => return protocol_error(error, input, ctx, out),
            }
        }
        debug_assert!(consumed <= input.len());
        Processed::open(consumed)
    }

    /// Runs the batch a flash wait stopped, from the waiting command on, as it was parsed;
    /// returns where its commands end in `input` (0 when none was parked), or what to report
    /// when one closes the connection, waits again, or lies past `input`'s end.
    fn run_parked(
        &mut self,
        input: &[u8],
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Result<usize, Processed> {
        let Some(parked) = self.parked.take() else {
            return Ok(0);
        };
        let end = parked.ranges.last().map_or(0, |&(_, end)| end);
        match self.run_batch(input, parked.first, &parked.ranges, ctx, out) {
            Some(stop) => Err(stop),
            None => Ok(end),
        }
    }

    /// Runs the parsed batch from its command `first` on, whose commands span `ranges` of
    /// `input`, in order; returns what to report if one of them closes the connection (the
    /// commands after it do not run) or waits for flash (they are parked, [`Parked`]).
    fn run_batch(
        &mut self,
        input: &[u8],
        first: usize,
        ranges: &[(usize, usize)],
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Option<Processed> {
        debug_assert!(first + ranges.len() <= self.batch.len());
        // (The parse is no command's time.)
        self.state.command_ended = None;
        // A parked batch the connection hands back in a shorter piece than it was parsed from
        // (its first chunk is small): only the commands the piece holds run or are read ahead.
        let in_piece = ranges.partition_point(|&(_, end)| end <= input.len());
        for (at, (args, &(start, end))) in self.batch[first..].iter().zip(ranges).enumerate() {
            if at == in_piece {
                // The rest stays parked until the connection hands more, from this command
                // (nothing run: it doubles its chunk).
                self.parked = Some(park(first + at, &ranges[at..], start));
                return Some(Processed::open(start));
            }
            let command = &input[start..end];
            let may_wait = ctx.flash_io.is_some() && authenticated(&self.state, ctx);
            if self.state.keys_walk.is_some() {
                // The KEYS that waited for its walk runs now, with the keys it found.
                self.flash_wait.walk_done();
            } else if may_wait {
                if let Some(walk) = keyspace::keys_walk(&mut self.state, ctx, args, command) {
                    // A KEYS over items on flash reads every one of them: it waits, unconsumed,
                    // while the walk thread does, and the worker serves its other connections.
                    self.flash_wait.wait_for_walk(walk);
                    self.parked = Some(park(first + at, &ranges[at..], start));
                    return Some(Processed::flash_wait(start));
                }
            }
            // (Only with a flash tier: parsing the queued commands for their keys is wasted
            // work where nothing can need reading ahead.)
            let must_wait = may_wait && {
                let exec_keys = if self.state.multi.is_some() && is_exec(args, command) {
                    multi::exec_keys(&self.state)
                } else {
                    Vec::new()
                };
                let keys = flash_keys(args, command).chain(exec_keys.iter().map(|k| &k[..]));
                self.flash_wait.must_wait(ctx, keys)
            };
            if must_wait {
                // The command waits, unconsumed, while I/O threads read its keys ahead (in
                // parallel) with those of the commands pipelined behind it; the commands
                // before it have run.
                let behind = self.batch[first..].iter().zip(&ranges[..in_piece]);
                let behind = behind.filter(|&(_, &(s, _))| s > start);
                let behind = behind.flat_map(|(args, &(s, e))| flash_keys(args, &input[s..e]));
                self.flash_wait.read_ahead_too(ctx, behind);
                self.parked = Some(park(first + at, &ranges[at..], start));
                return Some(Processed::flash_wait(start));
            }
            let held = ctx.pause.holds();
            if held.is_some_and(|held| held_by_pause(held, &self.state, args, command)) {
                return Some(Processed::held(start));
            }
            let keys = Keys::one(&ctx.engine, !self.state.no_touch);
            let found = self.batch_commands[first + at];
            execute(&mut self.state, (args, found), command, (ctx, keys), out);
            if self.state.close {
                let over_budget = std::mem::take(&mut self.state.over_budget);
                return Some(Processed {
                    over_budget,
                    ..Processed::closing(end)
                });
            }
        }
        None
    }

    /// Starts dropping the command at `input[start..]`, refused for a too-long argument;
    /// returns where the bytes of it already parsed, which the caller drops, end.
    fn discard_from(&mut self, input: &[u8], start: usize, limits: &Limits) -> usize {
        debug_assert!(self.discard.is_none());
        let too_long = too_long_at(&input[start..], limits).expect("the parser found it");
        self.discard = Some(Discard {
            bytes_left: too_long.discard_len,
            args_left: too_long.args_left,
        });
        start + too_long.consumed
    }

    /// Drops what `input` holds of the command being discarded and, once all of it has gone,
    /// refuses it. Returns the bytes dropped, or `None` after a protocol error in a later
    /// argument's `$<len>` line (answered; the connection must close).
    fn discard(&mut self, input: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) -> Option<usize> {
        let limits = self.limits(ctx);
        let discard = self.discard.as_mut()?;
        let mut dropped = 0;
        loop {
            let take = discard.bytes_left.min(input.len() - dropped);
            discard.bytes_left -= take;
            dropped += take;
            if discard.bytes_left > 0 {
                return Some(dropped); // The rest comes in later reads.
            }
            if discard.args_left == 0 {
                break;
            }
            match parse_bulk_header(&input[dropped..], &limits) {
                Ok((len, header_len)) => {
                    dropped += header_len;
                    discard.bytes_left = len.saturating_add(2);
                    discard.args_left -= 1;
                }
                Err(ParseError::Incomplete) => return Some(dropped),
                Err(error) => {
                    protocol_error(error, input, ctx, out);
                    return None;
                }
            }
        }
        self.discard = None;
        ctx.stats.count_error();
        multi::mark_dirty(&mut self.state);
        let skip = std::mem::take(&mut self.state.reply_skip_next);
        if !self.state.reply_off && !skip {
            out.extend_from_slice(ERR_VALUE_TOO_LARGE);
        }
        Some(dropped)
    }
}

/// Answers a parse error after which the stream cannot be followed; the connection closes.
fn protocol_error(
    error: ParseError,
    input: &[u8],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) -> Processed {
    if let ParseError::Protocol(error) = error {
        error.encode(out);
        ctx.stats.count_error();
    }
    // Any other parse failure is one this session does not know: nothing after it can be
    // trusted either.
    Processed::closing(input.len())
}

/// The keys `command` (parsed as `args`) reads or changes as existing items, which may be on
/// flash: its keys by the command table's key spec (`COMMAND INFO`'s), none for the writes
/// that replace a value whatever it was (the table's `Reads`).
fn flash_keys<'a>(args: &'a Args, command: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let len = args.len();
    let name = args.get(command, 0).unwrap_or_default();
    table::lookup(name)
        .filter(move |c| c.reads_existing(len))
        .into_iter()
        .flat_map(move |c| c.key_positions(len))
        .filter_map(move |position| args.get(command, position))
}

/// Whether `command` (parsed as `args`) is `EXEC`.
fn is_exec(args: &Args, command: &[u8]) -> bool {
    args.get(command, 0)
        .is_some_and(|name| name.eq_ignore_ascii_case(b"exec"))
}

/// The key of a command parsed from `input` that lets a batch go on past it (a data command
/// whose first argument is its key, `Command::batches`); `None` for any other, which ends the
/// batch.
fn batch_key<'a>(
    input: &'a [u8],
    args: &Args,
    command: Option<&'static table::Command>,
) -> Option<&'a [u8]> {
    let Some(&Arg::Input {
        start: key,
        len: key_len,
    }) = args.as_slice().get(1)
    else {
        return None;
    };
    command
        .filter(|command| command.batches)
        .map(|_| &input[key..key + key_len])
}
