//! The headline metrics (per operation, per delivered IPI) against the
//! guest's own counts: for every workload, IPIs per operation is the
//! workload's fan-out (1 for a round trip, N-1 for a broadcast...), the
//! end-of-phase wake-ups the payload records are exactly the IPIs sent
//! outside any operation, and per-operation exits are per-IPI exits times
//! the fan-out. Runs on any KVM (the counts are the guest's and KVM's).
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::{ApicMode, TargetWait, Workload};
use ipivmm_tests::{kvm_available, run_ok};

const VCPUS: usize = 4;
const ITERS: u64 = 12;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn metrics_per_operation_and_per_ipi_agree_with_the_guest_counts() {
    if !kvm_available("metrics_per_operation_and_per_ipi_agree_with_the_guest_counts") {
        return;
    }
    // The fan-out and the operations per iteration come from the one
    // description of each workload (`ipivmm_abi::Workload::spec`).
    let workloads = [
        Workload::Pingpong,
        Workload::Broadcast,
        Workload::Multicast,
        Workload::SelfIpi,
        Workload::AllToAll,
    ];
    for workload in workloads {
        let spec = workload.spec();
        let fan_out = spec.fan_out.ipis(VCPUS, &[0; 8]) as f64;
        let ops = ITERS * spec.operations_per_iteration.of(VCPUS);
        let c = VmConfig {
            vcpus: VCPUS,
            apic: ApicMode::X2apic,
            workload,
            target_wait: TargetWait::Halt,
            iterations: ITERS,
            warmup: 1,
            ..Default::default()
        };
        let what = workload.name();
        let r = run_ok(&c);
        assert!(r.succeeded(), "{what}: {:?}", r.status);
        let s = r.summary();
        let phases: Vec<_> = r
            .vcpus
            .iter()
            .map(|v| v.phase_named("measure").expect("measure phase"))
            .collect();
        let sent: u64 = phases.iter().map(|p| p.guest.ipis_sent).sum();
        let received: u64 = phases.iter().map(|p| p.guest.ipis_received).sum();
        assert_eq!(received, sent, "{what}: every IPI delivered");
        assert_eq!(s.operations, ops, "{what}: one sample per operation");
        // The wake-ups are what the guest sent beyond its operations.
        assert_eq!(
            s.wake_ipis as f64,
            sent as f64 - ops as f64 * fan_out,
            "{what}: wake-ups"
        );
        let k = s.ipis_per_operation().expect("IPIs per operation");
        assert!(close(k, fan_out), "{what}: {k} IPIs per operation");
        let (per_op, per_ipi) = (
            s.exits_per_operation().expect("exits per operation"),
            s.exits_per_ipi().expect("exits per IPI"),
        );
        assert!(
            close(per_op, per_ipi * fan_out),
            "{what}: {per_op} vs {per_ipi}"
        );
        let exits = s.exits.as_ref().map_or(0, |e| e.total);
        assert!(close(per_ipi, exits as f64 / received as f64), "{what}");
        // ICR writes per operation from the guest: one per broadcast, one per
        // target for a physical multicast, one per unicast.
        let icr: u64 = phases.iter().map(|p| p.guest.icr_writes).sum();
        let icr_per_op = icr as f64 / received as f64 * k;
        let want = if workload == Workload::Multicast {
            fan_out
        } else {
            1.0
        };
        assert!(
            close(icr_per_op, want),
            "{what}: {icr_per_op} ICR writes per operation"
        );
        // The JSON carries the same figures.
        let doc = ipivmm_analysis::results::Document::new(vec![r], Vec::new());
        let json: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
        let m = &json["runs"][0]["metrics"];
        assert_eq!(m["operation"], workload.operation(), "{what}");
        assert_eq!(m["ipis_per_operation"].as_f64(), Some(k), "{what}");
        assert_eq!(m["fan_out"].as_f64(), Some(fan_out), "{what}");
    }
}

#[test]
fn halting_barrier_wakeups_are_counted_apart_from_the_workloads_icr_writes() {
    let test = "halting_barrier_wakeups_are_counted_apart_from_the_workloads_icr_writes";
    if !kvm_available(test) {
        return;
    }
    // More vCPUs than 4 per host CPU: the payload's barriers halt, and the
    // last vCPU to arrive wakes the others with an ICR write of its own.
    let host_cpus = ipivmm_analysis::mode::levers::allowed_cpus().len().max(1);
    let vcpus = (4 * host_cpus + 4).min(64);
    let c = VmConfig {
        vcpus,
        apic: ApicMode::X2apic,
        workload: Workload::Broadcast,
        target_wait: TargetWait::Halt,
        iterations: 6,
        warmup: 1,
        ..Default::default()
    };
    let r = run_ok(&c);
    assert!(r.succeeded(), "{:?}", r.status);
    let phases: Vec<_> = r
        .vcpus
        .iter()
        .map(|v| v.phase_named("measure").expect("measure phase"))
        .collect();
    let barrier: u64 = phases.iter().map(|p| p.guest.barrier_icr_writes).sum();
    let workload: u64 = phases.iter().map(|p| p.guest.icr_writes).sum();
    assert!(
        barrier > 0,
        "{vcpus} vCPUs on {host_cpus} CPUs: halting barriers expected"
    );
    // 6 broadcasts and the wake-up, one ICR write each.
    assert_eq!(workload, 7);
    let s = r.summary();
    assert_eq!(s.barrier_icr_writes, barrier);
    if let Some(exits) = s.icr_write_exits {
        // KVM handled every write, the barriers' too (all exit without
        // IPI virtualization); the metric keeps the workload's share: 7
        // writes for 6 broadcasts and the wake-up, one write each.
        let all = workload + barrier;
        assert!(exits <= all, "{exits} ICR-write exits for {all} writes");
        let per_op = s.icr_exits_per_operation().expect("per operation");
        let want = exits as f64 / all as f64;
        assert!(
            close(per_op, want),
            "{per_op} ICR-write exits per broadcast, want {want}"
        );
    } else {
        eprintln!(
            "{test}: no ICR-write exit counter here (tracepoints); checked the guest counts only"
        );
    }
}
