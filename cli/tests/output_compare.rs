//! `compare` of recorded results: expected ratios, flags for what is
//! missing, one-line errors for bad files.
mod output_fixtures;

use ipivmm::results::metrics::Metric;
use ipivmm::results::Document;
use ipivmm_cli::output::compare::{compare, compare_by, render, Dimension};
use output_fixtures::{report, temp_dir};
use std::path::Path;

fn record(dir: &Path, name: &str, runs: &[ipivmm::RunReport]) -> (String, Document) {
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
    let c = compare(&[a, b]);
    assert_eq!(c.columns, ["a.json", "b.json"]);
    let row = c
        .rows
        .iter()
        .find(|r| {
            r.key.mode.as_deref() == Some("kernel/xapic/icr")
                && r.key.workload.starts_with("pingpong")
        })
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
        .find(|r| r.key.mode.as_deref() == Some("kernel/x2apic/icr"))
        .unwrap();
    assert!(x2.cells[1].is_none() && x2.ratio(Metric::CyclesPerOpP50, 1).is_none());
    // b.json ran pingpong but not in x2APIC: really missing. a.json never
    // ran a broadcast: one line for the whole workload.
    assert!(
        c.flags
            .iter()
            .any(|f| f.contains("kernel/x2apic/icr: missing in column b.json")),
        "{:?}",
        c.flags
    );
    assert!(
        c.flags
            .iter()
            .any(|f| f == "broadcast, target spin not in column a.json"),
        "{:?}",
        c.flags
    );
    let text = render(&c, 0.10, false);
    // One run a side: a latency ratio cannot be judged (?), an exact count can.
    assert!(
        text.contains("×1.50 ?") && text.contains("×2.00 ▲"),
        "{text}"
    );
    assert!(text.contains("missing"), "{text}");
    // A broadcast delivers N-1 = 2 IPIs: its rows name the operation and
    // show both the per-broadcast and the per-IPI figures.
    assert!(
        text.contains("cycles/broadcast p50") && text.contains("exits/broadcast"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no colour when not asked");
    assert!(render(&c, 0.10, true).contains("\x1b[33mwarning"));
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
    let skipped = vec![ipivmm::results::SkippedMode {
        mode: "broadcast 8v kernel/xapic/icr".into(),
        reason: "xAPIC IDs stop at 254 (test)".into(),
    }];
    std::fs::write(&path, Document::new(runs, skipped).to_json()).unwrap();
    let docs = vec![("scale.json".to_string(), Document::load(&path).unwrap())];
    let c = compare_by(&docs, Dimension::Vcpus, None).unwrap();
    assert_eq!(c.columns, ["2", "4", "8"]);
    let x2 = c
        .rows
        .iter()
        .find(|r| r.key.mode.as_deref() == Some("kernel/x2apic/icr"))
        .unwrap();
    // Samples grow with N: 4x the cost at 8 vCPUs as at 2, and a broadcast
    // to 8 vCPUs delivers 7 IPIs.
    assert!((x2.ratio(Metric::CyclesPerOpP50, 2).unwrap() - 4.0).abs() < 1e-9);
    let s8 = x2.cells[2].as_ref().unwrap();
    assert_eq!(s8.ipis_per_operation(), Some(7.0));
    let xa = c
        .rows
        .iter()
        .find(|r| r.key.mode.as_deref() == Some("kernel/xapic/icr"))
        .unwrap();
    assert!(xa.cells[2].is_none());
    assert_eq!(
        xa.skipped[2].as_deref(),
        Some("xAPIC IDs stop at 254 (test)")
    );
    // The skip is a note, not a warning: nothing is really missing.
    assert!(c.flags.is_empty(), "{:?}", c.flags);
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
    let text = render(&c, 0.10, false);
    assert!(text.contains("N=8") && text.contains("skipped"), "{text}");
    // A baseline names a column, or is refused with the choices.
    let c = compare_by(&docs, Dimension::Vcpus, Some("4")).unwrap();
    assert_eq!(c.columns, ["4", "2", "8"]);
    let e = compare_by(&docs, Dimension::Vcpus, Some("16")).unwrap_err();
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
    let c = compare(&docs);
    assert_eq!(c.flags.len(), 1, "{:?}", c.flags);
    assert!(c.flags[0].contains("--by apic"), "{:?}", c.flags);
    let c = compare_by(&docs, Dimension::Mode, None).unwrap();
    assert_eq!(c.columns, ["kernel/xapic/icr", "kernel/x2apic/icr"]);
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.rows[0].key.file, None, "one run per cell: files merged");
    assert!((c.rows[0].ratio(Metric::CyclesPerOpP50, 1).unwrap() - 0.5).abs() < 1e-9);
    assert!((c.rows[0].ratio(Metric::ExitsPerIpi, 1).unwrap() - 0.5).abs() < 1e-9);
    assert!(c.flags.is_empty(), "{:?}", c.flags);
    // The same mode in both files: the file becomes part of the row.
    let again = record(&dir, "xapic-again.json", &[report(&[], 11_000, 4)]);
    let docs = [docs[0].clone(), again];
    let c = compare_by(&docs, Dimension::Mode, None).unwrap();
    assert_eq!(c.rows.len(), 2);
    assert!(c.rows.iter().all(|r| r.key.file.is_some()));
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
    // A good pair prints the table; CSV and charts land where asked.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .current_dir(&dir)
        .args([
            "compare", &good, &good, "--csv", "all.csv", "--plot", "charts",
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
    doc["runs"] = serde_json::Value::Array(vec![run; 300]);
    let text = serde_json::to_string(&doc).unwrap();
    let files: Vec<std::path::PathBuf> = (0..4)
        .map(|i| {
            let p = dir.join(format!("r{i}.json"));
            std::fs::write(&p, &text).unwrap();
            p
        })
        .collect();
    let input = 4 * text.len() as u64;
    drop(text);
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
    let c = compare(&[a.clone(), a]);
    let s = c.rows[0].cells[0].as_ref().expect("the run's summary");
    assert_eq!(
        (s.ipis, s.ipis_delivered, s.icr_writes),
        (u64::MAX, u64::MAX, u64::MAX)
    );
    let per_op = s.ipis_per_operation().expect("IPIs per round trip");
    assert!(per_op > 1e15, "IPIs per round trip {per_op}");
    let out = render(&c, 0.1, false);
    let line = out
        .lines()
        .find(|l| l.contains("IPIs/round trip"))
        .unwrap_or_else(|| panic!("no IPIs/round trip row:\n{out}"));
    assert!(!line.contains(" 0.00 "), "{line}");
}

/// Five repeats of one configuration, each run's latency `base` cycles
/// (plus a small spread) and `exits` exits per IPI.
fn repeats(base: u64, exits: u64) -> Vec<ipivmm::RunReport> {
    (0..5u64)
        .map(|i| {
            let mut r = report(&["--apic", "x2apic"], base + i * base / 100, exits);
            r.repeat = Some(i as u32);
            r
        })
        .collect()
}

#[test]
fn repeats_share_a_cell_and_the_gate_judges_them() {
    use ipivmm::stats::Verdict;
    use ipivmm_cli::output::compare::Judged;
    let dir = temp_dir("compare-repeats");
    let old = record(&dir, "old.json", &repeats(10_000, 2));
    let same = record(&dir, "same.json", &repeats(10_050, 2));
    let slow = record(&dir, "slow.json", &repeats(12_000, 2));
    // The five runs of a file are one cell, not five rows.
    let c = compare(&[old.clone(), same]);
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.rows[0].repeats[0].len(), 5);
    let g = c.gate(0.10, 0.05);
    assert!(g.compared > 0 && g.regressions.is_empty(), "{g:?}");
    match c.rows[0].judge(Metric::CyclesPerOpP50, 1, 0.10, 0.05) {
        Some(Judged::Figure(j)) => assert_eq!(j.verdict, Verdict::NoSignificantDifference),
        other => panic!("{other:?}"),
    }
    // 20% slower in every repeat: significant and beyond the threshold.
    let c = compare(&[old.clone(), slow]);
    let g = c.gate(0.10, 0.05);
    assert!(
        g.regressions
            .iter()
            .any(|r| r.contains("cycles/round trip p50")),
        "{g:?}"
    );
    // Not a regression where the threshold is above the change.
    assert!(c.gate(0.30, 0.05).regressions.is_empty());
    // Exact counts are judged as counts: 2 to 3 exits per IPI regresses.
    let more_exits = record(&dir, "exits.json", &repeats(10_000, 3));
    let g = compare(&[old, more_exits]).gate(0.10, 0.05);
    assert!(
        g.regressions.iter().any(|r| r.contains("exits/IPI")),
        "{g:?}"
    );
}

/// `runs` with every repeat recorded under `load` (others' share of the
/// host's CPU time beside this process's 50%, and steal).
fn loaded(mut runs: Vec<ipivmm::RunReport>, others: f64, steal: f64) -> Vec<ipivmm::RunReport> {
    for r in &mut runs {
        r.host_load = Some(ipivmm::stats::HostLoad {
            cpus: 2,
            busy: 0.5 + others,
            own: 0.5,
            steal,
        });
    }
    runs
}

#[test]
fn a_difference_is_the_hosts_only_where_the_slower_side_ran_on_a_busy_host() {
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
    // Slower while others took 40% of the CPUs, or 8% was stolen: maybe
    // the host's, so not judged (and not a pass).
    for slow in [busy_slow, stolen_slow] {
        let g = compare(&[quiet_old.clone(), slow]).gate(0.10, 0.05);
        assert!(g.regressions.is_empty(), "{g:?}");
        assert!(
            g.inconclusive.iter().any(|i| i.contains("busy host")),
            "{g:?}"
        );
    }
    // Slower on a quiet host (steal at this host's usual 3.7%), against a
    // baseline measured on a busy one: the load cannot explain it.
    let g = compare(&[busy_old, quiet_slow]).gate(0.10, 0.05);
    assert!(
        g.regressions
            .iter()
            .any(|r| r.contains("cycles/round trip p50")),
        "{g:?}"
    );
}

#[test]
fn one_run_a_side_is_inconclusive_and_nothing_compared_is_said() {
    let dir = temp_dir("compare-inconclusive");
    let a = record(&dir, "a.json", &[report(&["--apic", "x2apic"], 10_000, 2)]);
    let b = record(&dir, "b.json", &[report(&["--apic", "x2apic"], 30_000, 2)]);
    let g = compare(&[a.clone(), b]).gate(0.10, 0.05);
    assert!(g.regressions.is_empty(), "one run a side proves nothing");
    assert!(
        g.inconclusive.iter().any(|i| i.contains("too few repeats")),
        "{g:?}"
    );
    // Nothing to compare: an empty file, another APIC mode.
    let empty = record(&dir, "empty.json", &[]);
    assert_eq!(compare(&[a.clone(), empty]).gate(0.10, 0.05).compared, 0);
    let other = record(&dir, "xapic.json", &[report(&[], 10_000, 2)]);
    assert_eq!(compare(&[a, other]).gate(0.10, 0.05).compared, 0);
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
    runs[2].status = ipivmm::results::RunStatus::TimedOut {
        after_s: 60,
        stuck: "vcpu1 at rip=0x1000".into(),
        hint: String::new(),
    };
    let docs = [record(&dir, "s.json", &runs)];
    let c = compare_by(&docs, Dimension::Vcpus, None).unwrap();
    let row = &c.rows[0];
    assert_eq!(c.columns, ["2", "4", "8"]);
    assert!(row.ratio(Metric::CyclesPerOpP50, 1).is_some());
    assert_eq!(row.ratio(Metric::CyclesPerOpP50, 2), None);
    assert_eq!(row.ratio(Metric::ExitsPerIpi, 2), None);
    assert!(c
        .regressions(0.0001, 0.0)
        .iter()
        .all(|r| !r.contains("N=8")));
    let text = render(&c, 0.1, false);
    let note = text
        .find("not compared: 1 run that did not complete")
        .expect("the note");
    let table = text.find('┌').expect("the table");
    assert!(note < table, "{text}");
    // Its cells say so, with no figure and no ratio.
    for line in text
        .lines()
        .filter(|l| l.starts_with('│') && l.contains("cycles/"))
    {
        assert!(
            line.trim_end_matches('│')
                .trim_end()
                .ends_with("incomplete"),
            "{line}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
