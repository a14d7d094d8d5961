//! `cargo xtask lab linux`: a Linux guest under ipivmm, nested under the
//! lab's kvm_amd (docs/linux-guest.md). One boot of the lab's QEMU (the
//! AVIC one, kvm_amd `avic=1`) with the guest steps `host` and `extra`,
//! scripts/lab/probe-linux.sh as `extra`, packed with the L2 kernel and
//! ipivmm's guest initramfs ([`linux_guest::probe_archive`]); then the
//! lab's checks and plans/lab-linux.toml over its runs ([`super::verify`]).
//! With `--emulator bochs` (the Intel lab, docs/lab-intel.md) the same
//! archive runs the probe's part `intel` in one Bochs boot ([`intel_setup`]).
use super::cli::{Action, Args};
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

/// probe-linux.sh's parts on the Intel lab unless `lab.probe=` says otherwise.
pub const INTEL_PARTS: &str = "intel";
/// The Intel lab's boot limit unless `--timeout` says otherwise: 16 Linux
/// runs at 4–7 minutes each under Bochs, and the boot.
pub const INTEL_TIMEOUT_S: u64 = 9000;

/// The pass's work directory.
pub fn work_dir(root: &Path) -> PathBuf {
    root.join("target/lab-linux")
}

/// The Intel lab's Linux pass as a Bochs quick boot: the probe archive
/// built and appended first, its part `intel` named first (a later
/// `lab.probe=` wins), the steps host and extra without the KVM test
/// binaries (the probe runs none), and its own time limit.
pub fn intel_setup(s: &mut Settings, args: &mut Args) -> Result<()> {
    // The archive is built once the guest's image is (it takes the
    // image's busybox and kernel): pass::Settings::linux_probe.
    s.linux_probe = true;
    s.kernel_args.insert(0, format!("lab.probe={INTEL_PARTS}"));
    args.action = Action::Quick;
    args.steps = Some(vec!["host".into(), "extra".into()]);
    args.no_test_binaries = true;
    args.timeout = Some(args.timeout.unwrap_or(INTEL_TIMEOUT_S));
    Ok(())
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
