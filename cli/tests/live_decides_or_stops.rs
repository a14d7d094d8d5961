//! `compare --run` decides or stops early (issue 47): it never spends its
//! budget on a figure no run can measure, nor starts with a budget that
//! cannot reach its first look.
use ipivmm_testkit::kvm_available;
use std::process::Command;
use std::time::{Duration, Instant};

fn compare(args: &[&str]) -> (Option<i32>, String, Duration) {
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .arg("compare")
        .args(args)
        .output()
        .expect("ipivmm starts");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        t.elapsed(),
    )
}

/// ICR-write exits gated where no run counts them (here: tracepoints off
/// on both sides, as on a fresh machine without tracefs for a non-root
/// user): the first round shows it, and the comparison ends there, exit
/// 4, naming why and the fix. On today's main before the fix it ran its
/// whole budget (444 rounds, 5 minutes).
#[test]
fn a_figure_no_run_measures_ends_the_comparison_after_one_round() {
    if !kvm_available("a_figure_no_run_measures_ends_the_comparison_after_one_round") {
        return;
    }
    let side = "--iterations 40 --warmup 2 --no-tracepoints";
    let (code, err, took) = compare(&[
        "--run",
        side,
        "--run",
        side,
        "--fail-on-regression",
        "--budget",
        "30m",
    ]);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("stopped after 1 round (2 VMs"), "{err}");
    assert!(
        err.contains("icr_write_exits_per_ipi not measured by either side"),
        "{err}"
    );
    assert!(err.contains("--gate p50,exits"), "the fix: {err}");
    assert!(took < Duration::from_secs(120), "{took:?}");
}

/// A side that measures a gated figure the other does not: named, with
/// the side.
#[test]
fn a_figure_one_side_lacks_is_named_with_the_side() {
    if !kvm_available("a_figure_one_side_lacks_is_named_with_the_side") {
        return;
    }
    let (code, err, _) = compare(&[
        "--run",
        "--iterations 40 --warmup 2",
        "--run",
        "--iterations 40 --warmup 2 --no-tracepoints",
        "--fail-on-regression",
        "--gate",
        "icr-exits",
    ]);
    // Where tracepoints work here (root, tracefs), B alone lacks it: the
    // comparison cannot pass, but the figures both sides have could still
    // show a regression, so it ends at the first look (5 rounds: here,
    // nothing regressed); otherwise both lack it: one round. Either way
    // undecided, and said.
    assert_eq!(code, Some(4), "{err}");
    if err.contains("not measured by B") {
        assert!(err.contains("stopped after 5 rounds"), "{err}");
    } else {
        assert!(err.contains("not measured by either side"), "{err}");
        assert!(err.contains("stopped after 1 round"), "{err}");
    }
}

/// Budgets of VMs below the first look are refused before any VM, with
/// the budget that would do.
#[test]
fn a_budget_below_the_first_look_is_refused_up_front() {
    let (code, err, _) = compare(&["--run", "", "--run", "", "--budget", "9vms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("give --budget 10vms or more"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
