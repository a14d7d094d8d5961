//! Property tests of the userspace LAPIC model through its public API:
//! ICR decoding round-trips, register offset/MSR maps are consistent, and
//! arbitrary sequences of guest accesses (xAPIC MMIO of any width and
//! offset, x2APIC RDMSR/WRMSR of any MSR and value, IA32_APIC_BASE writes,
//! raw IPIs to any destination, interrupt acknowledge/EOI) never panic and
//! keep the model's invariants (PPR, pending vector, deliveries in range,
//! counters monotonic, IPIs to nonexistent APIC IDs dropped and counted).
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns.
use ipivmm_abi::Icr;
use ipivmm_devices::lapic::regs::{ICR_BUSY, XAPIC_ICR_HIGH_WRITABLE, XAPIC_ICR_LOW_WRITABLE};
use ipivmm_devices::lapic::{
    x2apic_ldr, ApicBaseState, IpiRequest, Lapic, LapicGroup, Register, APIC_BASE_EN,
    APIC_BASE_EXTD, X2APIC_MSR_FIRST, X2APIC_MSR_ICR, XAPIC_DEFAULT_BASE,
};
use proptest::prelude::*;

use ipivmm_testkit::proptest_config as config;

#[derive(Debug, Clone)]
enum Op {
    MmioWrite {
        vcpu: usize,
        offset: u64,
        data: Vec<u8>,
    },
    MmioRead {
        vcpu: usize,
        offset: u64,
        len: usize,
    },
    MsrWrite {
        vcpu: usize,
        msr: u32,
        value: u64,
    },
    MsrRead {
        vcpu: usize,
        msr: u32,
    },
    Deliver {
        source: usize,
        raw: u64,
        xapic: bool,
    },
    AckPending {
        vcpu: usize,
    },
    Eoi {
        vcpu: usize,
    },
    TakeEvents {
        vcpu: usize,
    },
    SetBase {
        vcpu: usize,
        value: u64,
    },
    AckAny {
        vcpu: usize,
        vector: u8,
        cr8: u64,
    },
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..0x40).prop_map(|r| r << 4),
        0u64..0x1000,
        Just(0x300u64),
        Just(0x310u64),
        Just(0x0f0u64),
        any::<u64>(),
    ]
}

fn msr() -> impl Strategy<Value = u32> {
    prop_oneof![
        (0u32..0x40).prop_map(|r| X2APIC_MSR_FIRST + r),
        0x800u32..0xc00,
        Just(0x1bu32),
        Just(0x830u32),
        Just(0x83fu32),
        any::<u32>(),
    ]
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..0x100,
        any::<u32>().prop_map(u64::from),
        any::<u64>(),
        (0u64..4, any::<bool>()).prop_map(|(m, bsp)| XAPIC_DEFAULT_BASE
            | ((m & 1) * APIC_BASE_EXTD)
            | ((m >> 1) * APIC_BASE_EN)
            | (u64::from(bsp) << 8)),
        // An IPI to a destination that may not exist (0x80, 0xff, huge IDs).
        (
            any::<u8>(),
            prop_oneof![Just(0x80u64), Just(0xffu64), 0u64..8, Just(0xffff_ffffu64)]
        )
            .prop_map(|(v, d)| u64::from(v) | (1 << 14) | (d << 32)),
    ]
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    // One past the last vCPU is included: the model must refuse it, not panic.
    let vcpu = 0..=n;
    prop_oneof![
        (
            vcpu.clone(),
            offset(),
            proptest::collection::vec(any::<u8>(), 0..10)
        )
            .prop_map(|(vcpu, offset, data)| Op::MmioWrite { vcpu, offset, data }),
        (vcpu.clone(), offset(), 0usize..10).prop_map(|(vcpu, offset, len)| Op::MmioRead {
            vcpu,
            offset,
            len
        }),
        (vcpu.clone(), msr(), value()).prop_map(|(vcpu, msr, value)| Op::MsrWrite {
            vcpu,
            msr,
            value
        }),
        (vcpu.clone(), msr()).prop_map(|(vcpu, msr)| Op::MsrRead { vcpu, msr }),
        (
            vcpu.clone(),
            prop_oneof![any::<u64>(), value()],
            any::<bool>()
        )
            .prop_map(|(source, raw, xapic)| Op::Deliver { source, raw, xapic }),
        vcpu.clone().prop_map(|vcpu| Op::AckPending { vcpu }),
        vcpu.clone().prop_map(|vcpu| Op::Eoi { vcpu }),
        vcpu.clone().prop_map(|vcpu| Op::TakeEvents { vcpu }),
        (vcpu.clone(), value()).prop_map(|(vcpu, value)| Op::SetBase { vcpu, value }),
        (vcpu, any::<u8>(), any::<u64>()).prop_map(|(vcpu, vector, cr8)| Op::AckAny {
            vcpu,
            vector,
            cr8
        }),
    ]
}

