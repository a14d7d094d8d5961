//! Every irqchip x APIC x IPI-path combination this machine supports runs
//! ping-pong and broadcast and delivers exactly what was sent; the ones it
//! cannot run are refused with the reason, never hung.
use ipivmm::config::VmConfig;
use ipivmm::run::{run, RunError, RunOptions};
use ipivmm_analysis::mode::{ApicMode, IpiPath, Irqchip, TargetWait, Workload};
use ipivmm_analysis::results::RunReport;

use ipivmm_tests::{kvm_available, run_ok};
use std::time::Duration;

const ITERATIONS: u64 = 40;

fn config(
    irqchip: Irqchip,
    apic: ApicMode,
    ipi: IpiPath,
    workload: Workload,
    vcpus: usize,
) -> VmConfig {
    VmConfig {
        vcpus,
        irqchip,
        apic,
        ipi,
        workload,
        iterations: ITERATIONS,
        warmup: 5,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(60)),
        ..Default::default()
    }
}

fn measure_totals(r: &RunReport) -> (u64, u64, u64) {
    let phases: Vec<_> = r
        .vcpus
        .iter()
        .filter_map(|v| v.phase_named("measure"))
        .collect();
    assert_eq!(
        phases.len(),
        r.vcpus.len(),
        "every vCPU closed its measure phase"
    );
    let sent = phases.iter().map(|p| p.guest.ipis_sent).sum();
    let received = phases.iter().map(|p| p.guest.ipis_received).sum();
    let icr = phases.iter().map(|p| p.guest.icr_writes).sum();
    (sent, received, icr)
}

fn check_mode(irqchip: Irqchip, apic: ApicMode) {
    for (workload, vcpus) in [(Workload::Pingpong, 2), (Workload::Broadcast, 3)] {
        let r = run_ok(&config(irqchip, apic, IpiPath::Icr, workload, vcpus));
        let what = format!("{} {:?} {}", irqchip.name(), apic, workload.name());
        assert!(
            r.succeeded(),
            "{what}: {:?}\nserial: {}",
            r.status,
            r.serial_tail
        );
        let (sent, received, icr) = measure_totals(&r);
        assert_eq!(received, sent, "{what}: delivered == sent");
        let expected = match workload {
            Workload::Broadcast => ITERATIONS * (vcpus as u64 - 1),
            _ => ITERATIONS,
        };
        assert!(
            sent >= expected,
            "{what}: sent {sent}, expected at least {expected}"
        );
        if irqchip == Irqchip::User {
            // Every ICR write is a userspace exit the model counted: exact.
            let sender = r.vcpus[0].phase_named("measure").unwrap();
            let exits = sender
                .icr_write_exits
                .as_ref()
                .expect("user LAPIC counts ICR-write exits");
            assert_eq!(exits.source, "user_lapic");
            assert_eq!(exits.exits, sender.guest.icr_writes, "{what}");
            assert!(icr >= sender.guest.icr_writes);
        }
    }
}

macro_rules! mode_test {
    ($name:ident, $irqchip:expr, $apic:expr) => {
        #[test]
        fn $name() {
            if kvm_available(stringify!($name)) {
                check_mode($irqchip, $apic);
            }
        }
    };
}

mode_test!(kernel_xapic_icr, Irqchip::Kernel, ApicMode::Xapic);
mode_test!(kernel_x2apic_icr, Irqchip::Kernel, ApicMode::X2apic);
mode_test!(split_xapic_icr, Irqchip::Split, ApicMode::Xapic);
mode_test!(split_x2apic_icr, Irqchip::Split, ApicMode::X2apic);
mode_test!(user_xapic_icr, Irqchip::User, ApicMode::Xapic);
mode_test!(user_x2apic_icr, Irqchip::User, ApicMode::X2apic);

