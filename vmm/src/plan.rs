//! A plan as the machine executes it: named experiments, each a set of
//! configurations to run (one for a run, many for a sweep) with its
//! repeats, what the host must have, and the expectations that must hold —
//! what `ipivmm check PLAN.toml` reads from TOML, and what a library user
//! builds in Rust and executes ([`Plan::execute`]). What needs no VM (requirements,
//! outcomes, the plan file's loader, judging recorded results) is
//! `ipivmm_analysis::plan`.
//!
//! ```no_run
//! use ipivmm::experiment::rounds::{Planned, Repeats};
//! use ipivmm::analysis::mode::ApicMode;
//! use ipivmm::plan::{Experiment, Plan};
//! use ipivmm::VmConfig;
//!
//! let x2apic = VmConfig { apic: ApicMode::X2apic, iterations: 40, warmup: 4, ..VmConfig::default() };
//! let plan = Plan {
//!     name: "mine".into(),
//!     about: String::new(),
//!     experiments: vec![Experiment::new(
//!         "x2apic",
//!         vec![Planned::single(x2apic)],
//!         Repeats::Fixed(1),
//!         vec!["icr_write_exits_per_ipi == 1".parse().unwrap()],
//!     )],
//! };
//! let outcome = plan.execute(ipivmm::host::probe().ok().as_ref(), &Default::default());
//! assert_eq!(outcome.verdicts().exit_code(), 0);
//! ```
//!
//! A plan file run from Rust: the file's loader hands each `run = "FLAGS"`
//! line to the caller's parser (the flags are the command line's; here a
//! parser of one flag), [`Experiment::from_file`] makes each experiment the
//! machine's, and [`Plan::execute`] runs them:
//!
//! ```no_run
//! use ipivmm::analysis::plan::file::{Job, PlanFile};
//! use ipivmm::experiment::rounds::Planned;
//! use ipivmm::plan::{Experiment, Plan};
//! use ipivmm::VmConfig;
//! use ipivmm::analysis::mode::ApicMode;
//! use std::path::Path;
//!
//! std::fs::write(
//!     "mine.toml",
//!     "name = \"mine\"\n[[experiment]]\nname = \"x2apic\"\nrun = \"--apic x2apic\"\nexpect = [\"ipis_delivered == ipis_sent\"]\n",
//! )?;
//! let (file, checked) = PlanFile::load(Path::new("mine.toml"), |_, flags| match flags {
//!     "--apic x2apic" => Ok(VmConfig { apic: ApicMode::X2apic, ..VmConfig::default() }),
//!     other => Err(format!("'{other}': this parser knows --apic x2apic only")),
//! })?;
//! let mut experiments = Vec::new();
//! for (x, c) in file.experiments.iter().zip(&checked) {
//!     let mut e = Experiment::from_file(x, c, Path::new("."))?;
//!     if let Job::Flags(config) = &c.job {
//!         e.runs.push(Planned::single(config.clone()));
//!     }
//!     experiments.push(e);
//! }
//! let plan = Plan { name: file.name, about: file.about, experiments };
//! let outcome = plan.execute(ipivmm::host::probe().ok().as_ref(), &Default::default());
//! for v in &outcome.verdicts().0 {
//!     println!("{}: {:?}", v.name, v.outcome);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use crate::experiment::rounds::{self, Collect, Keep, Planned, Repeats, Rounds};
use ipivmm_analysis::expect::{Expectation, Verdicts};
use ipivmm_analysis::plan::file::{Checked, ExperimentFile, Job, Unrecorded};
use ipivmm_analysis::plan::{ExperimentOutcome, NotRun, PlanOutcome, Requirement};
use ipivmm_analysis::results::{Document, PresetReport, SkippedMode};
use ipivmm_host::facts::HostInfo;
use ipivmm_term::text::escape_controls;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One experiment.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// Its name (prefixes its test points).
    pub name: String,
    /// What it shows.
    pub about: String,
    /// The configurations it runs (one for a run, many for a sweep).
    pub runs: Vec<Planned>,
    /// Configurations planned but not run here, with the reason (a sweep's
    /// skips).
    pub skipped: Vec<SkippedMode>,
    /// Repeats per configuration.
    pub repeats: Repeats,
    /// Pairs of runs measuring what counting costs, before the first run.
    pub observer_pairs: u32,
    /// What the host must have; without it every expectation is a skip
    /// with the reason.
    pub requires: Vec<Requirement>,
    /// The expectations.
    pub expect: Vec<Expectation>,
    /// A sweep preset's question and what this host can answer of it.
    pub preset: Option<PresetReport>,
    /// Why it cannot run, found when it was built (None: it can).
    pub not_run: Option<NotRun>,
    /// Results recorded before (by `run`, `sweep` or a script): judged
    /// as they are, nothing run.
    pub recorded: Option<Document>,
}

impl Experiment {
    /// Experiment `x` of a plan file as the engine's, before its runs are
    /// planned: its name, about, requirements and expectations, one repeat;
    /// for `results = "FILE"`, the recording read under `base` (or why not: a
    /// failing point; Err where the recordings are refused as given, the same
    /// run twice: the plan does not start, as `compare`).
    pub fn from_file<J>(
        x: &ExperimentFile,
        c: &Checked<J>,
        base: &Path,
    ) -> Result<Experiment, String> {
        let mut e = Self::new(
            x.name.clone(),
            Vec::new(),
            Repeats::Fixed(1),
            c.expect.clone(),
        );
        e.about = x.about.clone();
        e.requires = c.requires.clone();
        if let Job::Recorded(pattern) = &c.job {
            match Document::recorded(pattern, base) {
                Ok(doc) => e.recorded = Some(doc),
                Err(Unrecorded::Point(why)) => e.not_run = Some(NotRun::Plan(why)),
                Err(Unrecorded::Refused(why)) => {
                    return Err(format!("experiment '{}': {why}", escape_controls(&x.name)))
                }
            }
        }
        Ok(e)
    }

