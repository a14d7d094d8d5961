//! Skips that show. A test that cannot run here (no usable /dev/kvm, no
//! hardware KVM, a missing tool) calls [`skip`] (or a check built on it,
//! like [`kvm_available`]) and returns. libtest still counts it as passed,
//! so the skip has to be visible some other way:
//!
//! - the `SKIP <test>: <why>` line is written straight to the process's
//!   stderr (`std::io::stderr().write_all`). libtest captures only what the
//!   `print!`/`eprint!` macros write (its capture hooks those macros, not
//!   file descriptor 2), so the line shows in a plain `cargo test`, without
//!   `--nocapture`;
//! - when the test binary exits, one summary line says how many of its
//!   tests skipped and why, after libtest's own `test result:` line. It is
//!   printed by an `atexit(3)` handler registered at the first skip: libtest
//!   ends the process either by returning from `main` or with
//!   `std::process::exit` (on a failure), and both run `atexit` handlers,
//!   while the destructor of a `static` never runs in Rust and a
//!   thread-local's may not run on the main thread at exit;
//! - an environment switch turns a skip into a failure (a panic naming the
//!   switch and the reason): `IPIVMM_REQUIRE_KVM=1` for tests that need
//!   /dev/kvm, `IPIVMM_REQUIRE_HW_KVM=1` for tests that need a hardware KVM
//!   (it implies the first), `IPIVMM_REQUIRE_ALL=1` for every skip.
//!
//! Time limits of VM tests follow the host's load ([`limits`]: [`scaled`]),
//! so that a busy machine makes a test slower, never a failure.
//!
//! The crate is a dev-dependency of `ipivmm` (its CLI tests) and a
//! dependency of `ipivmm-tests` (the VM tests), with no dependency on
//! `ipivmm` itself, so both can share it without a feature of the library.
use std::io::Write;
use std::sync::{Mutex, Once};

pub mod images;
pub mod limits;
pub mod rng;
pub use limits::{scaled, scaled_secs, slowdown};

/// What a skipped test lacks; it decides which switch makes the skip fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A usable /dev/kvm (`IPIVMM_REQUIRE_KVM=1` fails the skip).
    Kvm,
    /// A hardware KVM, kvm_intel or kvm_amd (`IPIVMM_REQUIRE_HW_KVM=1`).
    HardwareKvm,
    /// Anything else: a tool (cargo, setpriv), root, a host feature
    /// (`IPIVMM_REQUIRE_ALL=1`).
    Setup,
}

impl Need {
    /// The switches that make a skip of this kind a failure.
    pub fn switches(self) -> &'static [&'static str] {
        match self {
            Need::Kvm => &[
                "IPIVMM_REQUIRE_KVM",
                "IPIVMM_REQUIRE_HW_KVM",
                "IPIVMM_REQUIRE_ALL",
            ],
            Need::HardwareKvm => &["IPIVMM_REQUIRE_HW_KVM", "IPIVMM_REQUIRE_ALL"],
            Need::Setup => &["IPIVMM_REQUIRE_ALL"],
        }
    }

    /// The switch named in messages (the narrowest one).
    pub fn switch(self) -> &'static str {
        self.switches()[0]
    }

    fn what(self) -> &'static str {
        match self {
            Need::Kvm => "need /dev/kvm",
            Need::HardwareKvm => "need a hardware KVM",
            Need::Setup => "need a tool or setup missing here",
        }
    }
}

/// Whether environment variable `name` is set to `1`.
pub fn switch_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// The switch that is on and makes a skip of `need` fail, if any.
pub fn required(need: Need) -> Option<&'static str> {
    need.switches().iter().copied().find(|s| switch_on(s))
}

static SKIPPED: Mutex<Vec<(String, Need)>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();

/// Reports that `test` skips because it lacks `need` (`why` says what is
/// missing and how to get it). Panics instead (failing the test) when a
/// switch of `need` is on. The caller returns from the test after this.
pub fn skip(test: &str, need: Need, why: &str) {
    if let Some(switch) = required(need) {
        panic!("{test}: {switch}=1 but {why}");
    }
    let line = format!(
        "SKIP {test}: {why} ({}=1 makes this a failure)\n",
        need.switch()
    );
    // One write of the whole line: not captured by libtest, and not torn
    // by other tests writing at the same time.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Ok(mut s) = SKIPPED.lock() {
        s.push((test.to_string(), need));
    }
    AT_EXIT.call_once(|| {
        // SAFETY: atexit(3) only records the pointer of a function with the
        // C ABI and no arguments; `summary` never unwinds (it catches
        // panics) and only takes a lock without blocking and writes stderr.
        unsafe {
            libc::atexit(summary);
        }
    });
}

/// The binary's name without cargo's hash suffix (`pingpong-0123abcd` →
/// `pingpong`).
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "this test binary".into());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

