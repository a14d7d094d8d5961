//! The one repeat loop of `run`, `sweep` and `check`: the planned
//! configurations run in rounds (A B A B ..., not A A B B, so drift hits
//! every configuration alike), each finished run handed to the caller's
//! [`Keep`] at once (a journal keeps it durable), until every
//! configuration has its repeats:
//!
//! - **fixed** (`--repeat N`): N repeats, exactly (a script counts on
//!   it); a repeat that ran while other processes or steal were above the
//!   bound ([`crate::stats::HostLoad::instabilities`]) is kept, marked, and left
//!   out of comparisons by the gate;
//! - **auto** (`--repeat auto`): at least [`Repeats::AUTO_MIN`] quiet repeats, then
//!   more until the spread seen makes a later comparison at this many
//!   repeats a side pass an unchanged configuration with 80% power at the
//!   gate's threshold ([`Policy::repeats_to_settle`]), within a
//!   budget: a busy repeat does not count, so load is a cause to run more
//!   (up to twice the most), not a reason to stop.
//!
//! A configuration this host cannot run is skipped with the reason; one
//! that cannot start for another reason, or whose guest went over the
//! guest memory budget, is a failed run and its other repeats are not run
//! ([`RunReport::stops_repeats`]). A set cancel flag stops the loop before the next VM.
//!
//! An experiment with repeats, judged by the gate (running needs
//! `/dev/kvm`, hence `no_run`): xAPIC against x2APIC, five repeats each in
//! rounds, compared along the APIC mode.
//!
//! ```no_run
//! use ipivmm::analysis::compare::{Comparison, Dimension, GateOptions};
//! use ipivmm::analysis::results::Document;
//! use ipivmm::experiment::rounds::{Collect, Planned, Repeats, Rounds};
//! use ipivmm::experiment::Quiet;
//! use ipivmm::VmConfig;
//! use ipivmm::analysis::mode::ApicMode;
//! use std::sync::atomic::AtomicBool;
//! use std::sync::Arc;
//!
//! let xapic = VmConfig { iterations: 200, warmup: 20, ..VmConfig::default() };
//! let x2apic = VmConfig { apic: ApicMode::X2apic, ..xapic.clone() };
//! let planned = [Planned::single(xapic.clone()), Planned::single(x2apic)];
//! let keep = Collect::new(xapic.guest_memory_budget);
//! let cancel = Arc::new(AtomicBool::new(false));
//! let mut skipped = Vec::new();
//! Rounds::new(Repeats::Fixed(5), cancel).run(&planned, &mut skipped, &keep, &Quiet);
//! let doc = Document::new(keep.into_runs(), skipped);
//! for r in &doc.runs {
//!     println!("{} repeat {:?}: {:?}", r.id().label(), r.repeat, r.metrics().values);
//! }
//! let cmp = Comparison::by(&[("rounds".to_string(), doc)], Dimension::Apic, &[])?;
//! let report = cmp.gate(&GateOptions::default());
//! println!("x2apic against xapic: {:?} (exit {})", report.verdict(), report.exit_code());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use super::Budget;
use crate::config::VmConfig;
use crate::gate::Policy;
use crate::host::load::LoadProbe;
use crate::results::identity::ConfigId;
use crate::results::metrics::Metric;
use crate::results::{RunReport, SkippedMode};
use crate::run::{run, RunOptions};
use ipivmm_devices::budget::SharedBudget;
use ipivmm_devices::serial::SerialSink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One configuration to run.
#[derive(Clone, Debug)]
pub struct Planned {
    /// `workload Nv mode [placement] [host setting]`.
    pub label: String,
    /// The run's configuration.
    pub config: VmConfig,
    /// The host setting it runs under (`kvm_amd.avic=1`), for
    /// [`RunReport::host_param`].
    pub host_param: Option<String>,
    /// Its named placement (`close`, `spread`), for [`RunReport::placement`].
    pub placement: Option<String>,
}

impl Planned {
    /// The configuration this run is.
    pub fn id(&self) -> ConfigId {
        self.config
            .config_id(self.placement.clone(), self.host_param.clone())
    }

    /// One configuration on its own (`run`), labelled by its identity.
    pub fn single(config: VmConfig) -> Self {
        let id = config.config_id(None, None);
        Self {
            label: format!("{} {}v {}", id.guest.name(), id.vcpus, id.label()),
            config,
            host_param: None,
            placement: None,
        }
    }
}

/// How many repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeats {
    /// This many a configuration (0 counts as 1).
    Fixed(u32),
    /// As many as the threshold needs at this host's spread, at most
    /// `max`, within `budget`.
    Auto {
        /// The most a configuration gets.
        max: u32,
        /// The most the whole loop may spend.
        budget: Budget,
    },
}

