//! Plans, the part that needs no VM: what a host must have for an
//! experiment ([`Requirement`]), why one cannot run ([`NotRun`]), how an
//! experiment and a plan came out ([`ExperimentOutcome`], [`PlanOutcome`]),
//! an experiment judged without running anything ([`ExperimentOutcome::settle`]), and the
//! plan file (`plans/*.toml`: [`file`](mod@file)), whose recorded experiments
//! [`file::PlanFile::judge_recorded`] judges with this crate alone. Running a plan's
//! VMs is the machine's (`ipivmm::plan::Plan::execute`).
use crate::expect::{Expectation, Outcome, Verdict, Verdicts};
use crate::results::Document;
use ipivmm_host::facts::{ApicvSupport, HostInfo, KvmBackend};
use ipivmm_host::lab::Hardware;

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

/// Every expectation of `expect` with the same `outcome`.
pub(crate) fn all(expect: &[Expectation], outcome: Outcome) -> Vec<Verdict> {
    expect
        .iter()
        .map(|e| Verdict {
            name: e.text.clone(),
            outcome: outcome.clone(),
        })
        .collect()
}

impl ExperimentOutcome {
    /// Experiment `name` as it comes out without running anything, if it
    /// does: a skip per expectation for what `host` lacks of `requires` (None:
    /// not probed, every requirement unmet), for `not_run` or when
    /// `cancelled`; a failure per expectation for a plan error; its
    /// `recorded` results judged. None: its runs must run.
    pub fn settle(
        name: &str,
        expect: &[Expectation],
        requires: &[Requirement],
        not_run: Option<&NotRun>,
        recorded: Option<&Document>,
        host: Option<&HostInfo>,
        cancelled: bool,
    ) -> Option<ExperimentOutcome> {
        let missing: Vec<String> = requires.iter().filter_map(|r| r.unmet(host)).collect();
        let skip = |why: String| ExperimentOutcome {
            name: name.to_string(),
            doc: None,
            verdicts: all(expect, Outcome::Skip(why)),
            error: None,
        };
        match (not_run, cancelled) {
            _ if !missing.is_empty() => Some(skip(missing.join("; "))),
            (Some(NotRun::Host(why)), _) => Some(skip(format!("could not run here: {why}"))),
            (Some(NotRun::Plan(why)), _) => Some(ExperimentOutcome {
                verdicts: all(expect, Outcome::Fail(format!("plan error, not run: {why}"))),
                ..skip(String::new())
            }),
            (None, true) => Some(skip("not run: cancelled".into())),
            (None, false) => recorded.map(|doc| ExperimentOutcome {
                name: name.to_string(),
                verdicts: Verdicts::of(doc, expect).0,
                doc: None,
                error: None,
            }),
        }
    }
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
        let expect: Vec<Expectation> = vec![
            "exits_per_ipi < 2".parse().unwrap(),
            "operations > 0".parse().unwrap(),
        ];
        let pvm = HostInfo::synthetic(KvmBackend::KvmPvm, false);
        let out = ExperimentOutcome::settle(
            "avic",
            &expect,
            &[Requirement::Avic],
            None,
            None,
            Some(&pvm),
            false,
        )
        .expect("a skip, not a run");
        assert_eq!(out.verdicts.len(), 2);
        assert!(out
            .verdicts
            .iter()
            .all(|v| matches!(v.outcome, Outcome::Skip(_))));
        // Nothing stops an experiment without requirements: it must run.
        assert!(
            ExperimentOutcome::settle("avic", &expect, &[], None, None, Some(&pvm), false)
                .is_none()
        );
    }
}
