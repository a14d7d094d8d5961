//! A plan built in Rust and executed with the engine alone (no CLI, no
//! TOML): two experiments, a run and a sweep of two configurations, on
//! real VMs; skipped visibly where /dev/kvm cannot be used.
use ipivmm::experiment::rounds::{Planned, Repeats};
use ipivmm::plan::{Execution, Experiment, Plan};
use ipivmm::VmConfig;
use ipivmm_analysis::expect::Outcome;
use ipivmm_analysis::mode::{ApicMode, Irqchip};
use ipivmm_analysis::plan::NotRun;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn config(irqchip: Irqchip, apic: ApicMode) -> VmConfig {
    VmConfig {
        irqchip,
        apic,
        iterations: 20,
        warmup: 2,
        timeout: ipivmm_testkit::scaled(Duration::from_secs(60)),
        ..VmConfig::default()
    }
}

fn expect(texts: &[&str]) -> Vec<ipivmm_analysis::expect::Expectation> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

fn two_experiments() -> Plan {
    Plan {
        name: "library".into(),
        about: "built in Rust".into(),
        experiments: vec![
            Experiment::new(
                "one-run",
                vec![Planned::single(config(Irqchip::Kernel, ApicMode::Xapic))],
                Repeats::Fixed(1),
                expect(&[
                    "ipis_per_operation == fan_out",
                    "ipis_delivered == ipis_sent",
                ]),
            ),
            Experiment::new(
                "two-apic-modes",
                vec![
                    Planned::single(config(Irqchip::Kernel, ApicMode::Xapic)),
                    Planned::single(config(Irqchip::Kernel, ApicMode::X2apic)),
                ],
                Repeats::Fixed(1),
                expect(&[
                    "apic=x2apic: vcpus == 2",
                    "vcpu1.guest.ipis_received == operations",
                ]),
            ),
        ],
    }
}

#[test]
fn a_plan_built_in_rust_runs_with_the_engine_alone() {
    if !ipivmm_testkit::kvm_available("a_plan_built_in_rust_runs_with_the_engine_alone") {
        return;
    }
    let plan = two_experiments();
    let host = ipivmm::host::probe().ok();
    let out = plan.execute(host.as_ref(), &Execution::default());
    assert_eq!(out.experiments.len(), 2);
    let runs: Vec<usize> = out
        .experiments
        .iter()
        .map(|x| x.doc.as_ref().map_or(0, |d| d.runs.len()))
        .collect();
    assert_eq!(runs, [1, 2], "{out:?}");
    let v = out.verdicts();
    // One point per expectation and run in scope: 2 on the run; 1 (the
    // x2APIC run) + 2 on the sweep.
    let names: Vec<&str> = v.0.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    assert_eq!(names[2], "two-apic-modes: apic=x2apic: vcpus == 2");
    assert!(names[0].starts_with("one-run: "), "{names:?}");
    assert!(
        v.0.iter().all(|v| matches!(v.outcome, Outcome::Pass(_))),
        "{v:?}"
    );
    assert_eq!(v.exit_code(), 0);
    // The engine judged the runs: the same plan wanting 3 vCPUs fails.
    let mut wrong = two_experiments();
    wrong.experiments.truncate(1);
    wrong.experiments[0].expect = expect(&["vcpus == 3"]);
    let v = wrong
        .execute(host.as_ref(), &Execution::default())
        .verdicts();
    assert_eq!(v.counts(), (0, 1, 0), "{v:?}");
}

#[test]
fn a_cancelled_or_unrunnable_plan_runs_no_vm() {
    // No VM boots here: it needs no /dev/kvm.
    let mut plan = two_experiments();
    plan.experiments[1].not_run = Some(NotRun::Plan("no such payload".into()));
    let how = Execution::default();
    how.cancel.store(true, Ordering::SeqCst);
    let out = plan.execute(None, &how);
    assert!(out.experiments.iter().all(|x| x.doc.is_none()));
    let v = out.verdicts();
    // The cancelled experiment's points are skips; the plan's error fails.
    assert_eq!(v.counts(), (0, 2, 2), "{v:?}");
    assert!(
        matches!(&v.0[0].outcome, Outcome::Skip(w) if w == "not run: cancelled"),
        "{v:?}"
    );
    assert!(
        matches!(&v.0[2].outcome, Outcome::Fail(w) if w == "plan error, not run: no such payload"),
        "{v:?}"
    );
}
