//! The output formats on results recorded on a development machine
//! (docs/examples/): charts are well-formed XML naming every mode, compare
//! gives the ratios the raw JSON implies, the CSV parses.
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::Document;
use ipivmm_cli::output::compare::Comparison;
use ipivmm_cli::output::{csv, svg};
use std::path::PathBuf;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/examples")
        .join(name)
}

fn load(name: &str) -> (String, Document) {
    (name.to_string(), Document::load(&example(name)).unwrap())
}

const MODES: [(&str, &str); 4] = [
    ("run-pingpong.json", "kernel/xapic/icr"),
    ("modes/pingpong-kernel-x2apic.json", "kernel/x2apic/icr"),
    ("modes/pingpong-split-xapic.json", "split/xapic/icr"),
    ("modes/pingpong-split-x2apic.json", "split/x2apic/icr"),
];

#[test]
fn charts_of_recorded_results_name_every_mode() {
    let docs: Vec<_> = MODES.iter().map(|(f, _)| load(f)).collect();
    let dir = std::env::temp_dir().join(format!("ipivmm-recorded-{}", std::process::id()));
    let files = svg::plot_docs(&docs, &dir).unwrap();
    assert_eq!(files.len(), 3);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let xml =
            roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let texts: Vec<&str> = xml
            .descendants()
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        for (_, mode) in MODES {
            assert!(
                texts.iter().any(|t| t.contains(mode)),
                "{} does not name {mode}",
                f.display()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn p50(doc: &serde_json::Value) -> f64 {
    // The sender (vCPU 0) is the only vCPU with samples in a ping-pong run;
    // the latency is that of the phase the run names for it (the uncounted
    // part where the measured phase ran both ways).
    let phase = &doc["runs"][0]["metrics"]["latency_phase"];
    let phases = doc["runs"][0]["vcpus"][0]["phases"].as_array().unwrap();
    let m = phases.iter().find(|p| &p["name"] == phase).unwrap();
    m["latency"]["p50"].as_f64().unwrap()
}

fn exits_per_ipi(doc: &serde_json::Value) -> f64 {
    let mut exits = 0.0;
    let mut ipis = 0.0;
    for v in doc["runs"][0]["vcpus"].as_array().unwrap() {
        for p in v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "measure")
        {
            exits += p["kvm_stats"]["exits"].as_f64().unwrap();
            ipis += p["guest"]["ipis_sent"].as_f64().unwrap();
        }
    }
    exits / ipis
}

#[test]
fn compare_of_two_recorded_runs_gives_the_ratios_of_the_raw_figures() {
    let raw = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(example(f)).unwrap()).unwrap()
    };
    let (a, b) = (raw("run-pingpong.json"), raw("run-pingpong-2.json"));
    let c = Comparison::of(&[load("run-pingpong.json"), load("run-pingpong-2.json")]).unwrap();
    assert!(c.flags.is_empty(), "{:?}", c.flags);
    assert_eq!(c.rows.len(), 1);
    let row = &c.rows[0];
    assert_eq!(row.id.label(), "kernel/xapic/icr");
    let got = row.ratio(Metric::CyclesPerOpP50, 1).unwrap();
    assert!((got - p50(&b) / p50(&a)).abs() < 1e-12, "{got}");
    let got = row.ratio(Metric::ExitsPerIpi, 1).unwrap();
    assert!(
        (got - exits_per_ipi(&b) / exits_per_ipi(&a)).abs() < 1e-12,
        "{got}"
    );
    assert_eq!(row.ratio(Metric::IcrExitsPerIpi, 1), Some(1.0));
}

#[test]
fn csv_of_a_recorded_file_parses() {
    let docs = vec![load("run-pingpong.json")];
    let mut out = Vec::new();
    csv::write_docs(&docs, &mut out).unwrap();
    let mut rd = ::csv::Reader::from_reader(out.as_slice());
    let rows: Vec<_> = rd.records().collect::<Result<Vec<_>, _>>().unwrap();
    assert!(rows
        .iter()
        .all(|r| &r[0] == "run-pingpong.json" && r[16].parse::<f64>().is_ok()));
    let icr = rows
        .iter()
        .find(|r| &r[10] == "0" && &r[13] == "measure" && &r[15] == "icr_write_exits")
        .unwrap();
    // The row says what the JSON says: its counter source and count.
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example("run-pingpong.json")).unwrap())
            .unwrap();
    let measure = raw["runs"][0]["vcpus"][0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "measure")
        .unwrap();
    let want = &measure["icr_write_exits"];
    assert_eq!(&icr[14], want["source"].as_str().unwrap());
    assert_eq!(&icr[16], want["exits"].to_string());
}
