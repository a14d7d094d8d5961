//! The SDK's ICR builders end to end (issue 21, item 5): the hostile
//! payload's `SdkSend` case sends, with `ipi::Ipi` and the `Icr` builders,
//! every delivery mode the SDK sends without `unsafe` (fixed, lowest
//! priority, NMI) to every destination kind (physical, logical, the
//! shorthands), in xAPIC and x2APIC mode (and the xAPIC cluster model), on
//! the kernel irqchip and on ipivmm's own LAPIC model (`--irqchip user`).
//! Each run checks that the IPIs arrived (NMIs: that the hook ran,
//! `percpu::nmis_received`) and that the guest counters the host reports
//! add up: the sender's `icr_writes` and `ipis_sent` are what the SDK
//! counted per ICR, every IPI sent was taken, nothing else was.
//! INIT and start-up IPIs (the `InitThenHalts` / `InitSipiThenHalts`
//! cases, sent with the same builders) are counted too.
use ipivmm_analysis::mode::{ApicMode, Irqchip};
use ipivmm_analysis::results::PhaseResult;
use ipivmm_analysis::results::{RunReport, RunStatus};
use ipivmm_tests::cases::*;
use ipivmm_tests::{hostile_config, kvm_available, run_ok};

const MODES: [ApicMode; 2] = [ApicMode::Xapic, ApicMode::X2apic];
const CHIPS: [Irqchip; 2] = [Irqchip::Kernel, Irqchip::User];

/// Every (irqchip, APIC mode) pair.
fn setups() -> impl Iterator<Item = (Irqchip, ApicMode)> {
    CHIPS
        .into_iter()
        .flat_map(|chip| MODES.into_iter().map(move |apic| (chip, apic)))
}

/// A run of the hostile payload's `case` (`extra` its parameters) on
/// `vcpus` vCPUs under (`chip`, `apic`), which must complete (`what` names
/// it in the failure).
fn completed_run(
    case: Case,
    extra: &[u64],
    (chip, apic): (Irqchip, ApicMode),
    vcpus: usize,
    timeout_s: u64,
    what: &str,
) -> RunReport {
    // A watchdog for a run that must complete: stretched on a busy host.
    let mut c = hostile_config(case, vcpus, ipivmm_testkit::scaled_secs(timeout_s), extra);
    c.irqchip = chip;
    c.apic = apic;
    let r = run_ok(&c);
    assert_eq!(
        r.status,
        RunStatus::Completed,
        "{what} {chip} {apic:?}: {}",
        r.status.text()
    );
    r
}

/// One run of `kind` on `vcpus` vCPUs (`cluster`: the xAPIC cluster model).
fn run_kind(kind: SdkSend, setup: (Irqchip, ApicMode), vcpus: usize, cluster: bool) -> RunReport {
    let extra = [kind as u64, cluster as u64];
    completed_run(
        Case::SdkSend,
        &extra,
        setup,
        vcpus,
        120,
        &format!("{kind:?}"),
    )
}

fn measure(r: &RunReport, v: usize) -> &PhaseResult {
    r.vcpus[v]
        .phase_of(0, SDK_PHASE)
        .unwrap_or_else(|| panic!("vcpu{v}: no phase '{SDK_PHASE}'"))
}

fn record(p: &PhaseResult, name: &str) -> u64 {
    *p.records
        .get(name)
        .unwrap_or_else(|| panic!("no record {name}: {:?}", p.records))
}

/// What a run of `kind` must show: ICRs per round, vCPUs they reach per
/// round, and which vCPUs take each round's IPIs (`None`: one of the
/// others, chosen by KVM).
struct Want {
    icrs: u64,
    targets: u64,
    takers: Option<Vec<usize>>,
}

