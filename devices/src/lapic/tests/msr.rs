//! x2APIC MSR paths and IA32_APIC_BASE transitions.

use super::{enabled, enabled_x2apic, rd, to_x2apic, wr};
use crate::lapic::{
    x2apic_ldr, ApicBaseState, ApicFault, Lapic, APIC_BASE_BSP, APIC_BASE_EN, APIC_BASE_EXTD,
    XAPIC_DEFAULT_BASE,
};

const XAPIC: u64 = XAPIC_DEFAULT_BASE | APIC_BASE_EN;
const X2APIC: u64 = XAPIC | APIC_BASE_EXTD;
const DISABLED: u64 = XAPIC_DEFAULT_BASE;

#[test]
fn x2apic_id_ldr_and_version() {
    let mut l = enabled_x2apic(5, 0x1_2345);
    assert_eq!(l.read_msr(0x802), Ok(0x1_2345), "full 32-bit ID");
    assert_eq!(l.read_msr(0x803), Ok(0x5_0014));
    // LDR: cluster = id >> 4 in 31:16, bit id & 0xf in 15:0.
    assert_eq!(l.read_msr(0x80D), Ok(0x1234 << 16 | 1 << 5));
    assert_eq!(x2apic_ldr(0x1F), 1 << 16 | 1 << 15);
    for msr in [
        0x802, 0x803, 0x80A, 0x80D, 0x810, 0x817, 0x818, 0x820, 0x827, 0x839,
    ] {
        assert_eq!(
            l.write_msr(msr, 0),
            Err(ApicFault::ReadOnly(msr)),
            "{msr:#x}"
        );
    }
    assert_eq!(l.read_msr(0x802), Ok(0x1_2345));
}

#[test]
fn msrs_that_do_not_exist_in_x2apic_mode_fault() {
    let mut l = enabled_x2apic(0, 0);
    for msr in [
        0x800, 0x801, 0x804, 0x809, 0x80C, 0x80E, 0x829, 0x82F, 0x831, 0x83A, 0x83D,
    ] {
        assert_eq!(
            l.read_msr(msr),
            Err(ApicFault::ReservedMsr(msr)),
            "{msr:#x}"
        );
        assert_eq!(
            l.write_msr(msr, 0),
            Err(ApicFault::ReservedMsr(msr)),
            "{msr:#x}"
        );
    }
    for msr in [0x840, 0x8FF, 0xBFF] {
        assert_eq!(
            l.read_msr(msr),
            Err(ApicFault::ReservedMsr(msr)),
            "{msr:#x}"
        );
    }
    assert_eq!(l.read_msr(0xC00), Err(ApicFault::NotApicMsr(0xC00)));
    assert_eq!(l.write_msr(0x10, 0), Err(ApicFault::NotApicMsr(0x10)));
    assert_eq!(l.counters().faults, 11 * 2 + 3 + 2);
}

#[test]
fn x2apic_msrs_fault_outside_x2apic_mode() {
    let mut l = enabled(0, 0);
    assert_eq!(l.read_msr(0x802), Err(ApicFault::NotX2ApicMode(0x802)));
    assert_eq!(
        l.write_msr(0x830, 0x40),
        Err(ApicFault::NotX2ApicMode(0x830))
    );
    assert_eq!(l.counters().icr_writes, 0);
}

#[test]
fn write_only_registers_fault_on_read() {
    let mut l = enabled_x2apic(0, 0);
    assert_eq!(l.read_msr(0x80B), Err(ApicFault::WriteOnly(0x80B)));
    assert_eq!(l.read_msr(0x83F), Err(ApicFault::WriteOnly(0x83F)));
}

