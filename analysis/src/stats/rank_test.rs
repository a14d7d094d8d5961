//! The Mann–Whitney U (Wilcoxon rank-sum) test and its interval for a
//! ratio: distribution-free, so skewed latencies need no assumption, and
//! exact for the small repeat counts a comparison has (the null
//! distribution of U counted, not approximated; the normal approximation
//! with the tie correction beyond).
use statrs::distribution::{ContinuousCDF, Normal};

/// Exact distribution up to this many pairs (n·m); the normal
/// approximation beyond, and wherever values tie.
const EXACT_PAIRS: usize = 400;

/// The outcome of a two-sided rank test of `y` against `x` (the tests'
/// check of the rank machinery against published values).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct RankTest {
    /// U of `y`: pairs with y > x (ties count ½).
    pub u: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Whether `p` comes from the exact null distribution.
    pub exact: bool,
}

/// Arrangements of n x's and m y's with U = k, for k in 0..=n·m: the
/// coefficients of the Gaussian binomial [n+m, n]_q, built as
/// ∏ (1 - q^(m+i)) / (1 - q^i) over i = 1..=n (every coefficient an
/// integer far below 2^53 for n·m ≤ [`EXACT_PAIRS`]).
fn u_counts(n: usize, m: usize) -> Vec<f64> {
    let len = n * m + 1;
    let mut c = vec![0.0; len];
    c[0] = 1.0;
    for i in 1..=n {
        let s = m + i;
        for k in (s..len).rev() {
            c[k] -= c[k - s];
        }
        for k in i..len {
            c[k] += c[k - i];
        }
    }
    c
}

/// P(U ≤ k) for every k (the cumulative null distribution).
fn u_cdf(n: usize, m: usize) -> Vec<f64> {
    let counts = u_counts(n, m);
    let total: f64 = counts.iter().sum();
    let mut acc = 0.0;
    counts
        .iter()
        .map(|c| {
            acc += c;
            acc / total
        })
        .collect()
}

/// The smallest two-sided p-value an exact test of n against m values can
/// give (2 / C(n+m, n)): at 4 against 4 it is 0.029, at 3 against 3 0.10,
/// so fewer than 4 per side can never be significant at 95%.
#[cfg(test)]
pub(crate) fn min_p(n: usize, m: usize) -> f64 {
    if n == 0 || m == 0 {
        return 1.0;
    }
    // C(n+m, n) as a product, in floating point (no overflow for any n).
    let c = (1..=n).fold(1.0f64, |acc, i| acc * (m + i) as f64 / i as f64);
    (2.0 / c).min(1.0)
}

/// A one-sided test's outcome.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OneSided {
    /// The statistic (U of `y`: pairs with y > x, ties ½; or W⁺ of a
    /// signed-rank test).
    pub statistic: f64,
    /// P(statistic ≥ observed) under the null.
    pub p: f64,
    /// Whether `p` comes from the exact null distribution.
    pub exact: bool,
}

