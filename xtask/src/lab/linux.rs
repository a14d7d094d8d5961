//! `cargo xtask lab linux`: a Linux guest under ipivmm, nested under the
//! lab's kvm_amd (docs/linux-guest.md). One boot of the lab's QEMU (the
//! AVIC one, kvm_amd `avic=1`) with the guest steps `host` and `extra`,
//! scripts/lab/probe-linux.sh as `extra`, packed with the L2 kernel and
//! ipivmm's guest initramfs by scripts/lab/build-linux-probe.sh; then the
//! lab's checks and plans/lab-linux.toml over its runs.
use super::cli::{Args, EmulatorKind};
use super::host::{self, log, Work};
use super::linux_checks as lc;
use super::pass::{self, Boot, LabOutcome, Settings};
use super::recorded;
use super::verify::{self, Expect, Report};
use super::{boot, qemu};
use anyhow::{bail, Result};
use std::fs;
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
    if args.emulator != EmulatorKind::Qemu {
        bail!("the Linux pass runs on QEMU (kvm_amd): drop --emulator bochs");
    }
    let stop = host::interrupt_flag()?;
    let mut work = Work::open(&work_dir(&s.root))?;
    let binary = work.timed("build-qemu", |_| qemu::Qemu::binary(&s.root, &s.cache))?;
    let image = pass::build_image(s, &mut work, false)?;
    let out = work.dir.join("linux-probe.cpio");
    let script = "scripts/lab/build-linux-probe.sh";
    let probe = work.timed("linux-guest", |_| {
        host::built(
            script,
            Command::new(s.root.join(script))
                .arg(&out)
                .env("IPIVMM_LAB_CACHE", &s.cache),
        )
    })?;
    host::interrupted(&stop)?;
    let archives: Vec<PathBuf> = std::iter::once(probe)
        .chain(s.extra_cpio.iter().cloned())
        .collect();
    let initrd = pass::with_archives(&image.initrd, &archives, work.dir.join("initrd-linux.cpio"))?;
    let mut versions = image.versions.clone();
    versions.extend(qemu::Qemu::versions(&binary)?);
    let mut q = s.qemu(binary, &image, initrd, &work.dir);
    let results = args
        .results
        .clone()
        .unwrap_or_else(|| work.dir.join("results"));
    let mut extra = vec!["lab.kvm=avic=1".to_string(), format!("lab.probe={PARTS}")];
    extra.extend(s.kernel_args.iter().cloned());
    let b = Boot {
        stage: "boot-linux".into(),
        guest: boot::GuestArgs {
            pass: "quick".into(),
            steps: Some("host,extra".into()),
            iterations: Some(args.iterations.unwrap_or(ITERATIONS)),
            extra,
        },
        timeout_s: args.timeout.unwrap_or(TIMEOUT_S),
        results: results.clone(),
        pass: Expect::Linux.name(),
    };
    pass::boot_and_collect(&mut work, &mut q, &b, &versions, &image, &stop)?;
    let _ = fs::remove_file(work.dir.join("initrd-linux.cpio"));
    log(format!("results in {}", results.display()));
    if args.no_verify {
        return Ok(LabOutcome::Passed);
    }
    Ok(pass::print(&verify(&results)))
}

/// The verdict over the results tree `dir`: the lab's own checks (steps
/// host and extra, a hardware backend), plans/lab-linux.toml over the
/// Linux runs (a line about runs the pass's parts did not make is listed,
/// not failed), and a summary line per run.
pub fn verify(dir: &Path) -> Report {
    verify::verify_with(Expect::Linux, dir, |r| {
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
    })
}
