//! Latency statistics over per-IPI samples (TSC cycles), converted to ns,
//! with a log-linear histogram of the raw samples.
use serde::{Deserialize, Serialize};

/// Summary of one set of samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Distribution of the samples (cycles); empty in files written before it existed.
    #[serde(default)]
    pub histogram: Histogram,
    /// The p50's distribution-free interval from these samples (95%, or
    /// the nearest order statistics give: `crate::stats::median_ranks`);
    /// absent in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_interval: Option<crate::stats::Interval>,
}

/// Latency figures in nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Cycles to ns at `tsc_khz`.
pub(crate) fn cycles_to_ns(cycles: f64, tsc_khz: u64) -> f64 {
    cycles * 1_000_000.0 / tsc_khz as f64
}

impl LatencyStats {
    /// Statistics of `samples`, or None when there are none.
    ///
    /// ```
    /// use ipivmm_analysis::results::latency::LatencyStats;
    ///
    /// // Four samples in TSC cycles, 2 GHz TSC.
    /// let st = LatencyStats::from_samples(&[3000, 1000, 2000, 4000], 2_000_000).unwrap();
    /// assert_eq!((st.count, st.min, st.p50, st.max), (4, 1000, 2000, 4000));
    /// assert_eq!(st.mean, 2500.0);
    /// assert_eq!(st.ns.unwrap().p50, 1000.0); // 2000 cycles at 2 GHz
    /// assert!(LatencyStats::from_samples(&[], 2_000_000).is_none());
    /// ```
    pub fn from_samples(samples: &[u64], tsc_khz: u64) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        Self::of_sorted(&s, tsc_khz)
    }

    /// [`from_samples`](Self::from_samples) of samples already in ascending
    /// order (no copy).
    pub fn of_sorted(s: &[u64], tsc_khz: u64) -> Option<Self> {
        if s.is_empty() {
            return None;
        }
        let sum: u128 = s.iter().map(|&v| u128::from(v)).sum();
        let mean = sum as f64 / s.len() as f64;
        let (min, max) = (s[0], s[s.len() - 1]);
        let (p50, p90, p99) = (
            percentile(s, 50.0),
            percentile(s, 90.0),
            percentile(s, 99.0),
        );
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
            histogram: Histogram::of_sorted(s),
            p50_interval: crate::stats::sample_median_interval(s, crate::stats::CONFIDENCE),
        })
    }
}

/// Sub-buckets per power of two in [`Histogram`]: bucket width is at most
/// 1/8 of its lower bound (12.5 %), like an HDR histogram with 3 bits of
/// precision.
pub(crate) const SUB_BUCKETS: u32 = 8;

/// A log-linear histogram of samples in cycles: every power-of-two range
/// `[2^e, 2^(e+1))` is split into `SUB_BUCKETS` equal buckets (values
/// below `SUB_BUCKETS` get one bucket each). Only non-empty buckets are kept,
/// in ascending order: at most `MAX_BUCKETS`, whatever the samples.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Buckets per power of two (`SUB_BUCKETS` when written by this version).
    pub sub_buckets: u32,
    /// Non-empty buckets, ascending.
    pub buckets: Vec<Bucket>,
}

/// Most buckets a [`Histogram`] of this version has: [`SUB_BUCKETS`] per
/// power of two of a u64 (the top bucket is closed, so `u64::MAX` shares it).
pub(crate) const MAX_BUCKETS: usize = 64 * SUB_BUCKETS as usize;

/// One histogram bucket: `count` samples `v` with `lo <= v < hi` (cycles).
/// `hi` saturates at `u64::MAX`: the top bucket, `hi == u64::MAX`, also
/// holds `u64::MAX` itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Inclusive lower bound, cycles.
    pub lo: u64,
    /// Exclusive upper bound, cycles.
    pub hi: u64,
    /// Samples in the bucket.
    pub count: u64,
}

/// The `[lo, hi)` bucket of `v` with `sub` buckets per power of two
/// (`sub` a power of two, at least 1).
pub(crate) fn bucket_bounds(v: u64, sub: u32) -> (u64, u64) {
    let sub = u64::from(sub.max(1).next_power_of_two());
    if v < sub {
        return (v, v + 1);
    }
    let octave = 63 - u64::from(v.leading_zeros());
    let width = (1u64 << octave) / sub;
    let lo = v - v % width;
    (lo, lo.saturating_add(width))
}

impl Bucket {
    /// Whether `v` falls in this bucket (the top one, `hi == u64::MAX`,
    /// includes `u64::MAX`).
    pub fn holds(&self, v: u64) -> bool {
        v >= self.lo && (v < self.hi || self.hi == u64::MAX)
    }
}

impl Histogram {
    /// Histogram of `samples` in any order.
    pub fn of(samples: &[u64]) -> Self {
        let mut s = samples.to_vec();
        s.sort_unstable();
        Self::of_sorted(&s)
    }

    /// Histogram of ascending `sorted` samples.
    pub fn of_sorted(sorted: &[u64]) -> Self {
        let mut buckets: Vec<Bucket> = Vec::new();
        for &v in sorted {
            match buckets.last_mut() {
                Some(b) if b.holds(v) => b.count = b.count.saturating_add(1),
                _ => {
                    let (lo, hi) = bucket_bounds(v, SUB_BUCKETS);
                    buckets.push(Bucket { lo, hi, count: 1 });
                }
            }
        }
        Self {
            sub_buckets: SUB_BUCKETS,
            buckets,
        }
    }

