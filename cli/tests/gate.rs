//! ipivmm as a gate in a kernel CI (issue 21): `--expect` on `run` with
//! TAP and JUnit, kselftest's exit codes, `compare --fail-on-regression`,
//! and `check` plans.
mod cli_kit;

use cli_kit::{ipivmm, plan};
use ipivmm_testkit::kvm_available;
use std::path::{Path, PathBuf};
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    cli_kit::dir("gate", name)
}

// One VM each (`--repeat 1`): these tests are about the gate, not the spread.
const QUICK: &[&str] = &[
    "--iterations",
    "100",
    "--warmup",
    "10",
    "--serial",
    "none",
    "--repeat",
    "1",
];

/// The "done when": one expectation that holds, one that cannot
/// (on any KVM a round trip takes more than 0.01 exits per IPI).
#[test]
fn run_expectations_print_tap_write_junit_and_set_the_exit_code() {
    if !kvm_available("run_expectations_print_tap_write_junit_and_set_the_exit_code") {
        return;
    }
    let d = dir("run");
    let junit = d.join("j.xml");
    let mut args = vec!["run", "--apic", "x2apic"];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(&[
        "--expect",
        "icr_write_exits_per_ipi == 1",
        "--expect",
        "exits_per_ipi < 0.01",
        "--tap",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    let o = ipivmm(&args);
    let tap = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{tap}\n{stderr}");
    let lines: Vec<&str> = tap.lines().collect();
    assert_eq!(lines[0], "TAP version 13", "{tap}");
    assert!(lines.contains(&"1..2"), "{tap}");
    let first = lines
        .iter()
        .find(|l| l.starts_with("ok 1 - "))
        .unwrap_or_else(|| panic!("{tap}"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("not ok 2 - exits_per_ipi < 0.01")),
        "{tap}"
    );
    // The report went to stderr, TAP alone is on stdout.
    assert!(stderr.contains("headline"), "{stderr}");
    let xml = std::fs::read_to_string(&junit).expect("JUnit written");
    let doc = roxmltree::Document::parse(&xml).expect("JUnit is XML");
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("tests"), Some("2"));
    assert_eq!(suite.attribute("failures"), Some("1"));
    // The first expectation alone: 0 when it held, 4 when it could not be
    // judged here (ICR-write exits need tracepoints: root).
    let mut one = vec!["run", "--apic", "x2apic"];
    one.extend_from_slice(QUICK);
    one.extend_from_slice(&[
        "--expect",
        "icr_write_exits_per_ipi == 1",
        "--tap",
        "--quiet",
    ]);
    let o = ipivmm(&one);
    let want = if first.contains("# SKIP") { 4 } else { 0 };
    assert_eq!(
        o.status.code(),
        Some(want),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 41's "done when": a scope over one field of the configuration
/// judges exactly its rows (the two x2APIC ones of four), and a scope no
/// row matches is a failure that says so, never a pass.
#[test]
fn a_field_scope_judges_exactly_its_rows_and_one_matching_none_fails() {
    if !kvm_available("a_field_scope_judges_exactly_its_rows_and_one_matching_none_fails") {
        return;
    }
    let sweep = |expect: &str| {
        ipivmm(&[
            "sweep",
            "--irqchip",
            "kernel,split",
            "--apic",
            "xapic,x2apic",
            "--workload",
            "pingpong",
            "--iterations",
            "20",
            "--repeat",
            "1",
            "--expect",
            expect,
            "--tap",
        ])
    };
    let o = sweep("apic=x2apic: icr_write_exits_per_ipi == 1");
    let tap = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let points: Vec<&str> = tap
        .lines()
        .filter(|l| l.contains(" - apic=x2apic: "))
        .collect();
    assert!(tap.lines().any(|l| l == "1..2"), "{tap}\n{stderr}");
    assert_eq!(points.len(), 2, "{tap}");
    for (point, row) in points
        .iter()
        .zip(["kernel/x2apic/icr]", "split/x2apic/icr]"])
    {
        assert!(point.contains(row), "{point}: {tap}");
    }
    // 0 when both held; 4 only where ICR-write exits cannot be counted
    // here (tracepoints need root), every point then a skip.
    let skipped = points.iter().all(|p| p.contains("# SKIP"));
    assert!(points.iter().all(|p| p.starts_with("ok ")), "{tap}");
    assert_eq!(
        o.status.code(),
        Some(if skipped { 4 } else { 0 }),
        "{tap}\n{stderr}"
    );

    let o = sweep("irqchip=user: vcpus == 2");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(matches!(o.status.code(), Some(1 | 2)), "{out}");
    assert!(out.contains("no run matches 'irqchip=user'"), "{out}");
}

#[test]
fn bad_expectations_and_gate_flags_are_usage_errors() {
    for (args, needle) in [
        (&["run", "--expect", "exits_per_ipi 1"][..], "no comparison"),
        (&["run", "--tap"][..], "--expect"),
        (
            &[
                "run",
                "--expect",
                "exits_per_ipi < 1",
                "--tap",
                "--json",
                "-",
            ][..],
            "cannot both write to stdout",
        ),
    ] {
        let o = ipivmm(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}

/// A gate on a host where nothing can run skips every expectation with the
/// reason (TAP `# SKIP`, JUnit skipped) and exits 4, like kselftest; without
/// expectations the same run is an error (exit 2). A misspelt counter
/// source is a usage error, not a skip.
#[test]
fn nothing_that_can_run_is_a_skip_with_the_reason() {
    let d = dir("skip");
    let junit = d.join("j.xml");
    let o = ipivmm(&[
        "run",
        "--kvm-device",
        "/nonexistent/kvm",
        "--expect",
        "exits_per_ipi < 5",
        "--tap",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "{out}");
    assert!(out.starts_with("TAP version 13"), "{out}");
    assert!(
        out.contains("ok 1 - exits_per_ipi < 5 # SKIP cannot open /nonexistent/kvm"),
        "{out}"
    );
    let xml = std::fs::read_to_string(&junit).expect("JUnit written");
    assert!(xml.contains("<skipped"), "{xml}");
    let o = ipivmm(&["run", "--kvm-device", "/nonexistent/kvm"]);
    assert_eq!(o.status.code(), Some(2));
    let o = ipivmm(&["run", "--expect", "vcpus.kvm_stat.exits > 0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no counter source 'kvm_stat'"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_fails_on_a_regression_past_the_threshold() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    // The recorded modes with the fewest and the most exits per IPI: an
    // exact count (one run each), the second a regression of the first
    // past a tolerance below their difference (the examples are recorded
    // again now and then: the test takes their figures, and says so when
    // they are too close to judge).
    let exits_per_ipi = |f: &Path| -> (f64, String) {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        let m = &doc["runs"][0]["mode"];
        (
            doc["runs"][0]["metrics"]["exits_per_ipi"].as_f64().unwrap(),
            format!(
                "{}/{}/{}",
                m["irqchip"].as_str().unwrap(),
                m["apic"].as_str().unwrap(),
                m["ipi"].as_str().unwrap()
            ),
        )
    };
    let mut modes: Vec<(f64, String, PathBuf)> = [
        "run-pingpong.json",
        "modes/pingpong-kernel-x2apic.json",
        "modes/pingpong-split-xapic.json",
        "modes/pingpong-split-x2apic.json",
    ]
    .iter()
    .map(|f| {
        let p = examples.join(f);
        let (e, label) = exits_per_ipi(&p);
        (e, label, p)
    })
    .collect();
    modes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let ((low, base, low_file), (high, other, high_file)) = (&modes[0], &modes[3]);
    let ratio = high / low;
    assert!(
        ratio > 1.02 && ratio < 10.0,
        "the examples' exits/IPI, {other} over {base}: {ratio} (this test needs 1.02..10)"
    );
    let run = |count_tolerance: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ipivmm"));
        c.args([
            "compare",
            "--by",
            "mode",
            "--baseline",
            base,
            "--fail-on-regression",
            "--quiet",
            "--count-tolerance",
            count_tolerance,
        ]);
        c.args([low_file, high_file]);
        c.output().expect("compare runs")
    };
    let o = run(&((ratio - 1.0) / 2.0).to_string());
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("exits/IPI, {other} against {base}: "))
            && e.contains("regressed")
            && e.contains("ipivmm: gate: FAIL"),
        "{e}"
    );
    // Within the tolerance no count regresses, but one run a side cannot
    // judge the cycles: not a pass (4), and said even with --quiet.
    let o = run("9");
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{e}");
    assert!(e.contains("too few repeats"), "{e}");
}

#[test]
fn check_plans_exit_like_kselftest() {
    if !kvm_available("check_plans_exit_like_kselftest") {
        return;
    }
    let d = dir("check");
    let experiment = |expect: &str| {
        format!(
            "name = \"t\"\n[[experiment]]\nname = \"pp\"\nrun = \"--vcpus 2 --iterations 50 --warmup 5\"\nexpect = [\"{expect}\"]\n"
        )
    };
    let pass = plan(&d, "pass", &experiment("ipis_per_operation == fan_out"));
    let fail = plan(&d, "fail", &experiment("ipis_per_operation == 2"));
    // PV without KVM's LAPIC cannot run on any host: every point a skip.
    let skip = plan(
        &d,
        "skip",
        "name = \"t\"\n[[experiment]]\nname = \"pv-user\"\nsweep = \"--irqchip user --ipi pv --workload pingpong\"\nexpect = [\"exits_per_ipi < 100\"]\n",
    );
    let json_dir = d.join("results");
    for (p, code, line) in [
        (&pass, 0, "ok 1 - pp: ipis_per_operation == fan_out"),
        (&fail, 1, "not ok 1 - pp: ipis_per_operation == 2"),
        (
            &skip,
            4,
            "ok 1 - pv-user: exits_per_ipi < 100 # SKIP could not run here",
        ),
    ] {
        let o = ipivmm(&[
            "check",
            p.to_str().unwrap(),
            "--quiet",
            "--json-dir",
            json_dir.to_str().unwrap(),
        ]);
        let tap = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(code),
            "{}: {tap}{}",
            p.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            tap.starts_with("TAP version 13\n") && tap.contains(line),
            "{tap}"
        );
    }
    assert!(
        json_dir.join("pp.json").is_file(),
        "results of the experiment kept"
    );
    let _ = std::fs::remove_dir_all(&d);
}
