//! The AVIC pass's checks over ipivmm's results documents (the runs
//! scripts/lab/probe-avic.sh writes: `runs/avic-{on,off}*.json`,
//! `runs/avic-preset.json`), beside the lab's own ([`super::checks`]):
//! kvm_amd loaded with `avic=1` on QEMU's emulated AVIC against
//! docs/kernel-paths.md's AVIC rows (A5, A7, A8) and ipivmm's ICR-write
//! accounting, per boot of the pass ([`Part`]). x2APIC runs go through the
//! backing page when the host has x2AVIC (the run's recorded verdict), else
//! they run hybrid AVIC (A5). Each yields one line per offence; none means
//! it passed.
use super::checks::{every_run, icr_runs, label, measured, not_flood, opt, Check, RunsFile, Scope};
use ipivmm::mode::apicv::ApicvState;
use ipivmm::results::{PhaseResult, RunReport};
use ipivmm::{ApicMode, ApicvRequest, TargetWait, Workload};

/// One boot of the AVIC pass (probe-avic.sh's `lab.probe=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The KVM selftests (the peer's check of the emulation) with AVIC on, its exits traced, then
    /// with avic=0
    Selftests,
    /// ipivmm's AVIC matrix with AVIC on and with avic=0 (runs/avic-{on,off}*.json)
    Matrix,
    /// sweep --preset avic-broadcast at 2, 4 and 8 vCPUs (runs/avic-preset.json)
    Preset,
}

impl Part {
    /// Every part, in the order the pass boots them.
    pub const ALL: &[Part] = &[Part::Selftests, Part::Matrix, Part::Preset];

    /// Its name (`lab.probe=`, the results directory).
    pub fn name(self) -> &'static str {
        match self {
            Part::Selftests => "selftests",
            Part::Matrix => "matrix",
            Part::Preset => "preset",
        }
    }

    /// The part named `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// The checks over the runs with AVIC on (avic=1): name, check, scope.
pub const ON_CHECKS: &[(&str, Check, Scope)] = &[
    ("AVIC runs completed", super::checks::failed_runs, every_run),
    (
        "AVIC active in every in-kernel-LAPIC run with --apicv host, inhibited with --apicv inhibit",
        avic_on_mismatch,
        in_kernel_lapic,
    ),
    (
        "every IPI sent was delivered (AVIC on)",
        super::checks::lost_ipis,
        not_flood,
    ),
    (
        "ICR-write exits (kvm_apic:icr_write + incomplete - busy) == the exits KVM took (0x401 xAPIC and x2AVIC, MSR hybrid x2APIC); the rest accelerated",
        icr_accounting_mismatch,
        avic_icr,
    ),
    (
        "A7: IPIs to running targets (a CPU per vCPU) accelerated (no exit)",
        a7_mismatch,
        a7_run,
    ),
    (
        "A8: unicast to a halted target: an AVIC_INCOMPLETE_IPI exit per wake-up of the blocked target, no kvm_apic/kvm_apic_ipi",
        a8_mismatch,
        a8_run,
    ),
    (
        "x2AVIC: no x2APIC ICR write an msr exit (kvm_msr:icr_write 0)",
        x2avic_mismatch,
        x2avic_run,
    ),
    (
        "A5: hybrid AVIC (x2APIC without x2AVIC): every IPI through kvm_apicv_accept_irq",
        a5_mismatch,
        a5_run,
    ),
];

/// The checks over the runs with AVIC off (kvm_amd reloaded with avic=0).
pub const OFF_CHECKS: &[(&str, Check, Scope)] = &[
    (
        "AVIC-off runs completed",
        super::checks::failed_runs,
        every_run,
    ),
    ("no APICv with avic=0", avic_off_mismatch, every_run),
    (
        "every IPI sent was delivered (AVIC off)",
        super::checks::lost_ipis,
        not_flood,
    ),
    (
        "ICR-write exits == ICR writes (AVIC off)",
        super::checks::icr_exit_mismatch,
        icr_runs,
    ),
];

/// A tracepoint's count in a phase (0 when the run did not trace it).
fn tp(p: &PhaseResult, name: &str) -> u64 {
    p.tracepoints.get(name).copied().unwrap_or(0)
}

/// The phase's exits of one reason (`kvm_exit`'s SVM name).
fn reason(p: &PhaseResult, name: &str) -> u64 {
    p.exits_by_reason().get(name).copied().unwrap_or(0)
}

