//! Exit reasons and host time per exit from sampled `kvm_exit`/`kvm_entry`.
//!
//! The cost per exit is two samples written to the thread's ring, whatever
//! the number of reasons; reasons are told apart in userspace.
//!
//! # Pairing and drain rule
//!
//! On one vCPU thread the records come in program order. The *host time*
//! of an exit is the time of the next `kvm_entry` minus the time of its
//! `kvm_exit` (both tracepoint timestamps, `CLOCK_MONOTONIC`): the time KVM
//! and, for exits to userspace, the VMM spent before re-entering the guest.
//!
//! [`ExitSampler::drain`] returns what happened since the previous drain:
//! - an exit is **counted** in the drain that sees its `kvm_exit`
//!   ([`ReasonTally::count`]);
//! - when its `kvm_entry` is in the same drain, it is **timed** there
//!   ([`ReasonTally::timed`], [`ReasonTally::host_ns`]);
//! - the exit still in progress at drain time (the vCPU is in userspace
//!   handling that very exit: the phase marker) is reported in
//!   [`ExitTally::pending`]; the next drain reports its host time in
//!   [`ExitTally::carried_in`] and **not** in `by_reason`, so each reason's
//!   `host_ns / timed` is exact, and marker round trips through userspace
//!   (which include the drain itself) do not leak into a phase's per-reason
//!   host time. [`ExitTally::merge`] of consecutive drains folds it back.
//!
//! So a window opened by a drain at its begin marker and closed by a drain
//! at its end marker counts the end marker's exit, not the begin marker's
//! (as the counting tracepoints did) and carries the begin marker's round
//! trip in `carried_in`.
//!
//! Nothing is silently dropped: `lost` (from `PERF_RECORD_LOST`),
//! `throttled`, `malformed` and `unmatched` say when counts are short, and
//! `ring_full` flags a drain that found the ring full (the kernel reports
//! such losses only with its next record, i.e. in the next drain); see
//! [`ExitTally::is_complete`]. After a loss the pairing restarts at the next
//! exit.
//!
//! # Caveats
//!
//! - Host time runs from the `kvm_exit` tracepoint to the `kvm_entry`
//!   tracepoint, not from the hardware VM-exit to the VM-entry: KVM traces
//!   `kvm_exit` after the exit's first bookkeeping (VMX: in `vmx_vcpu_run`;
//!   SVM: in `svm_vcpu_run` on recent kernels, in the exit handler on older
//!   ones) and `kvm_entry` shortly before entering the guest.
//! - A kernel that traces `kvm_exit` only on the slow path would show
//!   fastpath re-entries as entries without an exit (`unmatched`).
//! - A sample costs 150–180 bytes per exit (both records; 6.1/6.12: 152,
//!   6.18: 176): a drain must come before the ring fills. Phases with many
//!   exits need a bigger ring or drains at every userspace exit, not only at
//!   markers ([`ExitTally::merge`] sums them).

use crate::exit_reasons::Isa;
use crate::tracefs::{EventFormat, Tracefs};

use super::error::Result;
use super::event::{SampledEvents, SAMPLE_TYPE};
use super::raw::{FieldReader, TypeCheck};
use super::ring::{parse_records, ParseError, Record, PERF_RECORD_THROTTLE};

pub use super::tally::{CarriedExit, ExitTally, ReasonTally};

/// Default ring size: 256 data pages (1 MiB, about 6000 exits on 6.18).
pub const DEFAULT_DATA_PAGES: usize = 256;

/// One decoded record of the exit/entry ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitEvent {
    /// `kvm_exit` at `time` with `reason` and, when the kernel records it, `isa`.
    Exit {
        /// Sample time, ns.
        time: u64,
        /// `exit_reason` (low 32 bits).
        reason: u32,
        /// `isa` field (1 VMX, 2 SVM).
        isa: Option<u32>,
    },
    /// `kvm_entry` at `time`.
    Entry {
        /// Sample time, ns.
        time: u64,
    },
    /// `PERF_RECORD_LOST` with the number of records dropped.
    Lost(u64),
    /// `PERF_RECORD_THROTTLE`.
    Throttled,
    /// A record that could not be decoded.
    Malformed,
    /// A record that does not matter here (e.g. `PERF_RECORD_UNTHROTTLE`).
    Ignored,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    reason: u32,
    time: u64,
    counted_here: bool,
}

/// The pairing state machine (pure; see the module docs).
#[derive(Debug, Clone, Default)]
pub struct ExitPairer {
    pending: Option<Pending>,
    synced: bool,
}

impl ExitPairer {
    /// A pairer that has seen nothing (the first entry is not unmatched).
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the exit in progress (after disabling the events).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Starts a drain: an exit still pending was counted by an earlier one.
    pub fn begin_drain(&mut self) {
        if let Some(p) = &mut self.pending {
            p.counted_here = false;
        }
    }

    /// Folds one event into `t`.
    pub fn feed(&mut self, t: &mut ExitTally, ev: ExitEvent) {
        match ev {
            ExitEvent::Exit { time, reason, isa } => {
                if self.pending.take().is_some() {
                    t.unmatched += 1;
                }
                t.exits += 1;
                t.by_reason.entry(reason).or_default().count += 1;
                if let Some(isa) = isa.and_then(Isa::from_tracepoint) {
                    t.isa = Some(isa);
                }
                self.pending = Some(Pending {
                    reason,
                    time,
                    counted_here: true,
                });
                self.synced = true;
            }
            ExitEvent::Entry { time } => {
                t.entries += 1;
                match self.pending.take() {
                    Some(p) if p.counted_here => {
                        let r = t.by_reason.entry(p.reason).or_default();
                        r.timed += 1;
                        r.host_ns += time.saturating_sub(p.time);
                    }
                    Some(p) => {
                        t.carried_in = Some(CarriedExit {
                            reason: p.reason,
                            host_ns: time.saturating_sub(p.time),
                        });
                    }
                    None if self.synced => t.unmatched += 1,
                    None => {}
                }
            }
            ExitEvent::Lost(n) => {
                t.lost += n;
                self.desync(t);
            }
            ExitEvent::Throttled => {
                t.throttled += 1;
                self.desync(t);
            }
            ExitEvent::Malformed => {
                t.malformed += 1;
                self.desync(t);
            }
            ExitEvent::Ignored => {}
        }
    }

