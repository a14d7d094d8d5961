//! `cargo xtask lab`: ipivmm on a real hardware-KVM module under an
//! emulated CPU. This machine's /dev/kvm is kvm_pvm (no VMX/SVM: kvm_exit
//! never fires, hypercalls never return, no APICv/AVIC); QEMU's TCG emulates
//! an SVM CPU on which Debian's 6.1 kernel loads the real kvm_amd, Bochs a
//! VMX CPU for kvm_intel. ipivmm and its KVM test binaries run inside that
//! guest (scripts/lab/init.sh, the guest side); the host side here fetches
//! and builds what the guest runs, boots it ([`boot`], one core with a
//! backend per emulator), and checks the results against ipivmm's own
//! results types ([`checks`], [`verify`]). See docs/lab.md, docs/lab-intel.md.
mod avic;
mod avic_verdict;
mod binaries;
mod bochs;
mod boot;
mod cli;
mod console;
mod crossboot;
mod crossboot_verdict;
mod debs;
mod host;
mod initramfs;
mod linux;
pub mod linux_guest;
mod modules;
mod pass;
mod qemu;
mod recorded;
mod report;
mod seeds;
mod seeds_000;
mod seeds_002;
mod seeds_003;
mod seeds_cells;
mod tables;
mod tap;
mod verify;
mod wedge;

pub use cli::Args;
pub use pass::LabOutcome;

use anyhow::{bail, Context, Result};
use cli::{absorb_kernel_args, Action, EmulatorKind};
use host::{log, Work};
use pass::{boot_and_collect, build_image, with_archives, Boot, Image, Settings};
use report::Expect;
use std::path::Path;

/// `cargo xtask lab`.
pub fn main(mut args: Args) -> Result<LabOutcome> {
    absorb_kernel_args(&mut args)?;
    let mut s = Settings::read(&args)?;
    if args.action == Action::Linux && args.emulator == EmulatorKind::Bochs {
        // The Intel lab's Linux pass is a Bochs boot of the steps host and
        // extra with the Linux probe appended (linux::intel_setup).
        linux::intel_setup(&mut s, &mut args)?;
        return lab(&s, &args);
    }
    match args.action {
        Action::Clean => clean(&s, &args),
        Action::Verify => {
            let dir = s.results(&args);
            let pass = std::fs::read_to_string(dir.join("pass.txt")).with_context(|| {
                format!("no pass.txt in {} (not a lab's results?)", dir.display())
            })?;
            let expect = Expect::named(pass.trim())
                .with_context(|| format!("{}: unknown pass '{}'", dir.display(), pass.trim()))?;
            Ok(pass::print(&verify::verify(expect, &dir)))
        }
        Action::Table => {
            let dir = s.results(&args);
            let pass = std::fs::read_to_string(dir.join("pass.txt")).unwrap_or_default();
            match Expect::named(pass.trim()) {
                Some(Expect::Avic(_)) => tables::update_avic_doc(&s.root, &dir)?,
                _ => tables::update_docs(&s.root, args.emulator, &dir)?,
            }
            Ok(LabOutcome::Passed)
        }
        Action::Avic => avic::pass(&s, &args),
        Action::Linux => linux::pass(&s, &args),
        Action::Crossboot => crossboot::pass(&s, &args),
        Action::Seeds => seeds::main(&s, &args),
        Action::Quick | Action::Full | Action::Shell | Action::Initrd => lab(&s, &args),
    }
}

fn clean(s: &Settings, args: &Args) -> Result<LabOutcome> {
    let mut dirs = vec![s.work(args.emulator)];
    if args.emulator == EmulatorKind::Qemu {
        dirs.push(avic::work_dir(&s.root));
        dirs.push(linux::work_dir(&s.root));
        dirs.push(crossboot::work_dir(&s.root));
    }
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    let mut gone = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(" and ");
    if args.cache {
        let _ = std::fs::remove_dir_all(&s.cache);
        gone = format!("{gone} and {}", s.cache.display());
    }
    log(format!("removed {gone}"));
    Ok(LabOutcome::Passed)
}

