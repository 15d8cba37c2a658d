//! What every connection handler shares: the engine, settings, counters.
//!
//! The network core (listeners, event loops, buffers) knows no protocol: for each readable
//! connection it hands the buffered input to the connection's [`Session`] and writes back what
//! the session appended to the output buffer. The memcached and RESP sessions
//! (`memcache_exec`, `resp_exec`) know no sockets. Both sides meet here.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mio::Waker;
use strata_engine::Engine;

use crate::auth::Credentials;
use crate::health::Health;
use crate::stats::ServerStats;

/// Settings the protocol sessions need (the full configuration lives in `config`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Largest value a client may store.
    pub value_len_max: usize,
    /// Largest memcached key (memcached's limit: 250).
    pub memcache_key_len_max: usize,
    /// Largest Redis key.
    pub resp_key_len_max: usize,
    /// Redis `requirepass`; `None` means no AUTH required.
    pub requirepass: Option<String>,
    /// memcached auth file entries (`--memcache-auth-file`); `None` means connections start
    /// authenticated, as in memcached without `-Y`.
    pub memcache_auth: Option<Arc<Credentials>>,
    /// Worker threads.
    pub threads: usize,
    /// Most client connections.
    pub connections_max: usize,
    /// Close idle connections after this many seconds (0: never).
    pub idle_timeout_secs: u64,
    /// `slowlog-log-slower-than` at start, microseconds (`ServerContext::slowlog` holds the
    /// current value).
    pub slowlog_slower_than_us: i64,
    /// `slowlog-max-len` at start.
    pub slowlog_max_len: usize,
    /// Whether `flush_all` / `FLUSHALL` are allowed.
    pub flush_enabled: bool,
    /// TCP port of the memcached listener, if any (for INFO/stats).
    pub memcache_port: Option<u16>,
    /// TCP port of the RESP listener, if any.
    pub resp_port: Option<u16>,
    /// Durability name (`none`, `interval=MS`, `sync`).
    pub durability: String,
    /// How much output a connection may buffer.
    pub output: OutputLimits,
    /// Whether the RESP `DEBUG` command runs (`--enable-debug-command`; tests only).
    pub debug_command_enabled: bool,
    /// How much output memory all connections together may hold ([`OutputBudget`]).
    pub client_output_bytes_max: usize,
    /// The latency monitor's and histograms' settings at start.
    pub latency: crate::config::LatencySettings,
    /// The `--config` file, which CONFIG REWRITE rewrites (`None`: started without one).
    pub config_file: Option<std::path::PathBuf>,
    /// Tests only (`STRATA_TEST_EXEC_STALL_MS`): EXEC sleeps this long halfway through its
    /// commands, after logging that it does, so a crash test can `kill -9` it there.
    pub exec_stall_for_tests_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            value_len_max: 1 << 20,
            memcache_key_len_max: 250,
            resp_key_len_max: 64 * 1024,
            requirepass: None,
            memcache_auth: None,
            threads: 1,
            connections_max: 1024,
            idle_timeout_secs: 0,
            slowlog_slower_than_us: crate::slowlog::SLOWER_THAN_US_DEFAULT,
            slowlog_max_len: crate::slowlog::MAX_LEN_DEFAULT,
            flush_enabled: true,
            memcache_port: None,
            resp_port: None,
            durability: "none".to_string(),
            output: OutputLimits::new(OUTPUT_BUFFERED_BYTES_HARD_DEFAULT),
            debug_command_enabled: false,
            client_output_bytes_max: OUTPUT_BUFFERED_BYTES_HARD_DEFAULT,
            exec_stall_for_tests_ms: 0,
            latency: crate::config::LatencySettings {
                tracking: true,
                ..Default::default()
            },
            config_file: None,
        }
    }
}

/// Default [`OutputLimits::buffered_bytes_hard`]: Redis's hard limit for the clients it does
/// limit (replicas).
pub const OUTPUT_BUFFERED_BYTES_HARD_DEFAULT: usize = 256 << 20;

