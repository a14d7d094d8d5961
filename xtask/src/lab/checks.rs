//! The lab's checks over ipivmm's results documents (`ipivmm.results/1`),
//! read with ipivmm's own types ([`Document`]) and its headline metrics
//! recomputed with [`summary::summarize`] and [`RunMetrics`]. Each check
//! yields one line per offence; none means it passed.
use ipivmm::mode::apicv::ApicvState;
use ipivmm::results::metrics::{Metric, RunMetrics};
use ipivmm::results::{summary, Document, PhaseResult, RunReport, RunStatus};
use ipivmm::Workload;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One results file: its document and the `metrics` objects it recorded
/// (written from the runs' counters; the document's types never read them
/// back, so they are kept here as written).
pub struct RunsFile {
    /// Where it was read.
    pub path: PathBuf,
    /// The document.
    pub doc: Document,
    /// `runs[i].metrics` as recorded (None: absent).
    pub recorded: Vec<Option<Value>>,
}

impl RunsFile {
    /// Reads and parses `path`; the error is one line naming it.
    pub fn load(path: &Path) -> Result<Self, String> {
        let doc = Document::load(path).map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::with(path, doc, &text)
    }

    /// The results file `path` whose text is `text` (tests: a document
    /// edited in memory).
    #[cfg(test)]
    pub fn from_json(path: &Path, text: &str) -> Result<Self, String> {
        let doc =
            Document::from_json(text, &path.display().to_string()).map_err(|e| e.to_string())?;
        Self::with(path, doc, text)
    }

