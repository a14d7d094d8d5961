//! One lab pass as its drivers run it (`cargo xtask lab quick|full` in
//! [`super`], the probe passes in [`super::avic`] and [`super::linux`]):
//! the settings, the guest's image built once, a boot with its results
//! collected, and the verdict printed. No driver calls another: all call this.
use super::cli::{Args, EmulatorKind};
use super::host::{self, log, Work};
use super::report::{Expect, Report};
use super::verify;
use super::{binaries, boot, debs, initramfs, qemu};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How the lab ended.
pub enum LabOutcome {
    /// Nothing to check (clean, initrd, shell, --no-verify), or every check passed.
    Passed,
    /// A check failed.
    Failed,
}

impl LabOutcome {
    /// 0 or 1.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            LabOutcome::Passed => ExitCode::SUCCESS,
            LabOutcome::Failed => ExitCode::from(1),
        }
    }
}

/// Everything the lab reads from the environment and its arguments.
pub struct Settings {
    pub root: PathBuf,
    pub cache: PathBuf,
    pub smp: u32,
    /// QEMU's sockets, each a NUMA node (`--sockets`).
    pub sockets: Option<u32>,
    pub mem_mib: u32,
    pub wedge_s: u64,
    pub kernel_args: Vec<String>,
    /// `--cpio` and LAB_EXTRA_CPIO: archives appended to the initramfs.
    pub extra_cpio: Vec<PathBuf>,
    /// Append the Linux guest's probe archive (built from the boot's image:
    /// [`super::linux_guest::probe_archive`]) first among the extra archives.
    pub linux_probe: bool,
    /// QEMU's `-cpu` (`--cpu`, default max).
    pub qemu_cpu: String,
    /// The guest's kernel (`--kernel`, `--modules`; default the pinned 6.1).
    pub kernel: debs::GuestKernel,
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={v} is not a number")),
        _ => Ok(default),
    }
}

impl Settings {
    pub fn read(args: &Args) -> Result<Self> {
        let root = checkout()?;
        let cache = debs::cache_dir()?;
        let mut kernel_args: Vec<String> = match std::env::var("LAB_KERNEL_ARGS") {
            Ok(a) => a.split_whitespace().map(str::to_string).collect(),
            Err(_) => vec!["loglevel=4".into()],
        };
        kernel_args.extend(args.kernel_args.iter().cloned());
        let env_cpio = std::env::var("LAB_EXTRA_CPIO").unwrap_or_default();
        let extra_cpio = args
            .cpio
            .iter()
            .cloned()
            .chain(env_cpio.split_whitespace().map(PathBuf::from))
            .map(|c| std::path::absolute(&c).unwrap_or(c))
            .collect();
        let smp = match args.smp {
            Some(n) => n,
            None => env_num("LAB_SMP", 2)?,
        };
        let mem_mib = env_num("LAB_MEM", 2048)?;
        if args.sockets.is_some() && args.emulator == EmulatorKind::Bochs {
            bail!("--sockets: QEMU's machine only (drop --emulator bochs)");
        }
        qemu::check_topology(smp, args.sockets, mem_mib)?;
        Ok(Self {
            root,
            cache,
            smp,
            sockets: args.sockets,
            mem_mib,
            wedge_s: env_num("LAB_WEDGE_S", 180)?,
            kernel_args,
            extra_cpio,
            linux_probe: false,
            qemu_cpu: match args.emulator {
                EmulatorKind::Qemu => args.cpu.clone(),
                EmulatorKind::Bochs => None,
            }
            .unwrap_or_else(|| qemu::DEFAULT_CPU.into()),
            // With --initrd, --kernel is that initramfs's kernel (lab()).
            kernel: match args.initrd {
                Some(_) => debs::GuestKernel::Pinned,
                None => {
                    debs::GuestKernel::from_args(args.kernel.as_deref(), args.modules.as_deref())?
                }
            },
        })
    }

    /// QEMU booting `image`'s kernel with `initrd`, its monitor in `work`.
    pub fn qemu(&self, binary: PathBuf, image: &Image, initrd: PathBuf, work: &Path) -> qemu::Qemu {
        qemu::Qemu {
            binary,
            cpu: self.qemu_cpu.clone(),
            smp: self.smp,
            sockets: self.sockets,
            mem_mib: self.mem_mib,
            wedge_s: self.wedge_s,
            kernel: image.kernel.clone(),
            initrd,
            monitor: work.join("monitor.sock"),
        }
    }

