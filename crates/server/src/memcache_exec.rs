//! The memcached session: executes memcached text and meta commands against the engine.
//!
//! ```text
//!   input ──► swallow (rest of a refused data block) ──► parse ──► execute ──► reply into `out`
//!                                                          │
//!            ParseError::Reply: exact error, drop bytes ───┤  Incomplete: wait for more input
//!            ParseError::Close: close without a reply  ────┤
//!            ParseError::CrossProtocol: HTTP, hang up  ────┤
//!            ParseError::Binary: binary error, close  ─────┘
//! ```
//!
//! | file             | commands                                                        |
//! |------------------|-----------------------------------------------------------------|
//! | `retrieval.rs`   | get gets gat gats                                               |
//! | `storage.rs`     | set add replace append prepend cas, and too-large stores        |
//! | `keys.rs`        | delete touch                                                    |
//! | `arith.rs`       | incr decr, and memcached's counter rules `ma` shares            |
//! | `admin.rs`       | flush_all version verbosity shutdown                            |
//! | `stats.rs`       | stats, stats settings / items / slabs / sizes / conns / reset   |
//! | `meta.rs`        | mg ms md ma mn me (one submodule each), and their shared parts  |
//! | `lease.rs`       | the stale / win-token state of the meta protocol (`X W Z`)      |
//! | `auth.rs`        | what a connection may do before authenticating (`-Y` auth file) |
//!
//! Invariants:
//! * Every complete request in the input gets exactly the reply memcached 1.6.18 sends for it
//!   (none for `quit`, `noreply` and quiet-mode successes), in request order.
//! * A refused data block (too large, or after a meta flag error) is discarded byte for byte,
//!   even when it arrives in later reads: `swallow_len` counts what is still to come.
//! * The GET path allocates nothing: hits are written into `out` from inside the engine's read
//!   closure, while the item is borrowed.
//! * A write the engine refused (out of memory, failed persist) is never acknowledged.
//! * With `--memcache-auth-file`, nothing reaches the engine before the connection has
//!   authenticated (`gate` is `None` only then, or when no file is set).
//!
//! `tests/memcache_differential.rs` runs the same scripts through this session and a real
//! memcached 1.6.18 and compares the replies byte for byte. Departures from memcached are listed
//! where they happen; the main ones: `stats` reports strata's own figures, `mg` refuses `l` and
//! `me` leaves out `la=` because no access time is kept, and the meta `E` flag is honoured as
//! later releases do (1.6.18 refuses it); see `meta.rs`.

mod admin;
mod arith;
pub mod auth;
mod dump;
mod keys;
pub(crate) mod lease;
mod meta;
mod retrieval;
mod stats;
mod storage;
#[cfg(test)]
mod tests;

use strata_engine::{Expiry, ItemRef, Kind, WriteError, PREFETCH_KEYS_MAX};
use strata_protocol::memcache::{
    encode, parse, Get, Limits, LruCrawler, ParseError, Request, SetMode, Store, StoreCommand,
};

use crate::context::{Processed, ServerContext, Session};
use crate::stats::{command_index, PendingCounts};

/// The memcached release whose replies strata reproduces.
pub const MEMCACHED_VERSION_COMPATIBLE: &str = "1.6.18";

/// What `version` and `stats` report: the compatible memcached release first, so clients that
/// parse `major.minor.patch` see 1.6.18, then strata's own version.
pub const VERSION: &str = concat!("1.6.18-strata-", env!("CARGO_PKG_VERSION"));

/// Largest expiry that is relative to now, in seconds (30 days, memcached's
/// `REALTIME_MAXDELTA`); larger values are absolute Unix times.
pub const EXPTIME_RELATIVE_SECS_MAX: i64 = 60 * 60 * 24 * 30;

/// Longest key, decoded: base64 keys (meta `b` flag) are decoded into a buffer of this size.
pub const KEY_LEN_MAX: usize = strata_engine::KEY_LEN_MAX;

const _: () = assert!(strata_protocol::memcache::KEY_LEN_MAX_DEFAULT <= KEY_LEN_MAX);

/// `SERVER_ERROR` for a write the engine could not make durable; the engine refuses writes
/// until it is reopened, so the message tells the operator what to do.
pub const SERVER_ERROR_PERSIST: &[u8] =
    b"SERVER_ERROR persist failed; writes refused until strata restarts\r\n";

/// `SERVER_ERROR` for any other refused write (a key the engine does not accept).
pub const SERVER_ERROR_WRITE: &[u8] = b"SERVER_ERROR write refused by the store\r\n";

