//! Headline figures of a run for charts and comparisons: the measured
//! phase, cycles per IPI (p50/p99), IPIs, and VM exits per IPI by reason.
//!
//! Rules (docs/results-schema.md repeats them):
//! - a phase is its (id, name): an id reused under another name is another
//!   phase; the same (id, name) run again (on a vCPU, or on several) is one
//!   phase whose figures count every run ([`crate::results::RunReport::phase_keys`]);
//! - every sum saturates (`u64::saturating_add`): guest
//!   counters are whatever the guest sends;
//! - the measured phase is the one `--phase` names (`mode.phase`; none if
//!   the run has no phase of that name), else the one named `measure`, else the counted phase
//!   with the most latency samples, else the one with the most IPIs sent
//!   (tables and `compare`); charts draw every phase that has samples, the
//!   measured one with its uncounted part as one ([`crate::results::RunReport::phase_summaries`]);
//! - a measured phase with an uncounted part (a phase of the same id with
//!   the `uncounted` flag: every per-exit counter off) takes its headline
//!   latency from that part and everything else (IPIs, operations, exits)
//!   from the counted phase; the counted part's latency is kept beside it
//!   and their ratio is what counting cost ([`RunSummary::observer_p50`]);
//! - IPIs sent = guest `ipis_sent` summed over vCPUs; IPIs delivered =
//!   `ipis_received` summed; neither is ever filled in from the other (a
//!   payload that counts only one leaves the other 0, and an expectation
//!   `ipis_delivered == ipis_sent` fails); operations = latency samples plus the
//!   samples the guest dropped (one per round trip, broadcast, multicast,
//!   self-IPI or send: [`crate::mode::Workload::operation`]); IPIs per
//!   operation leave out the phase's end-of-phase wake-ups (`wake_ipis`);
//! - latency: the vCPU's own figures when one vCPU recorded samples; with
//!   several, p50 is the sample-weighted mean of their p50s and p99 the
//!   largest p99 (`pooled_vcpus` says how many);
//! - exits are summed over all vCPUs (the target's exits are part of an
//!   IPI's cost), from the best source every vCPU has: `kvm_exit:*`
//!   tracepoints, else KVM binary stats, else userspace exits.
use super::source::Source;
use crate::results::latency::{cycles_to_ns, Histogram};
use crate::results::{saturating_sum as sum, PhaseResult as Phase, RunReport as Run};
use std::collections::BTreeMap;

/// Runs that belong in one chart: same workload (or custom payload), target
/// wait and vCPU count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    /// Workload of the built-in payload, or the custom payload's file name
    /// ([`crate::results::RunConfig::workload_label`]).
    pub workload: String,
    /// Whether `workload` names a custom payload (whose samples are its own,
    /// not IPIs, and which may ignore the target wait).
    pub payload: bool,
    /// vCPUs.
    pub vcpus: usize,
    /// Target wait mode.
    pub target: String,
    /// What one sample times ([`crate::mode::Workload::operation`]; `sample`
    /// for a custom payload).
    pub operation: &'static str,
}

impl GroupKey {
    /// File-name stem, e.g. `pingpong-2vcpu-spin`, or `demo-1vcpu` for a
    /// custom payload `demo`.
    pub fn slug(&self) -> String {
        let stem = if self.payload {
            format!("{}-{}vcpu", self.workload, self.vcpus)
        } else {
            format!("{}-{}vcpu-{}", self.workload, self.vcpus, self.target)
        };
        super::slug::slug(&stem)
    }

    /// What the per-X exit figures count: a delivered `IPI` for the
    /// built-in workloads, a `sample` for a custom payload.
    pub fn unit(&self) -> &'static str {
        if self.payload {
            "sample"
        } else {
            "IPI"
        }
    }
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.vcpus == 1 { "" } else { "s" };
        if self.payload {
            write!(f, "payload {}, {} vCPU{s}", self.workload, self.vcpus)
        } else {
            write!(
                f,
                "{}, {} vCPU{s}, target {}",
                self.workload, self.vcpus, self.target
            )
        }
    }
}