    pub fn work(&self, emulator: EmulatorKind) -> PathBuf {
        self.root.join(match emulator {
            EmulatorKind::Qemu => "target/lab",
            EmulatorKind::Bochs => "target/lab-bochs",
        })
    }

    pub fn results(&self, args: &Args) -> PathBuf {
        match &args.results {
            Some(r) => r.clone(),
            None => match args.emulator {
                EmulatorKind::Qemu => self.work(args.emulator).join("results"),
                EmulatorKind::Bochs => self
                    .work(args.emulator)
                    .join(format!("results-{}", args.bochs.name())),
            },
        }
    }
}

/// The guest's kernel and initramfs.
pub struct Image {
    pub kernel: PathBuf,
    /// The kernel's lib/modules/RELEASE.
    pub modules: PathBuf,
    pub initrd: PathBuf,
    pub busybox: PathBuf,
    /// versions.txt's lines about them.
    pub versions: Vec<String>,
    /// Names of the KVM test binaries in the initramfs (none when given one).
    pub tests: Vec<String>,
    /// Names of the plans in its /lab/plans (none when given one).
    pub plans: Vec<String>,
}

/// Fetches, builds and packs the guest's image into `work`; the KVM test
/// binaries only `with_tests` (a boot whose steps run them).
pub fn build_image(s: &Settings, work: &mut Work, with_tests: bool) -> Result<Image> {
    if !host::have("cc") {
        host::apt_install(&["gcc", "libc6-dev"])?;
    }
    let debs = work.timed("fetch", |w| debs::fetch(w, &s.cache, &s.kernel))?;
    let bins = work.timed("build", |_| binaries::build(&s.root, with_tests))?;
    let dir = work.dir.clone();
    let (initrd, plans) = work.timed("initramfs", |_| {
        initramfs::build(&s.root, &dir, &debs, &bins)
    })?;
    Ok(Image {
        kernel: debs.vmlinuz.clone(),
        modules: debs.modules.clone(),
        initrd,
        busybox: debs.busybox.clone(),
        versions: vec![
            format!("kernel {}", debs.kernel_deb),
            format!("busybox {}", debs.busybox_deb),
        ],
        tests: bins.tests.iter().map(|t| binaries::test_name(t)).collect(),
        plans,
    })
}

/// The initramfs `initrd` with `archives` appended (the kernel unpacks
/// concatenated newc archives, later files win), written to `out`.
pub fn with_archives(initrd: &Path, archives: &[PathBuf], out: PathBuf) -> Result<PathBuf> {
    if archives.is_empty() {
        return Ok(initrd.to_path_buf());
    }
    let mut bytes =
        std::fs::read(initrd).with_context(|| format!("cannot read {}", initrd.display()))?;
    for a in archives {
        bytes.extend(std::fs::read(a).with_context(|| format!("cannot read {}", a.display()))?);
    }
    std::fs::write(&out, bytes)?;
    Ok(out)
}

/// One pass's boots as [`boot_and_collect`] runs them.
pub struct Boot {
    /// Its wall time's name in timings.txt.
    pub stage: String,
    pub guest: boot::GuestArgs,
    pub timeout_s: u64,
    /// Where the results tree goes.
    pub results: PathBuf,
    /// What its pass.txt says (the verdict `verify` gives it).
    pub pass: &'static str,
}

