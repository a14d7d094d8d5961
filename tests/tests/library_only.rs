//! `ipivmm` is the one dependency a library user needs: a copy of
//! `examples/library-only` (whose Cargo.toml names `ipivmm` alone, by path)
//! builds offline, and where /dev/kvm is usable it boots a VM, sends the
//! guest's serial console to stdout and prints the counters of every vCPU
//! and phase. Skips (visibly) without cargo; the run skips without KVM.
use ipivmm_tests::{kvm_available, skip, Need};
use std::path::{Path, PathBuf};
use std::process::Command;

const TEST: &str = "library_only_example_builds_and_runs_with_ipivmm_alone";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The `[dependencies]` of a manifest: one name per line of that table.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                names.push(name.trim().to_string());
            }
        }
    }
    names
}

/// Runs `cmd` (a cargo command) with the payload build's environment
/// scrubbed; None when cargo is not installed (test `test` skipped, saying
/// so). Any other failure to start it fails the test.
fn run_cargo(test: &str, mut cmd: Command) -> Option<std::process::Output> {
    ipivmm::payload::scrub::scrub_env(&mut cmd);
    match cmd.output() {
        Ok(o) => Some(o),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            skip(test, Need::Setup, &format!("cargo not found ({e})"));
            None
        }
        Err(e) => panic!("cannot run cargo: {e}"),
    }
}

#[test]
fn library_only_example_builds_and_runs_with_ipivmm_alone() {
    let example = repo().join("examples/library-only");
    let manifest = std::fs::read_to_string(example.join("Cargo.toml")).expect("the example");
    assert_eq!(dependencies(&manifest), ["ipivmm"], "{manifest}");

    // A copy in a temporary directory, ipivmm by absolute path, the
    // workspace's lock file so that the offline build finds every crate.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("library-only");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).expect("temp dir");
    let vmm = repo().join("vmm");
    let copy = manifest.replace(
        "path = \"../../vmm\"",
        &format!("path = {:?}", vmm.display().to_string()),
    );
    assert_ne!(copy, manifest, "the example names ipivmm by ../../vmm");
    std::fs::write(dir.join("Cargo.toml"), copy).unwrap();
    std::fs::copy(example.join("src/main.rs"), dir.join("src/main.rs")).unwrap();
    std::fs::copy(repo().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();

    // The workspace's target directory: the registry crates it holds are
    // reused (ipivmm itself builds again: another workspace root).
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&dir)
        .args(["build", "--release", "--offline", "--quiet"])
        .arg("--target-dir")
        .arg(&target_dir);
    let Some(out) = run_cargo(TEST, cmd) else {
        return;
    };
    assert!(
        out.status.success(),
        "cargo build of the library-only example failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = target_dir.join("release/library-only");
    assert!(exe.is_file(), "{} was not built", exe.display());

    if !kvm_available(TEST) {
        return;
    }
    let out = Command::new(&exe).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("library-only: /dev/kvm: KVM API 12, backend "),
        "{stdout}"
    );
    // The guest's console went to stdout (the SDK's greeting on vCPU 0).
    assert!(stdout.contains("ipivmm-guest: 2 vCPUs"), "{stdout}");
    assert!(
        stdout.contains("library-only: kernel/x2apic/icr (completed)"),
        "{stdout}"
    );
    // Counters: vCPU 0 sent every measured IPI, vCPU 1 received them.
    assert!(
        stdout.contains("library-only: vcpu0 phase 2 'measure': 200 IPIs sent, 0 received"),
        "{stdout}"
    );
    assert!(
        stdout.contains("library-only: vcpu1 phase 2 'measure': 0 IPIs sent, 200 received"),
        "{stdout}"
    );
    assert!(
        stdout.contains("p50 ") && stdout.contains("over 200 samples"),
        "{stdout}"
    );
}

/// The crates only the front end (`ipivmm-cli`) needs: a library user of
/// the engine compiles none of them. (`quick-junit` is the engine's: a
/// plan's verdicts as JUnit, which the lab writes without the front end.)
const FRONT_END_ONLY: &[&str] = &["clap", "plotters", "comfy-table", "indicatif"];

/// `cargo tree -p ipivmm -e normal`: what the engine crate links, by its
/// own features (clap's parser for the mode parts is its `clap` feature,
/// which only ipivmm-cli turns on).
#[test]
fn the_engine_links_no_front_end_crate() {
    const TEST: &str = "the_engine_links_no_front_end_crate";
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(repo()).args([
        "tree",
        "-p",
        "ipivmm",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--offline",
    ]);
    let Some(out) = run_cargo(TEST, cmd) else {
        return;
    };
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The tree was read: the engine's own KVM crates are in it.
    assert!(crates.contains(&"kvm-ioctls"), "{tree}");
    let front: Vec<&&str> = crates
        .iter()
        .filter(|c| FRONT_END_ONLY.contains(c))
        .collect();
    assert!(front.is_empty(), "the engine links {front:?}:\n{tree}");
}
