//! Running a planned sweep: each run in order, the first one also measuring
//! what counting costs, runs that cannot start (or are not started after a
//! cancel) recorded as skipped with the reason. What happens along the way
//! goes to a [`SweepEvents`] (the command line draws a progress bar; `check`
//! and library callers can stay quiet with [`Quiet`]).
use super::PlannedRun;
use ipivmm::host::load::LoadProbe;
use ipivmm::results::identity::ConfigId;
use ipivmm::results::{RunReport, SkippedMode};
use ipivmm::run::{run, RunOptions};
use ipivmm_devices::serial::SerialSink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What a sweep tells its caller as it goes. Every method has a default
/// that does nothing.
pub trait SweepEvents {
    /// `runs` runs are about to start (the whole plan, or one host stage).
    fn planned(&self, _runs: usize) {}
    /// The run labelled `label` starts.
    fn start(&self, _label: &str) {}
    /// A line worth showing (a failed run, a counting cost not measured).
    fn note(&self, _line: &str) {}
    /// A host switch or its warning (`--host-param`): the kernel module
    /// changed under every later run, so a caller that hides the notes
    /// still shows these (the command line prints them with `-q` too).
    fn host(&self, line: &str) {
        self.note(line)
    }
    /// A run ended (or was not started).
    fn finished_one(&self) {}
    /// A run ended with a report (completed or not), before the next
    /// starts: where a caller keeps it durable ([`crate::output::journal`]).
    fn report(&self, _report: &RunReport) {}
}

/// A caller that wants no events.
pub struct Quiet;

impl SweepEvents for Quiet {}

/// How to run a sweep.
#[derive(Clone)]
pub struct SweepOptions {
    /// Pairs of runs measuring what counting costs, on the first run.
    pub observer_pairs: u32,
    /// Set (by a signal) to stop: the current run ends cancelled, the rest
    /// are skipped as "not run: sweep cancelled".
    pub cancel: Arc<AtomicBool>,
    /// Independent VMs per combination (`--repeat`), run in rounds over the
    /// whole plan (A B A B ..., not A A B B) so that drift hits every
    /// combination alike; 0 counts as 1.
    pub repeats: u32,
}

/// What a sweep produced.
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Every run, in the order it ran.
    pub reports: Vec<RunReport>,
    /// Combinations not run, each with the reason.
    pub skipped: Vec<SkippedMode>,
    /// Host switch or restore errors (`--host-param`), one line each.
    pub errors: Vec<String>,
}

/// Runs `runs` in order; runs that could not start (or were not started
/// after a cancel) join `skipped` with the reason. The first run also
/// measures what counting costs (`observer_pairs` pairs of runs with the
/// counters detached and attached).
pub fn run_all(
    runs: &[PlannedRun],
    skipped: &mut Vec<SkippedMode>,
    opts: &SweepOptions,
    observer_pairs: u32,
    events: &dyn SweepEvents,
) -> Vec<RunReport> {
    let rounds = opts.repeats.max(1);
    events.planned(runs.len() * rounds as usize);
    let mut reports = Vec::with_capacity(runs.len() * rounds as usize);
    // Combinations that could not start are not tried again.
    let mut refused: Vec<&str> = Vec::new();
    for round in 0..rounds {
        for PlannedRun {
            label,
            config,
            host_param,
            placement,
        } in runs
        {
            if refused.contains(&label.as_str()) {
                events.finished_one();
                continue;
            }
            if opts.cancel.load(Ordering::SeqCst) {
                if round == 0 {
                    skipped.push(SkippedMode {
                        id: Some(ConfigId::of_config(
                            config,
                            placement.clone(),
                            host_param.clone(),
                        )),
                        mode: label.clone(),
                        reason: "not run: sweep cancelled".into(),
                    });
                }
                events.finished_one();
                continue;
            }
            events.start(label);
            let run_opts = RunOptions {
                serial: SerialSink::Discard,
                started: Instant::now(),
                cancel: Some(opts.cancel.clone()),
            };
            let observer = if reports.is_empty() {
                ipivmm::run::observer::measure(config, observer_pairs, Some(opts.cancel.clone()))
                    .unwrap_or_else(|e| {
                        events.note(&format!("{label}: counting cost not measured: {e}"));
                        None
                    })
            } else {
                None
            };
            let probe = LoadProbe::start();
            match run(config, run_opts) {
                Ok(mut r) => {
                    r.host_load = probe.and_then(|p| p.finish());
                    r.observer_effect = observer;
                    r.host_param = host_param.clone();
                    r.placement = placement.clone();
                    r.repeat = (rounds > 1).then_some(round);
                    if !r.succeeded() {
                        events.note(&format!("{label}: {}", r.status.line()));
                    }
                    events.report(&r);
                    reports.push(r);
                }
                Err(e) => {
                    events.note(&format!("{label}: could not start: {e}"));
                    refused.push(label);
                    skipped.push(SkippedMode {
                        id: Some(ConfigId::of_config(
                            config,
                            placement.clone(),
                            host_param.clone(),
                        )),
                        mode: label.clone(),
                        reason: format!("could not start: {e}"),
                    });
                }
            }
            events.finished_one();
        }
    }
    reports
}
