//! Reader for KVM binary statistics (`KVM_GET_STATS_FD`, KVM api.rst 4.133).
//!
//! A stats file descriptor (from a VM or a vCPU fd) exposes a read-only
//! file: a 24-byte header (`kvm_stats_header`), an id string, a block of
//! `num_desc` descriptors (`kvm_stats_desc`, 16 bytes, followed by the name
//! in `name_size` bytes, NUL-padded) and a data block of `u64`s. Header and
//! descriptors never change for the life of the fd; only the data block does,
//! so [`StatsReader::new`] parses and validates the layout once and
//! [`StatsReader::snapshot`] costs a single `pread` of the data block.
//!
//! Histograms (`linear-hist`, `log-hist`) are kept as bucket vectors; their
//! scalar value ([`StatsSnapshot::get`], [`StatsSnapshot::delta`]) is the sum
//! of the buckets, i.e. the number of recorded samples.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::sync::Arc;

use kvm_bindings::{
    kvm_stats_desc, kvm_stats_header, KVM_STATS_BASE_MASK, KVM_STATS_BASE_POW10,
    KVM_STATS_BASE_POW2, KVM_STATS_TYPE_CUMULATIVE, KVM_STATS_TYPE_INSTANT,
    KVM_STATS_TYPE_LINEAR_HIST, KVM_STATS_TYPE_LOG_HIST, KVM_STATS_TYPE_MASK, KVM_STATS_TYPE_PEAK,
    KVM_STATS_UNIT_BOOLEAN, KVM_STATS_UNIT_BYTES, KVM_STATS_UNIT_CYCLES, KVM_STATS_UNIT_MASK,
    KVM_STATS_UNIT_NONE, KVM_STATS_UNIT_SECONDS,
};
use serde::Serialize;

/// Size of `struct kvm_stats_header`.
pub const HEADER_SIZE: usize = std::mem::size_of::<kvm_stats_header>();
/// Size of `struct kvm_stats_desc` without its trailing name.
pub const DESC_FIXED_SIZE: usize = std::mem::size_of::<kvm_stats_desc>();

/// Upper bound on `name_size` we accept (the kernel uses 48).
const MAX_NAME_SIZE: u32 = 4096;
/// Upper bound on the number of descriptors we accept (a 6.x vCPU has ~40).
const MAX_NUM_DESC: u32 = 65_536;
/// Upper bound on the data block (bytes).
const MAX_DATA_LEN: u64 = 16 << 20;

mod ioctls {
    // KVMIO is 0xAE; KVM_GET_STATS_FD is _IO(KVMIO, 0xce).
    vmm_sys_util::ioctl_io_nr!(KVM_GET_STATS_FD, 0xAE, 0xce);
}

/// Errors of the stats reader.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The `KVM_GET_STATS_FD` ioctl failed.
    #[error("KVM_GET_STATS_FD failed: {0}")]
    GetStatsFd(#[source] std::io::Error),
    /// Reading the stats file failed (including a file shorter than its header says).
    #[error("reading the KVM stats file ({what}) failed: {source}")]
    Read {
        /// Which part was being read.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The stats file is malformed.
    #[error("malformed KVM stats file: {0}")]
    Malformed(String),
}

/// Result type of this module.
pub type Result<T> = std::result::Result<T, StatsError>;

/// Gets a binary stats fd for a VM or vCPU fd (`KVM_GET_STATS_FD`).
pub fn stats_fd(fd: &impl AsRawFd) -> Result<File> {
    // SAFETY: KVM_GET_STATS_FD takes no argument and only returns a new fd
    // or -1; `fd` is a valid open descriptor borrowed for the call.
    let ret = unsafe { vmm_sys_util::ioctl::ioctl(fd, ioctls::KVM_GET_STATS_FD()) };
    if ret < 0 {
        return Err(StatsError::GetStatsFd(std::io::Error::last_os_error()));
    }
    // SAFETY: `ret` is a fresh fd returned by the kernel that nothing else owns.
    Ok(unsafe { File::from_raw_fd(ret) })
}

/// Type of a statistic (`KVM_STATS_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatKind {
    /// Monotonic counter; a window's value is `later - earlier`.
    Cumulative,
    /// Instantaneous value; a window keeps the later value.
    Instant,
    /// Highest value seen; a window keeps the later value.
    Peak,
    /// Linear histogram (bucket `i` covers `[i*bucket_size, (i+1)*bucket_size)`).
    LinearHist,
    /// Logarithmic histogram (bucket `i` covers `[2^(i-1), 2^i)`).
    LogHist,
    /// A type this reader does not know; treated like `Instant`.
    Unknown(u32),
}