#[test]
fn pv_ipis_are_refused_or_run_never_hang() {
    if !kvm_available("pv_ipis_are_refused_or_run_never_hang") {
        return;
    }
    let host = ipivmm_counters_backend();
    let c = config(
        Irqchip::Kernel,
        ApicMode::X2apic,
        IpiPath::Pv,
        Workload::Pingpong,
        2,
    );
    match run(&c, RunOptions::default()) {
        Err(RunError::Mode(e)) => {
            let msg = e.to_string();
            assert_eq!(
                host.as_deref(),
                Some("kvm_pvm"),
                "only kvm_pvm refuses PV IPIs: {msg}"
            );
            assert!(msg.contains("vmcall") && msg.contains("--ipi icr"), "{msg}");
            ipivmm_tests::skip(
                "pv_ipis (the pv run)",
                ipivmm_tests::Need::HardwareKvm,
                &format!("refused on this backend as designed: {msg}"),
            );
        }
        Ok(r) => {
            // A hardware KVM host: the hypercall path must deliver too.
            assert!(r.succeeded(), "{:?}", r.status);
            let (sent, received, _) = measure_totals(&r);
            assert_eq!(sent, received);
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
    // With no in-kernel LAPIC there is nobody to handle the hypercall.
    let user = config(
        Irqchip::User,
        ApicMode::X2apic,
        IpiPath::Pv,
        Workload::Pingpong,
        2,
    );
    let e = run(&user, RunOptions::default()).expect_err("pv without an in-kernel LAPIC");
    assert!(
        e.to_string()
            .contains("--ipi pv (VmConfig::ipi = IpiPath::Pv) needs the LAPIC in KVM"),
        "{e}"
    );
}

fn ipivmm_counters_backend() -> Option<String> {
    ipivmm::host::probe().ok().map(|h| h.backend.to_string())
}

#[test]
fn levers_apply_and_are_reported() {
    if !kvm_available("levers_apply_and_are_reported") {
        return;
    }
    let mut c = config(
        Irqchip::Kernel,
        ApicMode::X2apic,
        IpiPath::Icr,
        Workload::Pingpong,
        2,
    );
    c.target_wait = TargetWait::Halt;
    c.levers.disabled_exits = kvm_bindings_hlt();
    c.levers.halt_poll_ns = Some(0);
    c.levers.realtime_hint = true;
    c.levers.pin = vec![0, 0];
    let r = match run(&c, RunOptions::default()) {
        Ok(r) => r,
        Err(e) if e.to_string().contains("allows only") => {
            ipivmm_tests::skip(
                "levers_apply_and_are_reported",
                ipivmm_tests::Need::Setup,
                &e.to_string(),
            );
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(r.succeeded(), "{:?}", r.status);
    assert_eq!(r.mode.levers.disabled_exits.names(), ["hlt"]);
    assert_eq!(r.mode.levers.halt_poll_ns, Some(0));
    assert!(
        r.label().contains("-exits:hlt") && r.label().contains("pin:0,0"),
        "{}",
        r.label()
    );
    // The wake-up path still delivers every IPI. (Whether HLT still exits is
    // the backend's business: kvm_pvm accepts the capability but its
    // emulated HLT is still counted in halt_exits, so that is not asserted.)
    let target = r.vcpus[1].phase_named("measure").unwrap();
    eprintln!(
        "halt_exits with HLT exits disabled: {:?}",
        target.kvm_stats.get("halt_exits")
    );
    let (sent, received, _) = measure_totals(&r);
    assert_eq!(sent, received);
    assert!(sent >= ITERATIONS);
}

/// The guest's banner names, of the PV features the levers decide, the
/// ones its CPUID 0x40000001 showed (the payload reads the leaf back).
fn guest_pv_features(r: &RunReport) -> Vec<&'static str> {
    let banner = r
        .serial_tail
        .lines()
        .find(|l| l.starts_with("ipivmm-guest:"))
        .unwrap_or_else(|| panic!("no guest banner in {:?}", r.serial_tail));
    let names = banner.rsplit_once('(').map_or("", |(_, n)| n);
    ["pv-eoi", "pv-tlb-flush", "pv-sched-yield"]
        .into_iter()
        .filter(|f| names.split([' ', ')']).any(|w| w == *f))
        .collect()
}

/// `--pv-eoi`, `--pv-tlb-flush` and `--pv-sched-yield` each reach the
/// guest as exactly their CPUID 0x40000001 bit, and nothing else: the
/// guest reads the leaf back and its banner names what it saw; the run's
/// label and JSON say which were asked for.
#[test]
fn pv_feature_levers_reach_the_guests_cpuid_exactly() {
    const TEST: &str = "pv_feature_levers_reach_the_guests_cpuid_exactly";
    if !kvm_available(TEST) {
        return;
    }
    let cases: [(&[&str], ipivmm_analysis::mode::Levers); 4] = [
        (&[], Default::default()),
        (
            &["pv-eoi"],
            ipivmm_analysis::mode::Levers {
                pv_eoi: true,
                ..Default::default()
            },
        ),
        (
            &["pv-tlb-flush"],
            ipivmm_analysis::mode::Levers {
                pv_tlb_flush: true,
                ..Default::default()
            },
        ),
        (
            &["pv-eoi", "pv-tlb-flush", "pv-sched-yield"],
            ipivmm_analysis::mode::Levers {
                pv_eoi: true,
                pv_tlb_flush: true,
                pv_sched_yield: true,
                ..Default::default()
            },
        ),
    ];
    for (want, levers) in cases {
        let mut c = config(
            Irqchip::Kernel,
            ApicMode::X2apic,
            IpiPath::Icr,
            Workload::Pingpong,
            2,
        );
        c.levers = levers;
        let r = run_ok(&c);
        assert!(r.succeeded(), "{:?}", r.status);
        assert_eq!(guest_pv_features(&r), want, "{}", r.serial_tail);
        for f in ["pv-eoi", "pv-tlb-flush", "pv-sched-yield"] {
            assert_eq!(r.label().contains(f), want.contains(&f), "{}", r.label());
        }
        let json = serde_json::to_value(&r.mode).unwrap();
        for f in ["pv_eoi", "pv_tlb_flush", "pv_sched_yield"] {
            let asked = want.contains(&f.replace('_', "-").as_str());
            assert_eq!(json.get(f).is_some(), asked, "{f}: {json}");
        }
    }
}

fn kvm_bindings_hlt() -> ipivmm_analysis::mode::levers::ExitControls {
    [ipivmm_analysis::mode::levers::ExitControl::Hlt]
        .into_iter()
        .collect()
}

/// vCPU 0's APICv state over the measured phase (VM-wide).
fn measure_apicv(r: &RunReport) -> ipivmm_analysis::results::apicv_observed::PhaseApicv {
    let p = r.vcpus[0].phase_named("measure").expect("a measure phase");
    p.apicv.clone().expect("APICv state decoded for the phase")
}

/// The APICv state ipivmm reports is read back from the kernel's own
/// `kvm_apicv_inhibit_changed` events: without APICv/AVIC the VM is DISABLED
/// from its creation and no phase is active; with it the measure phase is
/// active, and under `--apicv inhibit` the lever's reason is set.
#[test]
fn apicv_state_agrees_with_the_kernels_inhibit_events() {
    const TEST: &str = "apicv_state_agrees_with_the_kernels_inhibit_events";
    if !kvm_available(TEST) {
        return;
    }
    use ipivmm_analysis::mode::apicv::ApicvState;
    use ipivmm_analysis::mode::ApicvRequest;
    let c = config(
        Irqchip::Kernel,
        ApicMode::X2apic,
        IpiPath::Icr,
        Workload::Pingpong,
        2,
    );
    let r = run_ok(&c);
    let Some(o) = &r.apicv_observed else {
        ipivmm_tests::skip(
            TEST,
            ipivmm_tests::Need::Setup,
            "kvm:kvm_apicv_inhibit_changed cannot be sampled (tracefs, perf_event_paranoid)",
        );
        return;
    };
    let measure = measure_apicv(&r);
    match r.apicv.effective {
        ApicvState::Unavailable => {
            assert!(o.inhibits_at_end.iter().any(|i| i == "DISABLED"), "{o:?}");
            // DISABLED, and on kvm_amd/kvm_intel ABSENT too: set at creation
            // and never cleared, as the kernel skips every change without APICv.
            assert!(
                !measure.active && measure.inhibits.iter().any(|i| i == "DISABLED"),
                "{measure:?}"
            );
        }
        ApicvState::Active => {
            assert!(
                measure.active,
                "APICv said active, the kernel says {measure:?} ({o:?})"
            );
            let mut c = c.clone();
            c.apicv = ApicvRequest::Inhibit;
            let r = run_ok(&c);
            let o = r.apicv_observed.as_ref().unwrap();
            let lever = o.lever.as_ref().expect("a lever with APICv on the host");
            assert!(
                lever.observed,
                "the lever {} never took effect: {o:?}",
                lever.reason
            );
            let measure = measure_apicv(&r);
            assert!(!measure.active, "{measure:?}");
        }
        other => panic!("APICv state {other:?} on a usable KVM"),
    }
}
