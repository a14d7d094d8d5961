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
use crate::config::VmConfig;
use crate::gate::profile::{Control, NoiseProfile, SCHEMA};
use crate::gate::{self, Evidence, Policy, Scale};
use crate::results::metrics::Metric;
use crate::results::summary::summarize;
use crate::results::RunReport;
use crate::run::RunError;
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
pub trait Events {
    /// A run ended: recording `k` (the injected one is the last), repeat `i`.
    fn run(&self, _recording: usize, _repeat: usize, _report: &RunReport) {}
}

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
}

fn p50(r: &RunReport) -> Option<f64> {
    Metric::CyclesPerOpP50
        .value(&summarize(r))
        .filter(|v| *v > 0.0)
}

/// The spread figures of recordings of log p50s: (within, between,
/// consecutive-pair sd).
pub fn spreads(recordings: &[Vec<f64>]) -> (f64, f64, f64) {
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

/// Calibrates this host for `spec`.
pub fn calibrate(
    spec: &Spec,
    host: String,
    cancel: Arc<AtomicBool>,
    events: &dyn Events,
) -> Result<NoiseProfile, CalibrateError> {
    let mut recordings: Vec<Vec<f64>> = Vec::new();
    let mut id = None;
    let budget = Arc::new(SharedBudget::new(spec.config.guest_memory_budget));
    let mut injected_config = spec.config.clone();
    for k in 0..=spec.recordings {
        if k > 0 && !spec.pause.is_zero() {
            let until = Instant::now() + spec.pause;
            while Instant::now() < until {
                if cancel.load(Ordering::SeqCst) {
                    return Err(CalibrateError::Cancelled);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let injected = k == spec.recordings;
        if injected {
            let first = crate::stats::median(&recordings[0]).ok_or(CalibrateError::NoFigure)?;
            // On top of the user's own delay (a `--run` with
            // --inject-delay-cycles), never in its place: the control
            // measures a known effect against what the recordings ran.
            injected_config.ipi_delay_cycles = spec
                .config
                .ipi_delay_cycles
                .saturating_add((first * spec.injected).round() as u64);
        }
        let config = if injected {
            &injected_config
        } else {
            &spec.config
        };
        let mut values = Vec::new();
        for i in 0..spec.repeats {
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
            values.push(p50(&r).ok_or(CalibrateError::NoFigure)?);
        }
        recordings.push(values);
    }
    let injected = recordings.pop().unwrap_or_default();
    let (within, between, consecutive) = spreads(&recordings);
    let judge = |base: &[f64], new: &[f64], drift: Option<f64>| {
        let evidence = match drift {
            Some(between) => Evidence::Drift {
                base: base.to_vec(),
                new: new.to_vec(),
                between,
            },
            None => Evidence::Independent {
                base: base.to_vec(),
                new: new.to_vec(),
            },
        };
        let items = vec![gate::examine(&evidence, Scale::Ratio, &spec.policy)
            .map_err(|why| gate::Outcome::Undecided { why, needs: None })];
        gate::exit_code(gate::judge_family(items, &spec.policy).verdict)
    };
    let mut aa = Control::default();
    let mut aa_drift = Control::default();
    for i in 0..recordings.len() {
        for j in (i + 1)..recordings.len() {
            aa.count(judge(&recordings[i], &recordings[j], None));
            aa_drift.count(judge(&recordings[i], &recordings[j], Some(between)));
        }
    }
    let mut inj = Control {
        injected: Some(spec.injected),
        ..Control::default()
    };
    let mut inj_drift = inj.clone();
    for r in &recordings {
        inj.count(judge(r, &injected, None));
        inj_drift.count(judge(r, &injected, Some(between)));
    }
    Ok(NoiseProfile {
        schema: SCHEMA.into(),
        ipivmm_version: env!("CARGO_PKG_VERSION").into(),
        recorded_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        host,
        config: id.ok_or(CalibrateError::NoFigure)?,
        recordings: spec.recordings,
        repeats: spec.repeats,
        within_log_sd: within,
        between_log_sd: between,
        round_log_sd: Some(consecutive),
        aa,
        aa_with_drift: aa_drift,
        injected: inj,
        injected_with_drift: inj_drift,
        recording_medians: recordings
            .iter()
            .chain(std::iter::once(&injected))
            .filter_map(|r| crate::stats::median(r))
            .collect(),
    })
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
}