    /// `doc` with the metrics its text `text` recorded.
    fn with(path: &Path, doc: Document, text: &str) -> Result<Self, String> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| format!("{}: {e}", path.display()))?;
        let recorded = value
            .get("runs")
            .and_then(Value::as_array)
            .map(|runs| runs.iter().map(|r| r.get("metrics").cloned()).collect())
            .unwrap_or_default();
        Ok(Self {
            path: path.to_path_buf(),
            doc,
            recorded,
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

/// The runs a check is about. A check whose scope holds for no run of its
/// files has nothing to check: its verdict is a SKIP saying so, never a
/// PASS (an offence it finds all the same still fails it).
pub type Scope = fn(&RunReport) -> bool;

/// Every run.
pub fn every_run(_: &RunReport) -> bool {
    true
}

/// Runs on the ICR path.
pub fn icr_runs(r: &RunReport) -> bool {
    r.mode.ipi.writes_icr()
}

/// Runs on the PV path.
pub fn pv_runs(r: &RunReport) -> bool {
    r.mode.ipi.is_hypercall()
}

/// Runs whose IPIs must all arrive (a flood's may coalesce).
pub fn not_flood(r: &RunReport) -> bool {
    r.mode.workload != Workload::Flood
}

/// ICR runs whose effective APICv state is not active (where no ICR write
/// can be accelerated).
pub fn icr_without_apicv(r: &RunReport) -> bool {
    icr_runs(r) && r.apicv.effective != ApicvState::Active
}

/// The checks over every run of the lab's plans (`runs/<step>/`) and its
/// other sweeps: name, check, scope. What the expectation language can
/// state is in the plans themselves (plans/lab-*.toml, read back from their
/// TAP by [`super::tap`]): every IPI delivered, IPIs per operation =
/// fan-out, ICR-write exits per operation 1 without an in-kernel LAPIC or
/// with APICv inhibited, 0 on PV. What is left here the plans cannot say:
/// a skip's reason against the lab's list, one source against another
/// (per vCPU: guest writes vs host exits, hypercalls vs hypercall exits;
/// sampled vs stat), recorded figures against the counters, the kernel's
/// inhibit events against the host verdict, and what depends on the run's
/// effective APICv state (a scope names only the APICv *request*). Exits
/// per operation = exits per IPI x the fan-out is how `results::summary`
/// defines exits per operation: with IPIs per operation = fan-out (the
/// plans) it holds by construction, so no check restates it.
pub const RUN_CHECKS: &[(&str, Check, Scope)] = &[
    ("every run of every sweep completed", failed_runs, every_run),
    ("nothing skipped that this host can run", unexpected_skips, every_run),
    (
        "exits counted by reason (kvm_exit) per vCPU and phase",
        missing_exit_reasons,
        every_run,
    ),
    (
        "exits by reason (bpf, sampled) == kvm_exit counter == KVM exits stat",
        sampled_exit_mismatch,
        every_run,
    ),
    (
        "ICR-write exits == ICR writes on every sender (icr, no APICv; with IPIv only the shorthand writes)",
        icr_exit_mismatch,
        icr_runs,
    ),
    (
        "PV: hypercall exits == hypercalls, 0 ICR-write exits, none counted accelerated",
        pv_mismatch,
        pv_runs,
    ),
    (
        "ICR-write exits per operation 1 where APICv was not in effect",
        icr_exits_without_apicv,
        icr_without_apicv,
    ),
    (
        "recorded metrics (runs[].metrics) are what the runs' counters give",
        recorded_metrics_mismatch,
        every_run,
    ),
    (
        "APICv inhibit events agree with the host verdict",
        apicv_observed_mismatch,
        every_run,
    ),
];

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

/// The IPIs one operation of a run must deliver, from the workload's one
/// description (`ipivmm_abi::Workload::spec`, [`ipivmm::results::RunConfig::fan_out`]),
/// for the workloads whose ICR writes per operation the lab knows too (a
/// round trip, a broadcast: one each); None for the others.
pub fn fan_out(r: &RunReport) -> Option<f64> {
    matches!(r.mode.workload, Workload::Pingpong | Workload::Broadcast)
        .then(|| r.mode.fan_out())
        .flatten()
        .map(|k| k as f64)
}

/// A run that did not complete.
pub fn failed_runs(f: &RunsFile) -> Vec<String> {
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

/// Why a combination may be skipped: no KVM can run it, or a host without
/// APICv makes it identical to another (the reasons of `mode::check` and
/// the sweep's duplicate rule).
const ALLOWED_SKIPS: &[&str] = &[
    "LAPIC in KVM",
    "needs an in-kernel PIT",
    "already inhibited",
    "needs at least",
    "identical to",
    // More spinning vCPUs than the guest's 2 CPUs: the row would time out,
    // not measure (a preset's large rows; the AVIC pass runs 4 and 8 with
    // --force).
    "waits for its target's time slice",
];

/// A skipped combination this host could have run.
pub fn unexpected_skips(f: &RunsFile) -> Vec<String> {
    f.doc
        .skipped
        .iter()
        .filter(|s| !ALLOWED_SKIPS.iter().any(|a| s.reason.contains(a)))
        .map(|s| format!("{}: {}", s.mode, s.reason))
        .collect()
}

/// A measured phase of a vCPU without any exit counted by reason.
pub fn missing_exit_reasons(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in &f.doc.runs {
        for (i, p) in measured_phases(r) {
            if p.exits_by_reason().values().sum::<u64>() == 0 {
                out.push(format!(
                    "{} vcpu{i} phase {}: no kvm_exit reason counted",
                    label(r),
                    p.name
                ));
            }
        }
    }
    out
}

/// Exits counted by reason (`--exit-reasons bpf` in the kernel or the
/// sampler, with what it lost), the kvm_exit counter (where one ran) and
/// KVM's exits stat over the same window disagree.
pub fn sampled_exit_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in &f.doc.runs {
        for (i, p) in measured_phases(r) {
            let Some(e) = &p.exit_reasons else { continue };
            let sampled = e.exits + e.lost;
            let kvm = p.kvm_stats.get("exits").copied();
            let counter = p.tracepoints.get("kvm_exit").copied();
            if kvm != Some(sampled) || counter.unwrap_or(sampled) != sampled {
                out.push(format!(
                    "{} vcpu{i}: sampled {} (+{} lost), kvm_exit {}, KVM exits {}",
                    label(r),
                    e.exits,
                    e.lost,
                    opt(counter),
                    opt(kvm)
                ));
            }
        }
    }
    out
}

/// A figure, `-` where the phase lacks it.
pub(super) fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// Whether IPI virtualization was in effect for a run: kvm_intel with IPIv
/// available and APICv active. A fixed physical unicast ICR write then
/// takes no exit; every shorthand write (the broadcast workload, the
/// halting barriers' wake-ups) still does.
fn ipiv_in_effect(r: &RunReport) -> bool {
    r.apicv.effective == ApicvState::Active
        && r.host_settings.as_ref().is_some_and(|h| {
            h.backend == ipivmm::KvmBackend::KvmIntel && h.verdicts.ipiv.is_available()
        })
}

/// A sender on the ICR path whose ICR-write exits differ from its ICR
/// writes (halting barriers' included); with IPIv, from the writes that
/// still exit (unicast workloads: the barriers' only; broadcast: all).
pub fn icr_exit_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| r.mode.ipi.writes_icr()) {
        let ipiv = ipiv_in_effect(r);
        for (i, p) in measured_phases(r) {
            let writes = p.guest.all_icr_writes();
            let want = match (ipiv, r.mode.workload) {
                (false, _) | (true, Workload::Broadcast) => writes,
                (true, Workload::Pingpong) => p.guest.barrier_icr_writes,
                (true, _) => continue,
            };
            let exits = p.icr_write_exits.as_ref();
            if p.guest.icr_writes > 0 && exits.map(|e| e.exits) != Some(want) {
                out.push(format!(
                    "{} vcpu{i}: {writes} ICR writes (halting barriers included), {} ICR-write exits ({}), want {want}{}",
                    label(r),
                    exits.map_or_else(|| "no".into(), |e| e.exits.to_string()),
                    exits.map_or("-", |e| e.source.as_str()),
                    if ipiv { " (IPIv)" } else { "" }
                ));
            }
        }
    }
    out
}

