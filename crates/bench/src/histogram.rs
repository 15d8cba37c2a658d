//! Latency bookkeeping: an HdrHistogram per load thread, merged at the end, summarised in µs.
//!
//! Values are recorded in nanoseconds with three significant digits (0.1% resolution) from
//! 1 ns to [`LATENCY_NS_MAX`]; longer latencies are clamped to it and counted as clamped.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The longest latency the histogram tracks, in nanoseconds (one minute).
pub const LATENCY_NS_MAX: u64 = 60 * 1_000_000_000;
/// Significant decimal digits kept per value.
const SIGNIFICANT_DIGITS: u8 = 3;

/// One thread's latencies.
#[derive(Debug, Clone)]
pub struct Latencies {
    histogram: Histogram<u64>,
    clamped: u64,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// An empty record.
    ///
    /// # Panics
    /// Never: the bounds are constants that HdrHistogram accepts.
    #[must_use]
    pub fn new() -> Self {
        let histogram = Histogram::new_with_bounds(1, LATENCY_NS_MAX, SIGNIFICANT_DIGITS)
            .expect("constant histogram bounds are valid");
        Latencies {
            histogram,
            clamped: 0,
        }
    }

    /// Records one latency in nanoseconds.
    pub fn record_ns(&mut self, latency_ns: u64) {
        let value = latency_ns.clamp(1, LATENCY_NS_MAX);
        self.clamped += u64::from(latency_ns > LATENCY_NS_MAX);
        // In range by the clamp above, so recording cannot fail.
        self.histogram.saturating_record(value);
    }

    /// Adds another record into this one.
    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides, so adding cannot fail.
        self.histogram
            .add(&other.histogram)
            .expect("histograms share bounds");
        self.clamped += other.clamped;
    }

    /// The number of recorded latencies.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// Percentiles and extremes in microseconds.
    #[must_use]
    pub fn summary(&self) -> LatencySummary {
        let us = |ns: u64| {
            #[allow(clippy::cast_precision_loss)]
            let value = ns as f64 / 1000.0;
            value
        };
        if self.histogram.is_empty() {
            return LatencySummary::default();
        }
        let at = |q: f64| us(self.histogram.value_at_quantile(q));
        LatencySummary {
            count: self.count(),
            mean_us: self.histogram.mean() / 1000.0,
            p50_us: at(0.50),
            p90_us: at(0.90),
            p99_us: at(0.99),
            p999_us: at(0.999),
            p9999_us: at(0.9999),
            max_us: us(self.histogram.max()),
            clamped: self.clamped,
        }
    }
}

/// Latency percentiles in microseconds, as printed and written to JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Latencies recorded.
    pub count: u64,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// 99.99th percentile.
    pub p9999_us: f64,
    /// The largest latency seen.
    pub max_us: f64,
    /// Latencies above [`LATENCY_NS_MAX`], recorded as that maximum.
    pub clamped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut latencies = Latencies::new();
        // 1..=10_000 µs, one each: the p-th percentile is p% of 10 ms.
        for us in 1..=10_000u64 {
            latencies.record_ns(us * 1000);
        }
        let summary = latencies.summary();
        assert_eq!(summary.count, 10_000);
        let close = |got: f64, want: f64| (got - want).abs() / want < 0.002;
        assert!(close(summary.p50_us, 5_000.0), "{summary:?}");
        assert!(close(summary.p90_us, 9_000.0), "{summary:?}");
        assert!(close(summary.p99_us, 9_900.0), "{summary:?}");
        assert!(close(summary.p999_us, 9_990.0), "{summary:?}");
        assert!(close(summary.max_us, 10_000.0), "{summary:?}");
        assert!(close(summary.mean_us, 5_000.5), "{summary:?}");
    }

    #[test]
    fn merge_adds_counts_and_keeps_extremes() {
        let mut a = Latencies::new();
        let mut b = Latencies::new();
        for _ in 0..900 {
            a.record_ns(10_000);
        }
        for _ in 0..100 {
            b.record_ns(1_000_000);
        }
        a.merge(&b);
        let summary = a.summary();
        assert_eq!(summary.count, 1000);
        assert!((summary.p50_us - 10.0).abs() < 0.1);
        assert!((summary.p99_us - 1000.0).abs() < 1.0);
        assert!((summary.max_us - 1000.0).abs() < 1.0);
    }

    #[test]
    fn out_of_range_values_are_clamped_and_counted() {
        let mut latencies = Latencies::new();
        latencies.record_ns(0);
        latencies.record_ns(LATENCY_NS_MAX * 2);
        let summary = latencies.summary();
        assert_eq!(summary.count, 2);
        assert_eq!(summary.clamped, 1);
        assert!(summary.max_us >= 59_000_000.0);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(Latencies::new().summary(), LatencySummary::default());
    }
}
