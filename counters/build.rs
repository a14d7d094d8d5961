//! Embeds the BPF exit counter shipped in the tree (bpf/kvm_exits.bpf.o),
//! so a build needs no clang and every build counts exits the same way.
//! The record beside it (bpf/kvm_exits.bpf.o.sum) says which source it was
//! built from: a source that changed since is rebuilt with clang (and the
//! build says to update the shipped object with scripts/build-bpf.sh), or,
//! without clang, the build fails naming the fix: it never falls back
//! silently to another mechanism.
use std::path::PathBuf;
use std::process::Command;

#[path = "src/bpf/shipped.rs"]
mod shipped;

fn main() {
    for f in [shipped::SOURCE, shipped::OBJECT, shipped::RECORD] {
        println!("cargo::rerun-if-changed={f}");
    }
    println!("cargo::rerun-if-env-changed=CLANG");
    let record = std::fs::read_to_string(shipped::RECORD)
        .map_err(|e| format!("{}: {e}", shipped::RECORD))
        .and_then(|t| shipped::Record::parse(&t))
        .unwrap_or_else(|e| panic!("{e}: restore it from git or run scripts/build-bpf.sh"));
    let source =
        std::fs::read(shipped::SOURCE).unwrap_or_else(|e| panic!("{}: {e}", shipped::SOURCE));
    let object = if record.matches(&source) {
        PathBuf::from(shipped::OBJECT)
            .canonicalize()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}: restore it from git or run scripts/build-bpf.sh",
                    shipped::OBJECT
                )
            })
    } else {
        rebuild(&record)
    };
    println!("cargo::rustc-env=IPIVMM_BPF_OBJECT={}", object.display());
}

/// The source changed since the shipped object was built: build it again
/// with the recorded flags, or fail naming the fix.
fn rebuild(record: &shipped::Record) -> PathBuf {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("kvm_exits.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let result = Command::new(&clang)
        .args(&record.flags)
        .args(["-c", shipped::SOURCE, "-o"])
        .arg(&obj)
        .output();
    match result {
        Ok(o) if o.status.success() => {
            println!(
                "cargo::warning={} changed since {} was built: using a fresh build; run scripts/build-bpf.sh to update the shipped object",
                shipped::SOURCE,
                shipped::OBJECT
            );
            obj
        }
        Ok(o) => panic!(
            "{clang} failed to build {}: {}",
            shipped::SOURCE,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "{} changed since {} was built and there is no {clang} to rebuild it ({e}): install clang (Debian: clang) and run scripts/build-bpf.sh, or restore the source",
            shipped::SOURCE,
            shipped::OBJECT
        ),
    }
}
