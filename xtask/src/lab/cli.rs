//! `cargo xtask lab`'s command line: what it does, on which emulator, with
//! which options (the same as the old scripts/lab.sh and
//! scripts/lab/bochs.sh took), and the guest kernel arguments that name them.
use super::bochs;
use super::report::Part;
use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use std::path::PathBuf;

/// The steps `--steps` may name (init.sh's `lab.steps=` cases; a test keeps
/// the two lists the same).
pub const STEPS: &[&str] = &[
    "host",
    "sweep",
    "kvm-paths",
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
  IPIVMM_LAB_CACHE  downloads and the emulator builds (QEMU 7.2, Bochs 3.0; default ~/.cache/ipivmm-lab)
  LAB_SMP           vCPUs of the emulated machine (2; --smp)
  LAB_MEM           its memory, MiB (2048)
  LAB_WEDGE_S       seconds without a guest heartbeat before a reboot (QEMU: 180)
  LAB_KERNEL_ARGS   guest kernel arguments (default loglevel=4; e.g. lab.wedge_at=sweep
                    wedges the first boot there, lab.panic_at=STEP panics it, lab.fail_at=STEP
                    fails the step: tests of the watchdog and resume)
  LAB_QEMU          the QEMU binary (default: the lab's, which scripts/lab/build-qemu.sh
                    builds once into the cache; qemu-system-x86_64: the system's)
  QEMU_PATCHES, QEMU_JOBS     passed to scripts/lab/build-qemu.sh
  LAB_EXTRA_CPIO    initramfs archives to append (space-separated; as --cpio)
  BOCHS_PATCHES, BOCHS_JOBS   passed to scripts/lab/build-bochs.sh (Bochs 3.0)
Exit status: 0 when every check passed, 1 when one failed, 2 on a usage or setup error.";

/// What `cargo xtask lab` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Host facts, the mode matrix (ping-pong + broadcast, icr/pv, APICv host/inhibit:
    /// plans/lab-sweep.toml), plans/kvm-paths.toml (each plan's TAP and JUnit checked), the KVM
    /// test binaries with every skip a failure, --apicv inhibit repeats, the host switches, an
    /// npt=0 reload with plans/lab-npt0.toml (CI runs this)
    Quick,
    /// Every workload, halted targets, the presets (plans/lab-full.toml), plans/kvm-paths.toml,
    /// repeats under load, the npt=0 pass with the tests again
    Full,
    /// Boot with everything loaded and drop to a shell on this terminal (QEMU)
    Shell,
    /// Only build the initramfs and print its path and the kernel's (for other emulators)
    Initrd,
    /// The AVIC pass: kvm_amd avic=1 on QEMU 7.2 with AVIC emulated (scripts/lab/build-qemu.sh), a
    /// boot per --parts, the AVIC checks; results in target/lab-avic/results/PART (docs/lab.md,
    /// "AVIC")
    Avic,
    /// The Linux pass: ipivmm boots a Linux guest (ipivmm's initramfs, guest-linux/) nested under
    /// kvm_amd avic=1, its workloads windowed by phase markers, AVIC on and off; results in
    /// target/lab-linux/results (docs/linux-guest.md). `-- lab.probe=boot,broadcast,workloads`.
    /// With --emulator bochs: kvm_intel, unicast and broadcast, APICv host and inhibit, IPIv on
    /// and off (`-- lab.vcpus=2,4`; docs/lab-intel.md, "Linux guests")
    Linux,
    /// Kernels compared across boots as a CI does it: kvm_amd avic=1 (the baseline) and avic=0
    /// booted alternately (5 boots), each recording with scripts/ci/kernel-gate.sh, then its
    /// judge: the baseline against itself never exits 1, avic=0 against it exits 1 on the counts;
    /// results in target/lab-crossboot/results (docs/lab.md, docs/ci.md)
    Crossboot,
    /// The three seed reports (shared/seeds/), one lab part each (`--seed`): seed 000 the Linux
    /// guest's broadcast and ebizzy, AVIC on and off (QEMU); seed 002 the IPIv smoke in both APIC
    /// modes and, with --kut, kvm-unit-tests' vmexit ipi (Bochs); seed 003 the two-socket
    /// topology part (QEMU); results in target/lab-seeds/SEED, their tables in docs/seeds.md
    /// (docs/lab.md, "The seeds")
    Seeds,
    /// Remove the lab's work directory (QEMU: target/lab and target/lab-avic; Bochs:
    /// target/lab-bochs); with --cache the downloads too
    Clean,
    /// Check a results tree again (--results; the pass it ran is in its pass.txt)
    Verify,
    /// Rewrite the docs' table from a results tree (QEMU: docs/lab.md, with the same sweep on
    /// this machine; an AVIC pass's matrix: docs/lab.md's AVIC table; Bochs: docs/lab-intel.md
    /// from every runs/*.json)
    Table,
}

/// A seed report of shared/seeds/ that `seeds` re-creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Seed {
    /// AVIC and all-but-self broadcasts (the QEMU lab's Linux guest)
    #[value(name = "000")]
    S000,
    /// IPI virtualization (the Intel lab, Bochs)
    #[value(name = "002")]
    S002,
    /// APICv and topology (the QEMU lab on two sockets)
    #[value(name = "003")]
    S003,
}

