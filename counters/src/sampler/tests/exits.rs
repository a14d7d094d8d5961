//! Exit/entry pairing: counts, host time, pending exits across drains,
//! losses, and decoding from synthetic rings with each kernel's formats.

use super::super::exits::*;
use super::super::ring::PERF_RECORD_THROTTLE;
use super::formats::*;
use super::{cat, fmt, header, lost, raw, sample};
use crate::exit_reasons::Isa;

const HLT: u32 = 12;
const IO: u32 = 30;
const MSR_WRITE: u32 = 32;

fn exit(time: u64, reason: u32) -> ExitEvent {
    ExitEvent::Exit {
        time,
        reason,
        isa: Some(1),
    }
}

fn entry(time: u64) -> ExitEvent {
    ExitEvent::Entry { time }
}

/// One drain over `events`.
fn drain(p: &mut ExitPairer, events: &[ExitEvent]) -> ExitTally {
    let mut t = ExitTally::default();
    p.begin_drain();
    for &e in events {
        p.feed(&mut t, e);
    }
    p.end_drain(&mut t);
    t
}

fn tally(count: u64, timed: u64, host_ns: u64) -> ReasonTally {
    ReasonTally {
        count,
        timed,
        host_ns,
    }
}

#[test]
fn pairs_exits_with_the_next_entry() {
    let mut p = ExitPairer::new();
    // Opened while in userspace: the first entry has no exit (not unmatched).
    let t = drain(
        &mut p,
        &[
            entry(5),
            exit(100, HLT),
            entry(150),
            exit(200, HLT),
            entry(260),
            exit(300, MSR_WRITE),
            entry(310),
        ],
    );
    assert_eq!(t.by_reason[&HLT], tally(2, 2, 110));
    assert_eq!(t.by_reason[&MSR_WRITE], tally(1, 1, 10));
    assert_eq!((t.exits, t.entries, t.unmatched), (3, 4, 0));
    assert_eq!(t.isa, Some(Isa::Vmx));
    assert_eq!((t.pending, t.carried_in), (None, None));
    assert!(t.is_complete());
    assert_eq!(t.host_ns(), 120);
}

#[test]
fn pending_exit_is_counted_where_seen_and_timed_where_completed() {
    let mut p = ExitPairer::new();
    // Begin marker: the IO exit of the marker is in progress at the drain.
    let before = drain(&mut p, &[exit(10, HLT), entry(20), exit(30, IO)]);
    assert_eq!(before.by_reason[&IO], tally(1, 0, 0));
    assert_eq!(before.pending, Some(IO));
    // The phase: its first entry completes the begin marker's exit.
    let phase = drain(
        &mut p,
        &[
            entry(1030),
            exit(1100, MSR_WRITE),
            entry(1150),
            exit(1200, IO),
        ],
    );
    assert_eq!(
        phase.carried_in,
        Some(CarriedExit {
            reason: IO,
            host_ns: 1000
        })
    );
    // by_reason: the end marker's exit counted (untimed), the MSR exit timed;
    // the begin marker's round trip is not in the phase's per-reason time.
    assert_eq!(phase.by_reason[&IO], tally(1, 0, 0));
    assert_eq!(phase.by_reason[&MSR_WRITE], tally(1, 1, 50));
    assert_eq!(phase.pending, Some(IO));
    assert_eq!(phase.unmatched, 0);
    // An empty drain keeps the pending exit.
    let empty = drain(&mut p, &[]);
    assert_eq!((empty.exits, empty.pending), (0, Some(IO)));
    let after = drain(&mut p, &[entry(1700)]);
    assert_eq!(after.carried_in.map(|c| c.host_ns), Some(500));
}

#[test]
fn merged_consecutive_drains_equal_one_drain() {
    let events = [
        entry(1),
        exit(10, HLT),
        entry(15),
        exit(20, IO),
        entry(40),
        exit(50, IO),
        entry(95),
        exit(100, MSR_WRITE),
    ];
    let whole = drain(&mut ExitPairer::new(), &events);
    for cuts in [[1, 4], [2, 5], [0, 8], [3, 3], [4, 7]] {
        let mut p = ExitPairer::new();
        let mut merged = ExitTally::default();
        let parts = [
            &events[..cuts[0]],
            &events[cuts[0]..cuts[1]],
            &events[cuts[1]..],
        ];
        for part in parts {
            merged.merge(&drain(&mut p, part));
        }
        assert_eq!(merged, whole, "cuts {cuts:?}");
    }
}

#[test]
fn lost_records_are_reported_and_pairing_restarts() {
    let mut p = ExitPairer::new();
    let t = drain(
        &mut p,
        &[
            exit(10, HLT),
            ExitEvent::Lost(5),
            entry(90),
            exit(100, IO),
            entry(120),
        ],
    );
    assert_eq!(t.lost, 5);
    assert!(!t.is_complete());
    let full = ExitTally {
        ring_full: true,
        ..Default::default()
    };
    assert!(!full.is_complete());
    let mut merged = ExitTally::default();
    merged.merge(&full);
    assert!(merged.ring_full);
    // The HLT exit lost its entry (unmatched, untimed); the entry right after
    // the loss has no exit (expected, not unmatched); pairing resumes.
    assert_eq!(t.by_reason[&HLT], tally(1, 0, 0));
    assert_eq!(t.by_reason[&IO], tally(1, 1, 20));
    assert_eq!(t.unmatched, 1);
}

