//! IPI delivery: delivery modes, destination modes, shorthands, sets of
//! 4 and 64 vCPUs, nonexistent destinations.

use super::{group, wr};
use crate::lapic::regs::{ESR_RECEIVE_ILLEGAL_VECTOR, ESR_SEND_ILLEGAL_VECTOR};
use crate::lapic::{
    Accepted, ApicFault, IpiRequest, Lapic, LapicGroup, PendingEvent, RejectReason, Rejected,
    APIC_BASE_EN,
};
use ipivmm_abi::Icr;

const FIXED: u32 = 0;
const LOWEST: u32 = 1 << 8;
const SMI: u32 = 2 << 8;
const NMI: u32 = 4 << 8;
const INIT: u32 = 5 << 8;
const SIPI: u32 = 6 << 8;
const EXTINT: u32 = 7 << 8;
const LOGICAL: u32 = 1 << 11;
const ASSERT: u32 = 1 << 14;
const LEVEL_TRIG: u32 = 1 << 15;
const SELF: u32 = 1 << 18;
const ALL_INC: u32 = 2 << 18;
const ALL_EXC: u32 = 3 << 18;

/// xAPIC-format IPI from `source`.
fn xreq(source: usize, low: u32, dest: u32) -> IpiRequest {
    IpiRequest {
        source,
        icr: Icr::from_xapic(low | ASSERT, dest << 24),
    }
}

/// x2APIC-format IPI from `source`.
fn x2req(source: usize, low: u32, dest: u32) -> IpiRequest {
    IpiRequest {
        source,
        icr: Icr::from_x2apic(u64::from(low | ASSERT) | u64::from(dest) << 32),
    }
}

fn targets(d: &crate::lapic::Delivery) -> Vec<usize> {
    d.kicks().collect()
}

fn lapic(g: &LapicGroup, i: usize) -> &Lapic {
    g.get(i).expect("vCPU exists")
}

#[test]
fn fixed_physical_unicast() {
    let mut g = group(4, false);
    let d = g.deliver(&xreq(0, FIXED | 0x40, 2));
    assert_eq!(
        d.accepted,
        vec![Accepted {
            vcpu: 2,
            event: PendingEvent::Fixed(0x40)
        }]
    );
    assert!(d.rejected.is_empty() && d.unmatched_destination.is_none());
    assert!(lapic(&g, 2).irr().contains(0x40));
    assert_eq!(lapic(&g, 2).pending_vector(), Some(0x40));
    assert_eq!(lapic(&g, 2).counters().ipis_delivered, 1);
    for i in [0, 1, 3] {
        assert!(lapic(&g, i).irr().is_empty());
    }
}

#[test]
fn mmio_icr_write_path_end_to_end() {
    let mut g = group(4, false);
    assert_eq!(
        g.handle_mmio_write(1, 0x310, &(3u32 << 24).to_le_bytes()),
        None
    );
    let d = g
        .handle_mmio_write(1, 0x300, &(ASSERT | 0x55).to_le_bytes())
        .expect("sends");
    assert_eq!(targets(&d), vec![3]);
    assert_eq!(lapic(&g, 1).counters().icr_writes, 1);
    assert_eq!(g.handle_mmio_write(9, 0x300, &[0; 4]), None, "unknown vCPU");
}

#[test]
fn nonexistent_destination_is_counted_not_fatal() {
    let mut g = group(4, false);
    let d = g.deliver(&xreq(1, FIXED | 0x40, 9));
    assert!(d.is_dropped());
    assert_eq!(d.unmatched_destination, Some(9));
    assert_eq!(lapic(&g, 1).counters().ipis_dropped, 1);
    let mut g = group(64, true);
    let d = g.deliver(&x2req(0, FIXED | 0x40, 0x1000));
    assert_eq!(d.unmatched_destination, Some(0x1000));
    assert_eq!(lapic(&g, 0).counters().ipis_dropped, 1);
    // A request naming a sender that does not exist is still safe.
    let d = g.deliver(&x2req(1000, FIXED | SELF | 0x40, 0));
    assert!(d.is_dropped());
}

#[test]
fn physical_broadcast_4_and_64() {
    let mut g = group(4, false);
    let d = g.deliver(&xreq(1, FIXED | 0x40, 0xFF));
    assert_eq!(targets(&d), vec![0, 1, 2, 3], "0xFF includes the sender");
    let mut g = group(64, true);
    let d = g.deliver(&x2req(5, FIXED | 0x41, u32::MAX));
    assert_eq!(targets(&d), (0..64).collect::<Vec<_>>());
    // 0xFF is a plain ID in x2APIC mode.
    let mut g = group(300, true);
    assert_eq!(
        targets(&g.deliver(&x2req(0, FIXED | 0x41, 0xFF))),
        vec![0xFF]
    );
    assert_eq!(targets(&g.deliver(&x2req(0, FIXED | 0x41, 299))), vec![299]);
}

