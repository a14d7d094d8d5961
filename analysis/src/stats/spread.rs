//! Spread of repeated figures.

/// The arithmetic mean, None for no values.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The sample standard deviation (n - 1), None below two values.
pub fn sd(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let m = mean(values)?;
    let ss: f64 = values.iter().map(|v| (v - m) * (v - m)).sum();
    Some((ss / (values.len() - 1) as f64).sqrt())
}

/// The coefficient of variation (sd / mean; 0.05 = 5%), None below two
/// values or for a mean that is not positive.
pub fn cov(values: &[f64]) -> Option<f64> {
    let m = mean(values)?;
    (m > 0.0).then_some(())?;
    Some(sd(values)? / m)
}

/// The standard deviation of the values' logarithms: the spread that
/// ratios and relative effects see (close to the CoV where it is small).
/// None below two values or with one not positive.
pub fn log_sd(values: &[f64]) -> Option<f64> {
    if values.iter().any(|v| *v <= 0.0 || !v.is_finite()) {
        return None;
    }
    let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    sd(&logs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_known_values() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&v), Some(5.0));
        let s = sd(&v).unwrap();
        assert!((s - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!((cov(&v).unwrap() - s / 5.0).abs() < 1e-12);
        assert_eq!(sd(&[1.0]), None);
        assert_eq!(cov(&[0.0, 0.0]), None);
        // Values 10% apart: log sd close to the CoV.
        let l = log_sd(&[100.0, 110.0, 90.0, 105.0, 95.0]).unwrap();
        let c = cov(&[100.0, 110.0, 90.0, 105.0, 95.0]).unwrap();
        assert!((l - c).abs() < 0.01, "{l} {c}");
        assert_eq!(log_sd(&[1.0, 0.0]), None);
    }
}
