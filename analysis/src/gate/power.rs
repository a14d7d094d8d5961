//! The power of the rule the gate applies, not of a textbook test: a
//! regression is called when the one-sided test is significant **and**
//! the estimate reaches the threshold, so a true change δ is called with
//! probability P(estimate ≥ max(margin, z·se)), the estimate normal around
//! δ with standard error se (the Hodges–Lehmann estimate's: the rank
//! tests' efficiency 3/π against the mean's). A pass needs the upper end
//! of the 90% interval below the margin: P(estimate + z·se < margin).
//! From these, the repeats (or rounds) that decide an undecided endpoint
//! and the smallest change a number of repeats detects; with the spread's
//! own uncertainty (a χ² interval on the standard deviation) wherever a
//! report prints a power.
use super::{Policy, Scale};
use statrs::distribution::{ContinuousCDF, Normal};

/// Asymptotic efficiency of the rank tests to the t test on normal data.
const EFFICIENCY: f64 = 3.0 / std::f64::consts::PI;
/// The power a number of repeats is computed for.
pub(crate) const POWER: f64 = 0.80;
/// No more repeats than this are ever proposed.
pub(crate) const MAX_REPEATS: usize = 100_000;

fn z(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// Standard error of the shift between two independent sides of n and m
/// repeats whose values spread by `sd`.
pub(crate) fn se_independent(sd: f64, n: usize, m: usize) -> f64 {
    sd * ((1.0 / n.max(1) as f64 + 1.0 / m.max(1) as f64) / EFFICIENCY).sqrt()
}

/// Standard error of the centre of n paired differences spreading by `sd`.
pub(crate) fn se_paired(sd: f64, n: usize) -> f64 {
    sd * (1.0 / (n.max(1) as f64 * EFFICIENCY)).sqrt()
}

/// Probability that the rule calls a true change `delta` a regression at
/// standard error `se`, margin `margin` and one-sided level `level`.
pub(crate) fn rule_power(delta: f64, se: f64, margin: f64, level: f64) -> f64 {
    if se <= 0.0 {
        return if delta >= margin && delta > 0.0 {
            1.0
        } else {
            0.0
        };
    }
    let cut = margin.max(z(1.0 - level) * se);
    1.0 - Normal::standard().cdf((cut - delta) / se)
}

/// Probability that a true change `delta` passes (the upper end of the
/// interval below the margin) at standard error `se`.
pub(crate) fn pass_probability(delta: f64, se: f64, margin: f64, alpha: f64) -> f64 {
    if se <= 0.0 {
        return if delta < margin { 1.0 } else { 0.0 };
    }
    Normal::standard().cdf((margin - z(1.0 - alpha) * se - delta) / se)
}

/// The smallest n in 1..=MAX_REPEATS where `holds(n)`, for a property
/// that stays true once true; None when even the largest fails.
fn smallest(holds: impl Fn(usize) -> bool) -> Option<usize> {
    if !holds(MAX_REPEATS) {
        return None;
    }
    let (mut lo, mut hi) = (0usize, MAX_REPEATS);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if holds(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// How the standard error of an endpoint grows with its repeats.
#[derive(Clone, Copy, Debug)]
pub enum Design {
    /// n repeats a side, independent.
    Independent,
    /// n rounds of pairs.
    Paired,
    /// n baseline recordings against one new one (the spread is between
    /// recordings and does not shrink with repeats inside them).
    Recordings,
    /// n repeats a side plus a fixed drift between the two recordings.
    Drift {
        /// The drift's standard deviation.
        between: f64,
    },
}

impl Design {
    /// The standard error at `n` (per side, rounds or recordings) for a
    /// spread `sd`.
    pub fn se(self, sd: f64, n: usize) -> f64 {
        match self {
            Design::Independent => se_independent(sd, n, n),
            Design::Paired => se_paired(sd, n),
            Design::Recordings => sd * (1.0 + 1.0 / n.max(1) as f64).sqrt(),
            Design::Drift { between } => {
                let w = se_independent((sd * sd - between * between).max(0.0).sqrt(), n, n);
                (w * w + 2.0 * between * between).sqrt()
            }
        }
    }
}

/// Repeats per side (or rounds, or recordings) at which the rule detects
/// a true change `delta` with [`POWER`]; None where it never does (a
/// change at or below the margin).
pub(crate) fn repeats_to_detect(
    delta: f64,
    sd: f64,
    margin: f64,
    level: f64,
    design: Design,
) -> Option<usize> {
    if delta <= margin {
        return None;
    }
    smallest(|n| rule_power(delta, design.se(sd, n), margin, level) >= POWER)
}

impl Design {
    /// Repeats per side at which a true change `delta` passes with 80%
    /// power; None where it never does (a change at or beyond the margin).
    pub fn repeats_to_pass(self, delta: f64, sd: f64, margin: f64, alpha: f64) -> Option<usize> {
        if delta >= margin {
            return None;
        }
        smallest(|n| pass_probability(delta, self.se(sd, n), margin, alpha) >= POWER)
    }
}

impl Policy {
    /// The smallest change (relative: 0.16 = 16%) that `n` repeats a side
    /// detect with 80% power under the rule, for a latency figure whose
    /// logarithm spreads by `log_sd` between repeats.
    pub fn min_detectable(&self, log_sd: f64, n: usize) -> Option<f64> {
        if !(log_sd.is_finite() && log_sd >= 0.0) || n == 0 {
            return None;
        }
        let se = se_independent(log_sd, n, n);
        let margin = self.margin(Scale::Ratio, 1.0);
        let shift = margin.max(z(1.0 - self.alpha) * se) + z(POWER) * se;
        Some(shift.exp() - 1.0)
    }

    /// Repeats a side at which an unchanged latency figure whose logarithm
    /// spreads by `log_sd` between independent runs passes the rule with
    /// 80% power (what `--repeat auto` runs to); None where it never does.
    pub fn repeats_to_settle(&self, log_sd: f64) -> Option<usize> {
        let margin = self.margin(Scale::Ratio, 1.0);
        Design::Independent.repeats_to_pass(0.0, log_sd, margin, self.alpha)
    }
}

/// Repeats a side at which the rule detects a relative change `effect`
/// (0.16) of a latency figure spreading by `log_sd`; None where it never
/// does (an effect at or below the threshold).
pub(crate) fn repeats_for_effect(log_sd: f64, effect: f64, policy: &Policy) -> Option<usize> {
    if !(log_sd.is_finite() && log_sd >= 0.0) || effect <= -1.0 {
        return None;
    }
    let margin = policy.margin(Scale::Ratio, 1.0);
    repeats_to_detect(
        (1.0 + effect).ln(),
        log_sd,
        margin,
        policy.alpha,
        Design::Independent,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Policy;

    #[test]
    fn the_rule_never_detects_at_or_below_the_threshold() {
        let m = 1.1f64.ln();
        assert!(rule_power(m, 0.01, m, 0.05) <= 0.5 + 1e-9);
        assert!(rule_power(0.0, 0.05, m, 0.05) < 0.05);
        assert_eq!(
            repeats_to_detect(m, 0.11, m, 0.05, Design::Independent),
            None
        );
        // Near the threshold the rule needs far more repeats than the
        // one-sided test alone would (the threshold condition costs
        // repeats): 12% at a spread of 0.11.
        let d = 1.12f64.ln();
        let rule = repeats_to_detect(d, 0.11, m, 0.05, Design::Independent).unwrap();
        let zs = z(0.95) + z(POWER);
        let plain = (2.0 * (zs * 0.11 / d).powi(2) / EFFICIENCY).ceil() as usize;
        assert!(rule > 3 * plain, "rule {rule} plain {plain}");
        // Far beyond it, the significance condition dominates: about equal.
        let d = 1.5f64.ln();
        let rule = repeats_to_detect(d, 0.11, m, 0.05, Design::Independent).unwrap();
        let plain = (2.0 * (zs * 0.11 / d).powi(2) / EFFICIENCY).ceil() as usize;
        assert!(rule <= plain + 1, "rule {rule} plain {plain}");
    }

    #[test]
    fn detectable_effects_and_repeats_agree() {
        let p = Policy::DEFAULT;
        let e = p.min_detectable(0.11, 30).unwrap();
        assert!(e > 0.10 && e < 0.20, "{e}");
        let n = repeats_for_effect(0.11, e + 1e-6, &p).unwrap();
        assert!((29..=30).contains(&n), "{n}");
        assert!(p.min_detectable(0.11, 5).unwrap() > e);
    }

    #[test]
    fn drift_sets_a_floor_no_repeats_can_pass() {
        let m = 1.1f64.ln();
        // A drift of 0.1 between recordings: 2·0.1² alone exceeds what a
        // pass at margin ln 1.1 needs.
        let d = Design::Drift { between: 0.1 };
        assert_eq!(d.repeats_to_pass(0.0, 0.12, m, 0.05), None);
        assert!(Design::Independent
            .repeats_to_pass(0.0, 0.12, m, 0.05)
            .is_some());
    }
}