/// A run whose LAPIC is KVM's (the kernel and split irqchips): the only
/// ones AVIC can accelerate.
fn in_kernel_lapic(r: &RunReport) -> bool {
    r.mode.irqchip.lapic_in_kernel()
}

/// A run with AVIC active on the ICR path.
fn avic_icr(r: &RunReport) -> bool {
    r.apicv.effective == ApicvState::Active && r.mode.ipi.writes_icr()
}

/// The host of the run had x2AVIC (`ipivmm host`'s verdict it recorded):
/// kvm_amd runs an x2APIC guest's APIC through the backing page.
fn x2avic(r: &RunReport) -> bool {
    r.host_settings
        .as_ref()
        .is_some_and(|h| h.verdicts.x2avic.is_available())
}

/// A run whose ICR writes AVIC handles itself (accelerated or
/// AVIC_INCOMPLETE_IPI): xAPIC, and x2APIC with x2AVIC. The others
/// (x2APIC without x2AVIC: hybrid AVIC) exit on every WRMSR.
fn icr_in_hardware(r: &RunReport) -> bool {
    match r.mode.apic {
        ApicMode::Xapic => true,
        ApicMode::X2apic => x2avic(r),
    }
}

/// The measured phases of vCPU 0, the sender.
fn sender(r: &RunReport) -> impl Iterator<Item = &PhaseResult> {
    r.vcpus.iter().take(1).flat_map(|v| measured(&v.phases))
}

/// The measured phases of the other vCPUs.
fn receivers(r: &RunReport) -> impl Iterator<Item = &PhaseResult> {
    r.vcpus.iter().skip(1).flat_map(|v| measured(&v.phases))
}

/// With avic=1 every in-kernel-LAPIC run asking for the host's setting has
/// AVIC active for its whole measured phase, on every vCPU; a `--apicv
/// inhibit` run is inhibited.
pub fn avic_on_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| in_kernel_lapic(r)) {
        match r.apicv.requested {
            ApicvRequest::Host => {
                if r.apicv.effective != ApicvState::Active {
                    out.push(format!(
                        "{}: AVIC {} ({})",
                        label(r),
                        r.apicv.effective,
                        r.apicv.detail
                    ));
                }
                for v in &r.vcpus {
                    for p in measured(&v.phases) {
                        if !p.apicv.as_ref().is_some_and(|a| a.active) {
                            let why = p
                                .apicv
                                .as_ref()
                                .map_or_else(|| "-".into(), |a| a.inhibits.join(", "));
                            out.push(format!(
                                "{} vcpu{}: AVIC not active in the measured phase ({why})",
                                label(r),
                                v.index
                            ));
                        }
                    }
                }
            }
            ApicvRequest::Inhibit => {
                if r.apicv.effective != ApicvState::Inhibited {
                    out.push(format!(
                        "{}: --apicv inhibit gave {}",
                        label(r),
                        r.apicv.effective
                    ));
                }
            }
        }
    }
    out
}

/// With avic=0 nothing is active.
pub fn avic_off_mismatch(f: &RunsFile) -> Vec<String> {
    f.doc
        .runs
        .iter()
        .filter(|r| r.apicv.effective != ApicvState::Unavailable)
        .map(|r| format!("{}: APICv {} with avic=0", label(r), r.apicv.effective))
        .collect()
}

/// ipivmm's ICR-write exits (`kvm_apic:icr_write` +
/// `kvm_avic_incomplete_ipi` − `kvm_avic_incomplete_ipi:busy`) against the
/// exits KVM took by reason, on every vCPU that wrote the ICR: with AVIC an
/// xAPIC ICR write (and an x2APIC one with x2AVIC) exits only as
/// AVIC_INCOMPLETE_IPI (0x401), the rest are accelerated; an x2APIC ICR
/// write without x2AVIC is an intercepted WRMSR (hybrid AVIC), every one an
/// exit.
pub fn icr_accounting_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| avic_icr(r)) {
        for v in &r.vcpus {
            for p in measured(&v.phases).filter(|p| p.guest.icr_writes > 0) {
                let w = p.guest.all_icr_writes();
                let icr = p.icr_write_exits.as_ref();
                let (x, a) = (icr.map(|e| e.exits), icr.map(|e| e.accelerated));
                let incomplete = reason(p, "avic_incomplete_ipi");
                let bad = if icr_in_hardware(r) {
                    x != Some(incomplete)
                        || a != Some(w.saturating_sub(incomplete))
                        || tp(p, "kvm_avic_incomplete_ipi") != incomplete
                } else {
                    x != Some(w) || a != Some(0) || reason(p, "msr") < w
                };
                if !bad {
                    continue;
                }
                let exits = if icr_in_hardware(r) {
                    format!(
                        "avic_incomplete_ipi exits {incomplete} (tracepoint {})",
                        tp(p, "kvm_avic_incomplete_ipi")
                    )
                } else {
                    format!("msr exits {}", reason(p, "msr"))
                };
                out.push(format!(
                    "{} vcpu{}: {w} ICR writes, ICR-write exits {}, accelerated {}, {exits}",
                    label(r),
                    v.index,
                    opt(x),
                    opt(a)
                ));
            }
        }
    }
    out
}

