//! A Zipf sampler by rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to
//! generate variates from monotone discrete distributions", 1996), as in Apache Commons RNG.
//!
//! Rank `k` in `1..=n` is drawn with probability `k^-s / H(n, s)`. Each draw costs a few
//! `exp`/`ln` calls and, on average, well under two uniforms, whatever `n` is: no table of `n`
//! cumulative weights is built, so a keyspace of a billion keys costs nothing to set up.
//!
//! Invariants: `n >= 1`, `s > 0` and finite; every sample is in `1..=n`.

use rand::Rng;

/// The exponent below which the series helpers switch to their Taylor expansions.
const TAYLOR_THRESHOLD: f64 = 1e-8;

/// Draws ranks `1..=n` with probability proportional to `k^-s`.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    exponent: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    squeeze: f64,
}

impl Zipf {
    /// A sampler over ranks `1..=n` with exponent `s` (often 0.99 or 1.0 for caches).
    ///
    /// # Panics
    /// If `n == 0` or `s` is not a finite number above zero: the caller validates user input.
    #[must_use]
    pub fn new(n: u64, exponent: f64) -> Self {
        assert!(n >= 1, "zipf needs at least one element");
        assert!(
            exponent.is_finite() && exponent > 0.0,
            "zipf exponent must be > 0"
        );
        let mut zipf = Zipf {
            n,
            exponent,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        #[allow(clippy::cast_precision_loss)] // n above 2^53 loses only sub-rank precision.
        let n_f64 = n as f64;
        zipf.h_integral_n = zipf.h_integral(n_f64 + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// The number of ranks.
    #[must_use]
    pub fn n(&self) -> u64 {
        self.n
    }

    /// One rank in `1..=n`.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            let uniform: f64 = rng.gen();
            let u = self.h_integral_n + uniform * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            #[allow(clippy::cast_precision_loss)]
            let k_f64 = k as f64;
            if k_f64 - x <= self.squeeze || u >= self.h_integral(k_f64 + 0.5) - self.h(k_f64) {
                debug_assert!((1..=self.n).contains(&k));
                return k;
            }
        }
    }

    /// `h(x) = x^-s`, the hat function's density.
    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    /// The integral of `h` from 1 to `x`, shifted so the formula stays stable at `s == 1`.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.exponent) * log_x) * log_x
    }

    /// The inverse of [`Zipf::h_integral`].
    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, accurate near zero.
fn helper1(x: f64) -> f64 {
    if x.abs() > TAYLOR_THRESHOLD {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near zero.
fn helper2(x: f64) -> f64 {
    if x.abs() > TAYLOR_THRESHOLD {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    /// The exact probabilities `k^-s / H(n, s)` for ranks `1..=n`.
    fn theory(n: u64, exponent: f64) -> Vec<f64> {
        #[allow(clippy::cast_precision_loss)]
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-exponent)).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    fn histogram(n: u64, exponent: f64, samples: u64, seed: u64) -> Vec<u64> {
        let zipf = Zipf::new(n, exponent);
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut counts = vec![0u64; usize::try_from(n).unwrap()];
        for _ in 0..samples {
            let k = zipf.sample(&mut rng);
            assert!((1..=n).contains(&k));
            counts[usize::try_from(k - 1).unwrap()] += 1;
        }
        counts
    }

    /// Each of the first ten ranks is within five standard errors of theory (for the head of a
    /// skewed distribution that is well under 1% relative error).
    fn check_top_ranks(n: u64, exponent: f64) {
        let samples = 1_000_000;
        let counts = histogram(n, exponent, samples, 7);
        let expected = theory(n, exponent);
        for rank in 0..10 {
            #[allow(clippy::cast_precision_loss)]
            let observed = counts[rank] as f64 / samples as f64;
            let p = expected[rank];
            #[allow(clippy::cast_precision_loss)]
            let standard_error = (p * (1.0 - p) / samples as f64).sqrt();
            let error = (observed - p).abs();
            assert!(
                error < 5.0 * standard_error,
                "s={exponent} rank {}: {observed} vs {p}",
                rank + 1
            );
        }
    }

    #[test]
    fn top_ranks_match_theory_for_common_exponents() {
        for exponent in [0.5, 0.99, 1.0, 1.2, 2.0] {
            check_top_ranks(10_000, exponent);
        }
    }

    /// Pearson's chi-square over all 100 ranks stays below the 0.999 quantile for 99 degrees of
    /// freedom (148.2): the whole shape matches, not just the head.
    #[test]
    fn chi_square_over_all_ranks() {
        let n = 100;
        let samples = 200_000;
        for exponent in [0.8, 1.0, 1.1] {
            let counts = histogram(n, exponent, samples, 11);
            #[allow(clippy::cast_precision_loss)]
            let chi_square: f64 = theory(n, exponent)
                .iter()
                .zip(&counts)
                .map(|(p, &c)| {
                    let expected = p * samples as f64;
                    (c as f64 - expected).powi(2) / expected
                })
                .sum();
            assert!(chi_square < 148.2, "s={exponent}: chi-square {chi_square}");
        }
    }

    #[test]
    fn single_rank_and_huge_n() {
        let mut rng = SmallRng::seed_from_u64(1);
        let one = Zipf::new(1, 0.99);
        assert!((0..1000).all(|_| one.sample(&mut rng) == 1));
        let huge = Zipf::new(1 << 40, 0.99);
        assert!((0..1000).all(|_| (1..=1u64 << 40).contains(&huge.sample(&mut rng))));
        assert_eq!(huge.n(), 1 << 40);
    }

    #[test]
    #[should_panic(expected = "exponent")]
    fn rejects_zero_exponent() {
        let _ = Zipf::new(10, 0.0);
    }
}
