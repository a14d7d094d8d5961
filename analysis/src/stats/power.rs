//! The fewest repeats a rank comparison can be significant at. What a
//! comparison can detect at a spread, and the repeats an effect needs, are
//! the gate's ([`crate::gate::power`]): one rule, the one that decides.

/// The fewest repeats per side at which the rank test can reach 95% (4:
/// at 3 against 3 its smallest p is 0.10).
pub(crate) const MIN_REPEATS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_repeats_is_the_first_n_that_can_be_significant() {
        assert!(super::super::min_p(MIN_REPEATS - 1, MIN_REPEATS - 1) > super::super::ALPHA);
        assert!(super::super::min_p(MIN_REPEATS, MIN_REPEATS) <= super::super::ALPHA);
    }
}
