//! Statistics of repeated measurements, one home for every figure's
//! uncertainty (docs/statistics.md): the median over repeats with its 95%
//! interval, the spread (CoV), a run's p50 interval from its own samples,
//! the rank tests and shift estimates the gate decides with
//! ([`crate::gate`]), group-sequential boundaries, instability flags.
//!
//! Pure functions over plain numbers: the results and the commands gather
//! the numbers, this module only reasons about them. Intervals are
//! distribution-free (order statistics; the rank test's own interval for a
//! ratio), so no assumption about the shape of latency distributions
//! (skewed, heavy-tailed) is made; the normal distribution appears only in
//! large-sample approximations and the power estimate (statrs).
mod order;
mod power;
mod rank_test;
pub(crate) mod sequential;
pub(crate) mod shift;
pub(crate) mod signed_rank;
mod spread;
mod stability;

pub use order::{median, Interval};
pub(crate) use order::{median_interval, round6, sample_median_interval};
pub(crate) use power::MIN_REPEATS;
#[cfg(test)]
pub(crate) use rank_test::min_p;
pub(crate) use rank_test::OneSided;
pub(crate) use rank_test::{mann_whitney_greater, shift_bound_rank};
pub(crate) use spread::cov;
pub use spread::{log_sd, sd};
pub(crate) use stability::{bimodal, COV_BOUND};
pub use stability::{HostLoad, Instability};

/// Confidence of every interval and test: 95%.
pub(crate) const CONFIDENCE: f64 = 0.95;
/// Significance level of every test (1 - `CONFIDENCE`).
#[cfg(test)]
pub(crate) const ALPHA: f64 = 1.0 - CONFIDENCE;
/// The effect whose repeats are reported when none is asked for: the
/// smallest of the seeds' (IPIv's −16% cycles per unicast IPI).
pub(crate) const TARGET_EFFECT: f64 = 0.16;