impl StatKind {
    fn from_flags(flags: u32) -> Self {
        match flags & KVM_STATS_TYPE_MASK {
            KVM_STATS_TYPE_CUMULATIVE => Self::Cumulative,
            KVM_STATS_TYPE_INSTANT => Self::Instant,
            KVM_STATS_TYPE_PEAK => Self::Peak,
            KVM_STATS_TYPE_LINEAR_HIST => Self::LinearHist,
            KVM_STATS_TYPE_LOG_HIST => Self::LogHist,
            other => Self::Unknown(other),
        }
    }

    /// Whether values of this kind are bucket vectors.
    pub fn is_histogram(self) -> bool {
        matches!(self, Self::LinearHist | Self::LogHist)
    }
}

/// Unit of a statistic (`KVM_STATS_UNIT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatUnit {
    /// A plain count.
    None,
    /// Bytes.
    Bytes,
    /// Seconds (scaled by `base^exponent`, e.g. ns = pow10, -9).
    Seconds,
    /// CPU cycles.
    Cycles,
    /// 0 or 1.
    Boolean,
    /// A unit this reader does not know (raw flag bits).
    Unknown(u32),
}

impl StatUnit {
    fn from_flags(flags: u32) -> Self {
        match flags & KVM_STATS_UNIT_MASK {
            KVM_STATS_UNIT_NONE => Self::None,
            KVM_STATS_UNIT_BYTES => Self::Bytes,
            KVM_STATS_UNIT_SECONDS => Self::Seconds,
            KVM_STATS_UNIT_CYCLES => Self::Cycles,
            KVM_STATS_UNIT_BOOLEAN => Self::Boolean,
            other => Self::Unknown(other),
        }
    }
}

/// Base of the unit exponent (`KVM_STATS_BASE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatBase {
    /// Value is `raw * 10^exponent` units.
    Pow10,
    /// Value is `raw * 2^exponent` units.
    Pow2,
    /// A base this reader does not know (raw flag bits).
    Unknown(u32),
}

impl StatBase {
    fn from_flags(flags: u32) -> Self {
        match flags & KVM_STATS_BASE_MASK {
            KVM_STATS_BASE_POW10 => Self::Pow10,
            KVM_STATS_BASE_POW2 => Self::Pow2,
            other => Self::Unknown(other),
        }
    }
}

/// One parsed and validated stats descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatDesc {
    /// Stat name, e.g. `exits`.
    pub name: String,
    /// Type of the stat.
    pub kind: StatKind,
    /// Unit of the stat.
    pub unit: StatUnit,
    /// Base of `exponent`.
    pub base: StatBase,
    /// Unit exponent (e.g. -9 with `Pow10` and `Seconds` = nanoseconds).
    pub exponent: i16,
    /// Number of `u64` items (1 for scalars, bucket count for histograms).
    pub size: u16,
    /// Byte offset of the first item within the data block (multiple of 8).
    pub offset: u32,
    /// Bucket width of a linear histogram (0 otherwise).
    pub bucket_size: u32,
}

impl StatDesc {
    fn word_range(&self) -> std::ops::Range<usize> {
        let start = (self.offset / 8) as usize;
        start..start + usize::from(self.size)
    }
}

