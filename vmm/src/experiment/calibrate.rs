//! A host's noise profile, measured (`ipivmm calibrate`): K recordings of
//! one configuration (blocks of N repeats, a pause apart: stand-ins for
//! files recorded at different times), then one more recording with a
//! known delay injected into every IPI handler (a fraction of the first
//! recording's p50: `--inject-delay-cycles`). From them: the spread of the
//! headline p50 within a recording, the drift between recordings, the
//! spread of two consecutive runs (what an interleaved round sees), and
//! what the gate did with them on this host: every pair of plain
//! recordings compared (an A/A control: an exit 1 is a false alarm) and
//! every plain recording against the injected one (a detection when it
//! exits 1), each without and with the measured drift.
//!
//! The drift the profile gives the gate is the 80% upper confidence bound
//! of the between-recordings spread (recordings − 1 degrees of freedom),
//! not the point estimate: four recordings know a spread only to within
//! a factor of about two. The profile records where and when it was
//! measured (host, CPU, kernel, KVM parameters, configuration, version,
//! date, pause) so that `compare` can say when it does not match.
use crate::config::VmConfig;
use crate::error::RunError;
use crate::gate::profile::{Control, NoiseProfile};
use crate::gate::Evidence;
use crate::gate::{self, Policy, Scale};
use crate::results::metrics::Metric;
use crate::results::RunReport;
use ipivmm_devices::budget::SharedBudget;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to calibrate.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The configuration measured.
    pub config: VmConfig,
    /// Plain recordings (at least 2).
    pub recordings: usize,
    /// Repeats per recording (at least 2).
    pub repeats: usize,
    /// Pause between recordings.
    pub pause: Duration,
    /// The injected delay as a fraction of the first recording's p50.
    pub injected: f64,
    /// The gate's policy for the controls.
    pub policy: Policy,
}

/// What a calibration tells its caller as it goes.
pub trait CalibrationEvents {
    /// A run ended: recording `k` (the injected one is the last), repeat `i`.
    fn run(&self, _recording: usize, _repeat: usize, _report: &RunReport) {}
}

impl CalibrationEvents for super::Quiet {}

/// Why a calibration could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// A run could not start.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A run did not complete (its status).
    #[error("recording {recording}, repeat {repeat} did not complete: {status}")]
    Failed {
        /// Which recording.
        recording: usize,
        /// Which repeat.
        repeat: usize,
        /// Its status line.
        status: String,
    },
    /// Cancelled by a signal.
    #[error("cancelled")]
    Cancelled,
    /// The runs have no headline p50 (a custom payload without samples).
    #[error("the runs have no cycles-per-operation p50 to calibrate on: use a built-in workload")]
    NoFigure,
    /// The recordings drifted more than a host plausibly does.
    #[error(
        "the recordings' medians drifted by log sd {0:.3} (×{exp:.2} from one to the next), more than a host \
         plausibly shows (at most {max}): something disturbed them; calibrate again on a quiet host",
        exp = .0.exp(),
        max = NoiseProfile::MAX_DRIFT
    )]
    Implausible(f64),
}

fn p50(r: &RunReport) -> Option<f64> {
    Metric::CyclesPerOpP50
        .value(&r.summary())
        .filter(|v| *v > 0.0)
}

/// The spread figures of recordings of p50s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Spreads {
    /// Log sd between the repeats of a recording (pooled).
    pub within: f64,
    /// The drift between recordings (log sd), point estimate.
    pub between: f64,
    /// Its 80% upper confidence bound: what the gate uses.
    pub between_upper: f64,
    /// Its degrees of freedom (recordings − 1).
    pub df: usize,
    /// Log sd of the difference of consecutive runs.
    pub consecutive: f64,
}

/// The spread figures of recordings of p50s, with the drift's upper bound.
pub(crate) fn spreads_bounded(recordings: &[Vec<f64>]) -> Spreads {
    let (within, between, consecutive) = spreads(recordings);
    let used: Vec<&Vec<f64>> = recordings.iter().filter(|r| !r.is_empty()).collect();
    let df = used.len().saturating_sub(1);
    let n = used.iter().map(|r| r.len()).sum::<usize>() as f64 / used.len().max(1) as f64;
    let means: Vec<f64> = used
        .iter()
        .map(|r| r.iter().map(|v| v.ln()).sum::<f64>() / r.len() as f64)
        .collect();
    let means_sd = crate::stats::sd(&means).unwrap_or(0.0);
    Spreads {
        within,
        between,
        between_upper: NoiseProfile::drift_upper_bound(
            means_sd,
            df,
            within,
            n.round().max(1.0) as usize,
        ),
        df,
        consecutive,
    }
}

