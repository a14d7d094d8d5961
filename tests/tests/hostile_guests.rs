//! Guests that misbehave on purpose: a phase that never ends, pointers
//! beyond RAM inside otherwise valid control messages, IPIs to APIC IDs that
//! do not exist, and interrupt storms. Each run must end on its own (fault,
//! completion or watchdog, never a hang), name the vCPU and what it did, keep
//! the phases that finished before, and not count as a success (so `ipivmm
//! run` exits non-zero).
//!
//! Triple faults and instructions KVM cannot emulate are covered by
//! `guest_faults.rs` (`triple_fault_names_the_vcpu_and_rip`,
//! `internal_error_reports_the_suberror`), as is a control-port write whose
//! message address itself is outside RAM.
use ipivmm::config::VmConfig;
use ipivmm_abi::PAYLOAD_START;
use ipivmm_analysis::mode::{ApicMode, Irqchip, Workload};
use ipivmm_analysis::results::VcpuEnd;
use ipivmm_analysis::results::{RunReport, RunStatus};
use ipivmm_tests::{code_payload, hostile, kvm_available, run_ok};
use std::time::{Duration, Instant};

fn config(code: &[u8], vcpus: usize, timeout_s: u64) -> VmConfig {
    VmConfig {
        vcpus,
        workload: Workload::SelfIpi,
        payload: code_payload(code),
        timeout: Duration::from_secs(timeout_s),
        tracepoints: false,
        ..Default::default()
    }
}

/// vCPU `v` kept exactly the phases `ids`, in order, with these names.
fn assert_phases(r: &RunReport, v: usize, want: &[(u32, &str)]) {
    let got: Vec<(u32, &str)> = r.vcpus[v]
        .phases
        .iter()
        .map(|p| (p.id, p.name.as_str()))
        .collect();
    assert_eq!(got, want, "phases of vcpu{v}");
}

fn fault_reason(r: &RunReport, v: usize) -> (String, u64) {
    match &r.vcpus[v].end {
        Some(VcpuEnd::Fault { reason, registers }) => {
            (reason.clone(), registers.as_ref().map_or(0, |r| r.rip))
        }
        other => panic!("vcpu{v} ended {other:?}, expected a fault"),
    }
}

#[test]
fn phase_that_never_ends_is_stopped_by_the_watchdog_and_earlier_phase_kept() {
    let name = "phase_that_never_ends_is_stopped_by_the_watchdog_and_earlier_phase_kept";
    if !kvm_available(name) {
        return;
    }
    let started = Instant::now();
    let r = run_ok(&config(hostile::PHASE_NEVER_ENDS, 1, 1));
    let took = started.elapsed();
    match &r.status {
        RunStatus::TimedOut { after_s, stuck, .. } => {
            assert_eq!(*after_s, 1);
            assert!(stuck.starts_with("vcpu0 at rip=0x"), "{stuck}");
        }
        s => panic!("status {s:?}"),
    }
    assert!(!r.succeeded());
    assert!(
        matches!(
            r.vcpus[0].end,
            Some(VcpuEnd::Stopped {
                registers: Some(_),
                ..
            })
        ),
        "{:?}",
        r.vcpus[0].end
    );
    // Phase 0 ended before the hang and is kept; phase 1 never ended.
    assert_phases(&r, 0, &[(0, "first")]);
    assert!(
        took < ipivmm_testkit::scaled(Duration::from_secs(10)),
        "watchdog of 1 s took {took:?}"
    );
}

#[test]
fn name_pointer_beyond_ram_is_rejected_and_earlier_phase_kept() {
    let name = "name_pointer_beyond_ram_is_rejected_and_earlier_phase_kept";
    if !kvm_available(name) {
        return;
    }
    let r = run_ok(&config(hostile::BAD_NAME_POINTER, 1, 10));
    let (reason, rip) = fault_reason(&r, 0);
    assert!(
        reason.contains("name")
            && reason.contains("0x7ff000000000")
            && reason.contains("outside guest RAM"),
        "{reason}"
    );
    assert!(
        rip > PAYLOAD_START && rip < PAYLOAD_START + 0x100,
        "rip {rip:#x} is right after the `out`"
    );
    match &r.status {
        RunStatus::Failed { reason } => {
            assert!(reason.starts_with("vcpu0: control port:"), "{reason}")
        }
        s => panic!("status {s:?}"),
    }
    assert_eq!(r.vcpus[0].rejected_messages.len(), 1);
    assert_phases(&r, 0, &[(0, "first")]);
}

