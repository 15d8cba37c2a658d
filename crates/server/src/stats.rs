//! Server-wide counters, shared by memcached `stats`, Redis INFO and Prometheus /metrics so that
//! all three agree. Engine figures (items, hits, evictions...) come from `Engine::stats`.

use std::sync::atomic::{AtomicU64, Ordering};

/// Commands counted per name, in this order (an index into `ServerStats::commands`).
pub const COMMAND_NAMES: &[&str] = &[
    "get", "set", "delete", "incr", "decr", "touch", "cas", "append", "prepend", "add", "replace",
    "flush", "meta", "stats", "other",
];

/// Index of a command name in [`COMMAND_NAMES`] ("other" when unknown). A `const fn`, so hot
/// paths name their slot with `const { command_index("get") }` and compare no strings.
pub const fn command_index(name: &str) -> usize {
    let name = name.as_bytes();
    let mut index = 0;
    while index < COMMAND_NAMES.len() {
        let known = COMMAND_NAMES[index].as_bytes();
        if known.len() == name.len() {
            let mut at = 0;
            while at < name.len() && known[at] == name[at] {
                at += 1;
            }
            if at == name.len() {
                return index;
            }
        }
        index += 1;
    }
    COMMAND_NAMES.len() - 1
}

/// Counts of the hot commands (GET and SET) that a session keeps to itself and adds to the
/// shared [`ServerStats`] once per batch ([`PendingCounts::publish`]), so a pipelined GET
/// costs no atomic read-modify-write on a cache line every worker writes. A session publishes
/// before it runs any other command, so a `stats` or `INFO` later in the same pipeline sees
/// every command before it, as it did when each was counted at once; the admin endpoint, on
/// another thread, sees them when the batch's replies are ready to go.
#[derive(Clone, Copy, Debug, Default)]
pub struct PendingCounts {
    gets: u64,
    sets: u64,
    get_keys: u64,
    get_hits: u64,
}

impl PendingCounts {
    /// Slot of `get` in [`COMMAND_NAMES`].
    const GET: usize = command_index("get");
    /// Slot of `set` in [`COMMAND_NAMES`].
    const SET: usize = command_index("set");

    /// Counts one request of `command` if it is GET or SET; returns false (counting nothing)
    /// for other commands, which the caller counts in `stats` directly.
    #[inline]
    pub fn count_command(&mut self, command: usize) -> bool {
        if command == Self::GET {
            self.gets += 1;
        } else if command == Self::SET {
            self.sets += 1;
        } else {
            return false;
        }
        true
    }

    /// Counts `keys` read keys of which `hits` were found.
    #[inline]
    pub fn count_gets(&mut self, keys: u64, hits: u64) {
        self.get_keys += keys;
        self.get_hits += hits;
    }

    /// Adds the pending counts to `stats` and clears them.
    #[inline]
    pub fn publish(&mut self, stats: &ServerStats) {
        if self.gets | self.sets | self.get_keys == 0 {
            return;
        }
        let pending = std::mem::take(self);
        for (command, count) in [(Self::GET, pending.gets), (Self::SET, pending.sets)] {
            if count > 0 {
                stats.commands[command].fetch_add(count, Ordering::Relaxed);
            }
        }
        if pending.get_keys > 0 {
            stats.count_gets(pending.get_keys, pending.get_hits);
        }
    }
}

/// memcached's per-command outcome counters, in the order `stats` lists them: what exporters
/// read to tell hits from misses of each command family.
pub const OUTCOME_NAMES: [&str; 11] = [
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
];

/// The index of `name` in [`OUTCOME_NAMES`] (a compile-time list: a typo panics in tests).
pub fn outcome_index(name: &str) -> usize {
    OUTCOME_NAMES
        .iter()
        .position(|&n| n == name)
        .unwrap_or_else(|| panic!("no outcome counter {name}"))
}

