//! A plan as engine data: named experiments, each a set of configurations
//! to run (one for a run, many for a sweep) with its repeats, what the host
//! must have, and the expectations that must hold — what `ipivmm check
//! PLAN.toml` reads from TOML, and what a library user builds in Rust and
//! [`execute`]s with the engine alone:
//!
//! ```no_run
//! use ipivmm::experiment::rounds::{Planned, Repeats};
//! use ipivmm::mode::ApicMode;
//! use ipivmm::plan::{execute, Experiment, Plan};
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
//! let outcome = execute(&plan, ipivmm::host::probe().ok().as_ref(), &Default::default());
//! assert_eq!(outcome.verdicts().exit_code(), 0);
//! ```
use crate::expect::{evaluate, Expectation, Outcome, Verdict, Verdicts};
use crate::experiment::rounds::{self, run_rounds, Collect, Keep, Options, Planned, Repeats};
use crate::results::{Document, PresetReport, SkippedMode};
use ipivmm_host::facts::{ApicvSupport, HostInfo, KvmBackend};
use ipivmm_host::lab::Hardware;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub mod file;

/// What a host must have for an experiment to mean anything.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::Display, strum::EnumString, strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Requirement {
    /// Intel APICv available.
    Apicv,
    /// Intel IPI virtualization.
    Ipiv,
    /// AMD AVIC.
    Avic,
    /// AMD x2AVIC.
    X2avic,
    /// APICv or AVIC.
    ApicvOrAvic,
    /// A hardware KVM (kvm_intel or kvm_amd).
    HardwareKvm,
    /// Two CPU sockets among the CPUs this process may run on.
    TwoSockets,
}

impl Requirement {
    /// Every requirement.
    pub const ALL: &'static [Requirement] = <Requirement as strum::VariantArray>::VARIANTS;

    /// What it is, for where it is answered ([`Hardware::where_answered`]).
    pub fn hardware(self) -> Hardware {
        match self {
            Requirement::Apicv => Hardware::Apicv,
            Requirement::Ipiv => Hardware::Ipiv,
            Requirement::Avic => Hardware::Avic,
            Requirement::X2avic => Hardware::X2avic,
            Requirement::ApicvOrAvic => Hardware::ApicvOrAvic,
            Requirement::HardwareKvm => Hardware::HardwareKvm,
            Requirement::TwoSockets => Hardware::TwoSockets,
        }
    }

    /// What `host` lacks of it (None: not probed), if anything, and where
    /// it is answered instead.
    pub fn unmet(self, host: Option<&HostInfo>) -> Option<String> {
        self.lacking(host)
            .map(|why| format!("{why}; {}", self.hardware().where_answered()))
    }

    fn lacking(self, host: Option<&HostInfo>) -> Option<String> {
        let need = self.to_string();
        let verdict = |pick: fn(&ipivmm_host::facts::ApicvVerdicts) -> &ApicvSupport| match host
            .map(|h| pick(&h.verdicts))
        {
            Some(ApicvSupport::Available) => None,
            Some(ApicvSupport::Unavailable(why)) => Some(format!("needs {need}: {why}")),
            None => Some(format!("needs {need}: the host facts could not be read")),
        };
        match self {
            Requirement::Apicv => verdict(|v| &v.apicv),
            Requirement::Ipiv => verdict(|v| &v.ipiv),
            Requirement::Avic => verdict(|v| &v.avic),
            Requirement::X2avic => verdict(|v| &v.x2avic),
            Requirement::ApicvOrAvic => verdict(|v| &v.apicv).and(verdict(|v| &v.avic)),
            Requirement::HardwareKvm => match host.map(|h| &h.backend) {
                Some(KvmBackend::KvmIntel | KvmBackend::KvmAmd) => None,
                Some(b) => Some(format!(
                    "needs a hardware KVM (kvm_intel or kvm_amd); this is {b}"
                )),
                None => Some("needs a hardware KVM: the host facts could not be read".into()),
            },
            Requirement::TwoSockets => {
                let n = sockets(std::path::Path::new("/sys/devices/system/cpu"));
                (n < 2).then(|| format!("needs two sockets; this host has {n}"))
            }
        }
    }
}