/// Headline latency of a run, TSC cycles (and ns when the TSC rate is known).
#[derive(Clone, Debug, PartialEq)]
pub struct Headline {
    /// Samples.
    pub count: u64,
    /// Median, cycles.
    pub p50: f64,
    /// 99th percentile, cycles.
    pub p99: f64,
    /// Median, ns.
    pub p50_ns: Option<f64>,
    /// 99th percentile, ns.
    pub p99_ns: Option<f64>,
    /// vCPUs whose samples were pooled.
    pub pooled_vcpus: usize,
    /// The p50's interval from the run's own samples, where one vCPU
    /// recorded them all ([`LatencyStats::p50_interval`]; a pooled p50 is
    /// a weighted mean of several, with no order-statistic interval).
    ///
    /// [`LatencyStats::p50_interval`]: crate::results::latency::LatencyStats::p50_interval
    pub p50_interval: Option<crate::stats::Interval>,
}

/// VM exits of the measured phase, all vCPUs, by reason.
#[derive(Clone, Debug, PartialEq)]
pub struct ExitBreakdown {
    /// `tracepoints`, `kvm_stats` or `userspace_exits`.
    pub source: &'static str,
    /// All exits.
    pub total: u64,
    /// Non-zero reasons, largest first; `other...` holds the exits no per-reason counter claimed.
    pub by_reason: Vec<(String, u64)>,
}

/// Headline figures of one run.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// Chart group.
    pub group: GroupKey,
    /// The configuration the run ran.
    pub id: super::identity::ConfigId,
    /// Mode label, "irqchip/apic/ipi" plus non-default levers ([`crate::results::RunReport::label`]).
    pub mode: String,
    /// Whether the run completed.
    pub completed: bool,
    /// Name of the summarized phase (the measured one, or one of every
    /// phase with samples: [`crate::results::RunReport::phase_summaries`]).
    pub phase: Option<String>,
    /// Latency of the measured phase: of its uncounted part where it has
    /// one ([`RunSummary::latency_phase`]).
    pub latency: Option<Headline>,
    /// The phase `latency` came from: the measured phase, or its uncounted
    /// part.
    pub latency_phase: Option<String>,
    /// Latency of the counted phase, when `latency` came from its
    /// uncounted part (the figure counting distorted, kept to show by how
    /// much).
    pub counted_latency: Option<Headline>,
    /// Latency histogram merged over vCPUs (of `latency_phase`).
    pub histogram: Histogram,
    /// What one latency sample times ([`crate::mode::Workload::operation`];
    /// `sample` for a custom payload).
    pub operation: &'static str,
    /// Operations in the phase: latency samples plus those the guest dropped.
    pub operations: u64,
    /// IPIs sent in the phase (per target).
    pub ipis: u64,
    /// IPIs delivered in the phase (the targets' handlers counted them).
    pub ipis_delivered: u64,
    /// IPIs the sender sent to end the phase (waking its targets), outside
    /// any operation (the payload's `wake_ipis` record).
    pub wake_ipis: u64,
    /// The IPIs one operation should deliver ([`RunConfig::fan_out`]).
    ///
    /// [`RunConfig::fan_out`]: crate::results::RunConfig::fan_out
    pub fan_out: Option<u64>,
    /// The workload's ICR writes in the phase (guest count, all vCPUs).
    pub icr_writes: u64,
    /// ICR writes of halting-barrier wake-ups in the phase (not the
    /// workload's; counted by KVM's ICR handling all the same).
    pub barrier_icr_writes: u64,
    /// ICR-write exits in the measured phase (all vCPUs), when known.
    pub icr_write_exits: Option<u64>,
    /// Exits by reason.
    pub exits: Option<ExitBreakdown>,
    /// TSC frequency, kHz.
    pub tsc_khz: u64,
    /// Halt polling in the phase (KVM stats, `kvm_vcpu_wakeup`), where
    /// KVM's stats recorded it ([`crate::results::lever_effect`]).
    pub halt_polling: Option<crate::results::lever_effect::HaltPolling>,
}

