//! Latency statistics over per-IPI samples (TSC cycles), converted to ns.
use serde::Serialize;

/// Summary of one set of samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyStats {
    /// Number of samples.
    pub count: u64,
    /// Cycles.
    pub min: u64,
    /// Median (nearest rank).
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// TSC frequency used for the ns figures (0 = unknown, ns omitted).
    pub tsc_khz: u64,
    /// The same figures in ns, when the TSC frequency is known.
    pub ns: Option<LatencyNs>,
}

/// Latency figures in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyNs {
    /// Minimum.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// Nearest-rank percentile of sorted samples (`p` in 0..=100).
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Cycles to ns at `tsc_khz`.
pub fn cycles_to_ns(cycles: f64, tsc_khz: u64) -> f64 {
    cycles * 1_000_000.0 / tsc_khz as f64
}

impl LatencyStats {
    /// Statistics of `samples`, or None when there are none.
    pub fn from_samples(samples: &[u64], tsc_khz: u64) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        let sum: u128 = s.iter().map(|&v| u128::from(v)).sum();
        let mean = sum as f64 / s.len() as f64;
        let (min, max) = (s[0], s[s.len() - 1]);
        let (p50, p90, p99) = (percentile(&s, 50.0), percentile(&s, 90.0), percentile(&s, 99.0));
        let ns = (tsc_khz > 0).then(|| LatencyNs {
            min: cycles_to_ns(min as f64, tsc_khz),
            p50: cycles_to_ns(p50 as f64, tsc_khz),
            p90: cycles_to_ns(p90 as f64, tsc_khz),
            p99: cycles_to_ns(p99 as f64, tsc_khz),
            max: cycles_to_ns(max as f64, tsc_khz),
            mean: cycles_to_ns(mean, tsc_khz),
        });
        Some(Self {
            count: s.len() as u64,
            min,
            p50,
            p90,
            p99,
            max,
            mean,
            tsc_khz,
            ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&s, 50.0), 50);
        assert_eq!(percentile(&s, 90.0), 90);
        assert_eq!(percentile(&s, 99.0), 99);
        assert_eq!(percentile(&s, 100.0), 100);
        assert_eq!(percentile(&s, 0.0), 1);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn stats_of_unsorted_samples() {
        let st = LatencyStats::from_samples(&[30, 10, 20, 40], 1_000_000).unwrap();
        assert_eq!((st.min, st.p50, st.max, st.count), (10, 20, 40, 4));
        assert!((st.mean - 25.0).abs() < 1e-9);
        // 1 GHz TSC: cycles == ns.
        let ns = st.ns.unwrap();
        assert!((ns.p50 - 20.0).abs() < 1e-9);
        assert!(LatencyStats::from_samples(&[], 1).is_none());
        assert!(LatencyStats::from_samples(&[5], 0).unwrap().ns.is_none());
    }
}
