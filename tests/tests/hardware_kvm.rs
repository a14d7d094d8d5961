//! What only a hardware KVM (kvm_intel/kvm_amd) can show: `kvm_exit` fires,
//! so exits are counted by reason; hypercalls return, so PV IPIs run. These
//! tests skip elsewhere (saying so) and run in the lab (scripts/lab.sh), which
//! sets IPIVMM_REQUIRE_HW_KVM=1 so that a skip fails there.
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, TargetWait, Workload};
use ipivmm_analysis::results::PhaseResult;
use ipivmm_analysis::results::RunReport;
use ipivmm_tests::{hardware_kvm, run_ok};
use std::time::Duration;

const ITERATIONS: u64 = 50;

fn config(apic: ApicMode, ipi: IpiPath, target: TargetWait) -> VmConfig {
    VmConfig {
        apic,
        ipi,
        target_wait: target,
        workload: Workload::Pingpong,
        iterations: ITERATIONS,
        warmup: 5,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(120)),
        ..VmConfig::default()
    }
}

fn measure(r: &RunReport, vcpu: usize) -> &PhaseResult {
    assert!(r.succeeded(), "{:?}\n{}", r.status, r.serial_tail);
    r.vcpus[vcpu]
        .phase_named("measure")
        .expect("every vCPU ends its measure phase")
}

