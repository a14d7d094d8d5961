//! Durable rows (issue 33): a sweep's `--json FILE` holds every finished
//! run while the sweep goes on, so `kill -9` (a frozen machine, a power
//! cut) leaves them readable. The rows here end by their watchdog
//! (`--timeout 1` against a workload far longer), so each takes about a
//! second on any KVM, software or hardware.
use ipivmm::results::Document;
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
    let started = Instant::now();
    let partial = loop {
        if let Ok(doc) = Document::load(&json) {
            break doc;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before any row was written"
        );
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no row written in 300 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
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