/// An AVIC-active run on the ICR path whose ICR writes AVIC handles
/// ([`icr_in_hardware`]), to `target`s that wait so.
fn in_hardware_to(r: &RunReport, target: TargetWait) -> bool {
    avic_icr(r) && icr_in_hardware(r) && r.mode.target == target
}

/// A run A7 is about: IPIs to other vCPUs (ping-pong, broadcast,
/// multicast) or to self, spinning targets, a CPU of every vCPU's own.
fn a7_run(r: &RunReport) -> bool {
    in_hardware_to(r, TargetWait::Spin)
        && matches!(
            r.mode.workload,
            Workload::Pingpong | Workload::Broadcast | Workload::Multicast | Workload::SelfIpi
        )
        && own_cpus(r)
}

/// A run A8 is about: a ping-pong to a halted target that blocked at
/// least once.
fn a8_run(r: &RunReport) -> bool {
    in_hardware_to(r, TargetWait::Halt) && r.mode.workload == Workload::Pingpong && blocked(r) > 0
}

/// How many times the targets blocked in a halt and were woken
/// (`halt_wakeup`): each time IsRunning was clear, so the IPI that woke
/// it could not be accelerated. A halt KVM ended by polling, or one an IPI
/// met before KVM blocked the vCPU, kept IsRunning set: that IPI is
/// accelerated, on hardware as here.
fn blocked(r: &RunReport) -> u64 {
    receivers(r)
        .map(|p| p.kvm_stats.get("halt_wakeup").copied().unwrap_or(0))
        .sum()
}

/// An x2APIC run with x2AVIC on the ICR path.
fn x2avic_run(r: &RunReport) -> bool {
    avic_icr(r) && r.mode.apic == ApicMode::X2apic && x2avic(r)
}

/// A hybrid-AVIC run (x2APIC without x2AVIC) on the ICR path.
fn hybrid_run(r: &RunReport) -> bool {
    avic_icr(r) && r.mode.apic == ApicMode::X2apic && !x2avic(r)
}

/// A run A5 is about: hybrid AVIC on the ICR path, its sender traced with
/// `kvm_apicv_accept_irq` (a preset without --context-events is not).
fn a5_run(r: &RunReport) -> bool {
    hybrid_run(r) && sender(r).any(|p| p.tracepoints.contains_key("kvm_apicv_accept_irq"))
}

/// Every vCPU has a host CPU of its own.
fn own_cpus(r: &RunReport) -> bool {
    r.mode.host_cpus > 0 && r.mode.vcpus <= r.mode.host_cpus
}

/// docs/kernel-paths.md A7: a fixed IPI to running targets (spinning, and
/// every vCPU with a CPU of its own: 2 vCPUs on the 2 emulated CPUs) is
/// delivered by the emulated AVIC without an exit, xAPIC or x2APIC with
/// x2AVIC: the sender has accelerated ICR writes. A sender without the
/// figure is an offence too. With more vCPUs than CPUs a target may not be
/// running: that is A8.
pub fn a7_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| a7_run(r)) {
        for p in sender(r) {
            let icr = p.icr_write_exits.as_ref();
            if icr.is_none_or(|e| e.accelerated == 0) {
                out.push(format!(
                    "{}: no ICR write accelerated ({} exits of {})",
                    label(r),
                    opt(icr.map(|e| e.exits)),
                    p.guest.all_icr_writes()
                ));
            }
        }
    }
    out
}

