//! Skips show: a VM test that cannot open /dev/kvm says so in a plain
//! `cargo test` (a `SKIP` line, and a count when the binary exits), and
//! `IPIVMM_REQUIRE_KVM=1` turns the skip into a failure.
//!
//! Proven on this very binary: it runs itself as `nobody` (setpriv), which
//! cannot open a root-only /dev/kvm, once without and once with the switch,
//! filtered to the probe test below. Needs root, setpriv and a /dev/kvm that
//! `nobody` cannot open; skips (visibly) otherwise.
use ipivmm_tests::{kvm_available, skip, Need};
use std::path::Path;
use std::process::{Command, Output};

const PROBE: &str = "kvm_probe_skips_without_kvm";

/// The probe: a VM test in miniature (it only checks for KVM).
#[test]
fn kvm_probe_skips_without_kvm() {
    if !kvm_available(PROBE) {
        return;
    }
    assert!(Path::new("/dev/kvm").exists());
}

/// This binary, filtered to the probe, as `nobody`, with `require` as
/// IPIVMM_REQUIRE_KVM.
fn probe_as_nobody(setpriv: &Path, require: Option<&str>) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe)
        .args(["--exact", PROBE, "--test-threads=1"])
        .current_dir("/");
    for v in [
        "IPIVMM_REQUIRE_KVM",
        "IPIVMM_REQUIRE_HW_KVM",
        "IPIVMM_REQUIRE_ALL",
    ] {
        cmd.env_remove(v);
    }
    if let Some(r) = require {
        cmd.env("IPIVMM_REQUIRE_KVM", r);
    }
    cmd.output().expect("setpriv runs")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn skips_show_without_flags_and_fail_on_request() {
    const TEST: &str = "skips_show_without_flags_and_fail_on_request";
    let setpriv = Path::new("/usr/bin/setpriv");
    if !ipivmm_testkit::is_root() || !setpriv.exists() {
        skip(
            TEST,
            Need::Setup,
            "needs root and /usr/bin/setpriv to run a test as nobody",
        );
        return;
    }

    let o = probe_as_nobody(setpriv, None);
    let (out, err) = text(&o);
    if !err.contains(&format!("SKIP {PROBE}:")) && o.status.success() {
        skip(
            TEST,
            Need::Setup,
            "nobody can open /dev/kvm here, so nothing skips",
        );
        return;
    }
    assert!(o.status.success(), "a skip passes\n{out}\n{err}");
    assert!(
        out.contains(&format!("test {PROBE} ... ok")),
        "{out}\n{err}"
    );
    // Shown without --nocapture: the SKIP line and the summary at exit.
    assert!(
        err.contains(&format!("SKIP {PROBE}: /dev/kvm cannot be opened")),
        "{err}"
    );
    assert!(
        err.contains("(IPIVMM_REQUIRE_KVM=1 makes this a failure)"),
        "{err}"
    );
    let summary: Vec<&str> = err.lines().filter(|l| l.starts_with("SKIPPED ")).collect();
    assert_eq!(summary.len(), 1, "one summary line:\n{err}");
    assert!(
        summary[0]
            .starts_with("SKIPPED 1 test of skips (counted as passed above): 1 need /dev/kvm"),
        "{}",
        summary[0]
    );

    let o = probe_as_nobody(setpriv, Some("1"));
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(101), "the skip fails\n{out}\n{err}");
    assert!(
        out.contains(&format!("test {PROBE} ... FAILED")),
        "{out}\n{err}"
    );
    let all = format!("{out}\n{err}");
    assert!(
        all.contains(&format!(
            "{PROBE}: IPIVMM_REQUIRE_KVM=1 but /dev/kvm cannot be opened"
        )),
        "{all}"
    );
    assert!(!err.contains("SKIPPED"), "a failure is not a skip: {err}");
}
