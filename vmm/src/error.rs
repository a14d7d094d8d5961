//! Why a run could not start: one error for the machine's whole face, each
//! message naming the fix. A leaf: the files that fail import it, it
//! imports only the leaf errors it wraps.
use crate::kvm_extra::KvmCall;

/// Why a run could not start (the VM could not be built, the mode cannot
/// run here, a host resource failed). Each message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The mode cannot run on this host.
    #[error(transparent)]
    Mode(#[from] crate::mode::Infeasible),
    /// A host resource (thread, eventfd, timer, signal) failed.
    #[error("host resource: {0}")]
    Host(String),
    /// The KVM device could not be opened, or is not KVM.
    #[error(transparent)]
    Device(#[from] crate::host::device::DeviceError),
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Payload file unreadable.
    #[error("cannot read payload {path}: {problem}; check the path given to --payload (VmConfig::payload)")]
    PayloadRead {
        /// The path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Payload image rejected.
    #[error("{0}")]
    Image(#[from] crate::payload::image::ImageError),
    /// A KVM ioctl failed.
    #[error("KVM {op} failed: {err}")]
    Kvm {
        /// Which operation.
        op: &'static str,
        /// The errno.
        err: kvm_ioctls::Error,
    },
    /// Guest memory setup failed.
    #[error("guest memory: {0}")]
    Memory(String),
    /// The vCPU fds do not fit in RLIMIT_NOFILE.
    #[error("KVM_CREATE_VCPU failed for vCPU {index}: too many open files (EMFILE): RLIMIT_NOFILE {limit} is too low for {vcpus} vCPUs (each holds 2 fds, 14 with tracepoints); raise it (ulimit -n {want}) or run fewer vCPUs")]
    FdLimit {
        /// The vCPU that could not be created.
        index: usize,
        /// vCPUs of the VM.
        vcpus: usize,
        /// The soft limit.
        limit: u64,
        /// A limit that fits.
        want: usize,
    },
    /// A thread creating vCPUs could not be started or died.
    #[error("vCPU creation thread: {0}")]
    Thread(String),
    /// CPUID shaping failed.
    #[error(transparent)]
    Cpuid(#[from] crate::arch::cpuid::CpuidError),
    /// Exit controls KVM does not allow.
    #[error("--disable-exits {asked} (VmConfig::disable_exits): this KVM allows only [{allowed}] (KVM_CAP_X86_DISABLE_EXITS); drop the others")]
    ExitsNotAllowed {
        /// Requested names.
        asked: String,
        /// Allowed names.
        allowed: String,
    },
    /// KVM refused to enable a capability.
    #[error("enabling {cap} failed: {err}")]
    Enable {
        /// Capability.
        cap: &'static str,
        /// errno text.
        err: String,
    },
    /// KVM_CAP_HALT_POLL missing.
    #[error("--halt-poll-ns (VmConfig::halt_poll_ns) needs KVM_CAP_HALT_POLL (Linux 5.15+), which this KVM lacks; leave it unset (None) and use the kvm.halt_poll_ns module parameter instead")]
    NoHaltPoll,
    /// A pinning CPU that does not exist or is not allowed.
    #[error(
        "--pin (VmConfig::pin): host CPU {cpu} is not online or not allowed for this process (allowed: {allowed})"
    )]
    NoSuchCpu {
        /// The CPU.
        cpu: usize,
        /// Allowed CPUs.
        allowed: String,
    },
    /// Fewer CPUs than vCPUs.
    #[error(
        "--pin (VmConfig::pin) lists {cpus} CPUs for {vcpus} vCPUs: give one host CPU per vCPU"
    )]
    PinCount {
        /// CPUs listed.
        cpus: usize,
        /// vCPUs.
        vcpus: usize,
    },
    /// Loading the ELF failed.
    #[error("loading the payload ELF failed: {0}")]
    Load(String),
    /// 32-bit x2APIC IDs needed and not offered.
    #[error(transparent)]
    X2apicApi(#[from] crate::vm::x2apic_api::X2apicApiMissing),
    /// A multiboot kernel that cannot run (its file, its mode): one line
    /// naming the fix.
    #[error("{0}")]
    Multiboot(String),
    /// A Linux guest that cannot run (its files, its mode, this host).
    #[error(transparent)]
    Linux(#[from] crate::linux::LinuxError),
    /// The SynIC inhibit lever could not be set up.
    #[error("--apicv inhibit (VmConfig::apicv) uses a Hyper-V SynIC AutoEOI SINT here (APICV_INHIBIT_REASON_HYPERV), and {op} failed: {problem}; a kernel built without Hyper-V emulation (CONFIG_KVM_HYPERV=n) has no SynIC: run with --apicv host, or --irqchip user (ABSENT)")]
    SynicLever {
        /// Which operation.
        op: &'static str,
        /// What went wrong.
        problem: String,
    },
}

impl RunError {
    /// Whether the run cannot start because of this host, not the request:
    /// no usable /dev/kvm, or a mode this host cannot run. A gate reports
    /// such a run's expectations as skipped (kselftest's exit 4).
    pub fn host_cannot_run(&self) -> bool {
        matches!(
            self,
            RunError::Mode(_)
                | RunError::Device(_)
                | RunError::Linux(crate::linux::LinuxError::SoftwareKvm)
        )
    }
}

impl From<KvmCall> for RunError {
    fn from(KvmCall { op, err }: KvmCall) -> Self {
        RunError::Kvm { op, err }
    }
}
