//! One endpoint's tests: the evidence a comparison has for one figure of
//! one row, reduced to three one-sided p-values (slower; not slower by
//! the margin; not faster by the margin), an estimate with its 90%
//! interval, and the spread that says how many repeats would decide it.
//! Which test depends on the evidence:
//!
//! | evidence | test | estimate |
//! |---|---|---|
//! | repeats of two recordings | Mann–Whitney (exact to 400 pairs) | Hodges–Lehmann shift |
//! | rounds run back to back | Wilcoxon signed-rank on the differences (exact to 120 rounds) | median of Walsh averages |
//! | several baseline recordings | t test of the new recording's median against theirs, n − 1 df | difference from their mean |
//! | one recording a side, drift known | normal test, the drift's variance added | Hodges–Lehmann shift |
//!
//! Counts whose every repeat agrees on each side are compared exactly
//! (no test: there is no spread to test against).
use super::power;
use super::{Decision, Policy, Scale};
use crate::stats::shift::Differences;
use crate::stats::shift_bound_rank;
use crate::stats::signed_rank::{signed_rank_greater, Walsh};
use crate::stats::{mann_whitney_greater, median, sd};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// What a comparison knows of one figure of one row.
#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// Independent repeats of each side (two files, or two rows of one).
    Independent {
        /// The baseline's repeats.
        base: Vec<f64>,
        /// The new side's.
        new: Vec<f64>,
    },
    /// Rounds run back to back, one (baseline, new) pair each.
    Paired(Vec<(f64, f64)>),
    /// Several baseline recordings (files recorded at different times),
    /// each with its repeats, against the new side's repeats: the drift
    /// between recordings is measured by their spread.
    Recordings {
        /// Each baseline recording's repeats.
        base: Vec<Vec<f64>>,
        /// The new recording's repeats.
        new: Vec<f64>,
    },
    /// One recording a side, with the spread between recordings known
    /// (log sd, from a host noise profile).
    Drift {
        /// The baseline's repeats.
        base: Vec<f64>,
        /// The new side's.
        new: Vec<f64>,
        /// The standard deviation between recordings (same scale).
        between: f64,
    },
}

/// Which test an endpoint's evidence was given.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "method")]
pub enum Method {
    /// Counts that every repeat agreed on: compared as they are.
    ExactCounts,
    /// Mann–Whitney on independent repeats.
    RankSum,
    /// Wilcoxon signed-rank on paired rounds.
    SignedRank,
    /// t test of a recording's median against several baseline recordings'.
    Recordings,
    /// Normal test with a known drift between recordings.
    Drift {
        /// The drift's standard deviation (the scale's units).
        between: f64,
    },
}

impl Method {
    /// The design whose standard error its power is computed with.
    fn design(self) -> power::Design {
        match self {
            Method::SignedRank => power::Design::Paired,
            Method::Recordings => power::Design::Recordings,
            Method::Drift { between } => power::Design::Drift { between },
            Method::RankSum | Method::ExactCounts => power::Design::Independent,
        }
    }

    /// Its name in a report.
    pub fn name(self) -> &'static str {
        match self {
            Method::ExactCounts => "exact counts",
            Method::RankSum => "rank-sum",
            Method::SignedRank => "signed-rank",
            Method::Recordings => "recordings t test",
            Method::Drift { .. } => "drift-aware normal test",
        }
    }
}

/// One endpoint tested.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Test {
    /// How the figure is compared.
    pub scale: Scale,
    /// Which test ran.
    pub method: Method,
    /// The estimated change on the scale (log ratio, or difference).
    pub estimate: f64,
    /// Its two-sided interval (the one TOST reads) on the scale.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// The interval's coverage (exact for the rank tests; nominal else).
    pub coverage: f64,
    /// P-value of "the new side is slower" (one-sided).
    pub p_slower: f64,
    /// P-value of "slower by less than the margin".
    pub p_not_slower: f64,
    /// P-value of "faster by less than the margin".
    pub p_not_faster: f64,
    /// The margin on the scale.
    pub margin: f64,
    /// Repeats (or rounds) of each side; recordings for [`Evidence::Recordings`].
    pub n: (usize, usize),
    /// The spread a repeat (or round, or recording) adds, on the scale:
    /// what the repeats that would decide it are computed from.
    pub spread: Option<f64>,
    /// The spread's degrees of freedom.
    pub spread_df: usize,
    /// Standard error of the estimate (normal theory), when known.
    pub se: Option<f64>,
    /// Whether the estimate is the difference of two exact counts.
    pub exact: bool,
    /// The baseline's typical value on the linear scale (the margin's
    /// reference for counts; the median for a ratio).
    pub baseline: f64,
}

