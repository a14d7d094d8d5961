//! The lab's checks over ipivmm's results documents (`ipivmm.results/1`,
//! read with [`Document`]) that no plan states: what the runs' invariants
//! are, plans/lab-*.toml say in the expectation language, and the guest's
//! `ipivmm check` judges them (read back from its TAP by [`super::tap`]).
//! What stays here reads what an expectation cannot: the kernel's APICv
//! inhibit events against the host verdict, a host-parameter sweep's
//! settings read back, an exit flood's sampler accounting, and the pairs of
//! an overhead run. Each check yields one line per offence; none means it
//! passed.
use ipivmm::mode::apicv::ApicvState;
use ipivmm::results::metrics::Metric;
use ipivmm::results::{summary, Document, PhaseResult, RunReport, RunStatus};
use std::path::{Path, PathBuf};

/// One results file and its document.
pub struct RunsFile {
    /// Where it was read.
    pub path: PathBuf,
    /// The document.
    pub doc: Document,
}

impl RunsFile {
    /// Reads and parses `path`; the error is one line naming it.
    pub fn load(path: &Path) -> Result<Self, String> {
        let doc = Document::load(path).map_err(|e| e.to_string())?;
        Ok(Self {
            path: path.to_path_buf(),
            doc,
        })
    }

    /// The results file `path` whose text is `text` (tests: a document
    /// edited in memory).
    #[cfg(test)]
    pub fn from_json(path: &Path, text: &str) -> Result<Self, String> {
        let doc =
            Document::from_json(text, &path.display().to_string()).map_err(|e| e.to_string())?;
        Ok(Self {
            path: path.to_path_buf(),
            doc,
        })
    }

    /// The file's name, which prefixes its offences.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// A check over one results file.
pub type Check = fn(&RunsFile) -> Vec<String>;

/// The check over every run of the lab's plans (`runs/<step>/`) and its
/// host-parameter sweep, beside what the plans state.
pub const RUN_CHECK: (&str, Check) = (
    "APICv inhibit events agree with the host verdict",
    apicv_observed_mismatch,
);

/// `workload irqchip/apic/ipi apicv=request`, as every offence names a run.
pub fn label(r: &RunReport) -> String {
    format!(
        "{} {}/{}/{} apicv={}",
        r.mode.workload.name(),
        r.mode.irqchip.name(),
        r.mode.apic.name(),
        r.mode.ipi.name(),
        r.apicv.requested.name()
    )
}

/// The phases named `measure` of a vCPU.
pub(super) fn measured(phases: &[PhaseResult]) -> impl Iterator<Item = &PhaseResult> {
    phases.iter().filter(|p| p.name == "measure")
}

/// Every measured phase of a run with its vCPU's index.
fn measured_phases(r: &RunReport) -> impl Iterator<Item = (usize, &PhaseResult)> {
    r.vcpus
        .iter()
        .flat_map(|v| measured(&v.phases).map(move |p| (v.index, p)))
}

/// A figure, `-` where the phase lacks it.
pub(super) fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A run that did not complete.
fn failed_runs(f: &RunsFile) -> Vec<String> {
    f.doc
        .runs
        .iter()
        .filter(|r| r.status != RunStatus::Completed)
        .map(|r| {
            let why = match &r.status {
                RunStatus::Failed { reason } | RunStatus::OverBudget { reason, .. } => {
                    format!(" {reason}")
                }
                RunStatus::TimedOut { stuck, .. } => format!(" {stuck}"),
                RunStatus::Completed | RunStatus::Cancelled => String::new(),
            };
            format!("{}: {}{why}", label(r), r.status.name())
        })
        .collect()
}

/// The kernel's own inhibit events against the host verdict: without
/// APICv/AVIC every run is DISABLED from creation and no phase is active;
/// with it, an inhibit lever shows its reason set.
pub fn apicv_observed_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in &f.doc.runs {
        let Some(obs) = &r.apicv_observed else {
            out.push(format!("{}: no APICv inhibit events sampled", label(r)));
            continue;
        };
        if r.apicv.effective == ApicvState::Unavailable {
            if !obs.inhibits_at_end.iter().any(|i| i == "DISABLED") {
                out.push(format!(
                    "{}: APICv unavailable but not DISABLED at the end ({:?})",
                    label(r),
                    obs.inhibits_at_end
                ));
            }
            for p in r.vcpus.iter().flat_map(|v| &v.phases) {
                if p.apicv.as_ref().is_some_and(|a| a.active) {
                    out.push(format!(
                        "{} phase {}: APICv active without APICv",
                        label(r),
                        p.name
                    ));
                }
            }
        } else if let Some(lever) = obs.lever.as_ref().filter(|l| !l.observed) {
            out.push(format!("{}: lever {} never set", label(r), lever.reason));
        }
    }
    out
}

