//! KVM_CAP_X2APIC_API: 32-bit x2APIC IDs for KVM's LAPIC (kernel and split
//! irqchips).
//!
//! Without it KVM keeps two xAPIC-era behaviours in x2APIC mode (api.rst,
//! 7.8 KVM_CAP_X2APIC_API): KVM_GET/SET_LAPIC carry the APIC ID shifted to
//! 8 bits, and a physical destination of 0xFF is a broadcast (the "broadcast
//! quirk"), so an IPI to the vCPU with x2APIC ID 255 would reach every vCPU.
//! With `KVM_X2APIC_API_USE_32BIT_IDS | KVM_X2APIC_API_DISABLE_BROADCAST_QUIRK`
//! enabled on the VM before its vCPUs exist, IDs are 32-bit and only
//! 0xFFFFFFFF broadcasts. The user irqchip's model (`devices::lapic`) has
//! no quirk to turn off.
use crate::config::VmConfig;
use crate::mode::{ApicMode, Irqchip};
use kvm_bindings::{
    kvm_enable_cap, KVM_CAP_X2APIC_API, KVM_X2APIC_API_DISABLE_BROADCAST_QUIRK,
    KVM_X2APIC_API_USE_32BIT_IDS,
};
use kvm_ioctls::{Kvm, VmFd};

/// The features ipivmm enables.
pub const FLAGS: u32 = KVM_X2APIC_API_USE_32BIT_IDS | KVM_X2APIC_API_DISABLE_BROADCAST_QUIRK;

/// Highest APIC ID that works without the capability (0xFF is the quirk's
/// broadcast).
pub(crate) const MAX_ID_WITHOUT: u32 = 0xFE;

/// Why a VM needs the capability and this KVM lacks it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--vcpus {vcpus} in x2APIC mode with --irqchip {irqchip} gives APIC IDs up to {max_id}, which needs KVM_CAP_X2APIC_API (32-bit IDs, no broadcast quirk) and this KVM offers features {supported:#x} of {FLAGS:#x}: use --vcpus {} or fewer, or --irqchip user", MAX_ID_WITHOUT as usize + 1)]
pub struct X2apicApiMissing {
    /// vCPUs asked for.
    pub vcpus: usize,
    /// The irqchip.
    pub irqchip: Irqchip,
    /// Highest APIC ID of the VM.
    pub max_id: u32,
    /// KVM_CHECK_EXTENSION(KVM_CAP_X2APIC_API).
    pub supported: u32,
}

/// Whether `config` runs x2APIC on KVM's LAPIC (where the capability applies).
pub fn applies(config: &VmConfig) -> bool {
    config.apic == ApicMode::X2apic && config.irqchip.lapic_in_kernel()
}

/// What to do for `config` when KVM offers `supported` features and the
/// highest APIC ID is `max_id`: `Ok(true)` enable, `Ok(false)` leave off
/// (not x2APIC on KVM's LAPIC, or not offered and not needed), `Err` refuse.
pub fn decide(config: &VmConfig, supported: u32, max_id: u32) -> Result<bool, X2apicApiMissing> {
    if !applies(config) {
        return Ok(false);
    }
    if supported & FLAGS == FLAGS {
        return Ok(true);
    }
    if max_id <= MAX_ID_WITHOUT {
        return Ok(false);
    }
    Err(X2apicApiMissing {
        vcpus: config.vcpus,
        irqchip: config.irqchip,
        max_id,
        supported,
    })
}

/// The features this KVM offers (0 when it has no KVM_CAP_X2APIC_API).
pub fn supported(kvm: &Kvm) -> u32 {
    kvm.check_extension_raw(libc::c_ulong::from(KVM_CAP_X2APIC_API))
        .max(0) as u32
}

/// Enables [`FLAGS`] on a VM that has no vCPU yet.
pub fn enable(fd: &VmFd) -> Result<(), kvm_ioctls::Error> {
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X2APIC_API,
        ..Default::default()
    };
    cap.args[0] = u64::from(FLAGS);
    fd.enable_cap(&cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(apic: ApicMode, irqchip: Irqchip, vcpus: usize) -> VmConfig {
        VmConfig {
            apic,
            irqchip,
            vcpus,
            ..VmConfig::default()
        }
    }

    #[test]
    fn enabled_for_x2apic_on_kvms_lapic_only() {
        let all = FLAGS | 0xc;
        assert_eq!(
            decide(&cfg(ApicMode::X2apic, Irqchip::Kernel, 2), all, 1),
            Ok(true)
        );
        assert_eq!(
            decide(&cfg(ApicMode::X2apic, Irqchip::Split, 300), all, 299),
            Ok(true)
        );
        assert_eq!(
            decide(&cfg(ApicMode::X2apic, Irqchip::User, 300), 0, 299),
            Ok(false)
        );
        assert_eq!(
            decide(&cfg(ApicMode::Xapic, Irqchip::Kernel, 2), all, 1),
            Ok(false)
        );
    }

    #[test]
    fn missing_capability_refuses_only_ids_above_0xfe() {
        let small = cfg(ApicMode::X2apic, Irqchip::Kernel, 255);
        assert_eq!(decide(&small, 0, 254), Ok(false));
        let big = cfg(ApicMode::X2apic, Irqchip::Kernel, 256);
        let e = decide(&big, KVM_X2APIC_API_USE_32BIT_IDS, 255).unwrap_err();
        assert_eq!(e.max_id, 255);
        assert!(
            e.to_string()
                .contains("use --vcpus 255 or fewer, or --irqchip user"),
            "{e}"
        );
    }
}
