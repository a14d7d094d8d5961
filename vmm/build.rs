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

/// The variables removed from the nested build, shared with the library's
/// `ipivmm::payload::scrub` (std only, so it compiles here too).
#[path = "src/payload/scrub.rs"]
#[allow(dead_code)]
mod scrub;

/// The nested build of a guest-workspace binary, shared with tests/build.rs.
#[path = "src/payload/guest_build.rs"]
mod guest_build;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("vmm/ has a parent")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    guest_build::rerun_if_guest_changed(&root, "guest-payload/payload");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/payload/scrub.rs");
    println!("cargo:rerun-if-changed=src/payload/guest_build.rs");
    write_sdk_sources(&root, &out_dir);
    guest_build::build_guest_bin(&root, "ipivmm-payload", &out_dir, "ipivmm-payload.elf");
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
