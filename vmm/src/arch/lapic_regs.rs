//! Register edits on a `kvm_lapic_state` (KVM_GET_LAPIC/KVM_SET_LAPIC).
use kvm_bindings::kvm_lapic_state;

/// APIC ID register offset (xAPIC: ID in bits 31:24).
pub(crate) const APIC_ID: usize = 0x20;
/// LVT LINT0 register offset.
pub(crate) const APIC_LVT0: usize = 0x350;
/// LVT LINT1 register offset.
pub(crate) const APIC_LVT1: usize = 0x360;
/// Delivery mode ExtINT (bits 10:8 = 111).
pub(crate) const DM_EXTINT: u32 = 0x700;
/// Delivery mode NMI (bits 10:8 = 100).
pub(crate) const DM_NMI: u32 = 0x400;
const DM_MASK: u32 = 0x700;

/// Read a 32-bit APIC register.
pub(crate) fn get_reg(state: &kvm_lapic_state, offset: usize) -> u32 {
    let b = &state.regs[offset..offset + 4];
    u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

/// Write a 32-bit APIC register.
pub(crate) fn set_reg(state: &mut kvm_lapic_state, offset: usize, value: u32) {
    for (i, byte) in value.to_le_bytes().into_iter().enumerate() {
        state.regs[offset + i] = byte as _;
    }
}

/// The mask bit of an LVT entry.
const LVT_MASKED: u32 = 1 << 16;

/// Program LINT0 as ExtINT and LINT1 as NMI, as a PC BIOS does for the BSP.
/// True when an entry that changed is unmasked: only then does the change
/// reach interrupt delivery (a masked entry delivers nothing whatever its
/// mode, SDM 11.5.1), so only then must the state go back to KVM.
pub(crate) fn program_lints(state: &mut kvm_lapic_state) -> bool {
    let mut visible = false;
    for (reg, mode) in [(APIC_LVT0, DM_EXTINT), (APIC_LVT1, DM_NMI)] {
        let old = get_reg(state, reg);
        let new = (old & !DM_MASK) | mode;
        visible |= new != old && new & LVT_MASKED == 0;
        set_reg(state, reg, new);
    }
    visible
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lints_get_extint_and_nmi_keeping_other_bits() {
        let mut s = kvm_lapic_state::default();
        set_reg(&mut s, APIC_LVT0, 0x0001_0000); // masked
        set_reg(&mut s, APIC_LVT1, 0x0001_0200);
        assert!(!program_lints(&mut s), "both masked: nothing to deliver");
        assert_eq!(get_reg(&s, APIC_LVT0), 0x0001_0700);
        assert_eq!(get_reg(&s, APIC_LVT1), 0x0001_0400);
    }

    #[test]
    fn an_unmasked_lint_that_changes_is_visible() {
        let mut s = kvm_lapic_state::default();
        set_reg(&mut s, APIC_LVT0, 0x0000_0700); // KVM's BSP: ExtINT, unmasked
        set_reg(&mut s, APIC_LVT1, 0x0001_0000);
        assert!(!program_lints(&mut s), "LINT0 already ExtINT, LINT1 masked");
        set_reg(&mut s, APIC_LVT1, 0x0000_0000);
        assert!(program_lints(&mut s));
        assert_eq!(get_reg(&s, APIC_LVT1), 0x0000_0400);
    }
}
