//! `cargo xtask lab`: ipivmm on a real hardware-KVM module under an
//! emulated CPU. This machine's /dev/kvm is kvm_pvm (no VMX/SVM: kvm_exit
//! never fires, hypercalls never return, no APICv/AVIC); QEMU's TCG emulates
//! an SVM CPU on which Debian's 6.1 kernel loads the real kvm_amd, Bochs a
//! VMX CPU for kvm_intel. ipivmm and its KVM test binaries run inside that
//! guest (scripts/lab/init.sh, the guest side); the host side here fetches
//! and builds what the guest runs, boots it ([`boot`], one core with a
//! backend per emulator), and checks the results against ipivmm's own
//! results types ([`checks`], [`verify`]). See docs/lab.md, docs/lab-intel.md.
mod binaries;
mod bochs;
mod boot;
mod checks;
mod console;
mod debs;
mod host;
mod initramfs;
mod modules;
mod qemu;
mod tables;
mod verify;
mod wedge;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use host::{log, Work};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use verify::Expect;

/// The steps `--steps` may name (init.sh's `lab.steps=` cases; a test keeps
/// the two lists the same).
pub const STEPS: &[&str] = &[
    "host",
    "sweep",
    "tests",
    "inhibit",
    "inhibit-loaded",
    "hostswitch",
    "stress",
    "overhead",
    "flood",
    "flood-diag",
    "extra",
];

const ENVIRONMENT: &str = "\
Environment:
  IPIVMM_LAB_CACHE  downloads and the Bochs 3.0 build (default ~/.cache/ipivmm-lab)
  LAB_SMP           vCPUs of the emulated machine (2; --smp)
  LAB_MEM           its memory, MiB (2048)
  LAB_WEDGE_S       seconds without a guest heartbeat before a reboot (QEMU: 180)
  LAB_KERNEL_ARGS   guest kernel arguments (default loglevel=4; e.g. lab.wedge_at=sweep
                    wedges the first boot there: a test of the watchdog)
  LAB_QEMU          the QEMU binary (default qemu-system-x86_64, installed when missing)
  LAB_EXTRA_CPIO    initramfs archives to append (space-separated; as --cpio)
  BOCHS_PATCHES, BOCHS_JOBS   passed to scripts/lab/build-bochs.sh (Bochs 3.0)
Exit status: 0 when every check passed, 1 when one failed, 2 on a usage or setup error.";

/// What `cargo xtask lab` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Host facts, the mode matrix (ping-pong + broadcast, icr/pv, APICv host/inhibit), the KVM
    /// test binaries with every skip a failure, --apicv inhibit repeats, the host switches, an
    /// npt=0 reload (CI runs this)
    Quick,
    /// Every workload, halted targets, the presets, repeats under load, the npt=0 pass with the
    /// tests again
    Full,
    /// Boot with everything loaded and drop to a shell on this terminal (QEMU)
    Shell,
    /// Only build the initramfs and print its path and the kernel's (for other emulators)
    Initrd,
    /// Remove the lab's work directory (target/lab, target/lab-bochs); with --cache the downloads too
    Clean,
    /// Check a results tree again (--results; the pass it ran is in its pass.txt)
    Verify,
    /// Rewrite the docs' table from a results tree (QEMU: docs/lab.md, with the same sweep on
    /// this machine; Bochs: docs/lab-intel.md from every runs/*.json)
    Table,
}

/// The emulated machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum EmulatorKind {
    /// kvm_amd under QEMU TCG (docs/lab.md)
    #[default]
    Qemu,
    /// kvm_intel under Bochs (docs/lab-intel.md)
    Bochs,
}

