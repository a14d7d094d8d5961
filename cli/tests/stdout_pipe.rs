//! Issue 20, case 3: a guest that prints forever, run with stdout a pipe
//! nobody reads, as in `(ipivmm run ... --timeout 3 --json r.json) | sleep 40`.
//! The watchdog stopped the VM at 3 s, but a vCPU thread blocked writing the
//! serial output held the console and the stdout lock: the JSON was written,
//! and ipivmm exited, only when the reader went away (40 s). Now serial
//! output goes through a queue drained by its own thread
//! (`ipivmm_term::stdout`): the vCPUs stop at the timeout, the JSON is
//! written then, and the report's print gives up after
//! `ipivmm_term::stdout::STALL` without progress.
use ipivmm_term::stdout::STALL;
use ipivmm_testkit::kvm_available;
use ipivmm_tests::cases::Case;
use ipivmm_tests::HOSTILE_PAYLOAD;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT_S: u64 = 3;

#[test]
fn a_stdout_nobody_reads_does_not_hold_the_exit() {
    let name = "a_stdout_nobody_reads_does_not_hold_the_exit";
    if !kvm_available(name) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ipivmm-stdout-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let payload = dir.join("ipivmm-hostile.elf");
    std::fs::write(&payload, HOSTILE_PAYLOAD).expect("write the payload");
    let json = dir.join("r.json");
    let _ = std::fs::remove_file(&json);
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args([
            "run",
            "--repeat",
            "1",
            "--vcpus",
            "1",
            "--no-tracepoints",
            "--payload",
        ])
        .arg(&payload)
        .args(["--param", &(Case::PrintForever as u64).to_string()])
        .args(["--timeout", &TIMEOUT_S.to_string(), "--json"])
        .arg(&json)
        .stdin(Stdio::null())
        // Held open and never read: the pipe fills and stays full.
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ipivmm starts");
    // One page of pipe (the smallest), so the guest fills it within the
    // timeout even on a loaded host.
    if let Some(out) = &child.stdout {
        use std::os::fd::AsRawFd;
        // SAFETY: F_SETPIPE_SZ on the read end of the child's stdout pipe,
        // which `child` owns and keeps open; no memory is passed.
        let rc = unsafe { libc::fcntl(out.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
        let e = std::io::Error::last_os_error();
        // EBUSY: it already holds more than a page, on its way to full.
        assert!(
            rc >= 4096 || e.raw_os_error() == Some(libc::EBUSY),
            "F_SETPIPE_SZ: {e}"
        );
    }
    let mut json_at = None;
    let deadline = started + ipivmm_testkit::scaled(Duration::from_secs(60));
    let status = loop {
        if json_at.is_none() && json.exists() {
            json_at = Some(started.elapsed());
        }
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ipivmm still running {:?} after a {TIMEOUT_S} s timeout, stdout not read",
                deadline - started
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let exited = started.elapsed();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    drop(child.stdout.take());
    eprintln!("exit {status} after {exited:?}, JSON after {json_at:?}\n{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    // The slack beyond the timeout and the stall follows the host's load.
    let bound =
        Duration::from_secs(TIMEOUT_S) + STALL + ipivmm_testkit::scaled(Duration::from_secs(5));
    assert!(
        exited < bound,
        "exit after {exited:?} (bound {bound:?})\n{stderr}"
    );
    let json_at = json_at.expect("the JSON was written");
    assert!(
        json_at < Duration::from_secs(TIMEOUT_S) + ipivmm_testkit::scaled(Duration::from_secs(4)),
        "JSON only after {json_at:?}"
    );
    let text = std::fs::read_to_string(&json).expect("read the JSON");
    let doc =
        ipivmm_analysis::results::Document::from_json(&text, "r.json").expect("a results document");
    assert_eq!(
        doc.runs[0].status.name(),
        "timed_out",
        "{:?}",
        doc.runs[0].status
    );
    assert!(
        doc.runs[0]
            .serial_tail
            .contains(ipivmm_tests::cases::PRINT_LINE),
        "{}",
        doc.runs[0].serial_tail
    );
    assert!(
        stderr.contains("the report was not printed in full"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