/// A pass: build, boot, collect, verify.
fn lab(s: &Settings, args: &Args) -> Result<LabOutcome> {
    let stop = host::interrupt_flag()?;
    let mut work = Work::open(&s.work(args.emulator))?;
    let pass = match args.action {
        Action::Full => "full",
        Action::Shell => "shell",
        _ => "quick",
    };
    let qemu_binary = match args.emulator {
        EmulatorKind::Qemu if args.action != Action::Initrd => {
            Some(work.timed("build-qemu", |_| qemu::Qemu::binary(&s.root, &s.cache))?)
        }
        _ => None,
    };
    let bochs_binary = match args.emulator {
        EmulatorKind::Bochs if args.action != Action::Initrd => {
            if args.action == Action::Shell {
                bail!("the shell pass needs a console on this terminal: use --emulator qemu");
            }
            Some(work.timed("tools", |_| bochs::Bochs::tools(&s.root, args.bochs))?)
        }
        _ => None,
    };
    let image = match (&args.initrd, &args.kernel) {
        (Some(initrd), Some(kernel)) => Image {
            kernel: kernel.clone(),
            // Beside it, as Debian's package has them (boot/vmlinuz-RELEASE).
            modules: {
                let name = kernel.file_name().unwrap_or_default().to_string_lossy();
                let release = name.strip_prefix("vmlinuz-").unwrap_or(&name);
                kernel
                    .parent()
                    .and_then(Path::parent)
                    .and_then(|root| debs::modules_dir(root, release))
                    .with_context(|| {
                        format!("no modules for {release} beside {}", kernel.display())
                    })?
            },
            initrd: initrd.clone(),
            busybox: debs::cached_busybox(&s.cache)?,
            versions: vec![format!(
                "kernel {}",
                kernel.file_name().unwrap_or_default().to_string_lossy()
            )],
            tests: Vec::new(),
            plans: Vec::new(),
        },
        _ => build_image(s, &mut work, !args.no_test_binaries)?,
    };
    host::interrupted(&stop)?;
    if args.action == Action::Initrd {
        println!("{}", image.initrd.display());
        println!("{}", image.kernel.display());
        return Ok(LabOutcome::Passed);
    }
    let mut extra = s.extra_cpio.clone();
    if s.linux_probe {
        let out = work.dir.join("linux-probe.cpio");
        extra.insert(
            0,
            linux_guest::probe_archive(&s.root, &s.cache, &image, &out)?,
        );
    }
    let mut versions = image.versions.clone();
    let timeout = args.timeout;
    let (mut emu, timeout): (Box<dyn boot::Emulator>, u64) = match args.emulator {
        EmulatorKind::Qemu => {
            let binary = qemu_binary.context("QEMU")?;
            let initrd = with_archives(&image.initrd, &extra, work.dir.join("initrd-extra.cpio"))?;
            versions.extend(qemu::Qemu::versions(&binary)?);
            let q = s.qemu(binary, &image, initrd, &work.dir);
            if args.action == Action::Shell {
                q.shell(&work.dir.join("out-shell.img"))?;
                return Ok(LabOutcome::Passed);
            }
            let t = timeout.unwrap_or(match args.action {
                Action::Full => 7200,
                _ => 1500,
            });
            (Box::new(q), t)
        }
        EmulatorKind::Bochs => {
            let run = work.dir.join("run");
            let _ = std::fs::remove_dir_all(&run);
            std::fs::create_dir_all(&run)?;
            let ata = work.timed("modules", |_| {
                bochs::Bochs::ata_archive(&image.modules, &image.busybox, &run)
            })?;
            let b = bochs::Bochs {
                version: args.bochs,
                binary: bochs_binary.context("Bochs")?,
                cpu: args
                    .cpu
                    .clone()
                    .unwrap_or_else(|| args.bochs.default_cpu().into()),
                ips: args.ips,
                smp: s.smp,
                mem_mib: s.mem_mib,
                run,
                kernel: image.kernel.clone(),
                initrd: image.initrd.clone(),
                ata,
                extra: extra.clone(),
            };
            // The guest arguments as they were given (lab.steps= as well).
            let mut given: Vec<String> = args
                .steps
                .iter()
                .map(|s| format!("lab.steps={}", s.join(",")))
                .chain(args.iterations.map(|i| format!("lab.iterations={i}")))
                .collect();
            given.extend(args.kernel_args.iter().cloned());
            versions = b.versions(&given);
            (Box::new(b), timeout.unwrap_or(3600))
        }
    };
    let guest = boot::GuestArgs {
        pass: pass.into(),
        steps: args.steps.as_ref().map(|s| s.join(",")),
        iterations: args.iterations,
        extra: s.kernel_args.clone(),
    };
    let expect = if args.steps.is_some() {
        Expect::Custom
    } else {
        Expect::named(pass).unwrap_or(Expect::Custom)
    };
    let results = s.results(args);
    let b = Boot {
        stage: "boot".into(),
        guest,
        timeout_s: timeout,
        results: results.clone(),
        pass: expect.name(),
    };
    boot_and_collect(&mut work, emu.as_mut(), &b, &versions, &image, &stop)?;
    let mut verdict = LabOutcome::Passed;
    if !args.no_verify {
        verdict = pass::print(&verify::verify(expect, &results));
    }
    if args.update_docs {
        if let Err(e) = tables::update_docs(&s.root, args.emulator, &results) {
            eprintln!("lab: error: {e:#}");
            verdict = LabOutcome::Failed;
        }
    }
    Ok(verdict)
}