impl Repeats {
    /// Quiet repeats `--repeat auto` runs before it judges the spread.
    pub const AUTO_MIN: u32 = 5;

    /// Why these repeats cannot settle `configs` configurations before any
    /// runs: a `--repeat auto` budget of VMs below the first look (its
    /// [`Repeats::AUTO_MIN`] repeats a configuration).
    pub fn cannot_settle(&self, configs: usize) -> Option<String> {
        match *self {
            Repeats::Auto {
                budget: Budget::Vms(n),
                max,
            } => {
                let need = Repeats::AUTO_MIN.min(max) as usize * configs.max(1);
                ((n as usize) < need).then(|| {
                    format!(
                        "--repeat auto with --budget {n}vms: the first look at the spread needs {} repeats of each of {} configuration{} ({need} VMs): give --budget {need}vms or more, or --repeat N",
                        Repeats::AUTO_MIN.min(max),
                        configs.max(1),
                        if configs == 1 { "" } else { "s" }
                    )
                })
            }
            _ => None,
        }
    }
}

/// What a loop tells its caller as it goes. Every method has a default
/// that does nothing.
pub trait RoundEvents {
    /// `runs` more runs are planned.
    fn planned(&self, _runs: usize) {}
    /// The run labelled `label` starts.
    fn start(&self, _label: &str) {}
    /// A line worth showing (a counting cost not measured, a skip, a rerun).
    fn note(&self, _line: &str) {}
    /// A run that failed (did not start, did not complete): a caller that
    /// hides the notes still shows these.
    fn failed(&self, line: &str) {
        self.note(line)
    }
    /// A host switch or its warning (`--host-param`): shown even by a
    /// caller that hides the notes.
    fn host(&self, line: &str) {
        self.note(line)
    }
    /// A run ended (or was not started).
    fn finished_one(&self) {}
}

impl RoundEvents for super::Quiet {}

/// Where finished runs go.
pub trait Keep {
    /// A finished run, before the next starts.
    fn keep(&self, report: RunReport);
    /// The guest memory budget every run of the loop draws on.
    fn budget(&self) -> Arc<SharedBudget>;
    /// `runs` more runs are planned (a journal says how many are missing).
    fn plan_more(&self, _runs: usize) {}
}

/// A [`Keep`] that holds the runs in memory (a library caller's).
pub struct Collect {
    runs: std::sync::Mutex<Vec<RunReport>>,
    budget: Arc<SharedBudget>,
}

