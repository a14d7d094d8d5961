//! What a VM is built from: a configuration that passed every check of
//! stage 0 (`run::prepare`), with what the checks produced. Defined here,
//! beside the VM that consumes it, so the VM layer needs nothing of `run`.
use crate::config::VmConfig;
use crate::mode::apicv::ApicvPlan;
use ipivmm_host::facts::HostInfo;
use kvm_ioctls::Kvm;

/// A configuration that passed every check, with what the checks produced.
pub struct Prepared {
    /// The validated configuration.
    pub config: VmConfig,
    /// The checked payload ELF (empty for a Linux guest).
    pub(crate) image: Vec<u8>,
    /// The checked Linux guest (`--kernel`), instead of a payload.
    pub(crate) linux: Option<crate::linux::LinuxImage>,
    /// The checked multiboot kernel (`--kernel` of a multiboot file).
    pub(crate) multiboot: Option<crate::multiboot::MultibootImage>,
    /// The open KVM device.
    pub(crate) kvm: Kvm,
    /// The host, fingerprinted once for the whole run (None if it could not be).
    pub(crate) host: Option<HostInfo>,
    /// How APICv/AVIC is handled for this VM.
    pub plan: ApicvPlan,
    /// Whether KVM_CAP_X2APIC_API (32-bit IDs, no broadcast quirk) is
    /// enabled on the VM (`vm::x2apic_api`).
    pub(crate) x2apic_api: bool,
}
