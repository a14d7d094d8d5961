//! Unit tests of the local APIC model.

mod delivery;
mod fuzz;
mod msr;
mod priority;
mod regs;

use super::{IpiRequest, Lapic, LapicGroup, APIC_BASE_EXTD};

/// 32-bit xAPIC MMIO write.
fn wr(lapic: &mut Lapic, offset: u64, value: u32) -> Option<IpiRequest> {
    lapic.write_mmio(offset, &value.to_le_bytes())
}

/// 32-bit xAPIC MMIO read.
fn rd(lapic: &mut Lapic, offset: u64) -> u32 {
    let mut bytes = [0u8; 4];
    lapic.read_mmio(offset, &mut bytes);
    u32::from_le_bytes(bytes)
}

/// A software-enabled xAPIC (SVR = 0x1FF).
fn enabled(index: usize, id: u32) -> Lapic {
    let mut lapic = Lapic::new(index, id);
    assert_eq!(wr(&mut lapic, 0xF0, 0x1FF), None);
    lapic
}

/// Switches an enabled xAPIC to x2APIC mode.
fn to_x2apic(lapic: &mut Lapic) {
    let base = lapic.apic_base() | APIC_BASE_EXTD;
    lapic.set_apic_base(base).expect("xAPIC -> x2APIC is legal");
}

/// A software-enabled x2APIC.
fn enabled_x2apic(index: usize, id: u32) -> Lapic {
    let mut lapic = enabled(index, id);
    to_x2apic(&mut lapic);
    lapic
}

/// `n` software-enabled vCPUs in xAPIC (`x2apic == false`) or x2APIC mode,
/// APIC ID = index.
fn group(n: usize, x2apic: bool) -> LapicGroup {
    LapicGroup::from_lapics((0..n).map(|i| {
        if x2apic {
            enabled_x2apic(i, i as u32)
        } else {
            enabled(i, i as u32)
        }
    }))
}
