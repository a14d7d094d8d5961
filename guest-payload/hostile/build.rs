//! Links with the built-in payload's linker script (by absolute path:
//! rustc's working directory is not ours to rely on).
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-link-arg-bins=-T{dir}/../payload/link.ld");
    println!("cargo:rerun-if-changed=../payload/link.ld");
    println!("cargo:rerun-if-changed=build.rs");
}
