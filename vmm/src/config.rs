//! Typed configuration of one VM run, validated before any KVM call.
use crate::arch::layout;
use crate::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, Levers, Mode, TargetWait, Workload};
use ipivmm_abi::{MAX_VCPUS, MAX_XAPIC_VCPUS};
use ipivmm_analysis::mode::ExitReasons;
use ipivmm_analysis::results::identity::ConfigId;
use ipivmm_analysis::results::PhaseResult;
use ipivmm_analysis::results::{RunConfig, RunReport};
use std::path::PathBuf;
use std::time::Duration;

/// Where the guest payload comes from.
///
/// ```
/// use ipivmm::config::PayloadSource;
///
/// let builtin = PayloadSource::Builtin; // the IPI workloads, embedded in ipivmm
/// // Your ELF (e.g. from `ipivmm::payload::build::PayloadBuild::build`):
/// let file = PayloadSource::File("examples/exit-roundtrip/target/x86_64-unknown-linux-gnu/release/exit-roundtrip".into());
/// // An image already in memory:
/// let bytes = PayloadSource::Bytes(ipivmm_testkit::images::elf64(ipivmm::abi::PAYLOAD_START, &[0xeb, 0xfe]));
/// # let _ = (builtin, file, bytes);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayloadSource {
    /// The payload built into ipivmm.
    Builtin,
    /// A user's ELF file.
    File(PathBuf),
    /// An ELF image already in memory (library use).
    Bytes(Vec<u8>),
    /// A Linux kernel (`--kernel`): the 64-bit boot protocol instead of
    /// the payload ABI (docs/linux-guest.md).
    Linux(crate::linux::LinuxGuest),
    /// A multiboot kernel (`--kernel` of a file with a multiboot header):
    /// kvm-unit-tests' x86 `.flat` tests (docs/kvm-unit-tests.md).
    Multiboot(crate::multiboot::MultibootGuest),
}

impl PayloadSource {
    /// The built-in payload's ELF image (what [`PayloadSource::Builtin`] runs).
    pub const BUILTIN_ELF: &'static [u8] = crate::payload::BUILTIN_PAYLOAD;

    /// Whether this is the built-in payload (whose workloads ipivmm knows).
    pub fn is_builtin(&self) -> bool {
        matches!(self, PayloadSource::Builtin)
    }

    /// The Linux guest, when this is one.
    pub fn linux(&self) -> Option<&crate::linux::LinuxGuest> {
        match self {
            PayloadSource::Linux(g) => Some(g),
            _ => None,
        }
    }

    /// The multiboot kernel, when this is one.
    pub fn multiboot(&self) -> Option<&crate::multiboot::MultibootGuest> {
        match self {
            PayloadSource::Multiboot(g) => Some(g),
            _ => None,
        }
    }
}