/// The value of one stat in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum StatValue<'a> {
    /// A scalar (cumulative, instant, peak or unknown kind of size 1).
    Scalar(u64),
    /// Histogram buckets.
    Histogram(&'a [u64]),
}

impl StatValue<'_> {
    /// The scalar, or for a histogram the sum of its buckets (sample count).
    pub fn total(&self) -> u64 {
        match self {
            Self::Scalar(v) => *v,
            Self::Histogram(b) => b.iter().fold(0u64, |a, &x| a.wrapping_add(x)),
        }
    }
}

/// Parsed layout of a stats file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    id: String,
    descs: Vec<StatDesc>,
    data_offset: u64,
    data_len: usize,
}

/// Reads snapshots from a KVM binary stats fd.
#[derive(Debug)]
pub struct StatsReader {
    file: File,
    id: String,
    descs: Arc<[StatDesc]>,
    data_offset: u64,
    buf: Vec<u8>,
}

impl StatsReader {
    /// Parses and validates the header and descriptors of a stats file.
    pub fn new(file: File) -> Result<Self> {
        let layout = parse_layout(&file)?;
        Ok(Self {
            file,
            id: layout.id,
            descs: layout.descs.into(),
            data_offset: layout.data_offset,
            buf: vec![0; layout.data_len],
        })
    }

    /// The id string of the stats file (e.g. `kvm-1234/vcpu-0`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// All descriptors, in file order.
    pub fn descriptors(&self) -> &[StatDesc] {
        &self.descs
    }

    /// The descriptors, to share with other readers of the same layout.
    pub fn shared_descriptors(&self) -> Arc<[StatDesc]> {
        Arc::clone(&self.descs)
    }

    /// Use `shared` instead of this reader's own descriptors when they are
    /// the same (every vCPU of a VM has the same layout): one copy for the
    /// VM rather than one per vCPU. False (own kept) when they differ.
    pub fn share_descriptors(&mut self, shared: &Arc<[StatDesc]>) -> bool {
        if *self.descs != **shared {
            return false;
        }
        self.descs = Arc::clone(shared);
        true
    }

    /// Reads every stat with one `pread` of the data block.
    pub fn snapshot(&mut self) -> Result<StatsSnapshot> {
        self.file
            .read_exact_at(&mut self.buf, self.data_offset)
            .map_err(|source| StatsError::Read {
                what: "data block",
                source,
            })?;
        let data = self
            .buf
            .chunks_exact(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(c);
                u64::from_ne_bytes(w)
            })
            .collect();
        Ok(StatsSnapshot {
            descs: Arc::clone(&self.descs),
            data,
        })
    }
}

/// Values of every stat at one instant.
#[derive(Debug, Clone)]
pub struct StatsSnapshot {
    descs: Arc<[StatDesc]>,
    data: Vec<u64>,
}

impl StatsSnapshot {
    /// Descriptors this snapshot was taken with.
    pub fn descriptors(&self) -> &[StatDesc] {
        &self.descs
    }

