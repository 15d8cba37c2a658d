//! LATENCY: Redis's latency monitor, for the events strata has: `command` (a command not
//! flagged fast that took at least `latency-monitor-threshold` milliseconds) and
//! `fast-command` (one flagged fast). Off while the threshold is 0, Redis's default: then the
//! cost is one relaxed load per command.
//!
//! Per event, the last [`HISTORY_LEN`] spikes (one per second: a second's spikes keep their
//! worst), the latest and the all-time worst, as `LATENCY LATEST` and `LATENCY HISTORY` report
//! them; `LATENCY RESET` forgets them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Spikes kept per event (Redis's `LATENCY_TS_LEN`).
pub const HISTORY_LEN: usize = 160;

/// One event's spikes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventHistory {
    /// `(unix seconds, milliseconds)`, oldest first.
    pub samples: VecDeque<(u64, u64)>,
    /// The worst ever, in milliseconds.
    pub max_ms: u64,
}

/// The latency monitor.
#[derive(Debug, Default)]
pub struct LatencyMonitor {
    threshold_ms: AtomicU64,
    events: Mutex<BTreeMap<&'static str, EventHistory>>,
}

impl LatencyMonitor {
    /// A monitor recording spikes of at least `threshold_ms` (0: off).
    pub fn new(threshold_ms: u64) -> Self {
        LatencyMonitor {
            threshold_ms: AtomicU64::new(threshold_ms),
            events: Mutex::default(),
        }
    }

    /// `latency-monitor-threshold`.
    pub fn threshold_ms(&self) -> u64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }

    /// Sets `latency-monitor-threshold` (CONFIG SET).
    pub fn set_threshold_ms(&self, ms: u64) {
        self.threshold_ms.store(ms, Ordering::Relaxed);
    }

    /// Notes that a command took `elapsed_us`: a spike of `event` if it reaches the threshold.
    pub fn command(&self, fast: bool, elapsed_us: u64) {
        let threshold = self.threshold_ms();
        let ms = elapsed_us / 1000;
        if threshold == 0 || ms < threshold {
            return;
        }
        let unix_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.add(if fast { "fast-command" } else { "command" }, unix_secs, ms);
    }

    fn add(&self, event: &'static str, unix_secs: u64, ms: u64) {
        let mut events = self.lock();
        let history = events.entry(event).or_default();
        history.max_ms = history.max_ms.max(ms);
        match history.samples.back_mut() {
            Some((secs, worst)) if *secs == unix_secs => *worst = (*worst).max(ms),
            _ => {
                if history.samples.len() == HISTORY_LEN {
                    history.samples.pop_front();
                }
                history.samples.push_back((unix_secs, ms));
            }
        }
    }

    /// Every event with spikes, by name.
    pub fn events(&self) -> BTreeMap<&'static str, EventHistory> {
        self.lock().clone()
    }

    /// Forgets the events named (every one when `names` is empty); returns how many it forgot.
    pub fn reset(&self, names: &[&[u8]]) -> usize {
        let mut events = self.lock();
        let before = events.len();
        if names.is_empty() {
            events.clear();
        } else {
            events.retain(|name, _| {
                !names
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
            });
        }
        before - events.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, EventHistory>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spikes_past_the_threshold_are_kept_one_per_second_up_to_the_history() {
        let monitor = LatencyMonitor::new(0);
        monitor.command(false, 500_000);
        assert!(monitor.events().is_empty(), "off at 0");
        monitor.set_threshold_ms(10);
        monitor.command(true, 9_999);
        assert!(monitor.events().is_empty(), "below the threshold");
        monitor.add("command", 100, 12);
        monitor.add("command", 100, 30);
        monitor.add("command", 100, 20);
        for second in 101..400 {
            monitor.add("command", second, 11);
        }
        let events = monitor.events();
        let command = &events["command"];
        assert_eq!(command.max_ms, 30);
        assert_eq!(command.samples.len(), HISTORY_LEN);
        assert_eq!(command.samples.back(), Some(&(399, 11)));
        monitor.add("fast-command", 5, 10);
        assert_eq!(monitor.reset(&[b"FAST-COMMAND", b"nope"]), 1);
        assert_eq!(monitor.reset(&[]), 1);
        assert!(monitor.events().is_empty());
    }
}