/// Everything that defines one run.
///
/// Start from [`VmConfig::default`] (2 vCPUs, 64 MiB, kernel irqchip, xAPIC,
/// built-in ping-pong) and change what matters; [`VmConfig::validate`]
/// checks it without KVM (`run::run` checks it again against the host):
///
/// ```
/// use ipivmm::config::{ConfigError, VmConfig};
/// use ipivmm::analysis::mode::{ApicMode, Irqchip};
/// use std::time::Duration;
///
/// let config = VmConfig {
///     vcpus: 4,
///     memory_bytes: 128 << 20,
///     irqchip: Irqchip::Split,
///     apic: ApicMode::X2apic,
///     iterations: 10_000,
///     timeout: Duration::from_secs(120),
///     ..VmConfig::default()
/// };
/// assert_eq!(config.validate(8), Ok(()));
/// let none = VmConfig { vcpus: 0, ..config };
/// assert!(matches!(none.validate(8), Err(ConfigError::VcpuCount { got: 0, .. })));
/// ```
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// Number of vCPUs.
    pub vcpus: usize,
    /// Guest RAM in bytes.
    pub memory_bytes: u64,
    /// Interrupt controller.
    pub irqchip: Irqchip,
    /// xAPIC or x2APIC in the guest.
    pub apic: ApicMode,
    /// ICR writes or PV hypercall.
    pub ipi: IpiPath,
    /// Workload of the built-in payload.
    pub workload: Workload,
    /// How IPI targets wait.
    pub target_wait: TargetWait,
    /// With `TargetWait::Halt`: how long a sender waits after a target
    /// published that it is halting, so that its `hlt` has left the guest.
    pub halt_settle: Duration,
    /// TSC cycles of busy wait in every handler of the measured vector on
    /// a receiving vCPU, before the IPI counts as received
    /// (`--inject-delay-cycles`; `BootInfo::ipi_delay_cycles`): a round
    /// trip grows by this much, a known effect to check a comparison
    /// against. 0 = none.
    pub ipi_delay_cycles: u64,
    /// The phase the headline, metrics and expectations read (`--phase`;
    /// a custom payload's `cpuid`, say); None: the measured-phase rule of
    /// [`RunReport::measured_phase`](crate::results::RunReport::measured_phase). The guest ignores it.
    pub headline_phase: Option<String>,
    /// Measured iterations.
    pub iterations: u64,
    /// Warm-up iterations.
    pub warmup: u64,
    /// IPI vector.
    pub ipi_vector: u8,
    /// Workload parameters passed through BootInfo.params.
    pub params: [u64; 8],
    /// Watchdog: the run is stopped after this long.
    pub timeout: Duration,
    /// The guest payload.
    pub payload: PayloadSource,
    /// Count kvm:* tracepoints per vCPU (needs root and tracefs).
    pub tracepoints: bool,
    /// Mount tracefs if it is not mounted.
    pub mount_tracefs: bool,
    /// How exits are counted by reason (needs `tracepoints`).
    pub exit_reasons: ExitReasons,
    /// Also count the context tracepoints (`kvm_entry`, `kvm_mmio`,
    /// `kvm_eoi`, ...: `ipivmm_counters::specs::CONTEXT_EVENTS`). Off by
    /// default: each per-thread event adds to every context switch of a
    /// vCPU thread (docs/counters.md, "The cost of counting").
    pub context_events: bool,
    /// The KVM device node.
    pub kvm_device: PathBuf,
    /// Where tracefs is (None: found through /proc/mounts).
    pub tracefs: Option<PathBuf>,
    /// The levers: exits turned off, halt polling, CPUID hints and PV
    /// features, pinning ([`crate::mode::lever_table`], one row each).
    pub levers: Levers,
    /// Leave APICv/AVIC to the host or inhibit it for this VM.
    pub apicv: ApicvRequest,
    /// Most bytes of guest-driven data the host keeps for the run (finished
    /// phases, records, latency samples, captured serial output; all vCPUs
    /// together). A guest that sends more stops the run with status
    /// `over_budget`, keeping what was measured until then.
    pub guest_memory_budget: u64,
}

impl Default for VmConfig {
    fn default() -> Self {
        Self {
            vcpus: 2,
            memory_bytes: layout::DEFAULT_MEM_BYTES,
            irqchip: Irqchip::Kernel,
            apic: ApicMode::Xapic,
            ipi: IpiPath::Icr,
            workload: Workload::Pingpong,
            target_wait: TargetWait::Spin,
            halt_settle: DEFAULT_HALT_SETTLE,
            ipi_delay_cycles: 0,
            headline_phase: None,
            iterations: 1000,
            warmup: 100,
            ipi_vector: ipivmm_abi::DEFAULT_IPI_VECTOR,
            params: [0; 8],
            timeout: Duration::from_secs(60),
            payload: PayloadSource::Builtin,
            tracepoints: true,
            mount_tracefs: false,
            exit_reasons: ExitReasons::Bpf,
            context_events: false,
            kvm_device: PathBuf::from("/dev/kvm"),
            tracefs: None,
            levers: Levers::default(),
            apicv: ApicvRequest::Host,
            guest_memory_budget: ipivmm_devices::budget::DEFAULT_BUDGET,
        }
    }
}