    fn value_of(&self, d: &StatDesc) -> StatValue<'_> {
        // Ranges were validated against the data length at parse time.
        let words = self.data.get(d.word_range()).unwrap_or(&[]);
        if d.kind.is_histogram() {
            StatValue::Histogram(words)
        } else {
            StatValue::Scalar(words.first().copied().unwrap_or(0))
        }
    }

    /// The value of stat `name`, if present.
    pub fn value(&self, name: &str) -> Option<StatValue<'_>> {
        self.descs
            .iter()
            .find(|d| d.name == name)
            .map(|d| self.value_of(d))
    }

    /// The scalar value of stat `name` (histograms: sum of buckets).
    pub fn get(&self, name: &str) -> Option<u64> {
        self.value(name).map(|v| v.total())
    }

    /// All stats as `name -> scalar` (histograms: sum of buckets).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        self.descs
            .iter()
            .map(|d| (d.name.clone(), self.value_of(d).total()))
            .collect()
    }

    /// What happened between `earlier` and `self`, per stat name.
    ///
    /// Cumulative stats and histograms subtract (a histogram yields the number
    /// of samples added; a counter that went backwards yields 0); instant, peak
    /// and unknown kinds keep the later value. A stat missing from `earlier`
    /// counts from 0.
    pub fn delta(&self, earlier: &StatsSnapshot) -> BTreeMap<String, u64> {
        let same_layout = Arc::ptr_eq(&self.descs, &earlier.descs);
        self.descs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let now = self.value_of(d).total();
                let before = if same_layout {
                    Some(earlier.value_of(&earlier.descs[i]).total())
                } else {
                    earlier.get(&d.name)
                };
                let v = match d.kind {
                    StatKind::Cumulative | StatKind::LinearHist | StatKind::LogHist => {
                        now.saturating_sub(before.unwrap_or(0))
                    }
                    StatKind::Instant | StatKind::Peak | StatKind::Unknown(_) => now,
                };
                (d.name.clone(), v)
            })
            .collect()
    }
}

fn malformed(msg: impl Into<String>) -> StatsError {
    StatsError::Malformed(msg.into())
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[off..off + 4]);
    u32::from_ne_bytes(w)
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes([b[off], b[off + 1]])
}

/// Parses a NUL-terminated name stored in a fixed-size field.
fn parse_name(raw: &[u8], what: &str) -> Result<String> {
    let end = raw
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| malformed(format!("{what} is not NUL-terminated")))?;
    if end == 0 {
        return Err(malformed(format!("{what} is empty")));
    }
    let s = std::str::from_utf8(&raw[..end])
        .map_err(|_| malformed(format!("{what} is not valid UTF-8")))?;
    if !s.chars().all(|c| c.is_ascii_graphic()) {
        return Err(malformed(format!(
            "{what} {s:?} has non-printable characters"
        )));
    }
    Ok(s.to_string())
}

fn check_disjoint(ranges: &mut [(u64, u64, &'static str)]) -> Result<()> {
    ranges.sort();
    for w in ranges.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(malformed(format!(
                "{} [{:#x}, {:#x}) overlaps {} [{:#x}, {:#x})",
                w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1
            )));
        }
    }
    Ok(())
}

fn parse_desc(raw: &[u8], index: usize, name_size: usize) -> Result<StatDesc> {
    let flags = u32_at(raw, 0);
    let exponent = u16_at(raw, 4) as i16;
    let size = u16_at(raw, 6);
    let offset = u32_at(raw, 8);
    let bucket_size = u32_at(raw, 12);
    let name = parse_name(
        &raw[DESC_FIXED_SIZE..DESC_FIXED_SIZE + name_size],
        &format!("name of descriptor {index}"),
    )?;
    let kind = StatKind::from_flags(flags);
    if size == 0 {
        return Err(malformed(format!("stat {name} has size 0")));
    }
    if !kind.is_histogram() && size != 1 {
        return Err(malformed(format!(
            "scalar stat {name} has size {size} (expected 1)"
        )));
    }
    if offset & 7 != 0 {
        return Err(malformed(format!(
            "stat {name} has unaligned offset {offset}"
        )));
    }
    Ok(StatDesc {
        name,
        kind,
        unit: StatUnit::from_flags(flags),
        base: StatBase::from_flags(flags),
        exponent,
        size,
        offset,
        bucket_size,
    })
}

