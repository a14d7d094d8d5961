//! Scale: x2APIC VMs beyond the xAPIC ID space (300 vCPUs, APIC IDs up to
//! 299) boot and deliver every IPI they send, on KVM's LAPIC (kernel and
//! split irqchips, KVM_CAP_X2APIC_API with 32-bit IDs and no broadcast
//! quirk) and on ipivmm's own (user irqchip). Oversubscribed here (2 host
//! CPUs), so targets halt between IPIs and the payload's barriers halt too
//! (`BOOT_FLAG_HALTING_BARRIERS`); iteration counts are small.
use ipivmm::config::VmConfig;
use ipivmm_analysis::mode::ExitReasons;
use ipivmm_analysis::mode::{ApicMode, Irqchip, TargetWait, Workload};
use ipivmm_analysis::results::RunReport;
use ipivmm_tests::{kvm_available, run_ok, skip, Need};
use std::time::Duration;

const VCPUS: usize = 300;

/// Whether this KVM takes `VCPUS` vCPUs (reports the skip if not).
fn kvm_takes_vcpus(test: &str) -> bool {
    if !kvm_available(test) {
        return false;
    }
    let max = ipivmm::host::KvmInfo::open(std::path::Path::new("/dev/kvm"))
        .map(|k| k.max_vcpus)
        .unwrap_or(0);
    if max < VCPUS {
        skip(
            test,
            Need::Setup,
            &format!(
                "this KVM allows {max} vCPUs per VM (KVM_CAP_MAX_VCPUS), the test needs {VCPUS}"
            ),
        );
        return false;
    }
    true
}

fn config(irqchip: Irqchip, workload: Workload, iterations: u64) -> VmConfig {
    VmConfig {
        vcpus: VCPUS,
        memory_bytes: ipivmm::VmConfig::default_memory_bytes(VCPUS),
        irqchip,
        apic: ApicMode::X2apic,
        workload,
        target_wait: TargetWait::HaltImmediate,
        iterations,
        warmup: 1,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(120)),
        // KVM stats only: a tracepoint set per vCPU is 300 times the cost.
        tracepoints: false,
        exit_reasons: ExitReasons::Off,
        ..Default::default()
    }
}

/// (sent, received) over every vCPU's measure phase, after checking that
/// the run completed and every vCPU closed that phase.
fn delivered(r: &RunReport, what: &str) -> (u64, u64) {
    assert!(
        r.succeeded(),
        "{what}: {:?}\nserial: {}",
        r.status,
        r.serial_tail
    );
    assert_eq!(r.vcpus.len(), VCPUS, "{what}");
    let phases: Vec<_> = r
        .vcpus
        .iter()
        .map(|v| {
            v.phase_named("measure")
                .unwrap_or_else(|| panic!("{what}: vcpu{} has no measure phase", v.index))
        })
        .collect();
    let sent = phases.iter().map(|p| p.guest.ipis_sent).sum();
    let received = phases.iter().map(|p| p.guest.ipis_received).sum();
    (sent, received)
}

fn apic_ids_go_past_255(r: &RunReport, what: &str) {
    let ids: Vec<u32> = r.vcpus.iter().map(|v| v.apic_id).collect();
    let want: Vec<u32> = (0..VCPUS as u32).collect();
    assert_eq!(ids, want, "{what}: vCPU i has x2APIC ID i");
}

#[test]
fn x2apic_broadcast_at_300_vcpus_reaches_every_vcpu() {
    if !kvm_takes_vcpus("x2apic_broadcast_at_300_vcpus_reaches_every_vcpu") {
        return;
    }
    const ITERS: u64 = 3;
    for irqchip in [Irqchip::Kernel, Irqchip::Split, Irqchip::User] {
        let what = format!("broadcast {VCPUS}v {}/x2apic", irqchip.name());
        let r = run_ok(&config(irqchip, Workload::Broadcast, ITERS));
        let (sent, received) = delivered(&r, &what);
        apic_ids_go_past_255(&r, &what);
        assert_eq!(received, sent, "{what}: delivered == sent");
        // ITERS broadcasts plus the wake-up that ends the phase, each to
        // every vCPU but the sender.
        let others = VCPUS as u64 - 1;
        assert_eq!(sent, (ITERS + 1) * others, "{what}");
        for v in &r.vcpus[1..] {
            let got = v.phase_named("measure").unwrap().guest.ipis_received;
            assert_eq!(
                got,
                ITERS + 1,
                "{what}: vcpu{} (APIC ID {})",
                v.index,
                v.apic_id
            );
        }
        let samples = r.vcpus[0]
            .phase_named("measure")
            .and_then(|p| p.latency.as_ref())
            .map_or(0, |l| l.count);
        assert_eq!(samples, ITERS, "{what}: one sample per broadcast");
        // The headline metrics: a broadcast delivers 299 IPIs; the wake-up
        // that ends the phase is counted apart.
        let s = r.summary();
        assert_eq!((s.operations, s.wake_ipis), (ITERS, others), "{what}");
        assert_eq!(s.ipis_per_operation(), Some(others as f64), "{what}");
    }
}

#[test]
fn x2apic_pingpong_at_300_vcpus_reaches_ids_255_and_above_alone() {
    if !kvm_takes_vcpus("x2apic_pingpong_at_300_vcpus_reaches_ids_255_and_above_alone") {
        return;
    }
    // Round robin over vCPUs 1..300: each target exactly once, APIC ID 255
    // included (with KVM's broadcast quirk on, that IPI would reach all).
    let iters = VCPUS as u64 - 1;
    let what = format!("pingpong {VCPUS}v kernel/x2apic");
    let r = run_ok(&config(Irqchip::Kernel, Workload::Pingpong, iters));
    let (sent, received) = delivered(&r, &what);
    apic_ids_go_past_255(&r, &what);
    assert_eq!(received, sent, "{what}: delivered == sent");
    for v in &r.vcpus[1..] {
        let got = v.phase_named("measure").unwrap().guest.ipis_received;
        // One measured IPI and one end-of-phase wake-up each.
        assert_eq!(got, 2, "{what}: vcpu{} (APIC ID {})", v.index, v.apic_id);
    }
}

#[test]
fn x2apic_logical_multicast_at_300_vcpus_covers_every_cluster() {
    if !kvm_takes_vcpus("x2apic_logical_multicast_at_300_vcpus_covers_every_cluster") {
        return;
    }
    const ITERS: u64 = 2;
    let mut c = config(Irqchip::Kernel, Workload::Multicast, ITERS);
    // params[0] = 0: every other vCPU; params[1] = 1: x2APIC cluster logical
    // destinations (19 clusters of 16 IDs for IDs 0..300).
    c.params[1] = 1;
    let what = format!("multicast logical {VCPUS}v kernel/x2apic");
    let r = run_ok(&c);
    let (sent, received) = delivered(&r, &what);
    assert_eq!(received, sent, "{what}: delivered == sent");
    let sender = r.vcpus[0].phase_named("measure").unwrap();
    let clusters = (VCPUS as u64).div_ceil(16);
    // ITERS multicasts of one ICR write per cluster, then the physical
    // end-of-phase wake-up of each target.
    assert_eq!(
        sender.guest.icr_writes,
        ITERS * clusters + (VCPUS as u64 - 1),
        "{what}"
    );
}
