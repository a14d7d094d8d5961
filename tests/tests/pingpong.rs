//! The built-in ping-pong workload boots and delivers every IPI, with 2 and
//! 4 vCPUs, xAPIC and x2APIC, spinning and halted targets.
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::{ApicMode, TargetWait, Workload};
use ipivmm_analysis::results::RunReport;

use ipivmm_tests::{kvm_available, run_ok};
use std::time::Duration;

const ITERATIONS: u64 = 120;
const WARMUP: u64 = 10;

fn pingpong(vcpus: usize, apic: ApicMode, target: TargetWait) -> RunReport {
    let config = VmConfig {
        vcpus,
        apic,
        target_wait: target,
        workload: Workload::Pingpong,
        iterations: ITERATIONS,
        warmup: WARMUP,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(120)),
        ..Default::default()
    };
    let r = run_ok(&config);
    assert!(r.succeeded(), "{:?}\nserial: {}", r.status, r.serial_tail);
    r
}

fn check(r: &RunReport) {
    let measure = |v: usize| r.vcpus[v].phase_named("measure").expect("measure phase");
    let sent: u64 = (0..r.vcpus.len()).map(|v| measure(v).guest.ipis_sent).sum();
    let received: u64 = (0..r.vcpus.len())
        .map(|v| measure(v).guest.ipis_received)
        .sum();
    assert!(sent >= ITERATIONS, "sent {sent}");
    assert_eq!(
        received, sent,
        "every IPI sent in the phase is received in it"
    );
    // Only vCPU 0 sends; the targets share the round-robin.
    assert_eq!(measure(0).guest.ipis_sent, sent);
    let targets = r.vcpus.len() as u64 - 1;
    for v in 1..r.vcpus.len() {
        let got = measure(v).guest.ipis_received;
        assert!(got >= ITERATIONS / targets, "vcpu{v} received {got}");
    }
    let lat = measure(0)
        .latency
        .as_ref()
        .expect("vCPU 0 records round trips");
    assert_eq!(lat.count, ITERATIONS);
    assert!(lat.min > 0 && lat.min <= lat.p50 && lat.p50 <= lat.p99 && lat.p99 <= lat.max);
    assert!(r.timings.first_message_ns.is_some());
}

#[test]
fn two_vcpus_xapic_spinning_target() {
    if kvm_available("two_vcpus_xapic_spinning_target") {
        check(&pingpong(2, ApicMode::Xapic, TargetWait::Spin));
    }
}

#[test]
fn two_vcpus_x2apic_spinning_target() {
    if kvm_available("two_vcpus_x2apic_spinning_target") {
        check(&pingpong(2, ApicMode::X2apic, TargetWait::Spin));
    }
}

#[test]
fn two_vcpus_xapic_halted_target() {
    if kvm_available("two_vcpus_xapic_halted_target") {
        check(&pingpong(2, ApicMode::Xapic, TargetWait::Halt));
    }
}

#[test]
fn two_vcpus_x2apic_halted_target() {
    if kvm_available("two_vcpus_x2apic_halted_target") {
        check(&pingpong(2, ApicMode::X2apic, TargetWait::Halt));
    }
}

#[test]
fn four_vcpus_xapic_round_robin() {
    if kvm_available("four_vcpus_xapic_round_robin") {
        check(&pingpong(4, ApicMode::Xapic, TargetWait::Halt));
    }
}

#[test]
fn four_vcpus_x2apic_round_robin() {
    if kvm_available("four_vcpus_x2apic_round_robin") {
        check(&pingpong(4, ApicMode::X2apic, TargetWait::Spin));
    }
}