/// What a run of `c` records of its configuration (the `mode` object of
/// the JSON document).
impl From<&VmConfig> for RunConfig {
    fn from(c: &VmConfig) -> Self {
        Self {
            irqchip: c.irqchip,
            apic: c.apic,
            ipi: c.ipi,
            workload: c.workload,
            target: c.target_wait,
            halt_settle_ns: u64::try_from(c.halt_settle.as_nanos()).unwrap_or(u64::MAX),
            ipi_delay_cycles: c.ipi_delay_cycles,
            phase: c.headline_phase.clone(),
            vcpus: c.vcpus,
            iterations: c.iterations,
            warmup: c.warmup,
            memory_mib: c.memory_bytes >> 20,
            levers: c.levers.clone(),
            payload: match &c.payload {
                PayloadSource::Builtin => None,
                PayloadSource::File(p) => Some(p.display().to_string()),
                PayloadSource::Bytes(_) => Some("<ELF image from the library>".into()),
                PayloadSource::Linux(g) => Some(g.label()),
                PayloadSource::Multiboot(g) => Some(g.label()),
            },
            host_cpus: ipivmm_analysis::mode::levers::allowed_cpus().len(),
            params: c.params,
        }
    }
}

/// Guest RAM sizes: what ipivmm's guest layout needs (vmm/src/arch/layout.rs).
impl VmConfig {
    /// Smallest guest RAM ipivmm accepts (one vCPU).
    pub const MIN_MEMORY_BYTES: u64 = crate::arch::layout::MIN_MEM_BYTES;
    /// Largest guest RAM: below the 3 GiB PCI/APIC hole.
    pub const MAX_MEMORY_BYTES: u64 = crate::arch::layout::MAX_MEM_BYTES;
    /// Largest [`VmConfig::guest_memory_budget`], MiB (1 TiB).
    pub const MAX_GUEST_MEMORY_BUDGET_MIB: u64 = 1 << 20;

    /// Guest RAM a run of `vcpus` vCPUs gets when none is asked for: 64 MiB,
    /// or more where that many vCPUs' stacks would leave less scratch (128
    /// MiB at 1024 vCPUs).
    pub const fn default_memory_bytes(vcpus: usize) -> u64 {
        crate::arch::layout::default_mem_bytes(vcpus)
    }

    /// Smallest guest RAM for `vcpus` vCPUs: the fixed areas, their stacks
    /// and at least 1 MiB of scratch.
    pub const fn min_memory_bytes(vcpus: usize) -> u64 {
        crate::arch::layout::min_mem_bytes(vcpus)
    }

    /// Bytes of sample space (scratch) each vCPU gets in this
    /// configuration's RAM, page aligned; 0 when the RAM is too small.
    pub const fn scratch_bytes_per_vcpu(&self) -> u64 {
        crate::arch::layout::scratch_stride(self.memory_bytes, self.vcpus)
    }
}

impl VmConfig {
    /// The configuration identity of a run of this configuration, with a
    /// named placement and a host setting (what a sweep plans and skips).
    pub fn config_id(&self, placement: Option<String>, host_param: Option<String>) -> ConfigId {
        ConfigId::from_parts(&RunConfig::from(self), self.apicv, placement, host_param)
    }

    /// A run of this configuration that could not start (`why`: the error,
    /// which names the fix): [`RunReport::not_started`].
    pub fn not_started(&self, why: &str) -> RunReport {
        RunReport::not_started(RunConfig::from(self), self.apicv, why)
    }
}