#[test]
fn logical_flat() {
    let mut g = group(4, false);
    for i in 0..4 {
        let l = g.get_mut(i).expect("vCPU");
        wr(l, 0xD0, 1 << (24 + i));
    }
    let d = g.deliver(&xreq(0, FIXED | LOGICAL | 0x40, 0b0101));
    assert_eq!(targets(&d), vec![0, 2]);
    let d = g.deliver(&xreq(0, FIXED | LOGICAL | 0x40, 0b0111_0000));
    assert_eq!(d.unmatched_destination, Some(0x70));
    let d = g.deliver(&xreq(0, FIXED | LOGICAL | 0x40, 0xFF));
    assert_eq!(targets(&d), vec![0, 1, 2, 3], "logical 0xFF broadcasts");
}

#[test]
fn logical_cluster() {
    let mut g = group(4, false);
    // vCPU i: cluster i / 2, member bit i % 2.
    for i in 0..4u32 {
        let l = g.get_mut(i as usize).expect("vCPU");
        wr(l, 0xE0, 0x0FFF_FFFF);
        wr(l, 0xD0, ((i / 2) << 4 | 1 << (i % 2)) << 24);
    }
    assert_eq!(
        targets(&g.deliver(&xreq(0, FIXED | LOGICAL | 0x40, 0x13))),
        vec![2, 3]
    );
    assert_eq!(
        targets(&g.deliver(&xreq(0, FIXED | LOGICAL | 0x40, 0x02))),
        vec![1]
    );
    assert!(g
        .deliver(&xreq(0, FIXED | LOGICAL | 0x40, 0x24))
        .is_dropped());
}

#[test]
fn x2apic_logical_cluster_bitmap_64() {
    let mut g = group(64, true);
    // Cluster 2 = IDs 32..=47; bits 0 and 15.
    let d = g.deliver(&x2req(0, FIXED | LOGICAL | 0x40, 2 << 16 | 0x8001));
    assert_eq!(targets(&d), vec![32, 47]);
    let d = g.deliver(&x2req(0, FIXED | LOGICAL | 0x40, 0xFFFF));
    assert_eq!(targets(&d), (0..16).collect::<Vec<_>>());
    let d = g.deliver(&x2req(0, FIXED | LOGICAL | 0x40, u32::MAX));
    assert_eq!(d.accepted.len(), 64);
    assert!(g
        .deliver(&x2req(0, FIXED | LOGICAL | 0x40, 4 << 16 | 1))
        .is_dropped());
}

#[test]
fn shorthands_4_and_64() {
    for (n, x2) in [(4usize, false), (64, true)] {
        let mut g = group(n, x2);
        let req = |low| {
            if x2 {
                x2req(2, low, 0x77)
            } else {
                xreq(2, low, 0x77)
            }
        };
        assert_eq!(targets(&g.deliver(&req(FIXED | SELF | 0x40))), vec![2]);
        assert_eq!(
            targets(&g.deliver(&req(FIXED | ALL_INC | 0x40))),
            (0..n).collect::<Vec<_>>()
        );
        let all_but: Vec<usize> = (0..n).filter(|&i| i != 2).collect();
        assert_eq!(targets(&g.deliver(&req(FIXED | ALL_EXC | 0x40))), all_but);
        assert_eq!(lapic(&g, 2).counters().ipis_delivered, 2);
        assert_eq!(lapic(&g, 0).counters().ipis_delivered, 2);
    }
}

#[test]
fn self_ipi_msr_through_group() {
    let mut g = group(4, true);
    let d = g
        .handle_msr_write(3, 0x83F, 0x66)
        .expect("legal")
        .expect("sends");
    assert_eq!(
        d.accepted,
        vec![Accepted {
            vcpu: 3,
            event: PendingEvent::Fixed(0x66)
        }]
    );
    assert_eq!(lapic(&g, 3).pending_vector(), Some(0x66));
    assert_eq!(g.handle_msr_write(3, 0x808, 0x10), Ok(None));
    assert_eq!(
        g.handle_msr_write(7, 0x808, 0),
        Err(ApicFault::NoSuchVcpu(7))
    );
    assert!(g.handle_msr_write(3, 0x83F, 0x100).is_err());
}

