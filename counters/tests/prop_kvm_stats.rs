//! Property tests of the KVM binary-stats parser (`StatsReader`): arbitrary
//! files, and kernel-shaped files (header, id, descriptors, data, as KVM
//! lays them out) with mutated header fields, descriptors and bytes. The
//! parser must never panic or allocate without bound, and a file it accepts
//! must give a snapshot whose every stat can be read, with unique names and
//! a delta against itself of zero for cumulative stats.
//!
//! Cases per property: 256, or `IPIVMM_PROPTEST_CASES` for long campaigns.
use ipivmm_counters::kvm_stats::{StatKind, StatsReader, DESC_FIXED_SIZE, HEADER_SIZE};
use kvm_bindings::{
    KVM_STATS_BASE_POW10, KVM_STATS_TYPE_CUMULATIVE, KVM_STATS_TYPE_INSTANT,
    KVM_STATS_TYPE_LINEAR_HIST, KVM_STATS_TYPE_LOG_HIST, KVM_STATS_TYPE_PEAK,
    KVM_STATS_UNIT_SECONDS,
};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use vmm_sys_util::tempfile::TempFile;

use ipivmm_testkit::proptest_config as config;

thread_local! {
    /// One scratch file per test thread, rewritten for every case.
    static SCRATCH: TempFile = TempFile::new().expect("temp file");
}

/// A fresh descriptor of the scratch file holding exactly `bytes`.
fn file_with(bytes: &[u8]) -> File {
    SCRATCH.with(|t| {
        let f = t.as_file();
        f.set_len(0).expect("truncate");
        f.write_all_at(bytes, 0).expect("write");
        f.try_clone().expect("dup")
    })
}

#[derive(Debug, Clone)]
struct Desc {
    flags: u32,
    exponent: i16,
    size: u16,
    offset: u32,
    bucket: u32,
    name: Vec<u8>,
}

fn flags() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(KVM_STATS_TYPE_CUMULATIVE),
        Just(KVM_STATS_TYPE_INSTANT),
        Just(KVM_STATS_TYPE_PEAK),
        Just(KVM_STATS_TYPE_LINEAR_HIST),
        Just(KVM_STATS_TYPE_LOG_HIST | KVM_STATS_UNIT_SECONDS | KVM_STATS_BASE_POW10),
        any::<u32>(),
    ]
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z_]{1,20}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..60),
        Just(b"exits".to_vec()),
    ]
}

fn desc() -> impl Strategy<Value = Desc> {
    (
        flags(),
        any::<i16>(),
        prop_oneof![Just(1u16), 0u16..40, any::<u16>()],
        prop_oneof![(0u32..64).prop_map(|w| w * 8), any::<u32>()],
        any::<u32>(),
        name(),
    )
        .prop_map(|(flags, exponent, size, offset, bucket, name)| Desc {
            flags,
            exponent,
            size,
            offset,
            bucket,
            name,
        })
}

/// Header fields at their offsets: flags, name_size, num_desc, id, desc, data.
const HDR_FIELDS: [usize; 6] = [0, 4, 8, 12, 16, 20];

#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite one header field with a value near an edge.
    Header(usize, u32),
    /// Overwrite one byte anywhere.
    Byte(usize, u8),
    /// Cut the file.
    Truncate(usize),
    /// Nothing.
    None,
}

fn edge_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..64,
        Just(48u32),
        Just(4096u32),
        Just(4097u32),
        Just(65_536u32),
        Just(65_537u32),
        (0u32..16).prop_map(|d| u32::MAX - d),
        any::<u32>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0usize..6, edge_u32()).prop_map(|(i, v)| Mutation::Header(HDR_FIELDS[i], v)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Byte(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        Just(Mutation::None),
    ]
}

/// A stats file laid out like KVM's: header, id, descriptors, data.
fn build(name_size: usize, descs: &[Desc], data_words: usize, id: &[u8]) -> Vec<u8> {
    let id_offset = HEADER_SIZE;
    let desc_offset = id_offset + name_size;
    let data_offset = desc_offset + descs.len() * (DESC_FIXED_SIZE + name_size);
    let mut b = Vec::new();
    for v in [
        0,
        name_size,
        descs.len(),
        id_offset,
        desc_offset,
        data_offset,
    ] {
        b.extend_from_slice(&(v as u32).to_ne_bytes());
    }
    let fixed = |bytes: &[u8], b: &mut Vec<u8>| {
        let mut n = bytes.to_vec();
        n.resize(name_size, 0);
        b.extend_from_slice(&n);
    };
    fixed(id, &mut b);
    for d in descs {
        b.extend_from_slice(&d.flags.to_ne_bytes());
        b.extend_from_slice(&d.exponent.to_ne_bytes());
        b.extend_from_slice(&d.size.to_ne_bytes());
        b.extend_from_slice(&d.offset.to_ne_bytes());
        b.extend_from_slice(&d.bucket.to_ne_bytes());
        fixed(&d.name, &mut b);
    }
    for i in 0..data_words {
        b.extend_from_slice(&(i as u64 * 3).to_ne_bytes());
    }
    b
}

