//! What a comparison can detect: the minimum detectable effect at a
//! number of repeats, and the repeats a target effect needs, from the
//! spread of the figure's logarithm (a relative effect is a shift there).
//! The usual two-sample formula, n = 2·(z₁₋α/₂ + z_power)²·σ² / δ² per
//! side, divided by the rank test's efficiency against a t test on normal
//! data (3/π: it needs about 5% more repeats).
use super::{min_p, ALPHA, POWER};
use statrs::distribution::{ContinuousCDF, Normal};

/// The fewest repeats per side at which the rank test can reach 95% (4:
/// at 3 against 3 its smallest p is 0.10).
pub const MIN_REPEATS: usize = 4;

/// Asymptotic relative efficiency of the rank test to the t test.
const EFFICIENCY: f64 = 3.0 / std::f64::consts::PI;

fn z_sum() -> f64 {
    let z = Normal::standard();
    z.inverse_cdf(1.0 - ALPHA / 2.0) + z.inverse_cdf(POWER)
}

/// The smallest relative change (0.12 = 12%) a comparison of `n` repeats
/// per side detects at 95% confidence with 80% power, for a figure whose
/// logarithm spreads by `log_sd` across repeats. None where `n` repeats
/// can never be significant (fewer than [`MIN_REPEATS`]) or the spread is
/// unknown.
pub fn min_detectable_effect(log_sd: f64, n: usize) -> Option<f64> {
    if n < MIN_REPEATS || min_p(n, n) > ALPHA || !log_sd.is_finite() || log_sd < 0.0 {
        return None;
    }
    let shift = z_sum() * log_sd * (2.0 / (n as f64 * EFFICIENCY)).sqrt();
    Some(shift.exp() - 1.0)
}

/// The repeats per side that detect a relative change of `effect` (0.16 =
/// 16%) at 95% confidence with 80% power, at least [`MIN_REPEATS`]. None
/// for an effect that is not positive or an unknown spread.
pub fn repeats_needed(log_sd: f64, effect: f64) -> Option<usize> {
    if effect <= 0.0 || !log_sd.is_finite() || log_sd < 0.0 {
        return None;
    }
    let d = (1.0 + effect).ln();
    let n = 2.0 * (z_sum() * log_sd / d).powi(2) / EFFICIENCY;
    Some((n.ceil() as usize).max(MIN_REPEATS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effect_and_repeats_agree() {
        // 10% spread (log), 5 repeats: exp((1.96 + 0.84)·0.1·sqrt(2/(5·0.955))) - 1 = 19.9%.
        let e = min_detectable_effect(0.10, 5).unwrap();
        assert!((0.19..0.20).contains(&e), "{e}");
        // Inverting it gives back 5 repeats.
        assert_eq!(repeats_needed(0.10, e + 1e-9), Some(5));
        // More repeats, smaller effects; a quiet host needs the minimum.
        assert!(min_detectable_effect(0.10, 20).unwrap() < e);
        assert_eq!(repeats_needed(0.001, 0.16), Some(MIN_REPEATS));
        // Too few repeats to ever be significant.
        assert_eq!(min_detectable_effect(0.10, 3), None);
        assert_eq!(repeats_needed(0.10, 0.0), None);
        // 16% at 10% spread: about 8 per side.
        assert_eq!(repeats_needed(0.10, 0.16), Some(8));
    }
}
