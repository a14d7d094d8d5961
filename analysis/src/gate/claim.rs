//! Expectations judged by the gate's rule: `ratio(METRIC, A, B) OP X`
//! over the repeats of two configurations, and `METRIC OP X` over the
//! repeats of one. An expectation *holds* when the data show it (the
//! one-sided test of its negation rejects at α: the same test that makes
//! `compare` pass), *fails* when the data show its negation beyond the
//! bound (significant at the caller's Holm level and the estimate past
//! the bound: the same rule that makes `compare` call a regression), and
//! is *undecided* otherwise (a skip: never a pass).
//!
//! So `ratio(cycles_per_operation_p50, NEW, OLD) <= 1.1` is exactly
//! `compare OLD NEW --gate p50 --threshold 0.1`: holds ⇔ equivalent or
//! not slower, fails ⇔ regressed. For a bound below 1 (`ratio(...) <= 0.9`:
//! A at least 10% faster) the failing side is significance against the
//! bound itself.
use super::Policy;
use crate::stats::{mann_whitney_greater, median, median_interval};
use statrs::distribution::{Binomial, DiscreteCDF};

/// What an expectation claims of a figure, on the scale it is judged on
/// (logarithms for ratios).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Claim {
    /// At most this (`<`, `<=`).
    AtMost(f64),
    /// At least this (`>`, `>=`).
    AtLeast(f64),
    /// Within `[lo, hi]` (`== X ± TOL`).
    Within(f64, f64),
    /// Outside `[lo, hi]` (`!= X ± TOL`).
    Outside(f64, f64),
}

/// How a claim came out.
#[derive(Clone, Debug, PartialEq)]
pub enum Judgement {
    /// The data show it.
    Holds,
    /// The data show its negation past the bound.
    Fails,
    /// Neither, and why.
    Undecided(String),
}

/// The evidence an expectation reads and the p-values of "the figure is
/// above c" / "below c" for any c.
trait CentreTest {
    /// P-value of "the centre is above `c`".
    fn above(&self, c: f64) -> f64;
    /// P-value of "the centre is below `c`".
    fn below(&self, c: f64) -> f64;
    /// The estimate of the centre.
    fn estimate(&self) -> f64;
}

/// Two sides' repeats on the log scale: the shift of `a` over `b`.
struct Shift {
    a: Vec<f64>,
    b: Vec<f64>,
}

impl CentreTest for Shift {
    fn above(&self, c: f64) -> f64 {
        let shifted: Vec<f64> = self.a.iter().map(|v| v - c).collect();
        mann_whitney_greater(&self.b, &shifted).map_or(1.0, |t| t.p)
    }
    fn below(&self, c: f64) -> f64 {
        let shifted: Vec<f64> = self.a.iter().map(|v| v - c).collect();
        mann_whitney_greater(&shifted, &self.b).map_or(1.0, |t| t.p)
    }
    fn estimate(&self) -> f64 {
        crate::stats::shift::Differences::new(&self.b, &self.a).map_or(f64::NAN, |d| d.median())
    }
}

/// One side's repeats: its median, judged by the sign test (what the
/// median's order-statistic interval inverts).
struct Median(Vec<f64>);

impl Median {
    fn sign_p(&self, c: f64, above: bool) -> f64 {
        let (more, less) = self.0.iter().fold((0u64, 0u64), |(m, l), v| {
            if *v > c {
                (m + 1, l)
            } else if *v < c {
                (m, l + 1)
            } else {
                (m, l)
            }
        });
        let (wins, n) = if above {
            (more, more + less)
        } else {
            (less, more + less)
        };
        if n == 0 {
            return 1.0;
        }
        // P(Bin(n, ½) ≥ wins).
        Binomial::new(0.5, n).map_or(1.0, |b| {
            if wins == 0 {
                1.0
            } else {
                1.0 - b.cdf(wins - 1)
            }
        })
    }
}

impl CentreTest for Median {
    fn above(&self, c: f64) -> f64 {
        self.sign_p(c, true)
    }
    fn below(&self, c: f64) -> f64 {
        self.sign_p(c, false)
    }
    fn estimate(&self) -> f64 {
        median(&self.0).unwrap_or(f64::NAN)
    }
}

