//! `kvm:kvm_apicv_inhibit_changed` sampled on the calling thread.
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
//! tables of [`crate::apicv`]); otherwise bits are shown as numbers.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::apicv::InhibitTable;
use crate::tracefs::{EventFormat, Tracefs};

use super::error::Result;
use super::event::{SampledEvents, SAMPLE_TYPE};
use super::raw::{FieldReader, TypeCheck};
use super::ring::{parse_records, Record};

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
    /// The ring was (nearly) full: losses may be reported only later.
    pub ring_full: bool,
}

/// Decodes the inhibit ring's records (built once from the format).
#[derive(Debug, Clone)]
pub struct InhibitDecoder {
    sample_id: u64,
    check: TypeCheck,
    reason: FieldReader,
    set: FieldReader,
    inhibits: FieldReader,
}

impl InhibitDecoder {
    /// A decoder for samples with id `sample_id` of an event with `format`.
    pub fn new(format: &EventFormat, sample_id: u64) -> Result<Self> {
        let ev = "kvm:kvm_apicv_inhibit_changed";
        Ok(Self {
            sample_id,
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

    /// Decodes every record of `bytes`.
    pub fn drain_bytes(&self, bytes: &[u8]) -> InhibitDrain {
        let mut d = InhibitDrain::default();
        for rec in parse_records(bytes, SAMPLE_TYPE) {
            match rec {
                Ok(Record::Sample { id, time, raw }) if id == self.sample_id => {
                    match self.change(time, raw) {
                        Some(c) => d.changes.push(c),
                        None => d.malformed += 1,
                    }
                }
                Ok(Record::Sample { .. }) | Err(_) => d.malformed += 1,
                Ok(Record::Lost { lost, .. }) => d.lost += lost,
                Ok(Record::Other { .. }) => {}
            }
        }
        d
    }
}

/// `kvm:kvm_apicv_inhibit_changed` sampled on one thread.
#[derive(Debug)]
pub struct InhibitSampler {
    events: SampledEvents,
    decoder: InhibitDecoder,
    names: BTreeMap<u32, String>,
}

impl InhibitSampler {
    /// Opens the event on the calling thread (ring of `data_pages` pages),
    /// enabled; names come from the format, else from the kernel release.
    pub fn open(tracefs: &Tracefs, data_pages: usize) -> Result<Self> {
        Self::open_on(tracefs, data_pages, None)
    }

    /// [`InhibitSampler::open`] for thread `tid` of this process (the
    /// calling thread when None): another thread can open it while `tid`
    /// does other work (the run's main thread, before it creates the VM).
    pub fn open_on(tracefs: &Tracefs, data_pages: usize, tid: Option<libc::pid_t>) -> Result<Self> {
        let format = super::event_format(tracefs, "kvm", "kvm_apicv_inhibit_changed")?;
        let events = SampledEvents::open_on(
            &[(format.id, "kvm:kvm_apicv_inhibit_changed")],
            data_pages,
            tid,
        )?;
        let decoder = InhibitDecoder::new(&format, events.events()[0].id())?;
        let names = inhibit_names(&format.print_fmt)
            .or_else(|| {
                let release = ipivmm_host::facts::kernel_release();
                fallback_inhibit_names(&release)
            })
            .unwrap_or_default();
        events.enable()?;
        Ok(Self {
            events,
            decoder,
            names,
        })
    }

    /// The changes since the previous drain.
    pub fn drain(&mut self) -> InhibitDrain {
        let out = self.events.read();
        let mut d = self.decoder.drain_bytes(out.bytes);
        d.malformed += u64::from(out.error.is_some());
        d.ring_full = out.full;
        d
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
/// [`crate::apicv::InhibitTable`]: 6.0–6.2 (6.1: DISABLE … SEV, 10 values)
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
