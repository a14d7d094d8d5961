//! Command-line interface: parses flags into a [`VmConfig`].
use crate::config::{self, Irqchip, PayloadSource, VmConfig};
use clap::{Args, Parser, Subcommand};
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
    Run(RunArgs),
    /// Run a mode x workload matrix side by side (or a preset re-creating a known experiment).
    #[command(allow_negative_numbers = true)]
    Sweep(SweepArgs),
    /// Show the host's CPU, KVM backend, APICv/AVIC/IPIv state, module parameters and KVM capabilities.
    Host(HostArgs),
    /// Compare recorded results (--json files) side by side, with ratios to the first.
    Compare(CompareArgs),
}

/// Flags of `ipivmm compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Results files (ipivmm.results/1 JSON); the first is the baseline. One file gives a summary.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Flag ratios at or beyond 1 ± this fraction.
    #[arg(long, default_value_t = 0.10, value_parser = parse_threshold)]
    pub threshold: f64,
    /// Also write every run of every file as CSV to FILE ('-' for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write SVG charts of every run of every file into DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Do not print the comparison.
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 10.0 => Ok(v),
        _ => Err(format!(
            "'{s}' is not a fraction between 0 and 10 (e.g. 0.1 for 10%)"
        )),
    }
}

/// Flags of `ipivmm sweep`. Lists are comma-separated; each defaults to every value.
#[derive(Args, Debug)]
pub struct SweepArgs {
    /// A preset experiment: avic-broadcast, ipiv-unicast, apicv-topology (explicit flags below still apply).
    #[arg(long, value_parser = ["avic-broadcast", "ipiv-unicast", "apicv-topology"])]
    pub preset: Option<String>,
    /// Interrupt controllers to sweep.
    #[arg(long, value_delimiter = ',')]
    pub irqchip: Option<Vec<Irqchip>>,
    /// APIC modes to sweep (xapic, x2apic).
    #[arg(long, value_delimiter = ',', value_parser = config::parse_apic)]
    pub apic: Option<Vec<ipivmm_abi::ApicMode>>,
    /// IPI paths to sweep (icr, pv).
    #[arg(long, value_delimiter = ',', value_parser = config::parse_ipi)]
    pub ipi: Option<Vec<ipivmm_abi::IpiPath>>,
    /// APICv requests to sweep (host, inhibit).
    #[arg(long, value_delimiter = ',', value_parser = parse_apicv)]
    pub apicv: Option<Vec<crate::levers::ApicvRequest>>,
    /// Workloads to sweep.
    #[arg(long, value_delimiter = ',', value_parser = config::parse_workload)]
    pub workload: Option<Vec<ipivmm_abi::Workload>>,
    /// vCPUs per VM.
    #[arg(long)]
    pub vcpus: Option<usize>,
    /// How IPI targets wait: spin or halt.
    #[arg(long, value_parser = config::parse_target)]
    pub target: Option<ipivmm_abi::TargetWait>,
    /// Measured iterations per run.
    #[arg(long, default_value_t = 100)]
    pub iterations: u64,
    /// Warm-up iterations per run.
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    /// Watchdog per run, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Exits to turn off in every run (hlt, pause, mwait, cstate).
    #[arg(long, value_name = "LIST", value_parser = crate::levers::parse_disable_exits)]
    pub disable_exits: Option<u32>,
    /// Per-VM halt-polling limit in ns for every run.
    #[arg(long, value_name = "NS")]
    pub halt_poll_ns: Option<u32>,
    /// Advertise KVM_HINTS_REALTIME in every run.
    #[arg(long)]
    pub realtime_hint: bool,
    /// Write every run as JSON to FILE ('-' for stdout; tables then go to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write every run as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write SVG charts per workload into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Do not count kvm:* tracepoints.
    #[arg(long)]
    pub no_tracepoints: bool,
    /// Mount tracefs if it is not mounted (root).
    #[arg(long)]
    pub mount_tracefs: bool,
    /// No tables, no progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Flags of `ipivmm host`.
#[derive(Args, Debug)]
pub struct HostArgs {
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// KVM device node.
    #[arg(long, default_value = "/dev/kvm")]
    pub kvm_device: PathBuf,
}

/// Flags of `ipivmm run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Number of vCPUs (1..=254, and no more than KVM allows).
    #[arg(long, default_value_t = 2)]
    pub vcpus: usize,
    /// Guest APIC mode: xapic (MMIO ICR at 0xFEE00300) or x2apic (WRMSR 0x830).
    #[arg(long, default_value = "xapic", value_parser = config::parse_apic)]
    pub apic: ipivmm_abi::ApicMode,
    /// Interrupt controller: kernel (KVM_CREATE_IRQCHIP), split (LAPIC in KVM), user (ipivmm's model).
    #[arg(long, default_value = "kernel")]
    pub irqchip: Irqchip,
    /// IPI path: icr (ICR writes) or pv (KVM_HC_SEND_IPI hypercall).
    #[arg(long, default_value = "icr", value_parser = config::parse_ipi)]
    pub ipi: ipivmm_abi::IpiPath,
    /// Built-in workload: pingpong, pingpong-halt, broadcast, multicast, self-ipi, flood, all-to-all.
    #[arg(long, default_value = "pingpong", value_parser = config::parse_workload)]
    pub workload: ipivmm_abi::Workload,
    /// How IPI targets wait between IPIs: spin (interrupts on, no exit) or halt (sti; hlt: the wake-up path).
    #[arg(long, default_value = "spin", value_parser = config::parse_target)]
    pub target: ipivmm_abi::TargetWait,
    /// Measured iterations (IPIs sent by each sender).
    #[arg(long, default_value_t = 1000)]
    pub iterations: u64,
    /// Warm-up iterations before the measured phase (not in the latency figures).
    #[arg(long, default_value_t = 100)]
    pub warmup: u64,
    /// Vector of the measured IPIs (0x20..=0xfe; decimal or 0x-hex).
    #[arg(long, default_value = "0x40", value_parser = parse_u8)]
    pub vector: u8,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory: u64,
    /// Watchdog: stop the run after this many seconds and report what each vCPU was doing.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Run this x86-64 ELF payload instead of the built-in one (see docs/custom-payloads.md).
    #[arg(long)]
    pub payload: Option<PathBuf>,
    /// Workload parameter for the payload (BootInfo.params), repeatable, at most 8.
    #[arg(long = "param", value_parser = parse_u64)]
    pub params: Vec<u64>,
    /// Write the full results as JSON to FILE ('-' for stdout; the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write every counter as CSV to FILE, one row per vCPU, phase and counter ('-' for stdout).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write SVG charts (cycles per IPI, exits per IPI by reason, latency histogram) into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Where guest serial output goes: stdout, log (with --verbose), none.
    #[arg(long, default_value = "stdout")]
    pub serial: String,
    /// Do not print the table.
    #[arg(long, short)]
    pub quiet: bool,
    /// Turn off these VM exits (KVM_CAP_X86_DISABLE_EXITS), comma-separated: hlt, pause, mwait, cstate.
    #[arg(long, value_name = "LIST", value_parser = crate::levers::parse_disable_exits, default_value = "")]
    pub disable_exits: u32,
    /// Per-VM halt-polling limit in ns (KVM_CAP_HALT_POLL); default: the host's kvm.halt_poll_ns.
    #[arg(long, value_name = "NS")]
    pub halt_poll_ns: Option<u32>,
    /// Advertise KVM_HINTS_REALTIME (dedicated, never-preempted vCPUs) in CPUID 0x40000001.
    #[arg(long)]
    pub realtime_hint: bool,
    /// Pin vCPU i to the i-th host CPU of this list (e.g. 0,2 or 0-3).
    #[arg(long, value_name = "CPUS", value_parser = parse_pin)]
    pub pin: Option<CpuList>,
    /// APICv/AVIC for this VM: host (module parameters decide) or inhibit (a vendor lever; a no-op where the host has none).
    #[arg(long, default_value = "host", value_parser = parse_apicv)]
    pub apicv: crate::levers::ApicvRequest,
    /// Do not count kvm:* tracepoints (they need root and tracefs).
    #[arg(long)]
    pub no_tracepoints: bool,
    /// Mount tracefs at /sys/kernel/tracing if it is not mounted (root).
    #[arg(long)]
    pub mount_tracefs: bool,
    /// KVM device node.
    #[arg(long, default_value = "/dev/kvm")]
    pub kvm_device: PathBuf,
    /// Log what ipivmm does, with timings (start-up, first guest message).
    #[arg(long, short)]
    pub verbose: bool,
}