/// Checks the counters of a run of `kind` against `want`.
fn check(kind: SdkSend, (chip, apic): (Irqchip, ApicMode), r: &RunReport, want: &Want) {
    let what = format!("{kind:?} {chip} {apic:?}");
    let n = r.vcpus.len();
    let sender = measure(r, 0);
    assert_eq!(record(sender, "icrs"), want.icrs, "{what}: ICRs per round");
    assert_eq!(
        record(sender, "targets"),
        want.targets,
        "{what}: targets per round"
    );
    // The sender counted one ICR write per ICR and its targets per write.
    assert_eq!(sender.guest.icr_writes, SDK_ROUNDS * want.icrs, "{what}");
    assert_eq!(sender.guest.ipis_sent, SDK_ROUNDS * want.targets, "{what}");
    assert_eq!(sender.guest.barrier_icr_writes, 0, "{what}");
    let mut taken = 0;
    for v in 0..n {
        let p = measure(r, v);
        if v != 0 {
            assert_eq!(
                (p.guest.icr_writes, p.guest.ipis_sent),
                (0, 0),
                "{what}: vcpu{v} sent"
            );
        }
        let nmis = record(p, "nmis_received");
        let got = if kind.is_nmi() {
            nmis
        } else {
            p.guest.ipis_received
        };
        taken += got;
        if let Some(takers) = &want.takers {
            let expect = if takers.contains(&v) { SDK_ROUNDS } else { 0 };
            assert_eq!(got, expect, "{what}: vcpu{v} took");
        }
        if kind.is_nmi() {
            // NMIs: the hook ran, no vector was raised, nothing to EOI.
            assert_eq!(p.guest.ipis_received, 0, "{what}: vcpu{v}");
            assert_eq!(p.guest.eois, 0, "{what}: vcpu{v}");
        } else {
            assert_eq!(nmis, 0, "{what}: vcpu{v}");
            assert_eq!(p.guest.eois, p.guest.ipis_received, "{what}: vcpu{v}");
        }
        // Every handler entry is one of these IPIs: nothing else arrived.
        assert_eq!(p.guest.handler_entries, got, "{what}: vcpu{v}");
        assert_eq!(p.guest.spurious, 0, "{what}: vcpu{v}");
    }
    assert_eq!(taken, sender.guest.ipis_sent, "{what}: sent but not taken");
    let s = r.summary();
    assert_eq!(s.ipis, SDK_ROUNDS * want.targets, "{what}: headline IPIs");
    // Delivered is what the targets' handlers counted as received IPIs,
    // never filled in from sent: an NMI raises no vector and is no
    // received IPI (the payload records its NMIs itself).
    let delivered = if kind.is_nmi() { 0 } else { s.ipis };
    assert_eq!(s.ipis_delivered, delivered, "{what}: headline delivered");
    assert_eq!(
        s.icr_writes,
        SDK_ROUNDS * want.icrs,
        "{what}: headline ICR writes"
    );
}

fn others(n: usize) -> Vec<usize> {
    (1..n).collect()
}

#[test]
fn fixed_ipis_reach_every_destination_and_are_counted() {
    let name = "fixed_ipis_reach_every_destination_and_are_counted";
    if !kvm_available(name) {
        return;
    }
    let n = 3;
    for setup in setups() {
        let cases = [
            (SdkSend::FixedPhysical, n - 1, n - 1, others(n)),
            (SdkSend::FixedLogical, 1, n - 1, others(n)),
            (SdkSend::FixedSelf, 1, 1, vec![0]),
            (SdkSend::FixedAll, 1, n, (0..n).collect()),
            (SdkSend::FixedAllButSelf, 1, n - 1, others(n)),
        ];
        for (kind, icrs, targets, takers) in cases {
            let r = run_kind(kind, setup, n, false);
            let want = Want {
                icrs: icrs as u64,
                targets: targets as u64,
                takers: Some(takers),
            };
            check(kind, setup, &r, &want);
        }
    }
}

#[test]
fn lowest_priority_ipis_reach_one_target_each_and_are_counted() {
    let name = "lowest_priority_ipis_reach_one_target_each_and_are_counted";
    if !kvm_available(name) {
        return;
    }
    let n = 3;
    for setup in setups() {
        let cases = [
            (SdkSend::LowestPriorityPhysical, Some(vec![1])),
            (SdkSend::LowestPriorityLogical, None),
            (SdkSend::LowestPriorityAllButSelf, None),
        ];
        for (kind, takers) in cases {
            let r = run_kind(kind, setup, n, false);
            let want = Want {
                icrs: 1,
                targets: 1,
                takers,
            };
            check(kind, setup, &r, &want);
            // The APIC chose among the others only: the sender took none.
            assert_eq!(measure(&r, 0).guest.ipis_received, 0, "{kind:?} {setup:?}");
        }
    }
}