#[test]
fn software_disabled_target_masks_fixed_but_takes_nmi() {
    let mut g = group(4, false);
    wr(g.get_mut(2).expect("vCPU"), 0xF0, 0xFF);
    let d = g.deliver(&xreq(0, FIXED | ALL_EXC | 0x40, 0));
    assert_eq!(targets(&d), vec![1, 3]);
    assert_eq!(
        d.rejected,
        vec![Rejected {
            vcpu: 2,
            reason: RejectReason::SoftwareDisabled
        }]
    );
    assert!(lapic(&g, 2).irr().is_empty());
    assert_eq!(lapic(&g, 0).counters().ipis_dropped, 1);
    let d = g.deliver(&xreq(0, NMI, 2));
    assert_eq!(
        d.accepted,
        vec![Accepted {
            vcpu: 2,
            event: PendingEvent::Nmi
        }]
    );
}

#[test]
fn globally_disabled_target_matches_nothing() {
    let mut g = group(4, false);
    let l = g.get_mut(1).expect("vCPU");
    l.set_apic_base(l.apic_base() & !APIC_BASE_EN)
        .expect("legal");
    assert_eq!(g.deliver(&xreq(0, NMI, 1)).unmatched_destination, Some(1));
    assert_eq!(
        targets(&g.deliver(&xreq(0, FIXED | ALL_INC | 0x40, 0))),
        vec![0, 2, 3]
    );
}

#[test]
fn lowest_priority_picks_lowest_enabled_index() {
    let mut g = group(4, false);
    wr(g.get_mut(1).expect("vCPU"), 0xF0, 0xFF);
    let d = g.deliver(&xreq(0, LOWEST | ALL_EXC | 0x40, 0));
    assert_eq!(
        d.accepted,
        vec![Accepted {
            vcpu: 2,
            event: PendingEvent::Fixed(0x40)
        }]
    );
    assert!(d.rejected.is_empty());
    // Nobody enabled among the matches: rejected, counted as dropped.
    let d = g.deliver(&xreq(0, LOWEST | 0x40, 1));
    assert_eq!(
        d.rejected,
        vec![Rejected {
            vcpu: 1,
            reason: RejectReason::SoftwareDisabled
        }]
    );
}

#[test]
fn nmi_init_sipi() {
    let mut g = group(4, false);
    let d = g.deliver(&xreq(0, NMI | 0x12, 3));
    assert_eq!(
        d.accepted,
        vec![Accepted {
            vcpu: 3,
            event: PendingEvent::Nmi
        }]
    );
    let d = g.deliver(&xreq(0, INIT | ALL_EXC, 0));
    assert_eq!(d.accepted.len(), 3);
    assert!(d.accepted.iter().all(|a| a.event == PendingEvent::Init));
    let d = g.deliver(&xreq(0, SIPI | ALL_EXC | 0x9A, 0));
    assert!(d
        .accepted
        .iter()
        .all(|a| a.event == PendingEvent::StartUp(0x9A)));
    let l = g.get_mut(3).expect("vCPU");
    assert!(l.take_nmi());
    assert!(l.take_init());
    assert_eq!(l.take_sipi(), Some(0x9A));
    let c = lapic(&g, 1).counters();
    assert_eq!((c.nmis, c.inits, c.sipis), (0, 1, 1));
    assert_eq!(lapic(&g, 3).counters().nmis, 1);
}

#[test]
fn what_ends_a_halt_and_a_wait_for_sipi() {
    let mut g = group(2, false);
    let l = g.get_mut(1).expect("vCPU");
    assert!(!l.wakes_from_halt(true) && !l.ends_wait_for_sipi());
    // A fixed vector wakes `sti; hlt`, not `cli; hlt`.
    let _ = g.deliver(&xreq(0, 0x40, 1));
    let l = lapic(&g, 1);
    assert!(l.wakes_from_halt(true) && !l.wakes_from_halt(false));
    // An NMI wakes either, and does not end a wait for SIPI.
    let _ = g.deliver(&xreq(0, NMI, 1));
    let l = g.get_mut(1).expect("vCPU");
    assert!(l.wakes_from_halt(false) && !l.ends_wait_for_sipi());
    assert!(l.take_nmi() && !l.take_nmi(), "taken once");
    // A SIPI never wakes a halted vCPU; it ends a wait for SIPI.
    let _ = g.deliver(&xreq(0, SIPI | 0x60, 1));
    let l = g.get_mut(1).expect("vCPU");
    assert!(!l.wakes_from_halt(false) && l.ends_wait_for_sipi());
    assert_eq!(l.take_sipi(), Some(0x60));
    // An INIT wakes and ends the wait; once taken, nothing is left.
    let _ = g.deliver(&xreq(0, INIT, 1));
    let l = g.get_mut(1).expect("vCPU");
    assert!(l.wakes_from_halt(false) && l.ends_wait_for_sipi());
    assert!(l.take_init());
    assert!(!l.has_pending_event() && !l.wakes_from_halt(true));
}

