//! Exit accounting, windowed by the payload's phase markers: ICR-write exits
//! against what the guest issued, KVM binary stats, and what happens when a
//! counter source is unavailable.
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::{ApicMode, TargetWait, Workload};
use ipivmm_analysis::results::PhaseResult;
use ipivmm_analysis::results::RunReport;

use ipivmm_tests::{kvm_available, run_ok};
use std::time::Duration;

const ITERATIONS: u64 = 150;

fn run(apic: ApicMode, target: TargetWait, tracefs: Option<&str>) -> RunReport {
    let config = VmConfig {
        vcpus: 2,
        apic,
        target_wait: target,
        workload: Workload::Pingpong,
        iterations: ITERATIONS,
        warmup: 10,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(120)),
        tracefs: tracefs.map(Into::into),
        ..Default::default()
    };
    let r = run_ok(&config);
    assert!(r.succeeded(), "{:?}", r.status);
    r
}

fn phase<'a>(r: &'a RunReport, vcpu: usize, name: &str) -> &'a PhaseResult {
    r.vcpus[vcpu]
        .phase_named(name)
        .unwrap_or_else(|| panic!("vcpu{vcpu} has no phase {name}"))
}

/// Tracepoints need root and tracefs; say so and skip when they are missing.
fn tracepoints_available(r: &RunReport, test: &str) -> bool {
    let s = r.vcpus[0]
        .sources
        .iter()
        .find(|s| s.source == ipivmm_analysis::results::source::Source::Tracepoints)
        .expect("status");
    if !s.available {
        ipivmm_tests::skip(
            test,
            ipivmm_tests::Need::Setup,
            &format!("tracepoints unavailable: {:?}", s.detail),
        );
    }
    s.available
}

fn icr_exits_match_icr_writes(apic: ApicMode, test: &str) {
    if !kvm_available(test) {
        return;
    }
    let r = run(apic, TargetWait::Spin, None);
    if !tracepoints_available(&r, test) {
        return;
    }
    let sender = phase(&r, 0, "measure");
    let icr = sender
        .icr_write_exits
        .as_ref()
        .expect("ICR-write exits counted");
    assert!(sender.guest.icr_writes >= ITERATIONS);
    assert_eq!(
        icr.exits, sender.guest.icr_writes,
        "every ICR write left guest mode (no IPIv here)"
    );
    assert_eq!(
        sender.guest.icr_writes, sender.guest.ipis_sent,
        "unicast: one ICR write per IPI"
    );
    assert_eq!(icr.accelerated, 0);
    assert_eq!(
        sender.tracepoints.get("kvm_apic_ipi"),
        Some(&sender.guest.ipis_sent)
    );
    // The receiver wrote no ICR.
    assert_eq!(
        phase(&r, 1, "measure")
            .icr_write_exits
            .as_ref()
            .map(|i| i.exits),
        Some(0)
    );
}

#[test]
fn x2apic_icr_write_exits_equal_icr_writes_and_ipis_sent() {
    icr_exits_match_icr_writes(
        ApicMode::X2apic,
        "x2apic_icr_write_exits_equal_icr_writes_and_ipis_sent",
    );
}

#[test]
fn xapic_icr_write_exits_equal_icr_writes_and_ipis_sent() {
    icr_exits_match_icr_writes(
        ApicMode::Xapic,
        "xapic_icr_write_exits_equal_icr_writes_and_ipis_sent",
    );
}

#[test]
fn idle_phase_has_no_icr_exits_while_its_neighbour_has_n() {
    let test = "idle_phase_has_no_icr_exits_while_its_neighbour_has_n";
    if !kvm_available(test) {
        return;
    }
    let r = run(ApicMode::X2apic, TargetWait::Spin, None);
    let (idle, measure) = (phase(&r, 0, "idle"), phase(&r, 0, "measure"));
    assert_eq!(idle.guest.icr_writes, 0);
    assert!(measure.guest.icr_writes >= ITERATIONS);
    if tracepoints_available(&r, test) {
        // Nothing per exit is attached before the uncounted part ends: the
        // idle phase, which comes before it, has no such figure, not a 0.
        assert_eq!(idle.icr_write_exits, None);
        assert!(idle.tracepoints.is_empty(), "{:?}", idle.tracepoints);
        assert_eq!(
            measure.icr_write_exits.as_ref().map(|i| i.exits),
            Some(measure.guest.icr_writes)
        );
    }
    // Each window holds exactly one userspace exit of the payload's own: its end marker.
    assert_eq!(idle.exits.total(), 1);
    assert_eq!(measure.exits.total(), 1);
}

#[test]
fn kvm_stats_are_windowed_by_phase() {
    if !kvm_available("kvm_stats_are_windowed_by_phase") {
        return;
    }
    let r = run(ApicMode::Xapic, TargetWait::Halt, None);
    let stats = |name: &str, phase_name: &str| {
        *phase(&r, 1, phase_name)
            .kvm_stats
            .get(name)
            .unwrap_or_else(|| panic!("no stat {name}"))
    };
    let received = phase(&r, 1, "measure").guest.ipis_received;
    assert!(received >= ITERATIONS);
    // Every IPI is injected at least once: a hardware KVM re-injects an
    // interrupt whose delivery an exit cancelled (svm/vmx cancel_injection;
    // seen once in 150 in the lab) and counts it again. The target halts
    // before most IPIs, and the idle phase neither halts nor takes interrupts.
    let injections = stats("irq_injections", "measure");
    assert!(
        injections >= received && injections <= received + received / 20 + 1,
        "irq_injections {injections} for {received} IPIs"
    );
    let halts = stats("halt_exits", "measure");
    assert!(
        halts <= received && halts >= received / 2,
        "halt_exits {halts} for {received} IPIs"
    );
    assert_eq!(stats("halt_exits", "idle"), 0);
    assert_eq!(stats("irq_injections", "idle"), 0);
    // As in the measure phase: an interrupt whose delivery faulted (shadow
    // paging: npt=0) is injected again.
    let warm = phase(&r, 1, "warmup").guest.ipis_received;
    let warm_injections = stats("irq_injections", "warmup");
    assert!(
        warm_injections >= warm && warm_injections <= warm + warm / 20 + 1,
        "warmup irq_injections {warm_injections} for {warm} IPIs"
    );
}

#[test]
fn run_succeeds_and_says_why_when_tracefs_is_missing() {
    if !kvm_available("run_succeeds_and_says_why_when_tracefs_is_missing") {
        return;
    }
    let r = run(
        ApicMode::X2apic,
        TargetWait::Spin,
        Some("/nonexistent/tracefs"),
    );
    let s = r.vcpus[0]
        .sources
        .iter()
        .find(|s| s.source == ipivmm_analysis::results::source::Source::Tracepoints)
        .unwrap();
    assert!(!s.available);
    let detail = s.detail.as_deref().unwrap();
    assert!(
        detail.contains("/nonexistent/tracefs") && detail.contains("--mount-tracefs"),
        "{detail}"
    );
    let measure = phase(&r, 0, "measure");
    assert!(
        measure.icr_write_exits.is_none(),
        "no figure is better than a made-up one"
    );
    assert!(measure.tracepoints.is_empty());
    assert!(!measure.kvm_stats.is_empty(), "other sources still count");
}