    /// Total samples (saturating: a results file can say anything).
    pub fn total(&self) -> u64 {
        super::saturating_sum(self.buckets.iter().map(|b| b.count))
    }

    /// Every bucket from the first to the last non-empty one, empty ones
    /// included (counts), with each bucket's centre (cycles): the regular
    /// grid `crate::stats::bimodal` reads.
    pub fn dense(&self) -> (Vec<u64>, Vec<f64>) {
        let (mut counts, mut centres) = (Vec::new(), Vec::new());
        let sub = self.sub_buckets.max(1);
        for (i, b) in self.buckets.iter().enumerate() {
            counts.push(b.count);
            centres.push(b.lo as f64 / 2.0 + b.hi as f64 / 2.0);
            let Some(next) = self.buckets.get(i + 1) else {
                break;
            };
            let mut v = b.hi;
            while v < next.lo && counts.len() < 4 * MAX_BUCKETS {
                let (lo, hi) = bucket_bounds(v, sub);
                if hi <= v {
                    break;
                }
                counts.push(0);
                centres.push(lo as f64 / 2.0 + hi as f64 / 2.0);
                v = hi;
            }
        }
        (counts, centres)
    }

    /// Adds `other`'s counts (histograms of the same `sub_buckets`; buckets
    /// with equal bounds are summed, others kept), keeping ascending order.
    pub fn merge(&mut self, other: &Histogram) {
        if self.buckets.is_empty() {
            self.sub_buckets = other.sub_buckets;
        }
        for b in &other.buckets {
            match self
                .buckets
                .binary_search_by(|x| (x.lo, x.hi).cmp(&(b.lo, b.hi)))
            {
                Ok(i) => self.buckets[i].count = self.buckets[i].count.saturating_add(b.count),
                Err(i) => self.buckets.insert(i, *b),
            }
        }
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
        assert_eq!(st.histogram.total(), 4);
    }

    #[test]
    fn buckets_are_log_linear() {
        assert_eq!(bucket_bounds(0, 8), (0, 1));
        assert_eq!(bucket_bounds(7, 8), (7, 8));
        assert_eq!(bucket_bounds(8, 8), (8, 9));
        assert_eq!(bucket_bounds(1000, 8), (960, 1024));
        assert_eq!(bucket_bounds(1024, 8), (1024, 1152));
        assert_eq!(
            bucket_bounds(u64::MAX, 8),
            (u64::MAX - (1 << 60) + 1, u64::MAX)
        );
        // Width never exceeds 1/8 of the lower bound.
        for v in [9u64, 100, 12_345, 627_028, 29_078_070, 1 << 40] {
            let (lo, hi) = bucket_bounds(v, 8);
            assert!(lo <= v && v < hi, "{v}");
            assert!((hi - lo) * 8 <= lo, "{v}: [{lo}, {hi})");
        }
    }

    #[test]
    fn histogram_counts_every_sample_once() {
        let samples: Vec<u64> = (0..1000u64).map(|i| (i * 7919) % 5000 + 100).collect();
        let h = Histogram::of(&samples);
        assert_eq!(h.total(), 1000);
        assert!(h.buckets.windows(2).all(|w| w[0].hi <= w[1].lo));
        for b in &h.buckets {
            let n = samples.iter().filter(|&&v| v >= b.lo && v < b.hi).count() as u64;
            assert_eq!(n, b.count, "[{}, {})", b.lo, b.hi);
        }
        let mut m = h.clone();
        m.merge(&Histogram::of(&[100, 1_000_000]));
        assert_eq!(m.total(), 1002);
        assert!(m.buckets.windows(2).all(|w| w[0].hi <= w[1].lo));
        assert_eq!(m.buckets.last().unwrap().count, 1);
    }

    #[test]
    fn buckets_stay_bounded_whatever_the_samples() {
        // u64::MAX used to get a bucket per sample (its `hi` saturates).
        let h = Histogram::of(&[u64::MAX; 1000]);
        assert_eq!(
            h.buckets.len(),
            1,
            "{:?}",
            &h.buckets[..2.min(h.buckets.len())]
        );
        assert_eq!(h.total(), 1000);
        assert!(h.buckets[0].holds(u64::MAX) && h.buckets[0].holds(u64::MAX - 1));
        // Every bucket's lower and upper end, plus the extremes: still at
        // most MAX_BUCKETS, and each sample in the bucket that holds it.
        let mut all: Vec<u64> = (0..64u32)
            .flat_map(|e| {
                let p = 1u64 << e;
                [p, p + p / 3, p.saturating_add(p - 1), u64::MAX - p]
            })
            .chain([0, u64::MAX, u64::MAX])
            .collect();
        all.sort_unstable();
        let h = Histogram::of_sorted(&all);
        assert!(h.buckets.len() <= MAX_BUCKETS, "{}", h.buckets.len());
        assert_eq!(h.total(), all.len() as u64);
        for &v in &all {
            assert_eq!(h.buckets.iter().filter(|b| b.holds(v)).count(), 1, "{v}");
        }
        // Merging a histogram into itself keeps the bound and saturates.
        let mut m = h.clone();
        m.merge(&Histogram::of(&[u64::MAX]));
        assert_eq!(m.buckets.len(), h.buckets.len());
        m.buckets[0].count = u64::MAX;
        assert_eq!(m.total(), u64::MAX);
        m.merge(&h);
        assert_eq!(m.buckets[0].count, u64::MAX);
    }
}
