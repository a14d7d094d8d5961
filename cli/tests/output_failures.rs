//! Nothing lost to an output failure (issue 14): results are written whole
//! (temporary file, then rename) before anything is printed, each output on
//! its own; a stdout that fails loses no file; outputs that cannot work are
//! refused before the run, leaving old files alone; inputs are opened
//! without blocking and read size-bounded; `sweep` refuses bad values like
//! `run` does.
use ipivmm_testkit::kvm_available;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A short run: 1 vCPU, 10 self-IPIs, no tracepoints, no serial output.
const QUICK: &[&str] = &[
    "run",
    "--repeat",
    "1",
    "--workload",
    "self-ipi",
    "--vcpus",
    "1",
    "--iterations",
    "10",
    "--warmup",
    "1",
    "--no-tracepoints",
    "--serial",
    "none",
];

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
}

fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipivmm-outfail-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Refused as bad input (exit 2) with `needle` in the error, within 2 s.
fn assert_refused(args: &[&std::ffi::OsStr], needle: &str) {
    let started = Instant::now();
    let o = bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ipivmm runs");
    let took = started.elapsed();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert!(e.contains(needle), "{args:?}: {needle:?} not in {e}");
    assert!(
        took < ipivmm_testkit::scaled(Duration::from_secs(2)),
        "{args:?} took {took:?}"
    );
}

fn os(args: &[&str]) -> Vec<std::ffi::OsString> {
    args.iter().map(|a| a.into()).collect()
}

fn with(base: &[&str], more: &[&Path]) -> Vec<std::ffi::OsString> {
    let mut v = os(base);
    v.extend(more.iter().map(|p| p.as_os_str().to_owned()));
    v
}

fn refs(v: &[std::ffi::OsString]) -> Vec<&std::ffi::OsStr> {
    v.iter().map(|a| a.as_os_str()).collect()
}

