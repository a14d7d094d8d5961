//! `cargo xtask lab linux`: a Linux guest under ipivmm, nested under the
//! lab's kvm_amd (docs/linux-guest.md). One boot of the lab's QEMU (the
//! AVIC one, kvm_amd `avic=1`) with the guest steps `host` and `extra`,
//! scripts/lab/probe-linux.sh as `extra`, packed with the L2 kernel and
//! ipivmm's guest initramfs ([`linux_guest::probe_archive`]); then the
//! lab's checks and plans/lab-linux.toml over its runs ([`super::verify`]).
use super::cli::Args;
use super::linux_guest;
use super::pass::{self, LabOutcome, Settings};
use super::report::Expect;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The boot's limit unless `--timeout` says otherwise, s.
pub const TIMEOUT_S: u64 = 5400;
/// Operations per measured phase unless `--iterations` says otherwise.
pub const ITERATIONS: u32 = 50;
/// probe-linux.sh's parts unless `lab.probe=` says otherwise.
pub const PARTS: &str = "boot,broadcast";

/// The pass's work directory.
pub fn work_dir(root: &Path) -> PathBuf {
    root.join("target/lab-linux")
}

/// The pass: QEMU and the guest's image, the probe archive, one boot, the checks.
pub fn pass(s: &Settings, args: &Args) -> Result<LabOutcome> {
    let mut extra = vec!["lab.kvm=avic=1".to_string(), format!("lab.probe={PARTS}")];
    extra.extend(s.kernel_args.iter().cloned());
    let probe = |image: &_, dir: &Path| {
        linux_guest::probe_archive(&s.root, &s.cache, image, &dir.join("linux-probe.cpio"))
    };
    let (verdict, _) = pass::probe_pass(
        s,
        args,
        (work_dir(&s.root), false, (ITERATIONS, TIMEOUT_S)),
        ("linux-guest", probe),
        vec![(Expect::Linux, extra, String::new())],
    )?;
    Ok(verdict)
}