#[test]
fn eoi_msr_requires_zero() {
    let mut l = enabled_x2apic(0, 0);
    l.irr.insert(0x40);
    assert!(l.ack(0x40));
    assert_eq!(l.write_msr(0x80B, 1), Err(ApicFault::NonZeroEoi(1)));
    assert!(l.isr().contains(0x40), "a faulting EOI does nothing");
    assert_eq!(l.write_msr(0x80B, 0), Ok(None));
    assert!(l.isr().is_empty());
    assert_eq!(l.counters().eois, 1);
    assert_eq!(l.counters().faults, 1);
}

#[test]
fn reserved_bits_fault() {
    let mut l = enabled_x2apic(0, 0);
    let cases: [(u32, u64); 9] = [
        (0x808, 0x100),     // TPR 31:8
        (0x808, 1 << 32),   // upper half
        (0x80F, 0x400),     // SVR
        (0x828, 1),         // ESR must be written with 0
        (0x832, 0x6 << 16), // timer mode 11b
        (0x837, 0x700),     // error LVT has no delivery mode
        (0x83E, 0x4),       // divide config bit 2
        (0x83F, 0x100),     // self IPI vector only
        (0x830, 1 << 13),   // ICR bit 13
    ];
    for (msr, value) in cases {
        assert_eq!(
            l.write_msr(msr, value),
            Err(ApicFault::ReservedBits { msr, value }),
            "{msr:#x} <- {value:#x}"
        );
    }
    for value in [1u64 << 16, 1 << 17, 1 << 20, 1 << 31] {
        assert!(l.write_msr(0x830, value).is_err(), "ICR {value:#x}");
    }
    assert_eq!(l.counters().icr_writes, 0);
    assert_eq!(l.tpr(), 0);
}

#[test]
fn read_write_registers() {
    let mut l = enabled_x2apic(0, 0);
    assert_eq!(l.write_msr(0x808, 0x5A), Ok(None));
    assert_eq!(l.read_msr(0x808), Ok(0x5A));
    assert_eq!(l.read_msr(0x80A), Ok(0x5A), "PPR follows TPR");
    assert_eq!(l.write_msr(0x835, 0x1_A7FF), Ok(None));
    assert_eq!(l.read_msr(0x835), Ok(0x1_A7FF));
    // RO bits (delivery status, remote IRR) may be written as 1, read 0.
    assert_eq!(l.write_msr(0x836, 0x5000), Ok(None));
    assert_eq!(l.read_msr(0x836), Ok(0));
    assert_eq!(l.write_msr(0x838, 0xFFFF_FFFF), Ok(None));
    assert_eq!(l.read_msr(0x838), Ok(0xFFFF_FFFF));
    assert_eq!(l.read_msr(0x839), Ok(0));
    assert_eq!(l.write_msr(0x83E, 0xB), Ok(None));
    assert_eq!(l.read_msr(0x83E), Ok(0xB));
    assert_eq!(l.write_msr(0x828, 0), Ok(None));
    assert_eq!(l.read_msr(0x828), Ok(0));
}

#[test]
fn icr_is_one_64_bit_msr() {
    let mut l = enabled_x2apic(2, 2);
    let value = 0xDEAD_BEEF_0000_4000 | 1 << 12 | 0x31;
    let req = l.write_msr(0x830, value).expect("legal").expect("sends");
    assert_eq!(req.source, 2);
    assert_eq!(req.icr.dest(), 0xDEAD_BEEF);
    assert_eq!(req.icr.vector(), 0x31);
    assert_eq!(
        l.read_msr(0x830),
        Ok(value & !(1 << 12)),
        "busy bit cleared"
    );
    assert_eq!(l.counters().icr_writes, 1);
}

#[test]
fn self_ipi_msr() {
    let mut l = enabled_x2apic(1, 1);
    let req = l.write_msr(0x83F, 0xEE).expect("legal").expect("sends");
    assert_eq!(req.source, 1);
    assert_eq!(req.icr, ipivmm_abi::Icr::fixed(0xEE).self_only());
    assert_eq!(l.counters().self_ipi_writes, 1);
    assert_eq!(l.counters().icr_writes, 0, "SELF IPI is not an ICR write");
}

