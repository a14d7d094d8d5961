//! Per-vCPU counter sources and phase windows. The vCPU thread snapshots its
//! own sources while it handles a phase marker, so a window holds only what
//! happened on this vCPU between its begin and end markers.
use super::trace::{ThreadTrace, TraceConfig};
use crate::irqchip::SharedChip;
use crate::results::inhibits::InhibitLog;
use crate::results::source::Source;
use crate::results::ExitCounts;
use crate::results::{
    saturating_sum as sum, ExitReasonCounts, GuestDelta, IcrExits, PhaseResult, SourceStatus,
};
use ipivmm_abi::GuestCounters;
use ipivmm_counters::kvm_stats::{stats_fd, StatDesc, StatsReader, StatsSnapshot};
use ipivmm_counters::sampler::{ExitTally, InhibitSampler};
use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Where `icr_write_exits` comes from with an in-kernel LAPIC.
pub const ICR_EXITS_SOURCE: &str =
    "tracepoints kvm_apic:icr_write + kvm_avic_incomplete_ipi - kvm_avic_incomplete_ipi:busy";

/// Tracepoint counters are opened at the vCPU's first counted phase, not at
/// start-up: enabling ~100 tracepoints costs milliseconds of kernel text
/// patching that would otherwise delay the payload's start; and never
/// before an uncounted part, which thus runs with nothing attached (with
/// the built-in payload, whose idle and warm-up phases come first, not
/// before the end of its uncounted part: `TraceConfig::attaches_after_uncounted`).
enum TraceState {
    /// Not opened yet.
    Pending(Option<Arc<TraceConfig>>),
    /// Opened (or found unavailable).
    Opened(Option<Box<ThreadTrace>>),
}

/// The counter sources of one vCPU (opened on its own thread).
pub struct Sources {
    kvm_stats: Option<StatsReader>,
    inhibits: Arc<InhibitLog>,
    trace: TraceState,
    /// This thread's APICv inhibit sampler, where the BPF object logs no
    /// inhibits (opened at the first phase marker).
    inhibit_sampler: Option<InhibitSampler>,
    /// Whether a phase marker was seen, and an uncounted part ended.
    marked: bool,
    uncounted_ended: bool,
    /// The irqchip, a source of its own where it counts (the user one).
    irqchip: SharedChip,
    index: usize,
    /// Availability of every source, for the report.
    pub status: Vec<SourceStatus>,
}

/// All counters at one instant.
pub struct Snapshot {
    at: Instant,
    /// CLOCK_MONOTONIC ns, the samplers' clock.
    mono_ns: u64,
    exits: ExitCounts,
    guest: GuestCounters,
    kvm: Option<StatsSnapshot>,
    trace: Option<BTreeMap<String, u64>>,
    /// The irqchip's own counters (`Chip::counters`).
    irqchip: Option<BTreeMap<String, u64>>,
}

