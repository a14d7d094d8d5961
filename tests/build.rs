//! Builds the hostile test payload (`guest-payload/hostile`, the
//! `ipivmm-hostile` binary of the guest workspace) the way vmm/build.rs
//! builds the built-in one, and leaves it at `$OUT_DIR/ipivmm-hostile.elf`
//! for `src/lib.rs` to embed: the test binaries carry it, so they run where
//! there is no cargo (the lab's guest).

use std::env;
use std::path::PathBuf;

/// What a nested payload build must not inherit (the library's).
#[path = "../vmm/src/payload/scrub.rs"]
#[allow(dead_code)]
mod scrub;

/// The nested build of a guest-workspace binary, shared with vmm/build.rs.
#[path = "../vmm/src/payload/guest_build.rs"]
mod guest_build;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    guest_build::rerun_if_guest_changed(&root, "guest-payload/hostile");
    println!("cargo:rerun-if-changed=build.rs");
    for f in ["scrub.rs", "guest_build.rs"] {
        let path = root.join("vmm/src/payload").join(f);
        println!("cargo:rerun-if-changed={}", path.display());
    }
    guest_build::build_guest_bin(&root, "ipivmm-hostile", &out_dir, "ipivmm-hostile.elf");
}
