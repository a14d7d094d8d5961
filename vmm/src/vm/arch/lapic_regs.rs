//! Register edits on a `kvm_lapic_state` (KVM_GET_LAPIC/KVM_SET_LAPIC).
use kvm_bindings::kvm_lapic_state;

/// APIC ID register offset (xAPIC: ID in bits 31:24).
pub const APIC_ID: usize = 0x20;
/// LVT LINT0 register offset.
pub const APIC_LVT0: usize = 0x350;
/// LVT LINT1 register offset.
pub const APIC_LVT1: usize = 0x360;
/// Delivery mode ExtINT (bits 10:8 = 111).
pub const DM_EXTINT: u32 = 0x700;
/// Delivery mode NMI (bits 10:8 = 100).
pub const DM_NMI: u32 = 0x400;
const DM_MASK: u32 = 0x700;

/// Read a 32-bit APIC register.
pub fn get_reg(state: &kvm_lapic_state, offset: usize) -> u32 {
    let b = &state.regs[offset..offset + 4];
    u32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
}

/// Write a 32-bit APIC register.
pub fn set_reg(state: &mut kvm_lapic_state, offset: usize, value: u32) {
    for (i, byte) in value.to_le_bytes().into_iter().enumerate() {
        state.regs[offset + i] = byte as _;
    }
}

/// Program LINT0 as ExtINT and LINT1 as NMI, as a PC BIOS does for the BSP.
pub fn program_lints(state: &mut kvm_lapic_state) {
    let lint0 = (get_reg(state, APIC_LVT0) & !DM_MASK) | DM_EXTINT;
    let lint1 = (get_reg(state, APIC_LVT1) & !DM_MASK) | DM_NMI;
    set_reg(state, APIC_LVT0, lint0);
    set_reg(state, APIC_LVT1, lint1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lints_get_extint_and_nmi_keeping_other_bits() {
        let mut s = kvm_lapic_state::default();
        set_reg(&mut s, APIC_LVT0, 0x0001_0000); // masked
        set_reg(&mut s, APIC_LVT1, 0x0001_0200);
        program_lints(&mut s);
        assert_eq!(get_reg(&s, APIC_LVT0), 0x0001_0700);
        assert_eq!(get_reg(&s, APIC_LVT1), 0x0001_0400);
    }
}
