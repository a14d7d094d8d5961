//! The per-exit counters of one vCPU thread: the `tracepoints` source
//! (`kvm:*` tracepoint counters) and the `exit_reasons` and
//! `exit_reasons_host_ns` sources (the BPF counter or the exit sampler),
//! opened from the run's [`TraceConfig`] (`vcpu::trace`, which knows how),
//! with the thread's APICv inhibit sampler.
//!
//! They are opened at the vCPU's first counted phase, not at start-up:
//! enabling ~100 tracepoints costs milliseconds of kernel text patching
//! that would otherwise delay the payload's start; and never before an
//! uncounted part, which thus runs with nothing attached (with the built-in
//! payload, whose idle and warm-up phases come first, not before the end of
//! its uncounted part: `TraceConfig::attaches_after_uncounted`).
use super::{map_delta, LoopCounts, PhaseCounter};
use crate::results::inhibits::InhibitLog;
use crate::results::source::Source;
use crate::results::{ExitReasonCounts, PhaseResult, SourceStatus};
use crate::vcpu::trace::{ThreadTrace, TraceConfig};
use crate::vcpu::VcpuEnv;
use ipivmm_counters::sampler::{ExitTally, InhibitSampler};
use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;
use std::sync::Arc;

enum State {
    /// Not opened yet.
    Pending,
    /// Opened (None: found unavailable, or tracepoints are off).
    Opened(Option<Box<ThreadTrace>>),
}

struct PerExit {
    cfg: Option<Arc<TraceConfig>>,
    state: State,
    status: Vec<SourceStatus>,
    inhibits: Arc<InhibitLog>,
    /// This thread's APICv inhibit sampler, where the BPF object logs no
    /// inhibits (opened at the first phase marker).
    inhibit_sampler: Option<InhibitSampler>,
    /// Whether a phase marker was seen, and an uncounted part ended.
    marked: bool,
    uncounted_ended: bool,
    /// The counters at the begin marker.
    begin: Option<BTreeMap<String, u64>>,
    /// The exit source's drains since the begin marker, merged (None: no
    /// phase open; what it sees then is no phase's).
    tally: Option<ExitTally>,
}

/// Always reported: opened at the first counted phase.
pub fn open(_: &VcpuFd, env: &VcpuEnv) -> Option<Box<dyn PhaseCounter>> {
    let pending = SourceStatus::new(
        Source::Tracepoints,
        false,
        Some("opened at the first counted phase (after an uncounted part); none began".into()),
    );
    Some(Box::new(PerExit {
        cfg: env.trace.clone(),
        state: State::Pending,
        status: vec![pending],
        inhibits: env.shared.inhibits.clone(),
        inhibit_sampler: None,
        marked: false,
        uncounted_ended: false,
        begin: None,
        tally: None,
    }))
}

impl PerExit {
    fn attaches_after_uncounted(&self) -> bool {
        self.cfg
            .as_deref()
            .is_some_and(TraceConfig::attaches_after_uncounted)
    }

    /// Open the counters on first use; true if the status changed.
    fn open_trace(&mut self) -> bool {
        if !matches!(self.state, State::Pending) {
            return false;
        }
        let cfg = self.cfg.as_deref();
        let (trace, mut status) = ThreadTrace::open(cfg);
        if self.attaches_after_uncounted() && status.available {
            let note = "attached when the first uncounted part ended: the phases before it have no per-exit counts";
            status.detail = Some(match status.detail.take() {
                Some(d) => format!("{d}; {note}"),
                None => note.to_string(),
            });
        }
        let (exits, exits_status) = ThreadTrace::open_exit_source(cfg);
        self.state = State::Opened(trace.map(|t| Box::new(t.with_exit_source(exits))));
        self.status = vec![status, exits_status];
        true
    }

    fn trace(&mut self) -> Option<&mut ThreadTrace> {
        match &mut self.state {
            State::Opened(Some(t)) => Some(t),
            _ => None,
        }
    }

    /// Hand the APICv inhibit changes seen so far to the run's log (at each
    /// phase marker and when the vCPU ends).
    fn drain_inhibits(&mut self) {
        if let Some(s) = &mut self.inhibit_sampler {
            self.inhibits.drain(s);
        }
    }

    /// At a marker, before reading: the exits since the previous marker
    /// (the sampler's drain, the BPF counter's window), and the inhibits.
    fn mark(&mut self) -> Option<ExitTally> {
        let window = self.trace().and_then(ThreadTrace::mark_exits);
        self.drain_inhibits();
        window
    }
}

impl PhaseCounter for PerExit {
    fn status(&self, out: &mut Vec<SourceStatus>) {
        out.extend(self.status.iter().cloned());
    }

    /// The inhibit log first (at the first marker: wait for the BPF
    /// object's, or open this thread's sampler), then the counters, unless
    /// the phase is an uncounted part or comes before the first one's end
    /// where the config says to wait for it.
    fn at_begin_marker(&mut self, uncounted: bool) -> bool {
        if !matches!(self.state, State::Pending) {
            return false;
        }
        if !self.marked {
            self.marked = true;
            self.inhibit_sampler = self
                .cfg
                .as_deref()
                .and_then(TraceConfig::vcpu_inhibit_sampler);
        }
        let wait = self.attaches_after_uncounted() && !self.uncounted_ended;
        if uncounted || wait {
            return false;
        }
        self.open_trace()
    }

    fn begin(&mut self, _: &LoopCounts) {
        // What the exit source holds from before the marker is no phase's.
        self.mark();
        self.begin = self.trace().map(ThreadTrace::read);
        self.tally = Some(ExitTally::default());
    }

    fn end(&mut self, _: &LoopCounts, phase: &mut PhaseResult) {
        let mut tally = self.tally.take().unwrap_or_default();
        if let Some(window) = self.mark() {
            tally.merge(&window);
        }
        let now = self.trace().map(ThreadTrace::read);
        phase.tracepoints = match (now, self.begin.take()) {
            (Some(e), Some(s)) => map_delta(&e, &s),
            _ => BTreeMap::new(),
        };
        phase.exit_reasons = self
            .trace()
            .is_some_and(|t| t.has_exit_source())
            .then(|| ExitReasonCounts::of(&tally));
    }

    /// The counters are attached now, before the next phase.
    fn after_uncounted(&mut self) -> bool {
        self.uncounted_ended = true;
        self.open_trace()
    }

    /// `ThreadTrace::set_counting`: what the sampler held when switched
    /// off belongs to the open phase.
    fn set_counting(&mut self, on: bool) -> Result<(), String> {
        let State::Opened(Some(t)) = &mut self.state else {
            return Ok(());
        };
        if let (Some(held), Some(tally)) = (t.set_counting(on)?, &mut self.tally) {
            tally.merge(&held);
        }
        Ok(())
    }

    fn per_exit(&self) -> bool {
        matches!(&self.state, State::Opened(Some(t)) if t.has_exit_source())
    }

    /// Drain the exit sampler, so that its ring does not fill between
    /// markers: what it saw belongs to the open phase, or to none.
    fn after_exit(&mut self) {
        let State::Opened(Some(t)) = &mut self.state else {
            return;
        };
        if let (Some(seen), Some(tally)) = (t.drain_exits(), &mut self.tally) {
            tally.merge(&seen);
        }
    }

    /// Load the run's BPF object beside the guest, off its path.
    fn guest_started(&mut self) {
        if let Some(t) = &self.cfg {
            t.start_loading();
        }
    }

    fn vcpu_ended(&mut self) {
        self.drain_inhibits();
    }
}