/// A module parameter's value as a truth value when it is one (`Y`/`1`, `N`/`0`).
fn truth(v: &str) -> Result<bool, &str> {
    match v {
        "Y" | "y" | "1" => Ok(true),
        "N" | "n" | "0" => Ok(false),
        other => Err(other),
    }
}

/// `sweep --host-param kvm_amd.npt=1,0`: both settings ran, every run
/// records the host as it was, and the parameter reads back as the stage asked.
pub fn host_param_sweep(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    let mut swept: Vec<Option<&str>> = f.doc.runs.iter().map(|r| r.host_param.as_deref()).collect();
    swept.sort();
    swept.dedup();
    if swept != [Some("kvm_amd.npt=0"), Some("kvm_amd.npt=1")] {
        out.push(format!("settings swept: {swept:?}"));
    }
    for r in &f.doc.runs {
        if r.host_settings.is_none() {
            out.push(format!("{}: no host_settings", label(r)));
        }
        let Some(hp) = &r.host_param else { continue };
        let Some((key, want)) = hp.split_once('=').filter(|(k, _)| k.contains('.')) else {
            out.push(format!(
                "{}: host_param {hp} is not module.param=value",
                label(r)
            ));
            continue;
        };
        let got = r
            .host_settings
            .as_ref()
            .and_then(|s| s.param(key))
            .unwrap_or("missing");
        if truth(want) != truth(got) {
            out.push(format!("{} under {hp}: reads back {got}", label(r)));
        }
    }
    out
}

/// An exit flood: what the sampler lost is reported (complete: false when
/// any), and its count plus what it missed is KVM's exits stat.
pub fn flood_lost_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in &f.doc.runs {
        for (i, p) in measured_phases(r) {
            let Some(e) = &p.exit_reasons else { continue };
            let missing = e.missing.unwrap_or(0);
            let kvm = p.kvm_stats.get("exits").copied();
            if ((e.lost > 0 || missing > 0) && e.complete) || kvm != Some(e.exits + missing) {
                out.push(format!(
                    "{} vcpu{i}: sampled {}, lost {}, missing {}, complete {}, KVM exits {}",
                    label(r),
                    e.exits,
                    e.lost,
                    opt(e.missing),
                    e.complete,
                    opt(kvm)
                ));
            }
        }
    }
    out
}

/// One line per vCPU: what the flood's sampler saw and lost.
pub fn flood_summary(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in &f.doc.runs {
        for (i, p) in measured_phases(r) {
            let Some(e) = &p.exit_reasons else { continue };
            out.push(format!(
                "vcpu{i}: {} exits, {} sampled, {} records reported lost, {} missing by KVM's stat, complete={}",
                opt(p.kvm_stats.get("exits").copied()),
                e.exits,
                e.lost,
                opt(e.missing),
                e.complete
            ));
        }
    }
    out
}

/// Overhead runs (`run --observer-effect`) that did not complete, and the
/// runs of their pairs that failed (ipivmm lists them and goes on).
pub fn overhead_failures(f: &RunsFile) -> Vec<String> {
    let mut out = failed_runs(f);
    for r in &f.doc.runs {
        let Some(o) = &r.observer_effect else {
            continue;
        };
        out.extend(
            o.failed
                .iter()
                .map(|e| format!("{} --exit-reasons {}: {e}", label(r), o.exit_reasons)),
        );
    }
    out
}

