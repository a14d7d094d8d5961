use crate::lapic::{DeliveryMode, DestMode, Icr, IcrFormat, Level, Shorthand, Trigger};

#[test]
fn xapic_icr_fields() {
    // Vector 0x41, NMI, logical, assert, level, all-excluding-self, dest 0xA5.
    let low = 0x41 | 4 << 8 | 1 << 11 | 1 << 14 | 1 << 15 | 3 << 18;
    let icr = Icr::from_xapic(low, 0xA5 << 24 | 0x00FF_FFFF);
    assert_eq!(icr.vector, 0x41);
    assert_eq!(icr.delivery_mode, DeliveryMode::Nmi);
    assert_eq!(icr.dest_mode, DestMode::Logical);
    assert_eq!(icr.level, Level::Assert);
    assert_eq!(icr.trigger, Trigger::Level);
    assert_eq!(icr.shorthand, Shorthand::AllExcludingSelf);
    assert_eq!(icr.destination, 0xA5, "only ICR high bits 31:24 count");
    assert_eq!(icr.format, IcrFormat::XApic);
    assert_eq!(icr.low(), low);
    assert_eq!(icr.to_raw(), u64::from(low) | 0xA5 << 56);
}

#[test]
fn x2apic_icr_has_32_bit_destination() {
    let raw = 0x1234_5678_0000_40FDu64;
    let icr = Icr::from_raw(raw);
    assert_eq!(icr.destination, 0x1234_5678);
    assert_eq!(icr.vector, 0xFD);
    assert_eq!(icr.delivery_mode, DeliveryMode::Fixed);
    assert_eq!(icr.dest_mode, DestMode::Physical);
    assert_eq!(icr.shorthand, Shorthand::None);
    assert_eq!(icr.format, IcrFormat::X2Apic);
    assert_eq!(icr.to_raw(), raw);
}

#[test]
fn every_delivery_mode_and_shorthand_decodes() {
    let modes = [
        DeliveryMode::Fixed,
        DeliveryMode::LowestPriority,
        DeliveryMode::Smi,
        DeliveryMode::Reserved,
        DeliveryMode::Nmi,
        DeliveryMode::Init,
        DeliveryMode::StartUp,
        DeliveryMode::ExtInt,
    ];
    for (bits, mode) in modes.iter().enumerate() {
        let icr = Icr::from_raw((bits as u64) << 8);
        assert_eq!(icr.delivery_mode, *mode);
        assert_eq!(mode.bits(), bits as u32);
    }
    let shorthands = [
        Shorthand::None,
        Shorthand::SelfOnly,
        Shorthand::AllIncludingSelf,
        Shorthand::AllExcludingSelf,
    ];
    for (bits, sh) in shorthands.iter().enumerate() {
        assert_eq!(Icr::from_raw((bits as u64) << 18).shorthand, *sh);
    }
}

#[test]
fn init_deassert_is_recognised() {
    // INIT, level 0, level-triggered.
    assert!(Icr::from_raw(5 << 8 | 1 << 15).is_init_deassert());
    // INIT assert, level-triggered.
    assert!(!Icr::from_raw(5 << 8 | 1 << 14 | 1 << 15).is_init_deassert());
    // INIT edge.
    assert!(!Icr::from_raw(5 << 8).is_init_deassert());
}

#[test]
fn self_ipi_command() {
    let icr = Icr::self_ipi(0x99);
    assert_eq!(icr.vector, 0x99);
    assert_eq!(icr.delivery_mode, DeliveryMode::Fixed);
    assert_eq!(icr.shorthand, Shorthand::SelfOnly);
    assert_eq!(icr.trigger, Trigger::Edge);
}