/// `cargo xtask lab`'s arguments.
#[derive(clap::Args, Debug)]
#[command(after_help = ENVIRONMENT)]
pub struct Args {
    /// What to do
    #[arg(value_enum, default_value_t = Action::Quick)]
    pub action: Action,
    /// The emulated machine
    #[arg(long, value_enum, default_value_t)]
    pub emulator: EmulatorKind,
    /// Only these steps of the pass (for working on one; the verdict then covers only them)
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(STEPS))]
    pub steps: Option<Vec<String>>,
    /// Iterations per run of the sweeps (repeats per APIC mode for inhibit)
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Also rewrite the docs' table from this pass's results (see `table`)
    #[arg(long)]
    pub update_docs: bool,
    /// With `clean`: the downloads too
    #[arg(long)]
    pub cache: bool,
    /// vCPUs of the emulated machine [default: LAB_SMP, else 2]
    #[arg(long)]
    pub smp: Option<u32>,
    /// Wall-clock limit of the pass, s [default: quick 1500, full 7200, shell 86400; Bochs 3600]
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Where the results go [default: target/lab/results, target/lab-bochs/results-VERSION]
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Do not check the results (leave them for `verify`)
    #[arg(long)]
    pub no_verify: bool,
    /// Bochs release: 2.7 (bookworm's package, no posted interrupts) or 3.0 (built from trixie's source, APICv)
    #[arg(long, value_enum, default_value_t, help_heading = "Bochs")]
    pub bochs: bochs::Version,
    /// Bochs CPU model [default: 2.7 broadwell_ult, 3.0 corei7_skylake_x]
    #[arg(long, help_heading = "Bochs")]
    pub cpu: Option<String>,
    /// Bochs instructions per emulated second
    #[arg(long, default_value_t = 60_000_000, help_heading = "Bochs")]
    pub ips: u64,
    /// Boot this initramfs instead of building one (`initrd` prints one); needs --kernel
    #[arg(long, requires = "kernel", help_heading = "Bochs")]
    pub initrd: Option<PathBuf>,
    /// The kernel to boot with --initrd (its modules beside it, as Debian's package has them)
    #[arg(long, requires = "initrd", help_heading = "Bochs")]
    pub kernel: Option<PathBuf>,
    /// Append this newc archive to the initramfs (repeatable): the kernel unpacks concatenated
    /// archives, later files win (e.g. scripts/lab/build-selftests.sh's, for the step extra)
    #[arg(long)]
    pub cpio: Vec<PathBuf>,
    /// Guest kernel arguments after `--` (scripts/lab/init.sh reads lab.*=), e.g.
    /// `-- lab.matrix=10 lab.kvm=enable_apicv=0`; lab.pass=, lab.steps= and lab.iterations= are
    /// taken as the options they name
    #[arg(last = true)]
    pub kernel_args: Vec<String>,
}

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
        })
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

/// Takes `lab.pass=`, `lab.steps=` and `lab.iterations=` out of the kernel
/// arguments into the options they name (the Bochs lab's command lines).
fn absorb_kernel_args(args: &mut Args) -> Result<()> {
    let mut rest = Vec::new();
    for a in std::mem::take(&mut args.kernel_args) {
        if let Some(p) = a.strip_prefix("lab.pass=") {
            args.action = match p {
                "quick" => Action::Quick,
                "full" => Action::Full,
                "shell" => Action::Shell,
                _ => bail!("lab.pass={p}: the passes are quick, full and shell"),
            };
        } else if let Some(s) = a.strip_prefix("lab.steps=") {
            let steps: Vec<String> = s.split(',').map(str::to_string).collect();
            if let Some(bad) = steps.iter().find(|s| !STEPS.contains(&s.as_str())) {
                bail!(
                    "lab.steps: unknown step '{bad}' (the steps: {})",
                    STEPS.join(", ")
                );
            }
            args.steps = Some(steps);
        } else if let Some(n) = a.strip_prefix("lab.iterations=") {
            args.iterations = Some(n.parse().with_context(|| format!("lab.iterations={n}"))?);
        } else {
            rest.push(a);
        }
    }
    args.kernel_args = rest;
    Ok(())
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
            update_docs(&s, &args, &s.results(&args))?;
            Ok(Verdict::Passed)
        }
        Action::Quick | Action::Full | Action::Shell | Action::Initrd => lab(&s, &args),
    }
}