impl Test {
    /// The smallest p-value its slower-test can reach at these repeats:
    /// 1 / C(n + m, n) for the rank-sum test, 2⁻ⁿ for the signed-rank, the
    /// p itself for exact counts (nothing random: agreeing counts can
    /// never reject), 0 for the normal and t tests. An endpoint whose
    /// smallest p is above the level it would be held to cannot reject,
    /// so it takes no share of α (`family::holm_levels_discrete`).
    pub fn smallest_p(&self) -> f64 {
        match self.method {
            Method::ExactCounts => self.p_slower,
            Method::RankSum => 1.0 / binomial(self.n.0 + self.n.1, self.n.0),
            Method::SignedRank => 0.5f64.powi(self.n.0.min(1000) as i32),
            Method::Recordings | Method::Drift { .. } => 0.0,
        }
    }

    /// The estimate as the user reads it: a ratio (×1.12) or a difference.
    pub fn shown(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Ratio => v.exp(),
            Scale::Count => v,
        }
    }
}

fn pooled_sd(x: &[f64], y: &[f64]) -> Option<(f64, usize)> {
    let df = (x.len() + y.len()).checked_sub(2).filter(|d| *d > 0)?;
    let ss = |v: &[f64]| sd(v).map_or(0.0, |s| s * s * (v.len() as f64 - 1.0));
    Some((((ss(x) + ss(y)) / df as f64).sqrt(), df))
}

fn to_scale(scale: Scale, v: &[f64]) -> Result<Vec<f64>, String> {
    if v.iter().any(|x| !x.is_finite()) {
        return Err("a value that is not a number".into());
    }
    match scale {
        Scale::Count => Ok(v.to_vec()),
        Scale::Ratio => {
            if v.iter().any(|x| *x <= 0.0) {
                return Err("a latency of 0 or less (not a measurement)".into());
            }
            Ok(v.iter().map(|x| x.ln()).collect())
        }
    }
}

impl Evidence {
    /// Tests this evidence on `scale` at `policy`: Err says why no test can
    /// run (a side without values).
    pub fn examine(&self, scale: Scale, policy: &Policy) -> Result<Test, String> {
        match self {
            Evidence::Independent { base, new } => independent(base, new, scale, policy, None),
            Evidence::Drift { base, new, between } => {
                independent(base, new, scale, policy, Some(*between))
            }
            Evidence::Paired(pairs) => paired(pairs, scale, policy),
            Evidence::Recordings { base, new } => recordings(base, new, scale, policy),
        }
    }
}

/// Counts every repeat of each side agrees on are exact: the difference
/// is what it is, decided at once (p 0 or 1) — for independent repeats
/// (files) and paired rounds (the live comparison) alike.
fn exact_counts(
    x: &[f64],
    y: &[f64],
    scale: Scale,
    margin: f64,
    baseline: f64,
    spread_df: usize,
) -> Option<Test> {
    let same = |v: &[f64]| v.iter().all(|a| *a == v[0]);
    if scale != Scale::Count || x.is_empty() || y.is_empty() || !same(x) || !same(y) {
        return None;
    }
    let d = y[0] - x[0];
    let p = |holds: bool| if holds { 0.0 } else { 1.0 };
    Some(Test {
        scale,
        method: Method::ExactCounts,
        estimate: d,
        lo: d,
        hi: d,
        coverage: 1.0,
        p_slower: p(d > 1e-9),
        p_not_slower: p(d < margin - 1e-9),
        p_not_faster: p(d > -margin + 1e-9),
        margin,
        n: (x.len(), y.len()),
        spread: Some(0.0),
        spread_df,
        se: Some(0.0),
        exact: true,
        baseline,
    })
}

