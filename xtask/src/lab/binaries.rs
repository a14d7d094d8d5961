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
///
/// All of it comes from one build, the one the README's test command and CI
/// make (`cargo test --workspace --release --no-run`): a `cargo build -p
/// ipivmm-cli` or `cargo test -p ipivmm-tests` resolves other features for
/// the shared dependencies and recompiled the engine crates, 110 s of CI's
/// quick pass (docs/lab.md, "In CI").
pub fn build(root: &Path, with_tests: bool) -> Result<Binaries> {
    let json = output(
        cargo()
            .args([
                "test",
                "--workspace",
                "--release",
                "-q",
                "--no-run",
                "--message-format=json",
            ])
            .current_dir(root),
    )?;
    let built = artifacts(&json, root)?;
    let ipivmm = built
        .ipivmm
        .context("cargo test --workspace --no-run built no ipivmm binary")?;
    let tests = if with_tests { built.tests } else { Vec::new() };
    if with_tests && tests.is_empty() {
        bail!("cargo test --workspace --no-run listed no guest test binary");
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
        ipivmm,
        tests,
        example: example_dir.join("target/x86_64-unknown-linux-gnu/release/exit-roundtrip"),
    })
}

/// What the guest takes from the workspace's test build.
#[derive(Debug, Default)]
struct Built {
    /// The `ipivmm` binary (ipivmm-cli's bin target).
    ipivmm: Option<PathBuf>,
    /// The KVM test binaries: every test of the `tests` package, and the
    /// CLI's `ctrl_c` (signals to a running VM), left-out ones dropped.
    tests: Vec<PathBuf>,
}

/// Picks the guest's binaries out of cargo's JSON messages.
fn artifacts(json: &str, root: &Path) -> Result<Built> {
    let tests_manifest = root.join("tests/Cargo.toml");
    let cli_manifest = root.join("cli/Cargo.toml");
    let mut out = Built::default();
    for m in Message::parse_stream(json.as_bytes()) {
        let Message::CompilerArtifact(a) = m.context("cargo's JSON messages")? else {
            continue;
        };
        let Some(exe) = a.executable else { continue };
        let exe = exe.into_std_path_buf();
        let manifest = a.manifest_path.as_std_path();
        if !a.profile.test {
            if manifest == cli_manifest && a.target.name == "ipivmm" {
                out.ipivmm = Some(exe);
            }
            continue;
        }
        let wanted =
            manifest == tests_manifest || (manifest == cli_manifest && a.target.name == "ctrl_c");
        let name = exe
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if wanted && !LEFT_OUT.iter().any(|p| name.starts_with(p)) {
            out.tests.push(exe);
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
    fn the_guest_takes_ipivmm_and_the_kvm_tests_only() {
        let msg = |manifest: &str, name: &str, kind: &str, test: bool, exe: Option<&str>| {
            serde_json::json!({
                "reason": "compiler-artifact",
                "package_id": "path+file:///x#0.1.0",
                "manifest_path": manifest,
                "target": {"name": name, "kind": [kind], "crate_types": ["bin"],
                           "src_path": "/x/t.rs", "edition": "2021", "doctest": false, "test": true},
                "profile": {"opt_level": "3", "debuginfo": 0, "debug_assertions": false,
                            "overflow_checks": false, "test": test},
                "features": [], "filenames": [], "executable": exe, "fresh": true
            })
            .to_string()
        };
        let (tests, cli) = ("/x/tests/Cargo.toml", "/x/cli/Cargo.toml");
        let json = [
            msg(
                tests,
                "pingpong",
                "test",
                true,
                Some("/t/deps/pingpong-0123456789abcdef"),
            ),
            msg(
                tests,
                "guest_floods",
                "test",
                true,
                Some("/t/deps/guest_floods-0123456789abcdef"),
            ),
            msg(tests, "lib", "lib", false, None),
            msg(cli, "ipivmm", "bin", false, Some("/t/ipivmm")),
            msg(
                cli,
                "ctrl_c",
                "test",
                true,
                Some("/t/deps/ctrl_c-0123456789abcdef"),
            ),
            msg(
                cli,
                "docs",
                "test",
                true,
                Some("/t/deps/docs-0123456789abcdef"),
            ),
            msg(
                "/x/analysis/Cargo.toml",
                "ipivmm_analysis",
                "lib",
                true,
                Some("/t/deps/ipivmm_analysis-0123456789abcdef"),
            ),
        ]
        .join("\n");
        let built = artifacts(&json, Path::new("/x")).unwrap();
        assert_eq!(built.ipivmm, Some(PathBuf::from("/t/ipivmm")));
        assert_eq!(
            built.tests,
            [
                PathBuf::from("/t/deps/pingpong-0123456789abcdef"),
                PathBuf::from("/t/deps/ctrl_c-0123456789abcdef"),
            ]
        );
    }
}