/// The summary line of `skips` in binary `name`, or None when nothing skipped.
pub fn summary_line(name: &str, skips: &[(String, Need)]) -> Option<String> {
    if skips.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    for need in [Need::Kvm, Need::HardwareKvm, Need::Setup] {
        let n = skips.iter().filter(|(_, k)| *k == need).count();
        if n > 0 {
            parts.push(format!(
                "{n} {} ({}=1 fails them)",
                need.what(),
                need.switch()
            ));
        }
    }
    let n = skips.len();
    let tests = if n == 1 { "test" } else { "tests" };
    Some(format!(
        "SKIPPED {n} {tests} of {name} (counted as passed above): {}\n",
        parts.join(", ")
    ))
}

extern "C" fn summary() {
    let _ = std::panic::catch_unwind(|| {
        let skips = match SKIPPED.try_lock() {
            Ok(s) => s.clone(),
            Err(_) => return,
        };
        if let Some(line) = summary_line(&binary_name(), &skips) {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    });
}

/// True when /dev/kvm can be opened for reading and writing; otherwise
/// reports the skip of `test` ([`skip`], [`Need::Kvm`]) and returns false.
pub fn kvm_available(test: &str) -> bool {
    kvm_openable(test, "this test needs KVM")
}

/// Like [`kvm_available`], with `why` saying what of the test needs KVM
/// (the skip line gives it after the reason /dev/kvm could not be opened).
/// Opening, not existing, is the test: as a user outside the kvm group
/// /dev/kvm exists but `ipivmm` cannot open it, so a check of
/// `Path::exists` would run the test and fail it.
pub fn kvm_openable(test: &str, why: &str) -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            skip(
                test,
                Need::Kvm,
                &format!("/dev/kvm cannot be opened ({e}); {why}"),
            );
            false
        }
    }
}

/// Whether this process runs as root (effective UID 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Cases per property test: `IPIVMM_PROPTEST_CASES`, else 256 (CI and the
/// docs' reliability commands set fewer or more).
pub fn proptest_cases() -> u32 {
    std::env::var("IPIVMM_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// The one configuration of every property test of the workspace:
/// [`proptest_cases`] cases, no failure-persistence files written into the
/// source tree (a failure prints its minimal input; rerun it from there).
pub fn proptest_config() -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: proptest_cases(),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// Runs the test binary `test` is in again as `nobody` (setpriv, no
/// groups), every test but `test`, no `IPIVMM_REQUIRE_*` switch: what a
/// user outside the kvm group sees. Asserts that it passes and that its
/// KVM tests said they skipped (a `SKIPPED ... need /dev/kvm` line).
/// Skips ([`Need::Setup`]) when this is not root, there is no
/// /usr/bin/setpriv, /dev/kvm is open to others (nothing would skip), or
/// nobody cannot execute the binary (a tree only its owner can read).
pub fn assert_kvm_tests_skip_as_nobody(test: &str) {
    use std::os::unix::fs::PermissionsExt;
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    let open_to_others =
        std::fs::metadata("/dev/kvm").is_ok_and(|m| m.permissions().mode() & 0o006 != 0);
    if !is_root() || !setpriv.exists() || open_to_others {
        skip(
            test,
            Need::Setup,
            "needs root, /usr/bin/setpriv and a /dev/kvm that others cannot open",
        );
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = std::process::Command::new(setpriv);
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe)
        .args(["--skip", test, "--test-threads=2"])
        .env("HOME", std::env::temp_dir());
    for v in Need::Kvm.switches() {
        cmd.env_remove(v);
    }
    let o = cmd.output().expect("setpriv runs");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    if out.is_empty() && err.contains("Permission denied") {
        // setpriv could not execute the binary: no test ran.
        skip(
            test,
            Need::Setup,
            &format!("nobody cannot run this test binary: {}", err.trim()),
        );
        return;
    }
    assert!(
        o.status.success(),
        "as nobody (no /dev/kvm access) a test failed instead of skipping:\n{out}\n{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.starts_with("SKIPPED ") && l.contains("need /dev/kvm")),
        "as nobody, no test said it skipped for /dev/kvm:\n{err}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_by_need() {
        assert_eq!(summary_line("x", &[]), None);
        let s = summary_line(
            "pingpong",
            &[
                ("a".into(), Need::Kvm),
                ("b".into(), Need::Kvm),
                ("c".into(), Need::Setup),
            ],
        )
        .unwrap();
        assert!(s.starts_with("SKIPPED 3 tests of pingpong"), "{s}");
        assert!(
            s.contains("2 need /dev/kvm (IPIVMM_REQUIRE_KVM=1 fails them)"),
            "{s}"
        );
        assert!(s.contains("1 need a tool"), "{s}");
        assert!(s.ends_with('\n') && s.lines().count() == 1, "{s}");
    }

    #[test]
    fn switches_nest() {
        assert!(Need::Kvm.switches().contains(&"IPIVMM_REQUIRE_HW_KVM"));
        assert!(!Need::HardwareKvm.switches().contains(&"IPIVMM_REQUIRE_KVM"));
        assert_eq!(Need::Setup.switch(), "IPIVMM_REQUIRE_ALL");
    }
}