/// U of `y` against `x` (pairs with y > x, ties counted ½) from midranks,
/// in O((n+m)·log) time and linear memory, and whether any values tie.
fn u_statistic(x: &[f64], y: &[f64]) -> (f64, f64) {
    let mut all: Vec<(f64, bool)> = x
        .iter()
        .map(|v| (*v, false))
        .chain(y.iter().map(|v| (*v, true)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum_y = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        let midrank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_y += midrank * all[i..=j].iter().filter(|v| v.1).count() as f64;
        i = j + 1;
    }
    let m = y.len() as f64;
    (rank_sum_y - m * (m + 1.0) / 2.0, tie_term)
}

/// The one-sided Mann–Whitney test that `y` tends to be larger than `x`:
/// exact for up to [`EXACT_PAIRS`] pairs without ties, else the normal
/// approximation with the tie-corrected variance and continuity
/// correction. None when either is empty or holds a value that is not a
/// number.
pub(crate) fn mann_whitney_greater(x: &[f64], y: &[f64]) -> Option<OneSided> {
    if x.is_empty() || y.is_empty() || x.iter().chain(y).any(|v| v.is_nan()) {
        return None;
    }
    let (n, m) = (x.len(), y.len());
    let (u, tie_term) = u_statistic(x, y);
    if tie_term == 0.0 && n * m <= EXACT_PAIRS {
        let cdf = u_cdf(n, m);
        // u is an integer here (no ties).
        let k = u.round() as usize;
        let p = 1.0 - if k == 0 { 0.0 } else { cdf[k - 1] };
        return Some(OneSided {
            statistic: u,
            p: p.clamp(0.0, 1.0),
            exact: true,
        });
    }
    let big_n = (n + m) as f64;
    let (nf, mf) = (n as f64, m as f64);
    let var = nf * mf / 12.0 * ((big_n + 1.0) - tie_term / (big_n * (big_n - 1.0)));
    let mu = nf * mf / 2.0;
    let p = if var <= 0.0 {
        // Every value ties: no evidence either way.
        1.0
    } else {
        let z = (u - mu - 0.5) / var.sqrt();
        1.0 - Normal::standard().cdf(z)
    };
    Some(OneSided {
        statistic: u,
        p,
        exact: false,
    })
}

/// The two-sided Mann–Whitney test of `y` against `x` (twice the smaller
/// one-sided p); None when either is empty or holds a value that is not a
/// number.
#[cfg(test)]
fn mann_whitney(x: &[f64], y: &[f64]) -> Option<RankTest> {
    let up = mann_whitney_greater(x, y)?;
    let down = mann_whitney_greater(y, x)?;
    Some(RankTest {
        u: up.statistic,
        p: (2.0 * up.p.min(down.p)).min(1.0),
        exact: up.exact,
    })
}

/// The rank k (1-based) of the order statistic of the n·m differences
/// that bounds their shift at one-sided level `1 − tail` (the k-th
/// smallest for the lower bound, the k-th largest for the upper), and the
/// probability P(U ≤ k − 1) that the bound misses: exact where
/// [`EXACT_PAIRS`] allows, else from the normal approximation.
pub(crate) fn shift_bound_rank(n: usize, m: usize, tail: f64) -> (u64, f64) {
    let pairs = n * m;
    let (k, below) = if pairs <= EXACT_PAIRS {
        let cdf = u_cdf(n, m);
        match cdf.iter().position(|p| *p > tail) {
            Some(0) | None => (1, cdf[0]),
            Some(u) => (u as u64, cdf[u - 1]),
        }
    } else {
        let z = Normal::standard().inverse_cdf(1.0 - tail);
        let nf = pairs as f64;
        let sdu = (nf * (n + m + 1) as f64 / 12.0).sqrt();
        let k = (nf / 2.0 - z * sdu).floor().max(1.0) as u64;
        (k, tail)
    };
    (k.min((pairs as u64).div_ceil(2)), below)
}

/// The interval of `new / base` at `level` that the rank test inverts
/// (Moses; Hodges–Lehmann's for a shift of the logarithms): between the
/// k-th smallest and k-th largest of the n·m ratios new_j / base_i, k from
/// the null distribution of U, counted without listing them. The coverage
/// is the exact one (lower than `level` where too few values reach it:
/// then the widest interval). None when a side is empty or a value is not
/// positive.
#[cfg(test)]
fn ratio_interval(base: &[f64], new: &[f64], level: f64) -> Option<super::Interval> {
    if base.iter().chain(new).any(|v| v.is_nan() || *v <= 0.0) {
        return None;
    }
    let logs = |v: &[f64]| v.iter().map(|x| x.ln()).collect::<Vec<f64>>();
    let d = super::shift::Differences::new(&logs(base), &logs(new))?;
    let (k, below) = shift_bound_rank(base.len(), new.len(), (1.0 - level) / 2.0);
    Some(super::Interval {
        lo: d.kth(k).exp(),
        hi: d.kth(d.len() + 1 - k).exp(),
        coverage: super::order::round6((1.0 - 2.0 * below).max(0.0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_distribution_is_complete_and_symmetric() {
        let c = u_counts(5, 5);
        assert_eq!(c.iter().sum::<f64>(), 252.0);
        assert_eq!(&c[..4], &[1.0, 1.0, 2.0, 3.0]);
        for k in 0..c.len() {
            assert_eq!(c[k], c[c.len() - 1 - k]);
        }
        assert_eq!(u_counts(3, 7).iter().sum::<f64>(), 120.0);
    }

    #[test]
    fn smallest_p_by_repeats() {
        assert!((min_p(3, 3) - 0.1).abs() < 1e-12);
        assert!((min_p(4, 4) - 2.0 / 70.0).abs() < 1e-12);
        assert!((min_p(5, 5) - 2.0 / 252.0).abs() < 1e-12);
        assert_eq!(min_p(0, 5), 1.0);
    }

    #[test]
    fn separated_samples_are_significant_overlapping_ones_not() {
        let x = [10.0, 11.0, 12.0, 13.0, 14.0];
        let y = [20.0, 21.0, 22.0, 23.0, 24.0];
        let t = mann_whitney(&x, &y).unwrap();
        assert!(t.exact);
        assert_eq!(t.u, 25.0);
        assert!((t.p - 2.0 / 252.0).abs() < 1e-12);
        let t = mann_whitney(&x, &[10.5, 11.5, 12.5, 13.5, 14.5]).unwrap();
        assert!(t.p > 0.5, "{}", t.p);
        // U = 18 of 20 pairs: P(U >= 18) = P(U <= 2) = 4/126, two-sided 0.063.
        let t = mann_whitney(&[1.0, 2.0, 3.0, 6.0], &[4.0, 5.0, 7.0, 8.0, 9.0]).unwrap();
        assert_eq!(t.u, 18.0);
        assert!((t.p - 2.0 * 4.0 / 126.0).abs() < 1e-12, "{}", t.p);
        assert!(mann_whitney(&[], &y).is_none());
    }

    #[test]
    fn large_samples_use_the_normal_approximation_consistently() {
        let x: Vec<f64> = (0..30).map(f64::from).collect();
        let y: Vec<f64> = (0..30).map(|v| f64::from(v) + 0.5).collect();
        let t = mann_whitney(&x, &y).unwrap();
        assert!(!t.exact);
        assert!(t.p > 0.5);
        let y: Vec<f64> = (0..30).map(|v| f64::from(v) + 100.0).collect();
        assert!(mann_whitney(&x, &y).unwrap().p < 1e-6);
        // Ties everywhere: p = 1, no division by zero.
        assert_eq!(mann_whitney(&[1.0; 5], &[1.0; 5]).unwrap().p, 1.0);
    }

    #[test]
    fn ratio_interval_brackets_the_shift() {
        let base = [100.0, 102.0, 98.0, 101.0, 99.0];
        let new: Vec<f64> = base.iter().map(|v| v * 1.2).collect();
        let i = ratio_interval(&base, &new, 0.95).unwrap();
        assert!(i.lo < 1.2 && i.hi > 1.2 && i.lo > 1.1, "{i:?}");
        // 5 vs 5: the 3rd smallest and largest of 25 ratios, 96.8%.
        assert!((i.coverage - (1.0 - 2.0 * 4.0 / 252.0)).abs() < 1e-6);
        // 2 vs 2 cannot reach 95%: the widest interval, its coverage said.
        let i = ratio_interval(&[1.0, 2.0], &[1.0, 2.0], 0.95).unwrap();
        assert_eq!((i.lo, i.hi), (0.5, 2.0));
        assert!(i.coverage < 0.95);
        assert!(ratio_interval(&[0.0], &[1.0], 0.95).is_none());
        // Large samples: the normal approximation gives a sane interval.
        let base: Vec<f64> = (0..40).map(|v| 100.0 + f64::from(v)).collect();
        let new: Vec<f64> = base.iter().map(|v| v * 2.0).collect();
        let i = ratio_interval(&base, &new, 0.95).unwrap();
        assert!(
            i.lo > 1.5 && i.hi < 2.5 && i.lo < 2.0 && i.hi > 2.0,
            "{i:?}"
        );
    }
}
