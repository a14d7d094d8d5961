//! The shipped BPF object against its source: the record must name the
//! source as it is, and where the recorded compiler is installed, building
//! the source again must give the shipped bytes.

use super::shipped::{Record, OBJECT, RECORD, SOURCE};
use ipivmm_testkit::{skip, Need};
use std::path::Path;
use std::process::Command;

fn crate_file(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn record() -> Record {
    let text = std::fs::read_to_string(crate_file(RECORD)).expect("the record is in the tree");
    Record::parse(&text).expect("the record parses")
}

#[test]
fn the_record_names_the_source_as_it_is() {
    let source = std::fs::read(crate_file(SOURCE)).expect("the source is in the tree");
    let r = record();
    assert!(
        r.matches(&source),
        "{SOURCE} changed since {OBJECT} was built (recorded CRC-32 {:08x}, now {:08x}): run scripts/build-bpf.sh and commit both files",
        r.source_crc32,
        crc32fast::hash(&source)
    );
    assert!(r.flags.iter().any(|f| f == "bpf"), "{:?}", r.flags);
}

#[test]
fn the_embedded_object_is_the_shipped_one() {
    let shipped = std::fs::read(crate_file(OBJECT)).expect("the object is in the tree");
    assert_eq!(super::object().expect("always built"), &shipped[..]);
}

#[test]
fn the_same_compiler_builds_the_shipped_bytes() {
    let test = "bpf::shipped_tests::the_same_compiler_builds_the_shipped_bytes";
    let r = record();
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let version = Command::new(&clang)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        });
    match version {
        None => return skip(test, Need::Setup, &format!("no {clang} to rebuild {SOURCE}")),
        Some(v) if v.trim() != r.compiler => {
            return skip(
                test,
                Need::Setup,
                &format!("{clang} is `{v}`, the object was built with `{}`: another compiler builds other bytes", r.compiler),
            )
        }
        Some(_) => {}
    }
    let out = std::env::temp_dir().join(format!("ipivmm-bpf-rebuild-{}.o", std::process::id()));
    let built = Command::new(&clang)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(&r.flags)
        .args(["-c", SOURCE, "-o"])
        .arg(&out)
        .output()
        .expect("clang runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let rebuilt = std::fs::read(&out).expect("clang wrote the object");
    let _ = std::fs::remove_file(&out);
    let shipped = std::fs::read(crate_file(OBJECT)).expect("the object is in the tree");
    assert!(
        rebuilt == shipped,
        "{OBJECT} is not what {SOURCE} builds with these flags: run scripts/build-bpf.sh"
    );
}
