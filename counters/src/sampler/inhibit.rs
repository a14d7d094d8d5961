//! `kvm:kvm_apicv_inhibit_changed` sampled for one thread.
//!
//! Two ways: a vCPU thread opens the event bound to itself
//! ([`InhibitSampler::open`]); the thread that creates the VM has it
//! opened CPU-wide, once per online CPU, and keeps only its own samples
//! ([`InhibitSampler::open_for_thread`]). A task-bound event costs the
//! first of its kind on the system a `synchronize_rcu` in the kernel
//! (`account_event` enabling `perf_sched_events`: 7–16 ms here), which
//! must not delay `KVM_CREATE_VM`; a CPU-wide event costs none.
//!
//! Fields (5.18 to 6.18 alike): `int reason` (a value of the kernel-internal
//! `enum kvm_apicv_inhibit`), `bool set`, `unsigned long inhibits` (every
//! reason in effect after the change, `BIT(reason)`). The event fires on the
//! thread that changed the inhibit: a VM ioctl thread (VM creation, irqchip
//! creation) or a vCPU thread (e.g. IRQWIN, APIC ID changes).
//!
//! Names: since 6.11 the `print fmt` lists them (`__print_flags` over
//! `APICV_INHIBIT_REASONS`, see [`inhibit_names`]); 6.1 prints only hex, so
//! the table is chosen by kernel release ([`fallback_inhibit_names`], the
//! tables of [`crate::apicv_inhibits`]); otherwise bits are shown as numbers.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::apicv_inhibits::InhibitTable;
use crate::tracefs::{EventFormat, Tracefs};

use super::cpus::online_cpus;
use super::error::{Result, SamplerError};
use super::event::{SampledEvents, SAMPLE_TYPE};
use super::raw::{FieldReader, TypeCheck};
use super::ring::{parse_records, Record, SampleTid};

/// The event's name, for messages.
const EVENT: &str = "kvm:kvm_apicv_inhibit_changed";

/// Default ring size for inhibit changes (rare events): 1 data page.
pub const DEFAULT_INHIBIT_PAGES: usize = 1;

/// One `kvm_apicv_inhibit_changed` sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InhibitChange {
    /// Sample time (`CLOCK_MONOTONIC`, ns).
    pub time_ns: u64,
    /// The reason that changed (enum value).
    pub reason: u32,
    /// `true`: set; `false`: cleared.
    pub set: bool,
    /// Every reason in effect after the change (bit = enum value).
    pub inhibits: u64,
}

/// What one drain of the inhibit ring saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InhibitDrain {
    /// The changes, oldest first.
    pub changes: Vec<InhibitChange>,
    /// Records the kernel dropped (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// Records that could not be decoded (a framing error counts once and
    /// skips the rest).
    pub malformed: u64,
    /// Samples of other threads, skipped (CPU-wide rings only).
    pub other_threads: u64,
    /// The ring was (nearly) full: losses may be reported only later.
    pub ring_full: bool,
}

/// Decodes the inhibit rings' records (built once from the format).
#[derive(Debug, Clone)]
pub struct InhibitDecoder {
    sample_ids: Vec<u64>,
    sample_type: u64,
    /// Only this task's samples are changes (CPU-wide rings).
    thread: Option<SampleTid>,
    check: TypeCheck,
    reason: FieldReader,
    set: FieldReader,
    inhibits: FieldReader,
}

impl InhibitDecoder {
    /// A decoder for samples with id `sample_id` of an event with `format`
    /// bound to one thread ([`SAMPLE_TYPE`]).
    pub fn new(format: &EventFormat, sample_id: u64) -> Result<Self> {
        Self::with(format, vec![sample_id], SAMPLE_TYPE, None)
    }

    /// A decoder for the samples with ids `sample_ids` of CPU-wide events
    /// of `format` (written with `sample_type`, which must carry
    /// `PERF_SAMPLE_TID`) that keeps only those of `thread`.
    pub fn for_thread(
        format: &EventFormat,
        sample_ids: Vec<u64>,
        sample_type: u64,
        thread: SampleTid,
    ) -> Result<Self> {
        Self::with(format, sample_ids, sample_type, Some(thread))
    }

    fn with(
        format: &EventFormat,
        sample_ids: Vec<u64>,
        sample_type: u64,
        thread: Option<SampleTid>,
    ) -> Result<Self> {
        let ev = EVENT;
        Ok(Self {
            sample_ids,
            sample_type,
            thread,
            check: TypeCheck::new(format),
            reason: FieldReader::require(format, ev, &["reason"])?,
            set: FieldReader::require(format, ev, &["set"])?,
            inhibits: FieldReader::require(format, ev, &["inhibits"])?,
        })
    }

