//! Paired figures (the rounds of an interleaved comparison: A and B run
//! back to back, their difference one value): the Wilcoxon signed-rank
//! test and the Hodges–Lehmann estimate of the centre of the differences
//! (the median of the Walsh averages), in memory linear in the rounds.
//!
//! The test is exact for up to [`EXACT_ROUNDS`] differences, ties
//! included: the null distribution of W⁺ is that of random signs on the
//! observed midranks (the differences of two identical configurations run
//! in random order are symmetric about 0), counted over the doubled
//! midrank sums; the normal approximation with the tie correction beyond.
//! Zero differences keep their ranks and count for neither sign (Pratt),
//! so rounds that agree exactly are evidence, not discarded.
use super::shift::kth_by_count;
use super::OneSided;
use statrs::distribution::{ContinuousCDF, Normal};

/// Exact null distribution up to this many differences.
pub(crate) const EXACT_ROUNDS: usize = 120;

/// Midranks of |d| (ties share their mean rank), in the input's order.
fn midranks(abs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..abs.len()).collect();
    order.sort_by(|a, b| abs[*a].total_cmp(&abs[*b]));
    let mut ranks = vec![0.0; abs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && abs[order[j + 1]] == abs[order[i]] {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for &o in &order[i..=j] {
            ranks[o] = r;
        }
        i = j + 1;
    }
    ranks
}

/// The one-sided signed-rank test that the differences `d` centre above
/// 0. None for no differences or one that is not a number.
pub(crate) fn signed_rank_greater(d: &[f64]) -> Option<OneSided> {
    if d.is_empty() || d.iter().any(|v| v.is_nan()) {
        return None;
    }
    let abs: Vec<f64> = d.iter().map(|v| v.abs()).collect();
    let ranks = midranks(&abs);
    // Zeros carry no sign: their ranks are in neither W⁺ nor the flips.
    let signed: Vec<(f64, f64)> = d.iter().zip(&ranks).map(|(v, r)| (*v, *r)).collect();
    let w_plus: f64 = signed
        .iter()
        .filter(|(v, _)| *v > 0.0)
        .map(|(_, r)| r)
        .sum();
    let flippable: Vec<f64> = signed
        .iter()
        .filter(|(v, _)| *v != 0.0)
        .map(|(_, r)| *r)
        .collect();
    if flippable.is_empty() {
        return Some(OneSided {
            statistic: 0.0,
            p: 1.0,
            exact: true,
        });
    }
    if flippable.len() <= EXACT_ROUNDS {
        // Doubled midranks are integers; the distribution of the sum of a
        // random subset of them, each in with probability ½.
        let doubled: Vec<usize> = flippable
            .iter()
            .map(|r| (r * 2.0).round() as usize)
            .collect();
        let total: usize = doubled.iter().sum();
        let mut dist = vec![0.0f64; total + 1];
        dist[0] = 1.0;
        let mut reach = 0;
        for &w in &doubled {
            for s in (0..=reach).rev() {
                let here = dist[s] / 2.0;
                dist[s] = here;
                dist[s + w] += here;
            }
            reach += w;
        }
        let observed = (w_plus * 2.0).round() as usize;
        let p: f64 = dist[observed.min(total)..].iter().sum();
        return Some(OneSided {
            statistic: w_plus,
            p: p.clamp(0.0, 1.0),
            exact: true,
        });
    }
    let mean: f64 = flippable.iter().sum::<f64>() / 2.0;
    let var: f64 = flippable.iter().map(|r| r * r).sum::<f64>() / 4.0;
    let z = (w_plus - mean - 0.5) / var.sqrt();
    Some(OneSided {
        statistic: w_plus,
        p: 1.0 - Normal::standard().cdf(z),
        exact: false,
    })
}

/// The Walsh averages (d_i + d_j)/2, i ≤ j, of differences sorted once:
/// counted, never listed.
#[derive(Clone, Debug)]
pub struct Walsh {
    d: Vec<f64>,
}

impl Walsh {
    /// None for no differences or one that is not finite.
    pub fn new(d: &[f64]) -> Option<Self> {
        if d.is_empty() || d.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut d = d.to_vec();
        d.sort_by(f64::total_cmp);
        Some(Self { d })
    }

    /// n(n+1)/2.
    pub fn len(&self) -> u64 {
        let n = self.d.len() as u64;
        n * (n + 1) / 2
    }

    fn count_le(&self, v: f64) -> u64 {
        // For ascending i, the largest j ≥ i with (d_i + d_j)/2 ≤ v moves
        // left as d_i grows.
        let d = &self.d;
        let n = d.len();
        let mut count = 0u64;
        let mut j = n; // exclusive end of the j's that qualify
        for i in 0..n {
            while j > i && (d[i] + d[j - 1]) / 2.0 > v {
                j -= 1;
            }
            if j <= i {
                break;
            }
            count += (j - i) as u64;
        }
        count
    }