/// A8: an IPI to a blocked (IsRunning=0) target exits as
/// AVIC_INCOMPLETE_IPI after the IRR is set: KVM only wakes the target, so
/// the sender traces neither `kvm_apic` (no ICR emulation) nor
/// `kvm_apic_ipi`. Every wake-up of a blocked target is one such exit, so
/// there are at least as many as wake-ups, and at most one per ICR write.
pub fn a8_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| a8_run(r)) {
        let woken = blocked(r);
        for p in sender(r) {
            let incomplete = reason(p, "avic_incomplete_ipi");
            if incomplete < woken
                || incomplete > p.guest.icr_writes
                || tp(p, "kvm_apic_ipi") != 0
                || tp(p, "kvm_apic:icr_write") != 0
            {
                out.push(format!(
                    "{}: {} ICR writes, the target blocked and was woken {woken} times, {incomplete} avic_incomplete_ipi exits, kvm_apic_ipi {}, kvm_apic:icr_write {}",
                    label(r),
                    p.guest.icr_writes,
                    tp(p, "kvm_apic_ipi"),
                    tp(p, "kvm_apic:icr_write")
                ));
            }
        }
    }
    out
}

/// x2AVIC: an x2APIC ICR write reaches the backing page, accelerated or
/// an AVIC_INCOMPLETE_IPI exit ([`icr_accounting_mismatch`] counts those):
/// never an intercepted WRMSR (`kvm_msr:icr_write`), which is what hybrid
/// AVIC does. A sender that did not count the tracepoint is an offence.
pub fn x2avic_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| x2avic_run(r)) {
        for p in sender(r).filter(|p| p.guest.icr_writes > 0) {
            match p.tracepoints.get("kvm_msr:icr_write") {
                Some(0) => {}
                n => out.push(format!(
                    "{}: {} ICR writes, kvm_msr:icr_write {}, msr exits {}",
                    label(r),
                    p.guest.all_icr_writes(),
                    opt(n.copied()),
                    reason(p, "msr")
                )),
            }
        }
    }
    out
}

/// A5: hybrid AVIC (x2APIC without x2AVIC): the ICR WRMSR exits and KVM
/// delivers every IPI through the target's backing page
/// (`kvm_apicv_accept_irq`), where the run traced it (`--context-events`;
/// the preset does not).
pub fn a5_mismatch(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| hybrid_run(r)) {
        for p in sender(r).filter(|p| p.tracepoints.contains_key("kvm_apicv_accept_irq")) {
            let accepted = tp(p, "kvm_apicv_accept_irq");
            if accepted < p.guest.ipis_sent {
                out.push(format!(
                    "{}: {} IPIs sent, kvm_apicv_accept_irq {accepted}",
                    label(r),
                    p.guest.ipis_sent
                ));
            }
        }
    }
    out
}

