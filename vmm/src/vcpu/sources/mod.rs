//! The counter sources of one vCPU, one file each, each a [`PhaseCounter`]:
//! opened on the vCPU's thread, asked at the phase markers (never per exit,
//! unless it says it must be), and writing what it counted over a phase into
//! the phase's result under its [`Source`](crate::results::source::Source).
//! [`OPEN`] lists them; `vcpu::window` drives them without naming any.
//!
//! A new source is its file here (its `PhaseCounter` and `open`), its line
//! in [`OPEN`] with its `mod` line, and its row in `results::source` (its
//! key and name). A source without a field of its own in `PhaseResult`
//! writes into `PhaseResult::by_source`: the JSON, the CSV, `--expect` and
//! the charts take it from there.
mod chip;
mod exits;
mod guest;
mod kvm_stats;
mod tracepoints;

use super::VcpuEnv;
use crate::results::{ExitCounts, PhaseResult, SourceStatus};
use ipivmm_abi::GuestCounters;
use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;

/// Opens one source for a vCPU, on its thread (None: nothing to count on
/// this VM, and nothing to report).
pub type Open = fn(&VcpuFd, &VcpuEnv) -> Option<Box<dyn PhaseCounter>>;

/// Every source a vCPU opens, in the order the report lists them
/// (`VcpuResult::sources`; a source that opens late appends its entries).
pub(crate) const OPEN: &[Open] = &[
    exits::open,
    guest::open,
    kvm_stats::open,
    tracepoints::open,
    chip::open,
];

/// What the run loop itself counts, as it stands at a phase marker.
pub struct LoopCounts<'a> {
    /// Userspace exits by kind.
    pub exits: &'a ExitCounts,
    /// The guest's counters, from its latest control message.
    pub guest: &'a GuestCounters,
}

/// One counter source of one vCPU. One phase at most is open at a time,
/// so a source keeps its own begin snapshot.
pub trait PhaseCounter {
    /// Its availability, one entry per source it fills (the report's
    /// `sources`).
    fn status(&self, out: &mut Vec<SourceStatus>);

    /// At a begin marker, before any snapshot (`uncounted`: the phase is
    /// the uncounted part of a phase measured both ways): a source that
    /// opens late opens here. True if its status changed.
    fn at_begin_marker(&mut self, _uncounted: bool) -> bool {
        false
    }

    /// The begin marker's snapshot.
    fn begin(&mut self, now: &LoopCounts);

    /// The end marker's snapshot: what it counted since `begin`, into
    /// `phase`.
    fn end(&mut self, now: &LoopCounts, phase: &mut PhaseResult);

    /// After an uncounted part's end marker (and `end`). True if its status
    /// changed.
    fn after_uncounted(&mut self) -> bool {
        false
    }

    /// Turns its per-exit counting off or on, after an uncounted part's
    /// begin snapshot and after its end; Err: what could not be switched.
    fn set_counting(&mut self, _on: bool) -> Result<(), String> {
        Ok(())
    }

    /// Whether [`PhaseCounter::after_exit`] has work (asked when it is
    /// opened and when its status changes).
    fn per_exit(&self) -> bool {
        false
    }

    /// After every userspace exit, when [`PhaseCounter::per_exit`]: the
    /// hot path (no allocation).
    fn after_exit(&mut self) {}

    /// The guest's first message arrived: it runs.
    fn guest_started(&mut self) {}

    /// The vCPU's loop ended.
    fn vcpu_ended(&mut self) {}
}

/// `end - begin` of two snapshots of named counters, name by name
/// (saturating; a name missing at the begin counts from 0).
pub(crate) fn map_delta(
    end: &BTreeMap<String, u64>,
    begin: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    end.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(begin.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}
