//! APICv inhibit names and decoding on 6.1, 6.12 and 6.18.

use std::collections::BTreeMap;

use super::super::event::{CPU_WIDE_SAMPLE_TYPE, SAMPLE_TYPE};
use super::super::inhibit::*;
use super::super::ring::SampleTid;
use super::formats::*;
use super::{cat, fmt, lost, raw, sample, sample_tid};

fn names(pairs: &[(u32, &str)]) -> BTreeMap<u32, String> {
    pairs.iter().map(|&(b, n)| (b, n.to_string())).collect()
}

#[test]
fn print_fmt_names_of_6_12_and_6_18() {
    let n12 = inhibit_names(&fmt(INHIBIT_6_12).print_fmt).unwrap();
    assert_eq!(n12.len(), 12);
    assert_eq!(n12[&0], "DISABLED");
    assert_eq!(n12[&2], "ABSENT");
    assert_eq!(n12[&4], "PHYSICAL_ID_ALIASED");
    assert_eq!(n12[&9], "PIT_REINJ");
    assert_eq!(n12[&11], "LOGICAL_ID_ALIASED");
    let n18 = inhibit_names(&fmt(INHIBIT_6_18).print_fmt).unwrap();
    assert_eq!(n18.len(), 13);
    assert_eq!(n18[&12], "PHYSICAL_ID_TOO_BIG");
    // 6.1 prints hex only.
    assert_eq!(inhibit_names(&fmt(INHIBIT_6_1).print_fmt), None);
    assert_eq!(inhibit_names(""), None);
}

#[test]
fn print_fmt_with_resolved_or_literal_masks() {
    // With TRACE_DEFINE_ENUM the shift would be a number; plain masks too.
    let f = r#"__print_flags(REC->inhibits, "|", { ((((1UL))) << (3)), "BLOCKIRQ" }, { 0x1, "DISABLED" }, { BIT(5), "FIVE" }, { 0x6, "NOT_A_BIT" }, { 1UL << (70), "TOO_BIG" })"#;
    let n = inhibit_names(f).unwrap();
    assert_eq!(n, names(&[(3, "BLOCKIRQ"), (0, "DISABLED"), (5, "FIVE")]));
    // Garbage does not panic.
    for g in [
        "__print_flags(",
        "__print_flags({",
        "__print_flags({ x }",
        "__print_flags({ , \"\" })",
    ] {
        let _ = inhibit_names(g);
    }
}

#[test]
fn fallback_tables_by_release() {
    let n61 = fallback_inhibit_names("6.1.0-31-amd64").unwrap();
    assert_eq!(n61.len(), 10);
    assert_eq!(n61[&0], "DISABLED"); // 6.1 spells it DISABLE; one name everywhere
    assert_eq!(n61[&4], "APIC_ID_MODIFIED");
    assert_eq!(n61[&8], "PIT_REINJ");
    assert_eq!(n61[&9], "SEV");
    let n612 = fallback_inhibit_names("6.12.38+deb13-amd64").unwrap();
    assert_eq!(n612[&4], "PHYSICAL_ID_ALIASED");
    assert_eq!(n612[&5], "APIC_ID_MODIFIED");
    assert_eq!(n612[&10], "SEV");
    assert_eq!(n612[&11], "LOGICAL_ID_ALIASED");
    // The print-fmt table of 6.12 agrees with the built-in one.
    let printed = inhibit_names(&fmt(INHIBIT_6_12).print_fmt).unwrap();
    for (bit, name) in &printed {
        assert_eq!(&n612[bit], name);
    }
    assert_eq!(fallback_inhibit_names("5.15.0"), None);
    assert_eq!(fallback_inhibit_names("garbage"), None);
}

