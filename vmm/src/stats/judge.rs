//! The verdict of a comparison of two configurations' repeated figures
//! (higher is slower: cycles, ns): the ratio of their medians with the rank
//! test's interval, the test's p-value, and one of faster, slower, no
//! significant difference or inconclusive. Inconclusive is never a pass:
//! too few repeats for the test to reach 95%, or an interval so wide that
//! a change as large as the threshold cannot be ruled out.
use super::{mann_whitney, median, min_p, ratio_interval, Interval, ALPHA, CONFIDENCE};

/// What a comparison says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display, serde::Serialize)]
#[strum(serialize_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Significantly lower (p < 0.05).
    Faster,
    /// Significantly higher (p < 0.05).
    Slower,
    /// Not significant, and the interval rules out a change as large as
    /// the threshold.
    NoSignificantDifference,
    /// Nothing can be said (the reason is in [`Judgement::why`]).
    Inconclusive,
}

/// A judged comparison of `new` against `base`.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// Median of `new` over median of `base`.
    pub ratio: f64,
    /// The ratio's interval (the rank test's, 95% or the nearest it has).
    pub interval: Interval,
    /// Two-sided p-value of the rank test.
    pub p: f64,
    /// Repeats of each side (base, new).
    pub repeats: (usize, usize),
    /// The verdict.
    pub verdict: Verdict,
    /// Why it is inconclusive, when it is.
    pub why: Option<String>,
}

impl Judgement {
    /// Whether this is a regression a gate fails on: significantly slower
    /// and by `threshold` or more (ratio ≥ 1 + threshold).
    pub fn is_regression(&self, threshold: f64) -> bool {
        self.verdict == Verdict::Slower && self.ratio >= 1.0 + threshold
    }

    /// One line: `×1.21 [1.15, 1.28], p 0.008 (5 vs 5): slower`.
    pub fn line(&self) -> String {
        let mut s = format!(
            "×{:.2} [{:.2}, {:.2}], p {:.3} ({} vs {}): {}",
            self.ratio,
            self.interval.lo,
            self.interval.hi,
            self.p,
            self.repeats.0,
            self.repeats.1,
            self.verdict.to_string().replace('_', " ")
        );
        if let Some(why) = &self.why {
            s.push_str(&format!(" ({why})"));
        }
        s
    }
}

/// Judges `new` against `base` (each a figure per repeat, higher slower)
/// with a noise threshold (0.10: a change below 10% is not one the caller
/// cares about). None when a side has no positive value.
pub fn judge(base: &[f64], new: &[f64], threshold: f64) -> Option<Judgement> {
    let (mb, mn) = (median(base)?, median(new)?);
    if mb <= 0.0 {
        return None;
    }
    let interval = ratio_interval(base, new, CONFIDENCE)?;
    let test = mann_whitney(base, new)?;
    let repeats = (base.len(), new.len());
    let ratio = mn / mb;
    let (verdict, why) = if min_p(base.len(), new.len()) > ALPHA {
        (
            Verdict::Inconclusive,
            Some(format!(
                "too few repeats: {} vs {} can never be significant at 95%; at least {} each (--repeat)",
                base.len(),
                new.len(),
                super::MIN_REPEATS
            )),
        )
    } else if test.p < ALPHA {
        let v = if ratio >= 1.0 {
            Verdict::Slower
        } else {
            Verdict::Faster
        };
        (v, None)
    } else if interval.lo >= 1.0 / (1.0 + threshold) && interval.hi <= 1.0 + threshold {
        (Verdict::NoSignificantDifference, None)
    } else {
        (
            Verdict::Inconclusive,
            Some(format!(
                "too noisy: not significant, but the interval reaches beyond ±{:.0}%; more repeats",
                threshold * 100.0
            )),
        )
    };
    Some(Judgement {
        ratio,
        interval,
        p: test.p,
        repeats,
        verdict,
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: [f64; 5] = [1000.0, 1010.0, 990.0, 1005.0, 995.0];

    fn scaled(f: f64) -> Vec<f64> {
        BASE.iter().map(|v| v * f).collect()
    }

    #[test]
    fn a_clear_shift_is_slower_or_faster() {
        let j = judge(&BASE, &scaled(1.2), 0.1).unwrap();
        assert_eq!(j.verdict, Verdict::Slower);
        assert!(j.is_regression(0.1));
        assert!(!j.is_regression(0.25), "beyond the threshold only");
        assert!((j.ratio - 1.2).abs() < 1e-9);
        let j = judge(&BASE, &scaled(0.8), 0.1).unwrap();
        assert_eq!(j.verdict, Verdict::Faster);
        assert!(!j.is_regression(0.1));
    }

    #[test]
    fn the_same_figures_are_no_significant_difference() {
        let j = judge(&BASE, &[1002.0, 998.0, 1007.0, 993.0, 1001.0], 0.1).unwrap();
        assert_eq!(j.verdict, Verdict::NoSignificantDifference, "{}", j.line());
        assert!(!j.is_regression(0.1));
    }

    #[test]
    fn noise_or_too_few_repeats_is_inconclusive() {
        let j = judge(&[1000.0], &[1500.0], 0.1).unwrap();
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(j.why.as_deref().unwrap().contains("too few repeats"));
        assert!(!j.is_regression(0.1));
        let j = judge(&BASE[..3], &scaled(2.0)[..3], 0.1).unwrap();
        assert_eq!(j.verdict, Verdict::Inconclusive, "3 vs 3 never reaches 95%");
        let noisy = [500.0, 2000.0, 1000.0, 700.0, 1400.0];
        let j = judge(&noisy, &[600.0, 1900.0, 1100.0, 800.0, 1500.0], 0.1).unwrap();
        assert_eq!(j.verdict, Verdict::Inconclusive, "{}", j.line());
        assert!(j.why.as_deref().unwrap().contains("too noisy"));
        assert!(judge(&[], &BASE, 0.1).is_none());
    }
}
