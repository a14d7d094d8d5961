//! Builds the built-in guest payload (guest-payload/, a separate workspace)
//! with a nested `cargo build --release` and leaves the ELF at
//! `$OUT_DIR/ipivmm-payload.elf` for `src/payload.rs` to embed.
//!
//! The payload is freestanding and takes its flags (no SSE, static, linker
//! script) from guest-payload/.cargo/config.toml, which cargo only reads when
//! run from that directory; anything of the outer build that would override
//! them (RUSTFLAGS, wrappers, target dir, profile and target settings) is
//! removed from the nested environment.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variables removed from the nested build, shared with the library's
/// `ipivmm::payload::scrub` (std only, so it compiles here too).
#[path = "src/payload/scrub.rs"]
#[allow(dead_code)]
mod scrub;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("vmm/ has a parent")
        .to_path_buf();
    let guest = root.join("guest-payload");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = out_dir.join("guest-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    rerun_if_changed(&root);

    let mut cmd = Command::new(cargo);
    cmd.current_dir(&guest)
        .args([
            "build",
            "--release",
            "--locked",
            "--offline",
            "-p",
            "ipivmm-payload",
        ])
        .arg("--manifest-path")
        .arg(guest.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    scrub::scrub_env(&mut cmd);

    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!("ipivmm build.rs: cannot run cargo to build the guest payload: {e}"),
    };
    if !output.status.success() {
        panic!(
            "ipivmm build.rs: building the guest payload (guest-payload/, `cargo build --release` \
             with guest-payload/.cargo/config.toml) failed with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    let elf = target_dir.join("x86_64-unknown-linux-gnu/release/ipivmm-payload");
    let dest = out_dir.join("ipivmm-payload.elf");
    if let Err(e) = std::fs::copy(&elf, &dest) {
        panic!(
            "ipivmm build.rs: cannot copy {} to {}: {e}",
            elf.display(),
            dest.display()
        );
    }
}

/// Rebuild when the payload, its SDK, its flags or the ABI change. Listed
/// one by one so that guest-payload/target (a by-hand build) does not count.
fn rerun_if_changed(root: &Path) {
    for p in [
        "guest-payload/Cargo.toml",
        "guest-payload/Cargo.lock",
        "guest-payload/.cargo/config.toml",
        "guest-payload/sdk/Cargo.toml",
        "guest-payload/sdk/src",
        "guest-payload/payload/Cargo.toml",
        "guest-payload/payload/build.rs",
        "guest-payload/payload/link.ld",
        "guest-payload/payload/src",
        "abi/Cargo.toml",
        "abi/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/payload/scrub.rs");
}
