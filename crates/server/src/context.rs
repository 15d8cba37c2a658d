//! What every connection handler shares: the engine, settings, counters.
//!
//! The network core (listeners, event loops, buffers) knows no protocol: for each readable
//! connection it hands the buffered input to the connection's [`Session`] and writes back what
//! the session appended to the output buffer. The memcached and RESP sessions
//! (`memcache_exec`, `resp_exec`) know no sockets. Both sides meet here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Whether `flush_all` / `FLUSHALL` are allowed.
    pub flush_enabled: bool,
    /// TCP port of the memcached listener, if any (for INFO/stats).
    pub memcache_port: Option<u16>,
    /// TCP port of the RESP listener, if any.
    pub resp_port: Option<u16>,
    /// Eviction policy name.
    pub eviction: &'static str,
    /// Durability name (`none`, `interval=MS`, `sync`).
    pub durability: String,
    /// How much output a connection may buffer.
    pub output: OutputLimits,
    /// Whether the RESP `DEBUG` command runs (`--enable-debug-command`; tests only).
    pub debug_command_enabled: bool,
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
            flush_enabled: true,
            memcache_port: None,
            resp_port: None,
            eviction: "merge",
            durability: "none".to_string(),
            output: OutputLimits::new(OUTPUT_BUFFERED_BYTES_HARD_DEFAULT),
            debug_command_enabled: false,
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

/// Shared by all connections of a server.
pub struct ServerContext {
    /// The store.
    pub engine: Arc<Engine>,
    /// Settings (some can change at run time through CONFIG SET: those are atomics in `stats`
    /// or behind their own lock; these are fixed at start).
    pub settings: Settings,
    /// Counters for stats, INFO and /metrics.
    pub stats: ServerStats,
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
}

impl ServerContext {
    /// A context for `engine` with `settings`.
    pub fn new(engine: Arc<Engine>, settings: Settings) -> Self {
        let health = Health::new(settings.threads);
        ServerContext {
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
}

/// Per-connection protocol state. `process` handles every complete request in `input`
/// (pipelining), appends all replies to `out`, and stops at the first incomplete request.
/// `out` is the connection's output buffer, which may already hold earlier replies; its length
/// is what [`OutputLimits`] bound, so a session building a long reply checks them on it.
pub trait Session: Send {
    /// Handles the complete requests at the start of `input`.
    fn process(&mut self, input: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) -> Processed;

    /// Asked after a call that returned `close`: whether to close at once without writing the
    /// output the connection still holds. True after a request of another protocol (an HTTP
    /// request on a cache port), which memcached and Redis both drop with all they buffered.
    fn hang_up(&self) -> bool {
        false
    }
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
