//! `--phase NAME` and `@NAME` (issue 32, item 5): the headline, the
//! metrics, `compare` and the expectations read the phase a user names,
//! a run without it fails naming the phases it has, and no figure of
//! another phase stands in for a missing one.
mod cli_kit;
mod output_fixtures;

use cli_kit::{dir, ipivmm};

use ipivmm_analysis::results::Document;
use ipivmm_testkit::{kvm_available, kvm_openable};
use std::path::Path;

const TEST: &str = "phase_choice";

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One repeat of a short ping-pong with `extra` flags, its JSON in `json`.
fn run(json: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "--repeat",
        "1",
        "--iterations",
        "40",
        "--warmup",
        "15",
        "--no-tracepoints",
        "--serial",
        "none",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ipivmm(&args)
}

#[test]
fn the_named_phase_is_what_the_headline_and_the_expectations_read() {
    if !kvm_available(TEST) {
        return;
    }
    let d = dir("phase", "named");
    let warm = d.join("warmup.json");
    // The warm-up phase sends 15 IPIs and records no samples: every figure
    // the gate reads must be the warm-up's, the measured phase's 40 must
    // not show through.
    let o = run(
        &warm,
        &[
            "--phase",
            "warmup",
            "--expect",
            "ipis_sent == 15",
            "--expect",
            "@measure: ipis_sent == 40",
            "--expect",
            "@measure: vcpu0.guest.ipis_sent == 40",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let doc = Document::load(&warm).unwrap();
    let r = &doc.runs[0];
    assert_eq!(r.mode.phase.as_deref(), Some("warmup"));
    assert_eq!(
        r.measured_phase().map(|(_, n)| n).as_deref(),
        Some("warmup")
    );
    let s = r.summary();
    assert_eq!(s.ipis, 15);
    assert!(s.latency.is_none(), "the warm-up has no samples");

    // The default reads `measure`, and an expectation can read the warm-up.
    let plain = d.join("plain.json");
    let o = run(
        &plain,
        &[
            "--expect",
            "ipis_sent == 40",
            "--expect",
            "@warmup: ipis_sent == 15",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));

    // `compare --phase` reads that phase of every file.
    let o = ipivmm(&[
        "compare",
        plain.to_str().unwrap(),
        warm.to_str().unwrap(),
        "--phase",
        "measure",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let exits_rows = t
        .lines()
        .filter(|l| l.contains("ICR-write exits/IPI"))
        .count();
    assert!(exits_rows <= 1, "{t}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_phase_the_payload_never_ran_fails_and_names_the_phases_it_has() {
    if !kvm_available(TEST) {
        return;
    }
    let d = dir("phase", "missing");
    let json = d.join("r.json");
    let o = run(&json, &["--phase", "cpuid", "--expect", "ipis_sent >= 0"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("no phase 'cpuid' in this run (its finished phases: idle, warmup,"),
        "{t}"
    );
    // The results are kept, and none of them is another phase's.
    let doc = Document::load(&json).unwrap();
    assert_eq!(doc.runs[0].measured_phase(), None);
    assert_eq!(doc.runs[0].summary().ipis, 0);
    // An expectation reading a phase no run has fails too.
    let o = run(&d.join("r2.json"), &["--expect", "@nosuch: ipis_sent >= 0"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("no phase 'nosuch'"), "{t}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_phase_name_no_payload_can_send_is_a_usage_error() {
    let mut cases = vec![&["compare", "a.json", "--phase", ""][..]];
    // `run` judges --phase with the rest of its configuration, once
    // /dev/kvm is open (KVM's vCPU limit is part of that check).
    if kvm_openable(
        "a_phase_name_no_payload_can_send_is_a_usage_error (the run case)",
        "run checks --phase once /dev/kvm is open",
    ) {
        cases.push(&["run", "--phase", "two words", "--dry-run"][..]);
    }
    for args in cases {
        let o = ipivmm(args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains("--phase"), "{t}");
    }
    let o = ipivmm(&["run", "--expect", "@a @b: ipis_sent > 0", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Without a VM: the rule on a recorded run with phases `idle` and
/// `measure`, and `Document::read_phase` (what `compare --phase` does).
#[test]
fn the_rule_reads_the_named_phase_and_nothing_else() {
    let mut r = output_fixtures::report(&["--apic", "x2apic"], 10_000, 2);
    assert_eq!(
        r.measured_phase().map(|(_, n)| n).as_deref(),
        Some("measure")
    );
    r.mode.phase = Some("idle".into());
    assert_eq!(r.measured_phase(), Some((0, "idle".to_string())));
    assert_eq!(r.missing_phase(), None);
    r.mode.phase = Some("cpuid".into());
    assert_eq!(r.measured_phase(), None);
    assert_eq!(
        r.missing_phase().as_deref(),
        Some("no phase 'cpuid' in this run (its finished phases: idle, measure)")
    );
    assert_eq!(r.summary().ipis, 0, "no other phase's figures");
    let mut doc = Document::new(vec![output_fixtures::report(&[], 10_000, 2)], Vec::new());
    doc.read_phase("idle");
    assert_eq!(doc.runs[0].mode.phase.as_deref(), Some("idle"));
    // The JSON keeps the choice, and a file without it reads as before.
    let back = Document::from_json(&doc.to_json(), "t").unwrap();
    assert_eq!(back.runs[0].mode.phase.as_deref(), Some("idle"));
}

/// Issue 39: six repeats of `--phase cpuid` where three ran only a phase
/// of another name: "6 of 6 repeats completed" stays true, but every
/// figure and its statistics count the three that have it, and the report
/// says the repeats differ (it used to say 6, show three values, and take
/// n = 6 for the detectable effect).
#[test]
fn figures_count_the_repeats_that_have_them() {
    use ipivmm_analysis::results::metrics::Metric;
    let runs: Vec<ipivmm_analysis::results::RunReport> = (0..6u32)
        .map(|i| {
            let mut r = output_fixtures::report(&[], 10_000 + 700 * u64::from(i), 3);
            r.mode.phase = Some("cpuid".into());
            let name = if i % 2 == 0 { "cpuid" } else { "cpuid2" };
            for v in &mut r.vcpus {
                v.phases[1].name = name.into();
            }
            r.repeat = Some(i);
            r
        })
        .collect();
    let doc = Document::new(runs, Vec::new());
    let c = &doc.configurations[0];
    assert_eq!((c.runs.len(), c.completed, c.repeats), (6, 6, 3));
    let p50 = c.p50().expect("the p50 of the repeats that measured cpuid");
    assert_eq!(p50.runs, [0, 2, 4]);
    assert_eq!(p50.values.len(), 3);
    let differ = c.repeats_differ.as_deref().unwrap_or_default();
    assert_eq!(
        differ,
        "the repeats measured different phases: phase 'cpuid' in 3, no measured phase in 3"
    );
    // Three repeats are too few for a detectable effect: none is claimed.
    assert_eq!(c.min_detectable_effect, None);
    let text = ipivmm_cli::output::repeats::render(&doc.configurations, None, &|_| None);
    assert!(text.contains(": 6 of 6 repeats completed\n"), "{text}");
    assert!(
        text.contains("phase 'cpuid' in 3, no measured phase in 3: each figure counts"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains(&Metric::CyclesPerOpP50.name(c.operation)))
        .unwrap();
    assert!(line.contains("(3 of 6 repeats)"), "{line}");
    assert!(!text.contains("at 6 repeats"), "{text}");
    // Four of six: the effect is that of n = 4, not 6.
    let mut runs = doc.runs.clone();
    for v in &mut runs[1].vcpus {
        v.phases[1].name = "cpuid".into();
    }
    let c = &Document::new(runs, Vec::new()).configurations[0];
    let p50 = c.p50().unwrap();
    assert_eq!(p50.values.len(), 4);
    let sd = ipivmm_analysis::stats::log_sd(&p50.values).unwrap();
    assert_eq!(
        c.min_detectable_effect,
        ipivmm_analysis::gate::Policy::DEFAULT.min_detectable(sd, 4)
    );
}

/// Issue 48: as a user who cannot open /dev/kvm, every test here passes
/// or skips visibly (none fails on the KVM error).
#[test]
fn without_kvm_access_the_tests_here_skip() {
    ipivmm_testkit::assert_kvm_tests_skip_as_nobody("without_kvm_access_the_tests_here_skip");
}
