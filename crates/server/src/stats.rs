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
}

impl Default for ServerStats {
    fn default() -> Self {
        ServerStats {
            connections_current: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            connections_rejected: AtomicU64::new(0),
            commands: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            get_keys: AtomicU64::new(0),
            get_hits: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

impl ServerStats {
    /// Counts one request of `command`.
    pub fn count_command(&self, command: usize) {
        self.commands[command].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `keys` read keys of which `hits` were found.
    pub fn count_gets(&self, keys: u64, hits: u64) {
        self.get_keys.fetch_add(keys, Ordering::Relaxed);
        self.get_hits.fetch_add(hits, Ordering::Relaxed);
    }

    /// Resets the resettable counters (memcached `stats reset`, Redis CONFIG RESETSTAT).
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
}
