//! Issue 39: the guest memory budget bounds the whole command. A guest that
//! floods the host with phases stops over the budget in its first repeat;
//! the other repeats are not run (it would do the same again), the process
//! stays near the budget, and the over-budget run is said once. Before, every
//! repeat got its own budget: five times the memory, five times the JSON.
//! The configuration is the issue's own line: `--guest-memory-budget 128
//! --vcpus 8`, peak RSS under 224 MiB and a JSON under 128 MiB (683 MB and
//! a 444 MB JSON before).
use ipivmm_analysis::results::Document;
use ipivmm_testkit::kvm_available;
use std::process::{Command, Stdio};

const BUDGET_MIB: u64 = 128;
/// What the process may hold beyond the budget: binary, threads, the guest
/// pages it touched, the JSON write's buffers.
const OVERHEAD_MIB: u64 = 96;

/// Peak RSS of a finished child, KiB (wait4's rusage).
fn wait_peak_kib(child: &mut std::process::Child) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are live locals the call writes; the pid
    // is our own unreaped child.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    assert!(libc::WIFEXITED(status), "exited, not killed: {status}");
    (libc::WEXITSTATUS(status), usage.ru_maxrss as u64)
}

#[test]
fn a_flooding_guest_stops_its_repeats_within_one_budget() {
    if !kvm_available("a_flooding_guest_stops_its_repeats_within_one_budget") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ipivmm-budget-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (elf, json) = (dir.join("flood.elf"), dir.join("r.json"));
    let ipivmm::PayloadSource::Bytes(bytes) =
        ipivmm_tests::code_payload(ipivmm_tests::floods::PHASE_FLOOD)
    else {
        unreachable!("code_payload gives bytes")
    };
    std::fs::write(&elf, bytes).unwrap();
    let timeout = ipivmm_testkit::scaled_secs(60).to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args([
            "run",
            "--vcpus",
            "8",
            "--no-tracepoints",
            "--serial",
            "none",
            "-q",
        ])
        .args([
            "--guest-memory-budget",
            &BUDGET_MIB.to_string(),
            "--timeout",
            &timeout,
        ])
        .arg("--payload")
        .arg(&elf)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ipivmm starts");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let (code, peak_kib) = wait_peak_kib(&mut child);
    let size = std::fs::metadata(&json).map_or(0, |m| m.len());
    eprintln!("peak RSS {peak_kib} KiB, JSON {size} bytes, budget {BUDGET_MIB} MiB");
    assert_eq!(code, 1, "{stderr}");
    let doc = Document::load(&json).expect("the JSON is written");
    assert_eq!(doc.runs.len(), 1, "the repeats after it were not run");
    assert_eq!(doc.runs[0].status.name(), "over_budget");
    assert_eq!(
        stderr.matches("over budget").count(),
        1,
        "said once: {stderr}"
    );
    assert!(stderr.contains("its other repeats are not run"), "{stderr}");
    // The budget and the process's own; five budgets before.
    let bound_kib = (BUDGET_MIB + OVERHEAD_MIB) * 1024;
    assert!(
        peak_kib < bound_kib,
        "peak RSS {peak_kib} KiB over {bound_kib} KiB"
    );
    assert!(size < BUDGET_MIB << 20, "JSON of {size} bytes");
    let _ = std::fs::remove_dir_all(&dir);
}
