//! `cargo xtask lab linux`: a Linux guest under ipivmm, nested under the
//! lab's kvm_amd (docs/linux-guest.md). One boot of the lab's QEMU (the
//! AVIC one, kvm_amd `avic=1`) with the guest steps `host` and `extra`,
//! scripts/lab/probe-linux.sh as `extra`, packed with the L2 kernel and
//! ipivmm's guest initramfs by scripts/lab/build-linux-probe.sh; then the
//! lab's checks and plans/lab-linux.toml over its runs.
use super::cli::Args;
use super::host;
use super::linux_checks as lc;
use super::pass::{self, LabOutcome, Settings};
use super::recorded;
use super::verify::{Expect, Report};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let script = "scripts/lab/build-linux-probe.sh";
    let mut extra = vec!["lab.kvm=avic=1".to_string(), format!("lab.probe={PARTS}")];
    extra.extend(s.kernel_args.iter().cloned());
    let probe = |_: &_, dir: &Path| {
        host::built(
            script,
            Command::new(s.root.join(script))
                .arg(dir.join("linux-probe.cpio"))
                .env("IPIVMM_LAB_CACHE", &s.cache),
        )
    };
    let (verdict, _) = pass::probe_pass(
        s,
        args,
        (work_dir(&s.root), false, (ITERATIONS, TIMEOUT_S)),
        ("linux-guest", probe),
        vec![(Expect::Linux, extra)],
    )?;
    Ok(verdict)
}

/// The Linux pass's own checks of the results tree `dir`, after the lab's
/// (steps host and extra, a hardware backend): plans/lab-linux.toml over
/// the Linux runs (a line about runs the pass's parts did not make is
/// listed, not failed), and a summary line per run.
pub fn verdict(r: &mut Report, dir: &Path) {
    recorded::judge(r, dir, "lab-linux.toml", true);
    for f in host::files(&dir.join("runs"), "linux-", ".json") {
        match ipivmm::Document::load(&f) {
            Ok(doc) => {
                for run in &doc.runs {
                    r.info(format!("  linux: {}", lc::summary(run)));
                }
            }
            Err(e) => r.info(format!("  linux: {e}")),
        }
    }
}