#[test]
fn anomalies_are_unmatched() {
    let mut p = ExitPairer::new();
    // Exit after exit: the first gets no time. Entry after entry (synced).
    let t = drain(&mut p, &[exit(10, HLT), exit(20, IO), entry(30), entry(40)]);
    assert_eq!(t.by_reason[&HLT], tally(1, 0, 0));
    assert_eq!(t.by_reason[&IO], tally(1, 1, 10));
    assert_eq!(t.unmatched, 2);
    // Throttling and undecodable records are counted and desync.
    let t = drain(
        &mut p,
        &[
            exit(50, HLT),
            ExitEvent::Throttled,
            entry(60),
            ExitEvent::Malformed,
            ExitEvent::Ignored,
        ],
    );
    assert_eq!((t.throttled, t.malformed, t.unmatched), (1, 1, 1));
    // Time going backwards clamps to 0 rather than wrapping.
    let t = drain(&mut p, &[exit(100, HLT), entry(90)]);
    assert_eq!(t.by_reason[&HLT], tally(1, 1, 0));
    // reset() forgets the exit in progress and the sync.
    drain(&mut p, &[exit(200, IO)]);
    p.reset();
    let t = drain(&mut p, &[entry(300)]);
    assert_eq!((t.carried_in, t.unmatched), (None, 0));
}

#[test]
fn names_follow_the_isa() {
    let mut p = ExitPairer::new();
    let t = drain(
        &mut p,
        &[
            exit(1, HLT),
            entry(2),
            exit(3, 0x8000_0021),
            entry(4),
            exit(5, 33),
            entry(6),
            exit(7, 5),
            entry(8),
        ],
    );
    let n = t.named(None);
    assert_eq!(n["HLT"], tally(1, 1, 1));
    // FAILED_VMENTRY | INVALID_STATE shares INVALID_STATE's name.
    assert_eq!(n["INVALID_STATE"], tally(2, 2, 2));
    assert_eq!(n["0x5"], tally(1, 1, 1)); // reserved VMX reason
    let svm = t.named(Some(Isa::Svm));
    assert!(svm.contains_key("0xc"));
}

/// The exit and entry raw data of one kernel, with sample ids 100 and 200.
fn ring_bytes(exit_text: &str, entry_text: &str) -> (ExitDecoder, Vec<u8>) {
    let (xf, ef) = (fmt(exit_text), fmt(entry_text));
    let d = ExitDecoder::new(&xf, &ef, 100, 200).unwrap();
    let x = |reason: u64| raw(&xf, &[("exit_reason", reason), ("isa", 2), ("vcpu_id", 1)]);
    let e = raw(&ef, &[("vcpu_id", 1)]);
    let mut thr = header(PERF_RECORD_THROTTLE, 24);
    thr.extend_from_slice(&[0; 16]);
    let bytes = cat(&[
        sample(200, 1_000, &e),
        sample(100, 2_000, &x(0x7c)), // msr
        sample(200, 2_400, &e),
        sample(100, 3_000, &x(0x78)), // hlt
        lost(100, 7),
        sample(200, 9_000, &e),
        sample(100, 9_500, &x(0x401)), // avic_incomplete_ipi
        sample(200, 9_800, &e),
        sample(999, 9_900, &e), // unknown id
        sample(100, 9_950, &e), // kvm_entry data under the exit id
        thr,
        sample(100, 10_000, &x(0x7b)), // io, in progress
    ]);
    (d, bytes)
}

#[test]
fn decodes_synthetic_rings_of_each_kernel() {
    for (xt, et) in [
        (KVM_EXIT_6_1, KVM_ENTRY_6_1),
        (KVM_EXIT_6_12, KVM_ENTRY_6_12),
        (KVM_EXIT_6_18, KVM_ENTRY_6_18),
    ] {
        let (d, bytes) = ring_bytes(xt, et);
        let mut p = ExitPairer::new();
        let t = d.drain_bytes(&mut p, &bytes);
        assert_eq!(t.isa, Some(Isa::Svm));
        assert_eq!(t.by_reason[&0x7c], tally(1, 1, 400));
        assert_eq!(t.by_reason[&0x78], tally(1, 0, 0)); // its entry was lost
        assert_eq!(t.by_reason[&0x401], tally(1, 1, 300));
        assert_eq!(t.by_reason[&0x7b], tally(1, 0, 0));
        assert_eq!((t.exits, t.entries, t.lost), (4, 4, 7));
        assert_eq!((t.malformed, t.throttled, t.unmatched), (2, 1, 1));
        assert_eq!(t.pending, Some(0x7b));
        let named = t.named(None);
        assert_eq!(named["avic_incomplete_ipi"].count, 1);
        // The next drain completes the pending IO exit.
        let e = raw(&fmt(et), &[]);
        let next = d.drain_bytes(&mut p, &sample(200, 10_250, &e));
        assert_eq!(
            next.carried_in,
            Some(CarriedExit {
                reason: 0x7b,
                host_ns: 250
            })
        );
    }
}

#[test]
fn a_framing_error_counts_once_and_skips_the_rest() {
    let (xf, ef) = (fmt(KVM_EXIT_6_12), fmt(KVM_ENTRY_6_12));
    let d = ExitDecoder::new(&xf, &ef, 1, 2).unwrap();
    let x = raw(&xf, &[("exit_reason", 12)]);
    let bytes = cat(&[sample(1, 5, &x), header(9, 0), sample(2, 9, &raw(&ef, &[]))]);
    let t = d.drain_bytes(&mut ExitPairer::new(), &bytes);
    assert_eq!((t.exits, t.entries, t.malformed, t.unmatched), (1, 0, 1, 1));
    assert_eq!(t.pending, None);
}

#[test]
fn decoder_needs_exit_reason() {
    let entry = fmt(KVM_ENTRY_6_1);
    let e = ExitDecoder::new(&entry, &entry, 1, 2).unwrap_err();
    assert!(e.to_string().contains("exit_reason"), "{e}");
}
