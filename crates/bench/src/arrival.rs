//! Open-loop arrival schedules: when each request is *meant* to be sent.
//!
//! Latency in open loop is measured from the intended send time, not from the moment the
//! generator got round to sending, so a stalled server (or generator) shows up as latency
//! instead of silently lowering the offered load ("coordinated omission").
//!
//! Invariants: intended times never decrease; the mean gap is `1 / rate`.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Nanoseconds in one second.
const NANOS_PER_SEC: f64 = 1e9;

/// How gaps between arrivals are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalKind {
    /// Exponential gaps: a Poisson process, like many independent clients.
    Poisson,
    /// Equal gaps: a metronome, the gentlest load for a given rate.
    Uniform,
}

/// An endless schedule of intended send times, in nanoseconds since the run's clock origin.
#[derive(Debug, Clone)]
pub struct Arrivals {
    kind: ArrivalKind,
    gap_ns_mean: f64,
    /// Kept as `f64` so sub-nanosecond gaps at very high rates do not drift.
    next_ns: f64,
}

impl Arrivals {
    /// A schedule at `rate_per_sec` requests per second whose first arrival is `start_ns`.
    ///
    /// # Panics
    /// If the rate is not a positive finite number (validated from user input earlier).
    #[must_use]
    pub fn new(kind: ArrivalKind, rate_per_sec: f64, start_ns: u64) -> Self {
        assert!(
            rate_per_sec.is_finite() && rate_per_sec > 0.0,
            "rate must be > 0"
        );
        #[allow(clippy::cast_precision_loss)]
        let next_ns = start_ns as f64;
        Arrivals {
            kind,
            gap_ns_mean: NANOS_PER_SEC / rate_per_sec,
            next_ns,
        }
    }

    /// The next intended send time, without consuming it.
    #[must_use]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn peek_ns(&self) -> u64 {
        self.next_ns as u64
    }

    /// Consumes the next intended send time and draws the one after it.
    pub fn advance<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        let current = self.peek_ns();
        let gap = match self.kind {
            ArrivalKind::Uniform => self.gap_ns_mean,
            ArrivalKind::Poisson => {
                // 1 - U lies in (0, 1], so the logarithm is finite.
                let uniform: f64 = rng.gen();
                -(1.0 - uniform).ln() * self.gap_ns_mean
            }
        };
        debug_assert!(gap >= 0.0);
        self.next_ns += gap;
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn gaps(kind: ArrivalKind, rate: f64, count: usize) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut arrivals = Arrivals::new(kind, rate, 1_000);
        let mut last = arrivals.advance(&mut rng);
        assert_eq!(last, 1_000, "the first arrival is the start");
        (0..count)
            .map(|_| {
                let next = arrivals.advance(&mut rng);
                assert!(next >= last, "intended times never decrease");
                #[allow(clippy::cast_precision_loss)]
                let gap = (next - last) as f64;
                last = next;
                gap
            })
            .collect()
    }

    #[test]
    fn poisson_mean_rate_matches() {
        let rate = 250_000.0;
        let samples = gaps(ArrivalKind::Poisson, rate, 1_000_000);
        #[allow(clippy::cast_precision_loss)]
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let expected = NANOS_PER_SEC / rate;
        assert!(
            (mean - expected).abs() / expected < 0.01,
            "{mean} vs {expected}"
        );
        // Exponential gaps: the standard deviation equals the mean, and about 36.8% of gaps
        // exceed the mean.
        #[allow(clippy::cast_precision_loss)]
        let above = samples.iter().filter(|&&g| g > expected).count() as f64 / 1e6;
        assert!((above - (-1.0f64).exp()).abs() < 0.01, "{above}");
    }

    #[test]
    fn uniform_spacing_is_constant() {
        let rate = 30_000.0;
        let samples = gaps(ArrivalKind::Uniform, rate, 100_000);
        let expected = NANOS_PER_SEC / rate;
        // Truncation to whole nanoseconds moves single gaps by at most one.
        assert!(samples.iter().all(|g| (g - expected).abs() <= 1.0));
    }

    #[test]
    fn arrivals_in_a_window_match_rate() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut arrivals = Arrivals::new(ArrivalKind::Poisson, 100_000.0, 0);
        let window_ns = 10 * 1_000_000_000;
        let mut count = 0u64;
        while arrivals.advance(&mut rng) < window_ns {
            count += 1;
        }
        // Poisson: the count's standard deviation is sqrt(1e6) = 1000; allow five of them.
        assert!((995_000..=1_005_000).contains(&count), "{count}");
    }
}