fn check_invariants(l: &Lapic) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        ApicBaseState::from_apic_base(l.apic_base()),
        Some(l.base_state())
    );
    let ppr = l.ppr();
    prop_assert!(ppr & 0xf0 >= l.tpr() & 0xf0);
    prop_assert!(ppr & 0xf0 >= l.isr().highest().unwrap_or(0) & 0xf0);
    if let Some(v) = l.pending_vector() {
        prop_assert!(l.irr().contains(v));
        prop_assert!(v >> 4 > ppr >> 4);
        prop_assert_eq!(l.irr().highest(), Some(v));
    }
    if l.is_x2apic() {
        prop_assert_eq!(l.ldr(), x2apic_ldr(l.initial_apic_id()));
    } else {
        prop_assert!(l.apic_id() <= 0xff);
    }
    let c = l.counters();
    prop_assert!(c.ipis_coalesced <= c.ipis_delivered);
    Ok(())
}

fn check_delivery(d: &ipivmm_devices::lapic::Delivery, n: usize) -> Result<(), TestCaseError> {
    let kicks: Vec<usize> = d.kicks().collect();
    prop_assert!(
        kicks.windows(2).all(|w| w[0] < w[1]),
        "sorted, unique: {:?}",
        kicks
    );
    prop_assert!(kicks.iter().all(|&k| k < n));
    prop_assert!(d.rejected.iter().all(|r| r.vcpu < n));
    if d.unmatched_destination.is_some() || d.unsupported.is_some() {
        prop_assert!(d.accepted.is_empty());
    }
    Ok(())
}

fn apply(g: &mut LapicGroup, op: &Op) -> Result<(), TestCaseError> {
    let n = g.len();
    match op {
        Op::MmioWrite { vcpu, offset, data } => {
            if let Some(d) = g.handle_mmio_write(*vcpu, *offset, data) {
                check_delivery(&d, n)?;
            }
        }
        Op::MmioRead { vcpu, offset, len } => {
            let mut data = vec![0x5a; *len];
            if let Some(l) = g.get_mut(*vcpu) {
                l.read_mmio(*offset, &mut data);
            }
        }
        Op::MsrWrite { vcpu, msr, value } => match g.handle_msr_write(*vcpu, *msr, *value) {
            Ok(Some(d)) => check_delivery(&d, n)?,
            Ok(None) => {}
            Err(_) => {
                prop_assert!(*vcpu >= n || g.get(*vcpu).is_some_and(|l| l.counters().faults > 0))
            }
        },
        Op::MsrRead { vcpu, msr } => {
            if let Some(l) = g.get_mut(*vcpu) {
                let _ = l.read_msr(*msr);
            }
        }
        Op::Deliver { source, raw, xapic } => {
            let icr = if *xapic {
                Icr::from_xapic(*raw as u32, (*raw >> 32) as u32)
            } else {
                Icr::from_x2apic(*raw)
            };
            let d = g.deliver(&IpiRequest {
                source: *source,
                icr,
            });
            check_delivery(&d, n)?;
        }
        Op::AckPending { vcpu } => {
            if let Some(l) = g.get_mut(*vcpu) {
                if let Some(v) = l.pending_vector() {
                    prop_assert!(l.ack(v));
                    prop_assert!(l.isr().contains(v));
                }
            }
        }
        Op::Eoi { vcpu } => {
            if let Some(l) = g.get_mut(*vcpu) {
                l.eoi();
            }
        }
        Op::TakeEvents { vcpu } => {
            if let Some(l) = g.get_mut(*vcpu) {
                l.take_nmi();
                l.take_init();
                l.take_sipi();
            }
        }
        Op::SetBase { vcpu, value } => {
            if let Some(l) = g.get_mut(*vcpu) {
                let _ = l.set_apic_base(*value);
            }
        }
        Op::AckAny { vcpu, vector, cr8 } => {
            if let Some(l) = g.get_mut(*vcpu) {
                l.ack(*vector);
                l.set_cr8(*cr8);
            }
        }
    }
    Ok(())
}

