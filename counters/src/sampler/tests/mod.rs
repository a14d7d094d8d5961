//! Tests of the sampler: synthetic rings and records built from the
//! `format` files of the kernels we support, plus live tests on this host.

mod exits;
mod formats;
mod inhibit;
mod live;
mod raw;
mod ring;

use crate::tracefs::{parse_format, EventFormat};

use super::ring::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE};

/// A `perf_event_header`.
pub(super) fn header(kind: u32, size: usize) -> Vec<u8> {
    let mut v = kind.to_le_bytes().to_vec();
    v.extend_from_slice(&0u16.to_le_bytes()); // misc
    v.extend_from_slice(&(size as u16).to_le_bytes());
    v
}

/// A sample record of `sample_type = IDENTIFIER | TIME | RAW`, with the raw
/// data padded as the kernel does (`u32 size` + data to a multiple of 8).
pub(super) fn sample(id: u64, time: u64, raw: &[u8]) -> Vec<u8> {
    let raw_size = (raw.len() + 4).div_ceil(8) * 8 - 4;
    let size = 8 + 8 + 8 + 4 + raw_size;
    let mut v = header(PERF_RECORD_SAMPLE, size);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&time.to_le_bytes());
    v.extend_from_slice(&(raw_size as u32).to_le_bytes());
    v.extend_from_slice(raw);
    v.resize(size, 0);
    v
}

/// A sample record of `sample_type = IDENTIFIER | TID | TIME | RAW` (a
/// CPU-wide event's) taken in task `pid`/`tid`.
pub(super) fn sample_tid(id: u64, pid: u32, tid: u32, time: u64, raw: &[u8]) -> Vec<u8> {
    let plain = sample(id, time, raw);
    let mut v = header(PERF_RECORD_SAMPLE, plain.len() + 8);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&pid.to_le_bytes());
    v.extend_from_slice(&tid.to_le_bytes());
    v.extend_from_slice(&plain[16..]); // time, raw size, raw
    v
}

/// A `PERF_RECORD_LOST` record.
pub(super) fn lost(id: u64, n: u64) -> Vec<u8> {
    let mut v = header(PERF_RECORD_LOST, 24);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&n.to_le_bytes());
    v
}

/// Parses a format text (test input, known good).
pub(super) fn fmt(text: &str) -> EventFormat {
    parse_format(text).expect("test format parses")
}

/// The raw data of an event of `format`: `common_type` = its id, the
/// given fields set (little-endian, at the format's offsets and sizes).
pub(super) fn raw(format: &EventFormat, fields: &[(&str, u64)]) -> Vec<u8> {
    let len = format
        .fields
        .iter()
        .map(|f| (f.offset + f.size) as usize)
        .max()
        .unwrap_or(8);
    let mut v = vec![0u8; len];
    let mut put = |name: &str, value: u64| {
        let f = format
            .field(name)
            .unwrap_or_else(|| panic!("no field {name}"));
        let (o, s) = (f.offset as usize, f.size as usize);
        v[o..o + s].copy_from_slice(&value.to_le_bytes()[..s]);
    };
    put("common_type", format.id);
    for &(name, value) in fields {
        put(name, value);
    }
    v
}

/// Concatenates records.
pub(super) fn cat(records: &[Vec<u8>]) -> Vec<u8> {
    records.concat()
}
