//! The shift between two samples, in memory linear in their sizes: the
//! Hodges–Lehmann estimate (the median of the n·m differences `y_j − x_i`)
//! and the Moses bounds (order statistics of those differences that the
//! rank test inverts), found by counting instead of listing the n·m
//! differences: 2·10⁴ repeats a side are 4·10⁸ differences, which listed
//! take 3.2 GB; counted they take two sorted copies of the inputs.
//!
//! Callers work on logarithms, where a ratio is a shift.

/// Two samples sorted once, ready for counting their differences.
#[derive(Clone, Debug)]
pub struct Differences {
    x: Vec<f64>,
    y: Vec<f64>,
}

impl Differences {
    /// The differences `y_j − x_i`; None when a side is empty or holds a
    /// value that is not finite.
    pub fn new(x: &[f64], y: &[f64]) -> Option<Self> {
        if x.is_empty() || y.is_empty() || x.iter().chain(y).any(|v| !v.is_finite()) {
            return None;
        }
        let mut x = x.to_vec();
        let mut y = y.to_vec();
        x.sort_by(f64::total_cmp);
        y.sort_by(f64::total_cmp);
        Some(Self { x, y })
    }

    /// How many differences there are (n·m).
    pub fn len(&self) -> u64 {
        self.x.len() as u64 * self.y.len() as u64
    }

    /// How many differences are at most `v` (computed as `y_j − x_i`, the
    /// same float operation [`Differences::kth`] bisects over, so the count
    /// is consistent with the value it returns).
    fn count_le(&self, v: f64) -> u64 {
        // For each y_j (ascending), y_j − x_i ≤ v holds for a suffix of the
        // ascending x: its start moves right as y_j grows.
        let (x, n) = (&self.x, self.x.len());
        let mut count = 0u64;
        let mut i = 0usize;
        for &yj in &self.y {
            // First i with yj − x[i] ≤ v, searched on from the last one.
            while i < n && yj - x[i] > v {
                i += 1;
            }
            count += (n - i) as u64;
        }
        count
    }

    /// The k-th smallest difference (1-based, k in 1..=n·m).
    pub fn kth(&self, k: u64) -> f64 {
        let k = k.clamp(1, self.len());
        let lo = self.y[0] - self.x[self.x.len() - 1];
        let hi = self.y[self.y.len() - 1] - self.x[0];
        kth_by_count(lo, hi, k, |v| self.count_le(v))
    }

    /// The median of the differences (Hodges–Lehmann's shift estimate).
    pub fn median(&self) -> f64 {
        median_of_ranked(self.len(), |k| self.kth(k))
    }
}

/// The median of `n` ranked values, the `k`-th smallest (1-based) given by
/// `kth`: the middle one, or the mean of the middle two.
pub(super) fn median_of_ranked(n: u64, kth: impl Fn(u64) -> f64) -> f64 {
    if n % 2 == 1 {
        kth(n / 2 + 1)
    } else {
        (kth(n / 2) + kth(n / 2 + 1)) / 2.0
    }
}

/// The smallest value `v` in `[lo, hi]` with `count(v) ≥ k`, for a
/// non-decreasing count over values that are themselves floats the count
/// can land on: bisection over the floats' order (at most 64 steps), so
/// the answer is exact, not a rounded value near it.
pub(super) fn kth_by_count(lo: f64, hi: f64, k: u64, count: impl Fn(f64) -> u64) -> f64 {
    let (mut a, mut b) = (ordered(lo), ordered(hi));
    if count(lo) >= k {
        return lo;
    }
    // Invariant: count(from(a)) < k ≤ count(from(b)).
    while i128::from(b) - i128::from(a) > 1 {
        // In i128: the two ends of a wide range are 2^64 apart.
        let mid = ((i128::from(a) + i128::from(b)) / 2) as i64;
        if count(unordered(mid)) >= k {
            b = mid;
        } else {
            a = mid;
        }
    }
    unordered(b)
}

/// A float mapped to an integer with the same order (total order; -0 < +0).
fn ordered(v: f64) -> i64 {
    let bits = v.to_bits() as i64;
    if bits < 0 {
        i64::MIN - bits - 1
    } else {
        bits
    }
}

fn unordered(o: i64) -> f64 {
    let bits = if o < 0 { i64::MIN - o - 1 } else { o };
    f64::from_bits(bits as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_sorted(x: &[f64], y: &[f64]) -> Vec<f64> {
        let mut d: Vec<f64> = x
            .iter()
            .flat_map(|a| y.iter().map(move |b| b - a))
            .collect();
        d.sort_by(f64::total_cmp);
        d
    }

    #[test]
    fn every_order_statistic_matches_the_listed_differences() {
        let x = [3.0, -1.5, 2.25, 7.0, 0.0, 2.25];
        let y = [1.0, 4.5, -2.0, 4.5, 9.75];
        let d = Differences::new(&x, &y).unwrap();
        let listed = all_sorted(&x, &y);
        assert_eq!(d.len(), 30);
        for (i, want) in listed.iter().enumerate() {
            assert_eq!(d.kth(i as u64 + 1), *want, "k = {}", i + 1);
        }
        let m = (listed[14] + listed[15]) / 2.0;
        assert_eq!(d.median(), m);
    }

    #[test]
    fn logarithms_of_real_figures_are_exact_too() {
        let x: Vec<f64> = [352800.0f64, 331600.0, 401740.0, 378520.0]
            .iter()
            .map(|v| v.ln())
            .collect();
        let y: Vec<f64> = [458840.0f64, 418960.0, 384680.0]
            .iter()
            .map(|v| v.ln())
            .collect();
        let d = Differences::new(&x, &y).unwrap();
        let listed = all_sorted(&x, &y);
        for (i, want) in listed.iter().enumerate() {
            assert_eq!(d.kth(i as u64 + 1), *want);
        }
    }

    #[test]
    fn large_samples_stay_linear_and_find_the_shift() {
        // 20 000 a side: 4·10⁸ differences, none listed.
        let x: Vec<f64> = (0..20_000).map(|i| f64::from(i) * 1e-3).collect();
        let y: Vec<f64> = x.iter().map(|v| v + 0.25).collect();
        let d = Differences::new(&x, &y).unwrap();
        assert!((d.median() - 0.25).abs() < 1e-9);
        assert!(Differences::new(&[], &y).is_none());
        assert!(Differences::new(&[f64::NAN], &y).is_none());
    }

    #[test]
    fn the_float_order_round_trips() {
        for v in [-3.5, -0.0, 0.0, 1e-300, 2.0, f64::MAX, -f64::MAX] {
            assert_eq!(unordered(ordered(v)).to_bits(), v.to_bits());
        }
        assert!(ordered(-1.0) < ordered(-0.0));
        assert!(ordered(-0.0) < ordered(0.0));
        assert!(ordered(1.0) < ordered(1.0000001));
    }
}