/// `end - begin` of two snapshots of named counters, name by name
/// (saturating; a name missing at the begin counts from 0).
fn map_delta(end: &BTreeMap<String, u64>, begin: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    end.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(begin.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// A phase whose begin marker has been handled.
pub struct OpenPhase {
    /// Phase id.
    pub id: u32,
    /// Phase name.
    pub name: String,
    begin: Snapshot,
    /// The exit sampler's drains since the begin marker, merged.
    exits: ExitTally,
    /// The uncounted part of a measured phase: every per-exit counter off
    /// from the begin marker to the end marker (`Sources::set_counting`).
    pub uncounted: bool,
}

impl Sources {
    /// Open the sources for `vcpu` on the calling (vCPU) thread.
    pub fn open(
        vcpu: &VcpuFd,
        trace: Option<Arc<TraceConfig>>,
        irqchip: SharedChip,
        index: usize,
        inhibits: Arc<InhibitLog>,
        stats_layout: &OnceLock<Arc<[StatDesc]>>,
    ) -> Self {
        let mut status = vec![
            SourceStatus {
                source: Source::UserspaceExits.key().into(),
                available: true,
                detail: None,
            },
            SourceStatus {
                source: Source::Guest.key().into(),
                available: true,
                detail: Some("counted by the payload, sent with each control message".into()),
            },
        ];
        let kvm_stats = match stats_fd(vcpu).and_then(StatsReader::new) {
            Ok(mut r) => {
                // One copy of the descriptors per VM, not per vCPU.
                let shared = stats_layout.get_or_init(|| r.shared_descriptors());
                r.share_descriptors(shared);
                status.push(SourceStatus {
                    source: Source::KvmStats.key().into(),
                    available: true,
                    detail: None,
                });
                Some(r)
            }
            Err(e) => {
                status.push(SourceStatus {
                    source: Source::KvmStats.key().into(),
                    available: false,
                    detail: Some(e.to_string()),
                });
                None
            }
        };
        status.push(SourceStatus {
            source: Source::Tracepoints.key().into(),
            available: false,
            detail: Some(
                "opened at the first counted phase (after an uncounted part); none began".into(),
            ),
        });
        status.extend(irqchip.source());
        Self {
            kvm_stats,
            inhibits,
            trace: TraceState::Pending(trace),
            inhibit_sampler: None,
            marked: false,
            uncounted_ended: false,
            irqchip,
            index,
            status,
        }
    }

    /// At a phase's begin marker: the inhibit log first (at the first
    /// marker: wait for the BPF object's, or open this thread's sampler),
    /// then the counters, unless the phase is an uncounted part or comes
    /// before the first one's end where the config says to wait for it.
    /// True if the status changed.
    pub fn at_begin(&mut self, uncounted: bool) -> bool {
        let TraceState::Pending(cfg) = &self.trace else {
            return false;
        };
        if !self.marked {
            self.marked = true;
            self.inhibit_sampler = cfg.as_deref().and_then(TraceConfig::vcpu_inhibit_sampler);
        }
        let wait = cfg
            .as_deref()
            .is_some_and(TraceConfig::attaches_after_uncounted)
            && !self.uncounted_ended;
        if uncounted || wait {
            return false;
        }
        self.open_trace()
    }

    /// At an uncounted part's end marker (after its end snapshot): the
    /// counters are attached now, before the next phase. True if the
    /// status changed.
    pub fn at_uncounted_end(&mut self) -> bool {
        self.uncounted_ended = true;
        self.open_trace()
    }

    /// Open the tracepoint counters on first use; true if the status changed.
    fn open_trace(&mut self) -> bool {
        let TraceState::Pending(cfg) = &self.trace else {
            return false;
        };
        let after_uncounted = cfg
            .as_deref()
            .is_some_and(TraceConfig::attaches_after_uncounted);
        let (trace, mut status) = ThreadTrace::open(cfg.as_deref());
        if after_uncounted && status.available {
            let note = "attached when the first uncounted part ended: the phases before it have no per-exit counts";
            status.detail = Some(match status.detail.take() {
                Some(d) => format!("{d}; {note}"),
                None => note.to_string(),
            });
        }
        let (exits, exits_status) = ThreadTrace::open_exit_source(cfg.as_deref());
        self.trace = TraceState::Opened(trace.map(|t| Box::new(t.with_exit_source(exits))));
        if let Some(slot) = self
            .status
            .iter_mut()
            .find(|s| s.source == Source::Tracepoints.key())
        {
            *slot = status;
        }
        self.status.push(exits_status);
        true
    }

    /// Turns every per-exit counter of this vCPU off or on, at a phase
    /// marker (`ThreadTrace::set_counting`): what the sampler held when
    /// switched off goes to `open`. Err: what could not be switched.
    pub fn set_counting(&mut self, on: bool, open: Option<&mut OpenPhase>) -> Result<(), String> {
        let TraceState::Opened(Some(t)) = &mut self.trace else {
            return Ok(());
        };
        if let (Some(tally), Some(open)) = (t.set_counting(on)?, open) {
            open.exits.merge(&tally);
        }
        Ok(())
    }

    /// Hand the APICv inhibit changes seen so far to the run's log (at each
    /// phase marker and when the vCPU ends).
    pub fn drain_inhibits(&mut self) {
        if let Some(s) = &mut self.inhibit_sampler {
            self.inhibits.drain(s);
        }
    }

    /// Drain the exit sampler (after every userspace exit, and at each phase
    /// marker, so the ring does not fill): what it saw belongs to the open
    /// phase, or to no phase between phases.
    pub fn drain_exits(&mut self, open: Option<&mut OpenPhase>) {
        let TraceState::Opened(Some(t)) = &mut self.trace else {
            return;
        };
        if let (Some(tally), Some(open)) = (t.drain_exits(), open) {
            open.exits.merge(&tally);
        }
    }

    /// Snapshot every source now.
    pub fn snapshot(&mut self, exits: &ExitCounts, guest: &GuestCounters) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            mono_ns: crate::results::inhibits::monotonic_ns(),
            exits: *exits,
            guest: *guest,
            kvm: self.kvm_stats.as_mut().and_then(|r| r.snapshot().ok()),
            trace: match &mut self.trace {
                TraceState::Opened(Some(t)) => Some(t.read()),
                _ => None,
            },
            irqchip: self.irqchip.counters(self.index),
        }
    }

    /// Open a phase.
    pub fn begin(
        &mut self,
        id: u32,
        name: String,
        exits: &ExitCounts,
        guest: &GuestCounters,
    ) -> OpenPhase {
        // What the exit source holds from before the marker is no phase's.
        if let TraceState::Opened(Some(t)) = &mut self.trace {
            t.mark_exits();
        }
        self.drain_inhibits();
        OpenPhase {
            id,
            name,
            begin: self.snapshot(exits, guest),
            exits: ExitTally::default(),
            uncounted: false,
        }
    }

    /// Close a phase into its result.
    pub fn end(
        &mut self,
        mut open: OpenPhase,
        exits: &ExitCounts,
        guest: &GuestCounters,
    ) -> PhaseResult {
        if let TraceState::Opened(Some(t)) = &mut self.trace {
            if let Some(tally) = t.mark_exits() {
                open.exits.merge(&tally);
            }
        }
        self.drain_inhibits();
        let end = self.snapshot(exits, guest);
        let exit_reasons = self.sampled_reasons(&open.exits);
        let b = &open.begin;
        let guest_delta = end.guest.since(&b.guest);
        let kvm_stats = match (&end.kvm, &b.kvm) {
            (Some(e), Some(s)) => e.delta(s),
            _ => BTreeMap::new(),
        };
        let tracepoints = match (&end.trace, &b.trace) {
            (Some(e), Some(s)) => map_delta(e, s),
            _ => BTreeMap::new(),
        };
        let user_lapic = match (&end.irqchip, &b.irqchip) {
            (Some(e), Some(s)) => map_delta(e, s),
            _ => BTreeMap::new(),
        };
        let icr_write_exits = match user_lapic.get("icr_writes") {
            // With ipivmm's LAPIC every ICR write exits to userspace: exact.
            Some(&exits) => Some(IcrExits {
                exits,
                accelerated: guest_delta.all_icr_writes().saturating_sub(exits),
                source: Source::UserLapic.key().into(),
            }),
            None => self.icr_exits(&tracepoints, &guest_delta),
        };
        let exit_reasons = exit_reasons.map(|c| with_missing(c, &kvm_stats));
        // An uncounted part's per-exit counters were off: their zeros are
        // not measurements, so the part carries none of them (the model's
        // ICR-write exits are exact and cost nothing: kept).
        // What they counted anyway is kept as a check of the switch.
        let counted_while_off = match open.uncounted {
            true => sum(tracepoints.values().copied())
                .saturating_add(exit_reasons.as_ref().map_or(0, |e| e.exits)),
            false => 0,
        };
        let (tracepoints, exit_reasons, icr_write_exits) = match open.uncounted {
            true => (
                BTreeMap::new(),
                None,
                icr_write_exits.filter(|i| i.source == Source::UserLapic.key()),
            ),
            false => (tracepoints, exit_reasons, icr_write_exits),
        };
        PhaseResult {
            id: open.id,
            name: open.name,
            wall_ns: end.at.duration_since(b.at).as_nanos() as u64,
            window_ns: (b.mono_ns, end.mono_ns),
            exits: end.exits.since(&b.exits),
            guest: guest_delta,
            kvm_stats,
            tracepoints,
            user_lapic,
            icr_write_exits,
            exit_reasons,
            apicv: None,
            uncounted: open.uncounted,
            unfinished: false,
            counted_while_off,
            latency: None,
            records: BTreeMap::new(),
            samples: Vec::new(),
        }
    }

    /// The phase's sampled exits by reason (None without a sampler).
    fn sampled_reasons(&self, tally: &ExitTally) -> Option<ExitReasonCounts> {
        let TraceState::Opened(Some(t)) = &self.trace else {
            return None;
        };
        t.has_exit_source().then(|| ExitReasonCounts::of(tally))
    }

    /// ICR-write exits from the tracepoint counters (one formula for every
    /// vendor path: `ipivmm_counters::specs::icr_write_exits`).
    fn icr_exits(&self, trace: &BTreeMap<String, u64>, guest: &GuestDelta) -> Option<IcrExits> {
        let exits = ipivmm_counters::specs::icr_write_exits(trace)?;
        Some(IcrExits {
            exits,
            accelerated: guest.all_icr_writes().saturating_sub(exits),
            source: ICR_EXITS_SOURCE.into(),
        })
    }
}

