//! Two ICR decoders stay, each for its side: the ABI's (`ipivmm_abi::Icr`,
//! `no_std` and `const`, what payloads build and the SDK counts IPIs with)
//! and the LAPIC model's (`ipivmm_devices::lapic::Icr`, every field the
//! model delivers by, reserved delivery modes kept as values). They must
//! read every ICR value alike: this checks it, field by field, on random
//! and on every low-word pattern that matters.
use ipivmm_abi as abi;
use ipivmm_devices::lapic::{self, DeliveryMode, DestMode, Level, Shorthand, Trigger};
use proptest::prelude::*;

fn delivery(m: DeliveryMode) -> Option<abi::DeliveryMode> {
    Some(match m {
        DeliveryMode::Fixed => abi::DeliveryMode::Fixed,
        DeliveryMode::LowestPriority => abi::DeliveryMode::LowestPriority,
        DeliveryMode::Smi => abi::DeliveryMode::Smi,
        DeliveryMode::Nmi => abi::DeliveryMode::Nmi,
        DeliveryMode::Init => abi::DeliveryMode::Init,
        DeliveryMode::StartUp => abi::DeliveryMode::StartUp,
        // Reserved in the SDM: the ABI has no variant for them.
        DeliveryMode::Reserved | DeliveryMode::ExtInt => return None,
    })
}

/// Both decoders on the x2APIC value `raw` (MSR 0x830) and on the xAPIC
/// pair it stands for (low word, destination in the high word's 31:24).
fn agree(raw: u64) {
    let (low, dest) = (raw as u32, (raw >> 32) as u32);
    let a = abi::Icr::from_raw(low, dest);
    let d = lapic::Icr::from_raw(raw);
    assert_eq!(a.x2apic_value(), raw);
    assert_eq!(a.vector(), d.vector, "{raw:#x}");
    assert_eq!(a.delivery_mode(), delivery(d.delivery_mode), "{raw:#x}");
    assert_eq!(a.is_assert(), d.level == Level::Assert, "{raw:#x}");
    assert_eq!(
        a.is_level_triggered(),
        d.trigger == Trigger::Level,
        "{raw:#x}"
    );
    assert_eq!(a.is_init_deassert(), d.is_init_deassert(), "{raw:#x}");
    let shorthand = match d.shorthand {
        Shorthand::None => abi::Shorthand::None,
        Shorthand::SelfOnly => abi::Shorthand::SelfOnly,
        Shorthand::AllIncludingSelf => abi::Shorthand::AllIncludingSelf,
        Shorthand::AllExcludingSelf => abi::Shorthand::AllButSelf,
    };
    assert_eq!(a.shorthand_field(), shorthand, "{raw:#x}");
    let want = match (d.shorthand, d.dest_mode) {
        (Shorthand::SelfOnly, _) => abi::Destination::SelfOnly,
        (Shorthand::AllIncludingSelf, _) => abi::Destination::AllIncludingSelf,
        (Shorthand::AllExcludingSelf, _) => abi::Destination::AllButSelf,
        (Shorthand::None, DestMode::Logical) => abi::Destination::Logical(d.destination),
        (Shorthand::None, DestMode::Physical) => abi::Destination::Physical(d.destination),
    };
    assert_eq!(a.destination(), want, "{raw:#x}");
    // xAPIC: the model reads the high word's 31:24, the ABI writes there.
    let x = abi::Icr::from_raw(low, dest & 0xff);
    let dx = lapic::Icr::from_xapic(low, x.xapic_high());
    assert_eq!(dx.destination, dest & 0xff, "{raw:#x}");
    assert_eq!(dx.low(), d.low(), "{raw:#x}");
}

#[test]
fn every_low_word_pattern_decodes_alike() {
    // Every combination of vector, delivery mode, destination mode, level,
    // trigger and shorthand, with a few destinations.
    for bits in 0u32..(1 << 8) {
        let mode = bits & 0b111;
        let logical = bits >> 3 & 1;
        let level = bits >> 4 & 1;
        let trigger = bits >> 5 & 1;
        let shorthand = bits >> 6 & 0b11;
        for vector in [0u32, 2, 15, 16, 0x40, 0xff] {
            let low =
                vector | mode << 8 | logical << 11 | level << 14 | trigger << 15 | shorthand << 18;
            for dest in [0u32, 1, 0xff, 0x1_0003, 0xffff_ffff] {
                agree(u64::from(dest) << 32 | u64::from(low));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]
    #[test]
    fn any_icr_value_decodes_alike(raw in any::<u64>()) {
        agree(raw);
    }

    #[test]
    fn one_x2apic_logical_id_rule(id in any::<u32>()) {
        prop_assert_eq!(lapic::x2apic_ldr(id), abi::x2apic_logical_id(id));
    }
}

#[test]
fn one_xapic_base() {
    assert_eq!(lapic::regs::XAPIC_DEFAULT_BASE, abi::XAPIC_BASE);
}
