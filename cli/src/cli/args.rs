//! The flags of every subcommand, parsed by clap into the library's types
//! (the mode parts parse themselves: `ipivmm_analysis::mode` derives clap's ValueEnum).
use crate::output::compare::Dimension;
use crate::output::dest::Request;
use crate::output::sink::{Command as SinkCommand, Sink};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ipivmm::{PayloadSource, VmConfig};
use ipivmm_analysis::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, TargetWait};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_host::module_switch::{parse_param_values, parse_settings, ModuleSetting};
use std::path::PathBuf;
use std::time::Duration;

/// Measure what inter-processor interrupts cost a KVM guest, and where the cost goes.
#[derive(Parser, Debug)]
#[command(name = "ipivmm", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Boot a VM, run an IPI workload in the guest and report per vCPU and phase.
    #[command(allow_negative_numbers = true)]
    Run(Box<RunArgs>),
    /// Run a mode x workload matrix side by side (or a preset re-creating a known experiment).
    #[command(allow_negative_numbers = true)]
    Sweep(Box<SweepArgs>),
    /// Show the host's CPU, KVM backend, APICv/AVIC/IPIv state, module parameters and KVM capabilities; switch them (--set, --restore).
    Host(HostArgs),
    /// Compare recorded results (--json files) side by side against a baseline, or two configurations live (--run A --run B); gate them (--fail-on-regression).
    Compare(CompareArgs),
    /// Measure this host's noise: recordings of one configuration, the drift between them, and how the gate does on an A/A and an injected-delay control.
    Calibrate(CalibrateArgs),
    /// Write a new guest payload crate (SDK included) and print how to build and run it.
    NewPayload(NewPayloadArgs),
    /// Run a plan (TOML: named runs and sweeps with their expectations) and print TAP; exit 0 all hold, 1 one fails, 4 none could be judged.
    Check(CheckArgs),
}

/// Flags of `ipivmm calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// `ipivmm run` flags of the configuration to calibrate on.
    #[arg(
        long = "run",
        value_name = "FLAGS",
        allow_hyphen_values = true,
        default_value = "--apic x2apic --target halt --iterations 200"
    )]
    pub run: String,
    /// Recordings (blocks of repeats, --pause apart), at least 2.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(2..=50))]
    pub recordings: u16,
    /// Repeats per recording, at least 2.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=200))]
    pub repeat: u16,
    /// Pause between recordings (e.g. 30s, 2m): files recorded apart drift more than back to back.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = parse_pause)]
    pub pause: Duration,
    /// The injected delay of the control, as a fraction of the first recording's p50.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.2, value_parser = parse_threshold)]
    pub inject: f64,
    /// Write the profile (JSON) here, for `compare --noise-profile FILE`.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print only the profile's summary.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_pause(s: &str) -> Result<Duration, String> {
    if s == "0" || s == "0s" {
        return Ok(Duration::ZERO);
    }
    match s.parse::<ipivmm::experiment::Budget>() {
        Ok(ipivmm::experiment::Budget::Time(d)) => Ok(d),
        _ => Err(format!(
            "'{s}' is not a pause: seconds (30s) or minutes (2m)"
        )),
    }
}

/// Flags of `ipivmm check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The plan (e.g. plans/kvm-paths.toml; docs/ci.md).
    pub plan: PathBuf,
    /// Also write the verdicts as JUnit XML to FILE (- for stdout; the TAP then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write each experiment's results (ipivmm.results/1 JSON) into DIR, one file per experiment.
    #[arg(long, value_name = "DIR")]
    pub json_dir: Option<PathBuf>,
    /// Do not name each experiment on stderr as it starts.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Flags of `ipivmm new-payload`.
#[derive(Args, Debug)]
pub struct NewPayloadArgs {
    /// Name of the payload: its cargo package and ELF (a letter, then letters, digits, '-', '_').
    pub name: String,
    /// Directory to create (must not exist or be empty); default: ./NAME.
    pub dir: Option<PathBuf>,
}

