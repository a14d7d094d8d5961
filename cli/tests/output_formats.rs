//! The results formats: the JSON schema round-trips through the model, the
//! CSV parses, the SVG charts are well-formed XML naming every mode. No
//! /dev/kvm needed: the reports are built in code.
mod output_fixtures;

use ipivmm_analysis::results::latency::LatencyStats;
use ipivmm_analysis::results::{Document, SkippedMode};
use ipivmm_cli::output::{chart_kit, csv, svg, text};
use output_fixtures::{report, temp_dir, IPIS, TSC_KHZ};

#[test]
fn schema_round_trips_through_the_model() {
    let a = report(&[], 10_000, 3);
    let b = report(&["--apic", "x2apic", "--irqchip", "split"], 8_000, 2);
    let skipped = vec![SkippedMode {
        mode: "kernel/x2apic/pv/pingpong".into(),
        reason: "hypercalls do not return under kvm_pvm".into(),
        id: None,
    }];
    let doc = Document::new(vec![a, b], skipped);
    let written = serde_json::to_value(&doc).unwrap();
    // The same document as the writer emits it; a field the model lacks
    // shows up as a path in `lost`.
    let text = serde_json::to_string_pretty(&doc).unwrap();
    let model = Document::from_json(&text, "round-trip").unwrap();
    let rewritten = serde_json::to_value(&model).unwrap();
    let mut lost = Vec::new();
    diff("", &written, &rewritten, &mut lost);
    assert!(
        lost.is_empty(),
        "a field did not survive the round trip: {lost:?}"
    );
    assert_eq!(written, rewritten);

    // The histogram is in the JSON and holds every sample once.
    let lat = &written["runs"][0]["vcpus"][0]["phases"][1]["latency"];
    assert_eq!(lat["count"], IPIS);
    let buckets = lat["histogram"]["buckets"].as_array().unwrap();
    let total: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(total, IPIS);
    assert_eq!(lat["histogram"]["sub_buckets"], 8);
    // Each run carries its headline metrics, derived from the counters
    // above: a round trip delivers one IPI, 3 exits per IPI in fixture a.
    let m = &written["runs"][0]["metrics"];
    assert_eq!(
        (&m["operation"], &m["operations"], &m["ipis_delivered"]),
        (
            &serde_json::json!("round trip"),
            &serde_json::json!(IPIS),
            &serde_json::json!(IPIS)
        )
    );
    assert_eq!(m["ipis_per_operation"], 1.0);
    assert_eq!(m["exits_per_ipi"], 3.0);
    assert_eq!(m["exits_per_operation"], 3.0);
    assert_eq!(m["icr_write_exits_per_ipi"], 1.0);
    // Raw samples stay out of the JSON.
    assert!(written["runs"][0]["vcpus"][0]["phases"][1]
        .get("samples")
        .is_none());
    assert_eq!(model.runs[1].label(), "split/x2apic/icr");
}