/// One memcached connection's protocol state.
#[derive(Debug)]
pub struct MemcacheSession {
    /// Bytes of a refused data block still to discard before the next command.
    swallow_len: usize,
    /// Scratch space for decoding base64 keys (meta `b` flag), so decoding allocates nothing.
    key_scratch: [u8; KEY_LEN_MAX],
    /// GET/SET counts not yet added to the shared counters (published once per batch).
    pending: PendingCounts,
    /// A multiget stopped at the output soft limit: it stays, unconsumed, at the front of the
    /// input and resumes from its next key in the next call (`retrieval.rs`).
    get_paused: Option<retrieval::Paused>,
    /// An `lru_crawler metadump` that paused: where it resumes (`dump.rs`), the request
    /// staying unconsumed at the front of the input as a paused multiget does.
    metadump_cursor: Option<u64>,
    /// The input was an HTTP request: close without writing what is buffered.
    hang_up: bool,
    /// `Some` until the client has authenticated, when the server has an auth file
    /// (`--memcache-auth-file`): requests go through the gate instead of the parser.
    gate: Option<auth::Gate>,
    /// Output length below which a multiget of the current `process` call cannot pass an output
    /// limit (`retrieval::stop_len`).
    output_stop_len: usize,
    /// A get whose keys are on flash waits for I/O threads to read them ahead.
    flash_wait: crate::flash_io::FlashWait,
    /// The connection's peer and local addresses (`Session::connected`).
    addresses: (Option<std::net::SocketAddr>, Option<std::net::SocketAddr>),
    /// What `CLIENT LIST` and `stats conns` see of it (it leaves the registry when dropped).
    client: Option<crate::clients::Registration>,
}

impl Default for MemcacheSession {
    fn default() -> Self {
        Self::new()
    }
}

impl MemcacheSession {
    /// A session for a new connection to a server without an auth file.
    pub fn new() -> Self {
        MemcacheSession {
            swallow_len: 0,
            key_scratch: [0; KEY_LEN_MAX],
            pending: PendingCounts::default(),
            get_paused: None,
            metadump_cursor: None,
            hang_up: false,
            gate: None,
            output_stop_len: 0,
            flash_wait: Default::default(),
            addresses: (None, None),
            client: None,
        }
    }

    /// A session for a new connection to the server `ctx` serves: locked until the client
    /// authenticates when the server has an auth file.
    pub fn for_server(ctx: &ServerContext) -> Self {
        MemcacheSession {
            gate: ctx
                .settings
                .memcache_auth
                .as_ref()
                .map(|_| auth::Gate::Line),
            ..Self::new()
        }
    }

    /// The session factory the network core calls for each memcached connection.
    pub fn factory(ctx: &ServerContext) -> Box<dyn Session> {
        Box::new(Self::for_server(ctx))
    }

    /// Discards up to `swallow_len` bytes from the front of `input`; returns how many.
    fn swallow(&mut self, input: &[u8]) -> usize {
        let dropped = self.swallow_len.min(input.len());
        self.swallow_len -= dropped;
        dropped
    }

    /// Runs a retrieval, or resumes the one that paused; returns whether it paused (again).
    fn get(&mut self, get: Get<'_>, ctx: &ServerContext, out: &mut Vec<u8>) -> bool {
        let (paused, stop_len) = (self.get_paused, self.output_stop_len);
        self.get_paused = retrieval::execute(get, paused, ctx, out, stop_len, &mut self.pending);
        self.get_paused.is_some()
    }

