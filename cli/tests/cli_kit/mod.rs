//! What the tests that drive the `ipivmm` binary share: running it, a
//! fresh temporary directory, a plan file written there.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `ipivmm ARGS` with stdin closed, its output captured.
pub fn ipivmm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("ipivmm runs")
}

/// A fresh temporary directory `ipivmm-TAG-NAME-PID`.
pub fn dir(tag: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ipivmm-{tag}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `text` written to `d/NAME.toml`, a `check` plan.
pub fn plan(d: &Path, name: &str, text: &str) -> PathBuf {
    let p = d.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}
