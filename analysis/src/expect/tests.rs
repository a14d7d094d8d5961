//! The forms the lab's checks are written in (plans/lab-*.toml), judged on
//! real runs: a quick lab pass's sweep (kvm_amd under QEMU TCG, AVIC off:
//! ping-pong kernel/x2apic/icr with `--apicv host` and `inhibit`, a PV
//! ping-pong, a user-irqchip broadcast), each counted by the exit sampler
//! and the tracepoints, edited where a case needs another figure.
use super::{Expectation, Outcome, Verdicts};
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
    Verdicts::of(d, &[e])
        .0
        .into_iter()
        .map(|v| v.outcome)
        .collect()
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
            Outcome::Undecided(why) => panic!("{text}: undecided: {why}"),
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
    // A file whose metrics were stripped records none: not recomputed
    // from its own counters and called equal (issue 47).
    let stripped = doc(|v| {
        v["runs"][0]
            .as_object_mut()
            .expect("a run")
            .remove("metrics");
    });
    let f = failures(&stripped, "recorded.* == *");
    assert!(f[0].contains("records no metrics"), "{f:?}");
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

/// The outcome of every point of `text` on `d`, each a figure or a reason.
fn undecided(d: &Document, text: &str) -> Vec<String> {
    judge(d, text)
        .into_iter()
        .map(|o| match o {
            Outcome::Undecided(why) => why,
            o => panic!("{text}: not undecided: {o:?}"),
        })
        .collect()
}

/// A document of repeats of the fixture's runs: for each `(run, p50s)`,
/// one repeat of runs[run] per p50 (cycles), busy (others used 60% of
/// the host) where the p50 is given negative.
fn repeats(of: &[(usize, &[f64])]) -> Document {
    doc(|v| {
        let runs = v["runs"].as_array().unwrap().clone();
        let mut out = Vec::new();
        for (run, p50s) in of {
            for (i, p50) in p50s.iter().enumerate() {
                let mut r = runs[*run].clone();
                r["repeat"] = i.into();
                let load = if *p50 < 0.0 { 0.8 } else { 0.2 };
                r["host_load"] =
                    serde_json::json!({"cpus": 2, "busy": load, "own": 0.2, "steal": 0.0});
                let m = r["vcpus"][0]["phases"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|p| p["name"] == "measure")
                    .unwrap();
                m["latency"]["p50"] = (p50.abs() as u64).into();
                out.push(r);
            }
        }
        v["runs"] = Value::Array(out);
    })
}

/// A ratio's side is the repeats of one configuration (its identity),
/// not of every run whose label reads the same: runs that differ only in
/// how targets wait share `pingpong 2v kernel/x2apic/icr` but are another
/// configuration, and join neither side.
#[test]
fn a_ratio_reads_the_repeats_of_its_configuration_not_of_its_label() {
    let text =
        "ratio(cycles_per_operation_p50, kernel/x2apic/icr, kernel/x2apic/icr apicv-inhibit) < 1";
    let (new, base) = (
        &[1_000.0, 1_010.0, 1_020.0, 1_030.0, 1_040.0, 1_050.0][..],
        &[2_000.0, 2_010.0, 2_020.0, 2_030.0, 2_040.0, 2_050.0][..],
    );
    let alone = repeats(&[(0, new), (3, base)]);
    let other = &[9_000.0, 9_010.0, 9_020.0, 9_030.0, 9_040.0, 9_050.0][..];
    let mut both = repeats(&[(0, new), (3, base), (0, other)]);
    for r in &mut both.runs[12..] {
        r.mode.target = match r.mode.target {
            crate::mode::TargetWait::Spin => crate::mode::TargetWait::Halt,
            _ => crate::mode::TargetWait::Spin,
        };
    }
    assert_eq!(both.runs[0].label(), both.runs[12].label());
    assert_ne!(both.runs[0].id(), both.runs[12].id());
    let outcome = judge(&alone, text);
    assert!(matches!(outcome[0], Outcome::Pass(_)), "{outcome:?}");
    assert_eq!(judge(&both, text), outcome);
}

