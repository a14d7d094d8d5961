//! Phase windows: the vCPU thread snapshots its own counter sources
//! (`vcpu::sources`) while it handles a phase marker, so a window holds only
//! what happened on this vCPU between its begin and end markers; then the
//! figures that take more than one source (ICR-write exits, exits the
//! sampler missed, an uncounted part's checks).
use super::sources::{LoopCounts, PhaseCounter, OPEN};
use super::VcpuEnv;
use crate::results::source::Source;
use crate::results::{ExitReasonCounts, IcrExits, PhaseResult, SourceStatus};
use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;
use std::time::Instant;

/// The counter sources of one vCPU (opened on its own thread).
pub struct Sources {
    counters: Vec<Box<dyn PhaseCounter>>,
    /// Those with work after every userspace exit (indices).
    per_exit: Vec<usize>,
    /// Availability of every source, for the report.
    pub status: Vec<SourceStatus>,
}

/// A phase whose begin marker has been handled.
pub struct OpenPhase {
    /// Phase id.
    pub id: u32,
    /// Phase name.
    pub name: String,
    at: Instant,
    /// CLOCK_MONOTONIC ns, the samplers' clock.
    mono_ns: u64,
    /// The uncounted part of a measured phase: every per-exit counter off
    /// from the begin marker to the end marker (`Sources::set_counting`).
    pub uncounted: bool,
}

impl Sources {
    /// Open every source ([`OPEN`]) for `vcpu` on the calling (vCPU) thread.
    pub fn open(vcpu: &VcpuFd, env: &VcpuEnv) -> Self {
        let mut s = Self {
            counters: OPEN.iter().filter_map(|open| open(vcpu, env)).collect(),
            per_exit: Vec::new(),
            status: Vec::new(),
        };
        s.refresh();
        s
    }

    /// Take every source's status (a source's entries replace those of
    /// the same key, new ones are appended) and which work per exit.
    fn refresh(&mut self) {
        let mut now = Vec::new();
        for c in &self.counters {
            c.status(&mut now);
        }
        for st in now {
            match self.status.iter_mut().find(|s| s.source == st.source) {
                Some(slot) => *slot = st,
                None => self.status.push(st),
            }
        }
        self.per_exit.clear();
        let per_exit = self
            .counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.per_exit());
        self.per_exit.extend(per_exit.map(|(i, _)| i));
    }

    /// At a phase's begin marker, before its snapshot: sources that open
    /// late open (`PhaseCounter::at_begin_marker`). True if the status
    /// changed.
    pub fn at_begin(&mut self, uncounted: bool) -> bool {
        let changed = self
            .counters
            .iter_mut()
            .fold(false, |ch, c| c.at_begin_marker(uncounted) | ch);
        if changed {
            self.refresh();
        }
        changed
    }

    /// At an uncounted part's end marker (after its end snapshot): the
    /// counters are attached now, before the next phase. True if the
    /// status changed.
    pub fn at_uncounted_end(&mut self) -> bool {
        let changed = self
            .counters
            .iter_mut()
            .fold(false, |ch, c| c.after_uncounted() | ch);
        if changed {
            self.refresh();
        }
        changed
    }

    /// Turns every per-exit counter of this vCPU off or on, at a phase
    /// marker. Err: what could not be switched (the rest was).
    pub fn set_counting(&mut self, on: bool) -> Result<(), String> {
        let failed: Vec<String> = self
            .counters
            .iter_mut()
            .filter_map(|c| c.set_counting(on).err())
            .collect();
        match failed.is_empty() {
            true => Ok(()),
            false => Err(failed.join("; ")),
        }
    }

    /// After every userspace exit (the exit sampler's drain, so its ring
    /// does not fill between markers).
    pub fn after_exit(&mut self) {
        for &i in &self.per_exit {
            self.counters[i].after_exit();
        }
    }

    /// The guest's first message arrived.
    pub fn guest_started(&mut self) {
        self.counters.iter_mut().for_each(|c| c.guest_started());
    }

    /// The vCPU's loop ended (the last APICv inhibit changes go to the log).
    pub fn vcpu_ended(&mut self) {
        self.counters.iter_mut().for_each(|c| c.vcpu_ended());
    }

    /// Open a phase.
    pub fn begin(&mut self, id: u32, name: String, now: &LoopCounts) -> OpenPhase {
        let open = OpenPhase {
            id,
            name,
            at: Instant::now(),
            mono_ns: crate::results::inhibits::InhibitLog::now_ns(),
            uncounted: false,
        };
        self.counters.iter_mut().for_each(|c| c.begin(now));
        open
    }

    /// Close a phase into its result.
    pub fn end(&mut self, open: OpenPhase, now: &LoopCounts) -> PhaseResult {
        let mut p = PhaseResult {
            id: open.id,
            name: open.name,
            wall_ns: open.at.elapsed().as_nanos() as u64,
            window_ns: (open.mono_ns, crate::results::inhibits::InhibitLog::now_ns()),
            uncounted: open.uncounted,
            ..Default::default()
        };
        self.counters.iter_mut().for_each(|c| c.end(now, &mut p));
        derive(&mut p);
        p
    }
}

