//! Runs the watchdog stops, and what their one line tells the user to
//! change (issue 20, case 19): the hint names the real cause — a vCPU
//! waiting for a SIPI, the warm-up, the halt settle time — not always
//! "raise --timeout or lower --iterations".
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::TargetWait;
use ipivmm_analysis::results::{RunStatus, VcpuEnd};
use ipivmm_tests::{code_payload, kvm_available, run_ok};
use std::time::Duration;

/// The hint of a timed-out run (the test fails on any other end).
fn hint_of(config: &VmConfig) -> (String, String) {
    let r = run_ok(config);
    match &r.status {
        RunStatus::TimedOut { hint, .. } => (hint.clone(), r.status.text()),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// `vcpu0: INIT to APIC ID 1 (xAPIC), then spin; vcpu1: spin`:
///
/// ```text
///   test esi, esi
///   jnz 2f
///   mov ebx, 0xfee00000
///   mov dword ptr [rbx+0xf0], 0x1ff
///   mov dword ptr [rbx+0x310], 0x01000000
///   mov dword ptr [rbx+0x300], 0x4500
/// 2: pause
///   jmp 2b
/// ```
const INIT_TO_VCPU1: &[u8] = &[
    0x85, 0xf6, 0x75, 0x23, 0xbb, 0x00, 0x00, 0xe0, 0xfe, 0xc7, 0x83, 0xf0, 0x00, 0x00, 0x00, 0xff,
    0x01, 0x00, 0x00, 0xc7, 0x83, 0x10, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xc7, 0x83, 0x00,
    0x03, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0xf3, 0x90, 0xeb, 0xfc,
];

#[test]
fn a_vcpu_waiting_for_a_sipi_is_named_as_the_cause() {
    if !kvm_available("a_vcpu_waiting_for_a_sipi_is_named_as_the_cause") {
        return;
    }
    let config = VmConfig {
        payload: code_payload(INIT_TO_VCPU1),
        timeout: Duration::from_secs(2),
        tracepoints: false,
        ..VmConfig::default()
    };
    let r = run_ok(&config);
    let RunStatus::TimedOut { hint, .. } = &r.status else {
        panic!("expected a timeout: {:?}", r.status)
    };
    assert!(
        matches!(
            r.vcpus[1].end,
            Some(VcpuEnd::Stopped {
                wait_for_sipi: true,
                ..
            })
        ),
        "{:?}",
        r.vcpus[1].end
    );
    assert!(
        hint.starts_with("vcpu1 received an INIT and waits for a SIPI"),
        "{hint}"
    );
    assert!(r.status.text().contains("no timeout is long enough"));
}

#[test]
fn a_warmup_that_outlasts_the_timeout_is_named_as_the_cause() {
    if !kvm_available("a_warmup_that_outlasts_the_timeout_is_named_as_the_cause") {
        return;
    }
    let config = VmConfig {
        warmup: 1_000_000_000,
        timeout: Duration::from_secs(2),
        tracepoints: false,
        ..VmConfig::default()
    };
    let (hint, text) = hint_of(&config);
    assert!(
        hint.contains("stopped in the warm-up") && hint.contains("lower --warmup"),
        "{text}"
    );
}

#[test]
fn a_settle_time_that_fills_the_timeout_is_named_as_the_cause() {
    if !kvm_available("a_settle_time_that_fills_the_timeout_is_named_as_the_cause") {
        return;
    }
    let config = VmConfig {
        target_wait: TargetWait::Halt,
        halt_settle: Duration::from_secs(1),
        iterations: 10,
        warmup: 2,
        timeout: Duration::from_secs(3),
        tracepoints: false,
        ..VmConfig::default()
    };
    let (hint, text) = hint_of(&config);
    assert!(hint.contains("lower --halt-settle-ns"), "{text}");
}

#[test]
fn too_many_iterations_keep_the_default_hint() {
    if !kvm_available("too_many_iterations_keep_the_default_hint") {
        return;
    }
    let config = VmConfig {
        iterations: 50_000_000,
        warmup: 1,
        memory_bytes: 1 << 30,
        timeout: Duration::from_secs(2),
        tracepoints: false,
        ..VmConfig::default()
    };
    let (hint, text) = hint_of(&config);
    assert!(hint.is_empty(), "{hint}");
    assert!(
        text.contains("raise --timeout or lower --iterations"),
        "{text}"
    );
}