/// `counts` checked against KVM's `exits` stat of the same window (an
/// independent count): exits the sampler missed, e.g. records overwritten
/// in a full ring before the kernel could report them lost.
fn with_missing(
    mut counts: ExitReasonCounts,
    kvm_stats: &BTreeMap<String, u64>,
) -> ExitReasonCounts {
    if let Some(&stat) = kvm_stats.get("exits") {
        let missing = stat.saturating_sub(counts.exits);
        counts.missing = Some(missing);
        if missing > 0 {
            counts.complete = false;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(exits: u64) -> ExitReasonCounts {
        ExitReasonCounts {
            by_reason: BTreeMap::new(),
            exits,
            lost: 0,
            unmatched: 0,
            missing: None,
            complete: true,
        }
    }

    #[test]
    fn exits_the_sampler_missed_are_counted_against_kvms_stat() {
        let stats = BTreeMap::from([("exits".to_string(), 201_959)]);
        // A flood overwrote part of the ring before the kernel reported it.
        let c = with_missing(sampled(104_857), &stats);
        assert_eq!((c.missing, c.complete), (Some(97_102), false));
        let c = with_missing(sampled(201_959), &stats);
        assert_eq!((c.missing, c.complete), (Some(0), true));
        // Without the stat there is nothing to compare with.
        let c = with_missing(sampled(5), &BTreeMap::new());
        assert_eq!((c.missing, c.complete), (None, true));
    }
}