fn independent(
    base: &[f64],
    new: &[f64],
    scale: Scale,
    policy: &Policy,
    drift: Option<f64>,
) -> Result<Test, String> {
    if base.is_empty() || new.is_empty() {
        return Err("a side has no repeats".into());
    }
    let (x, y) = (to_scale(scale, base)?, to_scale(scale, new)?);
    let baseline = median(base).unwrap_or(0.0);
    let margin = policy.margin(scale, baseline);
    let spread = pooled_sd(&x, &y);
    if let Some(t) = exact_counts(&x, &y, scale, margin, baseline, spread.map_or(0, |s| s.1)) {
        return Ok(t);
    }
    let shifted = |v: &[f64], by: f64| v.iter().map(|a| a + by).collect::<Vec<f64>>();
    let diffs = Differences::new(&x, &y).ok_or("a value that is not a number")?;
    let estimate = diffs.median();
    let (n, m) = (x.len(), y.len());
    if let Some(between) = drift {
        // Normal theory: the Hodges–Lehmann estimate's variance within
        // recordings plus the drift of each side's recording.
        let (s, df) = spread.unwrap_or((0.0, 0));
        let se_w = power::se_independent(s, n, m);
        let se = (se_w * se_w + 2.0 * between * between).sqrt().max(1e-12);
        let std = Normal::standard();
        let z = std.inverse_cdf(1.0 - policy.alpha);
        return Ok(Test {
            scale,
            method: Method::Drift { between },
            estimate,
            lo: estimate - z * se,
            hi: estimate + z * se,
            coverage: 1.0 - 2.0 * policy.alpha,
            p_slower: 1.0 - std.cdf(estimate / se),
            p_not_slower: std.cdf((estimate - margin) / se),
            p_not_faster: 1.0 - std.cdf((estimate + margin) / se),
            margin,
            n: (n, m),
            spread: Some((s * s + between * between).sqrt()),
            spread_df: df,
            se: Some(se),
            exact: false,
            baseline,
        });
    }
    let p = |a: &[f64], b: &[f64]| mann_whitney_greater(a, b).map_or(1.0, |t| t.p);
    let (k, below) = shift_bound_rank(n, m, policy.alpha);
    Ok(Test {
        scale,
        method: Method::RankSum,
        estimate,
        lo: diffs.kth(k),
        hi: diffs.kth(diffs.len() + 1 - k),
        coverage: crate::stats::round6((1.0 - 2.0 * below).max(0.0)),
        p_slower: p(&x, &y),
        p_not_slower: p(&shifted(&y, -margin), &x),
        p_not_faster: p(&x, &shifted(&y, margin)),
        margin,
        n: (n, m),
        spread: spread.map(|s| s.0),
        spread_df: spread.map_or(0, |s| s.1),
        se: spread.map(|s| power::se_independent(s.0, n, m)),
        exact: false,
        baseline,
    })
}

fn paired(pairs: &[(f64, f64)], scale: Scale, policy: &Policy) -> Result<Test, String> {
    if pairs.is_empty() {
        return Err("no rounds".into());
    }
    let base: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    let new: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let (x, y) = (to_scale(scale, &base)?, to_scale(scale, &new)?);
    let d: Vec<f64> = x.iter().zip(&y).map(|(a, b)| b - a).collect();
    let baseline = median(&base).unwrap_or(0.0);
    let margin = policy.margin(scale, baseline);
    if let Some(t) = exact_counts(&x, &y, scale, margin, baseline, d.len().saturating_sub(1)) {
        return Ok(t);
    }
    let p = |v: Vec<f64>| signed_rank_greater(&v).map_or(1.0, |t| t.p);
    let walsh = Walsh::new(&d).ok_or("a value that is not a number")?;
    let (lo, hi) = walsh.bounds(policy.alpha);
    let spread = sd(&d);
    Ok(Test {
        scale,
        method: Method::SignedRank,
        estimate: walsh.median(),
        lo,
        hi,
        coverage: 1.0 - 2.0 * policy.alpha,
        p_slower: p(d.clone()),
        p_not_slower: p(d.iter().map(|v| margin - v).collect()),
        p_not_faster: p(d.iter().map(|v| v + margin).collect()),
        margin,
        n: (d.len(), d.len()),
        spread,
        spread_df: d.len().saturating_sub(1),
        se: spread.map(|s| power::se_paired(s, d.len())),
        exact: false,
        baseline,
    })
}

