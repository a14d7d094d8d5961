//! `ipivmm new-payload demo DIR` writes a crate that builds and runs with
//! the command it prints, from any directory, and whose CSV rows and charts
//! are named "demo". The build needs cargo (a visible skip without it; the
//! crate has no registry dependency, so no network or registry cache); the
//! run needs /dev/kvm (a visible skip without it).
use ipivmm_testkit::{kvm_available, skip, Need};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TEST: &str = "new_payload_builds_and_runs_with_the_printed_command";

fn ipivmm(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("ipivmm runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A shell in `cwd` running `line`, without the cargo settings of this test
/// process (CARGO_TARGET_DIR and friends would put the payload elsewhere or
/// override its flags).
fn sh(line: &str, cwd: &Path) -> Result<Output, std::io::Error> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(line).current_dir(cwd);
    ipivmm::payload::scrub::scrub_env(&mut cmd);
    cmd.output()
}

fn cargo_runs() -> bool {
    Command::new("cargo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn new_payload_refuses_bad_names_and_full_directories() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-payload-refusals");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("full")).unwrap();
    std::fs::write(dir.join("full/keep"), "mine").unwrap();
    for (args, needle) in [
        (vec!["new-payload", "9lives"], "must start with a letter"),
        (vec!["new-payload", "a.b"], "only letters, digits"),
        (vec!["new-payload", "ipivmm-guest"], "is taken"),
        // Issue 20, case 12: names cargo refuses for a binary.
        (
            vec!["new-payload", "deps"],
            "cargo refuses as a binary name",
        ),
        (vec!["new-payload", "incremental"], "cargo refuses"),
        (
            vec!["new-payload", "demo", "full"],
            "full exists and is not empty",
        ),
    ] {
        let o = ipivmm(&args, &dir);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert_eq!(t.lines().count(), 1, "{t}");
        assert!(
            t.starts_with("ipivmm: error: ") && t.contains(needle),
            "{t}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("full/keep")).unwrap(),
        "mine"
    );
    assert_eq!(std::fs::read_dir(dir.join("full")).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn new_payload_builds_and_runs_with_the_printed_command() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("new-payload");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("elsewhere")).unwrap();
    // A relative DIR, from the test's own directory.
    let o = ipivmm(&["new-payload", "demo", "crates/demo"], &base);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let dir = base.join("crates/demo");
    for f in [
        "Cargo.toml",
        ".cargo/config.toml",
        "link.ld",
        "build.rs",
        "src/main.rs",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing: {out}");
    }
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("cd "))
        .map(|rest| format!("cd {rest}"))
        .unwrap_or_else(|| panic!("no command printed: {out}"));
    let expected = format!(
        "cd {} && cargo build --release && {} run --payload target/x86_64-unknown-linux-gnu/release/demo",
        dir.display(),
        env!("CARGO_BIN_EXE_ipivmm")
    );
    assert_eq!(line, expected);

    if !cargo_runs() {
        skip(
            TEST,
            Need::Setup,
            "cargo cannot be run here to build the payload",
        );
        return;
    }
    // The build part, from another directory.
    let (build, _) = line
        .rsplit_once(" && ")
        .expect("cd ... && cargo build ... && ipivmm run ...");
    let o = sh(build, &base.join("elsewhere")).expect("sh runs");
    assert!(o.status.success(), "{build}:\n{}", text(&o));
    // Issue 50: the first build of a new crate printed 16 warnings, 10 of
    // them "unexpected cfg" from the ABI copy. What is left is rustc's
    // note on the payload's target features (`+soft-float` on this target,
    // accepted in .cargo/config.toml), and cargo's count of it per crate.
    let build_text = text(&o);
    let warnings: Vec<&str> = build_text
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .filter(|l| !l.starts_with("warning: target feature `"))
        .filter(|l| !(l.starts_with("warning: `") && l.contains(") generated ")))
        .collect();
    assert_eq!(warnings, Vec::<&str>::new(), "{build}:\n{build_text}");
    let elf = dir.join("target/x86_64-unknown-linux-gnu/release/demo");
    let image = std::fs::read(&elf).expect("the ELF");
    ipivmm::payload::image::ImageInfo::check(&image).expect("the loader accepts it");

    if !kvm_available(TEST) {
        return;
    }
    // The whole printed command, then with results files.
    let o = sh(&line, &base.join("elsewhere")).expect("sh runs");
    let t = text(&o);
    assert!(o.status.success(), "{line}:\n{t}");
    assert!(
        t.contains("demo: done")
            && t.contains("phase 0 'cpuid-uncounted' (uncounted part")
            && t.contains("phase 0 'cpuid' (counted part"),
        "{t}"
    );
    assert!(t.contains("records: max_leaf="), "{t}");
    let csv = base.join("demo.csv");
    let plots = base.join("plots");
    let full = format!(
        "{line} --iterations 50 --warmup 5 --csv {} --plot {}",
        csv.display(),
        plots.display()
    );
    let o = sh(&full, &base.join("elsewhere")).expect("sh runs");
    assert!(o.status.success(), "{full}:\n{}", text(&o));
    let rows = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = rows.lines().next().unwrap().split(',').collect();
    let workload = header.iter().position(|h| *h == "workload").unwrap();
    let payload = header.iter().position(|h| *h == "payload").unwrap();
    for row in rows.lines().skip(1) {
        let cols: Vec<&str> = row.split(',').collect();
        assert_eq!(cols[workload], "demo", "{row}");
        assert!(cols[payload].ends_with("/demo"), "{row}");
    }
    let mut charts: Vec<String> = std::fs::read_dir(&plots)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    charts.sort();
    assert_eq!(
        charts,
        [
            "demo-2vcpu-cycles.svg",
            "demo-2vcpu-exits.svg",
            "demo-2vcpu-latency.svg"
        ]
    );
    let cycles = std::fs::read_to_string(plots.join("demo-2vcpu-cycles.svg")).unwrap();
    assert!(cycles.contains("payload demo, 2 vCPUs: cycles per sample"));
    let _ = std::fs::remove_dir_all(&base);
}