/// One window of two consecutive ones of a vCPU, `earlier` then `later`
/// (the end snapshot of one is the begin snapshot of the other): their
/// counters summed, the ids and name `later`'s. A multiboot kernel's boot
/// is the windows between its first lines (`vcpu::console_marks`), which
/// began with the loop, so its userspace exits and guest counters are the
/// loop's `now`.
pub fn join(earlier: PhaseResult, mut later: PhaseResult, now: &LoopCounts) -> PhaseResult {
    let add = |into: &mut BTreeMap<String, u64>, from: BTreeMap<String, u64>| {
        for (k, v) in from {
            let slot = into.entry(k).or_insert(0);
            *slot = slot.saturating_add(v);
        }
    };
    later.wall_ns = later.wall_ns.saturating_add(earlier.wall_ns);
    later.window_ns.0 = earlier.window_ns.0;
    later.exits = *now.exits;
    later.guest = *now.guest;
    add(&mut later.kvm_stats, earlier.kvm_stats);
    add(&mut later.tracepoints, earlier.tracepoints);
    add(&mut later.records, earlier.records);
    for (source, counters) in earlier.by_source.iter() {
        let mut sum = later.by_source.get(source).cloned().unwrap_or_default();
        add(&mut sum, counters.clone());
        later.by_source.set(source, sum);
    }
    later.exit_reasons = match (earlier.exit_reasons, later.exit_reasons.take()) {
        (Some(a), Some(b)) => Some(join_reasons(a, b)),
        // One window had no sampler (it opened late): what the other
        // counted, its `missing` recomputed below against KVM's stat.
        (Some(one), None) | (None, Some(one)) => Some(one),
        (None, None) => None,
    };
    later.counted_while_off = later
        .counted_while_off
        .saturating_add(earlier.counted_while_off);
    let mut samples = earlier.samples;
    samples.append(&mut later.samples);
    later.samples = samples;
    if let Some(c) = &mut later.exit_reasons {
        c.missing = None;
    }
    derive(&mut later);
    later
}

/// Two windows' exits by reason, summed (`missing` is recomputed).
fn join_reasons(a: ExitReasonCounts, mut b: ExitReasonCounts) -> ExitReasonCounts {
    for (reason, r) in a.by_reason {
        let slot = b.by_reason.entry(reason).or_default();
        slot.count = slot.count.saturating_add(r.count);
        slot.timed = slot.timed.saturating_add(r.timed);
        slot.host_ns = slot.host_ns.saturating_add(r.host_ns);
    }
    b.exits = b.exits.saturating_add(a.exits);
    b.lost = b.lost.saturating_add(a.lost);
    b.unmatched = b.unmatched.saturating_add(a.unmatched);
    b.complete &= a.complete;
    b
}

/// The figures of a phase that take more than one source.
fn derive(p: &mut PhaseResult) {
    p.icr_write_exits = icr_exits(p);
    p.exit_reasons = p.exit_reasons.take().map(|c| with_missing(c, &p.kvm_stats));
    // An uncounted part's per-exit counters were off: their zeros are
    // not measurements, so the part carries none of them (the model's
    // ICR-write exits are exact and cost nothing: kept).
    // What they counted anyway is kept as a check of the switch.
    if p.uncounted {
        p.counted_while_off = p
            .tracepoints
            .values()
            .fold(0u64, |a, &b| a.saturating_add(b))
            .saturating_add(p.exit_reasons.as_ref().map_or(0, |e| e.exits));
        p.tracepoints.clear();
        p.exit_reasons = None;
        p.icr_write_exits = p
            .icr_write_exits
            .take()
            .filter(|i| i.source == Source::UserLapic.key());
    }
}