/// What counting cost in one overhead run, one line: mode, mechanism,
/// counted / detached p50, exits per operation (the counted run's measured
/// phase) and the host ns each exit gained, plus the runs of its pairs
/// that failed.
pub fn overhead_summary(f: &RunsFile) -> String {
    let Some(r) = f.doc.runs.first() else {
        return format!("{}: no runs", f.name());
    };
    let mode = format!("{} {}", r.mode.apic.name(), r.mode.target.name());
    let Some(o) = &r.observer_effect else {
        return format!("{mode}: no observer effect (run {})", r.status.name());
    };
    let exits = Metric::ExitsPerOp
        .value(&summary::summarize(r))
        .unwrap_or(0.0);
    let gained_ns = (o.with_counters_p50 - o.without_counters_p50) * 1e6 / r.tsc_khz.max(1) as f64;
    let per_exit = if exits > 0.0 {
        format!("{}", (gained_ns / exits).round())
    } else {
        "-".into()
    };
    let failed = if o.failed.is_empty() {
        String::new()
    } else {
        format!("; failed: {}", o.failed.join("; "))
    };
    format!(
        "{mode} exit reasons {}: p50 {} vs {} cycles detached, ratio {} ({} pairs), {} exits per {}, {per_exit} ns more per exit{failed}",
        o.exit_reasons,
        o.with_counters_p50.floor(),
        o.without_counters_p50.floor(),
        (o.ratio * 1000.0).round() / 1000.0,
        o.pairs,
        (exits * 100.0).round() / 100.0,
        r.mode.workload.operation(),
    )
}

#[cfg(test)]
mod tests {
    /// The phase field (and counter source) of exits by reason.
    const EXIT_REASONS: &str = ipivmm::results::source::Source::ExitReasons.key();
    use super::*;
    use serde_json::Value;