/// The spread figures of recordings of log p50s: (within, between,
/// consecutive-pair sd).
pub(crate) fn spreads(recordings: &[Vec<f64>]) -> (f64, f64, f64) {
    let logs: Vec<Vec<f64>> = recordings
        .iter()
        .map(|r| r.iter().map(|v| v.ln()).collect())
        .collect();
    let mut ss = 0.0;
    let mut df = 0usize;
    let mut means = Vec::new();
    let mut diffs = Vec::new();
    for r in &logs {
        if r.is_empty() {
            continue;
        }
        let m = r.iter().sum::<f64>() / r.len() as f64;
        means.push(m);
        ss += r.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
        df += r.len().saturating_sub(1);
        diffs.extend(r.windows(2).map(|w| w[1] - w[0]));
    }
    let within = if df > 0 { (ss / df as f64).sqrt() } else { 0.0 };
    let n = logs.iter().map(Vec::len).sum::<usize>() as f64 / logs.len().max(1) as f64;
    let var_means = crate::stats::sd(&means).map_or(0.0, |s| s * s);
    // The recordings' means spread by the drift plus their repeats' noise.
    let between = (var_means - within * within / n.max(1.0)).max(0.0).sqrt();
    let consecutive = crate::stats::sd(&diffs).unwrap_or(0.0);
    (within, between, consecutive)
}

