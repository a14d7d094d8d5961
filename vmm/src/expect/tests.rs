//! The forms the lab's checks are written in (plans/lab-*.toml), judged on
//! real runs: a quick lab pass's sweep (kvm_amd under QEMU TCG, AVIC off:
//! ping-pong kernel/x2apic/icr with `--apicv host` and `inhibit`, a PV
//! ping-pong, a user-irqchip broadcast), each counted by the exit sampler
//! and the tracepoints, edited where a case needs another figure.
use super::{evaluate, Expectation, Outcome};
use crate::results::Document;
use serde_json::Value;

const SWEEP: &str = include_str!("../../../xtask/fixtures/lab-quick/runs/sweep.json");

/// The sweep, edited by `edit` (its JSON).
fn doc(edit: impl FnOnce(&mut Value)) -> Document {
    let mut v: Value = serde_json::from_str(SWEEP).unwrap();
    edit(&mut v);
    Document::from_json(&v.to_string(), "sweep.json").unwrap()
}

/// runs[run].vcpus[vcpu]'s measured phase.
fn measure(v: &mut Value, run: usize, vcpu: usize) -> &mut Value {
    v["runs"][run]["vcpus"][vcpu]["phases"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == "measure")
        .unwrap()
}

/// The outcomes of `text` on `d`, one per test point.
fn judge(d: &Document, text: &str) -> Vec<Outcome> {
    let e: Expectation = text.parse().unwrap_or_else(|e| panic!("{e}"));
    evaluate(d, &[e]).0.into_iter().map(|v| v.outcome).collect()
}

fn passes(d: &Document, text: &str) {
    let got = judge(d, text);
    assert!(
        !got.is_empty() && got.iter().all(|o| matches!(o, Outcome::Pass(_))),
        "{text}: {got:?}"
    );
}

/// The failures of `text` on `d` (every point must have been judged).
fn failures(d: &Document, text: &str) -> Vec<String> {
    judge(d, text)
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Fail(why) => Some(why),
            Outcome::Pass(_) => None,
            Outcome::Skip(why) => panic!("{text}: skipped: {why}"),
        })
        .collect()
}

#[test]
fn counters_against_counters_per_vcpu() {
    let d = doc(|_| {});
    let icr = "ipi=icr: vcpu*.phase.icr_write_exits == vcpu*.guest.icr_writes + vcpu*.guest.barrier_icr_writes";
    passes(&d, icr);
    assert_eq!(judge(&d, icr).len(), 3, "the three runs on the ICR path");
    let pv = "ipi=pv: vcpu*.guest.hypercalls == vcpu*.exit_reasons.hypercall + vcpu*.exit_reasons.VMCALL";
    passes(&d, pv);
    passes(&d, "vcpu*.exit_reasons.missing == vcpu*.exit_reasons.lost");
    // One ICR write of the first run's sender that did not exit: its vCPU
    // is named with both sides, the receiver holds.
    let short = doc(|v| {
        let e = &mut measure(v, 0, 0)["icr_write_exits"]["exits"];
        *e = (e.as_u64().unwrap() - 1).into();
    });
    assert_eq!(failures(&short, icr), ["vcpu0 got 29, want == 30"]);
    // A hypercall that did not exit as one.
    let pv_short = doc(|v| {
        let c = &mut measure(v, 1, 0)["exit_reasons"]["by_reason"]["hypercall"]["count"];
        *c = (c.as_u64().unwrap() - 1).into();
    });
    assert_eq!(failures(&pv_short, pv), ["vcpu0 got 30, want == 29"]);
    // Sums take counters away too, and read one vCPU or all of them.
    passes(
        &d,
        "ipi=icr: vcpu0.guest.icr_writes == vcpu0.guest.ipis_sent - vcpu0.guest.barrier_icr_writes",
    );
    passes(&d, "ipis_delivered == vcpus.guest.ipis_received");
    let lost = doc(|v| measure(v, 0, 1)["guest"]["ipis_received"] = 29.into());
    assert_eq!(
        failures(
            &lost,
            "kernel/x2apic/icr: ipis_delivered == vcpus.guest.ipis_received"
        )
        .len(),
        0,
        "the same figure both ways"
    );
    assert_eq!(
        failures(&lost, "ipis_sent == vcpus.guest.ipis_received")[0],
        "got 30, want == 29"
    );
}