impl Collect {
    /// An empty collection under a guest memory budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            runs: std::sync::Mutex::new(Vec::new()),
            budget: Arc::new(SharedBudget::new(limit)),
        }
    }

    /// The runs kept, in the order they ran.
    pub fn into_runs(self) -> Vec<RunReport> {
        self.runs.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Keep for Collect {
    fn keep(&self, report: RunReport) {
        match self.runs.lock() {
            Ok(mut v) => v.push(report),
            Err(e) => e.into_inner().push(report),
        }
    }
    fn budget(&self) -> Arc<SharedBudget> {
        self.budget.clone()
    }
}

/// The loop: how many repeats, and what a run of it is given.
#[derive(Clone)]
pub struct Rounds {
    /// How many repeats.
    pub repeats: Repeats,
    /// Pairs of runs measuring what counting costs, before the first run.
    pub observer_pairs: u32,
    /// Set (by a signal) to stop before the next VM; the current run ends
    /// cancelled.
    pub cancel: Arc<AtomicBool>,
    /// The gate's threshold, for `--repeat auto`.
    pub policy: Policy,
    /// Where the first run's guest console goes (the others' are kept as
    /// their tails).
    pub first_serial: SerialSink,
    /// When the caller started, for the first run's start-up timing.
    pub started: Instant,
}

impl Rounds {
    /// Most counting-cost pairs ([`Rounds::observer_pairs`]): each pair is
    /// two whole runs, and the per-pair figures are kept.
    pub const MAX_OBSERVER_PAIRS: u32 = crate::run::observer::MAX_PAIRS;

    /// `repeats` with the defaults of a library caller: no counting-cost
    /// pairs, no console, the default gate.
    pub fn new(repeats: Repeats, cancel: Arc<AtomicBool>) -> Self {
        Self {
            repeats,
            observer_pairs: 0,
            cancel,
            policy: crate::gate::Policy::DEFAULT,
            first_serial: SerialSink::Discard,
            started: Instant::now(),
        }
    }

    /// Runs `runs` in rounds until each has its repeats (or the budget, or a
    /// cancel, ends it), each finished run into `keep`; configurations this
    /// host cannot run join `skipped` with the reason. Returns whether a
    /// `--repeat auto` budget ran out before every configuration was settled.
    pub fn run(
        &self,
        runs: &[Planned],
        skipped: &mut Vec<SkippedMode>,
        keep: &dyn Keep,
        events: &dyn RoundEvents,
    ) -> bool {
        let first_plan = match self.repeats {
            Repeats::Fixed(n) => n.max(1),
            Repeats::Auto { max, .. } => Repeats::AUTO_MIN.min(max),
        } as usize
            * runs.len();
        events.planned(first_plan);
        keep.plan_more(first_plan);
        let indexed = !matches!(self.repeats, Repeats::Fixed(0 | 1));
        let mut tally = vec![Tally::default(); runs.len()];
        let mut observer = self.observer_pairs > 0;
        let mut first = true;
        let start = Instant::now();
        let mut out_of_budget = false;
        let mut round = 0u32;
        loop {
            let active: Vec<usize> = (0..runs.len())
                .filter(|&i| needs_more(&tally[i], self.repeats, &self.policy))
                .collect();
            if active.is_empty() {
                break;
            }
            if let Repeats::Auto { budget, .. } = self.repeats {
                let spent = match budget {
                    Budget::Time(b) => start.elapsed() >= b,
                    Budget::Vms(n) => tally.iter().map(|t| t.runs).sum::<u32>() >= n,
                };
                if spent {
                    out_of_budget = true;
                    break;
                }
            }
            let beyond = round
                >= match self.repeats {
                    Repeats::Fixed(n) => n.max(1),
                    Repeats::Auto { .. } => Repeats::AUTO_MIN,
                };
            if beyond {
                events.planned(active.len());
                keep.plan_more(active.len());
            }
            for i in active {
                let p = &runs[i];
                if self.cancel.load(Ordering::SeqCst) {
                    if tally.iter().all(|t| t.runs == 0) || round == 0 {
                        skipped.push(SkippedMode {
                            id: Some(p.id()),
                            mode: p.label.clone(),
                            reason: "not run: cancelled".into(),
                        });
                    }
                    tally[i].done = true;
                    events.finished_one();
                    continue;
                }
                events.start(&p.label);
                let counting_cost = match std::mem::take(&mut observer) {
                    true => crate::run::observer::measure(
                        &p.config,
                        self.observer_pairs,
                        Some(self.cancel.clone()),
                    )
                    .unwrap_or_else(|e| {
                        events.note(&format!("{}: counting cost not measured: {e}", p.label));
                        None
                    }),
                    false => None,
                };
                let run_opts = RunOptions {
                    serial: if first {
                        self.first_serial
                    } else {
                        SerialSink::Discard
                    },
                    started: if first { self.started } else { Instant::now() },
                    cancel: Some(self.cancel.clone()),
                    budget: Some(keep.budget()),
                };
                first = false;
                let probe = LoadProbe::start();
                let mut r = match run(&p.config, run_opts) {
                    Ok(r) => r,
                    // Only what this host cannot do is a skip.
                    Err(e) if e.host_cannot_run() => {
                        events.note(&format!("{}: skipped: {e}", p.label));
                        tally[i].done = true;
                        skipped.push(SkippedMode {
                            id: Some(p.id()),
                            mode: p.label.clone(),
                            reason: format!("this host cannot run it: {e}"),
                        });
                        events.finished_one();
                        continue;
                    }
                    Err(e) => p.config.not_started(&e.to_string()),
                };
                r.host_load = probe.and_then(|l| l.finish());
                r.observer_effect = counting_cost;
                r.host_param = p.host_param.clone();
                r.placement = p.placement.clone();
                r.repeat = indexed.then_some(tally[i].runs);
                let t = &mut tally[i];
                t.runs += 1;
                match quiet(&r) {
                    Ok(()) => t.quiet += 1,
                    Err(why) if r.succeeded() => events.note(&format!(
                        "{}: repeat {} ran on a busy host ({why}): {}",
                        p.label,
                        t.runs,
                        match self.repeats {
                            Repeats::Fixed(_) => "it is kept, and comparisons leave it out",
                            Repeats::Auto { .. } => "it is kept and run again",
                        }
                    )),
                    Err(_) => {}
                }
                let p50 = Metric::CyclesPerOpP50
                    .value(&r.summary())
                    .filter(|v| *v > 0.0);
                if r.succeeded() && quiet(&r).is_ok() {
                    if let Some(v) = p50 {
                        t.p50.push(v);
                    }
                }
                // What `--repeat auto` could never settle ends it at once: a
                // run without the latency figure (the payload or --phase
                // measures none: every repeat would be the same), or runs that
                // keep failing.
                if let Repeats::Auto { .. } = self.repeats {
                    t.failed += u32::from(!r.succeeded());
                    if r.succeeded() && p50.is_none() {
                        t.done = true;
                        events.failed(&format!(
                            "{}: --repeat auto: the run has no latency figure (cycles per operation p50), so no \
                             number of repeats settles its spread: give --repeat N, or a --phase with latency samples",
                            p.label
                        ));
                    } else if t.failed >= AUTO_MAX_FAILED {
                        t.done = true;
                        events.failed(&format!(
                            "{}: --repeat auto: {} runs failed, its repeats end here",
                            p.label, t.failed
                        ));
                    }
                }
                let stop = r.stops_repeats();
                if !r.succeeded() {
                    let more = stop.map(|why| format!("; {why}")).unwrap_or_default();
                    events.failed(&format!("{}: {}{more}", p.label, r.status.line()));
                }
                if stop.is_some() {
                    t.done = true;
                }
                keep.keep(r);
                events.finished_one();
            }
            round += 1;
            if self.cancel.load(Ordering::SeqCst) {
                break;
            }
        }
        out_of_budget
    }
}

/// What one configuration has so far.
#[derive(Clone, Debug, Default)]
struct Tally {
    runs: u32,
    quiet: u32,
    failed: u32,
    p50: Vec<f64>,
    done: bool,
}

/// Failed runs after which `--repeat auto` stops a configuration: a
/// spread cannot settle on runs that do not complete.
pub(crate) const AUTO_MAX_FAILED: u32 = 2;

fn quiet(r: &RunReport) -> Result<(), String> {
    match r
        .host_load
        .as_ref()
        .map(crate::stats::HostLoad::instabilities)
    {
        // The advice names only what this run did not already use (a
        // pinned run is not told to pin).
        Some(v) if !v.is_empty() => Err(v[0].hint(&r.id())),
        _ => Ok(()),
    }
}

/// Whether `t` needs another run.
fn needs_more(t: &Tally, repeats: Repeats, policy: &Policy) -> bool {
    if t.done {
        return false;
    }
    match repeats {
        Repeats::Fixed(n) => t.runs < n.max(1),
        Repeats::Auto { max, .. } => {
            if t.quiet >= max || t.runs >= 2 * max {
                return false;
            }
            if t.quiet < Repeats::AUTO_MIN || t.p50.len() < Repeats::AUTO_MIN as usize {
                return true;
            }
            let Some(sd) = crate::stats::log_sd(&t.p50) else {
                return true;
            };
            match policy.repeats_to_settle(sd) {
                Some(n) => (t.p50.len() as u32) < (n as u32).min(max),
                None => true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_repeats_are_exactly_n_busy_or_not() {
        let p = crate::gate::Policy::DEFAULT;
        let t = Tally {
            runs: 4,
            quiet: 4,
            ..Default::default()
        };
        assert!(needs_more(&t, Repeats::Fixed(5), &p), "four of five");
        let t = Tally {
            runs: 5,
            quiet: 4,
            ..Default::default()
        };
        assert!(
            !needs_more(&t, Repeats::Fixed(5), &p),
            "one busy of five: no more"
        );
        let done = Tally {
            runs: 5,
            quiet: 5,
            ..Default::default()
        };
        assert!(!needs_more(&done, Repeats::Fixed(5), &p));
    }

    #[test]
    fn auto_stops_when_the_spread_allows_a_pass() {
        let p = crate::gate::Policy::DEFAULT;
        let auto = Repeats::Auto {
            max: 1000,
            budget: Budget::Vms(10_000),
        };
        // A quiet, tight host: five repeats already suffice.
        let tight = Tally {
            runs: 5,
            quiet: 5,
            p50: vec![100.0, 101.0, 99.0, 100.5, 99.5],
            ..Default::default()
        };
        assert!(!needs_more(&tight, auto, &p));
        // A spread of about 11%: tens of repeats.
        let wide = Tally {
            runs: 5,
            quiet: 5,
            p50: vec![100.0, 120.0, 90.0, 110.0, 95.0],
            ..Default::default()
        };
        assert!(needs_more(&wide, auto, &p));
        let sd = crate::stats::log_sd(&wide.p50).unwrap();
        let n = p.repeats_to_settle(sd).unwrap();
        assert!(n > 10, "{n}");
    }
}