    /// Runs a request that ended a batch (any but a get or a store, which run in batches:
    /// [`Batch`]); returns whether to close the connection.
    fn execute(&mut self, request: Request<'_>, ctx: &ServerContext, out: &mut Vec<u8>) -> bool {
        // Whatever runs may read the counters (`stats`): bring them up to date.
        self.pending.publish(&ctx.stats);
        match request {
            Request::Get(_) | Request::Store(_) => {
                unreachable!("gets and stores run in a batch, not here")
            }
            Request::TooLarge(too_large) => {
                storage::too_large(too_large, &mut self.key_scratch, ctx, out);
                self.swallow_len = too_large.swallow_len;
            }
            Request::Delete(delete) => keys::delete(delete, ctx, out),
            Request::Touch(touch) => keys::touch(touch, ctx, out),
            Request::Arith(request) => arith::execute(request, ctx, out),
            Request::FlushAll(flush) => admin::flush_all(flush, ctx, out),
            Request::Version => admin::version(ctx, out),
            Request::Verbosity(verbosity) => admin::verbosity(verbosity, ctx, out),
            Request::CacheMemlimit(limit) => admin::cache_memlimit(limit, ctx, out),
            Request::LruCrawler(_) => unreachable!("a dump runs in process_requests: it pauses"),
            Request::Quit => return true,
            Request::Stats(request) => stats::execute(request, ctx, out),
            Request::Shutdown(mode) => admin::shutdown(mode, ctx, out),
            Request::MetaGet(get) => meta::get::execute(get, &mut self.key_scratch, ctx, out),
            Request::MetaSet(set) => meta::set::execute(set, &mut self.key_scratch, ctx, out),
            Request::MetaDelete(delete) => {
                meta::delete::execute(delete, &mut self.key_scratch, ctx, out);
            }
            Request::MetaArith(request) => {
                meta::arith::execute(request, &mut self.key_scratch, ctx, out);
            }
            Request::MetaNoop => {
                ctx.stats.count_command(command_index("meta"));
                out.extend_from_slice(encode::MN);
            }
            Request::MetaDebug(debug) => meta::debug(debug, &mut self.key_scratch, ctx, out),
            _ => out.extend_from_slice(encode::ERROR),
        }
        false
    }
}

impl Session for MemcacheSession {
    fn connected(
        &mut self,
        peer: Option<std::net::SocketAddr>,
        local: Option<std::net::SocketAddr>,
    ) {
        self.addresses = (peer, local);
    }

    fn attach(&mut self, ctx: &ServerContext, worker: usize, slot: usize) {
        let client = crate::clients::Client::memcache(
            ctx.next_client_id(),
            self.addresses,
            (worker, slot),
            ctx.clients.coarse_ms(),
        );
        self.client = Some(crate::clients::Registration::new(&ctx.clients, client));
    }

    fn killed(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|r| r.client.killed.load(std::sync::atomic::Ordering::Acquire))
    }

    fn registry_entry(&self) -> Option<std::sync::Arc<crate::clients::Client>> {
        self.client
            .as_ref()
            .map(|r| std::sync::Arc::clone(&r.client))
    }

    fn input_needed(&self, input: &[u8], ctx: &ServerContext) -> Option<usize> {
        strata_protocol::memcache::bytes_needed(input, &limits(ctx))
    }

    fn process(&mut self, input: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) -> Processed {
        if let Some(registration) = &self.client {
            registration.client.active(ctx.clients.coarse_ms());
        }
        if self.gate.is_some() {
            return self.process_locked(input, ctx, out);
        }
        self.output_stop_len = retrieval::stop_len(ctx, out);
        let processed = self.process_requests(input, ctx, out);
        self.pending.publish(&ctx.stats);
        processed
    }

    fn hang_up(&self) -> bool {
        self.hang_up
    }

    /// memcached streams multigets: past the output budget they pause like at the soft limit.
    fn pauses_over_budget(&self) -> bool {
        true
    }

    fn take_flash_locations(&mut self) -> Option<Vec<u64>> {
        self.flash_wait.take_locations()
    }

    fn flash_keys_staged(&mut self) {
        self.flash_wait.staged();
    }
}

