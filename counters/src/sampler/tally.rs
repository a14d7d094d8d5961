//! What a drain of the exit sampler returns (see [`super::exits`] for the
//! pairing and drain rule).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::exit_reasons::{exit_reason_name, Isa};

/// Exits of one reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReasonTally {
    /// Exits whose `kvm_exit` was seen.
    pub count: u64,
    /// Of those, exits whose `kvm_entry` was seen in the same drain.
    pub timed: u64,
    /// Host time of the timed exits, ns (mean = `host_ns / timed`).
    pub host_ns: u64,
}

/// Host time of an exit counted by an earlier drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CarriedExit {
    /// Its reason code.
    pub reason: u32,
    /// Its host time, ns.
    pub host_ns: u64,
}

/// What one drain saw (see the module docs for the rule).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExitTally {
    /// Per exit reason code (`kvm_exit.exit_reason`, VMX high bits included).
    pub by_reason: BTreeMap<u32, ReasonTally>,
    /// The ISA of the exits (`kvm_exit.isa`), if seen.
    pub isa: Option<Isa>,
    /// `kvm_exit` samples.
    pub exits: u64,
    /// `kvm_entry` samples.
    pub entries: u64,
    /// Records the kernel dropped (ring full), from `PERF_RECORD_LOST`.
    pub lost: u64,
    /// `PERF_RECORD_THROTTLE` records (samples missed).
    pub throttled: u64,
    /// Exits that got no entry (next record was an exit or a loss) plus
    /// entries with no exit before them (not counting the first entry after
    /// opening or enabling, or after a loss).
    pub unmatched: u64,
    /// Records that could not be decoded; a framing error also skips the
    /// rest of the pending data (counted once).
    pub malformed: u64,
    /// The ring was (nearly) full at this drain: records may have been
    /// dropped here that the kernel reports as `lost` only in a later drain.
    pub ring_full: bool,
    /// The host time of [`ExitTally::pending`] of the previous drain.
    pub carried_in: Option<CarriedExit>,
    /// The reason of the exit still in progress (counted here, timed later).
    pub pending: Option<u32>,
}

impl ExitTally {
    /// `true` when no sample was lost, throttled or undecodable, and the
    /// ring had room at the drain (so no loss is still unreported).
    pub fn is_complete(&self) -> bool {
        self.lost == 0 && self.throttled == 0 && self.malformed == 0 && !self.ring_full
    }

    /// Host time of the timed exits (without `carried_in`), ns.
    pub fn host_ns(&self) -> u64 {
        self.by_reason.values().map(|r| r.host_ns).sum()
    }

    /// Adds a later, consecutive drain: its `carried_in` completes our
    /// `pending` exit; the result is what one drain over both would give.
    pub fn merge(&mut self, later: &ExitTally) {
        for (&code, r) in &later.by_reason {
            let e = self.by_reason.entry(code).or_default();
            e.count += r.count;
            e.timed += r.timed;
            e.host_ns += r.host_ns;
        }
        self.exits += later.exits;
        self.entries += later.entries;
        self.lost += later.lost;
        self.throttled += later.throttled;
        self.unmatched += later.unmatched;
        self.malformed += later.malformed;
        self.ring_full |= later.ring_full;
        if let Some(c) = later.carried_in {
            if self.pending == Some(c.reason) {
                let e = self.by_reason.entry(c.reason).or_default();
                e.timed += 1;
                e.host_ns += c.host_ns;
            } else if self.carried_in.is_none() && self.pending.is_none() {
                self.carried_in = Some(c);
            } else {
                self.unmatched += 1;
            }
        }
        self.isa = later.isa.or(self.isa);
        self.pending = later.pending;
    }

    /// Tallies by reason name (`isa` if given, else the one seen); codes
    /// without a name are keyed `0x..`. VMX codes with high bits set share
    /// the basic reason's name and are summed into it.
    pub fn named(&self, isa: Option<Isa>) -> BTreeMap<String, ReasonTally> {
        let isa = isa.or(self.isa);
        let mut out: BTreeMap<String, ReasonTally> = BTreeMap::new();
        for (&code, r) in &self.by_reason {
            let name = isa
                .and_then(|isa| exit_reason_name(isa, code))
                .map_or_else(|| format!("{code:#x}"), str::to_string);
            let e = out.entry(name).or_default();
            e.count += r.count;
            e.timed += r.timed;
            e.host_ns += r.host_ns;
        }
        out
    }
}