/// How much output one connection's buffer may hold: what the session appended and the socket
/// has not yet taken, plus any written prefix not yet reclaimed (the memory the buffer holds).
///
/// The connection checks these between session calls; the sessions check them while they
/// build a reply with many values (MGET, KEYS, SCAN, a memcached multiget), so one request
/// never takes the buffer past a limit by more than one value:
/// - past `buffered_bytes_soft` the connection reads no more input until the client has read
///   its replies, and a memcached multiget stops where it is and resumes from its next key
///   once the buffer has drained (memcached streams such replies);
/// - past `buffered_bytes_hard` the connection is closed without writing what it holds, and a
///   Redis multi-key reply stops being built and ends the batch (Redis's
///   `client-output-buffer-limit` hard limit, counted as
///   `client_output_buffer_limit_disconnections`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimits {
    /// Buffered output above which input waits and a memcached multiget pauses.
    pub buffered_bytes_soft: usize,
    /// Buffered output above which the connection is closed.
    pub buffered_bytes_hard: usize,
}

impl OutputLimits {
    /// The soft limit is a quarter of the hard one (Redis's replica class: 256 MiB / 64 MiB).
    pub const SOFT_DIVISOR: usize = 4;

    /// Limits closing a connection past `buffered_bytes_hard`.
    pub fn new(buffered_bytes_hard: usize) -> Self {
        let limits = OutputLimits {
            buffered_bytes_soft: buffered_bytes_hard / Self::SOFT_DIVISOR,
            buffered_bytes_hard,
        };
        assert!(limits.buffered_bytes_soft < limits.buffered_bytes_hard);
        limits
    }

    /// Whether `out` holds more than the soft limit.
    pub fn past_soft(&self, out: &[u8]) -> bool {
        out.len() > self.buffered_bytes_soft
    }

    /// Whether `out` holds more than the hard limit.
    pub fn past_hard(&self, out: &[u8]) -> bool {
        out.len() > self.buffered_bytes_hard
    }
}

/// The connection limits CONFIG SET changes while running: the idle timeout (`timeout`) and
/// the output limits (`client-output-buffer-limit`'s normal hard limit, and its soft quarter).
/// Read per pass and per reply as two relaxed loads; `Settings` keeps the values at start.
#[derive(Debug)]
pub struct LiveLimits {
    idle_timeout_secs: AtomicU64,
    output_bytes_soft: AtomicUsize,
    output_bytes_hard: AtomicUsize,
}

impl LiveLimits {
    /// The limits `settings` start with.
    pub fn new(settings: &Settings) -> Self {
        LiveLimits {
            idle_timeout_secs: AtomicU64::new(settings.idle_timeout_secs),
            output_bytes_soft: AtomicUsize::new(settings.output.buffered_bytes_soft),
            output_bytes_hard: AtomicUsize::new(settings.output.buffered_bytes_hard),
        }
    }

    /// Seconds without input after which a connection is closed (0: never).
    pub fn idle_timeout_secs(&self) -> u64 {
        self.idle_timeout_secs.load(Ordering::Relaxed)
    }

    /// [`LiveLimits::idle_timeout_secs`] as a duration, `None` for never.
    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        let secs = self.idle_timeout_secs();
        (secs > 0).then(|| std::time::Duration::from_secs(secs))
    }

    /// Sets the idle timeout (`CONFIG SET timeout`).
    pub fn set_idle_timeout_secs(&self, secs: u64) {
        self.idle_timeout_secs.store(secs, Ordering::Relaxed);
    }

    /// The output limits now (a pass may see the soft limit of a change and the hard one of
    /// the one before: both are valid limits, and the next pass sees the pair).
    pub fn output(&self) -> OutputLimits {
        OutputLimits {
            buffered_bytes_soft: self.output_bytes_soft.load(Ordering::Relaxed),
            buffered_bytes_hard: self.output_bytes_hard.load(Ordering::Relaxed),
        }
    }

    /// Sets the hard output limit, and the soft one to its quarter ([`OutputLimits::new`]).
    pub fn set_output_bytes_hard(&self, bytes: usize) {
        let limits = OutputLimits::new(bytes);
        self.output_bytes_soft
            .store(limits.buffered_bytes_soft, Ordering::Relaxed);
        self.output_bytes_hard
            .store(limits.buffered_bytes_hard, Ordering::Relaxed);
    }
}

/// Capacity of the output buffer every connection starts with. The budget does not count it:
/// it is a fixed cost of `max-connections`, and a connection whose replies stay this small
/// never reallocates its buffer, so it never touches the budget's shared counters.
pub const OUTPUT_BUFFER_BYTES_BASE: usize = 16 << 10;

/// Output memory a buffer of `capacity` bytes holds against the [`OutputBudget`].
pub fn output_held_bytes(capacity: usize) -> usize {
    capacity.saturating_sub(OUTPUT_BUFFER_BYTES_BASE)
}

