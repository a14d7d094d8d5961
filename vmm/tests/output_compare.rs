//! `compare` of recorded results: expected ratios, flags for what is
//! missing, one-line errors for bad files.
mod output_fixtures;

use ipivmm::output::compare::{compare, render, Metric};
use ipivmm::results::Document;
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
    assert_eq!(c.names, ["a.json", "b.json"]);
    let row = c
        .rows
        .iter()
        .find(|r| r.mode == "kernel/xapic/icr" && r.group.workload == "pingpong")
        .unwrap();
    let ratio = |m| row.ratio(m, 1).unwrap();
    // Samples scale linearly with the base: every percentile is 1.5x.
    assert!(
        (ratio(Metric::P50Cycles) - 1.5).abs() < 1e-9,
        "{}",
        ratio(Metric::P50Cycles)
    );
    assert!((ratio(Metric::P99Cycles) - 1.5).abs() < 1e-9);
    assert!((ratio(Metric::P50Ns) - 1.5).abs() < 1e-9);
    // 6 vs 3 exits per IPI; ICR-write exits are one per IPI on both sides.
    assert!(
        (ratio(Metric::ExitsPerIpi) - 2.0).abs() < 1e-9,
        "{}",
        ratio(Metric::ExitsPerIpi)
    );
    assert!((ratio(Metric::IcrExitsPerIpi) - 1.0).abs() < 1e-9);
    assert_eq!(row.ratio(Metric::P50Cycles, 0), Some(1.0));

    let x2 = c
        .rows
        .iter()
        .find(|r| r.mode == "kernel/x2apic/icr")
        .unwrap();
    assert!(x2.cells[1].is_none() && x2.ratio(Metric::P50Cycles, 1).is_none());
    assert!(
        c.flags
            .iter()
            .any(|f| f.contains("kernel/x2apic/icr: mode missing in b.json")),
        "{:?}",
        c.flags
    );
    assert!(
        c.flags
            .iter()
            .any(|f| f.starts_with("workload broadcast, 3 vCPUs")
                && f.ends_with("missing in a.json")),
        "{:?}",
        c.flags
    );
    let text = render(&c, 0.10, false);
    assert!(text.contains("1.50 ▲") && text.contains("2.00 ▲"), "{text}");
    assert!(text.contains("missing"), "{text}");
    assert!(!text.contains('\x1b'), "no colour when not asked");
    assert!(render(&c, 0.10, true).contains("\x1b[33mwarning"));
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
        out.contains("cycles/IPI p50") && out.contains("1.00"),
        "{out}"
    );
    assert!(!out.contains('\x1b'), "no colour on a pipe");
    assert!(dir.join("all.csv").metadata().unwrap().len() > 0);
    assert!(dir.join("charts/pingpong-2vcpu-spin-cycles.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