/// Puts every APIC of `g` in `mode` and software-enables it (SVR bit 8).
fn enable(g: &mut LapicGroup, x2apic: bool) {
    for i in 0..g.len() {
        let Some(l) = g.get_mut(i) else { continue };
        if x2apic {
            let base = l.apic_base() | APIC_BASE_EXTD;
            l.set_apic_base(base).expect("xAPIC -> x2APIC");
            l.write_msr(X2APIC_MSR_FIRST + 0xf, 0x1ff).expect("SVR");
        } else {
            l.write_mmio(0xf0, &0x1ffu32.to_le_bytes());
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// What a guest writes to the ICR is the command the model delivers:
    /// through the xAPIC page (high, then low) the writable bits of both
    /// words, through the x2APIC MSR the whole value but the delivery
    /// status bit (a value with reserved bits faults instead).
    #[test]
    fn icr_writes_are_the_commands_delivered(low in any::<u32>(), high in any::<u32>(), raw in any::<u64>()) {
        let mut g = LapicGroup::new(1);
        enable(&mut g, false);
        let l = g.get_mut(0).expect("vcpu0");
        prop_assert_eq!(l.write_mmio(0x310, &high.to_le_bytes()), None);
        let req = l.write_mmio(0x300, &low.to_le_bytes()).expect("an ICR low write sends");
        let want = Icr::from_xapic(low & XAPIC_ICR_LOW_WRITABLE, high & XAPIC_ICR_HIGH_WRITABLE);
        prop_assert_eq!(req.icr, want);
        prop_assert_eq!(req.icr.dest(), high >> 24);
        let mut g = LapicGroup::new(1);
        enable(&mut g, true);
        let l = g.get_mut(0).expect("vcpu0");
        match l.write_msr(X2APIC_MSR_ICR, raw) {
            Ok(Some(req)) => {
                prop_assert_eq!(raw & u64::from(ipivmm_abi::ICR_RESERVED), 0);
                prop_assert_eq!(req.icr, Icr::from_x2apic(raw & !u64::from(ICR_BUSY)));
            }
            Ok(None) => prop_assert!(false, "an ICR write that sent nothing"),
            Err(_) => prop_assert_ne!(raw & u64::from(ipivmm_abi::ICR_RESERVED), 0),
        }
    }

    /// The offset and MSR maps agree with each other.
    #[test]
    fn register_maps_are_consistent(offset in any::<u32>(), msr in any::<u32>()) {
        if let Some(r) = Register::from_offset(offset) {
            prop_assert_eq!(r.offset(), offset);
            prop_assert_eq!(Register::from_msr(r.msr()), Some(r));
        }
        if let Some(r) = Register::from_msr(msr) {
            prop_assert_eq!(r.msr(), msr);
            prop_assert_eq!(Register::from_offset(r.offset()), Some(r));
        }
    }

    /// Arbitrary access sequences on 1..=5 vCPUs (reset state, or every APIC
    /// enabled in xAPIC or x2APIC mode first): no panic, invariants hold
    /// after every step, counters never go back.
    #[test]
    fn access_sequences_keep_invariants(
        (n, ops) in (1usize..=5).prop_flat_map(|n| (Just(n), proptest::collection::vec(op(n), 1..64))),
        start in 0u8..3,
    ) {
        let mut g = LapicGroup::new(n);
        if start > 0 {
            enable(&mut g, start == 2);
        }
        let mut last = vec![0u64; n];
        for op in &ops {
            apply(&mut g, op)?;
            for (i, l) in g.iter().enumerate() {
                check_invariants(l)?;
                let t = l.counters().total();
                prop_assert!(t >= last[i], "counters of vcpu{} went back after {:?}", i, op);
                last[i] = t;
            }
        }
    }

    /// A fixed IPI to an APIC ID no vCPU has is dropped, counted on the
    /// sender, and reaches nobody (what `--irqchip user` reports for a guest
    /// that sends to nonexistent CPUs).
    #[test]
    fn ipis_to_nonexistent_apic_ids_are_dropped(n in 1usize..=8, dest in 8u32..=0xfe, vector in 0x20u8..=0xfe,
                                                 x2apic in any::<bool>()) {
        let mut g = LapicGroup::new(n);
        enable(&mut g, x2apic);
        let before = g.get(0).map(|l| l.counters().ipis_dropped).unwrap_or_default();
        let d = if x2apic {
            g.handle_msr_write(0, 0x830, u64::from(vector) | 1 << 14 | u64::from(dest) << 32)
                .expect("ICR write")
                .expect("an IPI")
        } else {
            g.handle_mmio_write(0, 0x310, &(dest << 24).to_le_bytes());
            g.handle_mmio_write(0, 0x300, &(u32::from(vector) | 1 << 14).to_le_bytes()).expect("an IPI")
        };
        prop_assert!(d.is_dropped());
        prop_assert_eq!(d.unmatched_destination, Some(dest));
        let after = g.get(0).map(|l| l.counters().ipis_dropped).unwrap_or_default();
        prop_assert_eq!(after, before + 1);
        for l in g.iter() {
            prop_assert_eq!(l.irr().len(), 0);
        }
    }
}