/// The output memory all connections together may hold (`--client-output-memory`, the idea of
/// Redis's `maxmemory-clients` applied to output buffers), and what they hold now.
///
/// What counts is memory: each output buffer's capacity beyond [`OUTPUT_BUFFER_BYTES_BASE`],
/// including replies already written but not yet reclaimed and capacity kept after a large
/// reply (a drained buffer over `connection::BUFFER_BYTES_RETAINED_MAX` shrinks back at the
/// worker's next sweep that finds it unused, or at once while the total with the read
/// buffers' memory, `strata_client_input_bytes`, is past half the budget; a read buffer kept
/// after a large request shrinks the same way).
///
/// Without locks and without shared writes per request:
/// - a connection publishes its held bytes into `held_bytes` only when its buffer's capacity
///   changes (a reallocation, rare: capacity doubles as a reply grows and shrinks after a
///   large one drains), comparing a plain field on every pass;
/// - a session building a reply checks the budget only once its buffer has grown during the
///   current call, adding that unpublished growth to the published total;
/// - each worker publishes the held bytes of its largest connection that may be closed
///   (Redis connections; memcached ones pause instead), so whoever finds the budget passed
///   can tell whether it holds the most (then it closes itself) or which worker holds the
///   connection that does (then it asks that worker, through a flag and its waker, to close
///   that connection, and carries on).
///
/// Growth still in flight on other workers is not yet published, so the total can pass the
/// budget by about one buffer doubling per worker building a reply at that moment.
pub struct OutputBudget {
    /// Most bytes all connections' output buffers may hold together (CONFIG SET
    /// maxmemory-clients changes it).
    limit_bytes: AtomicUsize,
    /// What they hold, as published.
    held_bytes: AtomicUsize,
    /// One entry per worker.
    workers: Box<[WorkerOutput]>,
}

/// One worker's part of the [`OutputBudget`], on its own cache line: written when its largest
/// connection changes size or an eviction is asked for, read when the budget is passed.
#[repr(align(64))]
#[derive(Default)]
struct WorkerOutput {
    /// Held bytes of the worker's largest connection that may be closed for the budget.
    largest_bytes: AtomicUsize,
    /// Another connection found the budget passed while this worker held the largest one.
    eviction_requested: AtomicBool,
    /// Wakes the worker's event loop.
    waker: OnceLock<Arc<Waker>>,
}

impl OutputBudget {
    /// A budget of `limit_bytes` for `workers` worker threads.
    pub fn new(limit_bytes: usize, workers: usize) -> Self {
        assert!(workers > 0, "a server has at least one worker");
        OutputBudget {
            limit_bytes: AtomicUsize::new(limit_bytes),
            held_bytes: AtomicUsize::new(0),
            workers: (0..workers).map(|_| WorkerOutput::default()).collect(),
        }
    }

