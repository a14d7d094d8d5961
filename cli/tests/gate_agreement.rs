//! One rule, three doors (issue 40): `compare --gate p50`, the expectation
//! `ratio(cycles_per_operation_p50, NEW, OLD) <= 1.1` and `check` (which
//! judges its plans' expectations through the same `expect::Verdicts::of` on
//! the document it recorded) give the same outcome on the same repeats —
//! pass, fail or undecided, pair by pair — over documents drawn with
//! effects from none to past the threshold, where the three outcomes each
//! occur. Seeded: the same pairs on every run.
mod output_fixtures;

use ipivmm_analysis::compare::{Comparison, Dimension, GateOptions};
use ipivmm_analysis::expect::{Expectation, Outcome, Verdicts};
use ipivmm_analysis::gate::{Policy, Verdict};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::Document;
use ipivmm_testkit::rng::Rng;
use output_fixtures::{report, temp_dir};
use std::process::Command;

const SIGMA: f64 = 0.11;
const OLD: &[&str] = &["--apic", "xapic"];
const NEW: &[&str] = &["--apic", "x2apic"];

/// One document: `repeats` of the xAPIC configuration and of the x2APIC
/// one, the second `effect` times slower.
fn document(r: &mut Rng, repeats: u32, effect: f64) -> Document {
    let mut runs = Vec::new();
    for (flags, factor) in [(OLD, 1.0), (NEW, effect)] {
        for i in 0..repeats {
            let mut run = report(
                flags,
                r.log_normal(400_000.0 * factor, SIGMA).round() as u64,
                3,
            );
            run.repeat = Some(i);
            runs.push(run);
        }
    }
    Document::new(runs, Vec::new())
}

/// The outcome as the exit code a CI reads: 0 pass, 1 fail, 4 undecided.
fn of_gate(v: Verdict) -> i32 {
    i32::from(v.exit_code())
}

fn of_expectation(o: &Outcome) -> i32 {
    match o {
        Outcome::Pass(_) => 0,
        Outcome::Fail(_) => 1,
        Outcome::Skip(_) | Outcome::Undecided(_) => 4,
    }
}

#[test]
fn compare_ratio_and_check_agree_on_the_same_repeats() {
    let ratio: Expectation = format!(
        "ratio(cycles_per_operation_p50, {}, {}) <= 1.1",
        report(NEW, 1, 3).label(),
        report(OLD, 1, 3).label()
    )
    .parse()
    .expect("the ratio parses");
    let d = temp_dir("gate-agreement");
    let mut r = Rng::new(0x6a7e_a9e5);
    let mut seen = [0usize; 5];
    let mut through_cli = 0;
    for (effect, repeats) in [(1.0, 8), (1.1, 8), (1.16, 8), (1.3, 5), (1.0, 4)] {
        for pair in 0..40 {
            let doc = document(&mut r, repeats, effect);
            let c = Comparison::by(
                &[("d.json".to_string(), doc.clone())],
                Dimension::Apic,
                &["xapic".to_string()],
            )
            .expect("the two APIC modes line up");
            let g = c.gate(&GateOptions {
                policy: Policy::DEFAULT,
                gated: vec![Metric::CyclesPerOpP50],
                drift: None,
                keep_busy: false,
            });
            let library = of_gate(g.verdict());
            let verdicts = Verdicts::of(&doc, std::slice::from_ref(&ratio));
            assert_eq!(verdicts.0.len(), 1);
            let expected = of_expectation(&verdicts.0[0].outcome);
            assert_eq!(
                library, expected,
                "effect ×{effect}, {repeats} repeats, pair {pair}: compare {library}, ratio() {:?}",
                verdicts.0[0].outcome
            );
            seen[library as usize] += 1;
            // The command line too, on every fourth pair (a process each).
            if pair % 4 == 0 {
                let f = d.join("d.json");
                std::fs::write(&f, doc.to_json()).unwrap();
                let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
                    .args(["compare", "--by", "apic", "--baseline", "xapic"])
                    .args([
                        "--gate",
                        "p50",
                        "--threshold",
                        "0.1",
                        "--fail-on-regression",
                        "-q",
                    ])
                    .arg(&f)
                    .output()
                    .expect("compare runs");
                assert_eq!(
                    o.status.code(),
                    Some(library),
                    "effect ×{effect}, pair {pair}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                through_cli += 1;
            }
        }
    }
    eprintln!(
        "agreement: {} pass, {} fail, {} undecided; {through_cli} through the command line",
        seen[0], seen[1], seen[4]
    );
    // Each outcome occurred, so agreement on it was tested.
    assert!(seen[0] >= 10 && seen[1] >= 10 && seen[4] >= 10, "{seen:?}");
    let _ = std::fs::remove_dir_all(&d);
}
