//! Issue 39: a failure is a failure. Only what this host cannot do (the
//! mode, a feature) is a skip; a run that cannot start for another reason
//! (here: too few file descriptors for 64 vCPUs) is a failed run, exit 1,
//! in `sweep` as in `run`, said on stderr even with `-q`. The sweep used to
//! file it under `skipped` ("could not start") and exit 0 in silence; `run`
//! exited 2, as for bad input.
use ipivmm_analysis::results::Document;
use ipivmm_testkit::kvm_available;
use std::process::{Command, Output};

/// `ipivmm ARGS` under `ulimit -n 60`.
fn with_60_fds(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 60 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ipivmm"))
        .args(args)
        .output()
        .expect("sh runs ipivmm")
}

const SMALL: [&str; 12] = [
    "--irqchip",
    "kernel",
    "--apic",
    "x2apic",
    "--target",
    "halt",
    "--iterations",
    "10",
    "--warmup",
    "1",
    "--repeat",
    "1",
];

#[test]
fn a_row_that_cannot_start_is_a_failed_run_not_a_skip() {
    if !kvm_available("a_row_that_cannot_start_is_a_failed_run_not_a_skip") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ipivmm-start-failures-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("s.json");
    let mut args = vec![
        "sweep",
        "--vcpus",
        "2,64",
        "--workload",
        "pingpong",
        "--ipi",
        "icr",
    ];
    args.extend(SMALL);
    args.extend([
        "--observer-effect",
        "0",
        "-q",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = with_60_fds(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("64v kernel/x2apic/icr: failed: could not start: KVM_CREATE_VCPU failed"),
        "said with -q: {stderr}"
    );
    let doc = Document::load(&json).unwrap();
    assert!(doc.skipped.is_empty(), "not a skip: {:?}", doc.skipped);
    let states: Vec<(usize, &str)> = doc
        .runs
        .iter()
        .map(|r| (r.mode.vcpus, r.status.name()))
        .collect();
    assert_eq!(states, [(2, "completed"), (64, "failed")]);
    // `run`: the same failure, exit 1 (a failed run), not 2 (bad input).
    let mut args = vec!["run", "--vcpus", "64", "-q"];
    args.extend(SMALL);
    let out = with_60_fds(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("could not start"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
