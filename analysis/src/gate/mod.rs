//! The gate: one policy that turns compared figures into decisions a CI
//! can act on, used by `compare` (files and live runs), `--expect
//! 'ratio(...)'` and `check` alike (docs/statistics.md, "The gate").
//!
//! Each gated figure of each row (an *endpoint*) comes out as one of:
//!
//! - **regressed**: the one-sided test that the new side is slower is
//!   significant after Holm's correction over every gated endpoint, **and**
//!   the estimated change is at least the threshold (pyperf's point rule
//!   on the Hodges–Lehmann estimate, not criterion's whole-interval rule);
//! - **equivalent**: both one-sided tests of a change as large as the
//!   threshold reject at α (TOST: the 90% interval lies within ±threshold);
//! - **not slower**: the upper one-sided test alone rejects (a change as
//!   large as the threshold in the slower direction is ruled out; the new
//!   side may be faster);
//! - **undecided**: neither, with the repeats that would decide it;
//! - **failed**: the new side has no figure because its runs failed.
//!
//! Latency figures are compared as ratios (on logarithms: a shift), counts
//! per operation or per IPI as differences against a margin of
//! `count_tolerance × max(baseline, 1)`, so that a baseline of 0 — no
//! ICR-write exit per IPI, the IPIv and AVIC signature — is compared as
//! the 0 it is. Passing needs every endpoint equivalent or not slower (an
//! intersection–union test: no correction needed); one regression or
//! failure fails; anything else is undecided. [`Verdict::exit_code`] is the one
//! table from outcome to exit status.
pub(crate) mod claim;
pub(crate) mod family;
mod figure;
pub(crate) mod power;
pub mod profile;
pub mod sequential;

pub use family::{Family, Judged};
pub use figure::{Evidence, Method, Test};

use serde::Serialize;

/// How a figure is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// As a ratio (latency: positive values, compared on logarithms).
    Ratio,
    /// As a difference (counts per operation or per IPI).
    Count,
}

/// How the gate decides.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Policy {
    /// The smallest relative change of a latency figure that matters
    /// (`--threshold`, 0.10): regressions are at least this, equivalence
    /// is within it.
    pub threshold: f64,
    /// The same for counts, relative to the baseline or to one count
    /// per operation, whichever is larger (`--count-tolerance`, 0.05).
    pub count_tolerance: f64,
    /// The error rate of each kind of wrong decision: a false regression
    /// over the whole family of endpoints (Holm), a false pass per
    /// endpoint (TOST at 1 − 2α).
    pub alpha: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy::DEFAULT
    }
}

impl Policy {
    /// The defaults of `compare --fail-on-regression`.
    pub const DEFAULT: Policy = Policy {
        threshold: 0.10,
        count_tolerance: 0.05,
        alpha: 0.05,
    };

    /// The margin of a figure on its own scale: ln(1 + threshold) for
    /// ratios, `count_tolerance × max(|baseline|, 1)` for counts.
    pub fn margin(&self, scale: Scale, baseline: f64) -> f64 {
        match scale {
            Scale::Ratio => (1.0 + self.threshold).ln(),
            Scale::Count => self.count_tolerance * baseline.abs().max(1.0),
        }
    }
}

/// What one endpoint came out as.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Decision {
    /// Slower by at least the threshold, significantly (family-wise).
    Regressed,
    /// Within ±threshold (both one-sided tests reject).
    Equivalent,
    /// Not slower by the threshold (the upper test rejects); perhaps faster.
    NotSlower,
    /// Neither: not enough data to tell at this threshold.
    Undecided {
        /// Why, in words.
        why: String,
        /// Repeats (or rounds) per side that would decide it at the spread
        /// seen, when a number can: None where the change sits at the
        /// threshold or the spread is unknown.
        #[serde(skip_serializing_if = "Option::is_none")]
        needs: Option<usize>,
    },
    /// The new side has no figure because its runs failed (or never
    /// started for a reason other than the host).
    Failed {
        /// What failed.
        why: String,
    },
}

impl Decision {
    /// Whether it lets the gate pass.
    pub fn passes(&self) -> bool {
        matches!(self, Decision::Equivalent | Decision::NotSlower)
    }

    /// Whether it fails the gate.
    pub fn fails(&self) -> bool {
        matches!(self, Decision::Regressed | Decision::Failed { .. })
    }

    /// Its name in one or two words.
    pub fn word(&self) -> &'static str {
        match self {
            Decision::Regressed => "regressed",
            Decision::Equivalent => "equivalent",
            Decision::NotSlower => "not slower",
            Decision::Undecided { .. } => "undecided",
            Decision::Failed { .. } => "failed",
        }
    }
}

/// What a whole gate came out as, and its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every endpoint equivalent or not slower.
    Pass,
    /// At least one regressed or failed.
    Fail,
    /// None failed, at least one undecided.
    Undecided,
    /// Nothing to judge: no endpoint had both sides.
    NothingCompared,
}

impl Verdict {
    /// The exit status of a verdict, kselftest's where it has one: 0 pass,
    /// 1 fail, 4 undecided (SKIP: never a pass), 3 nothing compared (an
    /// error of the inputs). 2 stays the usage error's.
    pub const fn exit_code(self) -> u8 {
        match self {
            Verdict::Pass => 0,
            Verdict::Fail => 1,
            Verdict::NothingCompared => 3,
            Verdict::Undecided => 4,
        }
    }

    /// The verdict of a set of outcomes (an empty set compares nothing).
    pub fn of<'a>(outcomes: impl IntoIterator<Item = &'a Decision>) -> Self {
        let mut any = false;
        let mut undecided = false;
        for o in outcomes {
            any = true;
            if o.fails() {
                return Verdict::Fail;
            }
            undecided |= !o.passes();
        }
        match (any, undecided) {
            (false, _) => Verdict::NothingCompared,
            (true, true) => Verdict::Undecided,
            (true, false) => Verdict::Pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_failure_fails_and_one_undecided_is_no_pass() {
        let undecided = Decision::Undecided {
            why: "x".into(),
            needs: Some(9),
        };
        let pass = [Decision::Equivalent, Decision::NotSlower];
        assert_eq!(Verdict::of(&pass), Verdict::Pass);
        assert_eq!(
            Verdict::of(&[Decision::Equivalent, undecided.clone()]),
            Verdict::Undecided
        );
        assert_eq!(
            Verdict::of(&[undecided, Decision::Regressed]),
            Verdict::Fail
        );
        assert_eq!(
            Verdict::of(&[Decision::Failed { why: "y".into() }]),
            Verdict::Fail
        );
        assert_eq!(Verdict::of(&[]), Verdict::NothingCompared);
        assert_eq!(
            [
                Verdict::Pass,
                Verdict::Fail,
                Verdict::NothingCompared,
                Verdict::Undecided
            ]
            .map(Verdict::exit_code),
            [0, 1, 3, 4]
        );
    }

    #[test]
    fn margins_by_scale() {
        let p = Policy::DEFAULT;
        assert!((p.margin(Scale::Ratio, 123.0) - 1.1f64.ln()).abs() < 1e-12);
        assert!((p.margin(Scale::Count, 0.0) - 0.05).abs() < 1e-12);
        assert!((p.margin(Scale::Count, 16.0) - 0.8).abs() < 1e-12);
    }
}