/// Issue 47: `ratio(...) < 1 + 1` passed the parser and panicked at an
/// `unreachable!` (exit 101). Arithmetic over numbers is a number;
/// arithmetic over a run's figures is refused beside a ratio.
#[test]
fn a_ratio_against_arithmetic_evaluates_or_is_refused() {
    let d = doc(|_| {});
    let text = "ratio(cycles_per_operation_p50, apic=x2apic, apic=xapic) < 1 + 1";
    let e: Expectation = text.parse().unwrap();
    assert_eq!(e.value, super::Rhs::Number(2.0));
    assert_eq!(judge(&d, text).len(), 1);
    let e = "ratio(exits_per_ipi, apic=x2apic, apic=xapic) < 2 * exits_per_ipi"
        .parse::<Expectation>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("a ratio compares with a number"), "{e}");
    for text in [
        r#"unexpected_skips("identical to") <= 1 + 1"#,
        "run.apicv_sampled == 2 - 1",
    ] {
        passes(&d, text);
    }
}

/// Everything the parser accepts evaluates (no panic) on a real sweep:
/// every subject form against every right-hand side form.
#[test]
fn everything_the_parser_accepts_evaluates() {
    let d = doc(|_| {});
    let subjects = [
        "exits_per_ipi",
        "cycles_per_operation_p50",
        "vcpu0.guest.icr_writes",
        "vcpu*.guest.ipis_received",
        "vcpus.kvm_stats.exits",
        "vcpus@warmup.guest.ipis_sent",
        "vcpu*.phase.icr_write_exits",
        "run.apicv_sampled",
        "run.apicv_at_end:DISABLED",
        "ratio(cycles_per_operation_p50, apic=x2apic, apic=xapic)",
        "ratio(exits_per_ipi, kernel/x2apic/icr, kernel/xapic/pv)",
        r#"unexpected_skips("identical to")"#,
        "recorded.exits_per_ipi",
        "recorded.*",
        "vcpu0.guest.icr_writes * 2",
        "cycles_per_operation_p50 + 0",
        "vcpu*.guest.icr_writes + vcpu*.guest.barrier_icr_writes",
    ];
    let rhs = [
        "1",
        "1 + 1",
        "0 - 1",
        "operations",
        "fan_out",
        "ipis_sent / 2",
        "cycles_per_operation_p99 * 0.5",
        "vcpu*.guest.icr_writes",
        "vcpus.guest.ipis_received - 1",
        "vcpu0@warmup.guest.icr_writes / vcpu0.userspace_exits.io_in",
        "run.apicv_sampled",
        "1 ± 0.5",
        "exits_per_ipi",
        "*",
    ];
    let scopes = ["", "kernel/x2apic/icr: ", "@warmup: ", "ipi=pv: "];
    let mut accepted = 0;
    for s in subjects {
        for op in ["==", "!=", "<", "<=", ">", ">="] {
            for r in rhs {
                for scope in scopes {
                    let text = format!("{scope}{s} {op} {r}");
                    if let Ok(e) = text.parse::<Expectation>() {
                        accepted += 1;
                        let v = Verdicts::of(&d, &[e]);
                        assert!(!v.0.is_empty(), "{text}: no point");
                    }
                }
            }
        }
    }
    assert!(accepted > 500, "{accepted}");
}

/// Arithmetic that yields inf or NaN is no bound: a parse error where it
/// reads numbers only, a failing point where it reads the run.
#[test]
fn arithmetic_past_the_range_of_a_number_is_an_error() {
    for text in [
        "exits_per_ipi < 1e308 * 1e308",
        "exits_per_ipi != 0 * 1e308 * 1e308",
        "exits_per_ipi > 1e308 + 1e308",
        "exits_per_ipi < 1 / 1e-308 / 1e-308",
    ] {
        let e = text.parse::<Expectation>().unwrap_err().to_string();
        assert!(e.contains("no finite number"), "{text}: {e}");
        assert!(!e.contains("Number("), "no Debug text: {e}");
    }
    let d = doc(|_| {});
    for text in [
        "kernel/x2apic/icr: exits_per_ipi < operations * 1e308 * 1e308",
        "kernel/x2apic/icr: exits_per_ipi != 0 * operations * 1e308 * 1e308",
        "kernel/x2apic/icr: vcpu0.guest.icr_writes * 1e307 * 1e307 > 0",
    ] {
        let f = failures(&d, text);
        assert!(
            f.len() == 1 && f[0].contains("no finite number"),
            "{text}: {f:?}"
        );
    }
    // A division by 0 names the figure as written, not its Rust form.
    let f = failures(
        &d,
        "kernel/x2apic/icr: vcpu0.guest.icr_writes > 1 / vcpu0.userspace_exits.io_in",
    );
    assert_eq!(
        f,
        ["a division by 0 ('vcpu0.userspace_exits.io_in' is 0 in '1 / vcpu0.userspace_exits.io_in')"]
    );
}

