//! The C guest tool's view of the control-message ABI
//! (guest-linux/ipivmm-abi.h) is the one `ipivmm_abi::c_header` generates
//! from the Rust definitions, and a C compiler lays it out as Rust does
//! (the header's `_Static_assert`s, one per field offset and struct size).
use ipivmm_testkit::{skip, Need};
use std::path::{Path, PathBuf};
use std::process::Command;

fn generated() -> String {
    let mut s = String::new();
    ipivmm_abi::c_header::write(&mut s).expect("the header renders");
    s
}

fn committed_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(ipivmm_abi::c_header::PATH)
}

#[test]
fn the_committed_header_is_the_generated_one() {
    let path = committed_path();
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let fresh = generated();
    if committed != fresh {
        let (line, (old, new)) = committed
            .lines()
            .chain(std::iter::repeat(""))
            .zip(fresh.lines().chain(std::iter::repeat("")))
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .expect("the texts differ in some line");
        panic!(
            "{} is not what abi/src generates (line {}: committed `{old}`, generated `{new}`): \
             run `cargo xtask abi-header` and commit it",
            ipivmm_abi::c_header::PATH,
            line + 1
        );
    }
}

#[test]
fn a_c_compiler_lays_the_header_out_as_rust_does() {
    const TEST: &str = "a_c_compiler_lays_the_header_out_as_rust_does";
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        skip(
            TEST,
            Need::Setup,
            &format!("no C compiler `{cc}` (apt-get install gcc)"),
        );
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-header");
    std::fs::create_dir_all(&dir).unwrap();
    let compile = |header: &str| {
        std::fs::write(dir.join("ipivmm-abi.h"), header).unwrap();
        Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"])
            .arg(dir.join("check.c"))
            .output()
            .expect("cc runs")
    };
    std::fs::write(
        dir.join("check.c"),
        "#include \"ipivmm-abi.h\"\n\
         struct ipivmm_control_msg msg = { .magic = IPIVMM_CONTROL_MAGIC, .kind = IPIVMM_MSG_HELLO };\n",
    )
    .unwrap();
    let header = generated();
    let out = compile(&header);
    assert!(
        out.status.success(),
        "{cc} refuses the generated header:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The assertions hold the layout: two fields swapped is a compile error.
    let swapped = header.replacen(
        "\tuint16_t version;\n\tuint16_t kind;",
        "\tuint16_t kind;\n\tuint16_t version;",
        1,
    );
    assert_ne!(swapped, header, "the header declares version then kind");
    let out = compile(&swapped);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("ipivmm_control_msg.version at 4"),
        "{cc} accepts a header whose layout is not Rust's:\n{err}"
    );
}