    /// Most bytes all output buffers may hold together.
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes.load(Ordering::Relaxed)
    }

    /// Sets the limit (`CONFIG SET maxmemory-clients`): connections past it are closed, and
    /// multigets paused, as they next check it.
    pub fn set_limit_bytes(&self, limit_bytes: usize) {
        self.limit_bytes.store(limit_bytes, Ordering::Relaxed);
    }

    /// What all output buffers hold, as published.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Relaxed)
    }

    /// Records that a connection's buffer went from holding `from` to `to` bytes.
    pub fn publish(&self, from: usize, to: usize) {
        if to > from {
            self.held_bytes.fetch_add(to - from, Ordering::Relaxed);
        } else if from > to {
            let previous = self.held_bytes.fetch_sub(from - to, Ordering::Relaxed);
            assert!(previous >= from - to, "output budget underflow");
        }
    }

    /// Whether the published total plus `unpublished` bytes passes the budget.
    pub fn over(&self, unpublished: usize) -> bool {
        self.held_bytes().saturating_add(unpublished) > self.limit_bytes()
    }

    /// For a session building a reply into `out`: whether the buffer grew during this call
    /// (it had `capacity_at_call` bytes of capacity when the call began, all published) and
    /// the total with that growth passes the budget. Reads no shared memory unless it grew.
    pub fn passed_by(&self, out: &Vec<u8>, capacity_at_call: usize) -> bool {
        let grown = out.capacity().saturating_sub(capacity_at_call);
        grown > 0 && self.over(grown)
    }

    /// Whether a connection holding `held` bytes holds at least as much as every worker's
    /// largest closable connection: it is the one to close.
    pub fn is_largest(&self, held: usize) -> bool {
        self.workers
            .iter()
            .all(|worker| worker.largest_bytes.load(Ordering::Relaxed) <= held)
    }

    /// Asks the worker holding the largest closable connection to close it, waking it unless
    /// the request is already pending. Nothing happens when no worker holds one.
    pub fn request_eviction(&self) {
        let largest = self
            .workers
            .iter()
            .max_by_key(|worker| worker.largest_bytes.load(Ordering::Relaxed));
        let Some(worker) = largest.filter(|w| w.largest_bytes.load(Ordering::Relaxed) > 0) else {
            return;
        };
        if !worker.eviction_requested.load(Ordering::Relaxed)
            && !worker.eviction_requested.swap(true, Ordering::AcqRel)
        {
            if let Some(waker) = worker.waker.get() {
                // A failed wake leaves the request for the worker's next loop iteration.
                let _ = waker.wake();
            }
        }
    }

    /// Worker `worker`'s largest closable connection now holds `bytes`.
    pub fn publish_largest(&self, worker: usize, bytes: usize) {
        self.workers[worker]
            .largest_bytes
            .store(bytes, Ordering::Relaxed);
    }

    /// Whether an eviction was asked of worker `worker`; clears the request.
    pub fn take_eviction_request(&self, worker: usize) -> bool {
        let requested = &self.workers[worker].eviction_requested;
        requested.load(Ordering::Relaxed) && requested.swap(false, Ordering::AcqRel)
    }

    /// Registers the waker of worker `worker`'s event loop.
    pub fn set_waker(&self, worker: usize, waker: Arc<Waker>) {
        let _ = self.workers[worker].waker.set(waker);
    }
}

/// Shared by all connections of a server.
pub struct ServerContext {
    /// The store.
    pub engine: Arc<Engine>,
    /// Settings (some can change at run time through CONFIG SET: those are atomics in `stats`
    /// or behind their own lock; these are fixed at start).
    pub settings: Settings,
    /// Counters for stats, INFO and /metrics.
    pub stats: ServerStats,
    /// The output memory of all connections together.
    pub output_budget: OutputBudget,
    /// The idle timeout and output limits now (CONFIG SET changes them).
    pub live: LiveLimits,
    /// When the server started.
    pub started: Instant,
    /// Set when the server is shutting down (SHUTDOWN, SIGTERM).
    pub shutdown: AtomicBool,
    /// Whether the acceptor and the workers serve, for `/health`.
    pub health: Health,
    /// `DEBUG PANIC-ACCEPTOR` asked the acceptor to panic on its next connection (tests).
    pub acceptor_panic_requested: AtomicBool,
    /// Lets through one warning about HTTP requests on a client port per interval.
    pub(crate) cross_protocol_warnings: WarningLimiter,
    /// Next client id (CLIENT ID).
    next_client_id: AtomicU64,
    /// The meta protocol's stale / recache-token state.
    pub(crate) leases: crate::memcache_exec::lease::Leases,
    /// The flash tier's I/O threads (none without a flash tier, or in unit tests).
    pub flash_io: Option<crate::flash_io::FlashIo>,
    /// SLOWLOG.
    pub slowlog: crate::slowlog::SlowLog,
    /// `INFO commandstats` and `INFO errorstats`.
    pub resp_commands: crate::resp_exec::commandstats::CommandStats,
    /// Lets `EXEC` run while no other worker runs a command.
    pub exclusive: crate::exclusive::Exclusive,
    /// Every Redis client, for `CLIENT LIST` and `CLIENT KILL`.
    pub clients: Arc<crate::clients::Clients>,
    /// MONITOR's connections.
    pub monitors: crate::monitor::Monitors,
    /// CLIENT PAUSE.
    pub pause: crate::pause::ClientPause,
    /// LATENCY's monitor (off until `latency-monitor-threshold` is set).
    pub latency: crate::latency::LatencyMonitor,
    /// INFO keyspace's last sampled (not exact) expiry figures and when they were taken (engine
    /// clock, ms): kept for a second, so a monitor asking for INFO every second (redis-cli
    /// `--stat`) samples once a second, not once per client.
    pub(crate) expiry_sample: parking_lot::Mutex<Option<(u64, strata_engine::ExpirySample)>>,
}

