//! The irqchip boundary: everything that differs between `--irqchip kernel`,
//! `split` and `user`, behind one trait, [`Chip`], chosen once
//! (`vcpu::chips::for_mode`) and asked by every stage: the build (what KVM must create
//! before the first vCPU, each vCPU's LAPIC), the wiring (devices on the
//! bus), the run loop (what happens around each KVM_RUN, MSR exits,
//! deliveries, HLT exits, the wait-for-SIPI state of a stopped vCPU) and the
//! counter sources (the model's counters).
//!
//! One home per irqchip: KVM's LAPIC ([`InKernel`], `kernel` and `split`,
//! which differ only in what KVM creates) here; ipivmm's LAPIC model
//! (`UserApic`) in `vcpu::user_apic`, over
//! `ipivmm_devices::lapic`.
use super::exit_handler::MsrHandler;
use crate::results::SourceStatus;
use crate::vm::arch::lapic_regs;
use crate::vm::kvm_extra::KvmCall;
use ipivmm_devices::bus::{Bus, BusError};
use ipivmm_devices::lapic::Delivery;
use kvm_bindings::{kvm_enable_cap, kvm_mp_state, KVM_CAP_SPLIT_IRQCHIP, KVM_MP_STATE_RUNNABLE};
use kvm_ioctls::{VcpuFd, VmFd};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Redirection entries of the split irqchip's userspace IOAPIC.
const SPLIT_IRQCHIP_PINS: u64 = 24;
/// Where KVM on Intel puts its real-mode TSS (three pages below 4 GiB).
const KVM_TSS_ADDRESS: usize = 0xfffb_d000;

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
    /// a phase gets their deltas (`PhaseResult::user_lapic`).
    fn counters(&self, _index: usize) -> Option<BTreeMap<String, u64>> {
        None
    }
}

/// KVM's LAPIC (`--irqchip kernel`, and `split`, whose IOAPIC and PIC
/// would be in userspace: ipivmm needs neither). Interrupts, HLT and the
/// SIPI wait are KVM's; the run loop has nothing to do around KVM_RUN.
pub struct InKernel {
    /// KVM_CAP_SPLIT_IRQCHIP instead of KVM_CREATE_IRQCHIP.
    pub split: bool,
}

impl Chip for InKernel {
    fn create(&self, fd: &VmFd) -> Result<(), KvmCall> {
        set_tss_address(fd)?;
        if !self.split {
            return fd
                .create_irq_chip()
                .map_err(KvmCall::named("KVM_CREATE_IRQCHIP"));
        }
        let mut cap = kvm_enable_cap {
            cap: KVM_CAP_SPLIT_IRQCHIP,
            ..Default::default()
        };
        cap.args[0] = SPLIT_IRQCHIP_PINS;
        fd.enable_cap(&cap)
            .map_err(KvmCall::named("KVM_ENABLE_CAP(KVM_CAP_SPLIT_IRQCHIP)"))
    }

    fn setup_vcpu(&self, vcpu: &VcpuFd, apic_id: Option<u32>) -> Result<(), KvmCall> {
        // With an in-kernel LAPIC, APs start in wait-for-SIPI; every vCPU
        // enters the payload directly, so all are made runnable.
        vcpu.set_mp_state(kvm_mp_state {
            mp_state: KVM_MP_STATE_RUNNABLE,
        })
        .map_err(KvmCall::named("KVM_SET_MP_STATE"))?;
        let mut lapic = vcpu.get_lapic().map_err(KvmCall::named("KVM_GET_LAPIC"))?;
        let mut changed = lapic_regs::program_lints(&mut lapic);
        if let Some(id) = apic_id {
            lapic_regs::set_reg(&mut lapic, lapic_regs::APIC_ID, id << 24);
            changed = true;
        }
        // KVM_SET_LAPIC recomputes the VM's APIC map over every vCPU created so
        // far (kvm_apic_set_state → kvm_recalculate_apic_map): O(N) per call,
        // O(N²) per VM, 130 ms of a 1024-vCPU setup. It is made only when the
        // change reaches delivery: KVM resets an AP's LINTs masked and the BSP's
        // LINT0 already ExtINT (its LINT0_REENABLED quirk), so in practice only
        // a modified APIC ID needs it.
        if !changed {
            return Ok(());
        }
        vcpu.set_lapic(&lapic)
            .map_err(KvmCall::named("KVM_SET_LAPIC"))
    }

    fn wire(&self, _bus: &mut Bus) -> Result<(), BusError> {
        Ok(())
    }

    fn halted(&self, _: usize, _: &mut VcpuFd, _: &AtomicBool) -> Result<(), String> {
        Err("unexpected hlt exit with an in-kernel LAPIC".into())
    }

    fn waits_for_sipi(&self, _index: usize, vcpu: &VcpuFd) -> bool {
        vcpu.get_mp_state()
            .is_ok_and(|m| m.mp_state == kvm_bindings::KVM_MP_STATE_INIT_RECEIVED)
    }
}

/// KVM_SET_TSS_ADDR, which every irqchip's VM needs on Intel.
pub fn set_tss_address(fd: &VmFd) -> Result<(), KvmCall> {
    fd.set_tss_address(KVM_TSS_ADDRESS)
        .map_err(KvmCall::named("KVM_SET_TSS_ADDR"))
}