/// Where results go; each output is written whole or not at all. The flags
/// are the results sinks of `crate::output::sinks::ALL` that the command
/// takes (`Sink::help`), in the registry's order.
#[derive(Debug, Default, Clone)]
pub struct OutputArgs {
    /// Each sink given, with the path its flag named.
    pub given: Vec<(&'static Sink, Option<PathBuf>)>,
}

/// Expectations a CI gates on (docs/ci.md).
#[derive(Args, Debug, Default, Clone)]
pub struct GateArgs {
    /// An expectation on the results, e.g. 'exits_per_ipi < 1.5', 'kernel/x2apic/icr: icr_write_exits_per_ipi == 1 ± 0.01', 'vcpu1.guest.ipis_received >= 1000', 'ratio(cycles_per_operation_p50, kernel/x2apic/icr, kernel/xapic/icr) < 1' (repeatable). Exit 0 when all hold, 1 when one fails, 4 when none could be judged.
    #[arg(long = "expect", value_name = "EXPR", value_parser = parse_expectation)]
    pub expect: Vec<ipivmm_analysis::expect::Expectation>,
    /// Where the verdicts go (`--tap`, `--junit`: the verdict sinks).
    #[command(flatten)]
    pub verdicts: VerdictArgs,
}

/// The verdict sinks of `crate::output::sinks::ALL` a command was given
/// (each needs `--expect`).
#[derive(Debug, Default, Clone)]
pub struct VerdictArgs {
    /// Each sink given, with the path its flag named.
    pub given: Vec<(&'static Sink, Option<PathBuf>)>,
}

/// The `Args` of a set of sinks: their flags generated from the registry
/// for the subcommand being built (its name says which it is).
macro_rules! sink_args {
    ($t:ty, $verdicts:expr) => {
        impl clap::FromArgMatches for $t {
            fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
                Ok(Self {
                    given: crate::output::sinks::given(m, $verdicts),
                })
            }
            fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
                self.given = crate::output::sinks::given(m, $verdicts);
                Ok(())
            }
        }

        impl Args for $t {
            fn augment_args(cmd: clap::Command) -> clap::Command {
                match SinkCommand::named(cmd.get_name()) {
                    Some(c) => crate::output::sinks::add_args(cmd, c, $verdicts),
                    None => cmd,
                }
            }
            fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
                Self::augment_args(cmd)
            }
        }
    };
}
sink_args!(OutputArgs, false);
sink_args!(VerdictArgs, true);

impl OutputArgs {
    /// The outputs asked for, results and verdicts, to check.
    pub fn requests<'a>(&'a self, gate: Option<&'a GateArgs>) -> Vec<Request<'a>> {
        let verdicts = gate.map(|g| g.verdicts.given.as_slice()).unwrap_or(&[]);
        self.given
            .iter()
            .chain(verdicts)
            .map(|(sink, p)| Request {
                sink,
                path: p.as_deref(),
            })
            .collect()
    }
}

fn parse_expectation(s: &str) -> Result<ipivmm_analysis::expect::Expectation, String> {
    s.parse()
        .map_err(|e: ipivmm_analysis::expect::ParseError| e.problem)
}

/// Levers every run of a command gets.
#[derive(Args, Debug, Default, Clone)]
pub struct LeverArgs {
    /// The levers (one flag per row of `ipivmm_analysis::mode::lever_table`).
    #[command(flatten)]
    pub set: crate::cli::lever_flags::LeverFlags,
    /// Do not count kvm:* tracepoints (they need root and tracefs).
    #[arg(long)]
    pub no_tracepoints: bool,
    /// Mount tracefs at /sys/kernel/tracing if it is not mounted (root).
    #[arg(long)]
    pub mount_tracefs: bool,
    /// How exits are counted by reason: bpf (in the kernel, per vCPU thread: host time per reason, nothing per exit leaves the kernel; the sampler where BPF cannot load), sampled (kvm_exit/kvm_entry into a ring buffer: the raw event trace), counters (one filtered counter per reason: for comparison), off.
    #[arg(long, value_name = "HOW", default_value = "bpf")]
    pub exit_reasons: ipivmm_analysis::mode::ExitReasons,
    /// Also count the context tracepoints (kvm_entry, kvm_mmio, kvm_eoi, kvm_inj_virq, ...); off by default, as each adds to every context switch of a vCPU thread.
    #[arg(long)]
    pub context_events: bool,
}

impl LeverArgs {
    /// Apply the levers to `c`.
    pub fn apply(&self, c: &mut VmConfig) {
        c.levers.overlay(&self.set.0);
        c.tracepoints = !self.no_tracepoints;
        c.mount_tracefs = self.mount_tracefs;
        c.exit_reasons = self.exit_reasons;
        c.context_events |= self.context_events;
    }
}