impl ServerContext {
    /// A context for `engine` with `settings`.
    pub fn new(engine: Arc<Engine>, settings: Settings) -> Self {
        let health = Health::new(settings.threads);
        let resp_commands = crate::resp_exec::commandstats::CommandStats::default();
        resp_commands.latency.set_enabled(settings.latency.tracking);
        if let Some(percentiles) = settings.latency.percentiles.clone() {
            resp_commands.latency.set_percentiles(percentiles);
        }
        ServerContext {
            resp_commands,
            slowlog: crate::slowlog::SlowLog::new(
                settings.slowlog_slower_than_us,
                settings.slowlog_max_len,
            ),
            output_budget: OutputBudget::new(settings.client_output_bytes_max, settings.threads),
            live: LiveLimits::new(&settings),
            exclusive: crate::exclusive::Exclusive::new(settings.threads),
            clients: Arc::new(crate::clients::Clients::new(settings.threads)),
            monitors: crate::monitor::Monitors::default(),
            pause: crate::pause::ClientPause::default(),
            latency: crate::latency::LatencyMonitor::new(settings.latency.monitor_threshold_ms),
            expiry_sample: parking_lot::Mutex::new(None),
            engine,
            settings,
            health,
            acceptor_panic_requested: AtomicBool::new(false),
            cross_protocol_warnings: WarningLimiter::new(CROSS_PROTOCOL_WARNING_INTERVAL),
            stats: ServerStats::default(),
            started: Instant::now(),
            shutdown: AtomicBool::new(false),
            next_client_id: AtomicU64::new(1),
            leases: Default::default(),
            flash_io: None,
        }
    }

    /// A fresh client id.
    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Seconds since start.
    pub fn uptime_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }
}

/// Shortest time between two warnings about HTTP requests on a client port (the rest are
/// counted): Redis's, so a flood of them cannot flood the log.
pub const CROSS_PROTOCOL_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Lets one log line through per interval, whichever thread asks first.
#[derive(Debug)]
pub(crate) struct WarningLimiter {
    interval_ms: u64,
    /// Milliseconds since the server started before which no warning goes out.
    next_ms: AtomicU64,
}

impl WarningLimiter {
    pub(crate) fn new(interval: Duration) -> Self {
        WarningLimiter {
            interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            next_ms: AtomicU64::new(0),
        }
    }