    fn change(&self, time_ns: u64, raw: &[u8]) -> Option<InhibitChange> {
        if !self.check.matches(raw) {
            return None;
        }
        Some(InhibitChange {
            time_ns,
            reason: self.reason.read_u32(raw)?,
            set: self.set.read_bool(raw)?,
            inhibits: self.inhibits.read_u64(raw)?,
        })
    }

    /// Decodes every record of `bytes` (one ring's) into `d`.
    pub fn drain_bytes_into(&self, bytes: &[u8], d: &mut InhibitDrain) {
        for rec in parse_records(bytes, self.sample_type) {
            match rec {
                Ok(Record::Sample { id, time, tid, raw }) if self.sample_ids.contains(&id) => {
                    match (self.thread, tid) {
                        (Some(_), None) => d.malformed += 1,
                        (Some(want), Some(tid)) if tid != want => d.other_threads += 1,
                        _ => match self.change(time, raw) {
                            Some(c) => d.changes.push(c),
                            None => d.malformed += 1,
                        },
                    }
                }
                Ok(Record::Sample { .. }) | Err(_) => d.malformed += 1,
                Ok(Record::Lost { lost, .. }) => d.lost += lost,
                Ok(Record::Other { .. }) => {}
            }
        }
    }

    /// Decodes every record of `bytes` (one ring's).
    pub fn drain_bytes(&self, bytes: &[u8]) -> InhibitDrain {
        let mut d = InhibitDrain::default();
        self.drain_bytes_into(bytes, &mut d);
        d
    }
}

/// `kvm:kvm_apicv_inhibit_changed` sampled for one thread.
#[derive(Debug)]
pub struct InhibitSampler {
    /// One ring: the calling thread's; or one per online CPU.
    rings: Vec<SampledEvents>,
    decoder: InhibitDecoder,
    names: BTreeMap<u32, String>,
}

impl InhibitSampler {
    /// Opens the event bound to the calling thread (ring of `data_pages`
    /// pages), enabled; names come from the format, else from the kernel
    /// release.
    pub fn open(tracefs: &Tracefs, data_pages: usize) -> Result<Self> {
        let format = super::event_format(tracefs, "kvm", "kvm_apicv_inhibit_changed")?;
        let ring = SampledEvents::open(&[(format.id, EVENT)], data_pages)?;
        let decoder = InhibitDecoder::new(&format, ring.events()[0].id())?;
        Self::enabled(&format, vec![ring], decoder)
    }

    /// The changes of thread `tid` of this process, sampled CPU-wide: one
    /// event and ring (`data_pages` pages) per online CPU, every task's
    /// samples written, the other tasks' skipped at each drain. Any thread
    /// can open it for `tid` (the run's main thread has it opened while it
    /// prepares the run), and none pays the `synchronize_rcu` of a first
    /// task-bound event. Needs CAP_PERFMON (or root).
    pub fn open_for_thread(tracefs: &Tracefs, data_pages: usize, tid: u32) -> Result<Self> {
        let format = super::event_format(tracefs, "kvm", "kvm_apicv_inhibit_changed")?;
        let cpus = online_cpus().map_err(|source| SamplerError::Open {
            event: EVENT.to_string(),
            id: format.id,
            source,
        })?;
        let rings = cpus
            .into_iter()
            .map(|cpu| SampledEvents::open_cpu(&[(format.id, EVENT)], data_pages, cpu))
            .collect::<Result<Vec<_>>>()?;
        let ids = rings.iter().map(|r| r.events()[0].id()).collect();
        let sample_type = rings
            .first()
            .map_or(SAMPLE_TYPE, SampledEvents::sample_type);
        let thread = SampleTid {
            pid: std::process::id(),
            tid,
        };
        let decoder = InhibitDecoder::for_thread(&format, ids, sample_type, thread)?;
        Self::enabled(&format, rings, decoder)
    }

    fn enabled(
        format: &EventFormat,
        rings: Vec<SampledEvents>,
        decoder: InhibitDecoder,
    ) -> Result<Self> {
        let names = inhibit_names(&format.print_fmt)
            .or_else(|| {
                let release = ipivmm_host::facts::kernel_release();
                fallback_inhibit_names(&release)
            })
            .unwrap_or_default();
        rings.iter().try_for_each(SampledEvents::enable)?;
        Ok(Self {
            rings,
            decoder,
            names,
        })
    }

    /// The changes since the previous drain, oldest first (across rings).
    pub fn drain(&mut self) -> InhibitDrain {
        let mut d = InhibitDrain::default();
        for ring in &mut self.rings {
            let out = ring.read();
            self.decoder.drain_bytes_into(out.bytes, &mut d);
            d.malformed += u64::from(out.error.is_some());
            d.ring_full |= out.full;
        }
        d.changes.sort_by_key(|c| c.time_ns);
        d
    }

