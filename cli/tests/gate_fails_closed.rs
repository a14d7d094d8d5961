//! The gate fails closed (issues 29 and 30): an error in a plan is a
//! failure, not a skip; flags a plan line cannot honour are refused; no
//! figure is filled in from another; file names from user text stay apart;
//! `-` is stdout; a closed stdout is an error; user text is escaped on its
//! way to a terminal. The plans here need no /dev/kvm unless they say so.
mod cli_kit;
mod output_fixtures;

use cli_kit::{ipivmm, plan};

use ipivmm_analysis::expect::{Outcome, Verdicts};

use ipivmm_analysis::results::Document;
use ipivmm_testkit::kvm_available;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn dir(name: &str) -> PathBuf {
    cli_kit::dir("closed", name)
}

fn one_run(flags: &str) -> String {
    format!(
        "name = \"t\"\n[[experiment]]\nname = \"e\"\nrun = \"{flags}\"\nexpect = [\"vcpus == 2\"]\n"
    )
}

/// A plan whose one experiment no host can run (PV IPIs without KVM's
/// LAPIC): every point a skip, with no VM needed.
const SKIP_ONLY: &str = "[[experiment]]\nname = \"pv-user\"\nsweep = \"--irqchip user --ipi pv --workload pingpong\"\nexpect = [\"exits_per_ipi < 100\"]\n";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_request_run_refuses_fails_the_plan_before_anything_runs() {
    let d = dir("usage");
    for (flags, needle) in [
        ("--vcpus 0", "--vcpus 0"),
        ("--vector 0x10", "--vector 0x10"),
        ("--expect 'vcpus == 3'", "move it to expect"),
        ("--json x.json", "--json in a plan line would be ignored"),
        ("--csv x.csv", "--csv in a plan line would be ignored"),
        ("--dry-run", "--dry-run is not for a plan line"),
    ] {
        let p = plan(&d, "p", &one_run(&flags.replace('"', "\\\"")));
        let o = ipivmm(&["check", p.to_str().unwrap()]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags}: {err}");
        assert!(
            err.contains("experiment 'e'") && err.contains(needle),
            "{flags}: {err}"
        );
        assert!(
            o.stdout.is_empty(),
            "{flags}: no TAP for a plan that does not load"
        );
    }
    let p = plan(
        &d,
        "sweep",
        "name = \"t\"\n[[experiment]]\nname = \"e\"\nsweep = \"--dry-run\"\nexpect = [\"vcpus == 2\"]\n",
    );
    let o = ipivmm(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--dry-run is not for a plan line"));
}

#[test]
fn a_payload_that_cannot_be_read_is_a_failure_not_a_skip() {
    let d = dir("payload");
    let fifo = d.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    std::fs::create_dir_all(d.join("adir")).unwrap();
    let mut payloads = vec![d.join("missing.elf"), d.join("adir")];
    if made.is_ok_and(|s| s.success()) {
        payloads.push(fifo);
    }
    for payload in payloads {
        let flags = format!("--payload {} --iterations 10", payload.display());
        let p = plan(&d, "p", &one_run(&flags));
        let o = ipivmm(&["check", p.to_str().unwrap(), "--quiet"]);
        let tap = text(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{flags}: {tap}{}",
            text(&o.stderr)
        );
        assert!(tap.contains("not ok 1 - e: vcpus == 2"), "{flags}: {tap}");
        assert!(tap.contains("plan error"), "{flags}: {tap}");
        assert!(!tap.contains("# SKIP"), "{flags}: {tap}");
    }
}

#[test]
fn experiment_names_are_checked_and_escaped() {
    let d = dir("names");
    let dup = "name = \"t\"\n[[experiment]]\nname = \"a\"\nrun = \"\"\nexpect = [\"vcpus == 2\"]\n[[experiment]]\nname = \"a\"\nrun = \"\"\nexpect = [\"vcpus == 2\"]\n";
    let o = ipivmm(&["check", plan(&d, "dup", dup).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("names must differ"),
        "{}",
        text(&o.stderr)
    );
    let empty = one_run("").replace("name = \"e\"", "name = \" \"");
    let o = ipivmm(&["check", plan(&d, "empty", &empty).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    // A TOML error names its line and column.
    let o = ipivmm(&[
        "check",
        plan(&d, "bad", "name = \"x\"\n[[experiment]]\nname = 3\n")
            .to_str()
            .unwrap(),
    ]);
    assert!(
        text(&o.stderr).contains("line 3, column 8"),
        "{}",
        text(&o.stderr)
    );
    // Terminal escapes in a plan's text never reach stderr raw.
    let evil = format!(
        "name = \"evil\\u001b]0;owned\\u0007\"\nabout = \"x\\u001b[2J\"\n{}",
        SKIP_ONLY.replace("pv-user", "pv\\u001b[31muser")
    );
    let o = ipivmm(&["check", plan(&d, "evil", &evil).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    for out in [&o.stdout, &o.stderr] {
        assert!(
            !out.contains(&0x1b) && !out.contains(&0x07),
            "{}",
            text(out)
        );
    }
}

#[test]
fn junit_dash_is_stdout_and_the_tap_moves_to_stderr() {
    let d = dir("junit-dash");
    let p = plan(&d, "skip", &format!("name = \"t\"\n{SKIP_ONLY}"));
    let o = ipivmm(&["check", p.to_str().unwrap(), "--junit", "-", "--quiet"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.starts_with("<?xml"), "{stdout}");
    roxmltree::Document::parse(&stdout).expect("stdout is the JUnit XML");
    assert!(text(&o.stderr).contains("TAP version 13"));
    assert!(
        !Path::new("-").exists() && !d.join("-").exists(),
        "no file named '-'"
    );
}

/// `cmd` with its stdout closed (`>&-`).
fn with_stdout_closed(mut cmd: Command) -> Output {
    // SAFETY: between fork and exec only close(2) runs, which is
    // async-signal-safe; fd 1 belongs to the child alone.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    cmd.stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("ipivmm runs")
}

#[test]
fn verdicts_for_a_closed_stdout_are_an_error() {
    let d = dir("closed");
    let p = plan(&d, "skip", &format!("name = \"t\"\n{SKIP_ONLY}"));
    let mut check = Command::new(env!("CARGO_BIN_EXE_ipivmm"));
    check.args(["check", p.to_str().unwrap(), "--quiet"]);
    let mut run = Command::new(env!("CARGO_BIN_EXE_ipivmm"));
    // Whether or not a VM can run here, the TAP is for stdout.
    run.args([
        "run",
        "--irqchip",
        "user",
        "--ipi",
        "pv",
        "--expect",
        "vcpus == 2",
        "--tap",
    ]);
    for (what, cmd) in [("check", check), ("run --tap", run)] {
        let o = with_stdout_closed(cmd);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("stdout is closed"), "{what}: {err}");
    }
}

#[test]
fn json_dir_files_of_different_names_stay_apart() {
    if !kvm_available("json_dir_files_of_different_names_stay_apart") {
        return;
    }
    let d = dir("json-dir");
    let names = ["a b", "a/b", "a-b", "é"];
    let mut text_plan = String::from("name = \"t\"\n");
    for n in names {
        text_plan.push_str(&format!(
            "[[experiment]]\nname = \"{n}\"\nrun = \"--iterations 5 --warmup 1 --no-tracepoints --repeat 1\"\nexpect = [\"vcpus == 2\"]\n"
        ));
    }
    let p = plan(&d, "names", &text_plan);
    let out = d.join("results");
    let o = ipivmm(&[
        "check",
        p.to_str().unwrap(),
        "--quiet",
        "--json-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["%C3%A9.json", "a%20b.json", "a%2Fb.json", "a-b.json"]
    );
}

#[test]
fn delivered_is_never_filled_in_from_sent() {
    // The receivers counted nothing (SIPIs to a running vCPU, an NMI storm
    // whose handler missed most): 0 delivered, and the invariant fails.
    let mut r = output_fixtures::report(&[], 10_000, 3);
    for v in &mut r.vcpus {
        for p in &mut v.phases {
            p.guest.ipis_received = 0;
        }
    }
    let s = r.summary();
    assert_eq!((s.ipis, s.ipis_delivered), (output_fixtures::IPIS, 0));
    let doc = Document::new(vec![r], Vec::new());
    let v = Verdicts::of(&doc, &["ipis_delivered == ipis_sent".parse().unwrap()]);
    assert!(matches!(v.0[0].outcome, Outcome::Fail(_)), "{:?}", v.0[0]);
}

#[test]
fn the_uncounted_flag_not_the_name_decides_the_part() {
    // A payload naming its uncounted part `measure` and its counted part
    // `measure-uncounted`.
    let mut r = output_fixtures::report(&[], 10_000, 3);
    for v in &mut r.vcpus {
        let counted = v.phases[1].clone();
        let mut uncounted = counted.clone();
        uncounted.uncounted = true;
        uncounted.tracepoints.clear();
        let mut counted = counted;
        counted.name = "measure-uncounted".into();
        v.phases = vec![uncounted, counted];
    }
    let (_, name) = r.measured_phase().unwrap();
    assert_eq!(name, "measure-uncounted", "the counted part is the phase");
    let s = r.summary();
    assert_eq!(
        s.latency_phase.as_deref(),
        Some("measure"),
        "latency from the uncounted part"
    );
}

#[test]
fn a_phase_open_at_done_is_shown_unfinished_and_never_the_measured_one() {
    let mut r = output_fixtures::report(&[], 10_000, 3);
    for v in &mut r.vcpus {
        let mut open = v.phases[1].clone();
        open.id = 7;
        open.name = "measure".into();
        open.unfinished = true;
        v.phases[1].name = "done-right".into();
        v.phases.push(open);
    }
    let (_, name) = r.measured_phase().unwrap();
    assert_eq!(name, "done-right");
    let shown = ipivmm_cli::output::text::render(&r);
    assert!(shown.contains("UNFINISHED on vcpu0"), "{shown}");
    let json = Document::new(vec![r], Vec::new()).to_json();
    assert!(json.contains("\"unfinished\":true") || json.contains("\"unfinished\": true"));
}