#[test]
fn masks_decode_differently_per_kernel() {
    let n61 = fallback_inhibit_names("6.1.0").unwrap();
    let n612 = fallback_inhibit_names("6.12.0").unwrap();
    // DISABLED | ABSENT is the same on both.
    assert_eq!(decode_mask(0b101, &n61), ["DISABLED", "ABSENT"]);
    assert_eq!(decode_mask(0b101, &n612), ["DISABLED", "ABSENT"]);
    // Bit 4 moved: APIC_ID_MODIFIED on 6.1, PHYSICAL_ID_ALIASED on 6.12.
    assert_eq!(decode_mask(1 << 4, &n61), ["APIC_ID_MODIFIED"]);
    assert_eq!(decode_mask(1 << 4, &n612), ["PHYSICAL_ID_ALIASED"]);
    assert_eq!(decode_mask((1 << 9) | (1 << 10), &n61), ["SEV", "10"]);
    assert_eq!(
        decode_mask((1 << 9) | (1 << 10), &n612),
        ["PIT_REINJ", "SEV"]
    );
    assert_eq!(decode_mask(1 << 63, &n612), ["63"]);
    assert!(decode_mask(0, &n612).is_empty());
    assert_eq!(decode_mask(0b11, &BTreeMap::new()), ["0", "1"]);
}

#[test]
fn decodes_synthetic_inhibit_records() {
    for text in [INHIBIT_6_1, INHIBIT_6_12, INHIBIT_6_18] {
        let f = fmt(text);
        let d = InhibitDecoder::new(&f, 42).unwrap();
        let rec = |reason: u64, set: u64, inhibits: u64| {
            raw(
                &f,
                &[("reason", reason), ("set", set), ("inhibits", inhibits)],
            )
        };
        let bytes = cat(&[
            sample(42, 10, &rec(0, 1, 0b1)),
            sample(42, 20, &rec(2, 1, 0b101)),
            lost(42, 2),
            sample(42, 30, &rec(2, 0, 0b1)),
            sample(7, 40, &rec(2, 0, 0b1)), // another event's id
        ]);
        let out = d.drain_bytes(&bytes);
        assert_eq!(out.lost, 2);
        assert_eq!(out.malformed, 1);
        let got: Vec<_> = out
            .changes
            .iter()
            .map(|c| (c.time_ns, c.reason, c.set, c.inhibits))
            .collect();
        assert_eq!(got, [(10, 0, true, 1), (20, 2, true, 5), (30, 2, false, 1)]);
    }
}

#[test]
fn cpu_wide_rings_keep_only_the_threads_own_changes() {
    let f = fmt(INHIBIT_6_18);
    let me = SampleTid { pid: 100, tid: 101 };
    // Ids 42 and 43: the events of two CPUs.
    let d = InhibitDecoder::for_thread(&f, vec![42, 43], CPU_WIDE_SAMPLE_TYPE, me).unwrap();
    let rec = |reason: u64| raw(&f, &[("reason", reason), ("set", 1), ("inhibits", 1)]);
    let bytes = cat(&[
        sample_tid(42, 100, 101, 10, &rec(0)), // this thread, CPU A
        sample_tid(43, 100, 102, 20, &rec(1)), // another thread of this process
        sample_tid(42, 200, 101, 30, &rec(2)), // another process's thread 101
        sample_tid(42, 200, 200, 35, &rec(3)), // another process's main thread
        lost(43, 4),
        sample_tid(43, 100, 101, 40, &rec(9)), // this thread, CPU B
        sample_tid(7, 100, 101, 50, &rec(5)),  // an id of no CPU's event
    ]);
    let out = d.drain_bytes(&bytes);
    let got: Vec<_> = out.changes.iter().map(|c| (c.time_ns, c.reason)).collect();
    assert_eq!(got, [(10, 0), (40, 9)]);
    assert_eq!((out.other_threads, out.lost, out.malformed), (3, 4, 1));
}

#[test]
fn a_thread_filter_without_tids_decodes_nothing() {
    let f = fmt(INHIBIT_6_18);
    let me = SampleTid { pid: 100, tid: 101 };
    // Samples without PERF_SAMPLE_TID cannot be attributed: malformed,
    // never taken for the thread's.
    let d = InhibitDecoder::for_thread(&f, vec![42], SAMPLE_TYPE, me).unwrap();
    let out = d.drain_bytes(&sample(42, 10, &raw(&f, &[("reason", 0), ("set", 1)])));
    assert!(out.changes.is_empty());
    assert_eq!((out.malformed, out.other_threads), (1, 0));
}