/// What must hold for any file the reader accepts.
fn check_accepted(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let Ok(mut r) = StatsReader::new(file_with(bytes)) else {
        return Ok(false);
    };
    prop_assert!(!r.id().is_empty());
    prop_assert!(r.id().chars().all(|c| c.is_ascii_graphic()));
    let names: BTreeSet<String> = r.descriptors().iter().map(|d| d.name.clone()).collect();
    prop_assert_eq!(names.len(), r.descriptors().len(), "unique names");
    for d in r.descriptors() {
        prop_assert!(d.size >= 1);
        prop_assert_eq!(d.offset % 8, 0);
        if !d.kind.is_histogram() {
            prop_assert_eq!(d.size, 1);
        }
    }
    // The data block may lie past the end of the file: then snapshot fails
    // cleanly. Otherwise every value can be read.
    let Ok(snap) = r.snapshot() else {
        return Ok(true);
    };
    let map = snap.to_map();
    prop_assert_eq!(map.len(), names.len());
    for d in snap.descriptors() {
        prop_assert!(snap.value(&d.name).is_some());
        prop_assert_eq!(snap.get(&d.name), map.get(&d.name).copied());
    }
    let delta = snap.delta(&snap);
    for d in snap.descriptors() {
        if matches!(
            d.kind,
            StatKind::Cumulative | StatKind::LinearHist | StatKind::LogHist
        ) {
            prop_assert_eq!(delta.get(&d.name).copied(), Some(0), "{}", d.name);
        }
    }
    Ok(true)
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes at all (mostly rejected at the header).
    #[test]
    fn arbitrary_files_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_accepted(&bytes)?;
    }

    /// Kernel-shaped files with arbitrary descriptors, then one or two
    /// mutations (header fields at the edges, a byte, a cut).
    #[test]
    fn kernel_shaped_files_never_panic(
        name_size in prop_oneof![Just(48usize), 1usize..80],
        descs in proptest::collection::vec(desc(), 0..8),
        data_words in 0usize..80,
        id in prop_oneof![Just(b"kvm-42/vcpu-0".to_vec()), name()],
        m1 in mutation(),
        m2 in mutation(),
    ) {
        let mut b = build(name_size, &descs, data_words, &id);
        for m in [m1, m2] {
            match m {
                Mutation::Header(off, v) => {
                    if let Some(field) = b.get_mut(off..off + 4) {
                        field.copy_from_slice(&v.to_ne_bytes());
                    }
                }
                Mutation::Byte(i, v) => {
                    if !b.is_empty() {
                        let i = i % b.len();
                        b[i] = v;
                    }
                }
                Mutation::Truncate(n) => b.truncate(n % (b.len() + 1)),
                Mutation::None => {}
            }
        }
        check_accepted(&b)?;
    }

    /// Well-formed files (distinct names, disjoint aligned data) parse, and
    /// every value reads back from its offset.
    #[test]
    fn well_formed_files_parse(kinds in proptest::collection::vec((0u8..5, 1u16..6), 1..12)) {
        let mut descs = Vec::new();
        let mut offset = 0u32;
        for (i, (k, hist_size)) in kinds.iter().enumerate() {
            let (flags, size) = match k {
                0 => (KVM_STATS_TYPE_CUMULATIVE, 1),
                1 => (KVM_STATS_TYPE_INSTANT, 1),
                2 => (KVM_STATS_TYPE_PEAK, 1),
                3 => (KVM_STATS_TYPE_LINEAR_HIST, *hist_size),
                _ => (KVM_STATS_TYPE_LOG_HIST, *hist_size),
            };
            descs.push(Desc { flags, exponent: 0, size, offset, bucket: 4, name: format!("stat_{i}").into_bytes() });
            offset += 8 * u32::from(size);
        }
        let words = offset as usize / 8;
        let b = build(48, &descs, words, b"kvm-1/vcpu-0");
        let r = StatsReader::new(file_with(&b));
        prop_assert!(r.is_ok(), "{:?}", r.err());
        prop_assert!(check_accepted(&b)?);
        let mut r = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let snap = r.snapshot().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for d in &descs {
            let name = String::from_utf8(d.name.clone()).unwrap_or_default();
            let first = u64::from(d.offset / 8) * 3;
            let want: u64 = (0..u64::from(d.size)).map(|i| first + 3 * i).sum();
            prop_assert_eq!(snap.get(&name), Some(want), "{}", name);
        }
    }
}