#[test]
fn the_phases_own_figures_and_the_effective_apicv_state() {
    // No AVIC in this lab: every run's ICR writes exit, one per round
    // trip, whatever it asked of APICv.
    let d = doc(|_| {});
    passes(
        &d,
        "ipi=icr apicv=inhibited|unavailable: icr_write_exits_per_operation == 1",
    );
    passes(&d, "apicv=unavailable: vcpu*.phase.apicv_active == 0");
    passes(&d, "ipi=icr: vcpu*.phase.icr_writes_accelerated == 0");
    // With AVIC active for the first run, it is out of that scope.
    let active = doc(|v| {
        v["runs"][0]["apicv"]["effective"] = "active".into();
        v["runs"][0]["apicv_observed"]["inhibits_at_end"] = serde_json::json!([]);
    });
    let n = |d: &Document| judge(d, "ipi=icr apicv=inhibited|unavailable: operations > 0").len();
    assert_eq!((n(&d), n(&active)), (3, 2));
    // A phase that never sampled its APICv state is not a figure.
    let unsampled = doc(|v| {
        measure(v, 0, 0).as_object_mut().unwrap().remove("apicv");
    });
    let got = judge(
        &unsampled,
        "kernel/x2apic/icr: vcpu*.phase.apicv_active == 0",
    );
    assert!(
        matches!(&got[0], Outcome::Skip(w) if w == "vcpu0: no APICv state sampled in the phase"),
        "{got:?}"
    );
}

