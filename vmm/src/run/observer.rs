//! The observer effect: what counting costs the latency it measures. The
//! same configuration runs in pairs, once with every counter detached
//! (tracepoints off: KVM's binary stats and the guest's own counters only,
//! which cost nothing on the measured path) and once as configured; the
//! medians of the measured p50 give the ratio. Runs alternate so that both
//! halves see the same machine noise.
use super::{run, RunOptions};
use crate::config::VmConfig;
use crate::error::RunError;
use ipivmm_devices::serial::SerialSink;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::results::observer::ObserverEffect;

/// Most pairs `measure` runs: each pair is two whole runs, and the
/// per-pair figures are kept, so the count is bounded (the command line
/// refuses more).
pub(crate) const MAX_PAIRS: u32 = 1000;

/// The median of `v` (NaN-free input; empty gives 0).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The measured p50 of one run of `c` and how it counted exits; Err: how
/// it failed (it did not start, did not complete, or had no samples).
fn p50_of(c: &VmConfig, cancel: &Option<Arc<AtomicBool>>) -> Result<(f64, String), String> {
    let opts = RunOptions {
        serial: SerialSink::Discard,
        cancel: cancel.clone(),
        ..RunOptions::default()
    };
    let r = run(c, opts).map_err(|e: RunError| e.to_string())?;
    if !r.succeeded() {
        return Err(r.status.text());
    }
    r.summary()
        .latency
        .map(|l| (l.p50, r.exit_counting().to_string()))
        .ok_or_else(|| "no latency samples".into())
}

/// Measures the observer effect of `config` over `pairs` pairs of runs;
/// None when counting is off (nothing to measure). A run that fails is
/// listed in `failed` (its pair left out), never an error: the caller's
/// own run and its results go on.
pub fn measure(
    config: &VmConfig,
    pairs: u32,
    cancel: Option<Arc<AtomicBool>>,
) -> Result<Option<ObserverEffect>, RunError> {
    if !config.tracepoints || pairs == 0 {
        return Ok(None);
    }
    let without = VmConfig {
        tracepoints: false,
        ..config.clone()
    };
    let cancelled = || {
        cancel
            .as_deref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
    };
    let mut runs = Vec::with_capacity(pairs.min(MAX_PAIRS) as usize);
    let mut failed = Vec::new();
    let mut mechanism: Vec<String> = Vec::new();
    for i in 1..=pairs.min(MAX_PAIRS) {
        // A signal ends the measurement at once: the pairs so far are kept
        // and the caller's own run then ends as cancelled.
        if cancelled() {
            break;
        }
        let a =
            p50_of(&without, &cancel).map_err(|e| failed.push(format!("pair {i}, detached: {e}")));
        let b = p50_of(config, &cancel).map_err(|e| failed.push(format!("pair {i}, counted: {e}")));
        if let (Ok((a, _)), Ok((b, how))) = (a, b) {
            if !mechanism.contains(&how) {
                mechanism.push(how);
            }
            runs.push((a, b));
        }
    }
    let without_p50 = median(&mut runs.iter().map(|r| r.0).collect::<Vec<_>>());
    let with_p50 = median(&mut runs.iter().map(|r| r.1).collect::<Vec<_>>());
    Ok(Some(ObserverEffect {
        pairs: runs.len() as u32,
        exit_reasons: config.exit_reasons,
        with_counters_p50: with_p50,
        without_counters_p50: without_p50,
        ratio: if without_p50 > 0.0 {
            with_p50 / without_p50
        } else {
            0.0
        },
        runs,
        failed,
        mechanism,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn failed_runs_are_listed_not_fatal() {
        // No KVM at this path: every run of every pair fails to start.
        let c = VmConfig {
            kvm_device: "/nonexistent/kvm".into(),
            ..Default::default()
        };
        let e = measure(&c, 2, None)
            .unwrap()
            .expect("an effect, with its failures");
        assert_eq!(
            (e.pairs, e.runs.len(), e.failed.len()),
            (0, 0, 4),
            "{:?}",
            e.failed
        );
        assert!(
            e.failed[0].starts_with("pair 1, detached: "),
            "{}",
            e.failed[0]
        );
        assert!(
            e.failed[3].starts_with("pair 2, counted: "),
            "{}",
            e.failed[3]
        );
        assert!(
            e.text()
                .starts_with("counting cost: not measured; 4 runs failed: pair 1"),
            "{}",
            e.text()
        );
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["failed"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn nothing_to_measure_without_counters() {
        let c = VmConfig {
            tracepoints: false,
            ..Default::default()
        };
        assert_eq!(measure(&c, 3, None).unwrap(), None);
    }
}