/// A configuration that cannot run, with the fix. Each message names the
/// command-line flag and the [`VmConfig`] field it sets, so it reads right
/// for a library caller too:
///
/// ```
/// use ipivmm::VmConfig;
///
/// let e = VmConfig { vcpus: 0, ..VmConfig::default() }.validate(8).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "--vcpus 0 (VmConfig::vcpus): must be between 1 and 8 (the limit of this KVM and of ipivmm)"
/// );
/// let e = VmConfig { iterations: 0, ..VmConfig::default() }.validate(8).unwrap_err();
/// assert!(e.to_string().contains("(VmConfig::iterations)"), "{e}");
/// ```
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Zero or too many vCPUs.
    #[error("--vcpus {got} (VmConfig::vcpus): must be between 1 and {max} (the limit of this KVM and of ipivmm)")]
    VcpuCount {
        /// Requested.
        got: usize,
        /// Allowed maximum.
        max: usize,
    },
    /// More vCPUs than xAPIC's 8-bit APIC IDs can address.
    #[error("--vcpus {0} with --apic xapic (VmConfig::apic): xAPIC has 8-bit APIC IDs, so at most {MAX_XAPIC_VCPUS} vCPUs; use --apic x2apic (32-bit IDs) for more")]
    XapicVcpus(usize),
    /// Memory outside the supported range.
    #[error("--memory {got_mib} MiB (VmConfig::memory_bytes): must be between {min_mib} and {max_mib} MiB (the minimum grows with --vcpus: 64 KiB of stack and 8 KiB of scratch per vCPU)")]
    Memory {
        /// Requested MiB.
        got_mib: u64,
        /// Minimum MiB.
        min_mib: u64,
        /// Maximum MiB.
        max_mib: u64,
    },
    /// Not enough scratch memory for the samples.
    #[error("--iterations {iterations} (VmConfig::iterations) needs {need} bytes of sample space per vCPU but only {have} fit in guest RAM: raise --memory (VmConfig::memory_bytes) or lower --iterations")]
    ScratchTooSmall {
        /// Iterations asked.
        iterations: u64,
        /// Bytes needed (exact, beyond `u64` too: 8 per iteration and the
        /// per-vCPU block the SDK reserves).
        need: u128,
        /// Bytes available.
        have: u64,
    },
    /// Zero iterations.
    #[error("--iterations (VmConfig::iterations) must be at least 1")]
    NoIterations,
    /// More warm-up iterations than any run could finish.
    #[error("--warmup {0} (VmConfig::warmup): at most {MAX_WARMUP} warm-up iterations (more would outlast any timeout); the measured ones are --iterations")]
    Warmup(u64),
    /// A settle time longer than any wake-up.
    #[error("--halt-settle-ns {0} (VmConfig::halt_settle): at most {max} ns (1 s) per operation; the default is {default} ns", max = MAX_HALT_SETTLE.as_nanos(), default = DEFAULT_HALT_SETTLE.as_nanos())]
    HaltSettle(u128),
    /// An injected delay longer than any IPI.
    #[error("--inject-delay-cycles {0} (VmConfig::ipi_delay_cycles): at most {MAX_IPI_DELAY_CYCLES} TSC cycles per IPI (a few ms; more would outlast the timeout)")]
    IpiDelay(u64),
    /// A phase name no guest can send.
    #[error("--phase '{0}' (VmConfig::headline_phase): a phase name is 1 to {max} printable characters without spaces, as the payload names it (e.g. --phase cpuid)", max = ipivmm_abi::MAX_NAME_LEN)]
    PhaseName(String),
    /// A timeout of zero.
    #[error("--timeout (VmConfig::timeout) must be at least 1 second")]
    ZeroTimeout,
    /// A timeout the watchdog timer cannot hold.
    #[error("--timeout {0} s (VmConfig::timeout) is too long: at most {MAX_TIMEOUT_S} s (a week)")]
    TimeoutTooLong(u64),
    /// A guest memory budget too small to hold a phase, or absurd.
    #[error("--guest-memory-budget (VmConfig::guest_memory_budget) of {0} bytes: must be between 64 KiB and {max} MiB (the flag takes MiB)", max = VmConfig::MAX_GUEST_MEMORY_BUDGET_MIB)]
    GuestMemoryBudget(u64),
    /// A vector that cannot carry a fixed IPI.
    #[error("--vector {0:#x} (VmConfig::ipi_vector): fixed IPIs need a vector in 0x20..=0xfe")]
    Vector(u8),
}