#[test]
fn csv_parses_with_one_row_per_counter() {
    let a = report(&[], 10_000, 3);
    let b = report(&["--apic", "x2apic"], 8_000, 2);
    let mut out = Vec::new();
    csv::write_runs(&[&a, &b], &mut out).unwrap();
    let mut rd = ::csv::Reader::from_reader(out.as_slice());
    assert_eq!(
        rd.headers().unwrap().iter().collect::<Vec<_>>(),
        csv::HEADER.to_vec()
    );
    let rows: Vec<::csv::StringRecord> = rd.records().collect::<Result<_, _>>().unwrap();
    // Every value is a number, every row has every column.
    for r in &rows {
        assert_eq!(r.len(), csv::HEADER.len());
        r[16]
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value {:?} in {r:?}", &r[16]));
    }
    let expected: usize = [&a, &b]
        .iter()
        .map(|r| {
            r.vcpus
                .iter()
                .flat_map(|v| &v.phases)
                .map(|p| csv::phase_counters(p).len())
                .sum::<usize>()
        })
        .sum();
    // ... plus one `metrics` row per known headline metric of each run
    // (a round trip delivers one IPI: all but the two counted÷uncounted
    // ratios are known here; the fixtures' phases have no uncounted part).
    let metric_rows = rows.iter().filter(|r| &r[14] == "metrics").count();
    assert_eq!(
        metric_rows,
        2 * (ipivmm_analysis::results::metrics::Metric::ALL.len() - 2)
    );
    assert_eq!(rows.len(), expected + metric_rows);
    let find = |run: &str, vcpu: &str, phase: &str, source: &str, counter: &str| {
        rows.iter()
            .find(|r| {
                &r[1] == run
                    && &r[10] == vcpu
                    && &r[13] == phase
                    && &r[14] == source
                    && &r[15] == counter
            })
            .unwrap_or_else(|| panic!("no row {run} {vcpu} {phase} {source} {counter}"))
            .clone()
    };
    let p50 = find("0", "0", "measure", "latency", "p50");
    assert_eq!(
        &p50[16],
        a.vcpus[0].phases[1]
            .latency
            .as_ref()
            .unwrap()
            .p50
            .to_string()
    );
    assert_eq!(
        (&p50[3], &p50[2], &p50[17]),
        ("kernel/xapic/icr", "pingpong", "cycles")
    );
    // Headline metrics: all vCPUs (vcpu empty), named per operation and per IPI.
    let m = find("1", "", "measure", "metrics", "exits_per_ipi");
    assert_eq!((&m[16], &m[17]), ("2", "ratio"));
    let m = find("0", "", "measure", "metrics", "cycles_per_operation_p50");
    assert_eq!(&m[16], p50[16].to_string());
    let icr = find(
        "1",
        "0",
        "measure",
        ipivmm_analysis::results::IcrExits::SOURCE,
        "icr_write_exits",
    );
    assert_eq!(&icr[16], IPIS.to_string());
    assert_eq!(&icr[3], "kernel/x2apic/icr");
    let recv = find("1", "1", "measure", "guest", "ipis_received");
    assert_eq!(&recv[16], IPIS.to_string());
    assert_eq!(
        &find("0", "1", "idle", "kvm_stats", "halt_poll_success_ns")[17],
        "ns"
    );
    assert_eq!(&find("0", "0", "measure", "latency", "p50_ns")[17], "ns");
}

