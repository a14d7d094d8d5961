//! Every gated endpoint of a comparison judged together: Holm's
//! step-down over the slower-tests (the family-wise chance of one false
//! regression stays at α however many rows and figures are gated), each
//! endpoint's pass tested at α on its own (an intersection–union test:
//! the gate passes only if every endpoint does, so no correction).
use super::figure::{decide, Test};
use super::{Outcome, Policy, Verdict};
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
    pub outcome: Outcome,
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
pub fn holm_levels(p: &[f64], alpha: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|a, b| p[*a].total_cmp(&p[*b]));
    let mut levels = vec![0.0; p.len()];
    let e = p.len();
    for (rank, &i) in order.iter().enumerate() {
        let level = alpha / (e - rank) as f64;
        levels[i] = level;
        if p[i] > level {
            break;
        }
    }
    levels
}

/// Judges every endpoint: `Ok` a test to decide, `Err` an outcome already
/// known (a side failed, a figure missing: accounted for, not dropped).
pub fn judge_family(items: Vec<Result<Test, Outcome>>, policy: &Policy) -> Family {
    let p: Vec<f64> = items
        .iter()
        .filter_map(|i| i.as_ref().ok().map(|t| t.p_slower))
        .collect();
    let mut levels = holm_levels(&p, policy.alpha).into_iter();
    let judged: Vec<Judged> = items
        .into_iter()
        .map(|item| match item {
            Ok(t) => {
                let level = levels.next().unwrap_or(0.0);
                Judged {
                    outcome: decide(&t, level, policy),
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
}
