//! Builds the BPF exit counter (bpf/kvm_exits.bpf.c) with clang, when clang
//! can target BPF. Without it the crate still builds: `bpf::object()` is
//! None and says why, and ipivmm falls back to the exit sampler.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/kvm_exits.bpf.c";
    println!("cargo::rerun-if-changed={src}");
    println!("cargo::rerun-if-env-changed=CLANG");
    println!("cargo::rustc-check-cfg=cfg(ipivmm_bpf)");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("kvm_exits.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let result = Command::new(&clang)
        .args([
            "-target", "bpf", "-O2", "-g", "-Wall", "-Werror", "-c", src, "-o",
        ])
        .arg(&obj)
        .output();
    let why = match result {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "{clang} failed to build {src}: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
        )),
        Err(e) => Some(format!(
            "no {clang} at build time ({e}): install clang and rebuild"
        )),
    };
    match why {
        None => println!("cargo::rustc-cfg=ipivmm_bpf"),
        Some(why) => {
            println!("cargo::warning=BPF exit counter not built: {why}");
            println!("cargo::rustc-env=IPIVMM_BPF_NOT_BUILT={why}");
        }
    }
}