/// ICR-write exits: with ipivmm's LAPIC every ICR write exits to userspace
/// (exact); else from the tracepoint counters (one formula for every vendor
/// path: `ipivmm_counters::specs::icr_write_exits`).
fn icr_exits(p: &PhaseResult) -> Option<IcrExits> {
    let model = p.by_source.get(Source::UserLapic);
    let (exits, source) = match model.and_then(|m| m.get("icr_writes")) {
        Some(&exits) => (exits, Source::UserLapic.key()),
        None => (
            ipivmm_counters::specs::icr_write_exits(&p.tracepoints)?,
            IcrExits::SOURCE,
        ),
    };
    Some(IcrExits {
        exits,
        accelerated: p.guest.all_icr_writes().saturating_sub(exits),
        source: source.into(),
    })
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

    /// A source that opens at the first begin marker, then reports a
    /// second entry and asks to be called per exit; counts its calls.
    struct Late {
        key: Source,
        opened: bool,
        exits_seen: std::rc::Rc<std::cell::Cell<u32>>,
    }

    impl PhaseCounter for Late {
        fn status(&self, out: &mut Vec<SourceStatus>) {
            out.push(SourceStatus::new(self.key, self.opened, None));
            if self.opened {
                out.push(SourceStatus::new(Source::Records, true, None));
            }
        }
        fn at_begin_marker(&mut self, _: bool) -> bool {
            !std::mem::replace(&mut self.opened, true)
        }
        fn begin(&mut self, _: &LoopCounts) {}
        fn end(&mut self, _: &LoopCounts, _: &mut PhaseResult) {}
        fn per_exit(&self) -> bool {
            self.opened
        }
        fn after_exit(&mut self) {
            self.exits_seen.set(self.exits_seen.get() + 1);
        }
    }

    #[test]
    fn a_late_source_updates_its_status_in_place_and_is_called_per_exit_once_open() {
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let late = |key| Late {
            key,
            opened: false,
            exits_seen: seen.clone(),
        };
        let mut s = Sources {
            counters: vec![
                Box::new(late(Source::Guest)),
                Box::new(late(Source::KvmStats)),
            ],
            per_exit: Vec::new(),
            status: Vec::new(),
        };
        s.refresh();
        let keys = |s: &Sources| -> Vec<(Source, bool)> {
            s.status.iter().map(|x| (x.source, x.available)).collect()
        };
        use Source::{Guest, KvmStats, Records};
        assert_eq!(keys(&s), [(Guest, false), (KvmStats, false)]);
        s.after_exit();
        assert_eq!(seen.get(), 0, "no source asked to be called per exit");
        assert!(s.at_begin(false), "both opened");
        // Each keeps its place; what is new comes after (once).
        assert_eq!(keys(&s), [(Guest, true), (KvmStats, true), (Records, true)]);
        s.after_exit();
        assert_eq!(seen.get(), 2);
        assert!(!s.at_begin(false));
    }

    #[test]
    fn two_windows_join_into_one_with_their_figures_derived_again() {
        let window = |icr: u64, exits: u64, sampled: Option<u64>, ns: (u64, u64)| PhaseResult {
            id: 1,
            name: "run".into(),
            wall_ns: ns.1 - ns.0,
            window_ns: ns,
            kvm_stats: [("exits".to_string(), exits)].into(),
            tracepoints: [("kvm_apic:icr_write".to_string(), icr)].into(),
            exit_reasons: sampled.map(sampled_with),
            ..Default::default()
        };
        fn sampled_with(n: u64) -> ExitReasonCounts {
            let mut c = sampled(n);
            c.by_reason.insert(
                "msr".into(),
                crate::results::ReasonCount {
                    count: n,
                    timed: n,
                    host_ns: 10 * n,
                },
            );
            c
        }
        let mut loop_exits = crate::results::ExitCounts::default();
        loop_exits.bump(crate::results::ExitKind::IoOut);
        let guest = ipivmm_abi::GuestCounters::default();
        let now = LoopCounts {
            exits: &loop_exits,
            guest: &guest,
        };
        let mut earlier = window(3, 10, Some(10), (100, 200));
        derive(&mut earlier);
        let mut later = window(4, 20, Some(15), (200, 250));
        later.name = "boot".into();
        derive(&mut later);
        let j = join(earlier, later, &now);
        assert_eq!(
            (j.name.as_str(), j.wall_ns, j.window_ns),
            ("boot", 150, (100, 250))
        );
        assert_eq!(j.kvm_stats["exits"], 30);
        assert_eq!(j.icr_write_exits.map(|i| i.exits), Some(7));
        let r = j.exit_reasons.expect("both sampled");
        assert_eq!((r.exits, r.by_reason["msr"].host_ns), (25, 250));
        // 30 exits in KVM's stat, 25 sampled: recomputed over the join.
        assert_eq!((r.missing, r.complete), (Some(5), false));
        assert_eq!(
            j.exits, loop_exits,
            "the loop's counts since the join began"
        );
        // A window without the sampler (it opened late): the join says
        // what it missed.
        let j = join(
            window(0, 8, None, (0, 1)),
            window(0, 2, Some(2), (1, 2)),
            &now,
        );
        let r = j.exit_reasons.expect("the later window's");
        assert_eq!((r.exits, r.missing, r.complete), (2, Some(8), false));
    }

    #[test]
    fn an_uncounted_part_keeps_no_per_exit_figure_but_its_check() {
        let mut p = PhaseResult {
            uncounted: true,
            tracepoints: [("kvm_apic:icr_write".to_string(), 3)].into(),
            exit_reasons: Some(sampled(2)),
            ..Default::default()
        };
        p.guest.icr_writes = 10;
        derive(&mut p);
        assert_eq!(p.counted_while_off, 5);
        assert!(p.tracepoints.is_empty() && p.exit_reasons.is_none());
        assert_eq!(p.icr_write_exits, None, "from tracepoints: not kept");
        // With the LAPIC model, ICR-write exits are exact: kept, and
        // taken from the model before the tracepoints.
        let mut p = PhaseResult {
            uncounted: true,
            tracepoints: [("kvm_apic:icr_write".to_string(), 3)].into(),
            ..Default::default()
        };
        p.guest.icr_writes = 10;
        p.by_source
            .set(Source::UserLapic, [("icr_writes".to_string(), 7)].into());
        derive(&mut p);
        let icr = p.icr_write_exits.expect("kept");
        assert_eq!((icr.exits, icr.accelerated), (7, 3));
        assert_eq!(icr.source, Source::UserLapic.key());
    }
}
