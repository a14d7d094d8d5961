//! Builds the built-in guest payload (guest-payload/, a separate workspace)
//! with a nested `cargo build --release` and leaves the ELF at
//! `$OUT_DIR/ipivmm-payload.elf` for `src/payload.rs` to embed; lists the
//! SDK and ABI sources in `$OUT_DIR/sdk_sources.rs` for
//! `src/payload/template.rs` to embed (`ipivmm new-payload` copies them).
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
    write_sdk_sources(&root, &out_dir);

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

/// Writes `$OUT_DIR/sdk_sources.rs`: every source file of the SDK
/// (`guest-payload/sdk/src`) and of the ABI (`abi/src`) as
/// `(path in the new crate's ipivmm-sdk/, include_str!(absolute path))`.
fn write_sdk_sources(root: &Path, out_dir: &Path) {
    let mut entries = Vec::new();
    for (src, dest) in [
        ("guest-payload/sdk/src", "guest/src"),
        ("abi/src", "abi/src"),
    ] {
        collect_rs(&root.join(src), dest, &mut entries);
    }
    entries.sort();
    let mut code = String::from("/// The SDK and ABI sources: (path under ipivmm-sdk/, text).\npub const SDK_SOURCES: &[(&str, &str)] = &[\n");
    for (dest, abs) in &entries {
        code.push_str(&format!("    ({dest:?}, include_str!({abs:?})),\n"));
    }
    code.push_str("];\n");
    let path = out_dir.join("sdk_sources.rs");
    if let Err(e) = std::fs::write(&path, code) {
        panic!("ipivmm build.rs: cannot write {}: {e}", path.display());
    }
}

fn collect_rs(dir: &Path, dest: &str, out: &mut Vec<(String, String)>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => panic!("ipivmm build.rs: cannot list {}: {e}", dir.display()),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            collect_rs(&path, &format!("{dest}/{name}"), out);
        } else if name.ends_with(".rs") {
            out.push((format!("{dest}/{name}"), path.display().to_string()));
        }
    }
}