impl MemcacheSession {
    /// Handles input before the client has authenticated ([`auth`]), then, once it has, the
    /// requests after its authentication as any other input.
    #[cold]
    #[inline(never)]
    fn process_locked(
        &mut self,
        input: &[u8],
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Processed {
        let (Some(gate), Some(credentials)) = (&mut self.gate, &ctx.settings.memcache_auth) else {
            unreachable!("a session is locked only on a server with an auth file");
        };
        let (consumed, passage) = gate.process(input, ctx, credentials, out);
        match passage {
            auth::Passage::Locked => Processed::open(consumed),
            auth::Passage::Close => Processed::closing(consumed),
            auth::Passage::Authenticated => {
                self.gate = None;
                let rest = self.process(&input[consumed..], ctx, out);
                Processed {
                    consumed: consumed + rest.consumed,
                    ..rest
                }
            }
        }
    }

    /// Handles the complete requests at the start of `input` (see [`Session::process`]).
    ///
    /// Requests are parsed a batch at a time ([`PREFETCH_KEYS_MAX`] at most), the engine starts
    /// loading the batch's keys, and then the batch runs in order, so that the cache misses of
    /// a pipeline overlap and each request is parsed once. A batch ends after any request that
    /// is not a get or a store: what such a request does (swallow a refused data block, close
    /// the connection) must happen before the bytes after it are parsed. A multiget that pauses
    /// at the output limit ends the batch too, unconsumed: it is parsed again and resumes once
    /// the client has read.
    fn process_requests(
        &mut self,
        input: &[u8],
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Processed {
        let limits = limits(ctx);
        let mut consumed = self.swallow(input);
        while self.swallow_len == 0 && consumed < input.len() {
            let mut batch = Batch::default();
            let (parsed_to, batch_end) = batch.fill(input, consumed, &limits);
            batch.prefetch(ctx);
            consumed = match self.run_hot(&batch, consumed, ctx, out) {
                Ok(consumed) => consumed,
                Err(stop) => return stop,
            };
            if let BatchEnd::Other(request) = batch_end {
                // consumed is where it starts: it may wait, unconsumed, like a get.
                if ctx.flash_io.is_some() && self.flash_wait.must_wait(ctx, flash_key(&request)) {
                    return Processed::flash_wait(consumed);
                }
                if let Request::LruCrawler(LruCrawler::Metadump { class_one }) = request {
                    let (cursor, stop_len) = (&mut self.metadump_cursor, self.output_stop_len);
                    if dump::metadump(cursor, class_one, ctx, out, stop_len) {
                        // Resumed, parsed again, once the connection has written the output.
                        return Processed::paused(consumed);
                    }
                    consumed = parsed_to;
                } else {
                    consumed = parsed_to;
                    if self.execute(request, ctx, out) {
                        return Processed::closing(consumed);
                    }
                }
            }
            debug_assert_eq!(consumed, parsed_to);
            consumed = match self.after_batch(batch_end, consumed, ctx, out) {
                Ok(Some(consumed)) => consumed,
                Ok(None) => break,
                Err(stop) => return stop,
            };
            consumed += self.swallow(&input[consumed..]);
        }
        debug_assert!(consumed <= input.len());
        Processed::open(consumed)
    }

    /// Runs the gets and stores of `batch` from `consumed` on; returns where they end, or what
    /// to report when one waits for flash reads or pauses at the output limit (unconsumed).
    fn run_hot(
        &mut self,
        batch: &Batch<'_>,
        mut consumed: usize,
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Result<usize, Processed> {
        for (request, end) in batch.hot() {
            match request {
                Hot::Get(get) => {
                    // A get, gets or gat of keys on flash, from its first key: it waits,
                    // unconsumed, while I/O threads read those keys ahead (in parallel);
                    // the requests before it have run and their replies go out meanwhile.
                    if self.get_paused.is_none()
                        && ctx.flash_io.is_some()
                        && self.flash_wait.must_wait(ctx, get.keys.iter())
                    {
                        // The gets pipelined behind it are read ahead in the same wait.
                        let behind =
                            batch
                                .hot()
                                .filter(|&(_, e)| e > end)
                                .filter_map(|(request, _)| match request {
                                    Hot::Get(get) => Some(get.keys),
                                    Hot::Store(_) => None,
                                });
                        self.flash_wait
                            .read_ahead_too(ctx, behind.flat_map(|keys| keys.iter()));
                        return Err(Processed::flash_wait(consumed));
                    }
                    if self.get(get, ctx, out) {
                        // Resumed once the connection has written the output.
                        return Err(Processed::paused(consumed));
                    }
                }
                Hot::Store(store) => {
                    // add, replace, append, prepend and cas read the item they change.
                    if store.command != StoreCommand::Set
                        && ctx.flash_io.is_some()
                        && self.flash_wait.must_wait(ctx, [store.key])
                    {
                        return Err(Processed::flash_wait(consumed));
                    }
                    storage::execute(store, ctx, out, &mut self.pending);
                }
            }
            consumed = end;
        }
        Ok(consumed)
    }

    /// After a batch's requests ran: answers the parse error that ended it, if any. Returns
    /// where to go on from, `None` when the rest of the request is still to come, or what to
    /// report when the connection must close.
    fn after_batch(
        &mut self,
        batch_end: BatchEnd<'_>,
        mut consumed: usize,
        ctx: &ServerContext,
        out: &mut Vec<u8>,
    ) -> Result<Option<usize>, Processed> {
        match batch_end {
            BatchEnd::Open | BatchEnd::Other(_) => {}
            BatchEnd::Error(ParseError::Reply {
                reply,
                consumed: used,
                swallow_len,
            }) => {
                ctx.stats.count_error();
                out.extend_from_slice(reply);
                consumed += used;
                self.swallow_len = swallow_len;
            }
            BatchEnd::Error(ParseError::Incomplete) => return Ok(None),
            BatchEnd::Error(ParseError::Binary { opcode, opaque }) => {
                ctx.stats.count_error();
                encode::binary_not_supported(opcode, opaque, out);
                return Err(Processed::closing(consumed));
            }
            BatchEnd::Error(error) => {
                self.hang_up = error == ParseError::CrossProtocol;
                return Err(Processed::closing(consumed));
            }
        }
        Ok(Some(consumed))
    }
}

/// The key a request other than a get or a store may read on flash: those of the commands that
/// read or change an existing item. A base64 meta key is left out (it is decoded when the
/// command runs, which then reads flash on the worker).
fn flash_key<'a>(request: &Request<'a>) -> Option<&'a [u8]> {
    match *request {
        Request::Delete(delete) => Some(delete.key),
        Request::Touch(touch) => Some(touch.key),
        Request::Arith(arith) => Some(arith.key),
        Request::MetaGet(get) if !get.flags.key_base64() => Some(get.key),
        Request::MetaDelete(delete) if !delete.flags.key_base64() => Some(delete.key),
        Request::MetaArith(arith) if !arith.flags.key_base64() => Some(arith.key),
        Request::MetaSet(set)
            if !set.flags.key_base64()
                && (set.mode != SetMode::Set || set.flags.compare_cas.is_some()) =>
        {
            Some(set.key)
        }
        Request::MetaDebug(debug) if !debug.key_base64 => Some(debug.key),
        _ => None,
    }
}

/// Gets and stores parsed ahead of running them, with their keys.
struct Batch<'a> {
    /// The gets and stores, each with the input offset just past it.
    hot: [Option<(Hot<'a>, usize)>; PREFETCH_KEYS_MAX],
    len: usize,
    keys: [&'a [u8]; PREFETCH_KEYS_MAX],
    keys_len: usize,
}

/// The requests a batch goes on past (kept apart from [`Request`], which is several times
/// larger, so that batching them copies little).
#[derive(Clone, Copy)]
enum Hot<'a> {
    Get(Get<'a>),
    Store(Store<'a>),
}

/// Why a batch stopped growing.
enum BatchEnd<'a> {
    /// It is full, or the input is used up.
    Open,
    /// A request of another kind, to run after the batch.
    Other(Request<'a>),
    /// The parse failed where the batch ends.
    Error(ParseError),
}

impl Default for Batch<'_> {
    fn default() -> Self {
        Batch {
            hot: [None; PREFETCH_KEYS_MAX],
            len: 0,
            keys: [&[]; PREFETCH_KEYS_MAX],
            keys_len: 0,
        }
    }
}

impl<'a> Batch<'a> {
    /// Parses requests from `input[from..]` into the batch until it is full, the input is used
    /// up, a request other than a get or a store ends it, or the parse fails. Returns the input
    /// offset just past the last request parsed, and why the batch ended.
    fn fill(&mut self, input: &'a [u8], from: usize, limits: &Limits) -> (usize, BatchEnd<'a>) {
        let mut parsed_to = from;
        while self.len < PREFETCH_KEYS_MAX && parsed_to < input.len() {
            let parsed = match parse(&input[parsed_to..], limits) {
                Ok(parsed) => parsed,
                Err(error) => return (parsed_to, BatchEnd::Error(error)),
            };
            parsed_to += parsed.consumed;
            let hot = match parsed.request {
                Request::Get(get) => {
                    for key in get.keys.iter() {
                        self.push_key(key);
                    }
                    Hot::Get(get)
                }
                Request::Store(store) => {
                    self.push_key(store.key);
                    Hot::Store(store)
                }
                other => return (parsed_to, BatchEnd::Other(other)),
            };
            self.hot[self.len] = Some((hot, parsed_to));
            self.len += 1;
        }
        (parsed_to, BatchEnd::Open)
    }

    fn push_key(&mut self, key: &'a [u8]) {
        if let Some(slot) = self.keys.get_mut(self.keys_len) {
            *slot = key;
            self.keys_len += 1;
        }
    }

    /// Asks the engine to start loading the keys' index buckets and records.
    fn prefetch(&self, ctx: &ServerContext) {
        if self.keys_len > 1 {
            ctx.engine.prefetch(&self.keys[..self.keys_len]);
        }
    }

    /// The gets and stores in order, each with the input offset just past it.
    fn hot(&self) -> impl Iterator<Item = (Hot<'a>, usize)> + '_ {
        self.hot[..self.len].iter().flatten().copied()
    }
}

/// The parser limits from the server's settings.
fn limits(ctx: &ServerContext) -> Limits {
    Limits {
        key_len_max: ctx.settings.memcache_key_len_max.min(KEY_LEN_MAX),
        value_len_max: ctx.settings.value_len_max,
        ..Limits::default()
    }
}

/// The current Unix time in milliseconds on the engine's clock, which expiry is measured
/// against.
fn now_ms(ctx: &ServerContext) -> u64 {
    ctx.engine.now_ms()
}

/// Converts a memcached expiry to the engine's: 0 never; negative already expired; up to 30
/// days relative seconds; larger an absolute Unix time (in the past: already expired). The
/// clock (`now_ms`) is read only for a relative expiry, so a store without one costs no read.
///
/// memcached reads expiries into a 32-bit `int32_t` (`safe_strtol`), so larger numbers wrap:
/// `4000000000` becomes negative and expires at once, `4294967396` becomes 100 seconds. strata
/// wraps them the same way so that clients see the same items live and die.
fn expiry(exptime: i64, now_ms: impl FnOnce() -> u64) -> Expiry {
    /// A time certainly in the past, so the engine drops the item at once.
    const EXPIRED_AT_MS: u64 = 1;
    let low = exptime.to_le_bytes();
    let exptime = i64::from(i32::from_le_bytes([low[0], low[1], low[2], low[3]]));
    match exptime {
        0 => Expiry::Never,
        secs if secs < 0 => Expiry::AtMs(EXPIRED_AT_MS),
        secs if secs <= EXPTIME_RELATIVE_SECS_MAX => {
            Expiry::AtMs(now_ms().saturating_add(secs.unsigned_abs() * 1000))
        }
        secs => Expiry::AtMs(secs.unsigned_abs().saturating_mul(1000).max(EXPIRED_AT_MS)),
    }
}

/// The absolute expiry (Unix ms) `expiry` gives an item that now expires at `current`.
fn expires_at(expiry: Expiry, current: Option<u64>) -> Option<u64> {
    match expiry {
        Expiry::Never => None,
        Expiry::AtMs(at_ms) => Some(at_ms),
        Expiry::Keep => current,
    }
}

/// Seconds an item has left, as memcached's meta `t` flag reports it: -1 for never, rounded up
/// so an item set with `T30` reports 30 right away.
fn ttl_secs(expires_at_ms: Option<u64>, now_ms: u64) -> i64 {
    match expires_at_ms {
        None => -1,
        Some(at) => i64::try_from(at.saturating_sub(now_ms).div_ceil(1000)).unwrap_or(i64::MAX),
    }
}

/// memcached sees only strings: an item of another kind (a Redis hash) reads as absent, so
/// gets miss it, `set` and `add` replace it, and `append`, `incr`, `cas`, `touch`, `mg`, `ma`,
/// `md` and `ms` in append mode find nothing to change. (`delete` acts on any kind.)
pub(crate) fn strings_only(item: Option<ItemRef<'_>>) -> Option<ItemRef<'_>> {
    item.filter(|item| item.kind == Kind::String)
}

/// The `SERVER_ERROR` for a write the engine refused.
fn write_error_reply(error: &WriteError) -> &'static [u8] {
    match error {
        WriteError::TooLarge { .. } => encode::SERVER_ERROR_TOO_LARGE,
        WriteError::OutOfMemory => encode::SERVER_ERROR_OUT_OF_MEMORY,
        WriteError::Persist(_) => SERVER_ERROR_PERSIST,
        WriteError::KeyEmpty | WriteError::KeyTooLong { .. } => encode::CLIENT_ERROR_BAD_FORMAT,
        _ => SERVER_ERROR_WRITE,
    }
}

/// Appends `reply` unless the request asked for `noreply`.
fn reply(out: &mut Vec<u8>, reply: &[u8], noreply: bool) {
    if !noreply {
        out.extend_from_slice(reply);
    }
}

/// Logs a refused write once per request, at the level its cause deserves, and answers it.
fn write_failed(error: &WriteError, ctx: &ServerContext, out: &mut Vec<u8>, noreply: bool) {
    if let WriteError::Persist(_) = error {
        tracing::error!(%error, "memcache write not acknowledged");
    }
    ctx.stats.count_error();
    reply(out, write_error_reply(error), noreply);
}
