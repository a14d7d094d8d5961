//! Every gated endpoint of a comparison judged together: Holm's
//! step-down over the slower-tests (the family-wise chance of one false
//! regression stays at α however many rows and figures are gated), each
//! endpoint's pass tested at α on its own (an intersection–union test:
//! the gate passes only if every endpoint does, so no correction).
use super::figure::{decide_in, Test};
use super::{Decision, Policy, Verdict};
use serde::Serialize;

/// One endpoint as judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judged {
    /// Its tests, when it had evidence on both sides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test: Option<Test>,
    /// The level its slower-test was held to (its Holm share; 0 where the
    /// step-down stopped before it).
    pub level: f64,
    /// What it came out as.
    pub outcome: Decision,
}

/// A family of endpoints judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Family {
    /// In the order given.
    pub judged: Vec<Judged>,
    /// What the gate says.
    pub verdict: Verdict,
}

/// Holm's levels for p-values `p` at family-wise `alpha`: the level each
/// one was held to, 0 for those after the first that failed its level.
pub(crate) fn holm_levels(p: &[f64], alpha: f64) -> Vec<f64> {
    holm_levels_discrete(p, &vec![0.0; p.len()], alpha)
}

/// Holm's step-down for discrete tests (Tarone's refinement, stepped
/// down as Hommel & Krummenauer 1998): an endpoint whose smallest
/// possible p-value (`smallest[i]`) is above a level can never reject at
/// it, so it takes no share: each step's level is α/K for the smallest K
/// such that at most K of the endpoints not yet rejected could reach
/// α/K. With every `smallest` 0 this is Holm's α/(E − rank). Exact counts
/// that agree (p 1) and rank tests of too few repeats thus leave α to the
/// endpoints that can use it: 12 rows at 5 repeats a side can still flag
/// a latency regression (1/252 ≤ α/12) where Holm over all 36 endpoints
/// could not (α/36 < 1/252).
pub(crate) fn holm_levels_discrete(p: &[f64], smallest: &[f64], alpha: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|a, b| p[*a].total_cmp(&p[*b]));
    let mut levels = vec![0.0; p.len()];
    let mut open = vec![true; p.len()];
    for &i in &order {
        let level = alpha / shares(smallest, &open, alpha) as f64;
        levels[i] = level;
        if p[i] > level {
            break;
        }
        open[i] = false;
    }
    levels
}

/// Tarone's K over the endpoints still `open`: the smallest K such that
/// at most K of them could reach p ≤ α/K (at least 1).
fn shares(smallest: &[f64], open: &[bool], alpha: f64) -> usize {
    let remaining = open.iter().filter(|o| **o).count().max(1);
    let can = |k: usize| {
        open.iter()
            .enumerate()
            .filter(|(j, o)| **o && smallest.get(*j).copied().unwrap_or(0.0) <= alpha / k as f64)
            .count()
    };
    (1..=remaining).find(|k| can(*k) <= *k).unwrap_or(remaining)
}

impl Family {
    /// Judges every endpoint: `Ok` a test to decide, `Err` an outcome already
    /// known (a side failed, a figure missing: accounted for, not dropped).
    pub fn judge(items: Vec<Result<Test, Decision>>, policy: &Policy) -> Family {
        let tests: Vec<&Test> = items.iter().filter_map(|i| i.as_ref().ok()).collect();
        let p: Vec<f64> = tests.iter().map(|t| t.p_slower).collect();
        let smallest: Vec<f64> = tests.iter().map(|t| t.smallest_p()).collect();
        let levels = holm_levels_discrete(&p, &smallest, policy.alpha);
        // The first step's level: what an endpoint could have had on its own.
        let first = policy.alpha / shares(&smallest, &vec![true; p.len()], policy.alpha) as f64;
        let mut levels = levels.into_iter();
        let judged: Vec<Judged> = items
            .into_iter()
            .map(|item| match item {
                Ok(t) => {
                    let level = levels.next().unwrap_or(0.0);
                    Judged {
                        outcome: decide_in(&t, level, first, policy),
                        test: Some(t),
                        level,
                    }
                }
                Err(outcome) => Judged {
                    test: None,
                    level: 0.0,
                    outcome,
                },
            })
            .collect();
        let verdict = Verdict::of(judged.iter().map(|j| &j.outcome));
        Family { judged, verdict }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_steps_down_and_stops() {
        let l = holm_levels(&[0.01, 0.04, 0.03, 0.5], 0.05);
        // Sorted: 0.01 (α/4 = 0.0125 ok), 0.03 (α/3 = 0.0167: fails, stop).
        assert!((l[0] - 0.0125).abs() < 1e-12);
        assert!((l[2] - 0.05 / 3.0).abs() < 1e-12);
        assert_eq!(l[1], 0.0);
        assert_eq!(l[3], 0.0);
        // All small: every one gets its share.
        let l = holm_levels(&[0.001, 0.002], 0.05);
        assert_eq!(l, vec![0.025, 0.05]);
        assert!(holm_levels(&[], 0.05).is_empty());
    }

    #[test]
    fn endpoints_that_cannot_reject_take_no_share() {
        // 12 latency rows at 5 repeats a side (smallest p 1/252) and 24
        // exact counts that agree (p 1, smallest 1): Holm over all 36
        // holds the best row to α/36 < 1/252, so nothing can ever be
        // flagged; without the counts' shares the first level is α/12.
        let rank = 1.0 / 252.0;
        let mut p = vec![rank; 12];
        let mut smallest = vec![rank; 12];
        p.extend([1.0; 24]);
        smallest.extend([1.0; 24]);
        let plain = holm_levels(&p, 0.05);
        assert!(plain.iter().all(|l| *l < rank), "{plain:?}");
        let l = holm_levels_discrete(&p, &smallest, 0.05);
        assert!((l[0] - 0.05 / 12.0).abs() < 1e-12, "{l:?}");
        assert!(l[..12].iter().all(|x| *x >= rank), "{l:?}");
        // Figures of too few repeats to reach α/K leave K to the others:
        // 3 continuous endpoints and 10 of 3 vs 3 repeats (smallest p
        // 1/20 = α): K = 3.
        let mut p = vec![0.01, 0.5, 0.5];
        let mut smallest = vec![0.0; 3];
        p.extend([0.05; 10]);
        smallest.extend([0.05; 10]);
        let l = holm_levels_discrete(&p, &smallest, 0.05);
        assert!((l[0] - 0.05 / 3.0).abs() < 1e-12, "{l:?}");
        // With every smallest p 0 it is Holm.
        let p = [0.01, 0.04, 0.03, 0.5];
        assert_eq!(
            holm_levels_discrete(&p, &[0.0; 4], 0.05),
            holm_levels(&p, 0.05)
        );
    }
}
