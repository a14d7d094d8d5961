//! Medians and their distribution-free intervals from order statistics:
//! the interval between the j-th smallest and the j-th largest of n values
//! holds the true median with probability 1 - 2·P(Bin(n, ½) ≤ j-1),
//! whatever the distribution (continuous, independent values).
use serde::{Deserialize, Serialize};
use statrs::distribution::{Binomial, DiscreteCDF};

/// An interval with the confidence it actually has (order statistics give
/// discrete levels: `coverage` is the nearest at or above the one asked
/// for, or the best there is when there are too few values).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// Probability that the interval holds the true figure (0.9375: five
    /// values bound their median's interval at 93.75%, not 95%).
    pub coverage: f64,
}

impl Interval {
    /// The confidence every interval and test is at: 95%.
    pub const CONFIDENCE: f64 = super::CONFIDENCE;

    /// The distribution-free interval of the median of `values` at
    /// [`Interval::CONFIDENCE`] (None with too few values to bound it).
    pub fn of_median(values: &[f64]) -> Option<Interval> {
        median_interval(values, Self::CONFIDENCE)
    }

    /// Whether the coverage reaches `level` (within rounding).
    pub fn reaches(&self, level: f64) -> bool {
        self.coverage + 1e-9 >= level
    }

    /// Half the width relative to `centre` (0.05: ±5%), when centre > 0.
    pub fn relative_half_width(&self, centre: f64) -> Option<f64> {
        (centre > 0.0).then(|| (self.hi - self.lo) / 2.0 / centre)
    }
}

/// The median of `values` (the mean of the middle two for an even count),
/// None when there are none or one is not a number.
pub fn median(values: &[f64]) -> Option<f64> {
    let s = sorted(values)?;
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

fn sorted(values: &[f64]) -> Option<Vec<f64>> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    Some(s)
}

/// The 1-based ranks (j, n+1-j) of the order statistics bounding the
/// median's interval at `level` among `n` values, and the coverage they
/// give. With too few values for `level` (n ≤ 5 at 95%) the widest
/// interval (min, max) and its lower coverage. None for n = 0.
pub(crate) fn median_ranks(n: u64, level: f64) -> Option<(u64, u64, f64)> {
    if n == 0 {
        return None;
    }
    let bin = Binomial::new(0.5, n).ok()?;
    let tail = (1.0 - level) / 2.0;
    // P(B <= j-1) <= tail for the largest such j; start from the normal
    // approximation so that a million samples need a few steps, not n/2.
    let guess = (n as f64 / 2.0 - 1.96 * (n as f64).sqrt() / 2.0).floor();
    let mut j = (guess.max(1.0) as u64).min(n.div_ceil(2));
    while j > 1 && bin.cdf(j - 1) > tail {
        j -= 1;
    }
    while j < n.div_ceil(2) && bin.cdf(j) <= tail {
        j += 1;
    }
    let coverage = round6((1.0 - 2.0 * bin.cdf(j - 1)).max(0.0));
    Some((j, n + 1 - j, coverage))
}

/// `p` to six decimals: a coverage is a probability to read, and a short
/// decimal survives a JSON round trip exactly.
pub(crate) fn round6(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
}

/// The 95%-or-nearest distribution-free interval of the median of `values`.
pub(crate) fn median_interval(values: &[f64], level: f64) -> Option<Interval> {
    let s = sorted(values)?;
    let (j, k, coverage) = median_ranks(s.len() as u64, level)?;
    Some(Interval {
        lo: s[j as usize - 1],
        hi: s[k as usize - 1],
        coverage,
    })
}

/// [`median_interval`] of samples already in ascending order (a run's own
/// latency samples: the interval of its p50).
pub(crate) fn sample_median_interval(sorted: &[u64], level: f64) -> Option<Interval> {
    let (j, k, coverage) = median_ranks(sorted.len() as u64, level)?;
    Some(Interval {
        lo: sorted[j as usize - 1] as f64,
        hi: sorted[k as usize - 1] as f64,
        coverage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn ranks_match_the_binomial_tables() {
        // n = 5: no pair reaches 95%; (min, max) covers 1 - 2/32.
        let (j, k, c) = median_ranks(5, 0.95).unwrap();
        assert_eq!((j, k), (1, 5));
        assert!((c - (1.0 - 2.0 / 32.0)).abs() < 1e-6);
        // n = 6: (min, max) covers 1 - 2/64 = 96.9%.
        let (j, k, c) = median_ranks(6, 0.95).unwrap();
        assert_eq!((j, k), (1, 6));
        assert!((c - (1.0 - 2.0 / 64.0)).abs() < 1e-6);
        // n = 20: ranks 6 and 15 (the classic table), coverage 95.9%.
        let (j, k, c) = median_ranks(20, 0.95).unwrap();
        assert_eq!((j, k), (6, 15));
        assert!((0.95..0.97).contains(&c), "{c}");
        // Large n: about n/2 ± 0.98·sqrt(n), at least 95%.
        let (j, k, c) = median_ranks(1_000_000, 0.95).unwrap();
        assert!((499_000..499_100).contains(&j), "{j}");
        assert_eq!(j + k, 1_000_001);
        assert!(c >= 0.95);
        assert_eq!(median_ranks(0, 0.95), None);
    }

    #[test]
    fn interval_of_values_and_of_samples() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        let i = median_interval(&v, 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (6.0, 15.0));
        assert!(i.reaches(0.95));
        let five = median_interval(&[5.0, 1.0, 4.0, 2.0, 3.0], 0.95).unwrap();
        assert_eq!((five.lo, five.hi), (1.0, 5.0));
        assert!(!five.reaches(0.95));
        let s: Vec<u64> = (1..=20).collect();
        let i = sample_median_interval(&s, 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (6.0, 15.0));
    }
}
