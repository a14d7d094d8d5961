//! Build a guest payload crate from source, the way `vmm/build.rs` builds
//! the built-in one: a nested `cargo build` run *from the crate's directory*
//! (cargo reads the payload's freestanding flags from `.cargo/config.toml`
//! relative to the current directory), with the calling process's cargo and
//! rustc settings removed from its environment so they cannot override those
//! flags.
//!
//! ```no_run
//! use ipivmm::payload::build::PayloadBuild;
//!
//! # fn main() -> Result<(), ipivmm::payload::CrateError> {
//! let elf = PayloadBuild::new("examples/exit-roundtrip")
//!     .target_dir("/tmp/exit-roundtrip-target")
//!     .offline(true)
//!     .build()?;
//! println!("built {}", elf.display());
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::process::Command;

use super::scrub::scrub_env;
use super::CrateError;

/// A nested `cargo build` of one payload crate; [`PayloadBuild::build`]
/// returns the path of the ELF.
///
/// The crate must carry its own freestanding flags in `.cargo/config.toml`
/// with an explicit `build.target` (copy `examples/exit-roundtrip`; see
/// `docs/custom-payloads.md`).
#[derive(Clone, Debug)]
pub struct PayloadBuild {
    dir: PathBuf,
    cargo: PathBuf,
    target_dir: Option<PathBuf>,
    bin: Option<String>,
    release: bool,
    offline: bool,
    locked: bool,
}

impl PayloadBuild {
    /// A release build of the crate in `dir` (the directory holding its
    /// `Cargo.toml`), with the cargo of `$CARGO` (set when running under
    /// cargo) or `cargo` from `PATH`, into the crate's own `target/`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            cargo: std::env::var_os("CARGO")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("cargo")),
            target_dir: None,
            bin: None,
            release: true,
            offline: false,
            locked: false,
        }
    }

    /// Build into `dir` (`--target-dir`) instead of the crate's `target/`.
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Build only the binary `name` (`--bin`); needed when the crate has
    /// several.
    pub fn bin(mut self, name: impl Into<String>) -> Self {
        self.bin = Some(name.into());
        self
    }

    /// `--release` (the default) or the dev profile.
    pub fn release(mut self, release: bool) -> Self {
        self.release = release;
        self
    }

    /// `--offline`: no network (every dependency vendored or a path).
    pub fn offline(mut self, offline: bool) -> Self {
        self.offline = offline;
        self
    }

    /// `--locked`: fail instead of updating `Cargo.lock`.
    pub fn locked(mut self, locked: bool) -> Self {
        self.locked = locked;
        self
    }

    /// Use this cargo program.
    pub fn cargo(mut self, cargo: impl Into<PathBuf>) -> Self {
        self.cargo = cargo.into();
        self
    }

    /// The command [`PayloadBuild::build`] runs: cargo in the crate's
    /// directory, JSON messages on stdout, diagnostics rendered on stderr,
    /// and the scrubbed environment.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.current_dir(&self.dir)
            .arg("build")
            .arg("--message-format=json-render-diagnostics")
            .arg("--manifest-path")
            .arg(self.dir.join("Cargo.toml"));
        if self.release {
            cmd.arg("--release");
        }
        if self.offline {
            cmd.arg("--offline");
        }
        if self.locked {
            cmd.arg("--locked");
        }
        if let Some(bin) = &self.bin {
            cmd.arg("--bin").arg(bin);
        }
        if let Some(dir) = &self.target_dir {
            cmd.arg("--target-dir").arg(dir);
        }
        scrub_env(&mut cmd);
        cmd
    }

    /// Runs the build and returns the path of the payload ELF (as cargo
    /// reported it).
    pub fn build(&self) -> Result<PathBuf, CrateError> {
        if !self.dir.join("Cargo.toml").is_file() {
            return Err(CrateError::NoManifest(self.dir.clone()));
        }
        let output = self.command().output().map_err(|error| CrateError::Spawn {
            cargo: self.cargo.clone(),
            error,
        })?;
        if !output.status.success() {
            return Err(CrateError::Failed {
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        let mut executables = executables(&output.stdout);
        executables.dedup();
        match executables.len() {
            0 => Err(CrateError::NoExecutable {
                dir: self.dir.clone(),
                bin: self.bin.clone(),
            }),
            1 => Ok(executables.remove(0)),
            _ => Err(CrateError::Ambiguous(executables)),
        }
    }
}

/// The executables cargo's JSON messages (`--message-format=json`) report
/// as built, in order (cargo_metadata reads the messages).
fn executables(stdout: &[u8]) -> Vec<PathBuf> {
    cargo_metadata::Message::parse_stream(stdout)
        .filter_map(Result::ok)
        .filter_map(|m| match m {
            cargo_metadata::Message::CompilerArtifact(a) => a.executable.map(PathBuf::from),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::scrub::is_scrubbed;
    use super::*;
    use std::path::Path;

    #[test]
    fn scrubbing_keeps_cargo_home_and_drops_flags() {
        for k in [
            "RUSTFLAGS",
            "RUSTC_WRAPPER",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_TARGET",
            "CARGO_PROFILE_RELEASE_LTO",
            "CARGO_MANIFEST_DIR",
            "OUT_DIR",
        ] {
            assert!(is_scrubbed(k), "{k}");
        }
        for k in [
            "CARGO_HOME",
            "CARGO_NET_OFFLINE",
            "CARGO_TERM_COLOR",
            "PATH",
            "HOME",
            "CARGO",
        ] {
            assert!(!is_scrubbed(k), "{k}");
        }
    }

    #[test]
    fn executables_are_read_from_artifact_messages_only() {
        let artifact = |exe: &str| {
            format!(
                r#"{{"reason":"compiler-artifact","package_id":"p 0.1.0 (path+file:///p)","manifest_path":"/p/Cargo.toml","target":{{"kind":["bin"],"crate_types":["bin"],"name":"p","src_path":"/p/src/main.rs","edition":"2021","doc":true,"doctest":false,"test":true}},"profile":{{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false}},"features":[],"filenames":["{exe}"],"executable":{},"fresh":false}}"#,
                if exe.is_empty() {
                    "null".to_string()
                } else {
                    format!("\"{exe}\"")
                }
            )
        };
        let out = format!("{}\n{}\n", artifact(""), artifact("/t/p\\u00e9"));
        assert_eq!(
            executables(out.as_bytes()),
            vec![PathBuf::from("/t/p\u{e9}")]
        );
    }

    #[test]
    fn command_runs_in_the_crate_dir_with_the_options() {
        let b = PayloadBuild::new("/src/p")
            .target_dir("/t")
            .bin("p")
            .offline(true)
            .locked(true)
            .cargo("/bin/cargo");
        let cmd = b.command();
        assert_eq!(cmd.get_program(), "/bin/cargo");
        assert_eq!(cmd.get_current_dir(), Some(Path::new("/src/p")));
        let args: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for a in [
            "build",
            "--release",
            "--offline",
            "--locked",
            "--bin",
            "p",
            "--target-dir",
            "/t",
        ] {
            assert!(args.iter().any(|x| x == a), "{a} missing from {args:?}");
        }
        let dev = PayloadBuild::new("/src/p").release(false).command();
        assert!(!dev.get_args().any(|a| a == "--release"));
    }

    #[test]
    fn a_directory_without_manifest_is_refused() {
        let e = PayloadBuild::new("/nonexistent/payload").build();
        assert!(matches!(e, Err(CrateError::NoManifest(_))), "{e:?}");
    }
}
