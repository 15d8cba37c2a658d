//! Per-command latency histograms, as Redis 7 keeps them (`latency-tracking`): `INFO
//! latencystats` reports percentiles of each command's run time
//! (`latency-tracking-info-percentiles`, default `50 99 99.9`) and `LATENCY HISTOGRAM` its
//! cumulative distribution over power-of-two buckets.
//!
//! The histograms are Redis's: HdrHistogram over 1 ns ..= 1 s with two significant digits,
//! reported in microseconds with three decimals, one per command of the table, made at its
//! first call. strata records the run time in nanoseconds (Redis records whole microseconds,
//! so its figures are multiples of 1 µs; a strata GET takes less than one).
//!
//! GET and SET, the hot commands, are recorded by each session in batches ([`HotLatencies`]):
//! a lock per request on a histogram every worker writes would cost more than the command.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use super::table::{Command, COMMANDS};

/// Shortest run time a histogram tells apart, nanoseconds (Redis's).
const LATENCY_NS_MIN: u64 = 1;
/// Longest, nanoseconds: longer runs count as this (Redis's).
const LATENCY_NS_MAX: u64 = 1_000_000_000;
/// Significant digits (Redis's).
const SIGNIFICANT_DIGITS: u8 = 2;
/// Redis's default `latency-tracking-info-percentiles`.
pub(crate) const PERCENTILES_DEFAULT: [f64; 3] = [50.0, 99.0, 99.9];
/// The first bucket of `LATENCY HISTOGRAM`, nanoseconds; each next one is twice as wide.
const HISTOGRAM_BUCKET_NS_FIRST: u64 = 1024;

/// The histograms and their settings.
#[derive(Debug)]
pub struct LatencyTracking {
    enabled: AtomicBool,
    percentiles: Mutex<Vec<f64>>,
    rows: Box<[Mutex<Option<Histogram<u64>>>]>,
}