/// The CI race of the user irqchip: INIT and SIPI both land before the
/// halted vCPU's thread looks. The halt drops stray SIPIs, but not one an
/// INIT precedes; a SIPI alone is dropped.
#[test]
fn a_sipi_behind_an_init_survives_the_halt() {
    let mut g = group(2, false);
    let _ = g.deliver(&xreq(0, INIT, 1));
    let _ = g.deliver(&xreq(0, SIPI | 0x9A, 1));
    let l = g.get_mut(1).expect("vCPU");
    l.drop_stray_sipi();
    assert!(l.wakes_from_halt(false));
    assert!(l.take_init());
    assert_eq!(l.take_sipi(), Some(0x9A), "kept behind the INIT");
    let _ = g.deliver(&xreq(0, SIPI | 0x9B, 1));
    let l = g.get_mut(1).expect("vCPU");
    l.drop_stray_sipi();
    assert!(!l.has_pending_event(), "dropped without an INIT");
}

#[test]
fn init_level_deassert_is_a_no_op() {
    let mut g = group(4, false);
    let req = IpiRequest {
        source: 0,
        icr: Icr::from_xapic(INIT | LEVEL_TRIG | ALL_INC, 0),
    };
    let d = g.deliver(&req);
    assert!(d.accepted.is_empty());
    assert!(d
        .rejected
        .iter()
        .all(|r| r.reason == RejectReason::InitDeassert));
    assert_eq!(lapic(&g, 0).counters().ipis_dropped, 0);
    assert!(!lapic(&g, 1).has_pending_event());
}

#[test]
fn unsupported_modes_are_reported() {
    let mut g = group(4, false);
    for (mode, expect) in [(SMI, 0b010), (3 << 8, 0b011), (EXTINT, 0b111)] {
        let d = g.deliver(&xreq(0, mode, 1));
        assert_eq!(d.unsupported, Some(expect));
        assert!(d.is_dropped());
    }
    assert_eq!(lapic(&g, 0).counters().ipis_unsupported, 3);
    assert!(!lapic(&g, 1).has_pending_event());
}

#[test]
fn illegal_vectors_log_errors_and_drop() {
    let mut g = group(4, false);
    let d = g.deliver(&xreq(0, FIXED | 0x0F, 1));
    assert_eq!(
        d.rejected,
        vec![Rejected {
            vcpu: 1,
            reason: RejectReason::IllegalVector
        }]
    );
    assert!(lapic(&g, 1).irr().is_empty());
    wr(g.get_mut(0).expect("vCPU"), 0x280, 0);
    wr(g.get_mut(1).expect("vCPU"), 0x280, 0);
    assert_eq!(lapic(&g, 0).esr(), ESR_SEND_ILLEGAL_VECTOR);
    assert_eq!(lapic(&g, 1).esr(), ESR_RECEIVE_ILLEGAL_VECTOR);
    assert_eq!(lapic(&g, 0).counters().ipis_dropped, 1);
}

#[test]
fn repeated_vector_coalesces() {
    let mut g = group(2, false);
    g.deliver(&xreq(0, FIXED | 0x40, 1));
    let d = g.deliver(&xreq(0, FIXED | 0x40, 1));
    assert_eq!(targets(&d), vec![1]);
    let c = lapic(&g, 1).counters();
    assert_eq!((c.ipis_delivered, c.ipis_coalesced), (2, 1));
    assert_eq!(lapic(&g, 1).irr().len(), 1);
}

#[test]
fn with_apic_ids_and_aliasing() {
    let mut g = LapicGroup::with_apic_ids([0x10, 0x20, 0x30]);
    for i in 0..3 {
        wr(g.get_mut(i).expect("vCPU"), 0xF0, 0x1FF);
    }
    assert_eq!(targets(&g.deliver(&xreq(0, FIXED | 0x40, 0x20))), vec![1]);
    assert!(g.deliver(&xreq(0, FIXED | 0x40, 2)).is_dropped());
    assert_eq!(g.len(), 3);
    assert!(!g.is_empty());
    assert_eq!(
        g.iter().map(Lapic::index).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
}