/// Flags of `ipivmm compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Results files (ipivmm.results/1 JSON); with --by file the first is the baseline unless --baseline names others. One file gives a summary.
    #[arg(value_name = "FILE", required_unless_present = "run")]
    pub files: Vec<PathBuf>,
    /// What the columns are: one per file (hosts, kernels, dates), per mode label, per vCPU count, or per value of one mode part (target wait, irqchip, APIC mode, IPI path, APICv request, host setting); the other dimensions key the rows.
    #[arg(long, value_enum, default_value_t = Dimension::File)]
    pub by: Dimension,
    /// The baseline: with --by file a results file, repeatable for several recordings of the baseline (their spread then measures the drift between recordings; files not among FILE are read too); else the column value (a mode label, vCPU count...). Default: the first.
    #[arg(long, value_name = "VALUE")]
    pub baseline: Vec<String>,
    /// Compare this phase of every run instead of the one each run's headline read (its `--phase`, else the measured-phase rule); a run without it compares nothing.
    #[arg(long, value_name = "NAME")]
    pub phase: Option<String>,
    /// The smallest change of a latency figure that matters, a fraction: regressions are at least this, equivalence within it.
    #[arg(long, default_value_t = ipivmm_analysis::gate::Policy::DEFAULT.threshold, value_parser = parse_threshold)]
    pub threshold: f64,
    /// The same for counts (exits, ICR-write exits per operation or IPI), of the baseline or of one count, whichever is larger.
    #[arg(long, default_value_t = crate::output::compare::DEFAULT_COUNT_TOLERANCE, value_parser = parse_count_tolerance)]
    pub count_tolerance: f64,
    /// The figures the gate judges, the whole set (default: p50,exits,icr-exits: cycles per operation p50 and exits and ICR-write exits per IPI): p50, p99, us, cycles-per-ipi, exits, exits-per-op, icr-exits, icr-exits-per-op, or a metric key.
    #[arg(long = "gate", value_name = "LIST", value_delimiter = ',', value_parser = parse_metric)]
    pub gate: Vec<Metric>,
    /// A host noise profile (`ipivmm calibrate --output FILE`): the gate adds its drift between recordings to a comparison of one baseline file.
    #[arg(long, value_name = "FILE")]
    pub noise_profile: Option<PathBuf>,
    /// Use the noise profile even where it does not match the files (another host, kernel, KVM parameters, configuration, ipivmm version or month): each difference is still said.
    #[arg(long, requires = "noise_profile")]
    pub noise_profile_any: bool,
    /// Keep repeats measured on a busy host (other processes above 25% of the CPU, or steal above 5%) for latency figures too, for a runner that is always busy; the verdict says so. Counts keep them always: load cannot change a count.
    #[arg(long)]
    pub keep_busy: bool,
    /// Run and compare live instead of reading files: `ipivmm run` flags, given twice (the baseline, then the new side); rounds of one run each, in random order, until the gate decides or --budget is spent.
    #[arg(long = "run", value_name = "FLAGS", allow_hyphen_values = true, conflicts_with_all = ["files", "by", "phase", "noise_profile"])]
    pub run: Vec<String>,
    /// The seed of a live comparison's order (--run): which side runs first; printed at the end, so a comparison can be replayed (default: from the clock).
    #[arg(long, value_name = "N", requires = "run")]
    pub seed: Option<u64>,
    /// The most a live comparison (--run) may take: minutes (5m), seconds (300s) or VMs (40vms).
    #[arg(long, value_name = "BUDGET", default_value = "5m", value_parser = parse_budget)]
    pub budget: ipivmm::experiment::Budget,
    /// A gate for CI: exit 1 on a regression (or a side whose runs failed), 0 when every gated figure is equivalent or not slower, 4 when undecided, 3 when nothing was compared (docs/ci.md, docs/statistics.md).
    #[arg(long)]
    pub fail_on_regression: bool,
    /// Outputs.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Do not print the comparison.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_metric(s: &str) -> Result<Metric, String> {
    Metric::parse(s).ok_or_else(|| {
        format!("'{s}' is not a figure: p50, p99, us, cycles-per-ipi, exits, exits-per-op, icr-exits, icr-exits-per-op, ipis, observer, or a metric key")
    })
}

fn parse_budget(s: &str) -> Result<ipivmm::experiment::Budget, String> {
    s.parse()
}

/// Most repeats a command runs per configuration.
pub const MAX_REPEATS: u32 = 1000;

/// `--repeat N` or `--repeat auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepeatArg {
    /// N repeats.
    Count(u32),
    /// As many as the gate's threshold needs at this host's spread.
    Auto,
}