/// Sockets among the CPUs this process may run on.
fn sockets(root: &std::path::Path) -> usize {
    let mut packages: Vec<i64> = crate::mode::levers::allowed_cpus()
        .iter()
        .map(|cpu| {
            std::fs::read_to_string(root.join(format!("cpu{cpu}/topology/physical_package_id")))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect();
    packages.sort_unstable();
    packages.dedup();
    packages.len()
}

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

/// Why an experiment cannot run, found before any VM (a configuration
/// checked when the plan was built).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotRun {
    /// This host cannot run it (no /dev/kvm, a mode it lacks): every
    /// expectation a skip, `could not run here: WHY`.
    Host(String),
    /// The plan asks for what no host runs (a payload that cannot be
    /// read): every expectation a failure, `plan error, not run: WHY`;
    /// an error in a plan never reads as a skip.
    Plan(String),
}

impl Experiment {
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

/// One experiment as it came out.
#[derive(Clone, Debug)]
pub struct ExperimentOutcome {
    /// Its name.
    pub name: String,
    /// Its results, when it ran.
    pub doc: Option<Document>,
    /// Its verdicts (named without the experiment's prefix).
    pub verdicts: Vec<Verdict>,
    /// An error of keeping its results (the caller's recorder's).
    pub error: Option<String>,
}

/// A plan as it came out.
#[derive(Clone, Debug, Default)]
pub struct PlanOutcome {
    /// Every experiment, in order.
    pub experiments: Vec<ExperimentOutcome>,
}

impl PlanOutcome {
    /// Every verdict, named `EXPERIMENT: EXPR`.
    pub fn verdicts(&self) -> Verdicts {
        Verdicts(
            self.experiments
                .iter()
                .flat_map(|x| {
                    x.verdicts.iter().map(move |v| Verdict {
                        name: format!("{}: {}", x.name, v.name),
                        outcome: v.outcome.clone(),
                    })
                })
                .collect(),
        )
    }
}

fn all(x: &Experiment, outcome: Outcome) -> Vec<Verdict> {
    x.expect
        .iter()
        .map(|e| Verdict {
            name: e.text.clone(),
            outcome: outcome.clone(),
        })
        .collect()
}

/// A library caller that wants no events and keeps runs in memory.
struct Silent;

impl rounds::RoundEvents for Silent {}
impl PlanEvents for Silent {}

/// Executes `plan` on `host` (None: not probed; requirements then unmet)
/// with no events, runs kept in memory.
pub fn execute(plan: &Plan, host: Option<&HostInfo>, how: &Execution) -> PlanOutcome {
    execute_with(plan, host, how, &Silent)
}

/// [`execute`], telling `events` and recording through it.
pub fn execute_with(
    plan: &Plan,
    host: Option<&HostInfo>,
    how: &Execution,
    events: &dyn PlanEvents,
) -> PlanOutcome {
    let mut out = PlanOutcome::default();
    for x in &plan.experiments {
        events.experiment(x);
        let missing: Vec<String> = x.requires.iter().filter_map(|r| r.unmet(host)).collect();
        let skip = |why: String| ExperimentOutcome {
            name: x.name.clone(),
            doc: None,
            verdicts: all(x, Outcome::Skip(why)),
            error: None,
        };
        let not_run = match (&x.not_run, how.cancel.load(Ordering::SeqCst)) {
            _ if !missing.is_empty() => Some(skip(missing.join("; "))),
            (Some(NotRun::Host(why)), _) => Some(skip(format!("could not run here: {why}"))),
            (Some(NotRun::Plan(why)), _) => Some(ExperimentOutcome {
                verdicts: all(x, Outcome::Fail(format!("plan error, not run: {why}"))),
                ..skip(String::new())
            }),
            (None, true) => Some(skip("not run: cancelled".into())),
            (None, false) => x.recorded.as_ref().map(|doc| ExperimentOutcome {
                name: x.name.clone(),
                verdicts: evaluate(doc, &x.expect).0,
                doc: None,
                error: None,
            }),
        };
        let outcome = not_run.unwrap_or_else(|| {
            let recorder = events.recorder(x);
            let mut skipped = x.skipped.clone();
            let mut opts = Options::new(x.repeats, how.cancel.clone());
            opts.observer_pairs = x.observer_pairs;
            run_rounds(&x.runs, &mut skipped, &opts, recorder.as_ref(), events);
            let (mut doc, error) = recorder.finish(skipped);
            doc.preset = x.preset.clone();
            ExperimentOutcome {
                name: x.name.clone(),
                verdicts: evaluate(&doc, &x.expect).0,
                doc: Some(doc),
                error,
            }
        });
        events.finished(x, &outcome);
        out.experiments.push(outcome);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_parse_and_say_what_is_missing() {
        for r in Requirement::ALL {
            assert_eq!(r.to_string().parse::<Requirement>().unwrap(), *r);
        }
        assert!("apicv-or-avic".parse::<Requirement>().is_ok());
        assert!("warp-drive".parse::<Requirement>().is_err());
        let pvm = HostInfo::synthetic(KvmBackend::KvmPvm, false);
        assert!(Requirement::HardwareKvm
            .unmet(Some(&pvm))
            .unwrap()
            .contains("kvm_pvm"));
        assert!(Requirement::Ipiv
            .unmet(None)
            .unwrap()
            .contains("could not be read"));
        // Issue 50: every skip names where its question is answered.
        // (Two sockets are read from this machine's /sys: met on some.)
        for r in Requirement::ALL {
            if let Some(why) = r.unmet(Some(&pvm)) {
                assert!(why.ends_with(&r.hardware().where_answered()), "{r}: {why}");
            } else {
                assert_eq!(*r, Requirement::TwoSockets);
            }
        }
    }

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
        let out = execute(&plan, Some(&pvm), &Execution::default());
        let v = out.verdicts();
        assert_eq!(v.counts(), (0, 0, 2));
        assert!(v.0[0].name.starts_with("avic: "));
        assert_eq!(v.exit_code(), 4);
    }
}
