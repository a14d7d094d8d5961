//! Property tests of the guest ABI's pure decoders and encoders: every raw
//! enum decoder accepts exactly its documented values, names round-trip, the
//! ICR low-word encoder sets only its fields, and `pv_ipi_calls` covers every
//! destination exactly once without panicking on any `u32` APIC ID.
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns
//! (see docs/reliability.md).
use ipivmm_abi::{
    icr_low, pv_ipi_calls, x2apic_logical_id, ApicMode, IpiPath, MsgKind, PvIpiCall, Shorthand,
    TargetWait, Workload, ICR_DEST_LOGICAL, ICR_LEVEL_ASSERT, PV_IPI_BITMAP_BITS,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn cases() -> u32 {
    std::env::var("IPIVMM_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn shorthand() -> impl Strategy<Value = Shorthand> {
    prop_oneof![
        Just(Shorthand::None),
        Just(Shorthand::SelfOnly),
        Just(Shorthand::AllIncludingSelf),
        Just(Shorthand::AllButSelf),
    ]
}

/// APIC IDs biased towards clusters and the top of the `u32` range, where
/// the window arithmetic of `pv_ipi_calls` could overflow.
fn apic_id() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..300,
        (u32::MAX - 300)..=u32::MAX,
        any::<u32>(),
        (0u32..4).prop_map(|k| k * 128 + 127),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn raw_decoders_accept_only_documented_values(raw in any::<u32>()) {
        prop_assert_eq!(ApicMode::from_raw(raw).is_some(), raw <= 1);
        prop_assert_eq!(IpiPath::from_raw(raw).is_some(), raw <= 1);
        prop_assert_eq!(TargetWait::from_raw(raw).is_some(), raw <= 2);
        match Workload::from_raw(raw) {
            Some(w) => prop_assert_eq!(w as u32, raw),
            None => prop_assert!(raw == 0 || raw > 7),
        }
        let k = raw as u16;
        match MsgKind::from_raw(k) {
            Some(kind) => prop_assert_eq!(kind as u16, k),
            None => prop_assert!(k == 0 || k > 7),
        }
    }

    #[test]
    fn icr_low_sets_only_its_fields(vector in any::<u8>(), logical in any::<bool>(), sh in shorthand()) {
        let v = icr_low(vector, logical, sh);
        prop_assert_eq!(v & 0xff, u32::from(vector));
        prop_assert_eq!(v & 0x700, 0, "delivery mode fixed");
        prop_assert_eq!(v & ICR_DEST_LOGICAL != 0, logical);
        prop_assert!(v & ICR_LEVEL_ASSERT != 0);
        prop_assert_eq!((v >> 18) & 3, sh as u32);
        prop_assert_eq!(v & !(0xff | ICR_DEST_LOGICAL | ICR_LEVEL_ASSERT | 3 << 18), 0);
    }

    #[test]
    fn x2apic_logical_id_is_cluster_and_one_bit(id in any::<u32>()) {
        let ldr = x2apic_logical_id(id);
        prop_assert_eq!(ldr >> 16, (id >> 4) & 0xffff);
        prop_assert_eq!((ldr & 0xffff).count_ones(), 1);
        prop_assert_eq!(ldr & 0xffff, 1 << (id & 0xf));
    }

    #[test]
    fn pv_ipi_calls_cover_every_destination_once(ids in proptest::collection::vec(apic_id(), 0..64)) {
        let mut calls: Vec<PvIpiCall> = Vec::new();
        let n = pv_ipi_calls(ids.iter().copied(), |c| calls.push(c));
        prop_assert_eq!(n, calls.len());
        let want: BTreeSet<u32> = ids.iter().copied().collect();
        let mut got = BTreeSet::new();
        let mut total = 0u32;
        for c in &calls {
            prop_assert!(c.targets() > 0, "no empty call");
            total += c.targets();
            for i in 0..PV_IPI_BITMAP_BITS {
                if c.bitmap[(i / 64) as usize] >> (i % 64) & 1 == 1 {
                    let id = c.min_apic_id.checked_add(i);
                    prop_assert!(id.is_some(), "bit {} of a call at {:#x} overflows", i, c.min_apic_id);
                    got.insert(id.unwrap_or_default());
                }
            }
        }
        prop_assert_eq!(&got, &want);
        // A destination may appear in two calls only if the input repeats it
        // after its window was flushed.
        prop_assert!(total as usize <= ids.len());
        prop_assert!(calls.len() <= ids.len());
    }
}