fn parse_repeat(s: &str) -> Result<RepeatArg, String> {
    if s == "auto" {
        return Ok(RepeatArg::Auto);
    }
    match s.parse::<u32>() {
        Ok(n) if (1..=MAX_REPEATS).contains(&n) => Ok(RepeatArg::Count(n)),
        _ => Err(format!(
            "'{s}' is not a repeat count between 1 and {MAX_REPEATS}, nor auto (e.g. --repeat 5)"
        )),
    }
}

/// The repeats asked for, or the default, and which it was.
pub fn repeat_choice(asked: Option<RepeatArg>) -> crate::output::repeats::RepeatChoice {
    crate::output::repeats::RepeatChoice {
        repeats: match asked {
            Some(RepeatArg::Count(n)) => n,
            Some(RepeatArg::Auto) => MAX_REPEATS,
            None => ipivmm_analysis::results::repeats::ConfigurationStats::DEFAULT_REPEATS,
        },
        default: asked.is_none(),
        auto: asked == Some(RepeatArg::Auto),
    }
}

fn parse_count_tolerance(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..10.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a fraction between 0 and 10 (e.g. 0.05 for 5%; 0 for exact counts)"
        )),
    }
}

fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 10.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a fraction between 0 and 10 (e.g. 0.1 for 10%)"
        )),
    }
}

/// The seed experiments `sweep --preset` re-creates (library data).
use crate::sweep::presets::Preset;

/// Flags of `ipivmm sweep`. Lists are comma-separated; each defaults to every value.
#[derive(Args, Debug)]
pub struct SweepArgs {
    /// A preset experiment (explicit flags below still apply).
    #[arg(long)]
    pub preset: Option<Preset>,
    /// Interrupt controllers to sweep.
    #[arg(long, value_delimiter = ',')]
    pub irqchip: Option<Vec<Irqchip>>,
    /// APIC modes to sweep.
    #[arg(long, value_delimiter = ',')]
    pub apic: Option<Vec<ApicMode>>,
    /// IPI paths to sweep.
    #[arg(long, value_delimiter = ',')]
    pub ipi: Option<Vec<IpiPath>>,
    /// APICv requests to sweep.
    #[arg(long, value_delimiter = ',')]
    pub apicv: Option<Vec<ApicvRequest>>,
    /// Workloads to sweep: the built-in payload's, or with --kernel a Linux guest's, linux:NAME (docs/linux-guest.md).
    #[arg(long, value_name = "NAMES", value_delimiter = ',', value_parser = crate::cli::linux_args::parse_workload)]
    pub workload: Option<Vec<crate::cli::linux_args::WorkloadArg>>,
    /// The Linux guest of the linux:NAME workloads.
    #[command(flatten)]
    pub linux: crate::cli::linux_args::LinuxArgs,
    /// vCPUs per VM: a count, a list (2,4,8) or a powers-of-two range (2..1024 = 2,4,8,...,1024; 2..180 ends with 180); xAPIC rows above 255 are skipped.
    #[arg(long, value_name = "COUNTS", value_parser = parse_vcpu_counts)]
    pub vcpus: Option<VcpuCounts>,
    /// How IPI targets wait.
    #[arg(long)]
    pub target: Option<TargetWait>,
    /// Measured iterations per run.
    #[arg(long, default_value_t = 100)]
    pub iterations: u64,
    /// Warm-up iterations per run.
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    /// The phase the headline, metrics and expectations read (a custom payload's `cpuid`, say); default: the phase named `measure`, else the counted phase with the most samples (docs/results-schema.md). A row without that phase shows no figures.
    #[arg(long, value_name = "NAME")]
    pub phase: Option<String>,
    /// Watchdog per run, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Sweep a host setting: reload the vendor module with each value in turn and run the whole plan under it, e.g. kvm_amd.avic=0,1 (root, no other VM; the original comes back at the end, on error and on Ctrl-C).
    #[arg(long, value_name = "MODULE.PARAM=V1,V2", value_parser = parse_host_param)]
    pub host_param: Option<HostParamValues>,
    /// Levers of every run.
    #[command(flatten)]
    pub levers: LeverArgs,
    /// Independent VMs per combination, interleaved across the combinations (A B A B ..., so drift hits all alike): the figures are their median with a 95% interval (docs/statistics.md); a repeat on a busy host is kept and marked (the gate leaves it out; auto runs more). Default 5 (1..=1000), or auto: as many as the gate's 10% threshold needs at this host's spread, within --budget.
    #[arg(long, value_name = "N", value_parser = parse_repeat)]
    pub repeat: Option<RepeatArg>,
    /// With --repeat auto: the most the repeats may spend, minutes (10m), seconds (600s) or VMs (200vms).
    #[arg(long, value_name = "BUDGET", default_value = "10m", value_parser = parse_budget)]
    pub budget: ipivmm::experiment::Budget,
    /// Pairs of runs (counters detached, attached) measuring what counting costs, on the first combination; 0: do not measure (at most 1000).
    #[arg(long, value_name = "PAIRS", default_value_t = 1, value_parser = parse_observer_pairs)]
    pub observer_effect: u32,
    /// Print the plan (every row, the repeats, every skip with its reason) and an estimated time from two short calibration runs of the first row; run nothing else.
    #[arg(long)]
    pub dry_run: bool,
    /// Also run rows this host cannot answer (more spinning vCPUs than host CPUs), which are otherwise skipped with the reason.
    #[arg(long)]
    pub force: bool,
    /// Outputs.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Expectations.
    #[command(flatten)]
    pub gate: GateArgs,
    /// No tables, no progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Every column of the tables, however wide (default: fit 120 columns, naming what was left out).
    #[arg(long)]
    pub wide: bool,
}