impl RunSummary {
    /// What counting cost the median: the counted part's p50 over the
    /// uncounted part's (1.03: counting added 3%), when the phase was
    /// measured both ways.
    pub fn observer_p50(&self) -> Option<f64> {
        let (c, u) = (self.counted_latency.as_ref()?, self.latency.as_ref()?);
        (u.p50 > 0.0).then(|| c.p50 / u.p50)
    }

    /// [`RunSummary::observer_p50`] for the 99th percentile.
    pub fn observer_p99(&self) -> Option<f64> {
        let (c, u) = (self.counted_latency.as_ref()?, self.latency.as_ref()?);
        (u.p99 > 0.0).then(|| c.p99 / u.p99)
    }

    /// Exits per delivered IPI, when both are known.
    pub fn exits_per_ipi(&self) -> Option<f64> {
        let e = self.exits.as_ref()?;
        per(e.total, self.ipis_delivered)
    }

    /// Exits per operation, when both are known: exits per delivered IPI
    /// times IPIs per operation, so the end-of-phase wake-ups' exits are
    /// shared out like their IPIs (exits over operations where a custom
    /// payload counts no IPIs).
    pub fn exits_per_operation(&self) -> Option<f64> {
        let e = self.exits.as_ref()?;
        self.per_operation(e.total as f64)
    }

    /// `count` (of the whole phase) per operation, the wake-ups shared out
    /// as in [`RunSummary::exits_per_operation`].
    fn per_operation(&self, count: f64) -> Option<f64> {
        let over = |n: u64| (n > 0).then(|| count / n as f64);
        match (over(self.ipis_delivered), self.ipis_per_operation()) {
            (Some(per_ipi), Some(k)) if k > 0.0 => Some(per_ipi * k),
            _ => over(self.operations),
        }
    }

    /// Delivered IPIs per operation (1 for a round trip, N-1 for a
    /// broadcast): the phase's delivered IPIs less its end-of-phase wake-ups.
    pub fn ipis_per_operation(&self) -> Option<f64> {
        per(
            self.ipis_delivered.saturating_sub(self.wake_ipis),
            self.operations,
        )
    }

    /// Median cycles per delivered IPI: the median operation's cycles spread
    /// over the IPIs one operation delivers.
    pub fn p50_cycles_per_ipi(&self) -> Option<f64> {
        let l = self.latency.as_ref()?;
        Some(l.p50 / self.ipis_per_operation().filter(|&k| k > 0.0)?)
    }

    /// ICR-write exits per operation, when both are known (shared out as
    /// in [`RunSummary::exits_per_operation`]).
    pub fn icr_exits_per_operation(&self) -> Option<f64> {
        self.per_operation(self.workload_icr_exits()?)
    }

    /// ICR-write exits of the workload's own writes: the phase's, less the
    /// halting barriers' share (their writes exit like the others).
    fn workload_icr_exits(&self) -> Option<f64> {
        let exits = self.icr_write_exits? as f64;
        let all = self.icr_writes.saturating_add(self.barrier_icr_writes);
        Some(match all {
            0 => exits,
            _ => exits * self.icr_writes as f64 / all as f64,
        })
    }

    /// How many of the group's unit ([`GroupKey::unit`]) the phase holds:
    /// delivered IPIs for the built-in workloads, samples for a custom payload.
    pub fn units(&self) -> u64 {
        if self.group.payload {
            self.latency.as_ref().map_or(0, |l| l.count)
        } else {
            self.ipis_delivered
        }
    }

    /// Exits per unit ([`RunSummary::units`]), when both are known.
    pub fn exits_per_unit(&self) -> Option<f64> {
        let e = self.exits.as_ref()?;
        let n = self.units();
        (n > 0).then(|| e.total as f64 / n as f64)
    }

    /// ICR-write exits of the workload's writes (the halting barriers'
    /// wake-ups left out) per delivered IPI, when both are known.
    pub fn icr_exits_per_ipi(&self) -> Option<f64> {
        let e = self.workload_icr_exits()?;
        (self.ipis_delivered > 0).then(|| e / self.ipis_delivered as f64)
    }
}