fn recordings(
    base: &[Vec<f64>],
    new: &[f64],
    scale: Scale,
    policy: &Policy,
) -> Result<Test, String> {
    let medians: Vec<f64> = base
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| to_scale(scale, r).map(|v| median(&v).unwrap_or(0.0)))
        .collect::<Result<_, _>>()?;
    let k = medians.len();
    if k < 2 {
        return Err("fewer than two baseline recordings with the figure".into());
    }
    if new.is_empty() {
        return Err("the new side has no repeats".into());
    }
    let y = median(&to_scale(scale, new)?).unwrap_or(0.0);
    let all_base: Vec<f64> = base.iter().flatten().copied().collect();
    let baseline = median(&all_base).unwrap_or(0.0);
    let margin = policy.margin(scale, baseline);
    let mean = medians.iter().sum::<f64>() / k as f64;
    let s = sd(&medians).unwrap_or(0.0);
    // The new recording's median is one more draw from the recordings'
    // distribution: its prediction error has variance s²·(1 + 1/k).
    let se = (s * (1.0 + 1.0 / k as f64).sqrt()).max(1e-12);
    let t = StudentsT::new(0.0, 1.0, (k - 1) as f64).map_err(|e| e.to_string())?;
    let d = y - mean;
    let q = t.inverse_cdf(1.0 - policy.alpha);
    Ok(Test {
        scale,
        method: Method::Recordings,
        estimate: d,
        lo: d - q * se,
        hi: d + q * se,
        coverage: 1.0 - 2.0 * policy.alpha,
        p_slower: 1.0 - t.cdf(d / se),
        p_not_slower: t.cdf((d - margin) / se),
        p_not_faster: 1.0 - t.cdf((d + margin) / se),
        margin,
        n: (k, 1),
        spread: Some(s),
        spread_df: k - 1,
        se: Some(se),
        exact: false,
        baseline,
    })
}

/// C(n, k) in floating point.
fn binomial(n: usize, k: usize) -> f64 {
    (1..=k).fold(1.0, |acc, i| acc * (n - k + i) as f64 / i as f64)
}

/// The repeats a side at which a rank-sum test of equal sides can reach
/// p ≤ `level` at all (1 / C(2n, n) ≤ level).
pub(crate) fn rank_sum_repeats_for(level: f64) -> Option<usize> {
    (level > 0.0).then(|| (1..=64).find(|n| 1.0 / binomial(2 * n, *n) <= level))?
}

/// The outcome of `t` when its slower test is judged at `level` (Holm's
/// share of α for this endpoint; 0 when the step-down stopped before it).
pub(crate) fn decide(t: &Test, level: f64, policy: &Policy) -> Decision {
    decide_in(t, level, level, policy)
}

/// [`decide`], knowing `first`: the level the family's first step gave
/// (what this endpoint could have had on its own), so that an endpoint
/// whose smallest possible p is above it says that its repeats cannot
/// flag it, and how many could.
pub(crate) fn decide_in(t: &Test, level: f64, first: f64, policy: &Policy) -> Decision {
    if t.p_slower <= level && t.estimate >= t.margin - 1e-12 {
        return Decision::Regressed;
    }
    if t.p_not_slower <= policy.alpha {
        return if t.p_not_faster <= policy.alpha {
            Decision::Equivalent
        } else {
            Decision::NotSlower
        };
    }
    let smallest = match t.method {
        Method::RankSum | Method::SignedRank => Some(t.smallest_p()),
        _ => None,
    };
    let needs = needed(t, policy);
    if smallest.is_some_and(|p| p > policy.alpha) {
        return Decision::Undecided {
            why: format!(
                "too few repeats: {} vs {} can never decide at {:.0}%",
                t.n.0,
                t.n.1,
                policy.alpha * 100.0
            ),
            needs,
        };
    }
    if t.estimate >= t.margin && t.method == Method::RankSum {
        if let Some(p) = smallest.filter(|p| *p > first.max(level)) {
            // Slower by the threshold, but no order of these repeats could
            // have been flagged at the level this family gives.
            let enough = rank_sum_repeats_for(first.max(level));
            return Decision::Undecided {
                why: format!(
                    "cannot be flagged at {} vs {} repeats: the smallest possible p ({p:.4}) is above its level \
                     ({:.4}){}",
                    t.n.0,
                    t.n.1,
                    first.max(level),
                    enough.map_or(String::new(), |n| format!("; needs {n} repeats a side"))
                ),
                needs: match (needs, enough) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                },
            };
        }
    }
    let why = if t.p_slower <= level {
        format!(
            "significantly slower (p {:.3}) but by less than the threshold, and not shown below it",
            t.p_slower
        )
    } else if t.estimate >= t.margin {
        format!(
            "slower by the threshold or more, but not significantly (p {:.3} > {:.3})",
            t.p_slower, level
        )
    } else {
        "the interval reaches beyond the threshold".to_string()
    };
    Decision::Undecided { why, needs }
}