    const SWEEP: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/lab-quick/runs/sweep.json"
    );

    /// The fixture sweep, edited by `edit` (its JSON), as a results file.
    fn edited(edit: impl FnOnce(&mut Value)) -> RunsFile {
        edited_file(SWEEP, edit)
    }

    fn overhead_path(how: &str) -> String {
        format!(
            "{}/fixtures/overhead/overhead-x2apic-halt-{how}.json",
            env!("CARGO_MANIFEST_DIR")
        )
    }

    /// The results file `path`, edited by `edit` (its JSON).
    fn edited_file(path: &str, edit: impl FnOnce(&mut Value)) -> RunsFile {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        edit(&mut v);
        RunsFile::from_json(Path::new("edited.json"), &v.to_string()).unwrap()
    }

    /// runs[run].vcpus[vcpu]'s measure phase.
    fn measure(v: &mut Value, run: usize, vcpu: usize) -> &mut Value {
        v["runs"][run]["vcpus"][vcpu]["phases"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["name"] == "measure")
            .unwrap()
    }

    #[test]
    fn a_real_pass_passes_every_check() {
        let f = RunsFile::load(Path::new(SWEEP)).unwrap();
        assert_eq!(f.doc.runs.len(), 4);
        assert_eq!(apicv_observed_mismatch(&f), Vec::<String>::new());
        assert_eq!(
            label(&f.doc.runs[0]),
            "pingpong kernel/x2apic/icr apicv=host"
        );
        assert_eq!(
            overhead_summary(&f),
            "x2apic spin: no observer effect (run completed)"
        );
    }

    fn overhead(how: &str) -> RunsFile {
        RunsFile::load(Path::new(&overhead_path(how))).unwrap()
    }

    #[test]
    fn the_cost_of_counting_and_its_failed_pairs() {
        // What checks.jq's overhead_summary printed for the same files.
        let bpf = overhead("bpf");
        assert_eq!(
            overhead_summary(&bpf),
            "x2apic halt exit reasons bpf: p50 949474 vs 564999 cycles detached, ratio 1.68 (4 pairs), 3.45 exits per round trip, 53026 ns more per exit"
        );
        assert!(overhead_failures(&bpf).is_empty());
        let off = overhead("off");
        let line = overhead_summary(&off);
        assert!(
            line.starts_with("x2apic halt exit reasons off: p50 1091520 vs 783120 cycles detached, ratio 1.394 (3 pairs), 3.25 exits per round trip, 45204 ns more per exit; failed: pair 2, counted: failed: vcpu1: payload panic: "),
            "{line}"
        );
        let failed = overhead_failures(&off);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(
            failed[0].starts_with(
                "pingpong kernel/x2apic/icr apicv=host --exit-reasons off: pair 2, counted: failed: vcpu1: payload panic"
            ),
            "{failed:?}"
        );
        // The measured run itself failing is an offence too.
        let f = edited_file(&overhead_path("bpf"), |v| {
            v["runs"][0]["status"] =
                serde_json::json!({"state": "failed", "reason": "vcpu1: fault"})
        });
        assert_eq!(
            overhead_failures(&f),
            ["pingpong kernel/x2apic/icr apicv=host: failed vcpu1: fault"]
        );
        // A run that measured no observer effect says so.
        let f = edited_file(&overhead_path("bpf"), |v| {
            v["runs"][0]
                .as_object_mut()
                .unwrap()
                .remove("observer_effect");
        });
        assert_eq!(
            overhead_summary(&f),
            "x2apic halt: no observer effect (run completed)"
        );
    }

    #[test]
    fn the_kernels_inhibit_events_are_checked_against_the_host_verdict() {
        // Without AVIC every run is DISABLED at its end, and no phase ran
        // with APICv; the lever of an inhibit run was seen.
        assert!(apicv_observed_mismatch(&edited(|_| {})).is_empty());
        let none = edited(|v| {
            v["runs"][2]
                .as_object_mut()
                .unwrap()
                .remove("apicv_observed");
        });
        assert_eq!(
            apicv_observed_mismatch(&none),
            ["broadcast user/xapic/icr apicv=host: no APICv inhibit events sampled"]
        );
        let enabled = edited(|v| {
            v["runs"][3]["apicv_observed"]["inhibits_at_end"] = serde_json::json!(["ABSENT"])
        });
        assert_eq!(apicv_observed_mismatch(&enabled).len(), 1);
        let active = edited(|v| measure(v, 0, 1)["apicv"]["active"] = true.into());
        assert_eq!(
            apicv_observed_mismatch(&active),
            ["pingpong kernel/x2apic/icr apicv=host phase measure: APICv active without APICv"]
        );
    }

    #[test]
    fn host_param_sweeps_read_back_as_asked() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/lab-quick/runs/sweep-hostparam.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let dir = std::env::temp_dir().join(format!("xtask-hp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |v: &Value| {
            let p = dir.join("hp.json");
            std::fs::write(&p, v.to_string()).unwrap();
            RunsFile::load(&p).unwrap()
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(host_param_sweep(&load(&v)).is_empty());
        let mut flipped = v.clone();
        flipped["runs"][1]["host_settings"]["params"]["kvm_amd"]["npt"] = "Y".into();
        assert_eq!(
            host_param_sweep(&load(&flipped)),
            ["pingpong kernel/x2apic/icr apicv=host under kvm_amd.npt=0: reads back Y"]
        );
        let mut one = v.clone();
        one["runs"][1]["host_param"] = "kvm_amd.npt=1".into();
        let out = host_param_sweep(&load(&one));
        assert!(
            out[0].starts_with("settings swept: [Some(\"kvm_amd.npt=1\")]"),
            "{out:?}"
        );
        let mut none = v;
        none["runs"][0]
            .as_object_mut()
            .unwrap()
            .remove("host_settings");
        assert_eq!(
            host_param_sweep(&load(&none)).len(),
            2,
            "no host_settings, no read-back"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_flood_reports_what_it_lost() {
        let f = RunsFile::load(Path::new(SWEEP)).unwrap();
        assert!(flood_lost_mismatch(&f).is_empty());
        assert_eq!(
            flood_summary(&f)[..2],
            [
                "vcpu0: 88 exits, 88 sampled, 0 records reported lost, 0 missing by KVM's stat, complete=true",
                "vcpu1: 83 exits, 83 sampled, 0 records reported lost, 0 missing by KVM's stat, complete=true"
            ]
        );
        let lost_but_complete = edited(|v| measure(v, 0, 0)[EXIT_REASONS]["lost"] = 3.into());
        assert_eq!(flood_lost_mismatch(&lost_but_complete).len(), 1);
        let undercounted = edited(|v| measure(v, 0, 0)[EXIT_REASONS]["missing"] = 1.into());
        assert_eq!(flood_lost_mismatch(&undercounted).len(), 1);
    }
}
