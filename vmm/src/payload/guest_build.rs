//! Building one binary of the guest-payload workspace (`guest-payload/`)
//! from a build script: a nested `cargo build --release --locked --offline`
//! run from that directory, so that cargo reads the freestanding flags of
//! `guest-payload/.cargo/config.toml` (no SSE, static, no libc), with the
//! outer build's settings removed from its environment ([`crate::scrub`]).
//!
//! `std` only, and not a module of the library: `vmm/build.rs` (the built-in
//! payload) and `tests/build.rs` (the hostile test payload) include this file
//! with `#[path]`, next to `scrub.rs` as `mod scrub`. Build scripts report
//! by panicking, so these functions panic with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Sources of the guest workspace every binary depends on (workspace
/// manifest and lock, flags, the SDK, the ABI), relative to the repository
/// root.
const SHARED_INPUTS: &[&str] = &[
    "guest-payload/Cargo.toml",
    "guest-payload/Cargo.lock",
    "guest-payload/.cargo/config.toml",
    "guest-payload/payload/link.ld",
    "guest-payload/sdk/Cargo.toml",
    "guest-payload/sdk/src",
    "abi/Cargo.toml",
    "abi/src",
];

/// Prints `cargo:rerun-if-changed` for the shared guest inputs and for
/// `crate_dir` (e.g. `guest-payload/payload`: its manifest, build script and
/// sources). Listed one by one so that `guest-payload/target` (a by-hand
/// build) does not count.
pub fn rerun_if_guest_changed(root: &Path, crate_dir: &str) {
    for p in SHARED_INPUTS {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    for p in ["Cargo.toml", "build.rs", "src"] {
        let path = root.join(crate_dir).join(p);
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Builds binary `package` (a package of the guest workspace whose binary
/// has the same name) into `out_dir/guest-target` and copies the ELF to
/// `out_dir/<dest_name>`, which it returns.
pub fn build_guest_bin(root: &Path, package: &str, out_dir: &Path, dest_name: &str) -> PathBuf {
    let guest = root.join("guest-payload");
    let target_dir = out_dir.join("guest-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&guest)
        .args(["build", "--release", "--locked", "--offline", "-p", package])
        .arg("--manifest-path")
        .arg(guest.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    crate::scrub::scrub_env(&mut cmd);
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!("build.rs: cannot run cargo to build the guest binary {package}: {e}"),
    };
    if !output.status.success() {
        panic!(
            "build.rs: building {package} (guest-payload/, `cargo build --release` with \
             guest-payload/.cargo/config.toml) failed with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let elf = target_dir
        .join("x86_64-unknown-linux-gnu/release")
        .join(package);
    let dest = out_dir.join(dest_name);
    if let Err(e) = std::fs::copy(&elf, &dest) {
        panic!(
            "build.rs: cannot copy {} to {}: {e}",
            elf.display(),
            dest.display()
        );
    }
    dest
}