/// Flags of `ipivmm host`.
#[derive(Args, Debug)]
pub struct HostArgs {
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Reload the vendor module with these parameters, e.g. kvm_amd.avic=1 or kvm_intel.enable_apicv=N,kvm_intel.enable_ipiv=N (root, no VM running); the original values stay recorded until --restore.
    #[arg(long, value_name = "LIST", value_parser = parse_settings_list, conflicts_with = "restore")]
    pub set: Option<SettingsList>,
    /// Put back the module parameters recorded by --set, or by a sweep that did not finish (/run/ipivmm/module-switch.json).
    #[arg(long)]
    pub restore: bool,
    /// KVM device node.
    #[arg(long, default_value = "/dev/kvm")]
    pub kvm_device: PathBuf,
}

/// Flags of `ipivmm run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Number of vCPUs (up to KVM_CAP_MAX_VCPUS, at most 1024, in x2APIC mode; at most 255 in xAPIC mode).
    #[arg(long, default_value_t = 2)]
    pub vcpus: usize,
    /// Guest APIC mode: xapic (MMIO ICR at 0xFEE00300) or x2apic (WRMSR 0x830).
    #[arg(long, default_value = "xapic")]
    pub apic: ApicMode,
    /// Interrupt controller: kernel (KVM_CREATE_IRQCHIP), split (LAPIC in KVM), user (ipivmm's model).
    #[arg(long, default_value = "kernel")]
    pub irqchip: Irqchip,
    /// IPI path: icr (ICR writes) or pv (KVM_HC_SEND_IPI hypercall).
    #[arg(long, default_value = "icr")]
    pub ipi: IpiPath,
    /// Workload: one of the built-in payload's (default pingpong; docs/modes.md), or with --kernel a Linux guest's, linux:NAME (docs/linux-guest.md).
    #[arg(long, value_name = "NAME", value_parser = crate::cli::linux_args::parse_workload)]
    pub workload: Option<crate::cli::linux_args::WorkloadArg>,
    /// How IPI targets wait between IPIs: spin (interrupts on, no exit), halt (sti; hlt, and each IPI waits until the target is halted: the wake-up path) or halt-immediate (the next IPI right after the ack).
    #[arg(long, default_value = "spin")]
    pub target: TargetWait,
    /// With --target halt: how long a sender waits after the target published that it is halting (ns).
    #[arg(long, value_name = "NS", default_value_t = 20_000)]
    pub halt_settle_ns: u64,
    /// The phase the headline, metrics and expectations read (a custom payload's `cpuid`, say); default: the phase named `measure`, else the counted phase with the most samples (docs/results-schema.md). A run without that phase fails.
    #[arg(long, value_name = "NAME")]
    pub phase: Option<String>,
    /// Busy-wait N TSC cycles in every handler of the measured vector on a receiving vCPU, before the IPI counts as received: a round trip grows by N, a known effect to check a comparison against (docs/statistics.md); at most 10000000.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub inject_delay_cycles: u64,
    /// Measured iterations (IPIs sent by each sender).
    #[arg(long, default_value_t = 1000)]
    pub iterations: u64,
    /// Warm-up iterations before the measured phase (not in the latency figures).
    #[arg(long, default_value_t = 100)]
    pub warmup: u64,
    /// Vector of the measured IPIs (0x20..=0xfe; decimal or 0x-hex).
    #[arg(long, default_value = "0x40", value_parser = parse_u8)]
    pub vector: u8,
    /// Guest RAM in MiB (default: 64 up to 2 vCPUs, plus 64 KiB of stack per further vCPU: 83 at 300, 128 at 1024).
    #[arg(long)]
    pub memory: Option<u64>,
    /// Watchdog: stop the run after this many seconds and report what each vCPU was doing.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Run this x86-64 ELF payload instead of the built-in one (see docs/custom-payloads.md).
    #[arg(long, conflicts_with = "kernel")]
    pub payload: Option<PathBuf>,
    /// A Linux guest instead of a payload.
    #[command(flatten)]
    pub linux: crate::cli::linux_args::LinuxArgs,
    /// Most guest-driven data the host keeps for the run, MiB: phases, records, samples and captured serial output of all vCPUs together; a guest that sends more stops the run (status over_budget), keeping what was measured.
    #[arg(long, value_name = "MIB", default_value_t = 512)]
    pub guest_memory_budget: u64,
    /// Workload parameter for the payload (BootInfo.params), repeatable, at most 8.
    #[arg(long = "param", value_parser = parse_u64)]
    pub params: Vec<u64>,
    /// Outputs.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Expectations.
    #[command(flatten)]
    pub gate: GateArgs,
    /// Where guest serial output goes: stdout, log (with --verbose), none.
    #[arg(long, default_value = "stdout")]
    pub serial: SerialArg,
    /// Do not print the table.
    #[arg(long, short)]
    pub quiet: bool,
    /// Every column and every vCPU's row of the tables (default: fit 120 columns, many vCPUs collapsed to the first ones and the outliers).
    #[arg(long)]
    pub wide: bool,
    /// Levers.
    #[command(flatten)]
    pub levers: LeverArgs,
    /// APICv/AVIC for this VM: host (module parameters decide) or inhibit (a vendor lever; a no-op where the host has none).
    #[arg(long, default_value = "host")]
    pub apicv: ApicvRequest,
    /// KVM device node.
    #[arg(long, default_value = "/dev/kvm")]
    pub kvm_device: PathBuf,
    /// Also measure what counting costs: N pairs of runs (at most 1000), with every counter detached and attached, before the run.
    #[arg(long, value_name = "PAIRS", default_value_t = 0, value_parser = parse_observer_pairs)]
    pub observer_effect: u32,
    /// Independent VMs to run, one after the other: the figures are their median with a 95% interval and spread, and what a comparison at this many repeats can detect (docs/statistics.md); every repeat is kept in the JSON (one on a busy host marked: the gate leaves it out; auto runs more). Default 5 (1..=1000), or auto: as many as the gate's 10% threshold needs at this host's spread, within --budget (to record a baseline).
    #[arg(long, value_name = "N", value_parser = parse_repeat)]
    pub repeat: Option<RepeatArg>,
    /// With --repeat auto: the most the repeats may spend, minutes (10m), seconds (600s) or VMs (200vms).
    #[arg(long, value_name = "BUDGET", default_value = "10m", value_parser = parse_budget)]
    pub budget: ipivmm::experiment::Budget,
    /// Log what ipivmm does, with timings (start-up, first guest message).
    #[arg(long, short)]
    pub verbose: bool,
    /// Check everything a run checks (flags, payload, outputs, /dev/kvm, host, mode), print the header, build no VM.
    #[arg(long)]
    pub dry_run: bool,
}