/// One line per AVIC-active run on the ICR path: how the sender's ICR
/// writes went.
pub fn avic_summary(f: &RunsFile) -> Vec<String> {
    let mut out = Vec::new();
    for r in f.doc.runs.iter().filter(|r| avic_icr(r)) {
        for p in sender(r) {
            let icr = p.icr_write_exits.as_ref();
            out.push(format!(
                "{} {}v {}{}: {} ICR writes, {} exits, {} accelerated; avic_incomplete_ipi {}, msr {}, avic_unaccelerated_access {}, doorbells {}, kvm_apicv_accept_irq {}",
                label(r),
                r.mode.vcpus,
                r.mode.target.name(),
                match (r.mode.apic, x2avic(r)) {
                    (ApicMode::X2apic, true) => " x2AVIC",
                    (ApicMode::X2apic, false) => " hybrid",
                    _ => "",
                },
                p.guest.all_icr_writes(),
                opt(icr.map(|e| e.exits)),
                opt(icr.map(|e| e.accelerated)),
                reason(p, "avic_incomplete_ipi"),
                reason(p, "msr"),
                reason(p, "avic_unaccelerated_access"),
                tp(p, "kvm_avic_doorbell"),
                tp(p, "kvm_apicv_accept_irq")
            ));
        }
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    /// The phase field (and counter source) of exits by reason.
    const EXIT_REASONS: &str = ipivmm::results::source::Source::ExitReasons.key();
    use super::*;
    use serde_json::{json, Value};
    use std::path::Path;

    const SWEEP: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/lab-quick/runs/sweep.json"
    );

    /// The quick pass fixture's sweep: real runs of kvm_amd with avic=N
    /// under QEMU TCG (ping-pong kernel/x2apic/icr `--apicv host` and
    /// `inhibit`, a PV ping-pong, a user-irqchip broadcast), each counted
    /// by the exit sampler and the tracepoints. It is what the AVIC pass's
    /// avic=0 sweeps record.
    pub fn avic_off() -> Value {
        serde_json::from_str(&std::fs::read_to_string(SWEEP).unwrap()).unwrap()
    }

    /// runs[run].vcpus[vcpu]'s measure phase.
    pub fn measure(v: &mut Value, run: usize, vcpu: usize) -> &mut Value {
        v["runs"][run]["vcpus"][vcpu]["phases"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["name"] == "measure")
            .unwrap()
    }

    /// A run as kvm_amd records it with AVIC active: the plan says so and
    /// every phase of every vCPU ran with no inhibit.
    fn active(r: &mut Value) {
        r["apicv"]["effective"] = "active".into();
        r["apicv"]["detail"] = "AVIC active".into();
        for v in r["vcpus"].as_array_mut().unwrap() {
            for p in v["phases"].as_array_mut().unwrap() {
                p["apicv"] = json!({"active": true, "inhibits": []});
            }
        }
    }

    /// An exit reason of a phase, `n` exits.
    fn set_reason(p: &mut Value, name: &str, n: u64) {
        let by = p[EXIT_REASONS]["by_reason"].as_object_mut().unwrap();
        if n == 0 {
            by.remove(name);
        } else {
            by.insert(
                name.into(),
                json!({"count": n, "timed": n, "host_ns": 1000 * n}),
            );
        }
    }

    /// The AVIC matrix's `--apicv host` and `inhibit` runs as kvm_amd with
    /// avic=1 records them on QEMU's emulated AVIC, made from the real
    /// avic=N runs of [`avic_off`] (30 ICR writes each) with the figures
    /// docs/kernel-paths.md gives and docs/lab.md's AVIC boots showed:
    /// 0. xAPIC ping-pong to a spinning target: every ICR write and EOI
    ///    accelerated, no exit (A7), a doorbell each;
    /// 1. the same to a halted target: every ICR write an
    ///    AVIC_INCOMPLETE_IPI exit after delivery, no ICR emulation (A8);
    /// 2. x2APIC (hybrid AVIC, A5): the ICR WRMSR exits, every IPI through
    ///    `kvm_apicv_accept_irq` (`--context-events`);
    /// 3. x2APIC `--apicv inhibit`: inhibited by the PIT's reinjection;
    /// 4. x2APIC ping-pong to a spinning target on a host with x2AVIC: every
    ///    ICR WRMSR accelerated, no `msr` exit (A7).
    pub fn avic_on() -> Value {
        let mut v = avic_off();
        let (host, inhibit) = (v["runs"][0].clone(), v["runs"][3].clone());
        v["runs"] = json!([host.clone(), host.clone(), host.clone(), inhibit, host]);
        v["skipped"] = json!([]);
        for run in [0, 1, 2, 4] {
            active(&mut v["runs"][run]);
        }
        for run in 0..2 {
            v["runs"][run]["mode"]["apic"] = "xapic".into();
            for vcpu in 0..2 {
                let p = measure(&mut v, run, vcpu);
                set_reason(p, "msr", 0);
                p["tracepoints"]["kvm_msr:icr_write"] = 0.into();
                p["tracepoints"]["kvm_apic:icr_write"] = 0.into();
                p["tracepoints"]["kvm_apic_ipi"] = 0.into();
            }
        }
        let a7 = measure(&mut v, 0, 0);
        a7["icr_write_exits"]["exits"] = 0.into();
        a7["icr_write_exits"]["accelerated"] = 30.into();
        a7["tracepoints"]["kvm_avic_doorbell"] = 30.into();
        v["runs"][1]["mode"]["target"] = "halt".into();
        measure(&mut v, 1, 1)["kvm_stats"]["halt_wakeup"] = 30.into();
        let a8 = measure(&mut v, 1, 0);
        set_reason(a8, "avic_incomplete_ipi", 30);
        a8["tracepoints"]["kvm_avic_incomplete_ipi"] = 30.into();
        measure(&mut v, 2, 0)["tracepoints"]["kvm_apicv_accept_irq"] = 30.into();
        let r = &mut v["runs"][3];
        r["apicv"]["effective"] = "inhibited".into();
        for vcpu in r["vcpus"].as_array_mut().unwrap() {
            for p in vcpu["phases"].as_array_mut().unwrap() {
                p["apicv"] = json!({"active": false, "inhibits": ["PIT_REINJ"]});
            }
        }
        v["runs"][4]["host_settings"]["verdicts"]["x2avic"] = json!({"state": "available"});
        for vcpu in 0..2 {
            let p = measure(&mut v, 4, vcpu);
            set_reason(p, "msr", 0);
            p["tracepoints"]["kvm_msr:icr_write"] = 0.into();
            p["tracepoints"]["kvm_apic:icr_write"] = 0.into();
            p["tracepoints"]["kvm_apic_ipi"] = 0.into();
        }
        let a7 = measure(&mut v, 4, 0);
        a7["icr_write_exits"]["exits"] = 0.into();
        a7["icr_write_exits"]["accelerated"] = 30.into();
        v
    }

    /// `v` as a results file.
    pub fn runs_file(v: &Value) -> RunsFile {
        RunsFile::from_json(Path::new("avic-on.json"), &v.to_string()).unwrap()
    }

    /// The names of the checks of `checks` that `f` fails.
    fn failing(f: &RunsFile, checks: &[(&'static str, Check, Scope)]) -> Vec<&'static str> {
        checks
            .iter()
            .filter(|(_, c, _)| !c(f).is_empty())
            .map(|(n, _, _)| *n)
            .collect()
    }

    /// The name `check` has in `checks`.
    fn named(checks: &[(&'static str, Check, Scope)], check: Check) -> &'static str {
        checks
            .iter()
            .find(|(_, c, _)| std::ptr::fn_addr_eq(*c, check))
            .map(|(n, _, _)| *n)
            .unwrap()
    }

    #[test]
    fn avic_runs_as_kvm_amd_records_them_pass() {
        let on = runs_file(&avic_on());
        assert_eq!(on.doc.runs.len(), 5);
        assert_eq!(failing(&on, ON_CHECKS), Vec::<&str>::new());
        let off = RunsFile::load(Path::new(SWEEP)).unwrap();
        assert_eq!(failing(&off, OFF_CHECKS), Vec::<&str>::new());
        // Each side's document fails the other's: the real avic=N runs are
        // not AVIC-active, the AVIC-active ones are not avic=0.
        assert_eq!(
            avic_on_mismatch(&off)[0],
            "pingpong kernel/x2apic/icr apicv=host: AVIC unavailable (AVIC unavailable: kvm_amd.avic=N: AVIC is off (load kvm_amd with avic=1))"
        );
        assert_eq!(
            avic_off_mismatch(&on),
            [
                "pingpong kernel/xapic/icr apicv=host: APICv active with avic=0",
                "pingpong kernel/xapic/icr apicv=host: APICv active with avic=0",
                "pingpong kernel/x2apic/icr apicv=host: APICv active with avic=0",
                "pingpong kernel/x2apic/icr apicv=inhibit: APICv inhibited with avic=0",
                "pingpong kernel/x2apic/icr apicv=host: APICv active with avic=0",
            ]
        );
    }

    #[test]
    fn each_avic_check_fails_on_what_it_checks() {
        type Edit = Box<dyn FnOnce(&mut Value)>;
        let cases: Vec<(&str, Edit, Vec<Check>)> = vec![
            (
                "A7: every ICR write exits as it would without AVIC",
                Box::new(|v| {
                    let p = measure(v, 0, 0);
                    p["icr_write_exits"]["exits"] = 30.into();
                    p["icr_write_exits"]["accelerated"] = 0.into();
                }),
                vec![a7_mismatch, icr_accounting_mismatch],
            ),
            (
                "A7: 3 vCPUs on 2 CPUs: a target not running (A8, not A7)",
                Box::new(|v| {
                    v["runs"][0]["mode"]["vcpus"] = 3.into();
                    let p = measure(v, 0, 0);
                    p["icr_write_exits"]["exits"] = 30.into();
                    p["icr_write_exits"]["accelerated"] = 0.into();
                    set_reason(p, "avic_incomplete_ipi", 30);
                    p["tracepoints"]["kvm_avic_incomplete_ipi"] = 30.into();
                }),
                vec![],
            ),
            (
                "A7: no ICR-write figure at all",
                Box::new(|v| measure(v, 0, 0)["icr_write_exits"] = Value::Null),
                vec![a7_mismatch, icr_accounting_mismatch],
            ),
            (
                "A8: KVM emulated the ICR write (kvm_apic_ipi traced)",
                Box::new(|v| measure(v, 1, 0)["tracepoints"]["kvm_apic_ipi"] = 30.into()),
                vec![a8_mismatch],
            ),
            (
                "A8: one AVIC_INCOMPLETE_IPI exit fewer than ICR writes",
                Box::new(|v| set_reason(measure(v, 1, 0), "avic_incomplete_ipi", 29)),
                vec![a8_mismatch, icr_accounting_mismatch],
            ),
            (
                "A8: 20 of the target's halts blocked, 29 writes exited: the rest met it running",
                Box::new(|v| {
                    set_reason(measure(v, 1, 0), "avic_incomplete_ipi", 29);
                    measure(v, 1, 1)["kvm_stats"]["halt_wakeup"] = 20.into();
                }),
                vec![icr_accounting_mismatch],
            ),
            (
                "A8: the target never blocked: nothing A8 is about",
                Box::new(|v| {
                    set_reason(measure(v, 1, 0), "avic_incomplete_ipi", 0);
                    measure(v, 1, 1)["kvm_stats"]["halt_wakeup"] = 0.into();
                }),
                vec![icr_accounting_mismatch],
            ),
            (
                "xAPIC: the tracepoint and the exits disagree",
                Box::new(|v| {
                    measure(v, 1, 0)["tracepoints"]["kvm_avic_incomplete_ipi"] = 31.into()
                }),
                vec![icr_accounting_mismatch],
            ),
            (
                "A5: an IPI not through kvm_apicv_accept_irq",
                Box::new(|v| measure(v, 2, 0)["tracepoints"]["kvm_apicv_accept_irq"] = 29.into()),
                vec![a5_mismatch],
            ),
            (
                "A5: not traced (the preset has no --context-events): nothing to check",
                Box::new(|v| {
                    measure(v, 2, 0)["tracepoints"]
                        .as_object_mut()
                        .unwrap()
                        .remove("kvm_apicv_accept_irq");
                }),
                vec![],
            ),
            (
                "x2APIC: an ICR WRMSR that did not exit",
                Box::new(|v| set_reason(measure(v, 2, 0), "msr", 29)),
                vec![icr_accounting_mismatch],
            ),
            (
                "x2APIC: an ICR write counted accelerated",
                Box::new(|v| {
                    let p = measure(v, 2, 0);
                    p["icr_write_exits"]["exits"] = 29.into();
                    p["icr_write_exits"]["accelerated"] = 1.into();
                }),
                vec![icr_accounting_mismatch],
            ),
            (
                "x2AVIC: an ICR WRMSR intercepted (hybrid AVIC's exit)",
                Box::new(|v| {
                    let p = measure(v, 4, 0);
                    set_reason(p, "msr", 1);
                    p["tracepoints"]["kvm_msr:icr_write"] = 1.into();
                }),
                vec![x2avic_mismatch],
            ),
            (
                "x2AVIC: kvm_msr:icr_write not counted",
                Box::new(|v| {
                    measure(v, 4, 0)["tracepoints"]
                        .as_object_mut()
                        .unwrap()
                        .remove("kvm_msr:icr_write");
                }),
                vec![x2avic_mismatch],
            ),
            (
                "x2AVIC: every ICR write exits as it would without AVIC",
                Box::new(|v| {
                    let p = measure(v, 4, 0);
                    p["icr_write_exits"]["exits"] = 30.into();
                    p["icr_write_exits"]["accelerated"] = 0.into();
                }),
                vec![a7_mismatch, icr_accounting_mismatch],
            ),
            (
                "x2AVIC: 3 vCPUs on 2 CPUs: every write AVIC_INCOMPLETE_IPI (A8, not A7)",
                Box::new(|v| {
                    v["runs"][4]["mode"]["vcpus"] = 3.into();
                    let p = measure(v, 4, 0);
                    p["icr_write_exits"]["exits"] = 30.into();
                    p["icr_write_exits"]["accelerated"] = 0.into();
                    set_reason(p, "avic_incomplete_ipi", 30);
                    p["tracepoints"]["kvm_avic_incomplete_ipi"] = 30.into();
                }),
                vec![],
            ),
            (
                "the x2AVIC run's host without x2AVIC: accelerated WRMSRs where hybrid AVIC exits",
                Box::new(|v| {
                    v["runs"][4]["host_settings"]["verdicts"]["x2avic"] =
                        json!({"state": "unavailable", "reason": "CPU has no x2avic flag"})
                }),
                vec![icr_accounting_mismatch],
            ),
            (
                "--apicv host without AVIC",
                Box::new(|v| v["runs"][2]["apicv"]["effective"] = "unavailable".into()),
                vec![avic_on_mismatch],
            ),
            (
                "a receiver inhibited in its measured phase",
                Box::new(|v| {
                    measure(v, 0, 1)["apicv"] = json!({"active": false, "inhibits": ["IRQWIN"]})
                }),
                vec![avic_on_mismatch],
            ),
            (
                "--apicv inhibit left AVIC active",
                Box::new(|v| v["runs"][3]["apicv"]["effective"] = "active".into()),
                vec![avic_on_mismatch],
            ),
            (
                "a userspace LAPIC has no AVIC to ask for",
                Box::new(|v| {
                    v["runs"][3]["mode"]["irqchip"] = "user".into();
                    v["runs"][3]["apicv"]["effective"] = "unavailable".into();
                }),
                vec![],
            ),
            (
                "a run failed",
                Box::new(|v| {
                    v["runs"][1]["status"] = json!({"state": "failed", "reason": "vcpu1: fault"})
                }),
                vec![super::super::checks::failed_runs],
            ),
            (
                "an IPI lost",
                Box::new(|v| {
                    let g = &mut measure(v, 0, 1)["guest"]["ipis_received"];
                    *g = 29.into();
                }),
                vec![super::super::checks::lost_ipis],
            ),
        ];
        for (case, edit, want) in cases {
            let mut v = avic_on();
            edit(&mut v);
            let f = runs_file(&v);
            let mut want: Vec<&str> = want.into_iter().map(|c| named(ON_CHECKS, c)).collect();
            let mut got = failing(&f, ON_CHECKS);
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn offences_name_the_run_and_what_it_showed() {
        let mut v = avic_on();
        measure(&mut v, 0, 1)["apicv"] = json!({"active": false, "inhibits": ["IRQWIN"]});
        measure(&mut v, 1, 0)["tracepoints"]["kvm_apic_ipi"] = 30.into();
        set_reason(measure(&mut v, 2, 0), "msr", 29);
        let f = runs_file(&v);
        assert_eq!(
            avic_on_mismatch(&f),
            ["pingpong kernel/xapic/icr apicv=host vcpu1: AVIC not active in the measured phase (IRQWIN)"]
        );
        assert_eq!(
            a8_mismatch(&f),
            ["pingpong kernel/xapic/icr apicv=host: 30 ICR writes, the target blocked and was woken 30 times, 30 avic_incomplete_ipi exits, kvm_apic_ipi 30, kvm_apic:icr_write 0"]
        );
        assert_eq!(
            icr_accounting_mismatch(&f),
            ["pingpong kernel/x2apic/icr apicv=host vcpu0: 30 ICR writes, ICR-write exits 30, accelerated 0, msr exits 29"]
        );
    }

    #[test]
    fn the_summary_says_how_each_senders_icr_writes_went() {
        let f = runs_file(&avic_on());
        assert_eq!(
            avic_summary(&f),
            [
                "pingpong kernel/xapic/icr apicv=host 2v spin: 30 ICR writes, 0 exits, 30 accelerated; avic_incomplete_ipi 0, msr 0, avic_unaccelerated_access 0, doorbells 30, kvm_apicv_accept_irq 0",
                "pingpong kernel/xapic/icr apicv=host 2v halt: 30 ICR writes, 30 exits, 0 accelerated; avic_incomplete_ipi 30, msr 0, avic_unaccelerated_access 0, doorbells 0, kvm_apicv_accept_irq 0",
                "pingpong kernel/x2apic/icr apicv=host 2v spin hybrid: 30 ICR writes, 30 exits, 0 accelerated; avic_incomplete_ipi 0, msr 30, avic_unaccelerated_access 0, doorbells 0, kvm_apicv_accept_irq 30",
                "pingpong kernel/x2apic/icr apicv=host 2v spin x2AVIC: 30 ICR writes, 0 exits, 30 accelerated; avic_incomplete_ipi 0, msr 0, avic_unaccelerated_access 0, doorbells 0, kvm_apicv_accept_irq 0",
            ]
        );
    }

    #[test]
    fn avic_off_runs_fail_on_what_they_check() {
        type Case = (&'static str, fn(&mut Value), Check);
        let cases: Vec<Case> = vec![
            (
                "AVIC active with avic=0",
                |v| v["runs"][0]["apicv"]["effective"] = "active".into(),
                avic_off_mismatch,
            ),
            (
                "an ICR write that did not exit",
                |v| measure(v, 0, 0)["icr_write_exits"]["exits"] = 29.into(),
                super::super::checks::icr_exit_mismatch,
            ),
            (
                "a run timed out",
                |v| {
                    v["runs"][3]["status"] =
                        json!({"state": "timed_out", "after_s": 60, "stuck": "vcpu1 at rip 0x1000"})
                },
                super::super::checks::failed_runs,
            ),
        ];
        for (case, edit, check) in cases {
            let mut v = avic_off();
            edit(&mut v);
            assert_eq!(
                failing(&runs_file(&v), OFF_CHECKS),
                [named(OFF_CHECKS, check)],
                "{case}"
            );
        }
    }
}