/// The JSON's run state.
fn state(json: &Path) -> String {
    let text = std::fs::read_to_string(json).expect("JSON written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("whole JSON");
    v["runs"][0]["status"]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_failing_stdout_loses_no_file() {
    let test = "a_failing_stdout_loses_no_file";
    if !kvm_available(test) {
        return;
    }
    let d = dir(test);
    let (json, csv, plot) = (d.join("r.json"), d.join("r.csv"), d.join("plots"));
    let args = with(QUICK, &[]);
    let outputs = |o: &mut Command| {
        o.args(&args)
            .arg("--json")
            .arg(&json)
            .arg("--csv")
            .arg(&csv)
            .arg("--plot")
            .arg(&plot);
    };
    // stdout on a full device, then on a pipe closed before the report.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let mut c = bin();
    outputs(&mut c);
    let o = c.stdout(full).output().expect("ipivmm runs");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut c = bin();
    outputs(&mut c);
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "closed stdout: {}", stderr(&o));
    assert_eq!(state(&json), "completed");
    let rows = std::fs::read_to_string(&csv).expect("CSV written");
    assert!(rows.lines().count() > 1, "{rows}");
    let charts = std::fs::read_dir(&plot).map(|d| d.count()).unwrap_or(0);
    assert!(charts > 0, "no chart written");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn refusals_leave_old_results_and_the_payload_alone() {
    let test = "refusals_leave_old_results_and_the_payload_alone";
    let d = dir(test);
    let json = d.join("r.json");
    std::fs::write(&json, b"old results").unwrap();
    // An output equal to the payload.
    let payload = d.join("v.elf");
    std::fs::write(&payload, b"\x7fELF payload bytes").unwrap();
    let run = ["run", "--payload"];
    let args = with(&run, &[&payload, Path::new("--json"), &payload]);
    assert_refused(&refs(&args), "is an input of this run");
    assert_eq!(std::fs::read(&payload).unwrap(), b"\x7fELF payload bytes");
    // Refusals of every kind after the outputs were named.
    let mut cases: Vec<(&[&str], &str)> = vec![
        (
            &["run", "--kvm-device", "/nonexistent/kvm"],
            "/nonexistent/kvm",
        ),
        (&["run", "--payload", "/etc/hostname"], "payload"),
    ];
    // --vcpus and --pin are judged against KVM's vCPU limit and the CPUs,
    // after /dev/kvm is opened: without it the refusal is the open's.
    if ipivmm_testkit::kvm_openable(
        &format!("{test} (the --vcpus 0 and --pin 99 cases)"),
        "they are checked once /dev/kvm is open",
    ) {
        cases.push((&["run", "--vcpus", "0"], "--vcpus 0"));
        cases.push((&["run", "--pin", "99"], "--pin"));
    }
    for (base, needle) in cases {
        let args = with(base, &[Path::new("--json"), &json]);
        assert_refused(&refs(&args), needle);
        assert_eq!(std::fs::read(&json).unwrap(), b"old results", "{base:?}");
    }
    // The same path twice: refused, nothing created.
    let twice = d.join("F");
    let args = with(&["run", "--json"], &[&twice, Path::new("--csv"), &twice]);
    assert_refused(&refs(&args), "both name");
    assert!(!twice.exists());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_killed_run_leaves_no_old_results_that_read_as_current() {
    let test = "a_killed_run_leaves_no_old_results_that_read_as_current";
    if !kvm_available(test) {
        return;
    }
    let d = dir(test);
    let json = d.join("r.json");
    std::fs::write(&json, b"old results").unwrap();
    let long = [
        "run",
        "--iterations",
        "20000000",
        "--memory",
        "512",
        "--no-tracepoints",
        "--serial",
        "none",
        "--quiet",
        "--json",
    ];
    let mut child = bin()
        .args(long)
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // Issue 39: replaced before the first VM by a whole document that says
    // it is incomplete (the old file used to stay, reading as current).
    let doc = ipivmm_analysis::results::Document::load(&json).expect("a whole document");
    assert!(doc.incomplete.is_some() && doc.runs.is_empty());
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn outputs_that_would_fail_at_write_time_are_refused_before_the_run() {
    for (path, needle) in [
        ("/dev/full", "a device"),
        ("/proc/version", "does not accept new files"),
        ("/proc", "a directory"),
    ] {
        for flag in ["--json", "--csv"] {
            assert_refused(&refs(&os(&["run", flag, path])), needle);
        }
    }
    assert_refused(
        &refs(&os(&["run", "--plot", "/proc"])),
        "does not accept new files",
    );
}

#[test]
fn fifo_and_unbounded_inputs_are_refused_at_once() {
    let test = "fifo_and_unbounded_inputs_are_refused_at_once";
    let d = dir(test);
    let fifo = d.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    let args = with(&["run", "--payload"], &[&fifo]);
    assert_refused(&refs(&args), "FIFO");
    // compare: a FIFO, an endless device, a file over the size limit.
    let base = d.join("base.json");
    std::fs::write(&base, br#"{"schema": "ipivmm.results/1", "ipivmm_version": "0.1.0", "host": null, "runs": [], "skipped": []}"#).unwrap();
    let big = d.join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(300 << 20).unwrap();
    for (other, needle) in [
        (fifo.as_path(), "FIFO"),
        (Path::new("/dev/zero"), "device"),
        (big.as_path(), "too large"),
    ] {
        let args = with(&["compare"], &[&base, other]);
        assert_refused(&refs(&args), needle);
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn sweep_refuses_bad_values_like_run_even_when_quiet() {
    // sweep checks every configuration once /dev/kvm is open (KVM's vCPU
    // limit is part of the check): without it the refusal is the open's.
    if !ipivmm_testkit::kvm_openable(
        "sweep_refuses_bad_values_like_run_even_when_quiet",
        "sweep checks its values once /dev/kvm is open",
    ) {
        return;
    }
    for (flag, value) in [
        ("--vcpus", "5000"),
        ("--iterations", "0"),
        ("--iterations", "100000000"),
        ("--timeout", "999999999"),
    ] {
        for quiet in [false, true] {
            let mut a = vec!["sweep", flag, value];
            if quiet {
                a.push("-q");
            }
            assert_refused(&refs(&os(&a)), flag);
        }
    }
}

/// Issue 20, case 2: a link planted at a chart's name is replaced by the
/// chart, never written through (charts are written like JSON and CSV: a
/// temporary file renamed over the name).
#[test]
fn charts_replace_a_planted_link_and_never_write_through_it() {
    let test = "charts_replace_a_planted_link_and_never_write_through_it";
    if !kvm_available(test) {
        return;
    }
    let d = dir("chartlink");
    let plots = d.join("plots");
    std::fs::create_dir_all(&plots).unwrap();
    let victim = d.join("victim");
    std::fs::write(&victim, b"not a chart").unwrap();
    let chart = plots.join("self-ipi-1vcpu-spin-latency.svg");
    std::os::unix::fs::symlink(&victim, &chart).unwrap();
    let o = bin()
        .args(with(&[QUICK, &["--quiet", "--plot"]].concat(), &[&plots]))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&victim).unwrap(), b"not a chart");
    let meta = std::fs::symlink_metadata(&chart).unwrap();
    assert!(meta.file_type().is_file(), "the link was kept: {meta:?}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    let left: Vec<_> = std::fs::read_dir(&plots)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 20, case 14: a payload named with 245 characters gets charts whose
/// names fit (they used to fail with "File name too long" after the run).
#[test]
fn a_long_payload_name_makes_charts_that_fit() {
    let test = "a_long_payload_name_makes_charts_that_fit";
    if !kvm_available(test) {
        return;
    }
    let d = dir("longname");
    let payload = d.join("p".repeat(245));
    std::fs::write(&payload, ipivmm::PayloadSource::BUILTIN_ELF).unwrap();
    let plots = d.join("plots");
    let mut args = with(&["run", "--payload"], &[&payload]);
    args.extend(os(&[
        "--vcpus",
        "2",
        "--iterations",
        "10",
        "--warmup",
        "1",
        "--no-tracepoints",
        "--serial",
        "none",
        "--quiet",
        "--plot",
    ]));
    args.push(plots.clone().into());
    let o = bin().args(&args).stdin(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = std::fs::read_dir(&plots)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.is_empty(), "no chart written");
    assert!(names.iter().all(|n| n.len() < 200), "{names:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 20, case 15: a refused run creates no --plot directory (nor any
/// of its parents).
#[test]
fn refused_runs_create_no_plot_directory() {
    let d = dir("noplotdir");
    let plots = d.join("a/b/plots");
    let bad_payload = d.join("not-an-elf");
    std::fs::write(&bad_payload, b"#!/bin/sh\n").unwrap();
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        with(&["run", "--payload"], &[&bad_payload]),
        os(&["run", "--vcpus", "0"]),
        os(&["run", "--iterations", "0"]),
    ];
    for mut args in cases {
        args.push("--plot".into());
        args.push(plots.clone().into());
        let o = bin().args(&args).stdin(Stdio::null()).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            !d.join("a").exists(),
            "{args:?} created the --plot directory"
        );
    }
    let mut dry = os(&["run", "--dry-run", "--plot"]);
    dry.push(plots.clone().into());
    let _ = bin().args(&dry).stdin(Stdio::null()).output().unwrap();
    assert!(
        !d.join("a").exists(),
        "--dry-run created the --plot directory"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 20, case 18: `--json LINK` where LINK points at a directory is
/// refused as a directory is, before the run; the link and the directory
/// stay.
#[test]
fn a_link_to_a_directory_is_refused_as_a_results_file() {
    let d = dir("linkdir");
    let target = d.join("results");
    std::fs::create_dir_all(&target).unwrap();
    let link = d.join("r.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let args = with(&[QUICK, &["--json"]].concat(), &[&link]);
    assert_refused(&refs(&args), "a symbolic link to a directory");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(target.is_dir());
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 48: as a user who cannot open /dev/kvm, every test here passes
/// or skips visibly (none fails on the KVM error).
#[test]
fn without_kvm_access_the_tests_here_skip() {
    ipivmm_testkit::assert_kvm_tests_skip_as_nobody("without_kvm_access_the_tests_here_skip");
}