    fn desync(&mut self, t: &mut ExitTally) {
        if self.pending.take().is_some() {
            t.unmatched += 1;
        }
        self.synced = false;
    }

    /// Ends a drain: reports the exit still in progress.
    pub fn end_drain(&self, t: &mut ExitTally) {
        t.pending = self.pending.map(|p| p.reason);
    }
}

/// Turns ring records into [`ExitEvent`]s (built once from the formats).
#[derive(Debug, Clone)]
pub struct ExitDecoder {
    exit_id: u64,
    entry_id: u64,
    exit_check: TypeCheck,
    entry_check: TypeCheck,
    reason: FieldReader,
    isa: Option<FieldReader>,
}

impl ExitDecoder {
    /// A decoder for samples with ids `exit_id` (`kvm_exit`, format
    /// `exit`) and `entry_id` (`kvm_entry`, format `entry`).
    pub fn new(
        exit: &EventFormat,
        entry: &EventFormat,
        exit_id: u64,
        entry_id: u64,
    ) -> Result<Self> {
        Ok(Self {
            exit_id,
            entry_id,
            exit_check: TypeCheck::new(exit),
            entry_check: TypeCheck::new(entry),
            reason: FieldReader::require(exit, "kvm:kvm_exit", &["exit_reason"])?,
            isa: FieldReader::new(exit, &["isa"]),
        })
    }

    /// Decodes one parsed record.
    pub fn decode(&self, rec: std::result::Result<Record<'_>, ParseError>) -> ExitEvent {
        match rec {
            Ok(Record::Sample { id, time, raw, .. }) if id == self.exit_id => {
                match (self.exit_check.matches(raw), self.reason.read_u32(raw)) {
                    (true, Some(reason)) => ExitEvent::Exit {
                        time,
                        reason,
                        isa: self.isa.and_then(|f| f.read_u32(raw)),
                    },
                    _ => ExitEvent::Malformed,
                }
            }
            Ok(Record::Sample { id, time, raw, .. }) if id == self.entry_id => {
                if self.entry_check.matches(raw) {
                    ExitEvent::Entry { time }
                } else {
                    ExitEvent::Malformed
                }
            }
            Ok(Record::Sample { .. }) => ExitEvent::Malformed,
            Ok(Record::Lost { lost, .. }) => ExitEvent::Lost(lost),
            Ok(Record::Other { kind }) if kind == PERF_RECORD_THROTTLE => ExitEvent::Throttled,
            Ok(Record::Other { .. }) => ExitEvent::Ignored,
            Err(_) => ExitEvent::Malformed,
        }
    }

    /// Decodes and pairs every record of `bytes` (one drain).
    pub fn drain_bytes(&self, pairer: &mut ExitPairer, bytes: &[u8]) -> ExitTally {
        let mut t = ExitTally::default();
        pairer.begin_drain();
        for rec in parse_records(bytes, SAMPLE_TYPE) {
            pairer.feed(&mut t, self.decode(rec));
        }
        pairer.end_drain(&mut t);
        t
    }
}

/// `kvm:kvm_exit` + `kvm:kvm_entry` sampled on the calling (vCPU) thread.
#[derive(Debug)]
pub struct ExitSampler {
    events: SampledEvents,
    decoder: ExitDecoder,
    pairer: ExitPairer,
}

impl ExitSampler {
    /// Opens both events on the calling thread into one ring of
    /// `data_pages` pages (a power of two) and enables them.
    pub fn open(tracefs: &Tracefs, data_pages: usize) -> Result<Self> {
        let exit = super::event_format(tracefs, "kvm", "kvm_exit")?;
        let entry = super::event_format(tracefs, "kvm", "kvm_entry")?;
        let events = SampledEvents::open(
            &[(exit.id, "kvm:kvm_exit"), (entry.id, "kvm:kvm_entry")],
            data_pages,
        )?;
        let ids = (events.events()[0].id(), events.events()[1].id());
        let decoder = ExitDecoder::new(&exit, &entry, ids.0, ids.1)?;
        events.enable()?;
        Ok(Self {
            events,
            decoder,
            pairer: ExitPairer::new(),
        })
    }

    /// Everything since the previous drain (see the module docs).
    pub fn drain(&mut self) -> ExitTally {
        let out = self.events.read();
        let mut t = self.decoder.drain_bytes(&mut self.pairer, out.bytes);
        t.ring_full = out.full;
        if out.error.is_some() {
            self.pairer.feed(&mut t, ExitEvent::Malformed);
            self.pairer.end_drain(&mut t);
        }
        t
    }

    /// Stops sampling and drains; the exit in progress stays untimed
    /// (`pending`) and the pairing restarts at [`ExitSampler::enable`].
    pub fn disable(&mut self) -> Result<ExitTally> {
        self.events.disable()?;
        let t = self.drain();
        self.pairer.reset();
        Ok(t)
    }

    /// Resumes sampling after [`ExitSampler::disable`].
    pub fn enable(&mut self) -> Result<()> {
        self.pairer.reset();
        self.events.enable()
    }

    /// Size of the ring's data area in bytes.
    pub fn buffer_bytes(&self) -> usize {
        self.events.buffer_bytes()
    }
}