/// A `--pin` CPU list (a newtype: clap treats a bare Vec as repeated values).
#[derive(Clone, Debug)]
pub struct CpuList(pub Vec<usize>);

fn parse_pin(s: &str) -> Result<CpuList, String> {
    crate::levers::parse_cpu_list(s).map(CpuList)
}

fn parse_apicv(s: &str) -> Result<crate::levers::ApicvRequest, String> {
    match s {
        "host" => Ok(crate::levers::ApicvRequest::Host),
        "inhibit" => Ok(crate::levers::ApicvRequest::Inhibit),
        _ => Err(format!("'{s}': expected host or inhibit")),
    }
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("'{s}' is not a number: {e}"))
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
        if self.timeout == 0 {
            return Err("--timeout must be at least 1 second".into());
        }
        Ok(VmConfig {
            vcpus: self.vcpus,
            memory_bytes: self.memory.saturating_mul(1 << 20),
            irqchip: self.irqchip,
            apic: self.apic,
            ipi: self.ipi,
            workload: self.workload,
            target_wait: self.target,
            iterations: self.iterations,
            warmup: self.warmup,
            ipi_vector: self.vector,
            params,
            timeout: Duration::from_secs(self.timeout),
            payload: self
                .payload
                .clone()
                .map_or(PayloadSource::Builtin, PayloadSource::File),
            tracepoints: !self.no_tracepoints,
            mount_tracefs: self.mount_tracefs,
            kvm_device: self.kvm_device.clone(),
            tracefs: None,
            disable_exits: self.disable_exits,
            halt_poll_ns: self.halt_poll_ns,
            realtime_hint: self.realtime_hint,
            pin: self.pin.clone().map(|p| p.0).unwrap_or_default(),
            apicv: self.apicv,
        })
    }
}