fn per(count: u64, of: u64) -> Option<f64> {
    (of > 0).then(|| count as f64 / of as f64)
}

/// KVM binary stats that count exits of one kind (the rest of `exits` is `other`).
pub(crate) const KVM_STAT_REASONS: &[&str] = &[
    "io_exits",
    "mmio_exits",
    "halt_exits",
    "irq_exits",
    "irq_window_exits",
    "nmi_window_exits",
    "request_irq_exits",
    "signal_exits",
];

/// Every phase of `run` with this id and name, on any vCPU: one phase of
/// the report. A phase is its (id, name): a payload that reuses an id under
/// another name (or names it differently per vCPU) ran different phases; one
/// that reuses it under the same name ran the same phase again.
fn phases<'r, 'n>(
    run: &'r Run,
    id: u32,
    name: &'n str,
) -> impl Iterator<Item = &'r Phase> + use<'r, 'n> {
    run.vcpus.iter().flat_map(move |v| {
        v.phases
            .iter()
            .filter(move |p| p.id == id && p.name == name)
    })
}

impl Run {
    /// The distinct (id, name) of this run's phases, in the order they first ended
    /// (vCPU 0's first, then the others'), each once; in time linear in the
    /// phases.
    pub fn phase_keys(&self) -> Vec<(u32, String)> {
        let mut seen = std::collections::HashSet::new();
        let mut keys = Vec::new();
        for p in self.vcpus.iter().flat_map(|v| &v.phases) {
            if seen.insert((p.id, p.name.as_str())) {
                keys.push((p.id, p.name.clone()));
            }
        }
        keys
    }
}

impl Run {
    /// The measured phase of this run (see the module rules), as (id, name).
    pub fn measured_phase(&self) -> Option<(u32, String)> {
        let keys = self.phase_keys();
        // An uncounted part is its phase's latency, never the phase itself
        // (unless a payload ran nothing else): the flag decides, not the name.
        let counted = |id: u32, name: &str| {
            phases(self, id, name).any(|p| !p.uncounted)
                && !phases(self, id, name).any(|p| p.unfinished)
        };
        // `--phase` names the phase; a run without it has no measured phase
        // (its figures are missing, never another phase's).
        if let Some(chosen) = &self.mode.phase {
            return keys
                .into_iter()
                .filter(|(_, n)| n == chosen)
                .max_by_key(|(id, n)| (counted(*id, n), *id));
        }
        if let Some(m) = keys
            .iter()
            .find(|(id, n)| n == ipivmm_abi::builtin_phases::MEASURE.1 && counted(*id, n))
        {
            return Some(m.clone());
        }
        let samples = |id: u32, name: &str| -> u64 {
            sum(phases(self, id, name)
                .filter_map(|p| p.latency.as_ref())
                .map(|l| l.count))
        };
        let sent = |id: u32, name: &str| sum(phases(self, id, name).map(|p| p.guest.ipis_sent));
        keys.into_iter()
            .max_by_key(|(id, name)| (counted(*id, name), samples(*id, name), sent(*id, name), *id))
    }
}