    /// The thread whose changes a CPU-wide sampler keeps (None: the
    /// sampler is bound to the thread that opened it).
    pub fn thread(&self) -> Option<u32> {
        self.decoder.thread.map(|t| t.tid)
    }

    /// Reason names by enum value (empty: numbers only).
    pub fn names(&self) -> &BTreeMap<u32, String> {
        &self.names
    }

    /// The names of the reasons in `mask`.
    pub fn decode(&self, mask: u64) -> Vec<String> {
        decode_mask(mask, &self.names)
    }
}

/// The names of the bits of `mask` in bit order; bits without a name are
/// given as their number.
pub fn decode_mask(mask: u64, names: &BTreeMap<u32, String>) -> Vec<String> {
    (0..64u32)
        .filter(|b| mask & (1u64 << b) != 0)
        .map(|b| names.get(&b).cloned().unwrap_or_else(|| b.to_string()))
        .collect()
}

/// The built-in table for a kernel release (`uname -r`), from
/// [`crate::apicv_inhibits::InhibitTable`]: 6.0–6.2 (6.1: DISABLE … SEV, 10 values)
/// and 6.3+ (6.12: … PHYSICAL_ID_ALIASED … LOGICAL_ID_ALIASED, 12 values,
/// plus PHYSICAL_ID_TOO_BIG from 6.16). Value 0 is `DISABLED` on every
/// kernel (6.1 spells it DISABLE), so reports compare across kernels.
pub fn fallback_inhibit_names(kernel_release: &str) -> Option<BTreeMap<u32, String>> {
    let table = InhibitTable::for_kernel_release(kernel_release)?;
    Some(
        (0u32..)
            .zip(table.names())
            .map(|(i, n)| (i, n.to_string()))
            .collect(),
    )
}

/// Reason names from the event's `print fmt`, when it prints them
/// (`__print_flags(REC->inhibits, "|", { <mask>, "NAME" }, ...)`).
///
/// The mask of an entry is `BIT(APICV_INHIBIT_REASON_X)`, which the format
/// file shows as `((((1UL))) << (APICV_INHIBIT_REASON_X))`: the enum name is
/// not resolved (no `TRACE_DEFINE_ENUM`), so the bit is the entry's position,
/// which the kernel keeps in enum order (`APICV_INHIBIT_REASONS` lists every
/// value once, `BUILD_BUG_ON` checks the count). A numeric shift (`<< (2)`)
/// or mask (`0x4`) is used as given. `None` when no names are printed.
pub fn inhibit_names(print_fmt: &str) -> Option<BTreeMap<u32, String>> {
    let start = print_fmt.find("__print_flags(")? + "__print_flags(".len();
    let args = &print_fmt[start..];
    let end = call_end(args);
    let mut names = BTreeMap::new();
    let mut rest = &args[..end];
    let mut index = 0u32;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let entry = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        let Some((mask, name)) = entry.rsplit_once(',') else {
            continue;
        };
        let name = name.trim().trim_matches('"');
        if let (Some(bit), false) = (entry_bit(mask, index), name.is_empty()) {
            names.insert(bit, name.to_string());
        }
        index += 1;
    }
    (!names.is_empty()).then_some(names)
}

/// The byte index of the `)` closing a call whose arguments start `args`.
fn call_end(args: &str) -> usize {
    let (mut depth, mut quoted) = (0usize, false);
    for (i, c) in args.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth == 0 => return i,
            ')' if !quoted => depth -= 1,
            _ => {}
        }
    }
    args.len()
}

/// The bit of one `__print_flags` entry's mask expression.
fn entry_bit(mask: &str, index: u32) -> Option<u32> {
    let bare = |s: &str| {
        s.trim_matches(|c: char| c == '(' || c == ')' || c.is_whitespace())
            .to_string()
    };
    if let Some((_, shift)) = mask.rsplit_once("<<") {
        let s = bare(shift);
        return Some(parse_num(&s).map_or(index, |v| v as u32)).filter(|&b| b < 64);
    }
    let s = bare(mask.trim().trim_start_matches("BIT"));
    match parse_num(&s) {
        Some(v) if mask.trim().starts_with("BIT") => u32::try_from(v).ok().filter(|&b| b < 64),
        Some(v) if v.is_power_of_two() => Some(v.trailing_zeros()),
        Some(_) => None,
        None => Some(index).filter(|&b| b < 64),
    }
}

/// A C integer literal (decimal or 0x hex, `UL` suffixes ignored).
fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim_end_matches(['U', 'L', 'u', 'l']);
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}