fn clean(s: &Settings, args: &Args) -> Result<Verdict> {
    let work = s.work(args.emulator);
    let _ = std::fs::remove_dir_all(&work);
    let mut gone = work.display().to_string();
    if args.cache {
        let _ = std::fs::remove_dir_all(&s.cache);
        gone = format!("{gone} and {}", s.cache.display());
    }
    log(format!("removed {gone}"));
    Ok(Verdict::Passed)
}

fn print_verdict(expect: Expect, dir: &Path) -> Verdict {
    let report = verify::verify(expect, dir);
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
    initrd: PathBuf,
    busybox: PathBuf,
    /// versions.txt's lines about them.
    versions: Vec<String>,
    /// Names of the KVM test binaries in the initramfs (none when given one).
    tests: Vec<String>,
}

/// Fetches, builds and packs the guest's image into `work`.
fn build_image(s: &Settings, work: &mut Work) -> Result<Image> {
    if !host::have("cc") {
        host::apt_install(&["gcc", "libc6-dev"])?;
    }
    let debs = work.timed("fetch", |w| debs::fetch(w, &s.cache))?;
    let bins = work.timed("build", |_| binaries::build(&s.root))?;
    let dir = work.dir.clone();
    let initrd = work.timed("initramfs", |_| {
        initramfs::build(&s.root, &dir, &debs, &bins)
    })?;
    Ok(Image {
        kernel: debs.vmlinuz.clone(),
        initrd,
        busybox: debs.busybox.clone(),
        versions: vec![
            format!("kernel {}", debs.kernel_deb),
            format!("busybox {}", debs.busybox_deb),
        ],
        tests: bins.tests.iter().map(|t| binaries::test_name(t)).collect(),
    })
}

/// The initramfs `initrd` with `archives` appended (the kernel unpacks
/// concatenated newc archives, later files win), in `work`.
fn with_archives(work: &Path, initrd: &Path, archives: &[PathBuf]) -> Result<PathBuf> {
    if archives.is_empty() {
        return Ok(initrd.to_path_buf());
    }
    let out = work.join("initrd-extra.cpio");
    let mut bytes =
        std::fs::read(initrd).with_context(|| format!("cannot read {}", initrd.display()))?;
    for a in archives {
        bytes.extend(std::fs::read(a).with_context(|| format!("cannot read {}", a.display()))?);
    }
    std::fs::write(&out, bytes)?;
    Ok(out)
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
            initrd: initrd.clone(),
            busybox: debs::cached_busybox(&s.cache)?,
            versions: vec![format!(
                "kernel {}",
                kernel.file_name().unwrap_or_default().to_string_lossy()
            )],
            tests: Vec::new(),
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
            let initrd = with_archives(&work.dir, &image.initrd, &s.extra_cpio)?;
            versions.push(format!("qemu {}", qemu::Qemu::version(&binary)?));
            let q = qemu::Qemu {
                binary,
                smp: s.smp,
                mem_mib: s.mem_mib,
                wedge_s: s.wedge_s,
                kernel: image.kernel.clone(),
                initrd,
                monitor: work.dir.join("monitor.sock"),
            };
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
                bochs::Bochs::ata_archive(&image.kernel, &image.busybox, &run)
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
            versions = b.versions(&args.kernel_args);
            (Box::new(b), timeout.unwrap_or(3600))
        }
    };
    let guest = boot::GuestArgs {
        pass: pass.into(),
        steps: args.steps.as_ref().map(|s| s.join(",")),
        iterations: args.iterations,
        extra: s.kernel_args.clone(),
    };
    let new = work.dir.join("results.new");
    work.timed("boot", |w| {
        boot::boot(w, emu.as_mut(), &guest, timeout, &new, &stop)
    })?;
    let expect = if args.steps.is_some() {
        Expect::Custom
    } else {
        Expect::named(pass).unwrap_or(Expect::Custom)
    };
    let results = s.results(args);
    collect(&mut work, &new, &results, expect, &versions, &image.tests)?;
    emu.collect(&results)?;
    std::fs::write(
        results.join("timings.txt"),
        std::fs::read_to_string(work.dir.join("timings.txt")).unwrap_or_default()
            + &format!("total {}\n", work.total_s()),
    )?;
    log(format!("results in {}", results.display()));
    let mut verdict = Verdict::Passed;
    if !args.no_verify {
        verdict = print_verdict(expect, &results);
    }
    if args.update_docs {
        if let Err(e) = update_docs(s, args, &results) {
            eprintln!("lab: error: {e:#}");
            verdict = Verdict::Failed;
        }
    }
    Ok(verdict)
}

