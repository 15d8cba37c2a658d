//! `INFO commandstats` and `INFO errorstats`, as Redis 7 reports them: per command, its calls,
//! the microseconds they ran, the calls refused before running (wrong arity, not
//! authenticated: `rejected_calls`) and those whose reply was an error (`failed_calls`); per
//! error code (the reply's first word: `ERR`, `WRONGTYPE`, ...), how many were sent.
//!
//! GET and SET, the hot commands, are counted by each session and added once per batch
//! ([`HotCounts`]), as their call counts are (`PendingCounts`): an atomic add per request on
//! a line every worker writes would cost more than the command.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::latency_tracking::{HotLatencies, LatencyTracking};
use super::table::{Command, COMMANDS};

/// Most distinct error codes `errorstats` tracks (Redis's `ERROR_STATS_NUMBER`); past it, new
/// codes are not counted there (their replies still count in `total_error_replies`).
pub const ERROR_CODES_MAX: usize = 128;

#[derive(Debug, Default)]
struct RowStats {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

/// The counters, one row per command of the table.
#[derive(Debug)]
pub struct CommandStats {
    rows: Box<[RowStats]>,
    errors: Mutex<BTreeMap<Vec<u8>, u64>>,
    /// `INFO latencystats` and `LATENCY HISTOGRAM`.
    pub(crate) latency: LatencyTracking,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            rows: COMMANDS.iter().map(|_| RowStats::default()).collect(),
            errors: Mutex::new(BTreeMap::new()),
            latency: LatencyTracking::default(),
        }
    }
}

/// The row of `command` in the table.
pub(crate) fn row_of(command: &'static Command) -> usize {
    let offset = command as *const Command as usize - COMMANDS.as_ptr() as usize;
    let row = offset / std::mem::size_of::<Command>();
    debug_assert!(std::ptr::eq(&COMMANDS[row], command), "a table row");
    row
}

impl CommandStats {
    /// Adds `calls` calls of row `row` that ran `usec` microseconds, `failed` of them errors.
    pub(crate) fn add(&self, row: usize, calls: u64, usec: u64, failed: u64) {
        let stats = &self.rows[row];
        stats.calls.fetch_add(calls, Ordering::Relaxed);
        stats.usec.fetch_add(usec, Ordering::Relaxed);
        if failed > 0 {
            stats.failed.fetch_add(failed, Ordering::Relaxed);
        }
    }

    /// Counts a call of row `row` refused before it ran.
    pub(crate) fn reject(&self, row: usize) {
        self.rows[row].rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the error reply that starts `reply` (`-CODE message\r\n`) under its code.
    pub(crate) fn count_error(&self, reply: &[u8]) {
        let Some(text) = reply.strip_prefix(b"-") else {
            return;
        };
        let end = text
            .iter()
            .position(|&b| b == b' ' || b == b'\r')
            .unwrap_or(text.len());
        let code = &text[..end];
        let mut errors = self.errors.lock();
        if let Some(count) = errors.get_mut(code) {
            *count += 1;
        } else if errors.len() < ERROR_CODES_MAX {
            errors.insert(code.to_vec(), 1);
        }
    }

    /// `CONFIG RESETSTAT`.
    pub(crate) fn reset(&self) {
        for row in self.rows.iter() {
            for counter in [&row.calls, &row.usec, &row.rejected, &row.failed] {
                counter.store(0, Ordering::Relaxed);
            }
        }
        self.errors.lock().clear();
        self.latency.reset();
    }

    /// The `cmdstat_*` lines of the commands with any count, in table order.
    pub(crate) fn write_commandstats(&self, out: &mut String) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        for (command, row) in COMMANDS.iter().zip(self.rows.iter()) {
            let (calls, usec) = (load(&row.calls), load(&row.usec));
            let (rejected, failed) = (load(&row.rejected), load(&row.failed));
            if calls == 0 && rejected == 0 && failed == 0 {
                continue;
            }
            let per_call = if calls == 0 {
                0.0
            } else {
                usec as f64 / calls as f64
            };
            // Writing to a String cannot fail.
            let _ = write!(
                out,
                "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},\
                 rejected_calls={rejected},failed_calls={failed}\r\n",
                command.name
            );
        }
    }

    /// The `errorstat_*` lines, by code.
    pub(crate) fn write_errorstats(&self, out: &mut String) {
        for (code, count) in self.errors.lock().iter() {
            let _ = write!(
                out,
                "errorstat_{}:count={count}\r\n",
                String::from_utf8_lossy(code)
            );
        }
    }
}

/// A session's GET and SET calls not yet added to [`CommandStats`] (rows 0 and 1).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HotCounts {
    /// Per row: calls, microseconds, failed calls.
    rows: [(u64, u64, u64); 2],
    /// Their run times, for the latency histograms.
    latencies: HotLatencies,
}

impl HotCounts {
    /// Counts a call of hot row `row` (0: GET, 1: SET) that ran `ns` nanoseconds.
    #[inline]
    pub(crate) fn count(&mut self, row: usize, ns: u64, failed: bool, stats: &CommandStats) {
        let entry = &mut self.rows[row];
        entry.0 += 1;
        entry.1 += ns / 1000;
        entry.2 += u64::from(failed);
        if stats.latency.enabled() {
            self.latencies.count(row, ns, &stats.latency);
        }
    }

    /// Buffers the run time of a call of another row (its counts are added at once).
    #[inline]
    pub(crate) fn count_latency(&mut self, row: usize, ns: u64, stats: &CommandStats) {
        if stats.latency.enabled() {
            self.latencies.count_warm(row, ns, &stats.latency);
        }
    }

    /// Adds the counts to `stats` and clears them.
    #[inline]
    pub(crate) fn publish(&mut self, stats: &CommandStats) {
        for (row, (calls, usec, failed)) in std::mem::take(&mut self.rows).into_iter().enumerate() {
            if calls > 0 {
                stats.add(row, calls, usec, failed);
            }
        }
        self.latencies.publish(&stats.latency);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_errors_and_reset() {
        let stats = CommandStats::default();
        let get = super::super::table::lookup(b"get").unwrap();
        let incr = super::super::table::lookup(b"INCR").unwrap();
        assert_eq!(row_of(get), 0, "GET is the table's first row");
        let mut hot = HotCounts::default();
        hot.count(row_of(get), 5_000, false, &stats);
        hot.count(row_of(get), 7_000, false, &stats);
        hot.publish(&stats);
        stats.add(row_of(incr), 1, 3, 1);
        stats.reject(row_of(incr));
        stats.count_error(b"-ERR value is not an integer or out of range\r\n");
        stats.count_error(b"-WRONGTYPE Operation against a key\r\n");
        stats.count_error(b"-ERR wrong number of arguments\r\n");
        let mut text = String::new();
        stats.write_commandstats(&mut text);
        assert_eq!(
            text,
            "cmdstat_get:calls=2,usec=12,usec_per_call=6.00,rejected_calls=0,failed_calls=0\r\n\
             cmdstat_incr:calls=1,usec=3,usec_per_call=3.00,rejected_calls=1,failed_calls=1\r\n"
        );
        let mut text = String::new();
        stats.write_errorstats(&mut text);
        assert_eq!(
            text,
            "errorstat_ERR:count=2\r\nerrorstat_WRONGTYPE:count=1\r\n"
        );
        stats.reset();
        let mut text = String::new();
        stats.write_commandstats(&mut text);
        stats.write_errorstats(&mut text);
        assert!(text.is_empty());
    }
}
