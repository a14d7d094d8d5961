//! Passes the linker script by absolute path, and stops a build that lacks
//! the freestanding flags of .cargo/config.toml (cargo reads that file from
//! the current directory, so `cargo build --manifest-path .../Cargo.toml`
//! from elsewhere would silently build an SSE-using, libc-linked program).
use std::env;

fn main() {
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rustc-link-arg-bins=-T{dir}/link.ld");
    println!("cargo:rerun-if-changed=link.ld");
    println!("cargo:rerun-if-changed=build.rs");

    // Only the host target needs the flags; x86_64-unknown-none is
    // soft-float and SSE-free by itself.
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if target == "x86_64-unknown-linux-gnu" && !flags.contains("+soft-float") {
        let name = env::var("CARGO_PKG_NAME").unwrap_or_default();
        panic!(
            "{name}: built without the flags of {dir}/.cargo/config.toml \
             (no `+soft-float` in RUSTFLAGS). Cargo reads that file from the current \
             directory: build with `cd {dir} && cargo build --release`."
        );
    }
}
