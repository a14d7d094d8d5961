//! The irqchip boundary: everything that differs between `--irqchip kernel`,
//! `split` and `user`, behind one trait, [`Chip`], chosen once
//! ([`for_mode`]) and asked by every stage: the build (what KVM must create
//! before the first vCPU, each vCPU's LAPIC), the wiring (devices on the
//! bus), the run loop (what happens around each KVM_RUN, MSR exits,
//! deliveries, HLT exits, the wait-for-SIPI state of a stopped vCPU) and the
//! counter sources (the model's counters).
//!
//! One home per irqchip: KVM's LAPIC ([`InKernel`], `kernel` and `split`,
//! which differ only in what KVM creates) in `in_kernel`; ipivmm's LAPIC
//! model ([`UserApic`]) in `user_apic`, over `ipivmm_devices::lapic`.
//!
//! This floor sits below both `vm` (which creates the chip) and `vcpu`
//! (whose loop asks it): it imports neither, only the leaves (`arch`,
//! `kvm_extra`) and the results model.
mod in_kernel;
mod user_apic;

use in_kernel::set_tss_address;
pub use in_kernel::InKernel;
pub use user_apic::UserApic;

use crate::kvm_extra::KvmCall;
use crate::mode::{ApicMode, Irqchip};
use crate::results::SourceStatus;
use ipivmm_devices::bus::{Bus, BusError};
use ipivmm_devices::lapic::Delivery;
use kvm_ioctls::{VcpuFd, VmFd};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The irqchip of `--irqchip kind` for a VM of these APIC IDs (index =
/// vCPU index) in APIC mode `apic`: the one place that picks it.
pub(crate) fn for_mode(kind: Irqchip, apic_ids: &[u32], apic: ApicMode) -> SharedChip {
    match kind {
        Irqchip::Kernel => Arc::new(InKernel { split: false }),
        Irqchip::Split => Arc::new(InKernel { split: true }),
        Irqchip::User => Arc::new(UserApic::for_vcpus(apic_ids, apic == ApicMode::X2apic)),
    }
}

/// Answers the MSR accesses KVM hands to userspace (KVM_EXIT_X86_RDMSR and
/// WRMSR: the x2APIC registers and IA32_APIC_BASE without an in-kernel LAPIC).
pub trait MsrHandler {
    /// The value of `msr` on vCPU `vcpu`; Err (why) = #GP.
    fn read_msr(&self, vcpu: usize, msr: u32) -> Result<u64, String>;
    /// Writes `value`; Ok(Some) = interrupts to deliver; Err (why) = #GP.
    fn write_msr(&self, vcpu: usize, msr: u32, value: u64) -> Result<Option<Delivery>, String>;
}

/// What the vCPU loop does after [`Chip::before_run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Enter the guest (KVM_RUN).
    Run,
    /// The vCPU waits for a start-up IPI: park it
    /// ([`Chip::wait_for_sipi`]), do not run it.
    WaitForSipi,
}

/// A VM's irqchip, shared by the build, the bus and every vCPU thread.
pub type SharedChip = Arc<dyn Chip>;

/// What differs by irqchip, stage by stage. `index` is always the vCPU's
/// index; the run-loop methods are called on that vCPU's own thread.
pub trait Chip: Send + Sync {
    /// Build, before any vCPU exists (api.rst: KVM_CREATE_IRQCHIP and
    /// KVM_CAP_SPLIT_IRQCHIP must precede KVM_CREATE_VCPU).
    fn create(&self, fd: &VmFd) -> Result<(), KvmCall>;

    /// Build, per vCPU, after its CPUID and registers: its LAPIC's state.
    /// `apic_id`: an APIC ID to program in the LAPIC (the APIC-ID inhibit
    /// lever), None to keep KVM's.
    fn setup_vcpu(&self, vcpu: &VcpuFd, apic_id: Option<u32>) -> Result<(), KvmCall>;

    /// Wiring: the devices this irqchip puts on the bus.
    fn wire(&self, bus: &mut Bus) -> Result<(), BusError>;

    /// The vCPU thread started (before its first KVM_RUN).
    fn register_thread(&self, _index: usize) {}

    /// Before each KVM_RUN: what to inject, and whether to run at all.
    fn before_run(&self, _index: usize, _vcpu: &mut VcpuFd) -> std::io::Result<Entry> {
        Ok(Entry::Run)
    }

    /// [`Entry::WaitForSipi`]: park the thread until that may have changed
    /// or `stop` is set.
    fn wait_for_sipi(&self, _index: usize, _stop: &AtomicBool) {}

    /// KVM_RUN returned (before the exit is handled).
    fn after_run(&self, _index: usize) {}

    /// The exit was handled (before the next [`Chip::before_run`]).
    fn after_exit(&self, _index: usize, _vcpu: &mut VcpuFd) {}

    /// Who answers the MSR exits that reach userspace (None: nobody, they
    /// #GP).
    fn msrs(&self) -> Option<&dyn MsrHandler> {
        None
    }

    /// A device on the bus (the xAPIC page) or an MSR write delivered
    /// interrupts: wake or kick their targets.
    fn delivered(&self, _sender: usize, _delivery: &Delivery) {}

    /// A HLT exit: park until the vCPU may run again or `stop` is set; Err:
    /// this irqchip never lets HLT exit (a fault).
    fn halted(&self, index: usize, vcpu: &mut VcpuFd, stop: &AtomicBool) -> Result<(), String>;

    /// The vCPU was stopped: does it wait for a start-up IPI (what the
    /// timeout hint names)?
    fn waits_for_sipi(&self, index: usize, vcpu: &VcpuFd) -> bool;

    /// Counter sources: this irqchip's own (None: no counters of its own).
    fn source(&self) -> Option<SourceStatus> {
        None
    }

    /// Counter sources: vCPU `index`'s counters now, by name (None: none);
    /// a phase gets their deltas under the source `source` names
    /// (`PhaseResult::by_source`: `user_lapic`), through `vcpu::sources`.
    fn counters(&self, _index: usize) -> Option<BTreeMap<String, u64>> {
        None
    }
}