impl Seed {
    pub const ALL: [Seed; 3] = [Seed::S003, Seed::S002, Seed::S000];

    pub fn name(self) -> &'static str {
        match self {
            Seed::S000 => "000",
            Seed::S002 => "002",
            Seed::S003 => "003",
        }
    }
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
    /// Leave the KVM test binaries out of the initramfs (steps that run none of them: 81 MB less
    /// for the emulator to load; the tests, stress and extra steps' probes run them)
    #[arg(long)]
    pub no_test_binaries: bool,
    /// Iterations per run of the sweeps (repeats per APIC mode for inhibit) [avic: 20]
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
    /// QEMU: the emulated CPUs in this many sockets, each a NUMA node with its share of the
    /// memory (e.g. `avic --parts topology --sockets 2 --smp 4`)
    #[arg(long)]
    pub sockets: Option<u32>,
    /// Wall-clock limit of the pass, s [default: quick 1500, full 7200, shell 86400; Bochs 3600;
    /// avic 3600 per boot]
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Where the results go [default: target/lab/results, target/lab-bochs/results-VERSION,
    /// target/lab-avic/results (a directory per part)]
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Do not check the results (leave them for `verify`)
    #[arg(long)]
    pub no_verify: bool,
    /// The AVIC pass's boots, in this order [default: selftests,matrix,preset]
    #[arg(long, value_enum, value_delimiter = ',', help_heading = "AVIC")]
    pub parts: Option<Vec<Part>>,
    /// Bochs release: 2.7 (bookworm's package, no posted interrupts) or 3.0 (built from trixie's source, APICv)
    #[arg(long, value_enum, default_value_t, help_heading = "Bochs")]
    pub bochs: bochs::Version,
    /// The emulated CPU model [default: QEMU max; Bochs 2.7 broadwell_ult, 3.0 corei7_skylake_x];
    /// e.g. `--cpu max,-x2avic`: the AVIC pass with x2APIC guests on hybrid AVIC
    #[arg(long)]
    pub cpu: Option<String>,
    /// Bochs instructions per emulated second
    #[arg(long, default_value_t = 60_000_000, help_heading = "Bochs")]
    pub ips: u64,
    /// The guest kernel instead of the pinned Debian 6.1: a Debian linux-image .deb (its modules
    /// inside; scripts/lab/fetch-kernel.sh SUITE downloads one), or a bzImage with --modules; with
    /// --initrd, that initramfs's kernel (its modules beside it, as Debian's package has them)
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// The modules of a --kernel bzImage: `make modules_install INSTALL_MOD_PATH=DIR`'s DIR, or
    /// its lib/modules/RELEASE
    #[arg(long, requires = "kernel", conflicts_with = "initrd")]
    pub modules: Option<PathBuf>,
    /// Boot this initramfs instead of building one (`initrd` prints one); needs --kernel
    #[arg(long, requires = "kernel", help_heading = "Bochs")]
    pub initrd: Option<PathBuf>,
    /// Append this newc archive to the initramfs (repeatable): the kernel unpacks concatenated
    /// archives, later files win (e.g. scripts/lab/build-selftests.sh's, for the step extra)
    #[arg(long)]
    pub cpio: Vec<PathBuf>,
    /// With `seeds`: only these seeds' lab parts boot [default: 003,002,000, the shortest first]
    #[arg(
        long = "seed",
        value_enum,
        value_delimiter = ',',
        help_heading = "Seeds"
    )]
    pub seeds: Option<Vec<Seed>>,
    /// With `seeds`: boot nothing, make docs/seeds.md from the results the parts left
    #[arg(long, help_heading = "Seeds")]
    pub no_boot: bool,
    /// With `seeds`: a built kvm-unit-tests tree (its x86/vmexit.flat), for seed 002's
    /// `vmexit.flat ipi` rows in the Intel lab
    #[arg(long, help_heading = "Seeds")]
    pub kut: Option<PathBuf>,
    /// Guest kernel arguments after `--` (scripts/lab/init.sh reads lab.*=), e.g.
    /// `-- lab.matrix=10 lab.kvm=enable_apicv=0`; lab.pass=, lab.steps= and lab.iterations= are
    /// taken as the options they name
    #[arg(last = true)]
    pub kernel_args: Vec<String>,
}