#[test]
fn nmis_run_the_hook_on_every_destination_and_are_counted() {
    let name = "nmis_run_the_hook_on_every_destination_and_are_counted";
    if !kvm_available(name) {
        return;
    }
    let n = 3;
    for setup in setups() {
        let cases = [
            (SdkSend::NmiPhysical, n - 1),
            (SdkSend::NmiLogical, 1),
            (SdkSend::NmiAllButSelf, 1),
        ];
        for (kind, icrs) in cases {
            let r = run_kind(kind, setup, n, false);
            let want = Want {
                icrs: icrs as u64,
                targets: n as u64 - 1,
                takers: Some(others(n)),
            };
            check(kind, setup, &r, &want);
        }
    }
}

/// The xAPIC cluster model: vCPUs 1..4 are cluster 0's members 1..3 and
/// cluster 1's member 0, so one logical ICR cannot reach them all: the SDK
/// sends one per cluster.
#[test]
fn xapic_cluster_destinations_take_one_icr_per_cluster() {
    let name = "xapic_cluster_destinations_take_one_icr_per_cluster";
    if !kvm_available(name) {
        return;
    }
    let n = 5;
    let cases = [
        (SdkSend::FixedLogical, n as u64 - 1, Some(others(n))),
        (SdkSend::LowestPriorityLogical, 2, None),
        (SdkSend::NmiLogical, n as u64 - 1, Some(others(n))),
    ];
    for chip in CHIPS {
        for (kind, targets, takers) in cases.clone() {
            let setup = (chip, ApicMode::Xapic);
            let r = run_kind(kind, setup, n, true);
            let want = Want {
                icrs: 2,
                targets,
                takers,
            };
            check(kind, setup, &r, &want);
        }
    }
}

/// INIT (assert, then level de-assert) and the start-up IPI of the
/// `InitSipiThenHalts` case go through `ipi::send` / `Ipi::new_startup`:
/// three ICR writes, two IPIs (the de-assert reaches nobody on KVM).
#[test]
fn init_and_startup_ipis_are_counted() {
    let name = "init_and_startup_ipis_are_counted";
    if !kvm_available(name) {
        return;
    }
    for (chip, apic) in setups() {
        let r = completed_run(
            Case::InitSipiThenHalts,
            &[],
            (chip, apic),
            2,
            20,
            "INIT/SIPI",
        );
        let p = r.vcpus[0]
            .phase_of(0, EVENT_PHASE)
            .unwrap_or_else(|| panic!("{chip} {apic:?}: vcpu0 has no phase '{EVENT_PHASE}'"));
        assert_eq!(
            (p.guest.icr_writes, p.guest.ipis_sent),
            (3, 2),
            "{chip} {apic:?}: INIT, INIT de-assert, SIPI"
        );
    }
}

/// An NMI that arrives while its target is inside an IPI handler (the
/// `NmiInIpiHandler` case: vCPU 1's IPI hook waits for it) runs on its own
/// stack and returns into the handler, which then finishes normally: were
/// it on the interrupt stack's top, it would overwrite the handler's frame.
#[test]
fn an_nmi_inside_an_ipi_handler_returns_into_it() {
    let name = "an_nmi_inside_an_ipi_handler_returns_into_it";
    if !kvm_available(name) {
        return;
    }
    for (chip, apic) in setups() {
        let r = completed_run(
            Case::NmiInIpiHandler,
            &[],
            (chip, apic),
            2,
            60,
            "NMI in handler",
        );
        let sender = measure(&r, 0);
        assert_eq!(
            (sender.guest.icr_writes, sender.guest.ipis_sent),
            (2 * NMI_NEST_ROUNDS, 2 * NMI_NEST_ROUNDS),
            "{chip} {apic:?}"
        );
        let target = measure(&r, 1);
        assert_eq!(
            record(target, "nmis_received"),
            NMI_NEST_ROUNDS,
            "{chip} {apic:?}"
        );
        assert_eq!(
            target.guest.ipis_received, NMI_NEST_ROUNDS,
            "{chip} {apic:?}"
        );
        assert_eq!(target.guest.eois, NMI_NEST_ROUNDS, "{chip} {apic:?}");
        assert_eq!(
            target.guest.handler_entries,
            2 * NMI_NEST_ROUNDS,
            "{chip} {apic:?}"
        );
    }
}
