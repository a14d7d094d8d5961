//! Running a planned sweep: each run in order, the first one also measuring
//! what counting costs, each finished run kept in the command's journal
//! ([`Journal`]). A run this host cannot do (its mode, a feature), or not
//! started after a cancel, is recorded as skipped with the reason; a run
//! that could not start for another reason is a failed run. What happens
//! along the way goes to a [`SweepEvents`] (the command line draws a
//! progress bar; `check` and library callers can stay quiet with [`Quiet`]).
use super::PlannedRun;
use crate::output::journal::{stops_repeats, Journal};
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
    /// A line worth showing (a counting cost not measured, a skip).
    fn note(&self, _line: &str) {}
    /// A run that failed (did not start, did not complete): a caller that
    /// hides the notes still shows these (the command line prints them
    /// with `-q` too).
    fn failed(&self, line: &str) {
        self.note(line)
    }
    /// A host switch or its warning (`--host-param`): the kernel module
    /// changed under every later run, so a caller that hides the notes
    /// still shows these (the command line prints them with `-q` too).
    fn host(&self, line: &str) {
        self.note(line)
    }
    /// A run ended (or was not started).
    fn finished_one(&self) {}
}

/// A caller that wants no events.
pub struct Quiet;

impl SweepEvents for Quiet {}

/// How to run a sweep.
#[derive(Clone)]
pub struct SweepOptions<'a> {
    /// Pairs of runs measuring what counting costs, on the first run.
    pub observer_pairs: u32,
    /// Set (by a signal) to stop: the current run ends cancelled, the rest
    /// are skipped as "not run: sweep cancelled".
    pub cancel: Arc<AtomicBool>,
    /// Independent VMs per combination (`--repeat`), run in rounds over the
    /// whole plan (A B A B ..., not A A B B) so that drift hits every
    /// combination alike; 0 counts as 1.
    pub repeats: u32,
    /// Where every finished run goes (and the guest memory budget they
    /// share).
    pub journal: &'a Journal,
}

/// What a sweep produced besides its runs (which are in the journal).
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Combinations not run, each with the reason.
    pub skipped: Vec<SkippedMode>,
    /// Host switch or restore errors (`--host-param`), one line each.
    pub errors: Vec<String>,
}

/// Runs `runs` in order, each finished run into `opts.journal`; runs this
/// host cannot do (or not started after a cancel) join `skipped` with the
/// reason. The first run also measures what counting costs
/// (`observer_pairs` pairs of runs with the counters detached and attached).
pub fn run_all(
    runs: &[PlannedRun],
    skipped: &mut Vec<SkippedMode>,
    opts: &SweepOptions,
    observer_pairs: u32,
    events: &dyn SweepEvents,
) {
    let rounds = opts.repeats.max(1);
    events.planned(runs.len() * rounds as usize);
    opts.journal.plan_more(runs.len() * rounds as usize);
    let mut first = observer_pairs > 0;
    // Combinations whose repeats stop (they could not start, or went over
    // the guest memory budget) are not tried again.
    let mut stopped: Vec<&str> = Vec::new();
    for round in 0..rounds {
        for PlannedRun {
            label,
            config,
            host_param,
            placement,
        } in runs
        {
            if stopped.contains(&label.as_str()) {
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
                budget: Some(opts.journal.budget()),
            };
            let observer = match std::mem::take(&mut first) {
                true => ipivmm::run::observer::measure(
                    config,
                    observer_pairs,
                    Some(opts.cancel.clone()),
                )
                .unwrap_or_else(|e| {
                    events.note(&format!("{label}: counting cost not measured: {e}"));
                    None
                }),
                false => None,
            };
            let probe = LoadProbe::start();
            let mut r = match run(config, run_opts) {
                Ok(r) => r,
                // Only what this host cannot do is a skip.
                Err(e) if e.host_cannot_run() => {
                    events.note(&format!("{label}: skipped: {e}"));
                    stopped.push(label);
                    skipped.push(SkippedMode {
                        id: Some(ConfigId::of_config(
                            config,
                            placement.clone(),
                            host_param.clone(),
                        )),
                        mode: label.clone(),
                        reason: format!("this host cannot run it: {e}"),
                    });
                    events.finished_one();
                    continue;
                }
                Err(e) => RunReport::not_started(config, &e.to_string()),
            };
            r.host_load = probe.and_then(|p| p.finish());
            r.observer_effect = observer;
            r.host_param = host_param.clone();
            r.placement = placement.clone();
            r.repeat = (rounds > 1).then_some(round);
            // Said once, with why the repeats after it will not run.
            let stop = stops_repeats(&r).filter(|_| round + 1 < rounds);
            if !r.succeeded() {
                let more = stop.map(|why| format!("; {why}")).unwrap_or_default();
                events.failed(&format!("{label}: {}{more}", r.status.line()));
            }
            if stop.is_some() {
                stopped.push(label);
            }
            opts.journal.record(r);
            events.finished_one();
        }
    }
}
