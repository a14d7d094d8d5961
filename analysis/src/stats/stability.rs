//! When a configuration's figures cannot be trusted as they are: a spread
//! beyond a bound, samples in two clusters, a host busy with other work or
//! losing time to its hypervisor during the run. Each says what helps.
use serde::{Deserialize, Serialize};

/// Repeats whose p50s spread beyond this CoV are flagged (docs/statistics.md
/// has the spreads measured here: a halted target on a quiet host stays
/// well within it).
pub(crate) const COV_BOUND: f64 = 0.10;
/// Other processes busy for more than this fraction of the host's CPU
/// time during a run are flagged.
pub(crate) const HOST_BUSY_BOUND: f64 = 0.25;
/// Steal time beyond this fraction of the host's CPU time is flagged. The
/// development host (a cloud VM) steals 0.6–3.7% with nothing else running
/// (2026-12-02, docs/statistics.md): a bound below that would flag every
/// run there, and a few percent of lost time is far below the effects
/// compared (16–55%).
pub(crate) const STEAL_BOUND: f64 = 0.05;

/// The host's CPU time during a run, from /proc/stat and the process's
/// own CPU time: what else competed with the VM.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    /// Online CPUs.
    pub cpus: usize,
    /// Fraction of all CPUs' time that was busy (not idle, not iowait).
    pub busy: f64,
    /// Fraction of all CPUs' time this process (the VMM and its vCPUs) used.
    pub own: f64,
    /// Fraction of all CPUs' time stolen by the hypervisor below.
    pub steal: f64,
}

impl HostLoad {
    /// Fraction of the host's CPU time others used during the run.
    pub fn others(&self) -> f64 {
        (self.busy - self.own).max(0.0)
    }

    /// The instabilities of this load, if any (others busy above 25% of
    /// the CPU time, steal above 5%).
    pub fn instabilities(&self) -> Vec<Instability> {
        let mut out = Vec::new();
        if self.others() > HOST_BUSY_BOUND {
            out.push(Instability::HostBusy(self.others()));
        }
        if self.steal > STEAL_BOUND {
            out.push(Instability::Steal(self.steal));
        }
        out
    }
}

/// Why a configuration's figures are not stable, with what helps.
#[derive(Clone, Debug, PartialEq)]
pub enum Instability {
    /// The repeats' medians spread by this CoV (beyond `COV_BOUND`).
    Spread(f64),
    /// A run's samples fall in two clusters around these values.
    Bimodal(f64, f64),
    /// Other processes used this fraction of the host's CPU time.
    HostBusy(f64),
    /// The hypervisor stole this fraction of the host's CPU time.
    Steal(f64),
}

impl std::fmt::Display for Instability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Instability::Spread(c) => write!(
                f,
                "repeats spread by CoV {:.1}% (bound {:.0}%): more repeats, a halted target (--target halt), --pin, a quieter host",
                c * 100.0,
                COV_BOUND * 100.0
            ),
            Instability::Bimodal(a, b) => write!(
                f,
                "samples in two clusters (around {a:.0} and {b:.0}): two paths or a preempted vCPU; --pin, a halted target"
            ),
            Instability::HostBusy(x) => write!(
                f,
                "other processes used {:.0}% of the host's CPU time during a run: a quieter host, --pin",
                x * 100.0
            ),
            Instability::Steal(x) => write!(
                f,
                "the hypervisor stole {:.1}% of the host's CPU time during a run: a dedicated host",
                x * 100.0
            ),
        }
    }
}

/// Two clusters in a histogram: `counts` are consecutive buckets of equal
/// width on a log scale (zeros included), `centres` their values. Bimodal
/// when two peaks (after smoothing over three buckets) each hold at least
/// 15% of the samples in their basin and the valley between them falls
/// below half the smaller peak. Returns the two peaks' centres.
pub(crate) fn bimodal(counts: &[u64], centres: &[f64]) -> Option<(f64, f64)> {
    let n = counts.len().min(centres.len());
    let total: u64 = counts[..n].iter().sum();
    if n < 3 || total < 20 {
        return None;
    }
    let smooth: Vec<f64> = (0..n)
        .map(|i| {
            let lo = i.saturating_sub(1);
            let hi = (i + 1).min(n - 1);
            counts[lo..=hi].iter().sum::<u64>() as f64 / (hi - lo + 1) as f64
        })
        .collect();
    // Local maxima (plateaus count once, at their first bucket).
    let peaks: Vec<usize> = (0..n)
        .filter(|&i| {
            let left = if i == 0 { -1.0 } else { smooth[i - 1] };
            let right = smooth[i + 1..].iter().find(|v| **v != smooth[i]);
            smooth[i] > left && right.is_none_or(|r| *r < smooth[i]) && smooth[i] > 0.0
        })
        .collect();
    for (a, &p) in peaks.iter().enumerate() {
        for &q in &peaks[a + 1..] {
            let (valley_at, valley) = (p..=q)
                .map(|i| (i, smooth[i]))
                .min_by(|x, y| x.1.total_cmp(&y.1))?;
            if valley >= 0.5 * smooth[p].min(smooth[q]) {
                continue;
            }
            let left: u64 = counts[..valley_at].iter().sum();
            let right = total - left;
            let share = |c: u64| c as f64 / total as f64;
            if share(left) >= 0.15 && share(right) >= 0.15 {
                return Some((centres[p], centres[q]));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn centres(n: usize) -> Vec<f64> {
        (0..n).map(|i| 1000.0 * 1.1f64.powi(i as i32)).collect()
    }

    #[test]
    fn one_cluster_with_a_tail_is_not_bimodal() {
        let counts = [0, 2, 10, 40, 80, 40, 12, 5, 3, 2, 1, 1, 0, 1];
        assert_eq!(bimodal(&counts, &centres(counts.len())), None);
    }

    #[test]
    fn two_clusters_are_found() {
        let counts = [0, 5, 30, 60, 30, 4, 0, 0, 1, 6, 40, 70, 35, 3];
        let c = centres(counts.len());
        assert_eq!(bimodal(&counts, &c), Some((c[3], c[11])));
        // A second cluster of 3% of the samples is an outlier, not a mode.
        let counts = [0, 5, 30, 60, 30, 4, 0, 0, 0, 1, 3, 1, 0, 0];
        assert_eq!(bimodal(&counts, &c), None);
        assert_eq!(bimodal(&[5, 0, 5], &c), None);
    }

    #[test]
    fn load_flags() {
        let quiet = HostLoad {
            cpus: 2,
            busy: 0.55,
            own: 0.5,
            steal: 0.0,
        };
        assert!(quiet.instabilities().is_empty());
        // The steal the development host shows with nothing else running
        // is not flagged.
        assert!(HostLoad {
            steal: 0.037,
            ..quiet
        }
        .instabilities()
        .is_empty());
        let busy = HostLoad {
            busy: 0.95,
            steal: 0.06,
            ..quiet
        };
        let flags = busy.instabilities();
        assert_eq!(flags.len(), 2);
        assert!(flags[0].to_string().contains("45%"), "{}", flags[0]);
    }
}