/// Where `run` sends the guest's serial output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SerialArg {
    /// This process's stdout (stderr when JSON or CSV go to stdout).
    Stdout,
    /// The log (shown with --verbose).
    Log,
    /// Nowhere (the report keeps the tail).
    None,
}

/// A `host --set` list (a newtype: clap treats a bare Vec as repeated values).
#[derive(Clone, Debug)]
pub struct SettingsList(pub Vec<ModuleSetting>);

fn parse_settings_list(s: &str) -> Result<SettingsList, String> {
    parse_settings(s)
        .map(SettingsList)
        .map_err(|e| e.to_string())
}

/// The values of `sweep --host-param`, one setting each.
#[derive(Clone, Debug)]
pub struct HostParamValues(pub Vec<ModuleSetting>);

fn parse_host_param(s: &str) -> Result<HostParamValues, String> {
    parse_param_values(s)
        .map(HostParamValues)
        .map_err(|e| e.to_string())
}

/// `sweep --vcpus` counts (a newtype: clap treats a bare Vec as repeated values).
#[derive(Clone, Debug)]
pub struct VcpuCounts(pub Vec<usize>);

fn parse_vcpu_counts(s: &str) -> Result<VcpuCounts, String> {
    crate::sweep::vcpus::parse(s).map(VcpuCounts)
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("'{s}' is not a number: {e}"))
}

