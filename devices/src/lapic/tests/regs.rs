//! xAPIC register semantics through the MMIO path.

use super::{enabled, rd, wr};
use crate::lapic::regs::{ESR_ILLEGAL_REGISTER, LVT_MASKED};
use crate::lapic::{Lapic, Lvt, Register, VectorSet, APIC_VERSION, APIC_VERSION_WITH_CMCI};

#[test]
fn reset_state() {
    let mut l = Lapic::new(3, 0x103);
    assert!(l.is_hw_enabled() && !l.is_sw_enabled() && !l.is_x2apic() && !l.is_bsp());
    assert!(Lapic::new(0, 0).is_bsp());
    assert_eq!(l.apic_base(), 0xFEE0_0800);
    assert_eq!(
        rd(&mut l, 0x20),
        0x03 << 24,
        "xAPIC ID = low 8 bits of the ID"
    );
    assert_eq!(rd(&mut l, 0x30), APIC_VERSION);
    assert_eq!(rd(&mut l, 0xE0), 0xFFFF_FFFF, "DFR resets to flat");
    assert_eq!(rd(&mut l, 0xF0), 0xFF, "SVR resets to 0xFF, disabled");
    for off in [0x320, 0x330, 0x340, 0x350, 0x360, 0x370] {
        assert_eq!(rd(&mut l, off), LVT_MASKED, "LVT {off:#x} masked");
    }
    for off in [
        0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0x280, 0x300, 0x310, 0x380, 0x390, 0x3E0,
    ] {
        assert_eq!(rd(&mut l, off), 0, "register {off:#x} is 0");
    }
}

#[test]
fn id_is_writable_in_xapic_bits_31_24() {
    let mut l = enabled(1, 1);
    wr(&mut l, 0x20, 0xABCD_EF12);
    assert_eq!(rd(&mut l, 0x20), 0xAB00_0000);
    assert_eq!(l.apic_id(), 0xAB);
    assert_eq!(l.initial_apic_id(), 1);
}

#[test]
fn version_is_read_only() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x30, 0);
    assert_eq!(rd(&mut l, 0x30), 0x0005_0014);
    let mut c = Lapic::new(0, 0).with_cmci(true);
    assert_eq!(rd(&mut c, 0x30), APIC_VERSION_WITH_CMCI);
}

#[test]
fn tpr_keeps_low_byte_apr_rrd_read_zero() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x80, 0xFFFF_FF5A);
    assert_eq!(rd(&mut l, 0x80), 0x5A);
    assert_eq!(l.tpr(), 0x5A);
    wr(&mut l, 0x90, 0xFF);
    wr(&mut l, 0xC0, 0xFF);
    assert_eq!(rd(&mut l, 0x90), 0);
    assert_eq!(rd(&mut l, 0xC0), 0);
}

#[test]
fn ppr_and_isr_irr_tmr_are_read_only() {
    let mut l = enabled(0, 0);
    let before = l.counters().ignored_accesses;
    for off in [0xA0u64, 0x100, 0x170, 0x180, 0x200, 0x270, 0x390] {
        wr(&mut l, off, 0xFFFF_FFFF);
        assert_eq!(rd(&mut l, off), 0, "{off:#x} stays 0");
    }
    assert_eq!(l.counters().ignored_accesses, before + 7);
    assert!(l.irr().is_empty() && l.isr().is_empty() && l.tmr().is_empty());
}

#[test]
fn ldr_keeps_bits_31_24_and_dfr_model_bits() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0xD0, 0x1234_5678);
    assert_eq!(rd(&mut l, 0xD0), 0x1200_0000);
    wr(&mut l, 0xE0, 0);
    assert_eq!(
        rd(&mut l, 0xE0),
        0x0FFF_FFFF,
        "cluster model, bits 27:0 read 1"
    );
    assert_eq!(l.dfr(), 0x0FFF_FFFF);
}

#[test]
fn svr_enable_and_lvt_masking() {
    let mut l = Lapic::new(0, 0);
    // Software-disabled: the LVT mask cannot be cleared.
    wr(&mut l, 0x350, 0x0000_0700);
    assert_eq!(rd(&mut l, 0x350), 0x0001_0700);
    wr(&mut l, 0xF0, 0xFFFF_F1FF);
    assert_eq!(rd(&mut l, 0xF0), 0x1FF, "reserved SVR bits dropped");
    assert!(l.is_sw_enabled());
    wr(&mut l, 0x350, 0x0000_0700);
    assert_eq!(rd(&mut l, 0x350), 0x0000_0700);
    // Clearing the enable bit masks every LVT.
    wr(&mut l, 0xF0, 0xFF);
    assert!(!l.is_sw_enabled());
    assert_eq!(l.lvt(Lvt::Lint0), 0x0001_0700);
}

#[test]
fn lvt_writable_bits_per_entry() {
    let mut l = enabled(0, 0);
    for (lvt, expect) in [
        (Lvt::Timer, 0x0007_00FF),
        (Lvt::Thermal, 0x0001_07FF),
        (Lvt::Perf, 0x0001_07FF),
        (Lvt::Lint0, 0x0001_A7FF),
        (Lvt::Lint1, 0x0001_A7FF),
        (Lvt::Error, 0x0001_00FF),
    ] {
        wr(&mut l, u64::from(lvt.offset()), 0xFFFF_FFFF);
        assert_eq!(rd(&mut l, u64::from(lvt.offset())), expect, "{lvt:?}");
        assert_eq!(expect & (1 << 12), 0, "delivery status reads 0");
    }
}