/// Takes `lab.pass=`, `lab.steps=` and `lab.iterations=` out of the kernel
/// arguments into the options they name (the Bochs lab's command lines),
/// then refuses `--no-test-binaries` for a pass that runs them.
pub fn absorb_kernel_args(args: &mut Args) -> Result<()> {
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
    if args.no_test_binaries {
        let runs_them = |st: &String| st == "tests" || st == "stress";
        if args
            .steps
            .as_ref()
            .is_none_or(|st| st.iter().any(runs_them))
        {
            bail!("--no-test-binaries: this pass runs the test binaries (name --steps without tests and stress)");
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
        assert!(parse(&["quick", "--steps", "host,extra", "--no-test-binaries"]).is_ok());
        for tests in [
            &["quick", "--no-test-binaries"][..],
            &["--steps", "host,tests", "--no-test-binaries"],
        ] {
            assert!(parse(tests).is_err(), "{tests:?}");
        }
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
        let a = parse(&["avic", "--kernel", "bzImage", "--modules", "m"]).unwrap();
        assert_eq!(
            (a.kernel.as_deref(), a.modules.as_deref()),
            (Some("bzImage".as_ref()), Some("m".as_ref()))
        );
        assert!(
            parse(&["--modules", "m"]).is_err(),
            "--modules needs --kernel"
        );
    }

    #[test]
    fn the_avic_pass_takes_its_parts() {
        let a = parse(&["avic", "--parts", "matrix,preset", "--iterations", "5"]).unwrap();
        assert_eq!(a.action, Action::Avic);
        assert_eq!(a.parts.as_deref(), Some(&[Part::Matrix, Part::Preset][..]));
        assert_eq!(parse(&["avic"]).unwrap().parts, None);
        let a = parse(&[
            "avic",
            "--parts",
            "halt-polling,topology",
            "--sockets",
            "2",
            "--smp",
            "4",
        ])
        .unwrap();
        assert_eq!(
            a.parts.as_deref(),
            Some(
                &[
                    crate::lab::report::Part::HaltPolling,
                    crate::lab::report::Part::Topology
                ][..]
            )
        );
        assert_eq!((a.sockets, a.smp), (Some(2), Some(4)));
        assert_eq!(parse(&["crossboot"]).unwrap().action, Action::Crossboot);
        assert!(parse(&["avic", "--parts", "bogus"]).is_err());
    }

    /// The lab's command lines in the docs' sh blocks (`cargo xtask lab ...`,
    /// scripts/lab.sh and scripts/lab/avic.sh, which run it), without the
    /// environment before them and the comment after.
    fn documented() -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for doc in ["docs/lab.md", "docs/lab-intel.md"] {
            let text = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("..")
                    .join(doc),
            )
            .unwrap();
            let mut in_sh = false;
            for l in text.lines() {
                if l.starts_with("```") {
                    in_sh = l == "```sh";
                    continue;
                }
                if !in_sh {
                    continue;
                }
                let words: Vec<&str> = l
                    .split('#')
                    .next()
                    .unwrap_or_default()
                    .split_whitespace()
                    .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                    .collect();
                let args: Vec<String> = match words.as_slice() {
                    ["cargo", "xtask", "lab", rest @ ..] | ["scripts/lab.sh", rest @ ..] => {
                        rest.iter().map(|w| w.to_string()).collect()
                    }
                    ["scripts/lab/avic.sh", rest @ ..] => std::iter::once("avic".to_string())
                        .chain(rest.iter().map(|w| w.to_string()))
                        .collect(),
                    _ => continue,
                };
                out.push((format!("{doc}: {l}"), args));
            }
        }
        out
    }

    #[test]
    fn the_documented_command_lines_parse() {
        let lines = documented();
        assert!(
            lines
                .iter()
                .any(|(_, a)| a.first().is_some_and(|a| a == "avic")),
            "{lines:?}"
        );
        for (at, args) in lines {
            let args: Vec<&str> = args
                .iter()
                .map(String::as_str)
                .filter(|a| !a.starts_with('[')) // `clean [--cache]`
                .collect();
            if let Err(e) = parse(&args) {
                let help = e
                    .downcast_ref::<clap::Error>()
                    .is_some_and(|c| c.kind() == clap::error::ErrorKind::DisplayHelp);
                assert!(help, "{at}: {e}");
            }
        }
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