/// `run.apicv_at_end:DISABLD == 0` (a misspelling) read 0 and passed.
#[test]
fn inhibit_reasons_are_kvms() {
    let e = "run.apicv_at_end:DISABLD == 0"
        .parse::<Expectation>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no APICv inhibit reason 'DISABLD'") && e.contains("DISABLED, HYPERV, ABSENT"),
        "{e}"
    );
    for ok in [
        "run.apicv_at_end:DISABLED == 1",
        "run.apicv_at_end:PIT_REINJ == 0",
        "run.apicv_at_end:X2APIC == 0",
        "run.apicv_at_end:PHYSICAL_ID_TOO_BIG == 0",
        "vcpu0.guest.icr_writes * run.apicv_at_end:IRQWIN == 0",
    ] {
        ok.parse::<Expectation>().unwrap_or_else(|e| panic!("{e}"));
    }
    for bad in [
        "run.apicv_at_end: == 0",
        "vcpu0.guest.icr_writes * run.apicv_at_end:irqwin == 0",
        "run.apicv_sampled:X == 0",
    ] {
        assert!(bad.parse::<Expectation>().is_err(), "{bad}");
    }
}

/// A sum over vCPUs where one lacks the phase was a partial sum; a vCPU
/// that recorded nothing was a skip of the whole line.
#[test]
fn vcpus_without_the_phase_or_records_fail() {
    let gone = doc(|v| {
        v["runs"][0]["vcpus"][1]["phases"]
            .as_array_mut()
            .unwrap()
            .retain(|p| p["name"] != "warmup")
    });
    for text in [
        "kernel/x2apic/icr: vcpus@warmup.guest.ipis_received >= 0",
        "kernel/x2apic/icr: operations > vcpus@warmup.guest.ipis_sent",
    ] {
        assert_eq!(
            failures(&gone, text),
            ["vcpu1 did not finish the phase 'warmup' (every vCPU's is read)"],
            "{text}"
        );
    }
    // The fixture's sender records `targets`, its receiver nothing.
    let d = doc(|_| {});
    passes(&d, "kernel/x2apic/icr: vcpu0.records.targets == 1");
    for text in [
        "kernel/x2apic/icr: vcpu*.records.targets == 1",
        "kernel/x2apic/icr: vcpus.records.targets == 1",
    ] {
        let f = failures(&d, text);
        assert!(
            f.len() == 1 && f[0].starts_with("vcpu1 has no 'records' counters in phase 'measure'"),
            "{text}: {f:?}"
        );
    }
}

/// A latency bound is judged over the repeats however it is written:
/// `< 1800000 + 0` was judged per repeat where `< 1800000` was undecided.
#[test]
fn a_latency_bound_is_judged_over_repeats_however_written() {
    let d = repeats(&[(0, &[1_700_000.0, 1_900_000.0])]);
    let plain = undecided(&d, "cycles_per_operation_p50 < 1800000");
    assert_eq!(plain.len(), 1);
    assert_eq!(
        undecided(&d, "cycles_per_operation_p50 < 1800000 + 0"),
        plain
    );
    assert_eq!(
        undecided(&d, "cycles_per_operation_p50 * 1 < 1800000").len(),
        1
    );
    // Against another figure of the same runs: the difference over the
    // repeats (p99 is 17690865 in each).
    let d = repeats(&[(0, &[1.70e6, 1.75e6, 1.8e6, 1.85e6, 1.9e6])]);
    passes(&d, "cycles_per_operation_p50 < cycles_per_operation_p99");
    let f = failures(&d, "cycles_per_operation_p50 > cycles_per_operation_p99");
    assert!(
        f[0].starts_with("got cycles_per_operation_p50 less cycles_per_operation_p99: median"),
        "{f:?}"
    );
    let e = "vcpu*.guest.icr_writes < cycles_per_operation_p50"
        .parse::<Expectation>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("not per vCPU"), "{e}");
}