fn texts(svg: &str) -> String {
    let doc =
        roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn charts_are_well_formed_and_name_every_mode() {
    let runs = [
        report(&[], 10_000, 3),
        report(&["--apic", "x2apic"], 8_000, 2),
        report(&["--irqchip", "user"], 30_000, 7),
        report(&["--workload", "broadcast", "--vcpus", "3"], 20_000, 4),
    ];
    let dir = temp_dir("charts");
    let refs: Vec<&_> = runs.iter().collect();
    let files = svg::plot_runs(&refs, &dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "pingpong-2vcpu-spin-cycles.svg",
            "pingpong-2vcpu-spin-exits.svg",
            "pingpong-2vcpu-spin-latency.svg",
            "broadcast-3vcpu-spin-cycles.svg",
            "broadcast-3vcpu-spin-exits.svg",
            "broadcast-3vcpu-spin-latency.svg",
        ]
    );
    for f in &files[..3] {
        let t = texts(&std::fs::read_to_string(f).unwrap());
        for mode in ["kernel/xapic/icr", "kernel/x2apic/icr", "user/xapic/icr"] {
            assert!(
                t.contains(mode),
                "{} does not name {mode}:\n{t}",
                f.display()
            );
        }
        assert!(!t.contains("split/"), "{}", f.display());
    }
    let cycles = texts(&std::fs::read_to_string(&files[0]).unwrap());
    assert!(
        cycles.contains("TSC cycles per round trip") && cycles.contains("whisker = p99"),
        "{cycles}"
    );
    // p50 of the kernel/xapic run: 1.49 * 10000 cycles at 2 GHz = 7.45 µs.
    assert!(cycles.contains("p50 14.9k\n7.5 µs"), "{cycles}");
    let exits = texts(&std::fs::read_to_string(&files[1]).unwrap());
    assert!(
        exits.contains("exit reason")
            && exits.contains("mmio_exits")
            && exits.contains("VM exits per IPI")
    );
    assert!(
        exits.contains("\n3.00\n") && exits.contains("\n7.00\n"),
        "{exits}"
    );
    let latency = texts(&std::fs::read_to_string(&files[2]).unwrap());
    assert!(latency.contains("% of samples") && latency.contains("log scale"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_workload_at_several_vcpu_counts_gets_a_scale_chart() {
    // Broadcast at 2, 4 and 8 vCPUs in two APIC modes: cost doubles with N.
    let runs: Vec<_> = [2u64, 4, 8]
        .iter()
        .flat_map(|&n| {
            let vcpus = n.to_string();
            ["xapic", "x2apic"].map(|apic| {
                report(
                    &["--workload", "broadcast", "--vcpus", &vcpus, "--apic", apic],
                    1_000 * n,
                    2,
                )
            })
        })
        .collect();
    let dir = temp_dir("scale");
    let refs: Vec<&_> = runs.iter().collect();
    let files = svg::plot_runs(&refs, &dir).unwrap();
    let scale = dir.join("broadcast-spin-scale.svg");
    assert!(files.contains(&scale), "{files:?}");
    let svg = std::fs::read_to_string(&scale).unwrap();
    let t = texts(&svg);
    for needle in [
        "kernel/xapic/icr",
        "kernel/x2apic/icr",
        "cycles/broadcast p50",
        "cycles/IPI p50",
        "exits/broadcast",
        "exits/IPI",
        "vCPUs (log2)",
    ] {
        assert!(t.contains(needle), "no {needle:?} in:\n{t}");
    }
    // One line per mode in each of the four panels, a point per vCPU count.
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let lines: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("points")
                .is_some_and(|p| p.split_whitespace().count() == 3)
        })
        .collect();
    assert_eq!(lines.len(), 2 * 4, "{svg}");
    // One vCPU count only: no scale chart.
    let dir1 = temp_dir("scale-one");
    let files = svg::plot_runs(&refs[..2], &dir1).unwrap();
    assert!(files
        .iter()
        .all(|f| !f.file_name().unwrap().to_string_lossy().contains("scale")));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir1);
}