/// `--observer-effect PAIRS`: each pair is two whole runs, so the count is
/// bounded (ipivmm::experiment::rounds::Rounds::MAX_OBSERVER_PAIRS).
fn parse_observer_pairs(s: &str) -> Result<u32, String> {
    let max = ipivmm::experiment::rounds::Rounds::MAX_OBSERVER_PAIRS;
    let v = parse_u64(s)?;
    u32::try_from(v).ok().filter(|v| *v <= max).ok_or_else(|| {
        format!(
            "{s} pairs: at most {max} (each pair is two whole runs; 0 turns the measurement off)"
        )
    })
}

fn parse_u8(s: &str) -> Result<u8, String> {
    let v = parse_u64(s)?;
    u8::try_from(v).map_err(|_| format!("'{s}' does not fit in a byte"))
}

impl RunArgs {
    /// The VM configuration these flags describe.
    pub fn to_config(&self) -> Result<VmConfig, String> {
        if self.params.len() > 8 {
            return Err(format!(
                "--param given {} times: at most 8",
                self.params.len()
            ));
        }
        let mut params = [0u64; 8];
        params[..self.params.len()].copy_from_slice(&self.params);
        let memory_bytes = match self.memory {
            None => ipivmm::VmConfig::default_memory_bytes(self.vcpus),
            Some(mib) => mib.checked_mul(1 << 20).ok_or_else(|| {
                // The MiB as typed: a byte count saturated here would misquote it.
                let l = ipivmm::VmConfig::min_memory_bytes(self.vcpus).div_ceil(1 << 20);
                let h = ipivmm::VmConfig::MAX_MEMORY_BYTES >> 20;
                format!("--memory {mib} MiB: must be between {l} and {h} MiB")
            })?,
        };
        let guest_memory_budget =
            self.guest_memory_budget
                .checked_mul(1 << 20)
                .ok_or_else(|| {
                    format!(
                        "--guest-memory-budget {} MiB: must be between 1 and {} MiB",
                        self.guest_memory_budget,
                        ipivmm::VmConfig::MAX_GUEST_MEMORY_BUDGET_MIB
                    )
                })?;
        let mut c = VmConfig {
            vcpus: self.vcpus,
            memory_bytes,
            guest_memory_budget,
            irqchip: self.irqchip,
            apic: self.apic,
            ipi: self.ipi,
            target_wait: self.target,
            halt_settle: Duration::from_nanos(self.halt_settle_ns),
            ipi_delay_cycles: self.inject_delay_cycles,
            headline_phase: self.phase.clone(),
            iterations: self.iterations,
            warmup: self.warmup,
            ipi_vector: self.vector,
            params,
            timeout: Duration::from_secs(self.timeout),
            payload: self
                .payload
                .clone()
                .map_or(PayloadSource::Builtin, PayloadSource::File),
            kvm_device: self.kvm_device.clone(),
            apicv: self.apicv,
            ..VmConfig::default()
        };
        self.levers.apply(&mut c);
        self.linux
            .apply(&mut c, self.workload, self.memory.is_some())?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_analysis::mode::Workload;

    fn run_args(flags: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut argv = vec!["ipivmm", "run"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).map(|c| match c.command {
            Command::Run(a) => *a,
            _ => unreachable!("run was parsed"),
        })
    }

    #[test]
    fn run_flags_become_a_config() {
        let c = run_args(&[
            "--vcpus",
            "4",
            "--apic",
            "x2apic",
            "--irqchip",
            "split",
            "--ipi",
            "pv",
            "--workload",
            "all-to-all",
            "--target",
            "halt",
            "--disable-exits",
            "hlt,pause",
            "--halt-poll-ns",
            "0",
            "--apicv",
            "inhibit",
            "--pin",
            "0-3",
            "--param",
            "7",
        ])
        .unwrap()
        .to_config()
        .unwrap();
        assert_eq!(
            (c.vcpus, c.apic, c.irqchip, c.ipi),
            (4, ApicMode::X2apic, Irqchip::Split, IpiPath::Pv)
        );
        assert_eq!(
            (c.workload, c.target_wait),
            (Workload::AllToAll, TargetWait::Halt)
        );
        assert_eq!(c.levers.disabled_exits.names(), ["hlt", "pause"]);
        assert_eq!(
            (c.levers.halt_poll_ns, c.apicv),
            (Some(0), ApicvRequest::Inhibit)
        );
        assert_eq!((c.levers.pin, c.params[0]), (vec![0, 1, 2, 3], 7));
        assert!(c.tracepoints);
    }

    fn parse(argv: &[&str]) -> Result<Command, clap::Error> {
        let mut all = vec!["ipivmm"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).map(|c| c.command)
    }

    #[test]
    fn host_set_and_restore_parse() {
        let Ok(Command::Host(h)) = parse(&[
            "host",
            "--set",
            "kvm-intel.enable_apicv=N,kvm_intel.enable_ipiv=0",
        ]) else {
            panic!("host --set parses");
        };
        let set: Vec<String> = h.set.unwrap().0.iter().map(|s| s.to_string()).collect();
        assert_eq!(set, ["kvm_intel.enable_apicv=N", "kvm_intel.enable_ipiv=0"]);
        assert!(!h.restore);
        let Ok(Command::Host(h)) = parse(&["host", "--restore"]) else {
            panic!("host --restore parses");
        };
        assert!(h.restore && h.set.is_none());
        let e = parse(&["host", "--set", "kvm_amd.avic=1", "--restore"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        for bad in [
            "avic=1",
            "kvm_amd.avic",
            "kvm_amd.avic=1,,kvm_amd.npt=0",
            "kvm_amd.avic=1,kvm_amd.avic=0",
        ] {
            let e = parse(&["host", "--set", bad]).unwrap_err().to_string();
            assert!(e.contains(bad) || e.contains("twice"), "{bad}: {e}");
        }
    }

    #[test]
    fn sweep_host_param_is_one_parameter_with_values() {
        let Ok(Command::Sweep(s)) = parse(&["sweep", "--host-param", "kvm_amd.avic=0,1"]) else {
            panic!("sweep --host-param parses");
        };
        let values: Vec<String> = s
            .host_param
            .unwrap()
            .0
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(values, ["kvm_amd.avic=0", "kvm_amd.avic=1"]);
        let Ok(Command::Sweep(s)) = parse(&["sweep"]) else {
            panic!("sweep parses");
        };
        assert!(s.host_param.is_none());
        for bad in [
            "kvm_amd.avic=1,Y",
            "kvm_amd.avic=",
            "avic=0,1",
            "kvm_amd.avic=0,,1",
        ] {
            let e = parse(&["sweep", "--host-param", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
        }
    }

    /// Every sink's flag is on exactly the commands its `help` names, and
    /// parses into that command's outputs.
    #[test]
    fn sink_flags_come_from_the_registry() {
        use crate::output::sink::Command as C;
        for sink in crate::output::sinks::ALL {
            for (cmd, name) in [
                (C::Run, "run"),
                (C::Sweep, "sweep"),
                (C::Compare, "compare"),
            ] {
                let mut argv = vec![name];
                if cmd == C::Compare {
                    argv.push("a.json");
                }
                if sink.is_verdicts() {
                    argv.extend(["--expect", "exits_per_ipi < 1.5"]);
                }
                let flag = sink.long();
                argv.push(&flag);
                if sink.value_name().is_some() {
                    argv.push("out.x");
                }
                let parsed = parse(&argv);
                let Some(_) = sink.help_in(cmd) else {
                    let e = parsed.expect_err(&flag);
                    assert_eq!(
                        e.kind(),
                        clap::error::ErrorKind::UnknownArgument,
                        "{argv:?}"
                    );
                    continue;
                };
                let given = match parsed.unwrap_or_else(|e| panic!("{argv:?}: {e}")) {
                    Command::Run(a) => [a.output.given, a.gate.verdicts.given].concat(),
                    Command::Sweep(a) => [a.output.given, a.gate.verdicts.given].concat(),
                    Command::Compare(a) => a.output.given,
                    _ => unreachable!("{argv:?}"),
                };
                let path = sink.value_name().map(|_| PathBuf::from("out.x"));
                assert!(
                    matches!(&given[..], [(s, p)] if std::ptr::eq(*s, *sink) && *p == path),
                    "{argv:?}: {given:?}"
                );
            }
        }
    }

    #[test]
    fn bad_values_name_the_choices() {
        let e = run_args(&["--apic", "x3apic"]).unwrap_err().to_string();
        assert!(
            e.contains("x3apic") && e.contains("xapic") && e.contains("x2apic"),
            "{e}"
        );
        let e = run_args(&["--disable-exits", "hlt,nope"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("mwait"), "{e}");
        let e = run_args(&["--memory", "18446744073709551615"])
            .unwrap()
            .to_config()
            .unwrap_err();
        assert!(
            e.contains("18446744073709551615 MiB: must be between"),
            "{e}"
        );
    }
}
