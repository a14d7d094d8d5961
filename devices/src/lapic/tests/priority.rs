//! TPR/PPR masking, acknowledge, ISR nesting and EOI order.

use super::{enabled, enabled_x2apic, rd, wr};
use crate::lapic::{Lapic, LapicGroup};

/// Puts `vector` in the IRR as a fixed IPI would.
fn raise(l: &mut Lapic, vector: u8) {
    l.accept_fixed(vector);
}

#[test]
fn highest_irr_is_delivered_first() {
    let mut l = enabled(0, 0);
    raise(&mut l, 0x31);
    raise(&mut l, 0x80);
    raise(&mut l, 0x45);
    assert_eq!(l.pending_vector(), Some(0x80));
    assert!(l.ack(0x80));
    assert!(!l.irr().contains(0x80) && l.isr().contains(0x80));
    assert_eq!(l.ppr(), 0x80);
    assert_eq!(l.pending_vector(), None, "lower classes wait for the EOI");
}

#[test]
fn tpr_masks_by_priority_class() {
    let mut l = enabled(0, 0);
    raise(&mut l, 0x5F);
    wr(&mut l, 0x80, 0x50);
    assert_eq!(l.pending_vector(), None, "class 5 is not above TPR class 5");
    wr(&mut l, 0x80, 0x4F);
    assert_eq!(l.pending_vector(), Some(0x5F));
    assert_eq!(rd(&mut l, 0xA0), 0x4F, "PPR = TPR when no ISR");
    l.set_cr8(6);
    assert_eq!(l.tpr(), 0x60);
    assert_eq!(l.cr8(), 6);
    assert_eq!(l.pending_vector(), None);
}

#[test]
fn ppr_uses_isr_class_when_above_tpr() {
    let mut l = enabled(0, 0);
    wr(&mut l, 0x80, 0x23);
    raise(&mut l, 0x47);
    assert!(l.ack(0x47));
    assert_eq!(rd(&mut l, 0xA0), 0x40, "ISR class, low nibble 0");
    wr(&mut l, 0x80, 0x45);
    assert_eq!(rd(&mut l, 0xA0), 0x45, "TPR class equal: PPR = TPR");
    wr(&mut l, 0x80, 0x23);
    wr(&mut l, 0xB0, 0);
    assert_eq!(rd(&mut l, 0xA0), 0x23);
}

#[test]
fn nested_interrupts_eoi_highest_first() {
    let mut l = enabled(0, 0);
    raise(&mut l, 0x40);
    assert!(l.ack(0x40));
    // A higher class preempts the handler of 0x40.
    raise(&mut l, 0x61);
    assert_eq!(l.pending_vector(), Some(0x61));
    assert!(l.ack(0x61));
    // Same class as the one in service: blocked.
    raise(&mut l, 0x6F);
    assert_eq!(l.pending_vector(), None);
    assert_eq!(
        rd(&mut l, 0x100 + 0x10 * 3),
        1 << 1,
        "ISR word 3 holds 0x61"
    );
    assert_eq!(l.eoi(), Some(0x61));
    assert_eq!(l.pending_vector(), Some(0x6F));
    assert!(l.ack(0x6F));
    assert_eq!(l.eoi(), Some(0x6F));
    assert_eq!(l.eoi(), Some(0x40));
    assert_eq!(l.eoi(), None, "spurious EOI is harmless");
    assert_eq!(l.counters().eois, 4);
    assert_eq!(l.ppr(), 0);
}

#[test]
fn ack_of_a_vector_not_pending_changes_nothing() {
    let mut l = enabled(0, 0);
    assert!(!l.ack(0x40));
    assert!(l.isr().is_empty());
}

#[test]
fn irr_visible_through_registers() {
    let mut l = enabled(0, 0);
    raise(&mut l, 0xFE);
    raise(&mut l, 0x20);
    assert_eq!(rd(&mut l, 0x270), 1 << 30);
    assert_eq!(rd(&mut l, 0x210), 1);
    let mut x = enabled_x2apic(1, 1);
    raise(&mut x, 0xFE);
    assert_eq!(x.read_msr(0x827), Ok(1 << 30));
}

#[test]
fn software_disabled_apic_still_injects_what_it_holds() {
    let mut l = enabled(0, 0);
    raise(&mut l, 0x40);
    wr(&mut l, 0xF0, 0xFF);
    assert_eq!(l.pending_vector(), Some(0x40));
}

#[test]
fn globally_disabled_apic_injects_nothing() {
    let mut g = LapicGroup::new(1);
    let l = g.get_mut(0).expect("vCPU 0");
    wr(l, 0xF0, 0x1FF);
    raise(l, 0x40);
    let base = l.apic_base() & !crate::lapic::APIC_BASE_EN;
    l.set_apic_base(base).expect("xAPIC -> disabled");
    assert_eq!(l.pending_vector(), None);
}

#[test]
fn init_resets_the_apic_but_keeps_the_id() {
    let mut l = enabled(1, 1);
    wr(&mut l, 0x20, 0x0900_0000);
    wr(&mut l, 0x80, 0x30);
    raise(&mut l, 0x40);
    l.accept_sipi(0x10);
    l.accept_init();
    assert_eq!(l.take_sipi(), None, "INIT discards an earlier SIPI");
    assert!(l.take_init());
    assert!(!l.take_init());
    assert_eq!(l.apic_id(), 9);
    assert_eq!(l.tpr(), 0);
    assert!(l.irr().is_empty());
    assert!(!l.is_sw_enabled());
    l.accept_sipi(0x9A);
    assert_eq!(l.take_sipi(), Some(0x9A));
    l.accept_nmi();
    assert!(l.has_pending_event());
    assert!(l.take_nmi());
    assert!(!l.take_nmi());
}