impl Run {
    /// Why this run has no figures for the phase `--phase` named: None when it
    /// names none, or the run ran a finished phase of that name.
    pub fn missing_phase(&self) -> Option<String> {
        let chosen = self.mode.phase.as_ref()?;
        if self.measured_phase().is_some() {
            return None;
        }
        let mut unique: Vec<String> = Vec::new();
        for (_, n) in self.phase_keys() {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        Some(if unique.is_empty() {
            format!("no phase '{chosen}': the run finished no phase")
        } else {
            format!(
                "no phase '{chosen}' in this run (its finished phases: {})",
                unique.join(", ")
            )
        })
    }
}

impl Run {
    /// The uncounted part of phase `id` (`name`): the (id, name) of a phase
    /// with the same id, flagged uncounted, that has latency samples.
    pub fn uncounted_part(&self, id: u32, name: &str) -> Option<(u32, String)> {
        self.vcpus
            .iter()
            .flat_map(|v| &v.phases)
            .find(|p| {
                p.id == id
                    && p.uncounted
                    && !p.unfinished
                    && p.name != name
                    && p.latency.as_ref().is_some_and(|l| l.count > 0)
            })
            .map(|p| (p.id, p.name.clone()))
    }
}

fn headline(run: &Run, id: u32, name: &str) -> Option<Headline> {
    let lats: Vec<_> = phases(run, id, name)
        .filter_map(|p| p.latency.as_ref())
        .filter(|l| l.count > 0)
        .collect();
    let count = sum(lats.iter().map(|l| l.count));
    if count == 0 {
        return None;
    }
    let p50 = lats
        .iter()
        .map(|l| l.p50 as f64 * l.count as f64)
        .sum::<f64>()
        / count as f64;
    let p99 = lats.iter().map(|l| l.p99).max().unwrap_or(0) as f64;
    let ns = |c: f64| (run.tsc_khz > 0).then(|| cycles_to_ns(c, run.tsc_khz));
    Some(Headline {
        count,
        p50,
        p99,
        p50_ns: ns(p50),
        p99_ns: ns(p99),
        pooled_vcpus: lats.len(),
        p50_interval: match lats.as_slice() {
            [one] => one.p50_interval,
            _ => None,
        },
    })
}

fn breakdown(ps: &[&Phase]) -> Option<ExitBreakdown> {
    let all_have = |f: &dyn Fn(&Phase) -> bool| !ps.is_empty() && ps.iter().all(|p| f(p));
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    let (source, total) = if all_have(&|p| !p.exits_by_reason().is_empty()) {
        for p in ps {
            for (k, v) in p.exits_by_reason() {
                add(reasons.entry(k).or_default(), v);
            }
        }
        let listed = sum(reasons.values().copied());
        let total = sum(ps
            .iter()
            .filter_map(|p| p.tracepoints.get("kvm_exit").copied()));
        (Source::Tracepoints.key(), total.max(listed))
    } else if all_have(&|p| p.kvm_stats.contains_key("exits")) {
        for p in ps {
            for name in KVM_STAT_REASONS {
                if let Some(v) = p.kvm_stats.get(*name) {
                    add(reasons.entry((*name).to_string()).or_default(), *v);
                }
            }
        }
        (
            Source::KvmStats.key(),
            sum(ps.iter().filter_map(|p| p.kvm_stats.get("exits").copied())),
        )
    } else if !ps.is_empty() {
        for p in ps {
            for (k, v) in p.exits.nonzero() {
                add(reasons.entry(k.name().to_string()).or_default(), v);
            }
        }
        let total = sum(reasons.values().copied());
        (Source::UserspaceExits.key(), total)
    } else {
        return None;
    };
    let listed = sum(reasons.values().copied());
    let mut by_reason: Vec<(String, u64)> = reasons.into_iter().filter(|(_, v)| *v > 0).collect();
    by_reason.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if total > listed {
        let rest = match Source::of_key(source) {
            Some(Source::KvmStats) => "other (no per-kind KVM stat)",
            _ => "other",
        };
        by_reason.push((rest.into(), total - listed));
    }
    Some(ExitBreakdown {
        source,
        total,
        by_reason,
    })
}

impl Run {
    /// Headline figures of this run, from its measured phase ([`crate::results::RunReport::measured_phase`]),
    /// the latency from its uncounted part where it has one.
    pub fn summary(&self) -> RunSummary {
        let Some((id, name)) = self.measured_phase() else {
            return empty_summary(self);
        };
        let uncounted = self.uncounted_part(id, &name);
        let mut s = self.phase_summary(id, name);
        if let Some((uid, uname)) = uncounted {
            if let Some(clean) = headline(self, uid, &uname) {
                s.counted_latency = s.latency.replace(clean);
                s.histogram = Histogram::default();
                for l in phases(self, uid, &uname).filter_map(|p| p.latency.as_ref()) {
                    s.histogram.merge(&l.histogram);
                }
                s.latency_phase = Some(uname);
            }
        }
        s
    }
}

/// `*acc += v`, saturating.
fn add(acc: &mut u64, v: u64) {
    *acc = acc.saturating_add(v);
}

impl Run {
    /// Headline figures of every phase of this run that has latency samples, in
    /// the order the phases ran; the measured phase alone when none has. The
    /// measured phase is its headline ([`crate::results::RunReport::summary`]: its latency from its
    /// uncounted part, which is not a phase of its own here), so that a chart
    /// has one bar per configuration, not one per part.
    pub fn phase_summaries(&self) -> Vec<RunSummary> {
        let headline = self.summary();
        let measured = self.measured_phase();
        let part = measured
            .as_ref()
            .and_then(|(id, name)| self.uncounted_part(*id, name));
        let with_samples: Vec<RunSummary> = self
            .phase_keys()
            .into_iter()
            .filter(|key| Some(key) != part.as_ref())
            .filter(|(id, name)| {
                phases(self, *id, name)
                    .filter_map(|p| p.latency.as_ref())
                    .any(|l| l.count > 0)
                    || Some((*id, name.clone())) == measured && headline.latency.is_some()
            })
            .map(|(id, name)| match Some((id, name.clone())) == measured {
                true => headline.clone(),
                false => self.phase_summary(id, name),
            })
            .collect();
        if with_samples.is_empty() {
            vec![headline]
        } else {
            with_samples
        }
    }
}

fn empty_summary(run: &Run) -> RunSummary {
    let m = &run.mode;
    let operation = match m.payload {
        Some(_) => "sample",
        None => m.workload.operation(),
    };
    let group = GroupKey {
        workload: m.workload_label(),
        payload: m.payload.is_some(),
        vcpus: m.vcpus,
        target: m.target.name().to_string(),
        operation,
    };
    RunSummary {
        group,
        id: run.id(),
        mode: run.label(),
        completed: run.succeeded(),
        phase: None,
        latency: None,
        latency_phase: None,
        counted_latency: None,
        histogram: Histogram::default(),
        operation,
        operations: 0,
        ipis: 0,
        ipis_delivered: 0,
        fan_out: m.fan_out(),
        wake_ipis: 0,
        icr_writes: 0,
        barrier_icr_writes: 0,
        icr_write_exits: None,
        exits: None,
        tsc_khz: run.tsc_khz,
        halt_polling: None,
    }
}

impl Run {
    /// Headline figures of phase `id` (named `name`) of this run.
    pub fn phase_summary(&self, id: u32, name: String) -> RunSummary {
        let mut s = empty_summary(self);
        let ps: Vec<&Phase> = phases(self, id, &name).collect();
        s.latency = headline(self, id, &name);
        for l in ps.iter().filter_map(|p| p.latency.as_ref()) {
            s.histogram.merge(&l.histogram);
        }
        let sent = sum(ps.iter().map(|p| p.guest.ipis_sent));
        let received = sum(ps.iter().map(|p| p.guest.ipis_received));
        s.ipis = sent;
        s.ipis_delivered = received;
        s.wake_ipis = sum(ps
            .iter()
            .filter_map(|p| p.records.get("wake_ipis").copied()));
        s.operations = sum(ps.iter().map(|p| {
            let dropped = p.records.get("samples_dropped").copied().unwrap_or(0);
            p.latency
                .as_ref()
                .map_or(0, |l| l.count)
                .saturating_add(dropped)
        }));
        let icr: Vec<u64> = ps
            .iter()
            .filter_map(|p| p.icr_write_exits.as_ref().map(|i| i.exits))
            .collect();
        s.icr_write_exits = (!icr.is_empty()).then(|| sum(icr.iter().copied()));
        s.barrier_icr_writes = sum(ps.iter().map(|p| p.guest.barrier_icr_writes));
        s.icr_writes = sum(ps.iter().map(|p| p.guest.icr_writes));

        s.exits = breakdown(&ps);
        s.halt_polling = crate::results::lever_effect::HaltPolling::of(self, &ps);
        s.latency_phase = s.latency.is_some().then(|| name.clone());
        s.phase = Some(name);
        s
    }
}