/// The repeats (rounds, recordings) a side of an undecided endpoint needs
/// for its estimate, taken as the truth, to be decided with [`power::POWER`].
fn needed(t: &Test, policy: &Policy) -> Option<usize> {
    let sd = t.spread?;
    if !(sd.is_finite() && sd > 0.0) {
        return None;
    }
    let design = t.method.design();
    let n = if t.estimate >= t.margin {
        power::repeats_to_detect(t.estimate, sd, t.margin, policy.alpha, design)
    } else {
        design.repeats_to_pass(t.estimate, sd, t.margin, policy.alpha)
    }?;
    // The normal approximation can call fewer repeats enough than the
    // exact test just left undecided (3 a side, "about 2 would decide"):
    // what decides it is always more than it has.
    Some(n.max(t.n.0.max(t.n.1) + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Policy;

    fn rank_sum(estimate: f64, n: usize) -> Test {
        Test {
            scale: Scale::Ratio,
            method: Method::RankSum,
            estimate,
            lo: estimate - 0.1,
            hi: estimate + 0.1,
            coverage: 0.9,
            p_slower: 0.5,
            p_not_slower: 0.5,
            p_not_faster: 0.5,
            margin: 1.1f64.ln(),
            n: (n, n),
            spread: Some(0.03),
            spread_df: 2 * n - 2,
            se: None,
            exact: false,
            baseline: 1.0,
        }
    }

    #[test]
    fn the_repeats_that_would_decide_are_always_more_than_it_has() {
        // A small spread and an estimate far inside the margin: the normal
        // approximation alone says 2 a side; 3 a side just stayed undecided.
        let t = rank_sum(-0.02, 3);
        assert_eq!(needed(&t, &Policy::DEFAULT), Some(4));
        let wide = Test {
            spread: Some(0.2),
            ..rank_sum(-0.02, 3)
        };
        assert!(needed(&wide, &Policy::DEFAULT).is_some_and(|k| k > 4));
    }

    /// A rank-sum test of `n` repeats a side, 30% slower, with the
    /// smallest p its repeats allow.
    fn slower(n: usize) -> Test {
        let p = 1.0 / binomial(2 * n, n);
        Test {
            scale: Scale::Ratio,
            method: Method::RankSum,
            estimate: 1.3f64.ln(),
            lo: 0.2,
            hi: 0.3,
            coverage: 0.9,
            p_slower: p,
            p_not_slower: 0.9,
            p_not_faster: 0.0,
            margin: 1.1f64.ln(),
            n: (n, n),
            spread: Some(0.05),
            spread_df: 2 * n - 2,
            se: None,
            exact: false,
            baseline: 1.0,
        }
    }

    #[test]
    fn a_figure_its_repeats_cannot_flag_says_how_many_could() {
        // 4 against 4: smallest p 1/70, above α/12.
        let t = slower(4);
        assert!((t.smallest_p() - 1.0 / 70.0).abs() < 1e-12);
        let first = Policy::DEFAULT.alpha / 12.0;
        match decide_in(&t, 0.0, first, &Policy::DEFAULT) {
            Decision::Undecided { why, needs } => {
                assert!(why.contains("cannot be flagged at 4 vs 4 repeats"), "{why}");
                assert!(why.contains("needs 5 repeats a side"), "{why}");
                assert!(needs.is_some_and(|n| n >= 5), "{needs:?}");
            }
            o => panic!("{o:?}"),
        }
        // 5 against 5 at α/12: 1/252 reaches it.
        let t = slower(5);
        assert_eq!(
            decide_in(&t, first, first, &Policy::DEFAULT),
            Decision::Regressed
        );
        assert_eq!(rank_sum_repeats_for(0.05 / 36.0), Some(6));
        // Exact counts that agree can never reject: their smallest p is 1.
        let exact = Test {
            method: Method::ExactCounts,
            p_slower: 1.0,
            ..slower(5)
        };
        assert_eq!(exact.smallest_p(), 1.0);
    }
}
