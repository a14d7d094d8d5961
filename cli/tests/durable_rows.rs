//! Durable rows (issue 33): a sweep's `--json FILE` holds every finished
//! run while the sweep goes on, so `kill -9` (a frozen machine, a power
//! cut) leaves them readable. The rows here end by their watchdog
//! (`--timeout 1` against a workload far longer), so each takes about a
//! second on any KVM, software or hardware.
use ipivmm_analysis::results::Document;
use ipivmm_testkit::kvm_available;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn kill_9_of_a_sweep_leaves_every_finished_row_readable() {
    if !kvm_available("kill_9_of_a_sweep_leaves_every_finished_row_readable") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ipivmm-durable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("sweep.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args([
            "sweep",
            "--irqchip",
            "kernel,split,user",
            "--apic",
            "x2apic",
            "--ipi",
            "icr",
            "--workload",
            "pingpong",
            "--iterations",
            "3000000",
            "--timeout",
            "1",
            "--observer-effect",
            "0",
            "--repeat",
            "1",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ipivmm starts");
    // Progress, not a fixed delay: kill as soon as one row is on disk.
    let partial = wait_for(&mut child, &json, |d| !d.runs.is_empty());
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(!partial.runs.is_empty());
    let after = Document::load(&json).expect("the file is a whole document after SIGKILL");
    assert!(!after.runs.is_empty(), "finished rows kept");
    assert!(
        after.runs.len() < 3,
        "killed before the end: {} rows",
        after.runs.len()
    );
    let note = after.incomplete.as_deref().expect("marked incomplete");
    assert!(note.contains("of 3 planned runs finished"), "{note}");
    // Each row is whole: its mode and its end.
    for r in &after.runs {
        assert!(!r.vcpus.is_empty(), "{}", r.label());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls `json` until `ready` holds for the document in it, with the child
/// still running; panics after 300 s or when the child ends first.
fn wait_for(
    child: &mut std::process::Child,
    json: &std::path::Path,
    ready: impl Fn(&Document) -> bool,
) -> Document {
    let started = Instant::now();
    loop {
        if let Some(doc) = Document::load(json).ok().filter(|d| ready(d)) {
            return doc;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "ipivmm ended before the document was ready"
        );
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "not ready in 300 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ipivmm-durable-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ipivmm(args: &[&str], json: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(args)
        .arg("--json")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ipivmm starts")
}

/// Issue 39: `run --repeat 8` killed after two repeats leaves a whole
/// document of those two, marked incomplete (it used to leave no file).
#[test]
fn kill_9_of_run_repeats_leaves_the_finished_repeats_marked_incomplete() {
    if !kvm_available("kill_9_of_run_repeats_leaves_the_finished_repeats_marked_incomplete") {
        return;
    }
    let dir = scratch("run");
    let json = dir.join("run.json");
    std::fs::write(&json, "{\"an older file\": true}").unwrap();
    let mut child = ipivmm(
        &[
            "run",
            "--repeat",
            "8",
            "--iterations",
            "100",
            "--warmup",
            "5",
            "--no-tracepoints",
            "-q",
        ],
        &json,
    );
    // The older file is replaced before the first VM: killed from here on,
    // nothing reads as current.
    let first = wait_for(&mut child, &json, |_| true);
    assert!(
        first.incomplete.is_some(),
        "the first document is marked incomplete"
    );
    wait_for(&mut child, &json, |d| d.runs.len() >= 2);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let after = Document::load(&json).expect("a whole document after SIGKILL");
    assert!(
        (2..8).contains(&after.runs.len()),
        "{} runs",
        after.runs.len()
    );
    let repeats: Vec<Option<u32>> = after.runs.iter().map(|r| r.repeat).collect();
    assert_eq!(&repeats[..2], [Some(0), Some(1)]);
    let note = after.incomplete.as_deref().expect("marked incomplete");
    assert!(note.contains("of 8 planned runs finished"), "{note}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "only the results file: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 39: a sweep killed before its first run ended leaves no file that
/// reads as complete (the previous sweep's whole file used to stay).
#[test]
fn a_sweep_killed_before_its_first_run_leaves_no_complete_file() {
    if !kvm_available("a_sweep_killed_before_its_first_run_leaves_no_complete_file") {
        return;
    }
    let dir = scratch("sweep");
    let json = dir.join("sweep.json");
    let old = Document::new(Vec::new(), Vec::new());
    std::fs::write(&json, old.to_json()).unwrap();
    assert!(Document::load(&json).unwrap().incomplete.is_none());
    let mut child = ipivmm(
        &[
            "sweep",
            "--irqchip",
            "kernel",
            "--apic",
            "x2apic",
            "--workload",
            "pingpong",
            "--iterations",
            "3000000",
            "--timeout",
            "60",
            "--observer-effect",
            "0",
            "--quiet",
        ],
        &json,
    );
    // Killed once the plan is on disk: 1 row x 5 repeats (the journal
    // used to say "0 of 0" until the first run ended).
    let planned = |d: &Document| {
        d.incomplete
            .as_deref()
            .is_some_and(|n| n.contains(" of 5 planned"))
    };
    let started = wait_for(&mut child, &json, planned);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(started.runs.is_empty(), "killed before the first run ended");
    let after = Document::load(&json).expect("a whole document");
    let note = after.incomplete.as_deref().expect("marked incomplete");
    assert!(
        note.starts_with("sweep in progress (or killed): 0 of 5 planned runs finished"),
        "{note}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 39: a repeat that cannot start (its payload deleted after the
/// first) is a failed run; the finished repeat is kept (it used to be exit
/// 2 and no JSON).
#[test]
fn a_repeat_that_cannot_start_keeps_the_finished_ones() {
    if !kvm_available("a_repeat_that_cannot_start_keeps_the_finished_ones") {
        return;
    }
    let dir = scratch("gone");
    let (json, payload) = (dir.join("r.json"), dir.join("p.elf"));
    std::fs::write(&payload, ipivmm::PayloadSource::BUILTIN_ELF).unwrap();
    let p = payload.to_str().unwrap();
    let mut child = ipivmm(
        &[
            "run",
            "--payload",
            p,
            "--repeat",
            "5",
            "--iterations",
            "300",
            "--no-tracepoints",
        ],
        &json,
    );
    wait_for(&mut child, &json, |d| !d.runs.is_empty());
    std::fs::remove_file(&payload).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed run, not bad input: {stderr}"
    );
    let doc = Document::load(&json).expect("the JSON is written");
    assert!(doc.incomplete.is_none());
    // The repeat that had started when the file went completes too.
    let (failed, finished) = doc.runs.split_last().unwrap();
    assert!(!finished.is_empty() && finished.iter().all(|r| r.succeeded()));
    assert!(
        failed.status.text().contains("could not start"),
        "{}",
        failed.status.text()
    );
    assert!(
        doc.runs.len() < 5,
        "the repeats after the failure did not run"
    );
    assert!(stderr.contains("its other repeats are not run"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