#[test]
fn cmci_lvt_only_when_enabled() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x2F0, 0x42);
    assert_eq!(rd(&mut l, 0x2F0), 0);
    let mut c = Lapic::new(0, 0).with_cmci(true);
    wr(&mut c, 0xF0, 0x1FF);
    assert_eq!(rd(&mut c, 0x2F0), LVT_MASKED);
    wr(&mut c, 0x2F0, 0x42);
    assert_eq!(rd(&mut c, 0x2F0), 0x42);
}

#[test]
fn timer_registers_are_storage_only() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x380, 0x1234_5678);
    wr(&mut l, 0x3E0, 0xFFFF_FFFF);
    assert_eq!(rd(&mut l, 0x380), 0x1234_5678);
    assert_eq!(rd(&mut l, 0x390), 0, "the current count never runs");
    assert_eq!(rd(&mut l, 0x3E0), 0xB);
}

#[test]
fn icr_high_and_low_storage() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x310, 0x12FF_FFFF);
    assert_eq!(rd(&mut l, 0x310), 0x1200_0000);
    let req = wr(&mut l, 0x300, 0xFFFF_FFFF).expect("ICR low write sends");
    assert_eq!(
        rd(&mut l, 0x300),
        0x000C_CFFF,
        "reserved and busy bits read 0"
    );
    assert_eq!(req.source, 0);
    assert_eq!(req.icr.dest(), 0x12);
    assert_eq!(l.counters().icr_writes, 1);
}

#[test]
fn esr_latches_on_write() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x3F0, 1); // SELF IPI does not exist in xAPIC mode
    assert_eq!(rd(&mut l, 0x280), 0, "not visible before an ESR write");
    wr(&mut l, 0x280, 0);
    assert_eq!(rd(&mut l, 0x280), ESR_ILLEGAL_REGISTER);
    wr(&mut l, 0x280, 0);
    assert_eq!(rd(&mut l, 0x280), 0, "cleared by the next write");
}

#[test]
fn reserved_offsets_are_ignored_and_logged() {
    let mut l = enabled(0, 0);
    for off in [
        0x0u64, 0x10, 0x40, 0x70, 0x290, 0x2E0, 0x3A0, 0x3D0, 0x400, 0xFF0,
    ] {
        assert_eq!(wr(&mut l, off, 0xFFFF_FFFF), None);
        assert_eq!(rd(&mut l, off), 0);
    }
    wr(&mut l, 0x280, 0);
    assert_eq!(l.esr(), ESR_ILLEGAL_REGISTER);
}

#[test]
fn bad_sizes_and_alignments_are_ignored() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x80, 0x20);
    let ignored = l.counters().ignored_accesses;
    assert_eq!(l.write_mmio(0x80, &[0x30]), None, "1-byte write");
    assert_eq!(
        l.write_mmio(0x84, &0x30u32.to_le_bytes()),
        None,
        "unaligned"
    );
    assert_eq!(l.write_mmio(0x80, &[0; 8]), None, "8-byte write");
    assert_eq!(l.write_mmio(0x1000, &[0; 4]), None, "past the page");
    assert_eq!(l.write_mmio(u64::MAX - 0xF, &[0; 4]), None, "huge offset");
    assert_eq!(l.tpr(), 0x20);
    assert_eq!(l.counters().ignored_accesses, ignored + 5);
    // Sub-register reads inside one register work; crossing it does not.
    let mut b = [0u8; 2];
    l.read_mmio(0x30, &mut b);
    assert_eq!(b, [0x14, 0x00]);
    l.read_mmio(0x32, &mut b);
    assert_eq!(b, [0x05, 0x00]);
    let mut b4 = [0xAAu8; 4];
    l.read_mmio(0x32, &mut b4);
    assert_eq!(b4, [0; 4]);
    let mut b3 = [0xAAu8; 3];
    l.read_mmio(0x30, &mut b3);
    assert_eq!(b3, [0; 3]);
}

#[test]
fn mmio_is_off_in_x2apic_and_disabled_modes() {
    let mut l = enabled(0, 0);
    super::to_x2apic(&mut l);
    assert_eq!(rd(&mut l, 0x30), 0xFFFF_FFFF);
    assert_eq!(wr(&mut l, 0x300, 0x40), None);
    assert_eq!(l.counters().icr_writes, 0);
    l.set_apic_base(0xFEE0_0000)
        .expect("x2APIC -> disabled is legal");
    assert_eq!(rd(&mut l, 0x20), 0xFFFF_FFFF);
}

#[test]
fn register_decoding_round_trips() {
    for off in (0..0x400).step_by(0x10) {
        if let Some(reg) = Register::from_offset(off) {
            assert_eq!(reg.offset(), off);
            assert_eq!(Register::from_msr(reg.msr()), Some(reg));
        }
    }
    assert_eq!(Register::from_offset(0x304), None);
    assert_eq!(Register::from_msr(0x830), Some(Register::IcrLow));
    assert_eq!(Register::from_msr(0x83F), Some(Register::SelfIpi));
    assert_eq!(Register::from_msr(0x840), None);
    assert_eq!(Register::from_msr(0x7FF), None);
    assert_eq!(Register::from_msr(u32::MAX), None);
}

#[test]
fn vector_set_operations() {
    let mut s = VectorSet::default();
    assert_eq!(s.highest(), None);
    assert!(!s.insert(0));
    assert!(!s.insert(255));
    assert!(s.insert(255));
    assert!(!s.insert(33));
    assert_eq!(s.highest(), Some(255));
    assert_eq!(s.word(1), 1 << 1);
    assert_eq!(s.word(7), 1 << 31);
    assert_eq!(s.word(8), 0);
    assert_eq!(s.len(), 3);
    assert!(s.remove(255));
    assert!(!s.remove(255));
    assert_eq!(s.highest(), Some(33));
    assert!(s.contains(0) && !s.contains(1));
}
