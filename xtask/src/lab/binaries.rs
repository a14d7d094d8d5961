//! What the guest runs: ipivmm (release), the KVM test binaries (their
//! absolute paths kept, so tests that start target/release/ipivmm find it)
//! and the example payload. Not guest_floods: its hand-assembled flood
//! payloads meet the emulator's spurious #PF on the lab's kvm_amd (docs/lab.md,
//! "The lab's faults, explained"); the faults probe runs them.
use super::host::{cargo, output, run};
use anyhow::{bail, Context, Result};
use cargo_metadata::Message;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Test binaries left out of the guest (file names start with these).
const LEFT_OUT: &[&str] = &["guest_floods-"];

/// The binaries the guest gets.
pub struct Binaries {
    /// target/release/ipivmm.
    pub ipivmm: PathBuf,
    /// Every KVM test binary (`target/release/deps/NAME-HASH`).
    pub tests: Vec<PathBuf>,
    /// The example payload (examples/exit-roundtrip).
    pub example: PathBuf,
}

/// A test binary's name without cargo's hash (`pingpong-0123456789abcdef`
/// is `pingpong`).
pub fn test_name(binary: &Path) -> String {
    let n = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match n.rsplit_once('-') {
        Some((stem, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            stem.to_string()
        }
        _ => n,
    }
}

/// Builds everything the guest runs: ipivmm, the example payload and,
/// with `with_tests`, the KVM test binaries (a boot whose steps run none
/// carries none: 81 MB less for the emulator to load and unpack).
pub fn build(root: &Path, with_tests: bool) -> Result<Binaries> {
    run(cargo()
        .args(["build", "--release", "-q", "-p", "ipivmm-cli"])
        .current_dir(root))?;
    let mut tests = Vec::new();
    let suites: &[&[&str]] = if with_tests {
        &[
            &["-p", "ipivmm-tests", "--tests"],
            &["-p", "ipivmm-cli", "--test", "ctrl_c"],
        ]
    } else {
        &[]
    };
    for &args in suites {
        let json = output(
            cargo()
                .args([
                    "test",
                    "--release",
                    "-q",
                    "--no-run",
                    "--message-format=json",
                ])
                .args(args)
                .current_dir(root),
        )?;
        tests.extend(test_executables(&json)?);
    }
    if with_tests && tests.is_empty() {
        bail!("cargo test --no-run listed no test binary");
    }
    let example_dir = root.join("examples/exit-roundtrip");
    let offline = cargo()
        .args(["build", "--release", "-q", "--offline"])
        .current_dir(&example_dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !offline {
        run(cargo()
            .args(["build", "--release", "-q"])
            .current_dir(&example_dir))?;
    }
    Ok(Binaries {
        ipivmm: root.join("target/release/ipivmm"),
        tests,
        example: example_dir.join("target/x86_64-unknown-linux-gnu/release/exit-roundtrip"),
    })
}

/// The test executables in cargo's JSON messages, the left-out ones dropped.
fn test_executables(json: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for m in Message::parse_stream(json.as_bytes()) {
        if let Message::CompilerArtifact(a) = m.context("cargo's JSON messages")? {
            let Some(exe) = a.executable.filter(|_| a.profile.test) else {
                continue;
            };
            let exe = exe.into_std_path_buf();
            let name = exe
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !LEFT_OUT.iter().any(|p| name.starts_with(p)) {
                out.push(exe);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_the_hash_only() {
        assert_eq!(
            test_name(Path::new("/t/deps/guest_faults-0123456789abcdef")),
            "guest_faults"
        );
        assert_eq!(test_name(Path::new("/t/deps/ctrl_c-xyz")), "ctrl_c-xyz");
        assert_eq!(test_name(Path::new("/t/ipivmm")), "ipivmm");
    }

    #[test]
    fn executables_of_test_artifacts_only() {
        let msg = |name: &str, test: bool, exe: Option<&str>| {
            serde_json::json!({
                "reason": "compiler-artifact",
                "package_id": "path+file:///x#0.1.0",
                "manifest_path": "/x/Cargo.toml",
                "target": {"name": name, "kind": ["test"], "crate_types": ["bin"],
                           "src_path": "/x/t.rs", "edition": "2021", "doctest": false, "test": true},
                "profile": {"opt_level": "3", "debuginfo": 0, "debug_assertions": false,
                            "overflow_checks": false, "test": test},
                "features": [], "filenames": [], "executable": exe, "fresh": true
            })
            .to_string()
        };
        let json = [
            msg("pingpong", true, Some("/t/deps/pingpong-0123456789abcdef")),
            msg(
                "guest_floods",
                true,
                Some("/t/deps/guest_floods-0123456789abcdef"),
            ),
            msg("lib", false, None),
            msg("ipivmm", false, Some("/t/ipivmm")),
        ]
        .join("\n");
        let exes = test_executables(&json).unwrap();
        assert_eq!(exes, [PathBuf::from("/t/deps/pingpong-0123456789abcdef")]);
    }
}
