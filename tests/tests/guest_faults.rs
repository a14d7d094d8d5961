//! A guest that faults, spins or sends garbage ends the run cleanly with a
//! report naming the vCPU, its registers and what it did.
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::Workload;
use ipivmm_analysis::results::{RunStatus, VcpuEnd};
use ipivmm_tests::{code, code_payload, kvm_available, run_ok};
use std::time::Duration;

fn config(code: &[u8], vcpus: usize, timeout_s: u64) -> VmConfig {
    VmConfig {
        vcpus,
        workload: Workload::SelfIpi,
        payload: code_payload(code),
        timeout: Duration::from_secs(timeout_s),
        ..Default::default()
    }
}

/// The fault's reason and rip; rip is None only where KVM reset the vCPU on
/// shutdown (kvm_amd), which the reason must then say.
fn fault_of(r: &ipivmm_analysis::results::RunReport, vcpu: usize) -> (String, Option<u64>) {
    match &r.vcpus[vcpu].end {
        Some(VcpuEnd::Fault { reason, registers }) => {
            let rip = registers.as_ref().map(|r| r.rip);
            assert!(
                rip.is_some() || reason.contains("KVM reset the vCPU on shutdown"),
                "vcpu{vcpu}: no registers and no reason why: {reason}"
            );
            (reason.clone(), rip)
        }
        other => panic!("vcpu{vcpu} ended {other:?}, expected a fault"),
    }
}

/// The fault happened at `expected`, where the registers survived it.
fn assert_rip(rip: Option<u64>, expected: u64) {
    if let Some(rip) = rip {
        assert_eq!(rip, expected);
    }
}

#[test]
fn triple_fault_names_the_vcpu_and_rip() {
    if !kvm_available("triple_fault_names_the_vcpu_and_rip") {
        return;
    }
    let r = run_ok(&config(
        code::TRIPLE_FAULT,
        1,
        ipivmm_testkit::scaled_secs(10),
    ));
    let (reason, rip) = fault_of(&r, 0);
    assert!(reason.contains("triple fault"), "{reason}");
    assert_rip(rip, ipivmm_abi::PAYLOAD_START);
    match &r.status {
        RunStatus::Failed { reason } => {
            assert!(reason.starts_with("vcpu0: guest triple fault"), "{reason}")
        }
        s => panic!("status {s:?}"),
    }
}

#[test]
fn internal_error_reports_the_suberror() {
    if !kvm_available("internal_error_reports_the_suberror") {
        return;
    }
    let r = run_ok(&config(code::SSE, 1, ipivmm_testkit::scaled_secs(10)));
    let (reason, rip) = fault_of(&r, 0);
    // Under an emulating KVM (kvm_pvm) this is an internal error; on hardware
    // KVM the SSE instruction runs natively with CR4.OSFXSR clear -> #UD -> triple fault.
    assert!(
        reason.contains("internal error, suberror 1") || reason.contains("triple fault"),
        "{reason}"
    );
    assert_rip(rip, ipivmm_abi::PAYLOAD_START);
}

#[test]
fn garbage_on_the_control_port_is_rejected_with_the_address() {
    if !kvm_available("garbage_on_the_control_port_is_rejected_with_the_address") {
        return;
    }
    let r = run_ok(&config(
        code::GARBAGE_CONTROL,
        1,
        ipivmm_testkit::scaled_secs(10),
    ));
    let (reason, _) = fault_of(&r, 0);
    assert!(
        reason.contains("0xdeadbeef") && reason.contains("outside guest RAM"),
        "{reason}"
    );
    assert_eq!(r.vcpus[0].rejected_messages.len(), 1);
}

#[test]
fn watchdog_stops_a_payload_that_never_finishes() {
    if !kvm_available("watchdog_stops_a_payload_that_never_finishes") {
        return;
    }
    let r = run_ok(&config(code::SPIN_FOREVER, 2, 1));
    match &r.status {
        RunStatus::TimedOut { after_s, stuck, .. } => {
            assert_eq!(*after_s, 1);
            assert!(
                stuck.contains("vcpu0 at rip=0x100000") && stuck.contains("vcpu1 at rip=0x100000"),
                "{stuck}"
            );
        }
        s => panic!("status {s:?}"),
    }
    for v in &r.vcpus {
        assert!(
            matches!(v.end, Some(VcpuEnd::Stopped { .. })),
            "{:?}",
            v.end
        );
    }
}

#[test]
fn one_faulting_vcpu_stops_the_others() {
    if !kvm_available("one_faulting_vcpu_stops_the_others") {
        return;
    }
    // vCPU 0 spins forever; every other vCPU triple-faults. The run must end
    // long before the watchdog, with vCPU 0 stopped by the host.
    let r = run_ok(&config(
        code::SPIN_ON_VCPU0_FAULT_ELSEWHERE,
        3,
        ipivmm_testkit::scaled_secs(60),
    ));
    assert!(
        matches!(r.status, RunStatus::Failed { .. }),
        "{:?}",
        r.status
    );
    assert!(
        matches!(r.vcpus[0].end, Some(VcpuEnd::Stopped { .. })),
        "{:?}",
        r.vcpus[0].end
    );
    // The first fault stops everyone, so a later vCPU may be stopped before it faults.
    let mut faults = 0;
    for v in &r.vcpus[1..] {
        if let Some(VcpuEnd::Fault { .. }) = v.end {
            let (reason, rip) = fault_of(&r, v.index);
            assert!(reason.contains("triple fault"), "{reason}");
            assert_rip(rip, ipivmm_abi::PAYLOAD_START + 5);
            faults += 1;
        } else {
            assert!(
                matches!(v.end, Some(VcpuEnd::Stopped { .. })),
                "{:?}",
                v.end
            );
        }
    }
    assert!(faults >= 1);
    assert!(
        r.timings.total_ns < 30_000_000_000,
        "ended by the fault, not the watchdog"
    );
}
