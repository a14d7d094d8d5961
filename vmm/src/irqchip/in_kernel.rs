//! KVM's LAPIC (`--irqchip kernel` and `split`): what KVM must create and
//! each vCPU's LAPIC state; the run loop has nothing else to do for it.
use super::Chip;
use crate::arch::lapic_regs;
use crate::kvm_extra::KvmCall;
use ipivmm_devices::bus::{Bus, BusError};
use kvm_bindings::{kvm_enable_cap, kvm_mp_state, KVM_CAP_SPLIT_IRQCHIP, KVM_MP_STATE_RUNNABLE};
use kvm_ioctls::{VcpuFd, VmFd};
use std::sync::atomic::AtomicBool;

/// Redirection entries of the split irqchip's userspace IOAPIC.
const SPLIT_IRQCHIP_PINS: u64 = 24;
/// Where KVM on Intel puts its real-mode TSS (three pages below 4 GiB).
const KVM_TSS_ADDRESS: usize = 0xfffb_d000;

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
pub(crate) fn set_tss_address(fd: &VmFd) -> Result<(), KvmCall> {
    fd.set_tss_address(KVM_TSS_ADDRESS)
        .map_err(KvmCall::named("KVM_SET_TSS_ADDR"))
}
