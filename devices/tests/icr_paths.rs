//! The commands the payloads build (`ipivmm_abi::Icr`, the one ICR
//! decoder host and guest share), written as a guest writes them through
//! the LAPIC model's registers (xAPIC: ICR high, then low; x2APIC: one
//! WRMSR), reach the vCPUs the guest SDK counts in `ipis_sent`
//! (`ipivmm_abi::icr_targets`): the model and the payload agree on every
//! delivery mode, destination mode, shorthand and logical model.
use ipivmm_abi::{icr_targets, ApicMode, Icr, LogicalModel};
use ipivmm_devices::lapic::{
    Delivery, LapicGroup, PendingEvent, RejectReason, APIC_BASE_EXTD, X2APIC_MSR_FIRST,
    X2APIC_MSR_ICR,
};
use proptest::prelude::*;

/// `n` APICs in `model`'s mode, software-enabled, their logical IDs set up
/// as the SDK's `apic::setup_logical` does.
fn group(n: usize, model: LogicalModel) -> LapicGroup {
    let mut g = LapicGroup::new(n);
    for v in 0..n {
        let l = g.get_mut(v).expect("vcpu");
        match model.dfr() {
            Some(dfr) => {
                l.write_mmio(0xf0, &0x1ffu32.to_le_bytes());
                l.write_mmio(0xe0, &dfr.to_le_bytes());
                let id = model.logical_id(v, v as u32).expect("room for 8");
                l.write_mmio(0xd0, &(id << 24).to_le_bytes());
            }
            None => {
                l.set_apic_base(l.apic_base() | APIC_BASE_EXTD)
                    .expect("xAPIC -> x2APIC");
                l.write_msr(X2APIC_MSR_FIRST + 0xf, 0x1ff).expect("SVR");
            }
        }
    }
    g
}

/// `icr` written by vCPU `sender` as a guest in `mode` writes it.
fn send(g: &mut LapicGroup, mode: ApicMode, sender: usize, icr: Icr) -> Delivery {
    match mode {
        ApicMode::Xapic => {
            let high = icr.xapic_high().to_le_bytes();
            assert!(g.handle_mmio_write(sender, 0x310, &high).is_none());
            g.handle_mmio_write(sender, 0x300, &icr.low().to_le_bytes())
                .expect("an ICR low write sends")
        }
        ApicMode::X2apic => g
            .handle_msr_write(sender, X2APIC_MSR_ICR, icr.x2apic_value())
            .expect("a legal ICR write")
            .expect("an ICR write sends"),
    }
}

/// The vCPUs the SDK counts `icr` as reaching.
fn counted(icr: Icr, model: LogicalModel, n: usize, sender: usize) -> u64 {
    let logical = |v: usize| model.logical_id(v, v as u32).map(|id| (model, id));
    icr_targets(icr, model.apic_mode(), n, sender, |v| v as u32, logical)
}

/// Every command a payload can build and [`Icr::check`] lets through.
fn command(n: usize, model: LogicalModel) -> impl Strategy<Value = Icr> {
    let kind = prop_oneof![
        (16u8..=255).prop_map(Icr::fixed),
        (16u8..=255).prop_map(Icr::lowest_priority),
        Just(Icr::nmi()),
        Just(Icr::init()),
        Just(Icr::init_deassert()),
        any::<u8>().prop_map(Icr::startup),
    ];
    let ids = 0..(n as u32 + 2);
    let logical = proptest::collection::vec(0..n, 1..=n).prop_map(move |vs| {
        vs.iter()
            .filter_map(|&v| model.logical_id(v, v as u32))
            .filter(|id| model.group(*id) == 0)
            .fold(0, |d, id| d | id)
    });
    (kind, 0u8..5, ids, logical).prop_map(move |(icr, to, id, logical)| match to {
        0 => icr.physical(id),
        1 => icr.logical(logical),
        2 => icr.self_only(),
        3 => icr.all_including_self(),
        _ => icr.all_but_self(),
    })
}

fn model() -> impl Strategy<Value = LogicalModel> {
    prop_oneof![
        Just(LogicalModel::XapicFlat),
        Just(LogicalModel::XapicCluster),
        Just(LogicalModel::X2apicCluster),
    ]
}

proptest! {
    #![proptest_config(ipivmm_testkit::proptest_config())]

    /// What the model delivers is what the payload counts as sent.
    #[test]
    fn the_model_reaches_whom_the_payload_counts(
        (n, model, icr, sender) in (1usize..=8, model()).prop_flat_map(|(n, m)| {
            (Just(n), Just(m), command(n, m), 0..n)
        })
    ) {
        let mode = model.apic_mode();
        prop_assume!(icr.check(mode).is_ok());
        let mut g = group(n, model);
        let d = send(&mut g, mode, sender, icr);
        prop_assert_eq!(d.unsupported, None);
        prop_assert_eq!(d.accepted.len() as u64, counted(icr, model, n, sender), "{:?}", d);
        if icr.is_init_deassert() {
            prop_assert!(d.rejected.iter().all(|r| r.reason == RejectReason::InitDeassert));
        }
        let event = match icr.delivery_mode() {
            Some(ipivmm_abi::DeliveryMode::Nmi) => PendingEvent::Nmi,
            Some(ipivmm_abi::DeliveryMode::Init) => PendingEvent::Init,
            Some(ipivmm_abi::DeliveryMode::StartUp) => PendingEvent::StartUp(icr.vector()),
            _ => PendingEvent::Fixed(icr.vector()),
        };
        prop_assert!(d.accepted.iter().all(|a| a.event == event), "{:?}", d);
    }
}

/// The SDK's hot paths (`icr_low`: one fixed IPI, a broadcast, a logical
/// multicast) through both register paths, written out.
#[test]
fn the_hot_paths_reach_their_targets() {
    use ipivmm_abi::{icr_low, Shorthand};
    for model in [LogicalModel::XapicFlat, LogicalModel::X2apicCluster] {
        let mode = model.apic_mode();
        let mut g = group(4, model);
        let to = |d: &Delivery| d.accepted.iter().map(|a| a.vcpu).collect::<Vec<_>>();
        let unicast = Icr::from_raw(icr_low(0x40, false, Shorthand::None), 2);
        assert_eq!(to(&send(&mut g, mode, 0, unicast)), [2], "{model:?}");
        let all = Icr::from_raw(icr_low(0x40, false, Shorthand::AllButSelf), 0);
        assert_eq!(to(&send(&mut g, mode, 1, all)), [0, 2, 3], "{model:?}");
        let dest = [1, 3]
            .iter()
            .filter_map(|&v| model.logical_id(v, v as u32))
            .fold(0, |d, id| d | id);
        let multicast = Icr::from_raw(icr_low(0x41, true, Shorthand::None), dest);
        assert_eq!(to(&send(&mut g, mode, 0, multicast)), [1, 3], "{model:?}");
        // A destination no vCPU has is dropped, and says which it was.
        let nobody = Icr::fixed(0x40).physical(9);
        let d = send(&mut g, mode, 0, nobody);
        assert_eq!(d.unmatched_destination, Some(9), "{model:?}");
    }
}