#[test]
fn samples_pointer_beyond_ram_is_rejected_and_earlier_phase_kept() {
    let name = "samples_pointer_beyond_ram_is_rejected_and_earlier_phase_kept";
    if !kvm_available(name) {
        return;
    }
    let r = run_ok(&config(hostile::BAD_SAMPLES_POINTER, 1, 10));
    let (reason, _) = fault_reason(&r, 0);
    assert!(
        reason.contains("samples")
            && reason.contains("0x100000000")
            && reason.contains("128 bytes outside guest RAM"),
        "{reason}"
    );
    assert!(!r.succeeded());
    assert_phases(&r, 0, &[(0, "first")]);
    assert!(
        r.vcpus[0].phases[0].samples.is_empty(),
        "no sample read from outside RAM"
    );
}

/// IPIs to nonexistent APIC IDs: KVM (in-kernel LAPIC) drops them. The run
/// completes, the phase around them is kept, nothing hangs.
fn ipis_to_nowhere(test: &str, code: &[u8], apic: ApicMode, irqchip: Irqchip) {
    if !kvm_available(test) {
        return;
    }
    let cfg = VmConfig {
        apic,
        irqchip,
        ..config(code, 2, ipivmm_testkit::scaled_secs(20))
    };
    let started = Instant::now();
    let r = run_ok(&cfg);
    assert_eq!(
        r.status,
        RunStatus::Completed,
        "{:?}; serial: {}",
        r.status,
        r.serial_tail
    );
    assert!(started.elapsed() < ipivmm_testkit::scaled(Duration::from_secs(20)));
    assert_phases(&r, 0, &[(0, "nowhere")]);
    for v in &r.vcpus {
        assert!(
            matches!(v.end, Some(VcpuEnd::Done { status: 0, .. })),
            "{:?}",
            v.end
        );
        assert!(v.rejected_messages.is_empty());
    }
}

#[test]
fn xapic_ipis_to_nonexistent_apic_ids_are_dropped() {
    ipis_to_nowhere(
        "xapic_ipis_to_nonexistent_apic_ids_are_dropped",
        hostile::IPI_NOWHERE_XAPIC,
        ApicMode::Xapic,
        Irqchip::Kernel,
    );
}

#[test]
fn x2apic_ipis_to_nonexistent_apic_ids_are_dropped() {
    ipis_to_nowhere(
        "x2apic_ipis_to_nonexistent_apic_ids_are_dropped",
        hostile::IPI_NOWHERE_X2APIC,
        ApicMode::X2apic,
        Irqchip::Kernel,
    );
}

#[test]
fn split_irqchip_ipis_to_nonexistent_apic_ids_are_dropped() {
    ipis_to_nowhere(
        "split_irqchip_ipis_to_nonexistent_apic_ids_are_dropped",
        hostile::IPI_NOWHERE_XAPIC,
        ApicMode::Xapic,
        Irqchip::Split,
    );
}

/// An interrupt storm that outlasts the watchdog: the built-in payload's
/// flood (vCPU 0 fires IPIs without waiting) and self-IPI workloads with far
/// more iterations than fit in the timeout. The watchdog stops every vCPU,
/// the phases before the storm (idle, warmup) are kept.
fn storm(test: &str, workload: Workload, vcpus: usize) {
    if !kvm_available(test) {
        return;
    }
    let cfg = VmConfig {
        vcpus,
        workload,
        iterations: 100_000_000,
        warmup: 100,
        memory_bytes: 2048 << 20,
        timeout: Duration::from_secs(2),
        tracepoints: false,
        ..Default::default()
    };
    let started = Instant::now();
    let r = run_ok(&cfg);
    let took = started.elapsed();
    match &r.status {
        RunStatus::TimedOut { after_s, stuck, .. } => {
            assert_eq!(*after_s, 2);
            for i in 0..vcpus {
                assert!(stuck.contains(&format!("vcpu{i} at rip=")), "{stuck}");
            }
        }
        s => panic!("status {s:?}"),
    }
    assert!(
        took < ipivmm_testkit::scaled(Duration::from_secs(15)),
        "a 2 s watchdog took {took:?}"
    );
    for v in &r.vcpus {
        assert!(
            matches!(v.end, Some(VcpuEnd::Stopped { .. })),
            "vcpu{}: {:?}",
            v.index,
            v.end
        );
        let ids: Vec<u32> = v.phases.iter().map(|p| p.id).collect();
        assert_eq!(ids, [0, 1], "vcpu{} kept idle and warmup", v.index);
    }
}

#[test]
fn flood_storm_is_stopped_by_the_watchdog() {
    storm("flood_storm_is_stopped_by_the_watchdog", Workload::Flood, 2);
}

#[test]
fn self_ipi_storm_is_stopped_by_the_watchdog() {
    storm(
        "self_ipi_storm_is_stopped_by_the_watchdog",
        Workload::SelfIpi,
        1,
    );
}
