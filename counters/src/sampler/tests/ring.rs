//! Ring copying and record parsing on synthetic buffers.

use proptest::prelude::*;

use super::super::event::SAMPLE_TYPE;
use super::super::ring::*;
use super::{cat, header, lost, sample};

fn parse(bytes: &[u8]) -> Vec<Result<Record<'_>, ParseError>> {
    parse_records(bytes, SAMPLE_TYPE).collect()
}

#[test]
fn empty_buffer_has_no_records() {
    assert!(parse(&[]).is_empty());
    let mut out = Vec::new();
    assert_eq!(copy_pending(&[0u8; 64], 40, 40, &mut out), Ok(0));
    assert!(out.is_empty());
}

#[test]
fn samples_lost_and_other_records() {
    let raw = [1u8, 2, 3, 4, 5];
    let mut throttle = header(PERF_RECORD_THROTTLE, 24);
    throttle.extend_from_slice(&[0; 16]); // time, id
    let bytes = cat(&[
        sample(7, 100, &raw),
        lost(7, 42),
        throttle,
        sample(8, 200, &[]),
    ]);
    let recs = parse(&bytes);
    assert_eq!(recs.len(), 4, "{recs:?}");
    let Ok(Record::Sample {
        id,
        time,
        raw: r,
        tid: None,
    }) = recs[0]
    else {
        panic!("{:?}", recs[0]);
    };
    assert_eq!((id, time), (7, 100));
    // The raw data keeps the kernel's padding: 5 bytes + 4-byte size -> 12.
    assert_eq!(r.len(), 12);
    assert_eq!(&r[..5], &raw);
    assert_eq!(recs[1], Ok(Record::Lost { id: 7, lost: 42 }));
    assert_eq!(
        recs[2],
        Ok(Record::Other {
            kind: PERF_RECORD_THROTTLE
        })
    );
    assert!(matches!(
        recs[3],
        Ok(Record::Sample {
            id: 8,
            time: 200,
            ..
        })
    ));
}

#[test]
fn malformed_sizes_stop_parsing_without_panic() {
    let good = sample(1, 1, &[9; 8]);
    // size 0: would loop forever if not rejected.
    let zero = cat(&[good.clone(), header(PERF_RECORD_SAMPLE, 0), good.clone()]);
    let r = parse(&zero);
    assert_eq!(r.len(), 2);
    assert!(r[0].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().offset, good.len());
    // size smaller than a header.
    let h = header(PERF_RECORD_SAMPLE, 4);
    let r = parse(&h);
    assert_eq!(r.len(), 1);
    assert!(r[0].is_err());
    // size beyond the data.
    let mut cut = good.clone();
    cut.truncate(good.len() - 1);
    let r = parse(&cut);
    assert_eq!(
        r[0].as_ref().unwrap_err().what,
        "record size beyond the data"
    );
    // truncated header.
    assert!(parse(&good[..5])[0].is_err());
    // raw size beyond the record.
    let mut bad_raw = good.clone();
    bad_raw[24..28].copy_from_slice(&1000u32.to_le_bytes());
    assert_eq!(
        parse(&bad_raw)[0].as_ref().unwrap_err().what,
        "raw data beyond the record"
    );
    // sample shorter than its sample_type (header only).
    let h = header(PERF_RECORD_SAMPLE, 8);
    assert!(parse(&h)[0].is_err());
    // lost record too short.
    let mut h = header(PERF_RECORD_LOST, 16);
    h.extend_from_slice(&[0; 8]);
    let r = parse(&h);
    assert_eq!(r[0].as_ref().unwrap_err().what, "lost record too short");
}

#[test]
fn lost_samples_records_count_as_lost() {
    let mut v = header(PERF_RECORD_LOST_SAMPLES, 16);
    v.extend_from_slice(&9u64.to_le_bytes());
    assert_eq!(parse(&v), [Ok(Record::Lost { id: 0, lost: 9 })]);
    let h = header(PERF_RECORD_LOST_SAMPLES, 8);
    assert!(parse(&h)[0].is_err());
}

#[test]
fn unknown_sample_type_bits_are_reported() {
    let s = sample(1, 2, &[]);
    let read_format = 1 << 4;
    let r: Vec<_> = parse_records(&s, SAMPLE_TYPE | read_format).collect();
    assert!(r[0].is_err());
}