impl Spec {
    /// Calibrates this host for this spec.
    pub fn run(
        &self,
        host: String,
        cancel: Arc<AtomicBool>,
        events: &dyn CalibrationEvents,
    ) -> Result<NoiseProfile, CalibrateError> {
        let mut recordings: Vec<Vec<f64>> = Vec::new();
        let mut id = None;
        let mut facts = None;
        let budget = Arc::new(SharedBudget::new(self.config.guest_memory_budget));
        let mut injected_config = self.config.clone();
        for k in 0..=self.recordings {
            if k > 0 && !self.pause.is_zero() {
                let until = Instant::now() + self.pause;
                while Instant::now() < until {
                    if cancel.load(Ordering::SeqCst) {
                        return Err(CalibrateError::Cancelled);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let injected = k == self.recordings;
            if injected {
                let first = crate::stats::median(&recordings[0]).ok_or(CalibrateError::NoFigure)?;
                // On top of the user's own delay (a `--run` with
                // --inject-delay-cycles), never in its place: the control
                // measures a known effect against what the recordings ran.
                injected_config.ipi_delay_cycles = self
                    .config
                    .ipi_delay_cycles
                    .saturating_add((first * self.injected).round() as u64);
            }
            let config = if injected {
                &injected_config
            } else {
                &self.config
            };
            let mut values = Vec::new();
            for i in 0..self.repeats {
                if cancel.load(Ordering::SeqCst) {
                    return Err(CalibrateError::Cancelled);
                }
                let r = super::measured_run(config, &cancel, &budget)?;
                events.run(k, i, &r);
                if cancel.load(Ordering::SeqCst) {
                    return Err(CalibrateError::Cancelled);
                }
                if !r.succeeded() {
                    return Err(CalibrateError::Failed {
                        recording: k,
                        repeat: i,
                        status: r.status.line(),
                    });
                }
                id.get_or_insert_with(|| r.id());
                if facts.is_none() {
                    facts = r.host.clone();
                }
                values.push(p50(&r).ok_or(CalibrateError::NoFigure)?);
            }
            recordings.push(values);
        }
        let injected = recordings.pop().unwrap_or_default();
        let Spreads {
            within,
            between: estimate,
            between_upper: between,
            df,
            consecutive,
        } = spreads_bounded(&recordings);
        if estimate > NoiseProfile::MAX_DRIFT {
            return Err(CalibrateError::Implausible(estimate));
        }
        let facts = facts.or_else(|| ipivmm_host::facts::probe().ok());
        // The controls are judged as `compare` judges files: one rule
        // (compare::judge::recorded_evidence), so what calibrate reports is
        // what the same recordings give `compare`.
        let judge = |base: Vec<Vec<f64>>, new: &[f64], drift: Option<f64>| {
            let item =
                Evidence::recorded(base, new.to_vec(), Scale::Ratio, true, drift).and_then(|e| {
                    e.examine(Scale::Ratio, &self.policy)
                        .map_err(|why| gate::Decision::Undecided { why, needs: None })
                });
            gate::Family::judge(vec![item], &self.policy)
                .verdict
                .exit_code()
        };
        let mut aa = Control::default();
        let mut aa_drift = Control::default();
        for i in 0..recordings.len() {
            for j in (i + 1)..recordings.len() {
                aa.count(judge(vec![recordings[i].clone()], &recordings[j], None));
                aa_drift.count(judge(
                    vec![recordings[i].clone()],
                    &recordings[j],
                    Some(between),
                ));
            }
        }
        let mut inj = Control {
            injected: Some(self.injected),
            ..Control::default()
        };
        let mut inj_drift = inj.clone();
        for r in &recordings {
            inj.count(judge(vec![r.clone()], &injected, None));
            inj_drift.count(judge(vec![r.clone()], &injected, Some(between)));
        }
        // Several recordings as the baseline: each against all the others
        // (A/A), all against the injected one.
        let (aa_recordings, inj_recordings) = if recordings.len() >= 3 {
            let mut aa = Control::default();
            for j in 0..recordings.len() {
                let others: Vec<Vec<f64>> = (0..recordings.len())
                    .filter(|i| *i != j)
                    .map(|i| recordings[i].clone())
                    .collect();
                aa.count(judge(others, &recordings[j], None));
            }
            let mut inj = Control {
                injected: Some(self.injected),
                ..Control::default()
            };
            inj.count(judge(recordings.clone(), &injected, None));
            (Some(aa), Some(inj))
        } else {
            (None, None)
        };
        Ok(NoiseProfile {
            schema: NoiseProfile::SCHEMA.into(),
            ipivmm_version: env!("CARGO_PKG_VERSION").into(),
            recorded_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            host,
            config: id.ok_or(CalibrateError::NoFigure)?,
            recordings: self.recordings,
            repeats: self.repeats,
            within_log_sd: within,
            between_log_sd: between,
            round_log_sd: Some(consecutive),
            aa,
            aa_with_drift: aa_drift,
            injected: inj,
            injected_with_drift: inj_drift,
            aa_recordings,
            injected_recordings: inj_recordings,
            recording_medians: recordings
                .iter()
                .chain(std::iter::once(&injected))
                .filter_map(|r| crate::stats::median(r))
                .collect(),
            hostname: facts.as_ref().and_then(|h| h.hostname.clone()),
            cpu_model: facts.as_ref().map(|h| h.cpu_model.clone()),
            kernel_release: facts.as_ref().map(|h| h.kernel_release.clone()),
            kvm_params: facts.as_ref().map(|h| h.params.clone()),
            between_log_sd_estimate: Some(estimate),
            between_df: Some(df),
            pause_seconds: Some(self.pause.as_secs_f64()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_separate_drift_from_noise() {
        // Two recordings, no noise within, shifted by a factor e^0.2.
        let a = vec![100.0; 5];
        let b = vec![100.0 * 0.2f64.exp(); 5];
        let (within, between, consecutive) = spreads(&[a.clone(), b]);
        assert!(within.abs() < 1e-12);
        assert!((between - 0.2 / 2f64.sqrt()).abs() < 1e-9, "{between}");
        assert!(consecutive.abs() < 1e-12);
        // One recording with noise, repeated: no drift beyond the noise.
        let noisy = vec![90.0, 110.0, 95.0, 105.0, 100.0];
        let (within, between, _) = spreads(&[noisy.clone(), noisy]);
        assert!(within > 0.05 && between == 0.0, "{within} {between}");
    }

    #[test]
    fn the_drift_given_to_the_gate_is_an_upper_bound() {
        // Four recordings whose means drift: the bound is above the
        // estimate (3 degrees of freedom know a spread loosely).
        let recs: Vec<Vec<f64>> = [0.0, 0.08, -0.05, 0.03]
            .iter()
            .map(|d: &f64| {
                [0.99, 1.0, 1.01]
                    .iter()
                    .map(|v| 1000.0 * v * d.exp())
                    .collect()
            })
            .collect();
        let s = spreads_bounded(&recs);
        assert_eq!(s.df, 3);
        assert!(s.between > 0.04, "{s:?}");
        assert!(s.between_upper > 1.4 * s.between, "{s:?}");
        // Recordings that agree exactly: no drift, and no bound above it.
        let same = vec![vec![990.0, 1000.0, 1010.0, 1005.0, 995.0]; 3];
        let s = spreads_bounded(&same);
        assert_eq!(s.between, 0.0);
        assert_eq!(s.between_upper, 0.0);
    }
}