/// Exits by reason of a phase (the exit sampler's), non-zero ones.
fn reasons(p: &PhaseResult) -> Vec<(String, u64)> {
    p.exits_by_reason()
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// The exits of `p` whose reason is one of `names` (VMX and SVM spellings).
fn exits_of(p: &PhaseResult, names: &[&str]) -> u64 {
    reasons(p)
        .iter()
        .filter(|(k, _)| names.contains(&k.as_str()))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn exits_are_counted_by_reason_per_vcpu_and_phase() {
    if !hardware_kvm("exits_are_counted_by_reason_per_vcpu_and_phase") {
        return;
    }
    for apic in [ApicMode::Xapic, ApicMode::X2apic] {
        let r = run_ok(&config(apic, IpiPath::Icr, TargetWait::Halt));
        for v in 0..2 {
            let p = measure(&r, v);
            let sampled = p.exit_reasons.as_ref().expect("exits sampled by reason");
            assert!(
                sampled.complete && sampled.lost == 0,
                "{apic:?} vcpu{v}: {sampled:?}"
            );
            let by_reason: u64 = reasons(p).iter().map(|(_, n)| n).sum();
            let traced = p.tracepoints["kvm_exit"];
            let stat = p.kvm_stats["exits"];
            assert!(by_reason > 0, "{apic:?} vcpu{v}: no exit reason counted");
            // Three independent counts of the same exits over the same window.
            assert_eq!(by_reason, traced, "{apic:?} vcpu{v}: {:?}", reasons(p));
            assert_eq!(traced, stat, "{apic:?} vcpu{v}: kvm_exit vs KVM stat exits");
            // Host time per reason: every exit but the window's last (the end
            // marker, still in userspace when the window closes) came back.
            let timed: u64 = sampled.by_reason.values().map(|r| r.timed).sum();
            assert!(
                timed + 1 >= by_reason,
                "{apic:?} vcpu{v}: {timed} of {by_reason} timed"
            );
            assert!(sampled
                .by_reason
                .values()
                .all(|r| r.timed == 0 || r.host_ns > 0));
        }
        // The sender's ICR writes exit as MSR writes (x2APIC) or, on the
        // xAPIC page, as nested page faults / APIC accesses, or with shadow
        // paging (kvm_amd npt=0, kvm_intel ept=0) as #PF intercepts.
        let sender = measure(&r, 0);
        let icr = exits_of(
            sender,
            &[
                "msr",
                "MSR_WRITE",
                "npf",
                "APIC_ACCESS",
                "APIC_WRITE",
                "PF excp",
                "EXCEPTION_NMI",
            ],
        );
        assert!(
            icr >= sender.guest.icr_writes,
            "{apic:?}: {} ICR writes but only {icr} MSR/APIC exits: {:?}",
            sender.guest.icr_writes,
            reasons(sender)
        );
    }
}

#[test]
fn pv_ipis_are_hypercalls_not_icr_writes() {
    if !hardware_kvm("pv_ipis_are_hypercalls_not_icr_writes") {
        return;
    }
    for apic in [ApicMode::Xapic, ApicMode::X2apic] {
        let r = run_ok(&config(apic, IpiPath::Pv, TargetWait::Halt));
        let s = measure(&r, 0);
        let recv = measure(&r, 1);
        assert!(s.guest.hypercalls >= ITERATIONS, "{apic:?}: {:?}", s.guest);
        assert_eq!(s.guest.icr_writes, 0, "{apic:?}: a PV IPI writes no ICR");
        assert_eq!(
            s.guest.ipis_sent, s.guest.hypercalls,
            "{apic:?}: one target per call"
        );
        assert_eq!(
            recv.guest.ipis_received, s.guest.ipis_sent,
            "{apic:?}: all delivered"
        );
        // Guest count, KVM stat, tracepoint and exit reason agree.
        assert_eq!(
            s.kvm_stats["hypercalls"], s.guest.hypercalls,
            "{apic:?}: KVM stat"
        );
        let traced = s.tracepoints["kvm_hypercall:send_ipi"];
        assert_eq!(traced, s.guest.hypercalls, "{apic:?}: kvm_hypercall nr 10");
        let exits = exits_of(s, &["hypercall", "VMCALL"]);
        assert_eq!(exits, s.guest.hypercalls, "{apic:?}: {:?}", reasons(s));
        let icr = s.icr_write_exits.as_ref().expect("ICR-write exits counted");
        assert_eq!((icr.exits, icr.accelerated), (0, 0), "{apic:?}: {icr:?}");
    }
}

/// `--apicv inhibit` once hung on the lab's kvm_amd (x2APIC, halted target):
/// every mode with a lever must complete, repeatedly.
#[test]
fn apicv_inhibit_runs_complete_repeatedly() {
    if !hardware_kvm("apicv_inhibit_runs_complete_repeatedly") {
        return;
    }
    let host = ipivmm::host::probe().ok();
    for apic in [ApicMode::X2apic, ApicMode::Xapic] {
        let c = VmConfig {
            irqchip: Irqchip::Kernel,
            apicv: ApicvRequest::Inhibit,
            ..config(apic, IpiPath::Icr, TargetWait::Halt)
        };
        if let Err(why) = c.check_mode(host.as_ref()) {
            // Intel's lever needs xAPIC: no x2APIC inhibit to repeat there.
            eprintln!("apicv_inhibit_runs_complete_repeatedly: {apic:?} not run: {why}");
            continue;
        }
        for round in 0..5 {
            let r = run_ok(&c);
            let recv = measure(&r, 1);
            let sent = measure(&r, 0).guest.ipis_sent;
            assert_eq!(recv.guest.ipis_received, sent, "{apic:?} round {round}");
        }
    }
}

/// `--target halt` means halted: every measured IPI meets a target in
/// `hlt` (about one HLT exit per IPI on the receiver, no interrupt-window
/// exits), where `halt-immediate` lets IPIs meet a target still leaving its
/// handler.
#[test]
fn halted_targets_are_really_halted() {
    if !hardware_kvm("halted_targets_are_really_halted") {
        return;
    }
    for apic in [ApicMode::X2apic, ApicMode::Xapic] {
        let r = run_ok(&config(apic, IpiPath::Icr, TargetWait::Halt));
        let recv = measure(&r, 1);
        let ipis = recv.guest.ipis_received;
        let hlt = exits_of(recv, &["hlt", "HLT"]);
        let window = exits_of(recv, &["vintr", "INTERRUPT_WINDOW"]);
        assert!(ipis >= ITERATIONS, "{apic:?}: {ipis} IPIs");
        assert!(
            hlt * 10 >= ipis * 9 && hlt <= ipis + 2,
            "{apic:?}: {hlt} HLT exits for {ipis} IPIs: {:?}",
            reasons(recv)
        );
        assert!(
            window * 10 <= ipis,
            "{apic:?}: {window} interrupt-window exits for {ipis} IPIs"
        );
    }
}