impl VmConfig {
    /// The mode part of the configuration.
    pub fn mode(&self) -> Mode {
        Mode {
            irqchip: self.irqchip,
            apic: self.apic,
            ipi: self.ipi,
            apicv: self.apicv,
        }
    }

    /// The run's shape for the mode check: vCPUs, and the built-in
    /// workload (None with a custom payload).
    pub fn shape(&self) -> crate::mode::Shape {
        crate::mode::Shape {
            vcpus: self.vcpus,
            workload: self.payload.is_builtin().then_some(self.workload),
        }
    }

    /// Whether this configuration's mode can run on `host`, and its APICv
    /// plan: [`Mode::check`](crate::mode::Mode::check), the one check.
    pub fn check_mode(
        &self,
        host: Option<&ipivmm_host::facts::HostInfo>,
    ) -> Result<crate::mode::apicv::ApicvPlan, crate::mode::Infeasible> {
        self.mode().check(self.shape(), host)
    }

    /// The xAPIC's vCPU limit (8-bit APIC IDs): the one check of it, which
    /// [`VmConfig::validate`] makes and a sweep asks of each combination.
    pub fn xapic_limit(&self) -> Result<(), ConfigError> {
        if self.apic == ApicMode::Xapic && self.vcpus > MAX_XAPIC_VCPUS {
            return Err(ConfigError::XapicVcpus(self.vcpus));
        }
        Ok(())
    }

    /// `name` as a phase a payload can send, or the error that says what one
    /// is (`--phase` of `run`, `sweep` and `compare`).
    pub fn check_phase_name(name: &str) -> Result<(), ConfigError> {
        if PhaseResult::is_name(name) {
            Ok(())
        } else {
            Err(ConfigError::PhaseName(ipivmm_term::text::escape_controls(
                name,
            )))
        }
    }