/// Undecided is never a pass: beside a pass the exit is 4, not 0; a
/// plain skip beside a pass stays 0.
#[test]
fn an_undecided_gate_question_exits_4_beside_passes() {
    let d = repeats(&[(0, &[1_700_000.0, 1_900_000.0])]);
    let e = |t: &str| t.parse::<Expectation>().unwrap();
    let v = Verdicts::of(
        &d,
        &[e("operations > 0"), e("cycles_per_operation_p50 < 1800000")],
    );
    assert!(matches!(v.0[2].outcome, Outcome::Undecided(_)), "{v:?}");
    assert_eq!((v.exit_code(), v.undecided()), (4, 1));
    assert_eq!(v.summary(), "2 passed, 0 failed, 0 skipped, 1 undecided");
    let v = Verdicts::of(
        &d,
        &[
            e("operations > 0"),
            e("vcpu0.phase.apicv_active == 0"),
            e("ipi=pv host.x2avic=available: operations > 0"),
        ],
    );
    assert!(
        matches!(v.0.last().unwrap().outcome, Outcome::Skip(_)),
        "{v:?}"
    );
    assert_eq!(v.exit_code(), 0);
    // A ratio the repeats cannot decide.
    let d = repeats(&[(0, &[1_000.0, 2_000.0]), (3, &[1_500.0, 1_600.0])]);
    let v = Verdicts::of(
        &d,
        &[
            e("operations > 0"),
            e("ratio(cycles_per_operation_p50, kernel/x2apic/icr, kernel/x2apic/icr apicv-inhibit) < 1"),
        ],
    );
    assert!(
        matches!(v.0.last().unwrap().outcome, Outcome::Undecided(_)),
        "{v:?}"
    );
    assert_eq!(v.exit_code(), 4);
}

/// Repeats measured on a busy host are left out of ratios and latency
/// bounds as `compare` leaves them out (and said), never out of counts.
#[test]
fn busy_repeats_are_left_out_of_latency_figures_only() {
    let quiet = [889_818.0, 890_818.0, 891_818.0, 892_818.0, 893_818.0];
    let busy = [-50e6, -51e6, -52e6, -53e6, -54e6];
    let inhibit: Vec<f64> = quiet.iter().chain(&busy).copied().collect();
    let base = [16.7e6, 16.8e6, 16.9e6, 17.0e6, 17.1e6];
    let d = repeats(&[(0, &base), (3, &inhibit)]);
    let ratio =
        "ratio(cycles_per_operation_p50, kernel/x2apic/icr apicv-inhibit, kernel/x2apic/icr) < 1";
    passes(&d, ratio);
    passes(
        &d,
        "kernel/x2apic/icr apicv-inhibit: cycles_per_operation_p50 < 1000000",
    );
    // Said where it decides against: the busy half left out.
    let f = failures(
        &d,
        "kernel/x2apic/icr apicv-inhibit: cycles_per_operation_p50 > 1000000",
    );
    assert_eq!(
        f,
        ["got median 891818 [889818, 893818] (93.8%) over 5 repeats against > 1000000 (5 of 10 repeats left out as measured on a busy host (other processes used 60% of the host's CPU time during a run: a quieter host, --pin))"]
    );
    // Every repeat busy: nothing to judge a latency on; counts still decide.
    let all_busy: Vec<f64> = busy.to_vec();
    let d = repeats(&[(0, &base), (3, &all_busy)]);
    let u = undecided(&d, ratio);
    assert!(
        u[0].contains("every repeat was measured on a busy host"),
        "{u:?}"
    );
    let u = undecided(
        &d,
        "kernel/x2apic/icr apicv-inhibit: cycles_per_operation_p50 < 1000000",
    );
    assert!(
        u[0].contains("every repeat was measured on a busy host"),
        "{u:?}"
    );
    passes(
        &d,
        "ratio(exits_per_ipi, kernel/x2apic/icr apicv-inhibit, kernel/x2apic/icr) < 1",
    );
    passes(&d, "kernel/x2apic/icr apicv-inhibit: exits_per_ipi < 5");
}
