//! The built-in guest payload.
//!
//! `build.rs` compiles `guest-payload/` (the `ipivmm-guest` SDK and the
//! `ipivmm-payload` workloads) as a freestanding, SSE-free static ELF linked
//! at [`ipivmm_abi::PAYLOAD_START`], and it is embedded here. It runs the
//! workload named by `BootInfo::workload`; see `docs/payload-sdk.md`.

pub mod build;
pub mod image;
pub mod scrub;
pub mod template;

use std::path::PathBuf;

/// Why a payload crate could not be written ([`template::write`]) or built
/// ([`build::PayloadBuild::build`]). One line, naming the fix.
#[derive(Debug, thiserror::Error)]
pub enum CrateError {
    /// A name cargo would refuse or that collides with the SDK's crates.
    #[error("payload name '{name}' {problem}")]
    BadName {
        /// The name.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The directory exists and holds files.
    #[error("{0} exists and is not empty: choose a new directory (new-payload never overwrites)")]
    NotEmpty(PathBuf),
    /// Writing failed.
    #[error("cannot write {path}: {error}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The crate directory has no `Cargo.toml`.
    #[error("{} has no Cargo.toml: pass the directory of a payload crate", .0.display())]
    NoManifest(PathBuf),
    /// cargo could not be started.
    #[error("cannot run {} to build the payload: {error}; install Rust (rustup) or set CARGO", .cargo.display())]
    Spawn {
        /// The cargo program.
        cargo: PathBuf,
        /// The OS error.
        #[source]
        error: std::io::Error,
    },
    /// cargo ran and failed.
    #[error("building the payload failed ({status}):\n{stderr}")]
    Failed {
        /// cargo's exit status.
        status: std::process::ExitStatus,
        /// cargo's error output (compiler diagnostics).
        stderr: String,
    },
    /// cargo succeeded but reported no executable.
    #[error("cargo built no executable in {}{}: the payload must be a [[bin]] target", .dir.display(), .bin.as_ref().map(|b| format!(" named {b}")).unwrap_or_default())]
    NoExecutable {
        /// The crate directory.
        dir: PathBuf,
        /// The `--bin` asked for, if any.
        bin: Option<String>,
    },
    /// cargo reported several executables and no `--bin` chose one.
    #[error("the payload crate has {} executables ({}): choose one with PayloadBuild::bin", .0.len(), .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Ambiguous(Vec<PathBuf>),
}

/// The built-in payload ELF image ([`crate::PayloadSource::BUILTIN_ELF`]).
pub(crate) const BUILTIN_PAYLOAD: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/ipivmm-payload.elf"));