/// A PV sender whose hypercall exits differ from its hypercalls, or that
/// shows ICR-write exits or accelerated ICR writes.
pub fn pv_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| r.mode.ipi.is_hypercall()) {
        for (i, p) in measured_phases(r).filter(|(_, p)| p.guest.hypercalls > 0) {
            let by = p.exits_by_reason();
            let hc: u64 = ["hypercall", "VMCALL"]
                .iter()
                .filter_map(|k| by.get(*k))
                .sum();
            let icr = p.icr_write_exits.as_ref();
            let (exits, accelerated) = (icr.map(|e| e.exits), icr.map(|e| e.accelerated));
            if hc != p.guest.hypercalls || exits.unwrap_or(0) != 0 || accelerated.unwrap_or(0) != 0
            {
                out.push(format!(
                    "{} vcpu{i}: {} hypercalls, {hc} hypercall exits, ICR-write exits {}, accelerated {}",
                    label(r),
                    p.guest.hypercalls,
                    opt(exits),
                    opt(accelerated)
                ));
            }
        }
    }
    out
}

/// IPIs sent that were not delivered (a flood's may coalesce in the IRR by
/// design; every other workload delivers each one). The lab's plans state
/// it (`ipis_delivered == ipis_sent`); the AVIC pass's runs, which no plan
/// runs (scripts/lab/probe-avic.sh), are checked with it.
pub fn lost_ipis(f: &RunsFile) -> Vec<String> {
    f.doc
        .runs
        .iter()
        .filter(|r| r.mode.workload != Workload::Flood)
        .filter_map(|r| {
            let phases = r.vcpus.iter().flat_map(|v| &v.phases);
            let (sent, recv) = phases.fold((0u64, 0u64), |(s, d), p| {
                (s + p.guest.ipis_sent, d + p.guest.ipis_received)
            });
            (sent != recv).then(|| format!("{}: {sent} IPIs sent, {recv} received", label(r)))
        })
        .collect()
}