    /// Check the configuration's own values against the host's vCPU limit
    /// (whether its mode can run on a host is [`VmConfig::check_mode`]).
    pub fn validate(&self, max_vcpus: usize) -> Result<(), ConfigError> {
        let max = max_vcpus.min(MAX_VCPUS);
        if self.vcpus == 0 || self.vcpus > max {
            return Err(ConfigError::VcpuCount {
                got: self.vcpus,
                max,
            });
        }
        self.xapic_limit()?;
        let min_mem = layout::min_mem_bytes(self.vcpus);
        if !(min_mem..=layout::MAX_MEM_BYTES).contains(&self.memory_bytes) {
            return Err(ConfigError::Memory {
                got_mib: self.memory_bytes >> 20,
                min_mib: min_mem.div_ceil(1 << 20),
                max_mib: layout::MAX_MEM_BYTES >> 20,
            });
        }
        if self.iterations == 0 {
            return Err(ConfigError::NoIterations);
        }
        if self.warmup > MAX_WARMUP {
            return Err(ConfigError::Warmup(self.warmup));
        }
        if self.halt_settle > MAX_HALT_SETTLE {
            return Err(ConfigError::HaltSettle(self.halt_settle.as_nanos()));
        }
        if self.ipi_delay_cycles > MAX_IPI_DELAY_CYCLES {
            return Err(ConfigError::IpiDelay(self.ipi_delay_cycles));
        }
        if let Some(name) = &self.headline_phase {
            Self::check_phase_name(name)?;
        }
        let have = layout::scratch_stride(self.memory_bytes, self.vcpus);
        let need = u128::from(self.iterations) * 8 + u128::from(layout::PERCPU_RESERVED);
        if need > u128::from(have) {
            return Err(ConfigError::ScratchTooSmall {
                iterations: self.iterations,
                need,
                have,
            });
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.timeout.as_secs() > MAX_TIMEOUT_S {
            return Err(ConfigError::TimeoutTooLong(self.timeout.as_secs()));
        }
        if !(0x20..=0xfe).contains(&self.ipi_vector) {
            return Err(ConfigError::Vector(self.ipi_vector));
        }
        if !(MIN_GUEST_MEMORY_BUDGET..=Self::MAX_GUEST_MEMORY_BUDGET_MIB << 20)
            .contains(&self.guest_memory_budget)
        {
            return Err(ConfigError::GuestMemoryBudget(self.guest_memory_budget));
        }
        Ok(())
    }
}

/// Default of [`VmConfig::halt_settle`]: long enough for a `hlt` to leave
/// the guest on hardware and under the lab's emulator, short beside the
/// halt-polling window (kvm.halt_poll_ns, 200 µs by default).
pub(crate) const DEFAULT_HALT_SETTLE: Duration = Duration::from_micros(20);

/// Most warm-up iterations: at the fastest IPI round trip any host manages
/// (about 1 µs) a billion of them are a quarter of an hour.
pub(crate) const MAX_WARMUP: u64 = 1_000_000_000;

/// Longest [`VmConfig::halt_settle`]: a sender waits this long for every
/// halting target; a wake-up takes micro-, not milliseconds.
pub(crate) const MAX_HALT_SETTLE: Duration = Duration::from_secs(1);

/// Largest [`VmConfig::ipi_delay_cycles`]: 10 million cycles, 4 ms at
/// 2.5 GHz per IPI (a thousand round trips stay well inside a minute).
pub(crate) const MAX_IPI_DELAY_CYCLES: u64 = 10_000_000;

/// Smallest [`VmConfig::guest_memory_budget`], bytes (room for a few
/// phases with every counter; the command line's smallest is 1 MiB).
pub(crate) const MIN_GUEST_MEMORY_BUDGET: u64 = 64 << 10;

/// Longest watchdog timeout, seconds.
pub(crate) const MAX_TIMEOUT_S: u64 = 7 * 24 * 3600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        VmConfig::default().validate(1024).unwrap();
    }

    #[test]
    fn vcpu_bounds_are_enforced() {
        let mut c = VmConfig {
            vcpus: 0,
            ..Default::default()
        };
        assert!(matches!(
            c.validate(8),
            Err(ConfigError::VcpuCount { got: 0, max: 8 })
        ));
        c.vcpus = 9;
        assert!(matches!(
            c.validate(8),
            Err(ConfigError::VcpuCount { got: 9, max: 8 })
        ));
        c.vcpus = 1;
        assert!(
            c.validate(8).is_ok(),
            "too few vCPUs for a workload is mode::check's"
        );
    }

    #[test]
    fn xapic_stops_at_255_vcpus_and_x2apic_goes_on() {
        let mut c = VmConfig {
            vcpus: 256,
            memory_bytes: layout::default_mem_bytes(256),
            ..Default::default()
        };
        assert_eq!(c.validate(1024), Err(ConfigError::XapicVcpus(256)));
        // What a sweep asks of each combination (it skips the row).
        assert_eq!(c.xapic_limit(), Err(ConfigError::XapicVcpus(256)));
        assert!(c
            .validate(1024)
            .unwrap_err()
            .to_string()
            .contains("use --apic x2apic"));
        c.vcpus = 255;
        assert_eq!(c.validate(1024), Ok(()));
        assert_eq!(c.xapic_limit(), Ok(()));
        c.apic = ApicMode::X2apic;
        c.vcpus = 1024;
        c.memory_bytes = layout::default_mem_bytes(1024);
        assert_eq!(c.validate(1024), Ok(()));
        assert!(matches!(
            c.validate(4096),
            Ok(()) // capped by ipivmm's own MAX_VCPUS, which 1024 is
        ));
        c.vcpus = MAX_VCPUS + 1;
        assert!(matches!(
            c.validate(4096),
            Err(ConfigError::VcpuCount { max: MAX_VCPUS, .. })
        ));
    }

    #[test]
    fn guest_memory_must_hold_every_vcpus_stack() {
        let c = VmConfig {
            vcpus: 1024,
            apic: ApicMode::X2apic,
            ..Default::default()
        };
        let e = c.validate(1024).unwrap_err();
        assert!(matches!(e, ConfigError::Memory { got_mib: 64, .. }), "{e}");
        assert!(e.to_string().contains("grows with --vcpus"), "{e}");
    }

    #[test]
    fn memory_and_scratch_are_checked() {
        let mut c = VmConfig {
            memory_bytes: 1 << 20,
            ..Default::default()
        };
        assert!(matches!(c.validate(8), Err(ConfigError::Memory { .. })));
        c.memory_bytes = layout::DEFAULT_MEM_BYTES;
        c.iterations = 100_000_000;
        assert!(matches!(
            c.validate(8),
            Err(ConfigError::ScratchTooSmall { .. })
        ));
        // The bytes needed are exact, not saturated at u64::MAX (8 per
        // iteration and the 4 KiB per-vCPU block).
        c.iterations = u64::MAX;
        let e = c.validate(8).unwrap_err().to_string();
        assert!(e.contains("needs 147573952589676417016 bytes"), "{e}");
    }

    #[test]
    fn the_guest_memory_budget_is_bounded() {
        let mut c = VmConfig::default();
        assert_eq!(c.guest_memory_budget, 512 << 20);
        for bad in [
            0,
            MIN_GUEST_MEMORY_BUDGET - 1,
            (VmConfig::MAX_GUEST_MEMORY_BUDGET_MIB << 20) + 1,
        ] {
            c.guest_memory_budget = bad;
            let e = c.validate(8).unwrap_err();
            assert_eq!(e, ConfigError::GuestMemoryBudget(bad));
            assert!(e.to_string().starts_with("--guest-memory-budget"), "{e}");
        }
        c.guest_memory_budget = MIN_GUEST_MEMORY_BUDGET;
        assert_eq!(c.validate(8), Ok(()));
    }

    #[test]
    fn a_phase_name_is_what_a_payload_can_send() {
        let mut c = VmConfig::default();
        for good in ["cpuid", "measure-uncounted", &"x".repeat(64)] {
            c.headline_phase = Some(good.to_string());
            assert_eq!(c.validate(8), Ok(()), "{good}");
        }
        for bad in ["", "two words", "bell\u{7}", &"x".repeat(65)] {
            c.headline_phase = Some(bad.to_string());
            let e = c.validate(8).unwrap_err();
            assert!(matches!(e, ConfigError::PhaseName(_)), "{bad}: {e}");
            assert!(!e.to_string().contains('\u{7}'), "escaped: {e}");
        }
    }

    #[test]
    fn the_recorded_defaults_are_the_machines() {
        let recorded = RunConfig::from(&VmConfig::default());
        assert_eq!(
            RunConfig {
                host_cpus: 0,
                ..recorded
            },
            RunConfig::default()
        );
    }

    #[test]
    fn the_synic_vector_is_no_ipi_vector() {
        let vector = (crate::mode::apicv::InhibitLever::synic_sint() & 0xff) as u8;
        let c = VmConfig {
            ipi_vector: vector,
            ..Default::default()
        };
        assert!(
            c.validate(64).is_err(),
            "the lever's vector must stay unusable for IPIs"
        );
    }
}