impl Default for LatencyTracking {
    fn default() -> Self {
        LatencyTracking {
            enabled: AtomicBool::new(true),
            percentiles: Mutex::new(PERCENTILES_DEFAULT.to_vec()),
            rows: COMMANDS.iter().map(|_| Mutex::new(None)).collect(),
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LATENCY_NS_MIN, LATENCY_NS_MAX, SIGNIFICANT_DIGITS)
        .expect("constant bounds are valid")
}

/// Microseconds with three decimals, as Redis prints a histogram value.
fn usec(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

impl LatencyTracking {
    /// `latency-tracking`.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// `CONFIG SET latency-tracking`.
    pub(crate) fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    /// `latency-tracking-info-percentiles`.
    pub(crate) fn percentiles(&self) -> Vec<f64> {
        self.percentiles.lock().clone()
    }

    /// `CONFIG SET latency-tracking-info-percentiles` (checked by [`parse_percentiles`]).
    pub(crate) fn set_percentiles(&self, percentiles: Vec<f64>) {
        debug_assert!(percentiles.iter().all(|p| (0.0..=100.0).contains(p)));
        *self.percentiles.lock() = percentiles;
    }

    /// Records run times (nanoseconds) of row `row`.
    pub(crate) fn record(&self, row: usize, latencies_ns: &[u64]) {
        if latencies_ns.is_empty() {
            return;
        }
        let mut histogram = self.rows[row].lock();
        let histogram = histogram.get_or_insert_with(new_histogram);
        for &ns in latencies_ns {
            histogram.saturating_record(ns.clamp(LATENCY_NS_MIN, LATENCY_NS_MAX));
        }
    }

    /// `CONFIG RESETSTAT`: every histogram goes.
    pub(crate) fn reset(&self) {
        for row in self.rows.iter() {
            *row.lock() = None;
        }
    }

    /// The `latency_percentiles_usec_*` lines of the commands that ran, in table order
    /// (none while tracking is off, as Redis).
    pub(crate) fn write_latencystats(&self, out: &mut String) {
        if !self.enabled() {
            return;
        }
        let percentiles = self.percentiles();
        for (command, row) in COMMANDS.iter().zip(self.rows.iter()) {
            let histogram = row.lock();
            let Some(histogram) = histogram.as_ref() else {
                continue;
            };
            let _ = write!(out, "latency_percentiles_usec_{}:", command.name);
            for (i, &percentile) in percentiles.iter().enumerate() {
                let ns = histogram.value_at_percentile(percentile);
                let separator = if i == 0 { "" } else { "," };
                let name = format_percentile(percentile);
                let _ = write!(out, "{separator}p{name}={:.3}", usec(ns));
            }
            out.push_str("\r\n");
        }
    }

    /// `LATENCY HISTOGRAM`'s entries: per command that ran (all of them, or those of
    /// `commands`), its calls and the cumulative count at each power-of-two bucket's upper
    /// bound in whole microseconds.
    pub(crate) fn cumulative(&self, commands: &[&'static Command]) -> Vec<HistogramReport> {
        let mut reports = Vec::new();
        for (command, row) in COMMANDS.iter().zip(self.rows.iter()) {
            if !commands.is_empty() && !commands.iter().any(|c| std::ptr::eq(*c, command)) {
                continue;
            }
            let histogram = row.lock();
            let Some(histogram) = histogram.as_ref() else {
                continue;
            };
            reports.push(HistogramReport {
                name: command.name,
                calls: histogram.len(),
                buckets: power_of_two_buckets(histogram),
            });
        }
        reports
    }
}

/// A histogram's calls by power-of-two bucket, cumulative, as Redis's `LATENCY HISTOGRAM`
/// reports them: a run falls in the first bucket whose bound (1024 ns, doubling) is past it,
/// each bucket is named by its bound's highest equivalent value in whole microseconds, and
/// only buckets holding a run are listed.
fn power_of_two_buckets(histogram: &Histogram<u64>) -> Vec<(u64, u64)> {
    let mut counts: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for step in histogram.iter_recorded() {
        let lowest = histogram.lowest_equivalent(step.value_iterated_to());
        let mut bound = HISTOGRAM_BUCKET_NS_FIRST;
        while lowest >= histogram.lowest_equivalent(bound) {
            bound *= 2;
        }
        *counts.entry(bound).or_default() += step.count_at_value();
    }
    let mut cumulative = 0;
    counts
        .into_iter()
        .map(|(bound, count)| {
            cumulative += count;
            (histogram.highest_equivalent(bound) / 1000, cumulative)
        })
        .collect()
}

/// One command's `LATENCY HISTOGRAM` entry.
pub(crate) struct HistogramReport {
    /// The command's name.
    pub name: &'static str,
    /// Calls recorded.
    pub calls: u64,
    /// (bucket upper bound in µs, calls at most that long), from the first bucket with a call.
    pub buckets: Vec<(u64, u64)>,
}

/// A percentile as Redis names it: `50`, `99.9` (Rust's shortest form has no trailing zeros).
pub(crate) fn format_percentile(percentile: f64) -> String {
    format!("{percentile}")
}

/// Parses `latency-tracking-info-percentiles`: numbers 0..=100 separated by single spaces,
/// or nothing. The error is Redis's reason.
pub(crate) fn parse_percentiles(text: &[u8]) -> Result<Vec<f64>, &'static str> {
    const INVALID: &str = "Invalid latency-tracking-info-percentiles parameters";
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let text = std::str::from_utf8(text).map_err(|_| INVALID)?;
    let mut percentiles = Vec::new();
    for word in text.split(' ') {
        let percentile: f64 = word.parse().map_err(|_| INVALID)?;
        if !(0.0..=100.0).contains(&percentile) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
            );
        }
        percentiles.push(percentile);
    }
    Ok(percentiles)
}

/// A session's run times not yet recorded: GET's and SET's (rows 0 and 1), and those of the
/// two other commands it ran last (`warm`, by row; a pipeline of HGETs takes one). Recorded when
/// a buffer fills, when a warm row makes way for another, and at the end of every batch, so a
/// pipeline of one command takes its row's lock once per 16 calls, not per call.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HotLatencies {
    rows: [([u64; HOT_BUFFERED], usize); 2],
    warm: [(usize, [u64; HOT_BUFFERED], usize); 2],
}

/// Run times a session buffers per hot row before it records them.
const HOT_BUFFERED: usize = 16;

impl HotLatencies {
    /// Buffers a run time of hot row `row` (0: GET, 1: SET), recording the row's buffer into
    /// `tracking` when it is full.
    #[inline]
    pub(crate) fn count(&mut self, row: usize, ns: u64, tracking: &LatencyTracking) {
        let (buffer, len) = &mut self.rows[row];
        buffer[*len] = ns;
        *len += 1;
        if *len == HOT_BUFFERED {
            tracking.record(row, &buffer[..]);
            *len = 0;
        }
    }

    /// Buffers a run time of a row other than GET's and SET's, recording the row's buffer
    /// when it is full, and the least recently used warm row's when `row` takes its place.
    pub(crate) fn count_warm(&mut self, row: usize, ns: u64, tracking: &LatencyTracking) {
        debug_assert!(row >= 2, "GET and SET have rows of their own");
        if self.warm[0].0 != row || self.warm[0].2 == 0 {
            if self.warm[1].0 == row && self.warm[1].2 > 0 {
                self.warm.swap(0, 1);
            } else {
                let (old_row, buffer, len) = &mut self.warm[1];
                if *len > 0 {
                    tracking.record(*old_row, &buffer[..*len]);
                }
                self.warm.swap(0, 1);
                self.warm[0] = (row, [0; HOT_BUFFERED], 0);
            }
        }
        let (_, buffer, len) = &mut self.warm[0];
        buffer[*len] = ns;
        *len += 1;
        if *len == HOT_BUFFERED {
            tracking.record(row, &buffer[..]);
            *len = 0;
        }
    }