/// A completed round trip or broadcast on the ICR path, APICv not in
/// effect, whose ICR-write exits per operation (recomputed from its
/// counters) are not 1 (a figure the run lacks is an offence too). The
/// plans state it where the label says no APICv can be in effect (user
/// irqchip, `apicv-inhibit`); a scope cannot name the effective state of a
/// run that asked for APICv as the host has it, so the rest is checked here.
pub fn icr_exits_without_apicv(f: &RunsFile) -> Vec<String> {
    f.doc
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Completed && icr_without_apicv(r))
        .filter(|r| fan_out(r).is_some())
        .filter_map(|r| {
            let s = summary::summarize(r);
            let icr = Metric::IcrExitsPerOp.value(&s);
            icr.is_none_or(|v| (v - 1.0).abs() > 1e-9).then(|| {
                format!(
                    "{}: {} ICR-write exits per {} (want 1)",
                    label(r),
                    icr.map_or_else(|| "no".into(), |v| v.to_string()),
                    s.operation
                )
            })
        })
        .collect()
}

/// Whether two recorded JSON values agree (numbers to 1e-9 relative).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
            _ => x == y,
        },
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// A run whose recorded `metrics` object is not what its counters give
/// (the file was edited, or written by an ipivmm that derives them
/// otherwise): a recorded figure that differs, or one the counters do not
/// give. A figure the record lacks is not an offence (an older ipivmm
/// wrote fewer; the lab's own runs are written by the ipivmm it built).
pub fn recorded_metrics_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    if f.recorded.len() != f.doc.runs.len() {
        out.push(format!(
            "{} runs, {} recorded metrics objects",
            f.doc.runs.len(),
            f.recorded.len()
        ));
    }
    for (r, rec) in f.doc.runs.iter().zip(&f.recorded) {
        let want =
            serde_json::to_value(RunMetrics::of(&summary::summarize(r))).unwrap_or(Value::Null);
        let Some(rec) = rec else {
            out.push(format!("{}: no metrics recorded", label(r)));
            continue;
        };
        let (Value::Object(w), Value::Object(g)) = (&want, rec) else {
            out.push(format!("{}: metrics recorded as {rec}", label(r)));
            continue;
        };
        let diffs: Vec<String> = g
            .iter()
            .filter(|(k, v)| !w.get(*k).is_some_and(|want| same(want, v)))
            .map(|(k, v)| {
                let want = w.get(k).map_or_else(|| "nothing".into(), Value::to_string);
                format!("{k} recorded {v}, counters give {want}")
            })
            .collect();
        if !diffs.is_empty() {
            out.push(format!("{}: {}", label(r), diffs.join("; ")));
        }
    }
    out
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

    /// The names of the checks of [`RUN_CHECKS`] that `f` fails.
    fn failing(f: &RunsFile) -> Vec<&'static str> {
        RUN_CHECKS
            .iter()
            .filter(|(_, c, _)| !c(f).is_empty())
            .map(|(n, _, _)| *n)
            .collect()
    }

    /// Asserts that `f` fails exactly the checks `want`.
    fn fails_exactly(f: &RunsFile, want: &[Check], case: &str) {
        for c in want {
            assert!(!c(f).is_empty(), "{case}: a check passed: {:?}", failing(f));
        }
        assert_eq!(failing(f).len(), want.len(), "{case}: {:?}", failing(f));
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
        assert!(failing(&f).is_empty(), "{:?}", failing(&f));
        assert_eq!(
            label(&f.doc.runs[0]),
            "pingpong kernel/x2apic/icr apicv=host"
        );
        assert_eq!(
            overhead_summary(&f),
            "x2apic spin: no observer effect (run completed)"
        );
    }

    /// A real overhead step's results (kvm_amd under QEMU TCG, branch `bpf`
    /// at 02ab4e0): x2APIC ping-pong to a halted target counted by BPF and
    /// with counting off, each against detached runs; the second counted
    /// run of the `off` file's pairs hit the STI-shadow panic since fixed.
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
        assert!(sampled_exit_mismatch(&bpf).is_empty());
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
        // Counted by BPF, one exit more than KVM's stat.
        let f = edited_file(&overhead_path("bpf"), |v| {
            let e = &mut measure(v, 0, 0)[EXIT_REASONS]["exits"];
            *e = (e.as_u64().unwrap() + 1).into();
        });
        assert_eq!(sampled_exit_mismatch(&f).len(), 1);
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
    fn the_tampered_file_fails() {
        // The receiver of the first run counted one IPI less than the
        // sender sent; its recorded metrics were left as they were. The
        // lost IPI and the IPIs per operation are the plans' to find
        // (plans/lab-sweep.toml); here, the recorded figures.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tampered-sweep.json");
        let f = RunsFile::load(Path::new(path)).unwrap();
        fails_exactly(&f, &[recorded_metrics_mismatch], "tampered");
        // The AVIC checks still read delivery here (no plan runs there).
        assert_eq!(
            lost_ipis(&f),
            ["pingpong kernel/x2apic/icr apicv=host: 33 IPIs sent, 32 received"]
        );
    }

    #[test]
    fn icr_exits_per_operation_are_checked_where_apicv_was_not_in_effect() {
        // One ICR write of the first run (kernel/x2apic/icr, no APICv) that
        // did not exit: 29 exits over 30 round trips.
        let one_short = |v: &mut Value| {
            let e = &mut measure(v, 0, 0)["icr_write_exits"]["exits"];
            *e = (e.as_u64().unwrap() - 1).into();
        };
        let f = edited(one_short);
        let m = icr_exits_without_apicv(&f);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("pingpong kernel/x2apic/icr apicv=host: 0.96"),
            "{m:?}"
        );
        assert!(
            m[0].ends_with(" ICR-write exits per round trip (want 1)"),
            "{m:?}"
        );
        // With APICv in effect the run is out of this check's scope.
        let f = edited(|v| {
            one_short(v);
            v["runs"][0]["apicv"]["effective"] = "active".into();
        });
        assert!(icr_exits_without_apicv(&f).is_empty());
        assert!(!icr_without_apicv(&f.doc.runs[0]));
        // No ICR-write exit counted at all is an offence too.
        let f = edited(|v| {
            for vcpu in 0..2 {
                measure(v, 0, vcpu)
                    .as_object_mut()
                    .unwrap()
                    .remove("icr_write_exits");
            }
        });
        assert!(
            icr_exits_without_apicv(&f)
                .iter()
                .any(|o| o.contains(": no ICR-write exits per round trip")),
            "{:?}",
            icr_exits_without_apicv(&f)
        );
    }

    #[test]
    fn each_check_fails_on_what_it_checks() {
        type Edit = Box<dyn FnOnce(&mut Value)>;
        let cases: Vec<(Edit, Vec<Check>)> = vec![
            (
                Box::new(|v| {
                    v["runs"][0]["status"] =
                        serde_json::json!({"state": "failed", "reason": "vcpu1: fault"})
                }),
                vec![failed_runs],
            ),
            (
                Box::new(|v| {
                    v["skipped"].as_array_mut().unwrap().push(serde_json::json!({"mode": "pingpong 2v kernel/x2apic/icr", "reason": "no reason"}))
                }),
                vec![unexpected_skips],
            ),
            (
                Box::new(|v| {
                    v["skipped"].as_array_mut().unwrap().push(serde_json::json!({"mode": "broadcast 8v kernel/xapic/icr", "reason": "8 spinning vCPUs on 2 host CPUs: each IPI waits for its target's time slice, so the run would time out, not measure (use --target halt, at most 2 vCPUs, or --force to run it)"}))
                }),
                vec![],
            ),
            (
                // The sampler's total off by one (its reasons unchanged).
                Box::new(|v| {
                    let e = &mut measure(v, 0, 0)[EXIT_REASONS]["exits"];
                    *e = (e.as_u64().unwrap() + 1).into();
                }),
                vec![sampled_exit_mismatch],
            ),
            (
                // One ICR write that did not exit: the figures move with it.
                Box::new(|v| {
                    let e = &mut measure(v, 0, 0)["icr_write_exits"]["exits"];
                    *e = (e.as_u64().unwrap() - 1).into();
                }),
                vec![
                    icr_exit_mismatch,
                    icr_exits_without_apicv,
                    recorded_metrics_mismatch,
                ],
            ),
            (
                // A PV hypercall not counted as a hypercall exit.
                Box::new(|v| {
                    let c = &mut measure(v, 1, 0)[EXIT_REASONS]["by_reason"]["hypercall"]["count"];
                    *c = (c.as_u64().unwrap() - 1).into();
                }),
                vec![pv_mismatch],
            ),
            (
                Box::new(|v| {
                    v["runs"][2]
                        .as_object_mut()
                        .unwrap()
                        .remove("apicv_observed");
                }),
                vec![apicv_observed_mismatch],
            ),
            (
                Box::new(|v| {
                    v["runs"][3]["apicv_observed"]["inhibits_at_end"] =
                        serde_json::json!(["ABSENT"])
                }),
                vec![apicv_observed_mismatch],
            ),
            (
                // No exit by reason: the exit figures fall back to KVM's stat.
                Box::new(|v| {
                    measure(v, 2, 1)
                        .as_object_mut()
                        .unwrap()
                        .remove(EXIT_REASONS);
                }),
                vec![missing_exit_reasons, recorded_metrics_mismatch],
            ),
            (
                // The recorded metrics edited, the counters not (today's
                // jq check read these, so it failed here too).
                Box::new(|v| v["runs"][0]["metrics"]["ipis_per_operation"] = 2.0.into()),
                vec![recorded_metrics_mismatch],
            ),
            (
                // A figure recorded that the counters do not give.
                Box::new(|v| v["runs"][1]["metrics"]["made_up_per_ipi"] = 1.0.into()),
                vec![recorded_metrics_mismatch],
            ),
            (
                // A figure an older ipivmm did not record is no offence.
                Box::new(|v| {
                    v["runs"][1]["metrics"]
                        .as_object_mut()
                        .unwrap()
                        .remove("cycles_per_ipi_p50");
                }),
                vec![],
            ),
            (
                // Twice the IPIs sent and delivered, the recorded metrics
                // left alone: a check of the recorded figures passes this
                // (two IPIs per round trip is the plans' to find).
                Box::new(|v| {
                    for (vcpu, field) in [(0, "ipis_sent"), (1, "ipis_received")] {
                        let g = &mut measure(v, 0, vcpu)["guest"][field];
                        *g = (g.as_u64().unwrap() * 2).into();
                    }
                }),
                vec![recorded_metrics_mismatch],
            ),
        ];
        for (i, (edit, want)) in cases.into_iter().enumerate() {
            fails_exactly(&edited(edit), &want, &format!("case {i}"));
        }
    }

    #[test]
    fn with_ipiv_only_shorthand_icr_writes_exit() {
        // The first run as kvm_intel with IPIv would record it: APICv
        // active, IPIv available, the sender's unicast writes accelerated.
        let ipiv = |v: &mut Value| {
            let r = &mut v["runs"][0];
            r["apicv"]["effective"] = "active".into();
            r["host_settings"]["backend"] = "kvm_intel".into();
            r["host_settings"]["verdicts"]["ipiv"] = serde_json::json!({"state": "available"});
        };
        let f = edited(|v| {
            ipiv(v);
            let icr = &mut measure(v, 0, 0)["icr_write_exits"];
            icr["accelerated"] = icr["exits"].clone();
            icr["exits"] = 0.into();
        });
        assert!(
            icr_exit_mismatch(&f).is_empty(),
            "{:?}",
            icr_exit_mismatch(&f)
        );
        // Every unicast write exiting is what IPIv would not do.
        let f = edited(ipiv);
        let m = icr_exit_mismatch(&f);
        assert_eq!(m, ["pingpong kernel/x2apic/icr apicv=host vcpu0: 30 ICR writes (halting barriers included), 30 ICR-write exits (tracepoints kvm_apic:icr_write + kvm_avic_incomplete_ipi - kvm_avic_incomplete_ipi:busy), want 0 (IPIv)"]);
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