/// Counters (relaxed atomics: each is independent).
#[derive(Debug)]
pub struct ServerStats {
    /// Connections open now.
    pub connections_current: AtomicU64,
    /// Connections accepted since start.
    pub connections_total: AtomicU64,
    /// Connections refused because of the connection limit.
    pub connections_rejected: AtomicU64,
    /// Requests handled, per entry of [`COMMAND_NAMES`].
    pub commands: [AtomicU64; COMMAND_NAMES.len()],
    /// Bytes read from clients.
    pub bytes_read: AtomicU64,
    /// Bytes written to clients.
    pub bytes_written: AtomicU64,
    /// Keys looked up by reads (memcached `cmd_get` counts keys).
    pub get_keys: AtomicU64,
    /// Of those, found.
    pub get_hits: AtomicU64,
    /// Protocol errors answered.
    pub errors: AtomicU64,
    /// Connections closed because their output buffer passed its hard limit (Redis INFO
    /// `client_output_buffer_limit_disconnections`).
    pub output_limit_disconnections: AtomicU64,
    /// Panics caught on worker threads (each worker then closed its connections and restarted).
    pub worker_panics: AtomicU64,
    /// Client connections closed because their worker panicked.
    pub panic_closed_connections: AtomicU64,
    /// Client connections closed because they sent an HTTP request to a cache port.
    pub cross_protocol_closes: AtomicU64,
    /// Requests that waited for flash reads ahead (a batch of them counts once).
    pub flash_waits: AtomicU64,
    /// Of those, the ones whose reads ahead finished and whose connection resumed.
    pub flash_waits_done: AtomicU64,
    /// Of those, the ones whose connection had closed when the reads finished.
    pub flash_waits_abandoned: AtomicU64,
    /// Workers whose flash reads a kernel thread issues (`--flash-sqpoll-idle-ms`).
    pub flash_read_rings_kernel_polled: AtomicU64,
    /// memcached authentication tokens checked (memcached's `auth_cmds`).
    pub auth_commands: AtomicU64,
    /// Of those, refused (memcached's `auth_errors`).
    pub auth_errors: AtomicU64,
    /// Connections closed because all connections' output passed `--client-output-memory` and
    /// they held the most (Redis INFO `evicted_clients`, for `maxmemory-clients`).
    pub evicted_clients: AtomicU64,
    /// memcached's per-command outcomes, per entry of [`OUTCOME_NAMES`].
    pub outcomes: [AtomicU64; OUTCOME_NAMES.len()],
    /// Read buffer memory all connections hold beyond their initial buffers (a buffer grown
    /// for a large request is kept while requests need it: `connection`'s module docs).
    pub client_input_bytes: AtomicU64,
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            connections_current: AtomicU64::new(0),
            client_input_bytes: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            connections_rejected: AtomicU64::new(0),
            commands: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            get_keys: AtomicU64::new(0),
            get_hits: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            output_limit_disconnections: AtomicU64::new(0),
            worker_panics: AtomicU64::new(0),
            panic_closed_connections: AtomicU64::new(0),
            cross_protocol_closes: AtomicU64::new(0),
            flash_waits: AtomicU64::new(0),
            flash_waits_done: AtomicU64::new(0),
            flash_waits_abandoned: AtomicU64::new(0),
            flash_read_rings_kernel_polled: AtomicU64::new(0),
            auth_commands: AtomicU64::new(0),
            auth_errors: AtomicU64::new(0),
            evicted_clients: AtomicU64::new(0),
            outcomes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl ServerStats {
    /// Counts one request of `command`.
    pub fn count_command(&self, command: usize) {
        self.commands[command].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one outcome of [`OUTCOME_NAMES`] (`delete_hits`, `cas_badval`, ...).
    pub fn count_outcome(&self, name: &str) {
        self.outcomes[outcome_index(name)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one request answered with a protocol or write error.
    pub fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `keys` read keys of which `hits` were found.
    pub fn count_gets(&self, keys: u64, hits: u64) {
        self.get_keys.fetch_add(keys, Ordering::Relaxed);
        self.get_hits.fetch_add(hits, Ordering::Relaxed);
    }

    /// Resets the resettable counters (memcached `stats reset`, Redis CONFIG RESETSTAT). The
    /// panic and cross-protocol counts stay: they record faults and attacks an operator must
    /// be able to see whatever a client resets.
    pub fn reset(&self) {
        for counter in &self.commands {
            counter.store(0, Ordering::Relaxed);
        }
        for counter in [
            &self.get_keys,
            &self.get_hits,
            &self.errors,
            &self.connections_total,
            &self.connections_rejected,
            &self.output_limit_disconnections,
            &self.auth_commands,
            &self.auth_errors,
            &self.evicted_clients,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_index_finds_every_name() {
        for (index, name) in COMMAND_NAMES.iter().enumerate() {
            assert_eq!(command_index(name), index);
        }
        assert_eq!(command_index("gets"), COMMAND_NAMES.len() - 1);
        assert_eq!(command_index(""), COMMAND_NAMES.len() - 1);
        const { assert!(command_index("get") == 0) };
    }

    #[test]
    fn pending_counts_reach_the_shared_counters_when_published() {
        let stats = ServerStats::default();
        let mut pending = PendingCounts::default();
        assert!(pending.count_command(command_index("get")));
        assert!(pending.count_command(command_index("get")));
        assert!(pending.count_command(command_index("set")));
        assert!(!pending.count_command(command_index("delete")));
        pending.count_gets(3, 2);
        assert_eq!(stats.commands[0].load(Ordering::Relaxed), 0);
        pending.publish(&stats);
        pending.publish(&stats);
        let load = |name| stats.commands[command_index(name)].load(Ordering::Relaxed);
        assert_eq!((load("get"), load("set"), load("delete")), (2, 1, 0));
        assert_eq!(stats.get_keys.load(Ordering::Relaxed), 3);
        assert_eq!(stats.get_hits.load(Ordering::Relaxed), 2);
    }
}
