//! Deciding while the data come in: an interleaved comparison adds a
//! round (one run of each side, in random order) at a time and looks
//! after each, stopping as soon as every endpoint is decided. Looking
//! after every round would multiply the chances of a wrong decision; each
//! test is instead held, at each look, to the nominal level of a
//! group-sequential boundary ([`crate::stats::sequential`]) that spends
//! its α over the rounds the budget allows, so the error rates of the
//! whole sequence are those of one test: a false regression at most α
//! over the family (Holm at every look, each share its own boundary), a
//! false pass at most α per endpoint. A decision, once made, stands.
use super::family::Judged;
use super::figure::{decide, Test};
use super::{Outcome, Policy, Verdict};
use crate::stats::sequential::{Boundary, Spending};

/// The spending shape: between Pocock (γ = 1, spends early) and
/// O'Brien–Fleming (γ = −4, keeps nearly all for the last look). −1 lets
/// a clear effect stop a comparison at about half its budget while the
/// last look stays close to a single test (measured in the operating
/// characteristic test, docs/statistics.md).
pub const GAMMA: f64 = -1.0;
/// The first look: a signed-rank test of fewer rounds cannot reach the
/// levels a boundary allows this early.
pub const MIN_ROUNDS: usize = 5;

/// Why a sequence stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Every endpoint decided, or one regressed or failed.
    Decided,
    /// The budget's last round was looked at.
    Budget,
}

/// One look's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Look {
    /// Rounds so far.
    pub rounds: usize,
    /// Each endpoint: its test at this look and its standing outcome.
    pub judged: Vec<Judged>,
    /// The verdict so far.
    pub verdict: Verdict,
    /// Set when the sequence should end here.
    pub stop: Option<Stop>,
}

/// A sequential comparison of a fixed set of endpoints.
#[derive(Clone, Debug)]
pub struct Sequential {
    policy: Policy,
    max_rounds: usize,
    /// Boundaries of the slower-tests, one per Holm share: index j holds
    /// α/(E − j).
    slower: Vec<Boundary>,
    /// The pass tests' boundary (α each).
    pass: Boundary,
    decided: Vec<Option<Outcome>>,
}

impl Sequential {
    /// A sequence of `endpoints` endpoints over at most `max_rounds`
    /// rounds.
    pub fn new(endpoints: usize, max_rounds: usize, policy: Policy) -> Self {
        let spend = |alpha| {
            Boundary::new(Spending {
                alpha,
                gamma: GAMMA,
            })
        };
        Self {
            policy,
            max_rounds: max_rounds.max(MIN_ROUNDS),
            slower: (0..endpoints)
                .map(|j| spend(policy.alpha / (endpoints - j) as f64))
                .collect(),
            pass: spend(policy.alpha),
            decided: vec![None; endpoints],
        }
    }

    /// The most rounds this sequence takes.
    pub fn max_rounds(&self) -> usize {
        self.max_rounds
    }

    /// Whether a look is due after `rounds` rounds.
    pub fn due(&self, rounds: usize) -> bool {
        rounds >= MIN_ROUNDS
    }

    /// Looks at the endpoints' tests after `rounds` rounds (`Err`: an
    /// outcome already known, such as a side that failed); `last` when no
    /// further round will come (the budget is spent: what is left of α is
    /// spent at this look).
    pub fn look(&mut self, rounds: usize, last: bool, tests: Vec<Result<Test, Outcome>>) -> Look {
        let last = last || rounds >= self.max_rounds;
        let t = if last {
            1.0
        } else {
            rounds as f64 / self.max_rounds as f64
        };
        let pass_level = self.pass.look(t);
        let share_levels: Vec<f64> = self.slower.iter_mut().map(|b| b.look(t)).collect();
        // Holm at this look: sorted p-values against the shares' levels.
        let p: Vec<f64> = tests
            .iter()
            .map(|r| r.as_ref().map_or(1.0, |t| t.p_slower))
            .collect();
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by(|a, b| p[*a].total_cmp(&p[*b]));
        let mut levels = vec![0.0; p.len()];
        for (rank, &i) in order.iter().enumerate() {
            levels[i] = share_levels.get(rank).copied().unwrap_or(0.0);
            if p[i] > levels[i] {
                break;
            }
        }
        let policy = Policy {
            alpha: pass_level,
            ..self.policy
        };
        let mut judged = Vec::with_capacity(tests.len());
        for (i, r) in tests.into_iter().enumerate() {
            let (test, now) = match r {
                Ok(t) => {
                    let o = decide(&t, levels[i], &policy);
                    (Some(t), o)
                }
                Err(o) => (None, o),
            };
            // A decision stands; an undecided endpoint takes this look's.
            let standing = match &self.decided[i] {
                Some(o) => o.clone(),
                None => {
                    if matches!(now, Outcome::Undecided { .. }) {
                        now
                    } else {
                        self.decided[i] = Some(now.clone());
                        now
                    }
                }
            };
            judged.push(Judged {
                test,
                level: levels[i],
                outcome: standing,
            });
        }
        let verdict = Verdict::of(judged.iter().map(|j| &j.outcome));
        let stop = match verdict {
            Verdict::Pass | Verdict::Fail => Some(Stop::Decided),
            _ if last => Some(Stop::Budget),
            _ => None,
        };
        Look {
            rounds,
            judged,
            verdict,
            stop,
        }
    }
}