    /// Whether a warning may go out at `elapsed` since the start; if so, the next one waits an
    /// interval. Two threads asking at once: one wins the exchange, the other stays quiet.
    pub(crate) fn allow(&self, elapsed: Duration) -> bool {
        let now_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let next_ms = self.next_ms.load(Ordering::Relaxed);
        now_ms >= next_ms
            && self
                .next_ms
                .compare_exchange(
                    next_ms,
                    now_ms.saturating_add(self.interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

/// What a session did with the input it was given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Processed {
    /// Bytes of input fully handled (the core drops them from the read buffer).
    pub consumed: usize,
    /// Close the connection after writing the output (quit, protocol error, shutdown).
    pub close: bool,
    /// The session stopped at an output limit inside its input, with a request left to
    /// resume (a memcached multiget): call it again with the rest once the output has drained.
    pub paused: bool,
    /// The session stopped building a reply because all connections together hold more output
    /// than the [`OutputBudget`] and this one holds the most: close the connection without
    /// writing what it holds.
    pub over_budget: bool,
    /// The session stopped before a request that CLIENT PAUSE holds (`crate::pause`): the
    /// connection waits until the pause ends, then calls the session again with the rest.
    pub held: bool,
    /// The session stopped before a request whose keys are on flash
    /// ([`Session::take_flash_locations`] says where): the connection waits while their
    /// records are read ahead, then calls the session again with the input from that request
    /// on (a session may keep what it parsed of it: RESP's parked batch), in pieces that may be
    /// shorter than what it was parsed from.
    pub flash_wait: bool,
}

impl Processed {
    /// `consumed` bytes handled; the connection stays open.
    pub fn open(consumed: usize) -> Self {
        Processed {
            consumed,
            ..Processed::default()
        }
    }

    /// `consumed` bytes handled; close the connection once the output is written.
    pub fn closing(consumed: usize) -> Self {
        Processed {
            consumed,
            close: true,
            ..Processed::default()
        }
    }

    /// `consumed` bytes handled, then a request paused at an output limit ([`Processed::paused`]).
    pub fn paused(consumed: usize) -> Self {
        Processed {
            consumed,
            paused: true,
            ..Processed::default()
        }
    }

    /// `consumed` bytes handled, then a request that waits for flash reads
    /// ([`Processed::flash_wait`]).
    pub fn flash_wait(consumed: usize) -> Self {
        Processed {
            consumed,
            flash_wait: true,
            ..Processed::default()
        }
    }

    /// `consumed` bytes handled; the request after them is held by CLIENT PAUSE.
    pub fn held(consumed: usize) -> Self {
        Processed {
            consumed,
            held: true,
            ..Processed::default()
        }
    }
}

/// Per-connection protocol state. `process` handles every complete request in `input`
/// (pipelining), appends all replies to `out`, and stops at the first incomplete request.
/// `out` is the connection's output buffer, which may already hold earlier replies; its length
/// is what [`OutputLimits`] bound, so a session building a long reply checks them on it.
pub trait Session: Send {
    /// The connection's peer and local addresses, told once before the first request (none
    /// for a session driven without a socket, as in tests).
    fn connected(
        &mut self,
        _peer: Option<std::net::SocketAddr>,
        _local: Option<std::net::SocketAddr>,
    ) {
    }

    /// Handles the complete requests at the start of `input`.
    fn process(&mut self, input: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) -> Processed;

    /// The session now serves the connection in slot `slot` of worker `worker` (after
    /// `connected`): a Redis session joins `ctx.clients`.
    fn attach(&mut self, _ctx: &ServerContext, _worker: usize, _slot: usize) {}

    /// A `CLIENT KILL` marked it: its worker closes the connection.
    fn killed(&self) -> bool {
        false
    }

    /// The fewest bytes the request at the start of `input` (an incomplete one: `input` filled
    /// the read buffer and the session consumed none of it) takes in all, when its protocol
    /// says so before it has arrived (a large argument's or value's declared length): the
    /// connection grows its read buffer to that rather than past it. `None` when unknown.
    fn input_needed(&self, _input: &[u8], _ctx: &ServerContext) -> Option<usize> {
        None
    }

    /// Its entry in `ctx.clients` once attached (none for a session not in the registry),
    /// where the connection publishes its buffers' sizes (`CLIENT LIST`).
    fn registry_entry(&self) -> Option<std::sync::Arc<crate::clients::Client>> {
        None
    }

    /// Asked after a call that returned `close`: whether to close at once without writing the
    /// output the connection still holds. True after a request of another protocol (an HTTP
    /// request on a cache port), which memcached and Redis both drop with all they buffered.
    fn hang_up(&self) -> bool {
        false
    }

    /// Whether the connection pauses, rather than being closed, when all connections together
    /// hold more output than the [`OutputBudget`]: memcached streams its multigets, so its
    /// session pauses them; a Redis client holding the most output is closed, as Redis closes
    /// clients over `maxmemory-clients`.
    fn pauses_over_budget(&self) -> bool {
        false
    }

    /// Output the server pushes to the client outside a request's reply (MONITOR's lines):
    /// appended to `out`; returns whether there was any. Called when the worker was told
    /// some waits (`Clients::push`).
    fn take_pushed(&mut self, _out: &mut Vec<u8>) -> bool {
        false
    }

    /// After a call that returned [`Processed::flash_wait`]: where on the flash medium the
    /// records to read ahead are (`Engine::flash_reads_needed`).
    fn take_flash_locations(&mut self) -> Option<Vec<u64>> {
        None
    }

    /// After a call that returned [`Processed::flash_wait`] without keys: the walk to run on
    /// the walk thread ([`crate::flash_io::Walk`]) before the request runs again.
    fn take_flash_walk(&mut self) -> Option<crate::flash_io::Walk> {
        None
    }

    /// The keys of the waiting request were read ahead (or its walk ended): its next run must
    /// not wait again (a key that went back to flash meanwhile is read on the worker, so the
    /// request moves on).
    fn flash_keys_staged(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_limiter_lets_one_line_through_per_interval() {
        let limiter = WarningLimiter::new(Duration::from_secs(60));
        let at = Duration::from_secs;
        assert!(limiter.allow(at(0)));
        assert!(!limiter.allow(at(0)));
        assert!(!limiter.allow(at(59)));
        assert!(limiter.allow(at(60)));
        assert!(!limiter.allow(at(61)));
        assert!(limiter.allow(at(500)));
    }
}