#[test]
fn apic_base_msr_through_msr_path() {
    let mut l = enabled(1, 1);
    assert_eq!(l.read_msr(0x1B), Ok(XAPIC));
    assert_eq!(l.write_msr(0x1B, X2APIC), Ok(None));
    assert!(l.is_x2apic());
    assert!(l.write_msr(0x1B, XAPIC).is_err());
}

#[test]
fn legal_transitions() {
    let mut l = Lapic::new(1, 0x21);
    assert_eq!(l.base_state(), ApicBaseState::XApic);
    wr(&mut l, 0x20, 0x7700_0000);
    l.set_apic_base(X2APIC).expect("xAPIC -> x2APIC");
    assert_eq!(l.base_state(), ApicBaseState::X2Apic);
    assert_eq!(l.apic_id(), 0x21, "x2APIC ID is the initial ID");
    assert_eq!(l.ldr(), 0x2 << 16 | 1 << 1);
    l.set_apic_base(DISABLED).expect("x2APIC -> disabled");
    assert_eq!(l.base_state(), ApicBaseState::Disabled);
    l.set_apic_base(XAPIC).expect("disabled -> xAPIC");
    assert_eq!(l.apic_id(), 0x21, "xAPIC ID restored");
    assert_eq!(rd(&mut l, 0x20), 0x2100_0000);
    l.set_apic_base(DISABLED).expect("xAPIC -> disabled");
    l.set_apic_base(DISABLED).expect("disabled -> disabled");
    l.set_apic_base(XAPIC).expect("disabled -> xAPIC");
    l.set_apic_base(0xFED0_0000 | APIC_BASE_EN | APIC_BASE_BSP)
        .expect("relocation and BSP flag");
    assert_eq!(l.base_address(), 0xFED0_0000);
    assert!(l.is_bsp());
}

#[test]
fn illegal_transitions() {
    let mut l = Lapic::new(0, 0);
    let bad = |from, to| ApicFault::IllegalTransition { from, to };
    to_x2apic(&mut l);
    let x2 = l.apic_base();
    assert_eq!(
        l.set_apic_base(x2 & !APIC_BASE_EXTD),
        Err(bad(x2, x2 & !APIC_BASE_EXTD))
    );
    assert_eq!(
        l.set_apic_base(x2 & !APIC_BASE_EN),
        Err(bad(x2, x2 & !APIC_BASE_EN))
    );
    l.set_apic_base(DISABLED).expect("x2APIC -> disabled");
    assert_eq!(l.set_apic_base(X2APIC), Err(bad(DISABLED, X2APIC)));
    assert_eq!(l.base_state(), ApicBaseState::Disabled);
    for reserved in [1u64, 0x80, 0x200, 1 << 52, 1 << 63] {
        assert_eq!(
            l.set_apic_base(XAPIC | reserved),
            Err(ApicFault::ApicBaseReserved(XAPIC | reserved))
        );
    }
    let mut narrow = Lapic::new(1, 1).with_phys_addr_bits(36);
    assert!(narrow.set_apic_base(XAPIC | 1 << 36).is_err());
    let mut no_x2 = Lapic::new(1, 1).with_x2apic_support(false);
    assert_eq!(
        no_x2.set_apic_base(X2APIC),
        Err(ApicFault::ApicBaseReserved(X2APIC))
    );
}

#[test]
fn disabling_resets_state() {
    let mut l = enabled(1, 1);
    wr(&mut l, 0x80, 0x30);
    l.irr.insert(0x50);
    l.accept_nmi();
    l.set_apic_base(DISABLED).expect("legal");
    assert!(!l.has_pending_event());
    assert_eq!(l.pending_vector(), None);
    l.set_apic_base(XAPIC).expect("legal");
    assert!(!l.is_sw_enabled());
    assert_eq!(l.tpr(), 0);
    assert!(l.irr().is_empty());
}
