//! `compare` of recorded results: expected ratios, flags for what is
//! missing, one-line errors for bad files.
mod output_fixtures;

use ipivmm_analysis::compare::GateOptions;
use ipivmm_analysis::gate::{Decision, Verdict};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::Document;
use ipivmm_cli::output::compare::{render, Comparison, Dimension};
use output_fixtures::{report, temp_dir};
use std::path::Path;

/// The comparison as text with the default gate, decisions included.
fn rendered(c: &Comparison, color: bool) -> String {
    render(c, &c.gate(&GateOptions::default()), color, false)
}

fn record(
    dir: &Path,
    name: &str,
    runs: &[ipivmm_analysis::results::RunReport],
) -> (String, Document) {
    let path = dir.join(name);
    std::fs::write(&path, Document::new(runs.to_vec(), Vec::new()).to_json()).unwrap();
    (name.to_string(), Document::load(&path).unwrap())
}

#[test]
fn compare_of_two_recorded_files_gives_the_expected_ratios() {
    let dir = temp_dir("compare");
    let a = record(
        &dir,
        "a.json",
        &[
            report(&[], 10_000, 3),
            report(&["--apic", "x2apic"], 8_000, 2),
        ],
    );
    let b = record(
        &dir,
        "b.json",
        &[
            report(&[], 15_000, 6),
            report(&["--workload", "broadcast", "--vcpus", "3"], 20_000, 4),
        ],
    );
    let c = Comparison::of(&[a, b]).unwrap();
    assert_eq!(c.names(), ["a.json", "b.json"]);
    let row = c
        .rows
        .iter()
        .find(|r| r.id.label() == "kernel/xapic/icr" && r.id.guest.name() == "pingpong")
        .unwrap();
    let ratio = |m| row.ratio(m, 1).unwrap();
    // Samples scale linearly with the base: every percentile is 1.5x.
    assert!(
        (ratio(Metric::CyclesPerOpP50) - 1.5).abs() < 1e-9,
        "{}",
        ratio(Metric::CyclesPerOpP50)
    );
    assert!((ratio(Metric::CyclesPerOpP99) - 1.5).abs() < 1e-9);
    assert!((ratio(Metric::NsPerOpP50) - 1.5).abs() < 1e-9);
    // 6 vs 3 exits per IPI; ICR-write exits are one per IPI on both sides.
    assert!(
        (ratio(Metric::ExitsPerIpi) - 2.0).abs() < 1e-9,
        "{}",
        ratio(Metric::ExitsPerIpi)
    );
    assert!((ratio(Metric::IcrExitsPerIpi) - 1.0).abs() < 1e-9);
    assert_eq!(row.ratio(Metric::CyclesPerOpP50, 0), Some(1.0));

    let x2 = c
        .rows
        .iter()
        .find(|r| r.id.label() == "kernel/x2apic/icr")
        .unwrap();
    assert!(x2.cells[1].runs.is_empty() && x2.ratio(Metric::CyclesPerOpP50, 1).is_none());
    // b.json ran pingpong but not in x2APIC: missing, and the gate counts
    // it (undecided: never a silent pass).
    assert!(
        c.flags
            .iter()
            .any(|f| f.contains("kernel/x2apic/icr in column [2]: missing")),
        "{:?}",
        c.flags
    );
    let text = rendered(&c, false);
    // One run a side: a latency ratio cannot be decided (?), an exact
    // count can (2 exits per IPI more: regressed).
    assert!(
        text.contains("×1.50 ?") && text.contains("×2.00 ▲"),
        "{text}"
    );
    assert!(text.contains("missing"), "{text}");
    // One recording a side and no noise profile: the drift between them
    // is unmeasured, so latency is not decided whatever the repeats.
    assert!(text.contains("one recording a side"), "{text}");
    // A broadcast delivers N-1 = 2 IPIs: its rows name the operation and
    // show both the per-broadcast and the per-IPI figures.
    assert!(
        text.contains("cycles/broadcast p50") && text.contains("exits/broadcast"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no colour when not asked");
    let g = c.gate(&GateOptions::default());
    assert!(render(&c, &g, true, false).contains("\x1b[33mwarning"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_by_vcpus_lines_up_counts_and_explains_skipped_cells() {
    let dir = temp_dir("compare-vcpus");
    let runs: Vec<_> = [2usize, 4, 8]
        .iter()
        .flat_map(|n| {
            let n = n.to_string();
            let mut v = vec![report(
                &["--workload", "broadcast", "--vcpus", &n, "--apic", "x2apic"],
                1_000 * n.parse::<u64>().unwrap(),
                2,
            )];
            if n != "8" {
                v.push(report(
                    &["--workload", "broadcast", "--vcpus", &n],
                    1_000,
                    2,
                ));
            }
            v
        })
        .collect();
    let path = dir.join("scale.json");
    let skipped = vec![ipivmm_analysis::results::SkippedMode {
        mode: "broadcast 8v kernel/xapic/icr".into(),
        reason: "xAPIC IDs stop at 254 (test)".into(),
        id: None,
    }];
    std::fs::write(&path, Document::new(runs, skipped).to_json()).unwrap();
    let docs = vec![("scale.json".to_string(), Document::load(&path).unwrap())];
    let c = Comparison::by(&docs, Dimension::Vcpus, &[]).unwrap();
    assert_eq!(c.names(), ["2", "4", "8"]);
    let x2 = c
        .rows
        .iter()
        .find(|r| r.id.label() == "kernel/x2apic/icr")
        .unwrap();
    // Samples grow with N: 4x the cost at 8 vCPUs as at 2, and a broadcast
    // to 8 vCPUs delivers 7 IPIs.
    assert!((x2.ratio(Metric::CyclesPerOpP50, 2).unwrap() - 4.0).abs() < 1e-9);
    assert_eq!(x2.median(Metric::IpisPerOp, 2), Some(7.0));
    let xa = c
        .rows
        .iter()
        .find(|r| r.id.label() == "kernel/xapic/icr")
        .unwrap();
    assert!(xa.cells[2].runs.is_empty());
    // An older file's skip (no typed identity) matched by its label.
    assert_eq!(
        xa.cells[2].skipped.as_deref(),
        Some("xAPIC IDs stop at 254 (test)")
    );
    // The skip is a note, not a warning: nothing is really missing.
    assert!(c.flags.is_empty(), "{:?}", c.flags);
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
    let text = rendered(&c, false);
    assert!(text.contains("N=8") && text.contains("skipped"), "{text}");
    // A baseline names a column, or is refused with the choices.
    let c = Comparison::by(&docs, Dimension::Vcpus, &["4".into()]).unwrap();
    assert_eq!(c.names(), ["4", "2", "8"]);
    let e = Comparison::by(&docs, Dimension::Vcpus, &["16".into()]).unwrap_err();
    assert!(e.to_string().contains("2, 4, 8"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_by_mode_lines_up_modes_recorded_in_separate_files() {
    let dir = temp_dir("compare-mode");
    let a = record(&dir, "xapic.json", &[report(&[], 10_000, 4)]);
    let b = record(
        &dir,
        "x2apic.json",
        &[report(&["--apic", "x2apic"], 5_000, 2)],
    );
    let docs = [a, b];
    // By file nothing lines up, and the comparison says what to do instead.
    let c = Comparison::of(&docs).unwrap();
    assert_eq!(c.flags.len(), 1, "{:?}", c.flags);
    assert!(c.flags[0].contains("--by apic"), "{:?}", c.flags);
    let c = Comparison::by(&docs, Dimension::Mode, &[]).unwrap();
    assert_eq!(c.names(), ["kernel/xapic/icr", "kernel/x2apic/icr"]);
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.rows[0].file, None, "one run per cell: files merged");
    assert!((c.rows[0].ratio(Metric::CyclesPerOpP50, 1).unwrap() - 0.5).abs() < 1e-9);
    assert!((c.rows[0].ratio(Metric::ExitsPerIpi, 1).unwrap() - 0.5).abs() < 1e-9);
    assert!(c.flags.is_empty(), "{:?}", c.flags);
    // The same mode in both files: the file becomes part of the row.
    let again = record(&dir, "xapic-again.json", &[report(&[], 11_000, 4)]);
    let docs = [docs[0].clone(), again];
    let c = Comparison::by(&docs, Dimension::Mode, &[]).unwrap();
    assert_eq!(c.rows.len(), 2);
    assert!(c.rows.iter().all(|r| r.file.is_some()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compare_command_reports_bad_files_in_one_line() {
    let dir = temp_dir("compare-cli");
    let good = record(&dir, "good.json", &[report(&[], 1_000, 2)]).0;
    std::fs::write(dir.join("bad.json"), "{ this is not json").unwrap();
    std::fs::write(dir.join("other.json"), r#"{"schema": "something/1"}"#).unwrap();
    for (file, needle) in [
        ("bad.json", "bad.json: not JSON"),
        (
            "other.json",
            "other.json: schema \"something/1\" is not an ipivmm results schema",
        ),
        ("missing.json", "missing.json: cannot read"),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
            .current_dir(&dir)
            .args(["compare", &good, file])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with("ipivmm: error: ") && e.contains(needle),
            "{e}"
        );
    }
    // The same file twice is one recording, refused in one line.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .current_dir(&dir)
        .args(["compare", &good, &good])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("are the same run"), "{e}");
    // A good pair prints the table; CSV and charts land where asked.
    let again = record(&dir, "again.json", &[report(&[], 1_000, 2)]).0;
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .current_dir(&dir)
        .args([
            "compare", &good, &again, "--csv", "all.csv", "--plot", "charts",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("cycles/round trip p50") && out.contains("×1.00"),
        "{out}"
    );
    assert!(!out.contains('\x1b'), "no colour on a pipe");
    assert!(dir.join("all.csv").metadata().unwrap().len() > 0);
    assert!(dir.join("charts/pingpong-2vcpu-spin-cycles.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20, case 17: `ipivmm compare` reads one document at a time and
/// never builds a generic JSON tree of it, so its peak memory stays near
/// the input's size (4 files of 300 recorded runs, 20 MB: it took 118 MiB,
/// 6x the input; 8,000 runs took 1.7 GiB). A memory figure, not a timing:
/// the same on any machine.
#[test]
fn compare_holds_one_document_at_a_time() {
    let dir = temp_dir("compare-memory");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/run-pingpong.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    let run = doc["runs"][0].clone();
    // 300 repeats of the run, each with its own index and its own
    // timings (one index twice would be refused: a run written twice is
    // not two repeats; nor is one run found in two files).
    let total_ns = run["timings"]["total_ns"].as_u64().unwrap();
    let texts: Vec<String> = (0..4u64)
        .map(|f| {
            doc["runs"] = serde_json::Value::Array(
                (0..300u64)
                    .map(|i| {
                        let mut r = run.clone();
                        r["repeat"] = serde_json::json!(i);
                        r["timings"]["total_ns"] = serde_json::json!(total_ns + 1000 * f + i);
                        r
                    })
                    .collect(),
            );
            serde_json::to_string(&doc).unwrap()
        })
        .collect();
    let files: Vec<std::path::PathBuf> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let p = dir.join(format!("r{i}.json"));
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect();
    let text = texts.concat();
    let input = text.len() as u64;
    drop((text, texts));
    // The child's own VmHWM, as it logs it (wait4's ru_maxrss would count
    // this test process's pages too: Linux keeps the pre-exec high water).
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .arg("compare")
        .args(&files)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{log}");
    let peak_kib: u64 = log
        .split("peak RSS ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS line: {log}"));
    assert!(log.contains("4 files, 1200 runs"), "{log}");
    let peak = peak_kib * 1024;
    assert!(
        peak < input + input / 2 + (16 << 20),
        "peak RSS {} MiB for {} MiB of input",
        peak >> 20,
        input >> 20
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20, case 11: a results file whose two vCPUs each count 2^63 IPIs
/// (a guest can send such counters). `compare` summed them wrapping, to 0:
/// "IPIs/round trip 0.00". Sums now saturate at 2^64 - 1.
#[test]
fn compare_saturates_counters_that_overflow() {
    let dir = temp_dir("compare-overflow");
    let mut r = report(&[], 10_000, 3);
    for v in &mut r.vcpus {
        for p in v.phases.iter_mut().filter(|p| p.name == "measure") {
            p.guest.ipis_sent = 1 << 63;
            p.guest.ipis_received = 1 << 63;
            p.guest.icr_writes = 1 << 63;
        }
    }
    let a = record(&dir, "huge.json", std::slice::from_ref(&r));
    let text = std::fs::read_to_string(dir.join("huge.json")).unwrap();
    assert!(text.contains("9223372036854775808"), "the file holds 2^63");
    r.timings.total_ns += 1;
    let b = record(&dir, "huge-again.json", std::slice::from_ref(&r));
    let c = Comparison::of(&[a, b]).unwrap();
    let s = &c.rows[0].cells[0].runs[0].summary;
    assert_eq!(
        (s.ipis, s.ipis_delivered, s.icr_writes),
        (u64::MAX, u64::MAX, u64::MAX)
    );
    let per_op = s.ipis_per_operation().expect("IPIs per round trip");
    assert!(per_op > 1e15, "IPIs per round trip {per_op}");
    let out = rendered(&c, false);
    let line = out
        .lines()
        .find(|l| l.contains("IPIs/round trip"))
        .unwrap_or_else(|| panic!("no IPIs/round trip row:\n{out}"));
    assert!(!line.contains(" 0.00 "), "{line}");
}

/// Five repeats of one configuration, each run's latency `base` cycles
/// (plus a small spread) and `exits` exits per IPI.
fn repeats(base: u64, exits: u64) -> Vec<ipivmm_analysis::results::RunReport> {
    (0..5u64)
        .map(|i| {
            let mut r = report(&["--apic", "x2apic"], base + i * base / 100, exits);
            r.repeat = Some(i as u32);
            r
        })
        .collect()
}

/// The gate's outcome for `metric` of the only row, column 1.
fn outcome(c: &Comparison, metric: Metric) -> Decision {
    outcome_with(c, metric, &GateOptions::default())
}

/// A noise profile's drift (log sd 0.02): what lets one file a side
/// decide latency (issue 47: without one, latency is undecided).
fn profiled() -> GateOptions {
    GateOptions {
        drift: Some(0.02),
        ..GateOptions::default()
    }
}

/// [`outcome`] under `opts`.
fn outcome_with(c: &Comparison, metric: Metric, opts: &GateOptions) -> Decision {
    let g = c.gate(opts);
    let i = g
        .endpoints
        .iter()
        .position(|e| e.metric == metric && e.column == 1)
        .unwrap_or_else(|| panic!("no endpoint for {metric:?}: {g:?}"));
    g.family.judged[i].outcome.clone()
}

fn verdict(docs: &[(String, Document)]) -> Verdict {
    Comparison::of(docs)
        .unwrap()
        .gate(&GateOptions::default())
        .verdict()
}

#[test]
fn repeats_share_a_cell_and_the_gate_judges_them() {
    let dir = temp_dir("compare-repeats");
    let old = record(&dir, "old.json", &repeats(10_000, 2));
    let same = record(&dir, "same.json", &repeats(10_050, 2));
    let slow = record(&dir, "slow.json", &repeats(12_000, 2));
    // The five runs of a file are one cell, not five rows.
    let c = Comparison::of(&[old.clone(), same]).unwrap();
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.rows[0].cells[0].runs.len(), 5);
    // (One file a side decides latency only with a noise profile's drift.)
    assert_eq!(
        outcome_with(&c, Metric::CyclesPerOpP50, &profiled()),
        Decision::Equivalent
    );
    assert_eq!(outcome(&c, Metric::ExitsPerIpi), Decision::Equivalent);
    assert_eq!(c.gate(&profiled()).exit_code(), 0);
    // 20% slower in every repeat: significant and beyond the threshold.
    let c = Comparison::of(&[old.clone(), slow]).unwrap();
    assert_eq!(
        outcome_with(&c, Metric::CyclesPerOpP50, &profiled()),
        Decision::Regressed
    );
    // Not a regression where the threshold is above the change.
    let loose = GateOptions {
        policy: ipivmm_analysis::gate::Policy {
            threshold: 0.30,
            ..Default::default()
        },
        ..profiled()
    };
    assert_ne!(c.gate(&loose).verdict(), Verdict::Fail);
    // Exact counts are judged as counts: 2 to 3 exits per IPI regresses.
    let more_exits = record(&dir, "exits.json", &repeats(10_000, 3));
    let c = Comparison::of(&[old, more_exits]).unwrap();
    assert_eq!(outcome(&c, Metric::ExitsPerIpi), Decision::Regressed);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `runs` with every repeat recorded under `load` (others' share of the
/// host's CPU time beside this process's 50%, and steal).
fn loaded(
    mut runs: Vec<ipivmm_analysis::results::RunReport>,
    others: f64,
    steal: f64,
) -> Vec<ipivmm_analysis::results::RunReport> {
    for r in &mut runs {
        r.host_load = Some(ipivmm_analysis::stats::HostLoad {
            cpus: 2,
            busy: 0.5 + others,
            own: 0.5,
            steal,
        });
    }
    runs
}

/// Issue 40: a repeat measured on a busy host is left out of the evidence
/// (said beside the decision); a pass never rests on a busy baseline.
#[test]
fn repeats_of_a_busy_host_are_left_out_and_a_busy_baseline_never_passes() {
    let dir = temp_dir("compare-busy");
    let quiet_old = record(&dir, "old.json", &loaded(repeats(10_000, 2), 0.0, 0.01));
    let busy_old = record(&dir, "busy-old.json", &loaded(repeats(10_000, 2), 0.4, 0.0));
    let busy_slow = record(
        &dir,
        "busy-slow.json",
        &loaded(repeats(12_000, 2), 0.4, 0.0),
    );
    let stolen_slow = record(&dir, "stolen.json", &loaded(repeats(12_000, 2), 0.0, 0.08));
    let quiet_slow = record(&dir, "slow.json", &loaded(repeats(12_000, 2), 0.0, 0.037));
    for slow in [busy_slow, stolen_slow] {
        let c = Comparison::of(&[quiet_old.clone(), slow]).unwrap();
        let g = c.gate(&GateOptions::default());
        assert_eq!(g.verdict(), Verdict::Undecided, "{g:?}");
        assert!(
            g.endpoints
                .iter()
                .any(|e| e.notes.iter().any(|n| n.contains("busy host"))),
            "{g:?}"
        );
    }
    // A busy baseline that hides a 20% regression: never exit 0.
    let hidden = record(&dir, "hidden.json", &loaded(repeats(10_000, 2), 0.0, 0.0));
    let busy_fast_base = record(
        &dir,
        "busy-base.json",
        &loaded(repeats(12_000, 2), 0.5, 0.0),
    );
    assert_ne!(verdict(&[busy_fast_base, hidden]), Verdict::Pass);
    // Against a busy baseline nothing is left to compare: undecided.
    assert_eq!(verdict(&[busy_old, quiet_slow]), Verdict::Undecided);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_run_a_side_is_undecided_and_nothing_compared_is_said() {
    let dir = temp_dir("compare-undecided");
    let a = record(&dir, "a.json", &[report(&["--apic", "x2apic"], 10_000, 2)]);
    let b = record(&dir, "b.json", &[report(&["--apic", "x2apic"], 30_000, 2)]);
    let c = Comparison::of(&[a.clone(), b]).unwrap();
    match outcome(&c, Metric::CyclesPerOpP50) {
        Decision::Undecided { why, needs } => {
            assert!(why.contains("one recording a side"), "{why}");
            assert!(needs.is_none() || needs.unwrap() > 1);
        }
        other => panic!("{other:?}"),
    }
    // An empty new file: every configuration of the baseline is missing
    // (undecided, not a pass); an empty baseline: nothing to compare.
    let empty = record(&dir, "empty.json", &[]);
    assert_eq!(verdict(&[a.clone(), empty.clone()]), Verdict::Undecided);
    assert_eq!(verdict(&[empty, a.clone()]), Verdict::NothingCompared);
    let other = record(&dir, "xapic.json", &[report(&[], 10_000, 2)]);
    // The baseline's configuration is missing in the other file: undecided.
    assert_eq!(verdict(&[a, other]), Verdict::Undecided);
}

/// Issue 30: after a sweep with TIMEOUT rows, `compare --by vcpus` shows no
/// ratio from a run that did not complete, and says so before the table.
#[test]
fn a_run_that_did_not_complete_is_in_no_ratio_and_said_before_the_table() {
    let dir = temp_dir("compare-timeout");
    let mut runs: Vec<_> = [2u64, 4, 8]
        .iter()
        .map(|&n| {
            let v = n.to_string();
            report(&["--workload", "broadcast", "--vcpus", &v], 1_000 * n, 2)
        })
        .collect();
    runs[2].status = ipivmm_analysis::results::RunStatus::TimedOut {
        after_s: 60,
        stuck: "vcpu1 at rip=0x1000".into(),
        hint: String::new(),
    };
    let docs = [record(&dir, "s.json", &runs)];
    let c = Comparison::by(&docs, Dimension::Vcpus, &[]).unwrap();
    let row = &c.rows[0];
    assert_eq!(c.names(), ["2", "4", "8"]);
    assert!(row.ratio(Metric::CyclesPerOpP50, 1).is_some());
    assert_eq!(row.ratio(Metric::CyclesPerOpP50, 2), None);
    assert_eq!(row.ratio(Metric::ExitsPerIpi, 2), None);
    // A column whose every run failed fails the gate: it is not dropped.
    let g = c.gate(&GateOptions::default());
    assert!(
        g.endpoints
            .iter()
            .zip(&g.family.judged)
            .any(|(e, j)| e.column == 2 && matches!(j.outcome, Decision::Failed { .. })),
        "{g:?}"
    );
    assert_eq!(g.verdict(), Verdict::Fail);
    let text = rendered(&c, false);
    let note = text
        .find("not compared: 1 run that did not complete")
        .expect("the note");
    let table = text.find('┌').expect("the table");
    assert!(note < table, "{text}");
    for line in text
        .lines()
        .filter(|l| l.starts_with('│') && l.contains("cycles/"))
    {
        assert!(line.contains("incomplete"), "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ipivmm compare --fail-on-regression` on files in `dir`; its exit
/// code and stderr.
fn gate_cli(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .current_dir(dir)
        .arg("compare")
        .args(args)
        .args(["--fail-on-regression", "--quiet"])
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Issue 40's five fake passes, each with crafted files whose truth is a
/// regression: each exits non-zero now.
#[test]
fn the_five_fake_passes_exit_non_zero() {
    let dir = temp_dir("compare-fake-passes");
    let base = record(&dir, "base.json", &repeats(10_000, 2)).0;
    let slow = record(&dir, "new.json", &repeats(15_000, 2)).0;
    // Second recordings of each: one file a side leaves latency undecided
    // (issue 47), two baseline recordings decide it.
    record(&dir, "base-b.json", &repeats(10_100, 2));
    record(&dir, "new-b.json", &repeats(15_100, 2));
    // 1. --baseline names the baseline file even when it is given second.
    let (code, e) = gate_cli(
        &dir,
        &[
            "new.json",
            "base.json",
            "--baseline",
            "base.json",
            "--baseline",
            "base-b.json",
        ],
    );
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("regressed"), "{e}");
    // The 1.5x faster direction is not a regression.
    let (code, e) = gate_cli(
        &dir,
        &[
            "new.json",
            "base.json",
            "--baseline",
            "new.json",
            "--baseline",
            "new-b.json",
        ],
    );
    assert_eq!(code, Some(0), "{e}");
    // One baseline file: latency undecided (exit 4), never a verdict.
    let (code, e) = gate_cli(&dir, &["new.json", "base.json", "--baseline", "base.json"]);
    assert_eq!(code, Some(4), "{e}");
    let _ = (base, slow);

    // 2. A configuration whose every repeat failed, one a killed sweep
    // never reached, one that could not start: accounted for, not dropped.
    let other = |flags: &[&str], base: u64| {
        (0..5u32)
            .map(|i| {
                let mut r = report(flags, base, 2);
                r.repeat = Some(i);
                r
            })
            .collect::<Vec<_>>()
    };
    let mut base2 = repeats(10_000, 2);
    base2.extend(other(&["--apic", "xapic"], 10_000));
    record(&dir, "base2.json", &base2);
    let mut failed = repeats(10_000, 2);
    let mut broken = other(&["--apic", "xapic"], 10_000);
    for r in &mut broken {
        r.status = ipivmm_analysis::results::RunStatus::TimedOut {
            after_s: 60,
            stuck: "vcpu0".into(),
            hint: String::new(),
        };
    }
    failed.extend(broken);
    record(&dir, "failed.json", &failed);
    let (code, e) = gate_cli(&dir, &["base2.json", "failed.json"]);
    assert_eq!(code, Some(1), "every repeat failed: {e}");
    let partial = Document {
        incomplete: Some("killed after 5 runs".into()),
        ..Document::new(repeats(10_000, 2), Vec::new())
    };
    std::fs::write(dir.join("partial.json"), partial.to_json()).unwrap();
    // A killed command's file is a failing point naming it (issue 47: one
    // reading of "incomplete" on every surface, as plans over files).
    let (code, e) = gate_cli(&dir, &["base2.json", "partial.json"]);
    assert_eq!(code, Some(1), "a file that is not whole: {e}");
    assert!(
        e.contains("partial.json: not a whole recording: killed after 5 runs"),
        "{e}"
    );
    let skipped = vec![ipivmm_analysis::results::SkippedMode {
        mode: "pingpong 2v kernel/xapic/icr".into(),
        reason: "could not start: Too many open files".into(),
        id: Some(ipivmm_analysis::results::identity::ConfigId::of(&base2[5])),
    }];
    std::fs::write(
        dir.join("nostart.json"),
        Document::new(repeats(10_000, 2), skipped).to_json(),
    )
    .unwrap();
    let (code, e) = gate_cli(&dir, &["base2.json", "nostart.json"]);
    assert_eq!(code, Some(1), "could not start: {e}");

    // 3. A count of 0 in the baseline (no ICR-write exit per IPI: the
    // IPIv/AVIC signature) that becomes 1; and a new file without it.
    let mut zero = repeats(10_000, 2);
    for r in &mut zero {
        for v in &mut r.vcpus {
            for p in &mut v.phases {
                if let Some(i) = p.icr_write_exits.as_mut() {
                    i.exits = 0;
                    i.accelerated = p.guest.icr_writes;
                }
            }
        }
    }
    record(&dir, "zero.json", &zero);
    let (code, e) = gate_cli(&dir, &["zero.json", "base.json"]);
    assert_eq!(code, Some(1), "0 to 1 ICR-write exits per IPI: {e}");
    assert!(e.contains("ICR-write exits/IPI"), "{e}");
    let mut lacking = repeats(10_000, 2);
    for r in &mut lacking {
        for v in &mut r.vcpus {
            for p in &mut v.phases {
                p.icr_write_exits = None;
            }
        }
    }
    record(&dir, "lacking.json", &lacking);
    let (code, e) = gate_cli(&dir, &["zero.json", "lacking.json"]);
    assert_eq!(code, Some(4), "the figure missing in the new file: {e}");

    // 4. One repeat with latency 0 leaves the figure judged on the others.
    let mut zero_latency = repeats(15_000, 2);
    for v in &mut zero_latency[0].vcpus {
        for p in &mut v.phases {
            p.samples.iter_mut().for_each(|s| *s = 0);
            p.latency = ipivmm_analysis::results::latency::LatencyStats::from_samples(
                &p.samples, 2_000_000,
            );
        }
    }
    record(&dir, "zero-latency.json", &zero_latency);
    let (code, e) = gate_cli(
        &dir,
        &[
            "zero-latency.json",
            "--baseline",
            "base.json",
            "--baseline",
            "base-b.json",
        ],
    );
    assert_eq!(code, Some(1), "{e}");
    assert!(e.contains("1 of 5 repeats left out"), "{e}");

    // 5. One run written five times is not five repeats: the same run,
    // by content, whatever its repeat index says.
    let once = report(&["--apic", "x2apic"], 15_000, 2);
    let mut copies: Vec<_> = (0..5).map(|_| once.clone()).collect();
    copies.iter_mut().for_each(|r| r.repeat = Some(0));
    record(&dir, "copies.json", &copies);
    let (code, e) = gate_cli(&dir, &["base.json", "copies.json"]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("are the same run"), "{e}");
    copies
        .iter_mut()
        .enumerate()
        .for_each(|(i, r)| r.repeat = Some(i as u32));
    record(&dir, "relabelled.json", &copies);
    let (code, e) = gate_cli(&dir, &["base.json", "relabelled.json"]);
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("are the same run"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several recordings of the baseline: the gate measures the drift between
/// them and judges the new recording against it.
#[test]
fn several_baseline_recordings_measure_the_drift() {
    let dir = temp_dir("compare-recordings");
    // Three baseline files whose medians drift by ±15%.
    for (i, f) in [1.0, 1.15, 0.87].iter().enumerate() {
        record(
            &dir,
            &format!("b{i}.json"),
            &repeats((10_000.0 * f) as u64, 2),
        );
    }
    record(&dir, "within.json", &repeats(10_500, 2));
    let args = [
        "within.json",
        "--baseline",
        "b0.json",
        "--baseline",
        "b1.json",
        "--baseline",
        "b2.json",
    ];
    let (code, e) = gate_cli(&dir, &args);
    // 5% off the baseline's mean, but the recordings drift by 15%: the
    // drift, not the repeats, sets the uncertainty.
    assert_ne!(code, Some(1), "{e}");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .current_dir(&dir)
        .args(["compare"])
        .args(args)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("recordings t test") && out.contains("3 vs 1 recordings"),
        "{out}"
    );
    // One baseline file: the gate says drift is unmeasured and leaves
    // latency undecided (exit 4).
    let (code, e) = gate_cli(&dir, &["b0.json", "within.json"]);
    assert!(
        e.contains("nothing measures the drift between recordings"),
        "{e}"
    );
    assert_eq!(code, Some(4), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 39: `compare` of two 3-repeat files prints no line over 120
/// columns, legend and decisions included.
#[test]
fn a_comparison_fits_120_columns() {
    let dir = temp_dir("compare-width");
    let three = |base: u64| {
        (0..3u32)
            .map(|i| {
                let mut r = report(
                    &[
                        "--apic",
                        "x2apic",
                        "--workload",
                        "broadcast",
                        "--vcpus",
                        "4",
                    ],
                    base + 37 * u64::from(i),
                    3,
                );
                r.repeat = Some(i);
                r
            })
            .collect::<Vec<_>>()
    };
    record(
        &dir,
        "first-recording-with-a-long-name.json",
        &three(10_000),
    );
    record(
        &dir,
        "second-recording-with-a-long-name.json",
        &three(11_000),
    );
    for extra in [&[][..], &["--fail-on-regression"][..]] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
            .current_dir(&dir)
            .args([
                "compare",
                "first-recording-with-a-long-name.json",
                "second-recording-with-a-long-name.json",
            ])
            .args(extra)
            .output()
            .unwrap();
        for text in [&o.stdout, &o.stderr] {
            let text = String::from_utf8_lossy(text);
            for line in text.lines() {
                assert!(
                    line.chars().count() <= 120,
                    "{} columns: {line}",
                    line.chars().count()
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A halted-target run whose target halted 200 times and never polled,
/// with halt polling on (the host's kvm.halt_poll_ns 200000): the
/// counters of issue 50's `compare --run` (halt_attempted_poll 0,
/// halt_wakeup 200).
fn never_polled(base: u64) -> ipivmm_analysis::results::RunReport {
    let mut r = report(&["--apic", "x2apic"], base, 3);
    r.mode.target = ipivmm_analysis::mode::TargetWait::Halt;
    let mut settings = ipivmm_analysis::results::HostSettings::of(
        &ipivmm_host::facts::HostInfo::synthetic(ipivmm::host::KvmBackend::KvmPvm, false),
    );
    settings
        .params
        .entry("kvm".into())
        .or_default()
        .insert("halt_poll_ns".into(), "200000".into());
    r.host_settings = Some(settings);
    for p in r.vcpus[1].phases.iter_mut().filter(|p| p.name == "measure") {
        for (k, v) in [
            ("halt_exits", 200),
            ("halt_attempted_poll", 0),
            ("halt_successful_poll", 0),
            ("halt_wakeup", 200),
            ("halt_wait_hist", 200),
            ("halt_wait_ns", 200 * 250_000),
        ] {
            p.kvm_stats.insert(k.into(), v);
        }
    }
    r
}

/// Issue 50: two sides that "compare equivalent" while halt polling,
/// on, polled not once: the comparison says so beside the verdict, in
/// the text and in the decisions `--fail-on-regression` prints. On the
/// old code nothing said it.
#[test]
fn a_lever_with_nothing_to_act_on_is_said_beside_the_verdict() {
    let dir = temp_dir("lever");
    let a = record(&dir, "a.json", &[never_polled(10_000)]);
    let b = record(&dir, "b.json", &[never_polled(10_100)]);
    let c = Comparison::of(&[a, b]).unwrap();
    let notes = ipivmm_cli::output::compare::lever_notes(&c);
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].ends_with(
            "[1]: halt polling: 0 polls attempted in 200 halts with halt_poll_ns 200000 (the host's \
             kvm.halt_poll_ns): the lever had nothing to act on here (KVM starts polling only after a halt \
             shorter than 200 µs; these halts slept 250 µs on average)"
        ),
        "{notes:?}"
    );
    let text = rendered(&c, false);
    assert!(
        text.contains("halt polling: 0 polls attempted in 200 halts"),
        "{text}"
    );
    let g = c.gate(&GateOptions::default());
    let said = ipivmm_cli::output::compare::decisions(&c, &g);
    assert!(
        said.iter()
            .any(|(l, _)| l.contains("the lever had nothing to act on")),
        "{said:?}"
    );
    // Runs that polled say nothing.
    let mut polled = never_polled(10_000);
    for p in polled.vcpus[1].phases.iter_mut() {
        p.kvm_stats.insert("halt_attempted_poll".into(), 200);
        p.kvm_stats.insert("halt_successful_poll".into(), 190);
    }
    // Two recordings, not one run twice (which compare refuses).
    let a = record(&dir, "c.json", &[polled.clone()]);
    polled.timings.setup_ns += 1;
    let b = record(&dir, "d.json", &[polled]);
    let c = Comparison::of(&[a, b]).unwrap();
    assert!(ipivmm_cli::output::compare::lever_notes(&c).is_empty());
}