    /// Records what is buffered.
    #[inline]
    pub(crate) fn publish(&mut self, tracking: &LatencyTracking) {
        for (row, (buffer, len)) in self.rows.iter_mut().enumerate() {
            if *len > 0 {
                tracking.record(row, &buffer[..*len]);
                *len = 0;
            }
        }
        for (row, buffer, len) in &mut self.warm {
            if *len > 0 {
                tracking.record(*row, &buffer[..*len]);
                *len = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_buckets_and_reset() {
        let tracking = LatencyTracking::default();
        let get = super::super::table::lookup(b"get").unwrap();
        let row = super::super::commandstats::row_of(get);
        let mut hot = HotLatencies::default();
        for ns in [1_000, 2_000, 3_000, 100_000] {
            hot.count(row, ns, &tracking);
        }
        let mut text = String::new();
        tracking.write_latencystats(&mut text);
        assert!(text.is_empty(), "buffered until published");
        hot.publish(&tracking);
        tracking.write_latencystats(&mut text);
        assert_eq!(
            text,
            "latency_percentiles_usec_get:p50=2.007,p99=100.351,p99.9=100.351\r\n"
        );
        let reports = tracking.cumulative(&[]);
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].calls, 4);
        assert_eq!(reports[0].buckets.first(), Some(&(1, 1)));
        assert_eq!(reports[0].buckets.last().map(|b| b.1), Some(4));
        tracking.set_percentiles(vec![100.0]);
        let mut text = String::new();
        tracking.write_latencystats(&mut text);
        assert_eq!(text, "latency_percentiles_usec_get:p100=100.351\r\n");
        tracking.set_enabled(false);
        let mut text = String::new();
        tracking.write_latencystats(&mut text);
        assert!(text.is_empty(), "nothing while tracking is off");
        tracking.set_enabled(true);
        tracking.reset();
        assert!(tracking.cumulative(&[]).is_empty());
    }

    /// Other commands' run times are buffered by row, two rows at a time: a third row makes
    /// the least recently used one's times recorded; nothing is lost, nothing counted twice.
    #[test]
    fn other_commands_are_buffered_two_rows_at_a_time() {
        let tracking = LatencyTracking::default();
        let row = |name: &[u8]| {
            super::super::commandstats::row_of(super::super::table::lookup(name).unwrap())
        };
        let (hget, hset, del) = (row(b"hget"), row(b"hset"), row(b"del"));
        let calls = |tracking: &LatencyTracking, wanted: usize| {
            tracking
                .cumulative(&[])
                .iter()
                .filter(|report| report.name == COMMANDS[wanted].name)
                .map(|report| report.calls)
                .sum::<u64>()
        };
        let mut hot = HotLatencies::default();
        for _ in 0..20 {
            hot.count_warm(hget, 1_000, &tracking);
        }
        assert_eq!(calls(&tracking, hget), 16, "a full buffer is recorded");
        hot.count_warm(hset, 2_000, &tracking);
        hot.count_warm(hget, 1_000, &tracking);
        assert_eq!(calls(&tracking, hget), 16, "two rows fit");
        hot.count_warm(del, 3_000, &tracking);
        assert_eq!(
            calls(&tracking, hset),
            1,
            "the least recently used row made way"
        );
        assert_eq!(calls(&tracking, hget), 16);
        hot.publish(&tracking);
        assert_eq!(calls(&tracking, hget), 21);
        assert_eq!(calls(&tracking, del), 1);
        hot.publish(&tracking);
        assert_eq!(calls(&tracking, hget), 21, "published once");
    }

    #[test]
    fn percentiles_parse_as_redis() {
        assert_eq!(parse_percentiles(b"50 99 99.9"), Ok(vec![50.0, 99.0, 99.9]));
        assert_eq!(parse_percentiles(b""), Ok(vec![]));
        assert!(parse_percentiles(b"50  99").is_err(), "one space only");
        assert!(parse_percentiles(b"50 abc").is_err());
        assert_eq!(
            parse_percentiles(b"101"),
            Err("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]")
        );
        assert_eq!(format_percentile(99.9), "99.9");
        assert_eq!(format_percentile(50.0), "50");
    }
}