/// Boots `emu` until the pass ends (the boot core: watchdog, resume) and
/// moves what the guest left to `b.results` with what the host knows (the
/// versions, the test binaries and plans of `image`, the wall times).
pub fn boot_and_collect(
    work: &mut Work,
    emu: &mut dyn boot::Emulator,
    b: &Boot,
    versions: &[String],
    image: &Image,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<()> {
    let new = work.dir.join("results.new");
    work.timed(&b.stage, |w| {
        boot::boot(w, emu, &b.guest, b.timeout_s, &new, stop)
    })?;
    boot::collect(
        work,
        &new,
        &b.results,
        b.pass,
        versions,
        &image.tests,
        &image.plans,
    )?;
    emu.collect(&b.results)?;
    std::fs::write(
        b.results.join("timings.txt"),
        std::fs::read_to_string(work.dir.join("timings.txt")).unwrap_or_default()
            + &format!("total {}\n", work.total_s()),
    )?;
    log(format!("results in {}", b.results.display()));
    Ok(())
}

/// A probe pass (`cargo xtask lab avic|linux`): QEMU and the guest's image
/// (the KVM test binaries `with_tests`) built once in `dir`, the archive
/// that `probe` makes there appended (its script is the guest's step
/// `extra`); then a boot per pass and guest arguments of `boots`, each
/// running the steps `host` and `extra` (`--iterations`, `--timeout`, else
/// `defaults`) and checked unless `--no-verify`, its results in the
/// directory it names there ("": the results directory itself). The
/// verdict, and where the results are.
pub fn probe_pass(
    s: &Settings,
    args: &Args,
    (dir, with_tests, defaults): (PathBuf, bool, (u32, u64)),
    (stage, probe): (&str, impl FnOnce(&Image, &Path) -> Result<PathBuf>),
    boots: Vec<(Expect, Vec<String>, String)>,
) -> Result<(LabOutcome, PathBuf)> {
    if args.emulator != EmulatorKind::Qemu {
        bail!("the AVIC pass runs on QEMU (kvm_amd): drop --emulator bochs");
    }
    let stop = host::interrupt_flag()?;
    let mut work = Work::open(&dir)?;
    let binary = work.timed("build-qemu", |_| qemu::Qemu::binary(&s.root, &s.cache))?;
    log(format!("QEMU: {}", binary.display()));
    let image = build_image(s, &mut work, with_tests)?;
    let probe = work.timed(stage, |w| probe(&image, &w.dir))?;
    host::interrupted(&stop)?;
    let archives: Vec<PathBuf> = std::iter::once(probe)
        .chain(s.extra_cpio.iter().cloned())
        .collect();
    // Not initrd-extra.cpio: each boot's collect removes that one.
    let initrd = with_archives(&image.initrd, &archives, work.dir.join(PROBE_INITRD))?;
    let mut versions = image.versions.clone();
    versions.extend(qemu::Qemu::versions(&binary)?);
    let mut q = s.qemu(binary, &image, initrd, &work.dir);
    versions.push(format!("qemu -cpu {}", q.cpu));
    let results = args
        .results
        .clone()
        .unwrap_or_else(|| work.dir.join("results"));
    let mut verdict = LabOutcome::Passed;
    for (expect, extra, sub) in boots {
        host::interrupted(&stop)?;
        let b = Boot {
            stage: format!("boot-{}", expect.name()),
            guest: boot::GuestArgs {
                pass: "quick".into(),
                steps: Some("host,extra".into()),
                iterations: Some(args.iterations.unwrap_or(defaults.0)),
                extra,
            },
            timeout_s: args.timeout.unwrap_or(defaults.1),
            results: results.join(sub),
            pass: expect.name(),
        };
        boot_and_collect(&mut work, &mut q, &b, &versions, &image, &stop)?;
        // Each boot's warnings.txt holds its own boot's.
        work.warnings.clear();
        if !args.no_verify {
            if let LabOutcome::Failed = print(&verify::verify(expect, &b.results)) {
                verdict = LabOutcome::Failed;
            }
        }
    }
    let _ = std::fs::remove_file(work.dir.join(PROBE_INITRD));
    log(format!("results in {}", results.display()));
    Ok((verdict, results))
}

/// The checkout this xtask was built from.
pub fn checkout() -> Result<PathBuf> {
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the checkout")?
        .to_path_buf())
}

/// The initramfs every boot of a probe pass boots, in its work directory.
const PROBE_INITRD: &str = "initrd-probe.cpio";

/// Prints `report` (a pass's verdict): [`LabOutcome::Failed`] when a check failed.
pub fn print(report: &Report) -> LabOutcome {
    print!("{}", report.text());
    if report.passed() {
        LabOutcome::Passed
    } else {
        LabOutcome::Failed
    }
}