#[test]
fn other_sample_layouts() {
    // IP | TID | TIME | ID | CPU | PERIOD | RAW (no IDENTIFIER).
    let st = PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ID
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_RAW;
    let mut v = header(PERF_RECORD_SAMPLE, 8 + 6 * 8 + 4 + 4);
    // TID is u32 pid 0xbb then u32 tid 0xdd.
    for x in [0xaa_u64, (0xdd << 32) | 0xbb, 555, 77, 0xcc, 1] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(&4u32.to_le_bytes());
    v.extend_from_slice(&[1, 2, 3, 4]);
    let r: Vec<_> = parse_records(&v, st).collect();
    assert_eq!(
        r,
        [Ok(Record::Sample {
            id: 77,
            time: 555,
            tid: Some(SampleTid {
                pid: 0xbb,
                tid: 0xdd
            }),
            raw: &[1, 2, 3, 4]
        })]
    );
}

#[test]
fn pending_ranges_wrap() {
    assert_eq!(pending_ranges(0, 16, 64), Ok([0..16, 0..0]));
    assert_eq!(pending_ranges(60, 70, 64), Ok([60..64, 0..6]));
    // Offsets are modulo the size: stream position 1000 is byte 1000 % 64.
    assert_eq!(pending_ranges(1000, 1064, 64), Ok([40..64, 0..40]));
    assert_eq!(pending_ranges(64, 128, 64), Ok([0..64, 0..0]));
    // head behind tail, more than a buffer pending, size not a power of two.
    assert!(pending_ranges(10, 5, 64).is_err());
    assert!(pending_ranges(0, 65, 64).is_err());
    assert!(pending_ranges(0, 8, 48).is_err());
}

/// Writes stream bytes `[pos, pos + data.len())` into a ring of `size`.
fn write_ring(ring: &mut [u8], pos: u64, data: &[u8]) {
    let size = ring.len() as u64;
    for (i, b) in data.iter().enumerate() {
        ring[((pos + i as u64) % size) as usize] = *b;
    }
}

#[test]
fn record_straddling_the_end_is_reassembled() {
    let mut ring = vec![0xeeu8; 128];
    let a = sample(1, 10, &[1; 4]); // 32 bytes at 64..96
    let b = sample(2, 20, &[2; 36]); // 64 bytes at 96..128 + 0..32
    let c = lost(1, 3); // 24 bytes at 32..56
    assert_eq!((a.len(), b.len()), (32, 64));
    let stream = cat(&[a, b, c]);
    let start = 3 * 128 + 64; // the stream position wrapped 3 times
    write_ring(&mut ring, start, &stream);
    let mut out = Vec::new();
    let n = copy_pending(&ring, start, start + stream.len() as u64, &mut out).unwrap();
    assert_eq!(n, stream.len());
    assert_eq!(out, stream);
    let recs = parse(&out);
    assert_eq!(recs.len(), 3);
    assert!(
        matches!(recs[1], Ok(Record::Sample { id: 2, time: 20, raw, .. }) if raw[..36] == [2; 36])
    );
    assert_eq!(recs[2], Ok(Record::Lost { id: 1, lost: 3 }));
    // A header straddling the end (split after 4 bytes) works too.
    let mut ring = vec![0u8; 64];
    let d = sample(5, 6, &[7; 4]);
    write_ring(&mut ring, 60, &d);
    out.clear();
    copy_pending(&ring, 60, 60 + d.len() as u64, &mut out).unwrap();
    assert!(matches!(
        parse(&out)[..],
        [Ok(Record::Sample { id: 5, time: 6, .. })]
    ));
}

#[test]
fn empty_raw_is_allowed() {
    let mut v = header(PERF_RECORD_SAMPLE, 8 + 16 + 8);
    v.extend_from_slice(&3u64.to_le_bytes());
    v.extend_from_slice(&4u64.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&[0; 4]);
    assert_eq!(
        parse(&v),
        [Ok(Record::Sample {
            id: 3,
            time: 4,
            tid: None,
            raw: &[]
        })]
    );
}

proptest! {
    /// Arbitrary bytes never panic, and parsing always terminates with at
    /// most one error, which is last.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let recs = parse(&bytes);
        prop_assert!(recs.len() <= bytes.len() / 8 + 1);
        if let Some(i) = recs.iter().position(Result::is_err) {
            prop_assert_eq!(i, recs.len() - 1);
        }
    }

    /// Any tail/head pair copies exactly head - tail bytes in stream order.
    #[test]
    fn copy_is_stream_order(tail in 0u64..10_000, len in 0usize..=256) {
        let size = 256usize;
        let stream: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let mut ring = vec![0u8; size];
        write_ring(&mut ring, tail, &stream);
        let mut out = Vec::new();
        prop_assert_eq!(copy_pending(&ring, tail, tail + len as u64, &mut out), Ok(len));
        prop_assert_eq!(out, stream);
    }
}