/// Moves the merged results `new` to `results` with what the host knows:
/// the console, versions, wall times so far, warnings, the pass and the
/// test binaries the guest had.
fn collect(
    work: &mut Work,
    new: &Path,
    results: &Path,
    expect: Expect,
    versions: &[String],
    tests: &[String],
) -> Result<()> {
    use std::fs;
    let _ = fs::copy(work.dir.join("console.log"), new.join("console.log"));
    fs::write(new.join("versions.txt"), versions.join("\n") + "\n")?;
    let _ = fs::copy(work.dir.join("timings.txt"), new.join("timings.txt"));
    if !new.join("steps.tsv").is_file() {
        work.warn("no result archive on the output disk".into());
    }
    let w: String = work.warnings.iter().map(|w| format!("{w}\n")).collect();
    fs::write(new.join("warnings.txt"), w)?;
    fs::write(new.join("pass.txt"), format!("{}\n", expect.name()))?;
    if !tests.is_empty() {
        fs::write(new.join("test-binaries.txt"), tests.join("\n") + "\n")?;
    }
    let _ = fs::remove_dir_all(results);
    if let Some(p) = results.parent() {
        fs::create_dir_all(p)?;
    }
    fs::rename(new, results)
        .with_context(|| format!("cannot move {} to {}", new.display(), results.display()))?;
    for e in fs::read_dir(&work.dir)?.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        if (n.starts_with("out-") && n.ends_with(".img"))
            || (n.starts_with("console-") && n.ends_with(".log"))
            || n == "initrd.cpio"
            || n == "initrd-extra.cpio"
        {
            let _ = fs::remove_file(e.path());
        }
    }
    Ok(())
}