#[test]
fn every_chart_names_host_backend_cpu_kernel_apic_samples_and_version() {
    use ipivmm_host::facts::{HostInfo, KvmBackend};
    // Pingpong and broadcast (at two vCPU counts: a scale chart too) on a
    // software KVM; the fixture's runs take 1000 samples each.
    let mut runs = vec![
        report(&[], 10_000, 3),
        report(&["--apic", "x2apic"], 8_000, 2),
        report(&["--workload", "broadcast", "--vcpus", "3"], 20_000, 4),
        report(&["--workload", "broadcast", "--vcpus", "4"], 40_000, 4),
    ];
    for r in &mut runs {
        r.host = Some(HostInfo::synthetic(KvmBackend::KvmPvm, false));
    }
    let dir = temp_dir("provenance");
    let refs: Vec<&_> = runs.iter().collect();
    let files = svg::plot_runs(&refs, &dir).unwrap();
    assert_eq!(files.len(), 3 * 3 + 1, "{files:?}");
    let version = format!("ipivmm {}", env!("CARGO_PKG_VERSION"));
    for f in &files {
        let t = texts(&std::fs::read_to_string(f).unwrap());
        let per = "run";
        for needle in [
            "kvm_pvm: SOFTWARE KVM (no VMX/SVM), not hardware IPI costs",
            "host synthetic-host",
            "CPU synthetic",
            "Linux 6.18",
            version.as_str(),
            &format!("samples per {per}: {IPIS}"),
        ] {
            assert!(t.contains(needle), "{}: no {needle:?} in\n{t}", f.display());
        }
        assert!(
            t.contains("APIC x2apic, xapic") || t.contains("APIC xapic"),
            "{t}"
        );
    }
    // The software KVM's line is drawn in red.
    let svg_text = std::fs::read_to_string(&files[0]).unwrap();
    let doc = roxmltree::Document::parse(&svg_text).unwrap();
    let warn = doc
        .descendants()
        .find(|n| n.text().is_some_and(|t| t.contains("SOFTWARE KVM")))
        .expect("the backend line");
    let fill = warn
        .ancestors()
        .find_map(|n| n.attribute("fill"))
        .unwrap_or_default();
    assert!(
        fill.contains("#C80000") || fill.contains("#c80000"),
        "{fill}"
    );
    // A hardware host is named as such, with no warning.
    for r in &mut runs {
        r.host = Some(HostInfo::synthetic(KvmBackend::KvmAmd, true));
    }
    let refs: Vec<&_> = runs.iter().collect();
    let dir2 = temp_dir("provenance-hw");
    let files = svg::plot_runs(&refs[..1], &dir2).unwrap();
    let t = texts(&std::fs::read_to_string(&files[0]).unwrap());
    assert!(
        t.contains("kvm_amd (hardware KVM)") && !t.contains("SOFTWARE"),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

/// Issue 39: the repeats of a configuration are one bar, at their median,
/// with their interval and a dot each (20 bars and a 7,340-pixel chart
/// for 2 configurations of 5 repeats before); the latency chart one panel.
#[test]
fn repeats_are_one_bar_per_configuration_with_their_interval() {
    let mut runs = Vec::new();
    for apic in ["xapic", "x2apic"] {
        for k in 0..5u64 {
            let mut r = report(&["--apic", apic], 10_000 + 500 * k, 3);
            r.repeat = Some(k as u32);
            runs.push(r);
        }
    }
    let dir = temp_dir("repeats");
    let refs: Vec<&_> = runs.iter().collect();
    let files = svg::plot_runs(&refs, &dir).unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let xml = roxmltree::Document::parse(&text).unwrap();
        let width: u32 = xml
            .root_element()
            .attribute("width")
            .unwrap()
            .parse()
            .unwrap();
        assert!(width <= 2000, "{}: {width} px", f.display());
        let t = texts(&text);
        for mode in ["kernel/xapic/icr", "kernel/x2apic/icr"] {
            let named = t.lines().filter(|l| l.starts_with(mode)).count();
            assert_eq!(
                named,
                1,
                "{}: {mode} named {named} times:\n{t}",
                f.display()
            );
        }
    }
    let cycles = std::fs::read_to_string(&files[0]).unwrap();
    let t = texts(&cycles);
    assert!(t.contains("bar = median p50 over the repeats"), "{t}");
    // The median of 5 repeats' p50 (1.49 × 10000..12000): 1.49 × 11000.
    assert!(t.contains("p50 16.4k"), "{t}");
    let dots = roxmltree::Document::parse(&cycles)
        .unwrap()
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .count();
    assert_eq!(dots, 10, "a dot per repeat");
    let latency = texts(&std::fs::read_to_string(&files[2]).unwrap());
    assert!(
        latency.contains("repeats together") && latency.contains(": 500 samples"),
        "{latency}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_that_did_not_complete_is_no_point_of_the_scale_chart() {
    let mut runs: Vec<_> = [2u64, 4, 8]
        .iter()
        .map(|&n| {
            let vcpus = n.to_string();
            // Hundreds of millions of cycles: ticks in the M form.
            report(
                &["--workload", "broadcast", "--vcpus", &vcpus],
                100_000_000 * n,
                2,
            )
        })
        .collect();
    runs[2].status = ipivmm_analysis::results::RunStatus::TimedOut {
        after_s: 60,
        stuck: "vcpu1 at rip=0x1000".into(),
        hint: String::new(),
    };
    let dir = temp_dir("scale-timeout");
    let refs: Vec<&_> = runs.iter().collect();
    svg::plot_runs(&refs, &dir).unwrap();
    let svg_text = std::fs::read_to_string(dir.join("broadcast-spin-scale.svg")).unwrap();
    let t = texts(&svg_text);
    assert!(
        t.contains("not drawn: 1 runs that did not complete (kernel/xapic/icr N=8)"),
        "{t}"
    );
    // Each panel's line has the two completed points only.
    let doc = roxmltree::Document::parse(&svg_text).unwrap();
    let counts: Vec<usize> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter_map(|n| n.attribute("points"))
        .map(|p| p.split_whitespace().count())
        .filter(|n| *n > 1)
        .collect();
    assert!(
        !counts.is_empty() && counts.iter().all(|n| *n == 2),
        "{counts:?}"
    );
    // Linear axes tick in the M/G form of the other charts, never 250000000.0.
    let raw = |l: &str| l.len() >= 7 && l.chars().all(|c| c.is_ascii_digit() || c == '.');
    assert!(!t.lines().any(raw), "{t}");
    assert!(
        t.lines()
            .any(|l| l.ends_with('M') && l[..l.len() - 1].parse::<f64>().is_ok()),
        "{t}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_single_run_and_an_empty_run_still_plot() {
    let mut empty = report(&["--irqchip", "split"], 1, 1);
    for v in &mut empty.vcpus {
        v.phases.clear();
    }
    let one = report(&[], 5_000, 2);
    for set in [vec![&one], vec![&empty], vec![&one, &one]] {
        let dir = temp_dir("single");
        let files = svg::plot_runs(&set, &dir).unwrap();
        assert_eq!(files.len(), 3);
        for f in &files {
            texts(&std::fs::read_to_string(f).unwrap());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A custom payload `/somewhere/demo` with samples in two phases ('idle'
/// on vCPU 0 and 'measure') and a record.
fn demo_report() -> ipivmm_analysis::results::RunReport {
    let mut r = report(&[], 10_000, 3);
    r.mode.payload = Some("/somewhere/demo".into());
    let idle = &mut r.vcpus[0].phases[0];
    idle.samples = (0..50).map(|k| 400 + k).collect();
    idle.latency = LatencyStats::from_samples(&idle.samples, TSC_KHZ);
    idle.records.insert("port".into(), 0x80);
    r
}

#[test]
fn a_custom_payload_is_named_and_every_phase_with_samples_is_drawn() {
    let r = demo_report();
    let dir = temp_dir("payload");
    let files = svg::plot_runs(&[&r], &dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "demo-2vcpu-cycles.svg",
            "demo-2vcpu-exits.svg",
            "demo-2vcpu-latency.svg"
        ]
    );
    for f in &files {
        let t = texts(&std::fs::read_to_string(f).unwrap());
        assert!(
            t.contains("payload demo, 2 vCPUs:"),
            "{}:\n{t}",
            f.display()
        );
        assert!(!t.contains("pingpong"), "{}:\n{t}", f.display());
        // One bar per phase with samples, named by mode and phase.
        for bar in ["kernel/xapic/icr · idle", "kernel/xapic/icr · measure"] {
            assert!(t.contains(bar), "{} lacks {bar}:\n{t}", f.display());
        }
    }
    let cycles = texts(&std::fs::read_to_string(&files[0]).unwrap());
    assert!(cycles.contains("TSC cycles per sample"), "{cycles}");
    let exits = texts(&std::fs::read_to_string(&files[1]).unwrap());
    assert!(exits.contains("VM exits per sample"), "{exits}");
    let _ = std::fs::remove_dir_all(&dir);

    // The CSV names it too.
    let mut out = Vec::new();
    csv::write_runs(&[&r], &mut out).unwrap();
    let csv_text = String::from_utf8(out).unwrap();
    let row = csv_text.lines().nth(1).unwrap();
    assert!(row.starts_with(",0,demo,kernel/xapic/icr,"), "{row}");
    assert!(row.ends_with(",/somewhere/demo"), "{row}");

    // The text report shows the payload's records per phase and vCPU.
    let report = text::render(&r);
    assert!(report.contains("payload /somewhere/demo"), "{report}");
    let idle = report.find("phase 0 'idle'").expect("idle table");
    let measure = report.find("phase 2 'measure'").expect("measure table");
    let port = report
        .find("  vcpu0 records: port=128 samples_dropped=0")
        .expect(&report);
    assert!(idle < port && port < measure, "{report}");
    assert!(report.contains("latency per sample"), "{report}");
}

/// A tick label (`500`, `2k`, `10M`, `1.5G`) as a number.
fn tick_value(label: &str) -> Option<f64> {
    let (num, mult) = match label.chars().last()? {
        'k' => (&label[..label.len() - 1], 1e3),
        'M' => (&label[..label.len() - 1], 1e6),
        'G' => (&label[..label.len() - 1], 1e9),
        _ => (label, 1.0),
    };
    num.parse::<f64>().ok().map(|v| v * mult)
}

#[test]
fn latency_log_axis_labels_every_decade_of_the_samples() {
    // Samples from 60 to ~3e9 cycles: most of them far below 1G.
    let samples: Vec<u64> = (0..400).map(|k| 60 * 1.028f64.powi(k) as u64).collect();
    let (lo, hi) = (samples[0] as f64, *samples.last().unwrap() as f64);
    let mut r = report(&[], 10_000, 3);
    let m = &mut r.vcpus[0].phases[1];
    m.latency = LatencyStats::from_samples(&samples, TSC_KHZ);
    m.samples = samples;
    let svg_text = svg::render_latency(
        &r.summary().group,
        &svg::group(vec![chart_kit::Entry {
            origin: None,
            summary: r.summary(),
            credit: chart_kit::Credit::of(&r, None),
        }])[0]
            .1,
    )
    .unwrap();
    let xml = roxmltree::Document::parse(&svg_text).unwrap();
    // Tick labels sit in the x label area, under the panel.
    let ticks: Vec<f64> = xml
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .filter_map(|t| tick_value(t.trim()))
        .filter(|v| *v >= 1.0)
        .collect();
    let decade = |v: f64| v.log10().floor() as i32;
    for d in decade(lo)..=decade(hi) {
        assert!(
            ticks.iter().any(|t| decade(*t) == d),
            "no tick label in 10^{d} (samples {lo}..{hi}); ticks {ticks:?}"
        );
    }
    // 1, 2, 5 x 10^k where the range is narrow.
    assert_eq!(
        chart_kit::log_ticks(90.0, 1100.0),
        [100.0, 200.0, 500.0, 1000.0]
    );
    assert_eq!(
        chart_kit::log_ticks(15e6, 25e6).len(),
        11,
        "{:?}",
        chart_kit::log_ticks(15e6, 25e6)
    );
    assert_eq!(
        ["1", "20", "500", "1k", "2M", "5G", "1.5k"],
        [1.0, 20.0, 500.0, 1e3, 2e6, 5e9, 1500.0].map(chart_kit::tick_label)
    );
}

/// JSON paths where `a` and `b` differ.
fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value::{Array, Object};
    match (a, b) {
        (Object(x), Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let null = serde_json::Value::Null;
                diff(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Array(x), Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a != b => out.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

/// Issue 39: the sweep table has a row per configuration with the median
/// over its repeats and the half-width of its interval; `--wide` adds a row
/// per repeat under it.
#[test]
fn the_sweep_table_has_a_row_per_configuration() {
    use ipivmm_cli::output::fit::Layout;
    use ipivmm_cli::output::sweep_tables::render_with;
    let mut runs = Vec::new();
    for k in 0..3u32 {
        for apic in ["xapic", "x2apic"] {
            let mut r = report(&["--apic", apic], 10_000 + 1_000 * u64::from(k), 3);
            r.repeat = Some(k);
            runs.push(r);
        }
    }
    let doc = ipivmm_analysis::results::Document::new(runs, Vec::new());
    let wall = std::time::Duration::from_secs(1);
    let fit = render_with(&doc, wall, Layout::Fit);
    let rows: Vec<&str> = fit.lines().filter(|l| l.contains("kernel/")).collect();
    assert_eq!(rows.len(), 2, "one row per configuration:\n{fit}");
    for r in &rows {
        // Median of 14900, 16390, 17880: 16390, ± half of (17880 - 14900).
        assert!(r.contains("3 ok") && r.contains("16390 ±9%"), "{r}");
    }
    assert!(fit.contains("--wide adds each repeat"), "{fit}");
    let wide = render_with(&doc, wall, Layout::Wide);
    assert_eq!(wide.matches("repeat 2").count(), 2, "{wide}");
    assert!(
        wide.lines()
            .any(|l| l.contains("repeat 3") && l.contains("17880")),
        "{wide}"
    );
}