    /// The k-th smallest Walsh average (1-based).
    pub fn kth(&self, k: u64) -> f64 {
        let k = k.clamp(1, self.len());
        let n = self.d.len();
        kth_by_count(self.d[0], self.d[n - 1], k, |v| self.count_le(v))
    }

    /// Their median: the Hodges–Lehmann estimate of the centre.
    pub fn median(&self) -> f64 {
        super::shift::median_of_ranked(self.len(), |k| self.kth(k))
    }

    /// The bounds of the centre at two one-sided levels `1 − tail` each
    /// (the interval the signed-rank test inverts): the k-th smallest and
    /// k-th largest Walsh averages, k from the normal approximation of W⁺
    /// (exact enough for a reported interval; decisions use the test's
    /// p-values). With too few differences, the extreme averages.
    pub fn bounds(&self, tail: f64) -> (f64, f64) {
        let n = self.d.len() as f64;
        let total = self.len();
        let z = Normal::standard().inverse_cdf(1.0 - tail);
        let sd = (n * (n + 1.0) * (2.0 * n + 1.0) / 24.0).sqrt();
        let k = ((total as f64 / 2.0 - z * sd).floor().max(1.0) as u64).min(total.div_ceil(2));
        (self.kth(k), self.kth(total + 1 - k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_distribution_matches_the_tables() {
        // n = 5, all positive: W⁺ = 15, P = 1/32.
        let t = signed_rank_greater(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert!(t.exact);
        assert_eq!(t.statistic, 15.0);
        assert!((t.p - 1.0 / 32.0).abs() < 1e-12);
        // n = 6, rank 2 negative: W⁺ = 19 of 21; P(W⁺ ≥ 19) against every
        // one of the 64 sign patterns, counted by brute force.
        let d = [1.0, -2.0, 3.0, 4.0, 5.0, 6.0];
        let t = signed_rank_greater(&d).unwrap();
        let brute = (0..64u32)
            .filter(|mask| {
                (0..6)
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| i as f64 + 1.0)
                    .sum::<f64>()
                    >= 19.0
            })
            .count() as f64
            / 64.0;
        assert!((t.p - brute).abs() < 1e-12, "{} vs {brute}", t.p);
        // Symmetric data: p near ½ or above.
        let t = signed_rank_greater(&[-1.0, 1.0, -2.0, 2.0, -3.0, 3.0]).unwrap();
        assert!(t.p > 0.4, "{}", t.p);
    }

    #[test]
    fn ties_and_zeros_are_counted_exactly() {
        // Every difference equal and negative: W⁺ = 0, P = 1.
        let t = signed_rank_greater(&[-0.05; 10]).unwrap();
        assert_eq!(t.p, 1.0);
        // Every difference equal and positive: only the all-plus flip
        // reaches it: 2⁻¹⁰.
        let t = signed_rank_greater(&[0.05; 10]).unwrap();
        assert!((t.p - 1.0 / 1024.0).abs() < 1e-12, "{}", t.p);
        // All zero: no evidence.
        assert_eq!(signed_rank_greater(&[0.0; 7]).unwrap().p, 1.0);
        assert!(signed_rank_greater(&[]).is_none());
    }

    #[test]
    fn normal_approximation_agrees_with_the_exact_count_near_the_switch() {
        let d: Vec<f64> = (0..EXACT_ROUNDS)
            .map(|i| (i as f64 * 0.37).sin() + 0.15)
            .collect();
        let exact = signed_rank_greater(&d).unwrap();
        let mut longer = d.clone();
        longer.push(0.15);
        let approx = signed_rank_greater(&longer).unwrap();
        assert!(exact.exact && !approx.exact);
        assert!(
            (exact.p - approx.p).abs() < 0.02,
            "{} {}",
            exact.p,
            approx.p
        );
    }

    #[test]
    fn walsh_averages_are_counted_exactly() {
        let d = [0.3, -0.1, 0.25, 0.0, 0.7, 0.25];
        let w = Walsh::new(&d).unwrap();
        let mut listed = Vec::new();
        for i in 0..d.len() {
            for j in i..d.len() {
                let (a, b) = if d[i] <= d[j] {
                    (d[i], d[j])
                } else {
                    (d[j], d[i])
                };
                listed.push((a + b) / 2.0);
            }
        }
        listed.sort_by(f64::total_cmp);
        assert_eq!(w.len(), listed.len() as u64);
        for (k, want) in listed.iter().enumerate() {
            assert_eq!(w.kth(k as u64 + 1), *want, "k {}", k + 1);
        }
        let (lo, hi) = w.bounds(0.05);
        assert!(lo <= w.median() && w.median() <= hi);
    }
}
