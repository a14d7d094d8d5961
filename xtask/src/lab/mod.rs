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
mod avic_checks;
mod binaries;
mod bochs;
mod boot;
mod checks;
mod cli;
mod console;
mod debs;
mod host;
mod initramfs;
mod modules;
mod qemu;
mod tables;
mod tap;
mod verify;
mod wedge;

pub use cli::Args;

use anyhow::{bail, Context, Result};
use cli::{absorb_kernel_args, Action, EmulatorKind};
use host::{log, Work};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use verify::Expect;

/// How the lab ended.
pub enum Verdict {
    /// Nothing to check (clean, initrd, shell, --no-verify), or every check passed.
    Passed,
    /// A check failed.
    Failed,
}

impl Verdict {
    /// 0 or 1.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Verdict::Passed => ExitCode::SUCCESS,
            Verdict::Failed => ExitCode::from(1),
        }
    }
}

/// Everything the lab reads from the environment and its arguments.
struct Settings {
    root: PathBuf,
    cache: PathBuf,
    smp: u32,
    mem_mib: u32,
    wedge_s: u64,
    kernel_args: Vec<String>,
    /// `--cpio` and LAB_EXTRA_CPIO: archives appended to the initramfs.
    extra_cpio: Vec<PathBuf>,
    /// QEMU's `-cpu` (`--cpu`, default max).
    qemu_cpu: String,
    /// The guest's kernel (`--kernel`, `--modules`; default the pinned 6.1).
    kernel: debs::GuestKernel,
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
    fn read(args: &Args) -> Result<Self> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("the checkout")?
            .to_path_buf();
        let cache = match std::env::var_os("IPIVMM_LAB_CACHE").filter(|c| !c.is_empty()) {
            Some(c) => PathBuf::from(c),
            None => std::env::var_os("XDG_CACHE_HOME")
                .filter(|c| !c.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .context("no HOME for the cache (set IPIVMM_LAB_CACHE)")?
                .join("ipivmm-lab"),
        };
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
        Ok(Self {
            root,
            cache,
            smp: match args.smp {
                Some(n) => n,
                None => env_num("LAB_SMP", 2)?,
            },
            mem_mib: env_num("LAB_MEM", 2048)?,
            wedge_s: env_num("LAB_WEDGE_S", 180)?,
            kernel_args,
            extra_cpio,
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
    fn qemu(&self, binary: PathBuf, image: &Image, initrd: PathBuf, work: &Path) -> qemu::Qemu {
        qemu::Qemu {
            binary,
            cpu: self.qemu_cpu.clone(),
            smp: self.smp,
            mem_mib: self.mem_mib,
            wedge_s: self.wedge_s,
            kernel: image.kernel.clone(),
            initrd,
            monitor: work.join("monitor.sock"),
        }
    }

    fn work(&self, emulator: EmulatorKind) -> PathBuf {
        self.root.join(match emulator {
            EmulatorKind::Qemu => "target/lab",
            EmulatorKind::Bochs => "target/lab-bochs",
        })
    }

    fn results(&self, args: &Args) -> PathBuf {
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

/// `cargo xtask lab`.
pub fn main(mut args: Args) -> Result<Verdict> {
    absorb_kernel_args(&mut args)?;
    let s = Settings::read(&args)?;
    match args.action {
        Action::Clean => clean(&s, &args),
        Action::Verify => {
            let dir = s.results(&args);
            let pass = std::fs::read_to_string(dir.join("pass.txt")).with_context(|| {
                format!("no pass.txt in {} (not a lab's results?)", dir.display())
            })?;
            let expect = Expect::named(pass.trim())
                .with_context(|| format!("{}: unknown pass '{}'", dir.display(), pass.trim()))?;
            Ok(print_verdict(expect, &dir))
        }
        Action::Table => {
            let dir = s.results(&args);
            let pass = std::fs::read_to_string(dir.join("pass.txt")).unwrap_or_default();
            match Expect::named(pass.trim()) {
                Some(Expect::Avic(_)) => tables::update_avic_doc(&s.root, &dir)?,
                _ => tables::update_docs(&s.root, args.emulator, &dir)?,
            }
            Ok(Verdict::Passed)
        }
        Action::Avic => avic::pass(&s, &args),
        Action::Quick | Action::Full | Action::Shell | Action::Initrd => lab(&s, &args),
    }
}

fn clean(s: &Settings, args: &Args) -> Result<Verdict> {
    let mut dirs = vec![s.work(args.emulator)];
    if args.emulator == EmulatorKind::Qemu {
        dirs.push(avic::work_dir(&s.root));
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
    Ok(Verdict::Passed)
}

fn print_verdict(expect: Expect, dir: &Path) -> Verdict {
    let report = match expect {
        Expect::Avic(part) => avic::verify(part, dir),
        other => verify::verify(other, dir),
    };
    print!("{}", report.text());
    if report.passed() {
        Verdict::Passed
    } else {
        Verdict::Failed
    }
}

/// The guest's kernel and initramfs.
struct Image {
    kernel: PathBuf,
    /// The kernel's lib/modules/RELEASE.
    modules: PathBuf,
    initrd: PathBuf,
    busybox: PathBuf,
    /// versions.txt's lines about them.
    versions: Vec<String>,
    /// Names of the KVM test binaries in the initramfs (none when given one).
    tests: Vec<String>,
    /// Names of the plans in its /lab/plans (none when given one).
    plans: Vec<String>,
}

/// Fetches, builds and packs the guest's image into `work`.
fn build_image(s: &Settings, work: &mut Work) -> Result<Image> {
    if !host::have("cc") {
        host::apt_install(&["gcc", "libc6-dev"])?;
    }
    let debs = work.timed("fetch", |w| debs::fetch(w, &s.cache, &s.kernel))?;
    let bins = work.timed("build", |_| binaries::build(&s.root))?;
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
fn with_archives(initrd: &Path, archives: &[PathBuf], out: PathBuf) -> Result<PathBuf> {
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
struct Boot {
    /// Its wall time's name in timings.txt.
    stage: String,
    guest: boot::GuestArgs,
    timeout_s: u64,
    /// Where the results tree goes.
    results: PathBuf,
    /// What its pass.txt says (the verdict `verify` gives it).
    pass: &'static str,
}

/// Boots `emu` until the pass ends (the boot core: watchdog, resume) and
/// moves what the guest left to `b.results` with what the host knows (the
/// versions, the test binaries and plans of `image`, the wall times).
fn boot_and_collect(
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

/// A pass: build, boot, collect, verify.
fn lab(s: &Settings, args: &Args) -> Result<Verdict> {
    let stop = host::interrupt_flag()?;
    let mut work = Work::open(&s.work(args.emulator))?;
    let pass = match args.action {
        Action::Full => "full",
        Action::Shell => "shell",
        _ => "quick",
    };
    let qemu_binary = match args.emulator {
        EmulatorKind::Qemu if args.action != Action::Initrd => Some(qemu::Qemu::binary()?),
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
        _ => build_image(s, &mut work)?,
    };
    host::interrupted(&stop)?;
    if args.action == Action::Initrd {
        println!("{}", image.initrd.display());
        println!("{}", image.kernel.display());
        return Ok(Verdict::Passed);
    }
    let mut versions = image.versions.clone();
    let timeout = args.timeout;
    let (mut emu, timeout): (Box<dyn boot::Emulator>, u64) = match args.emulator {
        EmulatorKind::Qemu => {
            let binary = qemu_binary.context("QEMU")?;
            let initrd = with_archives(
                &image.initrd,
                &s.extra_cpio,
                work.dir.join("initrd-extra.cpio"),
            )?;
            versions.push(format!("qemu {}", qemu::Qemu::version(&binary)?));
            let q = s.qemu(binary, &image, initrd, &work.dir);
            if args.action == Action::Shell {
                q.shell(&work.dir.join("out-shell.img"))?;
                return Ok(Verdict::Passed);
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
                extra: s.extra_cpio.clone(),
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
    let mut verdict = Verdict::Passed;
    if !args.no_verify {
        verdict = print_verdict(expect, &results);
    }
    if args.update_docs {
        if let Err(e) = tables::update_docs(&s.root, args.emulator, &results) {
            eprintln!("lab: error: {e:#}");
            verdict = Verdict::Failed;
        }
    }
    Ok(verdict)
}