/// The docs' table from `results`: docs/lab.md for QEMU (beside the same
/// sweep on this machine), docs/lab-intel.md for Bochs.
fn update_docs(s: &Settings, args: &Args, results: &Path) -> Result<()> {
    let load = |p: &Path| ipivmm::results::Document::load(p).map_err(anyhow::Error::msg);
    match args.emulator {
        EmulatorKind::Qemu => {
            let lab = load(&results.join("runs/sweep.json"))?;
            let host_json = results.join("host-sweep.json");
            // The same matrix on this machine (PV is skipped where hypercalls cannot run).
            let ok = Command::new(s.root.join("target/release/ipivmm"))
                .args([
                    "sweep",
                    "--irqchip",
                    "kernel,split,user",
                    "--apic",
                    "xapic,x2apic",
                ])
                .args([
                    "--ipi",
                    "icr,pv",
                    "--workload",
                    "pingpong",
                    "--iterations",
                    "30",
                ])
                .args(["--warmup", "3", "-q", "--json"])
                .arg(&host_json)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|st| st.success());
            if !ok {
                log(format!(
                    "table: the host sweep reported failures (see {})",
                    host_json.display()
                ));
            }
            let here = load(&host_json)?;
            let params =
                std::fs::read_to_string(results.join("module-params.txt")).unwrap_or_default();
            let npt = params
                .lines()
                .find(|l| l.starts_with("kvm_amd.npt="))
                .map(|l| l.chars().take("kvm_amd.npt=".len() + 1).collect::<String>())
                .unwrap_or_default();
            let host_of = |d: &ipivmm::results::Document| {
                d.host.as_ref().map_or_else(
                    || {
                        (
                            "unknown".to_string(),
                            "unknown".to_string(),
                            "unknown".to_string(),
                        )
                    },
                    |h| {
                        (
                            h.kernel_release.clone(),
                            h.cpu_model.clone(),
                            h.backend.to_string(),
                        )
                    },
                )
            };
            let (gk, gcpu, _) = host_of(&lab);
            let (hk, _, hb) = host_of(&here);
            let mut lines = vec![
                format!(
                    "Ping-pong, 2 vCPUs, spinning target, 30 round trips (`cargo xtask lab quick --update-docs`, {});",
                    tables::today()
                ),
                format!("guest: {gk} on {gcpu}, {npt};"),
                format!("host: {hk}, {hb}."),
                String::new(),
            ];
            lines.extend(tables::lab_table(
                &[&lab, &here],
                ipivmm::Workload::Pingpong,
            ));
            let doc = s.root.join("docs/lab.md");
            tables::update_doc(&doc, "lab-table", &lines)?;
            log(format!("table: updated {}", doc.display()));
        }
        EmulatorKind::Bochs => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(results.join("runs"))
                .with_context(|| format!("no runs in {}", results.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            let docs = files.iter().map(|f| load(f)).collect::<Result<Vec<_>>>()?;
            let docs: Vec<&ipivmm::results::Document> = docs.iter().collect();
            let doc = s.root.join("docs/lab-intel.md");
            tables::update_doc(&doc, "intel-table", &tables::intel_table(&docs))?;
            log(format!("table: updated {}", doc.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        lab: Args,
    }

    fn parse(a: &[&str]) -> Result<Args> {
        let mut args = Cli::try_parse_from(std::iter::once("lab").chain(a.iter().copied()))?.lab;
        absorb_kernel_args(&mut args)?;
        Ok(args)
    }

    #[test]
    fn the_old_command_lines_parse() {
        let a = parse(&[
            "quick",
            "--steps",
            "host,tests",
            "--iterations",
            "5",
            "--update-docs",
        ])
        .unwrap();
        assert_eq!(a.action, Action::Quick);
        assert_eq!(
            a.steps.as_deref(),
            Some(&["host".to_string(), "tests".into()][..])
        );
        assert!(a.update_docs && a.iterations == Some(5));
        assert!(parse(&["quick", "--steps", "host,nosuch"]).is_err());
        let a = parse(&[
            "--emulator",
            "bochs",
            "--bochs",
            "2.7",
            "--cpio",
            "x.cpio",
            "--",
            "lab.steps=host,extra",
            "lab.matrix=10",
            "lab.iterations=3",
        ])
        .unwrap();
        assert_eq!(
            (a.emulator, a.bochs),
            (EmulatorKind::Bochs, bochs::Version::V2_7)
        );
        assert_eq!(
            a.steps.as_ref().map(|s| s.join(",")).as_deref(),
            Some("host,extra")
        );
        assert_eq!(
            (a.iterations, a.kernel_args.as_slice()),
            (Some(3), &["lab.matrix=10".to_string()][..])
        );
        assert!(parse(&["--", "lab.steps=bogus"]).is_err());
        assert_eq!(
            parse(&["--", "lab.pass=full"]).unwrap().action,
            Action::Full
        );
        assert!(parse(&["clean", "--cache"]).unwrap().cache);
        assert!(
            parse(&["--initrd", "x"]).is_err(),
            "--initrd needs --kernel"
        );
    }

    #[test]
    fn steps_are_the_guests() {
        let init = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/lab/init.sh"
        ))
        .unwrap();
        // The cases of init.sh's `for s in $(echo "$STEPS" ...)` loop.
        let block = init
            .split("for s in $(echo \"$STEPS\"")
            .nth(1)
            .and_then(|b| b.split("esac").next())
            .expect("init.sh's lab.steps loop");
        let mut cases: Vec<&str> = block
            .lines()
            .filter_map(|l| l.trim_start().split_once(") "))
            .map(|(c, _)| c)
            .filter(|c| !c.starts_with('*') && !c.contains(' ') && !c.starts_with("case"))
            .collect();
        cases.sort_unstable();
        let mut ours = STEPS.to_vec();
        ours.sort_unstable();
        assert_eq!(cases, ours);
    }
}