fn judge(e: &dyn CentreTest, claim: Claim, policy: &Policy, level: f64) -> Judgement {
    let a = policy.alpha;
    let est = e.estimate();
    let (holds, fails) = match claim {
        Claim::AtMost(m) => (e.below(m) <= a, est >= m && e.above(m.min(0.0)) <= level),
        Claim::AtLeast(m) => (e.above(m) <= a, est <= m && e.below(m.max(0.0)) <= level),
        Claim::Within(lo, hi) => (
            e.above(lo) <= a && e.below(hi) <= a,
            (est > hi && e.above(hi) <= level) || (est < lo && e.below(lo) <= level),
        ),
        Claim::Outside(lo, hi) => (
            (est > hi && e.above(hi) <= a) || (est < lo && e.below(lo) <= a),
            e.above(lo) <= level && e.below(hi) <= level,
        ),
    };
    if holds {
        Judgement::Holds
    } else if fails {
        Judgement::Fails
    } else {
        Judgement::Undecided("the data show neither at this level: more repeats".into())
    }
}

/// A ratio claim over two sides' repeats (`a` over `b`, both positive),
/// the claim on the log scale; exact where every repeat of each side
/// agrees (counts). `level`: the failing side's Holm level.
pub fn ratio(a: &[f64], b: &[f64], claim: Claim, policy: &Policy, level: f64) -> Judgement {
    if a.is_empty() || b.is_empty() {
        return Judgement::Undecided("a side has no repeats".into());
    }
    if a.iter().chain(b).any(|v| !(v.is_finite() && *v >= 0.0)) {
        return Judgement::Undecided(
            "a value that is negative or not a number has no ratio".into(),
        );
    }
    let same = |v: &[f64]| v.iter().all(|x| *x == v[0]);
    if same(a) && same(b) {
        // Exact (a count every repeat agrees on), zeros included, as
        // `compare` judges exact counts: 0 against 0 is no change, and
        // anything against 0 is past any bound.
        let r = match (a[0] == 0.0, b[0] == 0.0) {
            (true, true) => 0.0,
            (false, true) => f64::INFINITY,
            _ => (a[0] / b[0]).ln(),
        };
        let inside = |lo: f64, hi: f64| r >= lo - 1e-12 && r <= hi + 1e-12;
        let ok = match claim {
            Claim::AtMost(m) => r <= m + 1e-12,
            Claim::AtLeast(m) => r >= m - 1e-12,
            Claim::Within(lo, hi) => inside(lo, hi),
            Claim::Outside(lo, hi) => !inside(lo, hi),
        };
        return if ok {
            Judgement::Holds
        } else {
            Judgement::Fails
        };
    }
    if a.iter().chain(b).any(|v| *v == 0.0) {
        return Judgement::Undecided(
            "a value that is 0 has no ratio, and the repeats do not agree".into(),
        );
    }
    let e = Shift {
        a: a.iter().map(|v| v.ln()).collect(),
        b: b.iter().map(|v| v.ln()).collect(),
    };
    judge(&e, claim, policy, level)
}

/// A claim about the median over one configuration's repeats (the sign
/// test: the median's order-statistic interval inverted).
pub(crate) fn median_of(values: &[f64], claim: Claim, policy: &Policy, level: f64) -> Judgement {
    if values.is_empty() {
        return Judgement::Undecided("no repeat has the figure".into());
    }
    judge(&Median(values.to_vec()), claim, policy, level)
}

/// The p-value of the failing side of a ratio claim, for Holm's ordering
/// (1 where the claim is judged exactly or cannot be judged).
pub(crate) fn ratio_fail_p(a: &[f64], b: &[f64], claim: Claim) -> f64 {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|v| !(v.is_finite() && *v > 0.0)) {
        return 1.0;
    }
    let e = Shift {
        a: a.iter().map(|v| v.ln()).collect(),
        b: b.iter().map(|v| v.ln()).collect(),
    };
    fail_p(&e, claim)
}

/// The same for a median claim.
pub(crate) fn median_fail_p(values: &[f64], claim: Claim) -> f64 {
    if values.is_empty() {
        return 1.0;
    }
    fail_p(&Median(values.to_vec()), claim)
}

fn fail_p(e: &dyn CentreTest, claim: Claim) -> f64 {
    match claim {
        Claim::AtMost(m) => e.above(m.min(0.0)),
        Claim::AtLeast(m) => e.below(m.max(0.0)),
        Claim::Within(lo, hi) => e.above(hi).min(e.below(lo)),
        Claim::Outside(lo, hi) => e.above(lo).max(e.below(hi)),
    }
}

/// The median over repeats with its 95% order-statistic interval, in
/// words, for a verdict's reason: `median 3940311 [589739, 7838530]
/// (93.8%) over 5 repeats`.
pub(crate) fn median_text(values: &[f64]) -> String {
    let Some(m) = median(values) else {
        return "no figure".into();
    };
    match median_interval(values, crate::stats::CONFIDENCE) {
        Some(i) if values.len() > 1 => format!(
            "median {} [{}, {}] ({:.1}%) over {} repeats",
            fmt(m),
            fmt(i.lo),
            fmt(i.hi),
            i.coverage * 100.0,
            values.len()
        ),
        _ => format!("{} (one repeat)", fmt(m)),
    }
}