#[test]
fn scopes_over_what_the_runs_host_had() {
    // The fixture's host (QEMU TCG, kvm_amd avic=0): no AVIC, no x2AVIC.
    let d = doc(|_| {});
    assert_eq!(
        judge(&d, "host.x2avic=unavailable: operations > 0").len(),
        4
    );
    // No run's host had x2AVIC: those runs are another host's to make.
    let got = judge(&d, "host.x2avic=available apic=x2apic: operations > 0");
    assert!(
        matches!(&got[..], [Outcome::Skip(w)] if w == "not run here: no run's host had host.x2avic=available"),
        "{got:?}"
    );
    // A host it had, and no run in the rest of the scope, fails.
    let f = failures(
        &d,
        "host.x2avic=unavailable workload=self-ipi: operations > 0",
    );
    assert!(f[0].starts_with("no run matches"), "{f:?}");
    // A run that recorded no host stands for no other host.
    let unknown = doc(|v| {
        v["runs"][0]
            .as_object_mut()
            .unwrap()
            .remove("host_settings");
    });
    let f = failures(&unknown, "host.x2avic=available: operations > 0");
    assert!(f[0].starts_with("no run matches"), "{f:?}");
    // One run recorded on a host with x2AVIC.
    let one = doc(|v| {
        v["runs"][2]["host_settings"]["verdicts"]["x2avic"] =
            serde_json::json!({"state": "available"})
    });
    assert_eq!(
        judge(&one, "host.x2avic=available ipi=icr: operations > 0").len(),
        1
    );
    for (text, needle) in [
        (
            "host.x2apic=available: operations > 0",
            "no host verdict 'x2apic'",
        ),
        ("host.avic=on: operations > 0", "available or unavailable"),
    ] {
        let e = text.parse::<Expectation>().unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn skips_for_reasons_other_than_those_allowed_fail() {
    // The fixture's sweep skipped split rows with --apicv inhibit (no
    // in-kernel PIT on split) and a user row identical to another.
    let allowed =
        r#"unexpected_skips("LAPIC in KVM", "needs an in-kernel PIT", "identical to") == 0"#;
    assert_eq!(
        failures(&doc(|_| {}), r#"unexpected_skips("identical to") == 0"#)[0]
            .split("; ")
            .count(),
        2,
        "the two split rows"
    );
    let d = doc(|_| {});
    passes(&d, allowed);
    let odd = doc(|v| {
        v["skipped"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "mode": "pingpong 2v kernel/x2apic/icr", "reason": "no reason"
            }))
    });
    assert_eq!(
        failures(&odd, allowed),
        ["got 1, want == 0: pingpong 2v kernel/x2apic/icr: no reason"]
    );
    let fine =
        doc(|v| {
            v["skipped"].as_array_mut().unwrap().push(serde_json::json!({
            "mode": "pingpong 2v user/x2apic/pv", "reason": "--ipi pv needs the LAPIC in KVM"
        }))
        });
    passes(&fine, allowed);
}

#[test]
fn recorded_metrics_are_what_the_counters_give() {
    // As read from the file: every figure recorded is what the counters
    // read back with it give.
    let d = doc(|_| {});
    passes(&d, "recorded.* == *");
    let edited = doc(|v| v["runs"][0]["metrics"]["ipis_per_operation"] = 2.0.into());
    assert_eq!(
        failures(
            &edited,
            "kernel/x2apic/icr: recorded.ipis_per_operation == ipis_per_operation"
        ),
        ["ipis_per_operation recorded 2.0, its counters give 1.0"]
    );
    // The counters edited, the figures not: the file no longer agrees.
    let tampered = doc(|v| measure(v, 0, 1)["guest"]["ipis_received"] = 29.into());
    let f = failures(&tampered, "pingpong: recorded.* == *");
    assert!(
        f[0].contains("ipis_delivered recorded 30, its counters give 29"),
        "{f:?}"
    );
    // A run in memory is judged as its results file reads back.
    let mut fresh = doc(|_| {});
    for r in &mut fresh.runs {
        r.recorded_metrics = None;
    }
    passes(&fresh, "recorded.* == *");
}

#[test]
fn the_new_forms_are_refused_where_they_mean_nothing() {
    for (text, needle) in [
        (
            "ipis_sent == vcpu*.guest.ipis_sent",
            "reads no vCPU of its own",
        ),
        (
            "vcpu0.guest.ipis_sent == vcpu*.guest.ipis_sent",
            "which reads vcpu0",
        ),
        (
            "vcpu*.guest.icr_writes == vcpu*.guest.ipis_sent +",
            "ends with a figure",
        ),
        (
            "vcpu*.guest.icr_writes == vcpu*.guest.ipis_sent % 2",
            "joined by ' + ', ' - ', ' * ' or ' / '",
        ),
        ("run.apicv_sampled == operations", "compares with a number"),
        ("run.apicv_bogus == 1", "no figure 'run.apicv_bogus'"),
        ("run.apicv_at_end == 1", "no figure 'run.apicv_at_end'"),
        ("vcpu1@.records.x == 1", "a phase name after the '@'"),
        (
            "vcpu*.phase.exits == 0",
            "the phase's figures are icr_write_exits",
        ),
        (
            "broadcast: unexpected_skips(\"x\") == 0",
            "names its runs itself",
        ),
        ("unexpected_skips(x) == 0", "in double quotes"),
        ("unexpected_skips(\"\") == 0", "would allow every skip"),
        ("recorded.* == 1", "write 'recorded.* == *'"),
        (
            "recorded.exits_per_ipi < exits_per_ipi",
            "recorded.exits_per_ipi == exits_per_ipi",
        ),
        ("@warmup: recorded.* == *", "drop the @PHASE"),
    ] {
        let e = text.parse::<Expectation>().unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn arithmetic_over_figures_of_other_vcpus_and_phases() {
    let d = doc(|_| {});
    // `*` and `/` before `+` and `-`, numbers and metrics beside counters.
    passes(&d, "ipi=icr: vcpu0.guest.icr_writes == 2 * operations / 2");
    passes(
        &d,
        "ipi=icr: vcpu0.guest.icr_writes <= 1.1 * vcpu0.guest.icr_writes + 0 * vcpus.kvm_stats.exits - 1 + 1",
    );
    // Another phase's counter (`@warmup`), and the left side as arithmetic.
    passes(
        &d,
        "ipi=icr: vcpu0.guest.ipis_sent + vcpu0@warmup.guest.ipis_sent == vcpu0.guest.icr_writes + vcpu0@warmup.guest.icr_writes",
    );
    assert_eq!(
        failures(
            &d,
            "kernel/x2apic/icr: vcpu0.guest.icr_writes * 2 == vcpu0.guest.icr_writes"
        ),
        ["got 60, want == 30"]
    );
    // vcpu* on the left: vcpu* on the right is the same vCPU, vcpuN fixed.
    passes(
        &d,
        "kernel/x2apic/icr: vcpu*.kvm_stats.exits <= vcpus.kvm_stats.exits",
    );
    let f = failures(
        &d,
        "kernel/x2apic/icr: vcpu*.guest.ipis_received * 0 + 1 == vcpu*.guest.ipis_received",
    );
    assert!(f[0].contains("vcpu1 got 1, want == 30"), "{f:?}");
    // A division by 0 and a phase the run lacks are failures, not passes.
    let f = failures(
        &d,
        "kernel/x2apic/icr: vcpu0.guest.icr_writes > 1 / vcpu0.userspace_exits.io_in",
    );
    assert!(f[0].starts_with("a division by 0"), "{f:?}");
    let f = failures(
        &d,
        "kernel/x2apic/icr: vcpu0.guest.icr_writes > vcpu0@cpuid.guest.icr_writes",
    );
    assert_eq!(f, ["the run has no phase 'cpuid'"]);
    // vcpu* must hold on every vCPU: one without the phase cannot.
    let gone = doc(|v| {
        v["runs"][0]["vcpus"][1]["phases"]
            .as_array_mut()
            .unwrap()
            .retain(|p| p["name"] != "measure")
    });
    let f = failures(&gone, "kernel/x2apic/icr: vcpu*.guest.ipis_received >= 0");
    assert!(
        f.iter()
            .any(|w| w.contains("vcpu1 did not finish the phase")),
        "{f:?}"
    );
}

#[test]
fn figures_of_the_run_itself_and_negated_fields() {
    let d = doc(|_| {});
    // Without AVIC every run sampled its inhibit events, DISABLED at its end.
    passes(&d, "run.apicv_sampled == 1");
    passes(&d, "apicv=unavailable: run.apicv_at_end:DISABLED == 1");
    passes(&d, "run.apicv_at_end:PIT_REINJ == 0");
    passes(&d, "run.apicv_lever_missed == 0");
    let lever = doc(|v| {
        v["runs"][3]["apicv_observed"]["lever"] =
            serde_json::json!({"reason": "PIT_REINJ", "observed": false})
    });
    assert_eq!(failures(&lever, "run.apicv_lever_missed == 0").len(), 1);
    let none = doc(|v| {
        v["runs"][0]
            .as_object_mut()
            .unwrap()
            .remove("apicv_observed");
    });
    assert_eq!(
        failures(&none, "run.apicv_sampled == 1"),
        ["got 0, want == 1"]
    );
    assert!(matches!(
        &judge(&none, "kernel/x2apic/icr: run.apicv_at_end:DISABLED == 1")[..],
        [Outcome::Skip(why)] if why.contains("no APICv inhibit events")
    ));
    // Made under no --host-param, no observer effect: skips, with why.
    assert!(matches!(
        &judge(&d, "kernel/x2apic/icr: run.host_param_as_asked == 1")[..],
        [Outcome::Skip(why)] if why.contains("no --host-param")
    ));
    assert!(matches!(
        &judge(&d, "kernel/x2apic/icr: run.observer_pairs_failed == 0")[..],
        [Outcome::Skip(why)] if why.contains("no observer effect")
    ));
    // `FIELD!=VALUE`: every run but those.
    assert_eq!(judge(&d, "ipi!=pv: operations > 0").len(), 3);
    assert_eq!(judge(&d, "irqchip!=kernel|split: operations > 0").len(), 1);
    assert!(
        failures(&d, "ipi!=icr|pv: operations > 0")[0].starts_with("no run matches 'ipi!=icr|pv'")
    );
    // The exit sampler's own figures.
    passes(
        &d,
        "vcpu*.kvm_stats.exits == vcpu*.phase.exits_sampled + vcpu*.exit_reasons.missing",
    );
    passes(
        &d,
        "vcpu*.phase.exit_reasons_complete * vcpu*.exit_reasons.lost == 0",
    );
}