    /// An experiment of `runs` with `repeats` and `expect`, nothing else.
    pub fn new(
        name: impl Into<String>,
        runs: Vec<Planned>,
        repeats: Repeats,
        expect: Vec<Expectation>,
    ) -> Self {
        Self {
            name: name.into(),
            about: String::new(),
            runs,
            skipped: Vec::new(),
            repeats,
            observer_pairs: 0,
            requires: Vec::new(),
            expect,
            preset: None,
            not_run: None,
            recorded: None,
        }
    }
}

/// A plan.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The suite's name.
    pub name: String,
    /// What it checks.
    pub about: String,
    /// The experiments, in order.
    pub experiments: Vec<Experiment>,
}

impl Plan {
    /// Executes the plan on `host` (None: not probed; requirements then unmet)
    /// with no events, runs kept in memory.
    pub fn execute(&self, host: Option<&HostInfo>, how: &Execution) -> PlanOutcome {
        self.execute_with(host, how, &Silent)
    }

    /// [`Plan::execute`], telling `events` and recording through it.
    pub fn execute_with(
        &self,
        host: Option<&HostInfo>,
        how: &Execution,
        events: &dyn PlanEvents,
    ) -> PlanOutcome {
        let mut out = PlanOutcome::default();
        for x in &self.experiments {
            events.experiment(x);
            let not_run = ExperimentOutcome::settle(
                &x.name,
                &x.expect,
                &x.requires,
                x.not_run.as_ref(),
                x.recorded.as_ref(),
                host,
                how.cancel.load(Ordering::SeqCst),
            );
            let outcome = not_run.unwrap_or_else(|| {
                let recorder = events.recorder(x);
                let mut skipped = x.skipped.clone();
                let mut rounds = Rounds::new(x.repeats, how.cancel.clone());
                rounds.observer_pairs = x.observer_pairs;
                rounds.run(&x.runs, &mut skipped, recorder.as_ref(), events);
                let (mut doc, error) = recorder.finish(skipped);
                doc.preset = x.preset.clone();
                ExperimentOutcome {
                    name: x.name.clone(),
                    verdicts: Verdicts::of(&doc, &x.expect).0,
                    doc: Some(doc),
                    error,
                }
            });
            events.finished(x, &outcome);
            out.experiments.push(outcome);
        }
        out
    }
}

/// Where an experiment's runs go, and the document they make.
pub trait Recorder: Keep {
    /// The experiment's document (its runs, its skips), and an error of
    /// keeping them, if any (a results file that could not be written).
    fn finish(self: Box<Self>, skipped: Vec<SkippedMode>) -> (Document, Option<String>);
}

impl Recorder for Collect {
    fn finish(self: Box<Self>, skipped: Vec<SkippedMode>) -> (Document, Option<String>) {
        (Document::new(self.into_runs(), skipped), None)
    }
}

/// What an executing plan tells its caller.
pub trait PlanEvents: rounds::RoundEvents {
    /// Experiment `x` starts (or is skipped for its requirements).
    fn experiment(&self, _x: &Experiment) {}
    /// The recorder of `x`'s runs (in memory by default).
    fn recorder(&self, x: &Experiment) -> Box<dyn Recorder> {
        let limit = x
            .runs
            .first()
            .map_or(ipivmm_devices::budget::DEFAULT_BUDGET, |p| {
                p.config.guest_memory_budget
            });
        Box::new(Collect::new(limit))
    }
    /// Experiment `x` came out as `out` (its results, its verdicts).
    fn finished(&self, _x: &Experiment, _out: &ExperimentOutcome) {}
}

/// How to execute a plan.
#[derive(Clone, Default)]
pub struct Execution {
    /// Set (by a signal) to stop: no VM boots after it; the experiments
    /// not started are skips ("not run: cancelled").
    pub cancel: Arc<AtomicBool>,
}

/// A library caller that wants no events and keeps runs in memory.
struct Silent;

impl rounds::RoundEvents for Silent {}
impl PlanEvents for Silent {}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_host::facts::KvmBackend;

    #[test]
    fn an_experiment_the_host_cannot_have_is_a_skip_per_expectation() {
        let x = Experiment {
            requires: vec![Requirement::Avic],
            ..Experiment::new(
                "avic",
                Vec::new(),
                Repeats::Fixed(1),
                vec![
                    "exits_per_ipi < 2".parse().unwrap(),
                    "operations > 0".parse().unwrap(),
                ],
            )
        };
        let plan = Plan {
            name: "p".into(),
            about: String::new(),
            experiments: vec![x],
        };
        let pvm = HostInfo::synthetic(KvmBackend::KvmPvm, false);
        let out = plan.execute(Some(&pvm), &Execution::default());
        let v = out.verdicts();
        assert_eq!(v.counts(), (0, 0, 2));
        assert!(v.0[0].name.starts_with("avic: "));
        assert_eq!(v.exit_code(), 4);
    }
}