/// A ratio's estimate over repeats with its 90% interval in words.
pub(crate) fn ratio_text(a: &[f64], b: &[f64], policy: &Policy) -> String {
    let logs = |v: &[f64]| {
        v.iter()
            .filter(|x| **x > 0.0)
            .map(|x| x.ln())
            .collect::<Vec<f64>>()
    };
    let Some(d) = crate::stats::shift::Differences::new(&logs(b), &logs(a)) else {
        return "no ratio".into();
    };
    let (k, below) = crate::stats::shift_bound_rank(b.len(), a.len(), policy.alpha);
    format!(
        "×{:.3} [{:.3}, {:.3}] ({:.1}%) over {} vs {} repeats",
        d.median().exp(),
        d.kth(k).exp(),
        d.kth(d.len() + 1 - k).exp(),
        (1.0 - 2.0 * below).max(0.0) * 100.0,
        a.len(),
        b.len()
    )
}

fn fmt(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Policy;

    const BASE: [f64; 5] = [1000.0, 1010.0, 990.0, 1005.0, 995.0];

    fn scaled(f: f64) -> Vec<f64> {
        BASE.iter().map(|v| v * f).collect()
    }

    #[test]
    fn ratio_bounds_hold_fail_or_stay_undecided() {
        let p = Policy::DEFAULT;
        let le = |x: f64| Claim::AtMost(x.ln());
        // 20% slower: holds against ≤ 1.3, fails against ≤ 1.1.
        assert_eq!(
            ratio(&scaled(1.2), &BASE, le(1.3), &p, 0.05),
            Judgement::Holds
        );
        assert_eq!(
            ratio(&scaled(1.2), &BASE, le(1.1), &p, 0.05),
            Judgement::Fails
        );
        // The same: holds against ≤ 1.1 (the compare gate's pass).
        assert_eq!(
            ratio(&scaled(1.0), &BASE, le(1.1), &p, 0.05),
            Judgement::Holds
        );
        // At the bound itself: undecided.
        assert!(matches!(
            ratio(&scaled(1.1), &BASE, le(1.1), &p, 0.05),
            Judgement::Undecided(_)
        ));
        // Faster by 20%: ≥ 1.1 fails, <= 0.9 holds.
        assert_eq!(
            ratio(&scaled(0.8), &BASE, Claim::AtLeast(1.1f64.ln()), &p, 0.05),
            Judgement::Fails
        );
        assert_eq!(
            ratio(&scaled(0.8), &BASE, le(0.9), &p, 0.05),
            Judgement::Holds
        );
        // Within 1 ± 0.05 (TOST).
        let band = Claim::Within(0.95f64.ln(), 1.05f64.ln());
        assert_eq!(ratio(&scaled(1.0), &BASE, band, &p, 0.05), Judgement::Holds);
        assert_eq!(ratio(&scaled(1.3), &BASE, band, &p, 0.05), Judgement::Fails);
        // Exact counts: compared as they are.
        assert_eq!(
            ratio(&[2.0; 3], &[1.0; 3], le(1.5), &p, 0.05),
            Judgement::Fails
        );
        // Exact zeros as `compare` judges exact counts: 0 against 0 is no
        // change, anything against 0 past any bound, 0 against 1 below it.
        assert_eq!(ratio(&[0.0], &[1.0], le(1.0), &p, 0.05), Judgement::Holds);
        assert_eq!(
            ratio(&[0.0; 3], &[0.0; 3], le(1.05), &p, 0.05),
            Judgement::Holds
        );
        assert_eq!(
            ratio(&[1.0; 3], &[0.0; 3], le(1.05), &p, 0.05),
            Judgement::Fails
        );
        // Zeros among repeats that differ have no ratio: undecided.
        assert!(matches!(
            ratio(&[0.0, 1.0], &[1.0, 1.0], le(1.0), &p, 0.05),
            Judgement::Undecided(_)
        ));
    }

    #[test]
    fn a_median_over_repeats_is_judged_with_its_interval() {
        let p = Policy::DEFAULT;
        assert_eq!(
            median_of(&BASE, Claim::AtMost(1100.0), &p, 0.05),
            Judgement::Holds
        );
        assert_eq!(
            median_of(&BASE, Claim::AtMost(900.0), &p, 0.05),
            Judgement::Fails
        );
        // One repeat above, four below: the sign test cannot say at 5%.
        let mixed = [900.0, 950.0, 1200.0, 980.0, 990.0];
        assert!(matches!(
            median_of(&mixed, Claim::AtMost(1000.0), &p, 0.05),
            Judgement::Undecided(_)
        ));
        assert!(median_text(&BASE).contains("over 5 repeats"));
    }
}
