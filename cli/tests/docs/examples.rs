//! The recorded documents the docs show (docs/examples/*.json,
//! docs/examples/modes/*.json) are what the code writes now: each is
//! compared, field by field, with a document written today — a fresh run of
//! the same mode where /dev/kvm is usable (the examples were recorded on a
//! kvm_pvm host: on another backend the comparison is a visible skip), and,
//! without KVM, the example read and written again by today's code and its
//! counter sources checked against the code's list of them. Key
//! sets are compared recursively, strings (counter sources, states, names)
//! exactly; numbers and booleans are measurements and may differ.
//!
//! `IPIVMM_WRITE_EXAMPLES=1 cargo test -p ipivmm-cli --release --test docs
//! schema_examples` records every example again, by the same runs
//! (docs/results-schema.md); the docs' `jq` outputs, the README's table and
//! the charts then follow (`jq_examples_print_what_the_docs_show` says
//! which differ).
use super::{repo, text_of};
use ipivmm_analysis::results::Document;
use ipivmm_testkit::{kvm_available, skip, Need};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Objects whose keys are data of the host or of the run (a module's
/// parameters, the exit kinds and KVM stats a window saw, the tracepoints
/// this kernel has), not field names: their keys may differ between two
/// runs of the same command; the values of the keys both have are compared.
const DATA_MAPS: &[&str] = &[
    "host.params",
    "host.params.*",
    "runs[].vcpus[].exits",
    "runs[].vcpus[].phases[].exits",
    "runs[].vcpus[].phases[].kvm_stats",
    "runs[].vcpus[].phases[].tracepoints",
    "runs[].vcpus[].phases[].exit_reasons.by_reason",
];

/// Arrays whose length is data (a histogram's non-empty buckets, the
/// reasons a configuration's figures may not hold): every element is
/// compared with the other side's first.
const DATA_ARRAYS: &[&str] = &[
    "runs[].vcpus[].phases[].latency.histogram.buckets",
    "configurations[].unstable",
];

/// Strings that are facts of the machine or the moment (or measurements in
/// words), not words the code writes (the comparison runs on the examples'
/// backend only).
const FACT_STRINGS: &[&str] = &[
    "host.cpu_vendor",
    "host.cpu_model",
    "host.kernel_release",
    "host.hostname",
    "host.params.*.*",
    "configurations[].unstable[]",
    // Why a source is unavailable here (root, tracefs, the backend), or null.
    "runs[].vcpus[].sources[].detail",
];

/// Code-written text with a fact of the machine in it: the path, and the
/// word after which one hex number is the machine's (the payload's banner
/// names the CPU features it found).
const FACT_NUMBERS_IN_TEXT: &[(&str, &str)] = &[("runs[].serial_tail", "features 0x")];

/// `text` with the machine's number after `word` masked, where `path` has one.
fn without_machine_numbers(path: &str, text: &str) -> String {
    let Some((_, word)) = FACT_NUMBERS_IN_TEXT.iter().find(|(p, _)| matches(p, path)) else {
        return text.to_string();
    };
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(word) {
        out.push_str(&rest[..i + word.len()]);
        rest = rest[i + word.len()..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        // The features by name after it, `(x2apic amd)`, are the machine's too.
        if let Some(names) = rest.strip_prefix(" (") {
            rest = names.split_once(')').map_or(rest, |(_, after)| after);
        }
        out.push('?');
    }
    out + rest
}

/// `pattern` (`*` for one segment) matches `path` (segments split at `.`).
fn matches(pattern: &str, path: &str) -> bool {
    let (p, q): (Vec<&str>, Vec<&str>) = (pattern.split('.').collect(), path.split('.').collect());
    p.len() == q.len() && p.iter().zip(&q).all(|(a, b)| a == b || *a == "*")
}

fn listed(list: &[&str], path: &str) -> bool {
    list.iter().any(|p| matches(p, path))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn child(path: &str, key: &str) -> String {
    match path {
        "" => key.to_string(),
        _ => format!("{path}.{key}"),
    }
}

/// Where `example` differs from `now` beyond measured values, one line each.
pub fn drift(path: &str, example: &Value, now: &Value, out: &mut Vec<String>) {
    match (example, now) {
        (Value::Null, Value::Null)
        | (Value::Bool(_), Value::Bool(_))
        | (Value::Number(_), Value::Number(_)) => {}
        // A fact may be absent on one side (null).
        (Value::Null, Value::String(_)) | (Value::String(_), Value::Null)
            if listed(FACT_STRINGS, path) => {}
        (Value::String(a), Value::String(b)) => {
            let same = without_machine_numbers(path, a) == without_machine_numbers(path, b);
            if !same && !listed(FACT_STRINGS, path) {
                out.push(format!(
                    "{path}: the example has {a:?}, the code writes {b:?}"
                ));
            }
        }
        (Value::Array(a), Value::Array(b)) if listed(DATA_ARRAYS, path) => {
            let item = format!("{path}[]");
            if let (Some(a0), Some(b0)) = (a.first(), b.first()) {
                a.iter().for_each(|x| drift(&item, x, b0, out));
                b.iter().for_each(|y| drift(&item, a0, y, out));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                out.push(format!(
                    "{path}: {} elements in the example, {} written now",
                    a.len(),
                    b.len()
                ));
            }
            let item = format!("{path}[]");
            a.iter().zip(b).for_each(|(x, y)| drift(&item, x, y, out));
        }
        (Value::Object(a), Value::Object(b)) => {
            if !listed(DATA_MAPS, path) {
                for k in a.keys().filter(|k| !b.contains_key(*k)) {
                    out.push(format!(
                        "{}: in the example, not written now",
                        child(path, k)
                    ));
                }
                for k in b.keys().filter(|k| !a.contains_key(*k)) {
                    out.push(format!(
                        "{}: written now, not in the example",
                        child(path, k)
                    ));
                }
            }
            for (k, x) in a {
                if let Some(y) = b.get(k) {
                    drift(&child(path, k), x, y, out);
                }
            }
        }
        _ => out.push(format!(
            "{path}: {} in the example, {} written now",
            kind(example),
            kind(now)
        )),
    }
}

/// Every recorded document under docs/examples/, sorted.
fn examples() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["docs/examples", "docs/examples/modes"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    files
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo()).unwrap().display().to_string()
}

fn json(text: &str, what: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The `ipivmm run` flags that record `example` again: its one run's mode
/// (the parts the examples set; [`same_mode`] checks the rest), with
/// `iterations` and `warmup` given.
fn run_flags(example: &Value, what: &str, iterations: u64, warmup: u64) -> Vec<String> {
    let runs = example["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{what}: one run per example");
    let m = &runs[0]["mode"];
    let s = |k: &str| {
        m[k].as_str()
            .unwrap_or_else(|| panic!("{what}: mode.{k}"))
            .to_string()
    };
    let mut flags: Vec<String> = ["run", "--repeat", "1", "--serial", "none"]
        .map(String::from)
        .to_vec();
    for (flag, k) in [
        ("--irqchip", "irqchip"),
        ("--apic", "apic"),
        ("--ipi", "ipi"),
        ("--workload", "workload"),
        ("--target", "target"),
    ] {
        flags.extend([flag.to_string(), s(k)]);
    }
    flags.extend([
        "--vcpus".into(),
        m["vcpus"].to_string(),
        "--iterations".into(),
        iterations.to_string(),
        "--warmup".into(),
        warmup.to_string(),
    ]);
    flags
}

/// The mode parts [`run_flags`] leaves to their defaults are the
/// example's (a new example that sets one needs its flag there); the host's
/// CPU count is the host's.
fn same_mode(example: &Value, now: &Value) -> Vec<String> {
    let (a, b) = (&example["runs"][0]["mode"], &now["runs"][0]["mode"]);
    let parts = a.as_object().expect("runs[0].mode");
    parts
        .keys()
        .filter(|k| !["iterations", "warmup", "host_cpus"].contains(&k.as_str()))
        .filter(|k| a[k.as_str()] != b[k.as_str()])
        .map(|k| {
            format!(
                "runs[].mode.{k}: {} in the example, {} by default now: teach run_flags its flag",
                a[k.as_str()],
                b[k.as_str()]
            )
        })
        .collect()
}

/// Runs `ipivmm` with `flags`, writing its document to `out`.
fn record(flags: &[String], out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(flags)
        .arg("--json")
        .arg(out)
        .output()
        .expect("ipivmm runs");
    assert!(
        o.status.success(),
        "ipivmm {}: {}",
        flags.join(" "),
        text_of(&o)
    );
    std::fs::read_to_string(out).unwrap()
}

/// Without KVM: every example reads as today's `Document` and writes back
/// with the same fields (a field the code renamed, dropped or added shows).
#[test]
fn schema_examples_read_and_write_back_with_the_same_fields() {
    let _host = crate::shared_host();
    for f in examples() {
        let what = rel(&f);
        let stored = json(&std::fs::read_to_string(&f).unwrap(), &what);
        let doc = Document::load(&f).unwrap_or_else(|e| panic!("{e}"));
        let mut out = Vec::new();
        drift("", &stored, &json(&doc.to_json(), &what), &mut out);
        assert!(
            out.is_empty(),
            "{what} is not what the code writes:\n{}",
            out.join("\n")
        );
    }
}

/// With KVM: each example against a fresh run of its mode (or, with
/// `IPIVMM_WRITE_EXAMPLES=1`, recorded again by that run at its own
/// iteration counts).
/// The counter sources available in the stored example's first vCPU and
/// unavailable in the run written now, each with the reason the run gives.
fn sources_lost(stored: &Value, now: &Value) -> Vec<String> {
    let sources = |d: &Value| {
        d["runs"][0]["vcpus"][0]["sources"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let now_sources = sources(now);
    sources(stored)
        .iter()
        .filter(|s| s["available"] == true)
        .filter_map(|s| {
            let name = &s["source"];
            let n = now_sources.iter().find(|n| &n["source"] == name)?;
            (n["available"] == false).then(|| {
                format!(
                    "{}: {}",
                    name.as_str().unwrap_or("?"),
                    n["detail"].as_str().unwrap_or("unavailable")
                )
            })
        })
        .collect()
}

#[test]
fn schema_examples_are_what_a_run_writes_now() {
    let _host = crate::shared_host();
    const TEST: &str = "schema_examples_are_what_a_run_writes_now";
    if !kvm_available(TEST) {
        return;
    }
    let write = std::env::var_os("IPIVMM_WRITE_EXAMPLES").is_some_and(|v| v == "1");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("docs-examples");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut failures = Vec::new();
    for f in examples() {
        let what = rel(&f);
        let stored = json(&std::fs::read_to_string(&f).unwrap(), &what);
        let m = &stored["runs"][0]["mode"];
        let flags = match write {
            true => run_flags(
                &stored,
                &what,
                m["iterations"].as_u64().unwrap(),
                m["warmup"].as_u64().unwrap(),
            ),
            // Fewer iterations: the fields and words are the same.
            false => run_flags(&stored, &what, 50, 5),
        };
        let out = tmp.join(f.file_name().unwrap());
        let text = record(&flags, &out);
        let now = json(&text, &format!("{what} written now"));
        if write {
            std::fs::write(&f, &text).unwrap();
            eprintln!("docs: recorded {what} again: ipivmm {}", flags.join(" "));
            continue;
        }
        let (was, is) = (&stored["host"]["backend"], &now["host"]["backend"]);
        if was != is {
            skip(
                &format!("{TEST} ({what})"),
                Need::Setup,
                &format!("the example was recorded on backend {was}, this host is {is}"),
            );
            continue;
        }
        // A counter source the example had and this host cannot open now
        // (tracefs not mounted, not root): its fields are missing for the
        // host's reason, not the code's.
        let lost = sources_lost(&stored, &now);
        if !lost.is_empty() {
            skip(
                &format!("{TEST} ({what})"),
                Need::Setup,
                &format!(
                    "the example was recorded with counter sources this host lacks now: {}",
                    lost.join("; ")
                ),
            );
            continue;
        }
        let mut out = same_mode(&stored, &now);
        drift("", &stored, &now, &mut out);
        out.dedup();
        if !out.is_empty() {
            failures.push(format!(
                "{what} (ipivmm {}):\n  {}",
                flags.join(" "),
                out.join("\n  ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the examples are not what the code writes now (IPIVMM_WRITE_EXAMPLES=1 records them again):\n{}",
        failures.join("\n")
    );
}

#[test]
fn drift_names_what_differs_and_lets_measurements_differ() {
    let _host = crate::shared_host();
    let a = json(
        r#"{"n": 1, "s": "kvm_apic:icr_write", "o": {"k": 1}, "l": [1, 2], "host": {"kernel_release": "6.1"},
            "runs": [{"vcpus": [{"exits": {"io_in": 1}}]}]}"#,
        "a",
    );
    let b = json(
        r#"{"n": 2.5, "s": "tracepoints kvm_apic:icr_write", "o": {"j": 1}, "l": [1], "host": {"kernel_release": "6.18"},
            "runs": [{"vcpus": [{"exits": {"hlt": 3}}]}]}"#,
        "b",
    );
    let mut out = Vec::new();
    drift("", &a, &b, &mut out);
    assert_eq!(
        out,
        [
            "l: 2 elements in the example, 1 written now",
            "o.k: in the example, not written now",
            "o.j: written now, not in the example",
            "s: the example has \"kvm_apic:icr_write\", the code writes \"tracepoints kvm_apic:icr_write\"",
        ]
    );
    let mut out = Vec::new();
    drift("", &a, &a, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

/// The payload banner's CPU features are the machine's; the rest of it is
/// the code's words and still compared.
#[test]
fn a_banner_may_differ_in_the_machines_features_only() {
    let _host = crate::shared_host();
    let doc = |tail: &str, vendor: &str| serde_json::json!({"host": {"cpu_vendor": vendor}, "runs": [{"serial_tail": tail}]});
    let amd = doc(
        "ipivmm-guest: 2 vCPUs, apic Xapic, features 0x14 (amd invariant-tsc)\n",
        "AuthenticAMD",
    );
    let intel = doc(
        "ipivmm-guest: 2 vCPUs, apic Xapic, features 0x11 (x2apic invariant-tsc)\n",
        "GenuineIntel",
    );
    let mut out = Vec::new();
    drift("", &amd, &intel, &mut out);
    assert!(out.is_empty(), "{out:?}");
    let reworded = doc(
        "ipivmm-guest: 2 vCPUs, apic X2apic, features 0x14 (amd invariant-tsc)\n",
        "AuthenticAMD",
    );
    drift("", &amd, &reworded, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with("runs[].serial_tail: "), "{out:?}");
}

/// docs/results-schema.md's CSV header is the one the CSV writer writes.
#[test]
fn the_schema_docs_csv_header_is_the_writers() {
    let _host = crate::shared_host();
    let doc = super::read("docs/results-schema.md");
    let header = ipivmm_cli::output::csv::HEADER.join(",");
    let shown = doc
        .lines()
        .find(|l| l.starts_with("origin,run,"))
        .expect("docs/results-schema.md shows the CSV header");
    assert_eq!(shown, header, "docs/results-schema.md's CSV header");
}

/// Without KVM too: the counter sources the examples name are ones the code
/// writes (`sources[].source` a [`Source`] key, `icr_write_exits.source`
/// the user LAPIC's key or the tracepoint formula).
///
/// [`Source`]: ipivmm_analysis::results::source::Source
#[test]
fn schema_examples_name_the_codes_counter_sources() {
    let _host = crate::shared_host();
    use ipivmm_analysis::results::source::Source;
    let icr_sources = [
        Source::UserLapic.key(),
        ipivmm_analysis::results::IcrExits::SOURCE,
    ];
    let mut checked = 0;
    for f in examples() {
        let what = rel(&f);
        let doc = json(&std::fs::read_to_string(&f).unwrap(), &what);
        for v in doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["vcpus"].as_array().unwrap())
        {
            for s in v["sources"].as_array().unwrap() {
                let key = s["source"].as_str().unwrap();
                assert!(
                    Source::of_key(key).is_some(),
                    "{what}: source {key:?} is not a Source key"
                );
                checked += 1;
            }
            for p in v["phases"].as_array().unwrap() {
                if let Some(src) = p["icr_write_exits"]["source"].as_str() {
                    assert!(icr_sources.contains(&src), "{what}: ICR-write exits from {src:?}, which the code does not write (it writes {icr_sources:?})");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 20, "{checked} sources checked");
}