/// The bytes the stats' data spans from the data offset, after checking that
/// names are unique and no two stats' data overlap.
fn data_extent(descs: &[StatDesc]) -> Result<u64> {
    let mut names = HashSet::new();
    for d in descs {
        if !names.insert(d.name.as_str()) {
            return Err(malformed(format!("duplicate stat name {}", d.name)));
        }
    }
    let mut by_offset: Vec<&StatDesc> = descs.iter().collect();
    by_offset.sort_by_key(|d| d.offset);
    for pair in by_offset.windows(2) {
        let end = u64::from(pair[0].offset) + 8 * u64::from(pair[0].size);
        if end > u64::from(pair[1].offset) {
            return Err(malformed(format!(
                "data of stats {} and {} overlap",
                pair[0].name, pair[1].name
            )));
        }
    }
    Ok(descs
        .iter()
        .map(|d| u64::from(d.offset) + 8 * u64::from(d.size))
        .max()
        .unwrap_or(0))
}

fn parse_layout(file: &impl FileExt) -> Result<Layout> {
    let read = |buf: &mut [u8], off: u64, what: &'static str| {
        file.read_exact_at(buf, off)
            .map_err(|source| StatsError::Read { what, source })
    };
    let mut hdr = [0u8; HEADER_SIZE];
    read(&mut hdr, 0, "header")?;
    // flags (offset 0) is always 0 today; unknown flags are ignored.
    let name_size = u32_at(&hdr, 4);
    let num_desc = u32_at(&hdr, 8);
    let id_offset = u32_at(&hdr, 12);
    let desc_offset = u32_at(&hdr, 16);
    let data_offset = u32_at(&hdr, 20);

    if name_size == 0 || name_size > MAX_NAME_SIZE {
        return Err(malformed(format!("name_size {name_size} out of range")));
    }
    if num_desc == 0 || num_desc > MAX_NUM_DESC {
        return Err(malformed(format!("num_desc {num_desc} out of range")));
    }
    let desc_stride = DESC_FIXED_SIZE + name_size as usize;
    let desc_len = desc_stride * num_desc as usize; // bounded: < 2^32
    if desc_len as u64 > MAX_DATA_LEN {
        return Err(malformed(format!(
            "descriptor block of {desc_len} bytes too large"
        )));
    }
    let end = |start: u32, len: u64| u64::from(start) + len;
    let header_range = (0, HEADER_SIZE as u64, "header");
    let id_range = (
        u64::from(id_offset),
        end(id_offset, u64::from(name_size)),
        "id",
    );
    let desc_range = (
        u64::from(desc_offset),
        end(desc_offset, desc_len as u64),
        "descriptor block",
    );
    check_disjoint(&mut [header_range, id_range, desc_range])?;
    let mut id_raw = vec![0u8; name_size as usize];
    read(&mut id_raw, u64::from(id_offset), "id")?;
    let id = parse_name(&id_raw, "stats id")?;

    let mut desc_raw = vec![0u8; desc_len];
    read(&mut desc_raw, u64::from(desc_offset), "descriptors")?;
    let descs = desc_raw
        .chunks_exact(desc_stride)
        .enumerate()
        .map(|(i, raw)| parse_desc(raw, i, name_size as usize))
        .collect::<Result<Vec<_>>>()?;

    let data_len = data_extent(&descs)?;
    if data_len > MAX_DATA_LEN {
        return Err(malformed(format!(
            "data block of {data_len} bytes too large"
        )));
    }
    check_disjoint(&mut [
        header_range,
        id_range,
        desc_range,
        (
            u64::from(data_offset),
            end(data_offset, data_len),
            "data block",
        ),
    ])?;
    Ok(Layout {
        id,
        descs,
        data_offset: u64::from(data_offset),
        data_len: data_len as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use vmm_sys_util::tempfile::TempFile;

    const NAME_SIZE: usize = 48;

    struct Stat<'a> {
        name: &'a [u8],
        flags: u32,
        exponent: i16,
        size: u16,
        offset: u32,
    }

    fn stat(name: &str, flags: u32, size: u16, offset: u32) -> Stat<'_> {
        Stat {
            name: name.as_bytes(),
            flags,
            exponent: 0,
            size,
            offset,
        }
    }

    /// Builds a stats file the way KVM lays it out: header, id, descriptors, data.
    fn build(stats: &[Stat], data: &[u64], patch: impl FnOnce(&mut Vec<u8>)) -> File {
        let id_offset = HEADER_SIZE;
        let desc_offset = id_offset + NAME_SIZE;
        let data_offset = desc_offset + stats.len() * (DESC_FIXED_SIZE + NAME_SIZE);
        let mut b = Vec::new();
        for v in [
            0u32,
            NAME_SIZE as u32,
            stats.len() as u32,
            id_offset as u32,
            desc_offset as u32,
            data_offset as u32,
        ] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let mut id = b"kvm-42/vcpu-0".to_vec();
        id.resize(NAME_SIZE, 0);
        b.extend_from_slice(&id);
        for s in stats {
            b.extend_from_slice(&s.flags.to_ne_bytes());
            b.extend_from_slice(&s.exponent.to_ne_bytes());
            b.extend_from_slice(&s.size.to_ne_bytes());
            b.extend_from_slice(&s.offset.to_ne_bytes());
            b.extend_from_slice(&0u32.to_ne_bytes());
            let mut n = s.name.to_vec();
            n.resize(NAME_SIZE, 0);
            b.extend_from_slice(&n[..NAME_SIZE]);
        }
        for v in data {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        patch(&mut b);
        let t = TempFile::new().unwrap();
        t.as_file().write_all(&b).unwrap();
        t.into_file()
    }

    const NS: u32 = KVM_STATS_UNIT_SECONDS | KVM_STATS_BASE_POW10;

    fn sample_stats() -> Vec<Stat<'static>> {
        vec![
            stat("exits", KVM_STATS_TYPE_CUMULATIVE, 1, 0),
            stat("halt_exits", KVM_STATS_TYPE_CUMULATIVE, 1, 8),
            stat(
                "guest_mode",
                KVM_STATS_TYPE_INSTANT | KVM_STATS_UNIT_BOOLEAN,
                1,
                16,
            ),
            stat("max_x", KVM_STATS_TYPE_PEAK, 1, 24),
            Stat {
                exponent: -9,
                ..stat("halt_wait_hist_ns", KVM_STATS_TYPE_LOG_HIST | NS, 4, 32)
            },
        ]
    }

    fn set_u32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    #[test]
    fn parses_descriptors_and_values() {
        let f = build(&sample_stats(), &[100, 7, 1, 9, 1, 2, 3, 4], |_| {});
        let mut r = StatsReader::new(f).unwrap();
        assert_eq!(r.id(), "kvm-42/vcpu-0");
        let d = r.descriptors();
        assert_eq!(d.len(), 5);
        assert_eq!(d[0].name, "exits");
        assert_eq!(d[0].kind, StatKind::Cumulative);
        assert_eq!(d[2].unit, StatUnit::Boolean);
        assert_eq!(d[3].kind, StatKind::Peak);
        assert_eq!(d[4].kind, StatKind::LogHist);
        assert_eq!(d[4].unit, StatUnit::Seconds);
        assert_eq!(d[4].base, StatBase::Pow10);
        assert_eq!(d[4].exponent, -9);
        assert_eq!(d[4].size, 4);
        let s = r.snapshot().unwrap();
        assert_eq!(s.get("exits"), Some(100));
        assert_eq!(s.get("halt_exits"), Some(7));
        assert_eq!(s.get("halt_wait_hist_ns"), Some(10));
        assert_eq!(
            s.value("halt_wait_hist_ns"),
            Some(StatValue::Histogram(&[1, 2, 3, 4]))
        );
        assert_eq!(s.get("nope"), None);
        assert_eq!(s.to_map().len(), 5);
    }

    #[test]
    fn readers_of_one_layout_share_one_copy_of_the_descriptors() {
        let a =
            StatsReader::new(build(&sample_stats(), &[1, 2, 3, 4, 0, 0, 0, 0], |_| {})).unwrap();
        let mut b =
            StatsReader::new(build(&sample_stats(), &[5, 6, 7, 8, 0, 0, 0, 0], |_| {})).unwrap();
        let shared = a.shared_descriptors();
        assert!(b.share_descriptors(&shared));
        assert!(Arc::ptr_eq(&b.shared_descriptors(), &shared));
        // Values are still this reader's own.
        assert_eq!(b.snapshot().unwrap().get("exits"), Some(5));
        let mut fewer = sample_stats();
        fewer.pop();
        let mut c = StatsReader::new(build(&fewer, &[1, 2, 3, 4], |_| {})).unwrap();
        assert!(
            !c.share_descriptors(&shared),
            "another layout keeps its own"
        );
        assert_eq!(c.descriptors().len(), 4);
    }

    #[test]
    fn delta_subtracts_cumulative_and_keeps_instant() {
        let before = build(&sample_stats(), &[100, 7, 1, 9, 1, 2, 3, 4], |_| {});
        let after = build(&sample_stats(), &[150, 7, 0, 12, 2, 2, 5, 4], |_| {});
        let s0 = StatsReader::new(before).unwrap().snapshot().unwrap();
        let s1 = StatsReader::new(after).unwrap().snapshot().unwrap();
        let d = s1.delta(&s0);
        assert_eq!(d["exits"], 50);
        assert_eq!(d["halt_exits"], 0);
        assert_eq!(d["guest_mode"], 0);
        assert_eq!(d["max_x"], 12);
        assert_eq!(d["halt_wait_hist_ns"], 3);
        // Backwards cumulative counters saturate at 0.
        assert_eq!(s0.delta(&s1)["exits"], 0);
    }

    #[test]
    fn snapshot_rereads_the_data_block() {
        let f = build(&sample_stats(), &[1, 2, 3, 4, 0, 0, 0, 0], |_| {});
        let writer = f.try_clone().unwrap();
        let mut r = StatsReader::new(f).unwrap();
        let s0 = r.snapshot().unwrap();
        let data_offset = HEADER_SIZE + NAME_SIZE + 5 * (DESC_FIXED_SIZE + NAME_SIZE);
        writer
            .write_all_at(&41u64.to_ne_bytes(), data_offset as u64)
            .unwrap();
        let s1 = r.snapshot().unwrap();
        assert_eq!(s1.delta(&s0)["exits"], 40);
    }

    fn expect_malformed(f: File, needle: &str) {
        match StatsReader::new(f) {
            Err(StatsError::Malformed(m)) => assert!(m.contains(needle), "{m}"),
            other => panic!("expected Malformed({needle}), got {other:?}"),
        }
    }

    #[test]
    fn rejects_unterminated_name() {
        let long = [b'x'; NAME_SIZE];
        let stats = [Stat {
            name: &long,
            ..stat("", KVM_STATS_TYPE_CUMULATIVE, 1, 0)
        }];
        expect_malformed(build(&stats, &[0], |_| {}), "not NUL-terminated");
    }

    #[test]
    fn rejects_empty_and_duplicate_names() {
        let stats = [stat("", KVM_STATS_TYPE_CUMULATIVE, 1, 0)];
        expect_malformed(build(&stats, &[0], |_| {}), "empty");
        let stats = [
            stat("a", KVM_STATS_TYPE_CUMULATIVE, 1, 0),
            stat("a", KVM_STATS_TYPE_CUMULATIVE, 1, 8),
        ];
        expect_malformed(build(&stats, &[0, 0], |_| {}), "duplicate");
    }

    #[test]
    fn rejects_overlapping_data_and_bad_sizes() {
        let stats = [
            stat("h", KVM_STATS_TYPE_LINEAR_HIST, 2, 0),
            stat("a", KVM_STATS_TYPE_CUMULATIVE, 1, 8),
        ];
        expect_malformed(build(&stats, &[0, 0], |_| {}), "overlap");
        let stats = [stat("a", KVM_STATS_TYPE_CUMULATIVE, 0, 0)];
        expect_malformed(build(&stats, &[0], |_| {}), "size 0");
        let stats = [stat("a", KVM_STATS_TYPE_CUMULATIVE, 2, 0)];
        expect_malformed(build(&stats, &[0, 0], |_| {}), "expected 1");
        let stats = [stat("a", KVM_STATS_TYPE_CUMULATIVE, 1, 4)];
        expect_malformed(build(&stats, &[0, 0], |_| {}), "unaligned");
    }

    #[test]
    fn rejects_bad_header() {
        let one = || vec![stat("a", KVM_STATS_TYPE_CUMULATIVE, 1, 0)];
        expect_malformed(build(&one(), &[0], |b| set_u32(b, 8, 0)), "num_desc");
        expect_malformed(build(&one(), &[0], |b| set_u32(b, 8, u32::MAX)), "num_desc");
        expect_malformed(build(&one(), &[0], |b| set_u32(b, 4, 0)), "name_size");
        // Data block placed on top of the descriptors.
        expect_malformed(
            build(&one(), &[0], |b| {
                set_u32(b, 20, (HEADER_SIZE + NAME_SIZE) as u32)
            }),
            "overlaps",
        );
        // Descriptor block placed on top of the header.
        expect_malformed(build(&one(), &[0], |b| set_u32(b, 16, 8)), "overlaps");
    }

    #[test]
    fn truncated_file_is_a_read_error() {
        let f = build(&sample_stats(), &[0; 8], |b| b.truncate(b.len() - 8));
        assert!(matches!(
            StatsReader::new(f).unwrap().snapshot(),
            Err(StatsError::Read {
                what: "data block",
                ..
            })
        ));
        let f = build(&sample_stats(), &[0; 8], |b| b.truncate(10));
        assert!(matches!(
            StatsReader::new(f),
            Err(StatsError::Read { what: "header", .. })
        ));
        // num_desc larger than the file holds.
        let f = build(&sample_stats(), &[0; 8], |b| set_u32(b, 8, 1000));
        assert!(matches!(
            StatsReader::new(f),
            Err(StatsError::Read {
                what: "descriptors",
                ..
            })
        ));
    }

    #[test]
    fn stats_fd_on_a_non_kvm_fd_is_an_error() {
        let t = TempFile::new().unwrap();
        assert!(matches!(
            stats_fd(t.as_file()),
            Err(StatsError::GetStatsFd(_))
        ));
    }

    #[test]
    fn real_vcpu_stats() {
        let kvm = match kvm_ioctls::Kvm::new() {
            Ok(k) => k,
            Err(e) => {
                eprintln!("skipping real_vcpu_stats: cannot open /dev/kvm: {e}");
                return;
            }
        };
        let vm = kvm.create_vm().expect("KVM_CREATE_VM");
        let vcpu = vm.create_vcpu(0).expect("KVM_CREATE_VCPU");
        let mut r = StatsReader::new(stats_fd(&vcpu).expect("vcpu stats fd")).unwrap();
        assert!(r.id().contains("vcpu"), "id {}", r.id());
        let s = r.snapshot().unwrap();
        for name in ["exits", "halt_exits", "io_exits", "mmio_exits"] {
            assert!(s.get(name).is_some(), "vCPU stat {name} missing");
        }
        if s.get("insn_emulation").is_none() {
            eprintln!("note: insn_emulation not present on this kernel");
        }
        // Nothing ran: cumulative exit counters are still zero.
        assert_eq!(s.get("exits"), Some(0));
        let mut vm_r = StatsReader::new(stats_fd(&vm).expect("vm stats fd")).unwrap();
        assert!(!vm_r.descriptors().is_empty());
        vm_r.snapshot().unwrap();
    }
}
