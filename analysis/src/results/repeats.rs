//! The repeats of each configuration (`--repeat N`: N independent VMs per
//! configuration), gathered: per headline figure the median over repeats
//! with its 95% interval and spread, counts as counts (exact where every
//! repeat agrees), the smallest effect a comparison at these repeats can
//! detect, and why the figures may not be stable. Every repeat stays in
//! `runs[]` (with its `repeat` index): nothing is averaged away; the JSON
//! document carries this as `configurations` (docs/results-schema.md).
use crate::mode::TargetWait;
use crate::results::identity::ConfigId;
use crate::results::metrics::Metric;
use crate::results::summary::RunSummary;
use crate::results::RunReport;
use crate::stats::{self, HostLoad, Instability, Interval};
use serde::Serialize;
use std::collections::BTreeMap;

/// A figure over repeats (cycles, ns, a ratio): its median, the median's
/// distribution-free interval and the spread.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FigureStats {
    /// Median over the repeats.
    pub median: f64,
    /// The median's interval (95%, or what the repeats give: 5 give 93.75%).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// Coefficient of variation over the repeats (from 2 repeats).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cov: Option<f64>,
    /// Each repeat's figure, in run order: one per repeat that has it (its
    /// count is the n of every statistic here).
    pub values: Vec<f64>,
    /// The runs (indices in `runs[]`) `values` come from.
    pub runs: Vec<usize>,
}

impl FigureStats {
    /// The statistics of `values`, each from the run of the same place in
    /// `runs` (None for none).
    pub fn of(values: Vec<f64>, runs: Vec<usize>) -> Option<Self> {
        Some(Self {
            median: stats::median(&values)?,
            interval: (values.len() > 1)
                .then(|| stats::median_interval(&values, stats::CONFIDENCE))
                .flatten(),
            cov: stats::cov(&values),
            values,
            runs,
        })
    }
}

/// A count per operation or per IPI over repeats: no interval, the range.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CountStats {
    /// Median over the repeats.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Whether every repeat gave the same count (to 1e-9).
    pub exact: bool,
    /// Each repeat's count, in run order: one per repeat that has it.
    pub values: Vec<f64>,
    /// The runs (indices in `runs[]`) `values` come from.
    pub runs: Vec<usize>,
}

impl CountStats {
    /// The statistics of `values`, each from the run of the same place in
    /// `runs` (None for none).
    pub fn of(values: Vec<f64>, runs: Vec<usize>) -> Option<Self> {
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Self {
            median: stats::median(&values)?,
            min,
            max,
            exact: max - min <= 1e-9,
            values,
            runs,
        })
    }
}

/// One configuration and its repeats.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigurationStats {
    /// The configuration.
    pub id: ConfigId,
    /// Its run label.
    pub label: String,
    /// Workload and target (or payload).
    pub workload: String,
    /// vCPUs.
    pub vcpus: usize,
    /// What one latency sample times.
    pub operation: &'static str,
    /// Its runs' indices in `runs[]`.
    pub runs: Vec<usize>,
    /// Repeats that completed.
    pub completed: usize,
    /// Completed repeats that measured the phase the figures read (its
    /// headline phase: `measure`, the one `--phase` names...); a figure
    /// that not all of them have says so by its own `values`.
    pub repeats: usize,
    /// How the completed repeats differ in what they measured, when they
    /// do (`--phase cpuid` where some repeats ran no phase of that name,
    /// a payload whose phases differ between runs): each phase with how
    /// many repeats measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats_differ: Option<String>,
    /// Latency and ratio figures by [`Metric::key`].
    pub figures: BTreeMap<&'static str, FigureStats>,
    /// Counts by [`Metric::key`].
    pub counts: BTreeMap<&'static str, CountStats>,
    /// Smallest change of the p50 (0.12 = 12%) that a comparison of two
    /// such configurations at as many repeats as have the p50 detects with
    /// 80% power under the gate's rule (significant at 5% one-sided and at
    /// least the 10% threshold: [`crate::gate::Policy::min_detectable`]), from their
    /// spread; None below 4 of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_detectable_effect: Option<f64>,
    /// `stats::TARGET_EFFECT`.
    pub target_effect: f64,
    /// Repeats per side at which the gate's rule detects `target_effect`
    /// with 80% power.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats_for_target: Option<usize>,
    /// Why the figures may not be stable, with what helps; empty when
    /// nothing was seen.
    pub unstable: Vec<String>,
    /// Levers that demonstrably did not act on what they control in the
    /// completed repeats ([`crate::results::lever_effect`]): halt polling
    /// on with no poll attempted, or none that caught a wake-up.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub levers: Vec<String>,
}

impl ConfigurationStats {
    /// Repeats per configuration when `--repeat` is not given: the fewest at
    /// which the rank test can call a difference significant at 95% is 4;
    /// 5 leaves room for one failed run (docs/statistics.md has the spread
    /// measured here and the effect 5 repeats detect).
    pub const DEFAULT_REPEATS: u32 = 5;

    /// The p50 figure (cycles per operation), when measured.
    pub fn p50(&self) -> Option<&FigureStats> {
        self.figures.get(Metric::CyclesPerOpP50.key())
    }
}

impl ConfigurationStats {
    /// Every configuration of `runs`, in order of first appearance.
    pub fn of(runs: &[RunReport]) -> Vec<ConfigurationStats> {
        let summaries: Vec<Summarized> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| (i, r.summary(), r.host_load))
            .collect();
        of_summaries(&summaries)
    }
}

/// A run as the statistics read it: its index in `runs[]`, its summary
/// and the host load it recorded.
pub(crate) type Summarized = (usize, RunSummary, Option<HostLoad>);

/// [`configurations`] of runs already summarized.
pub(crate) fn of_summaries(runs: &[Summarized]) -> Vec<ConfigurationStats> {
    let mut order: Vec<ConfigId> = Vec::new();
    let mut groups: BTreeMap<ConfigId, Vec<&Summarized>> = BTreeMap::new();
    for r in runs {
        let k = r.1.id.clone();
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    order
        .into_iter()
        .map(|k| {
            let members = &groups[&k];
            configuration(&k, members)
        })
        .collect()
}

/// How the completed repeats `done` differ in the phase they measured, if
/// they do: `phase 'cpuid' in 3, no measured phase in 3`.
fn differences(done: &[&Summarized]) -> Option<String> {
    let mut seen: Vec<(Option<&str>, usize)> = Vec::new();
    for s in done {
        let phase = s.1.phase.as_deref();
        match seen.iter_mut().find(|(p, _)| *p == phase) {
            Some((_, n)) => *n += 1,
            None => seen.push((phase, 1)),
        }
    }
    (seen.len() > 1).then(|| {
        let each: Vec<String> = seen
            .iter()
            .map(|(p, n)| match p {
                Some(name) => format!("phase '{name}' in {n}"),
                None => format!("no measured phase in {n}"),
            })
            .collect();
        format!("the repeats measured different phases: {}", each.join(", "))
    })
}

fn configuration(k: &ConfigId, members: &[&Summarized]) -> ConfigurationStats {
    let done_runs: Vec<&Summarized> = members.iter().copied().filter(|m| m.1.completed).collect();
    let done: Vec<&RunSummary> = done_runs.iter().map(|m| &m.1).collect();
    let mut figures = BTreeMap::new();
    let mut counts = BTreeMap::new();
    for m in Metric::ALL {
        let (runs, values): (Vec<usize>, Vec<f64>) = done_runs
            .iter()
            .filter_map(|r| Some((r.0, m.value(&r.1)?)))
            .unzip();
        if m.is_count() {
            if let Some(c) = CountStats::of(values, runs) {
                counts.insert(m.key(), c);
            }
        } else if let Some(f) = FigureStats::of(values, runs) {
            figures.insert(m.key(), f);
        }
    }
    let p50 = figures.get(Metric::CyclesPerOpP50.key());
    // Every statistic of the p50 counts the repeats that have it.
    let n = p50.map_or(0, |f| f.values.len());
    let spread = p50.and_then(|f| stats::log_sd(&f.values));
    let mut unstable: Vec<String> = Vec::new();
    if let Some(c) = p50.and_then(|f| f.cov).filter(|c| *c > stats::COV_BOUND) {
        unstable.push(Instability::Spread(c).hint(k));
    }
    // Which repeats (1-based, in run order) had two clusters, and where.
    let bimodal: Vec<(usize, f64, f64)> = members
        .iter()
        .enumerate()
        .filter(|(_, m)| m.1.completed)
        .filter_map(|(i, m)| {
            let (counts, centres) = m.1.histogram.dense();
            stats::bimodal(&counts, &centres).map(|(a, b)| (i + 1, a, b))
        })
        .collect();
    if !bimodal.is_empty() {
        unstable.push(two_clusters(&bimodal, members.len(), k));
    }
    // The worst load any repeat saw.
    let loads: Vec<HostLoad> = members.iter().filter_map(|m| m.2).collect();
    let worst = |f: fn(&HostLoad) -> f64| loads.iter().map(f).fold(0.0, f64::max);
    if !loads.is_empty() {
        let load = HostLoad {
            cpus: loads[0].cpus,
            busy: worst(|l| l.others()),
            own: 0.0,
            steal: worst(|l| l.steal),
        };
        unstable.extend(load.instabilities().iter().map(|u| u.hint(k)));
    }
    let policy = crate::gate::Policy::DEFAULT;
    ConfigurationStats {
        id: k.clone(),
        label: k.label(),
        workload: k.workload_label(),
        vcpus: k.vcpus,
        operation: members.first().map_or("op", |m| m.1.operation),
        runs: members.iter().map(|m| m.0).collect(),
        completed: done.len(),
        repeats: done.iter().filter(|s| s.phase.is_some()).count(),
        repeats_differ: differences(&done_runs),
        figures,
        counts,
        min_detectable_effect: spread
            .filter(|_| n >= stats::MIN_REPEATS)
            .and_then(|s| policy.min_detectable(s, n)),
        target_effect: stats::TARGET_EFFECT,
        repeats_for_target: spread
            .and_then(|s| crate::gate::power::repeats_for_effect(s, stats::TARGET_EFFECT, &policy)),
        unstable,
        levers: lever_notes(&done),
    }
}

/// The levers that might steady `id`'s figures and that it has not pulled
/// already: "a halted target (--target halt)" said to a run that used it
/// read as if nobody had looked at its flags (issue 50).
fn levers(id: &ConfigId, all: &[&'static str]) -> String {
    let pulled = |l: &str| match l {
        "--pin" => !id.levers.pin.is_empty(),
        _ if l.starts_with("a halted target") => id.target == TargetWait::Halt,
        _ => false,
    };
    let left: Vec<&str> = all.iter().copied().filter(|l| !pulled(l)).collect();
    match left.is_empty() {
        true => "a quieter host".into(),
        false => left.join(", "),
    }
}

impl Instability {
    /// What an instability says, with the levers `id` has not pulled
    /// (`levers`); the wording is [`Instability`]'s.
    pub fn hint(&self, id: &ConfigId) -> String {
        const HALT: &str = "a halted target (--target halt)";
        match self {
            Instability::Spread(c) => format!(
                "repeats spread by CoV {:.1}% (bound {:.0}%): {}",
                c * 100.0,
                stats::COV_BOUND * 100.0,
                levers(id, &["more repeats", HALT, "--pin", "a quieter host"])
            ),
            Instability::Bimodal(a, b) => two_clusters(&[(1, *a, *b)], 1, id),
            Instability::HostBusy(x) => format!(
                "other processes used {:.0}% of the host's CPU time during a run: {}",
                x * 100.0,
                levers(id, &["a quieter host", "--pin"])
            ),
            Instability::Steal(_) => self.to_string(),
        }
    }
}

/// Samples in two clusters, naming the repeats (1-based, of `of`) they
/// were in: `(repeat, one centre, the other)`, the first's centres said.
fn two_clusters(at: &[(usize, f64, f64)], of: usize, id: &ConfigId) -> String {
    let Some(&(_, a, b)) = at.first() else {
        return String::new();
    };
    let which = match (of, at.len()) {
        (0 | 1, _) => String::new(),
        (_, 1) => format!(" in repeat {} of {of}", at[0].0),
        _ => {
            let n: Vec<String> = at.iter().map(|r| r.0.to_string()).collect();
            format!(" in repeats {} of {of}", n.join(", "))
        }
    };
    let around = match at.len() {
        1 => format!("around {a:.0} and {b:.0}"),
        _ => format!("around {a:.0} and {b:.0} in repeat {}", at[0].0),
    };
    format!(
        "samples in two clusters{which} ({around}): two paths or a preempted vCPU; {}",
        levers(id, &["--pin", HALT_SHORT])
    )
}

/// The halted target as [`Instability::Bimodal`] names it.
const HALT_SHORT: &str = "a halted target";

/// What [`crate::results::lever_effect`] says of the completed repeats.
fn lever_notes(done: &[&RunSummary]) -> Vec<String> {
    let polling: Vec<_> = done.iter().filter_map(|s| s.halt_polling).collect();
    super::lever_effect::HaltPolling::note(&polling)
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::RunConfig;

    fn id(target: TargetWait, pin: Vec<usize>) -> ConfigId {
        let c = RunConfig {
            target,
            levers: crate::mode::Levers {
                pin,
                ..Default::default()
            },
            ..RunConfig::default()
        };
        RunReport::not_started(c, crate::mode::ApicvRequest::Host, "test")
            .summary()
            .id
    }

    /// Issue 50: "a halted target (--target halt)" was said to a run that
    /// used --target halt; the hints leave out the levers already pulled.
    #[test]
    fn hints_know_the_runs_flags() {
        let spread = Instability::Spread(0.3);
        let spin = spread.hint(&id(TargetWait::Spin, vec![]));
        assert_eq!(
            spin,
            "repeats spread by CoV 30.0% (bound 10%): more repeats, a halted target (--target halt), --pin, a quieter host"
        );
        let halted = spread.hint(&id(TargetWait::Halt, vec![]));
        assert!(!halted.contains("halted target"), "{halted}");
        assert!(
            halted.ends_with(": more repeats, --pin, a quieter host"),
            "{halted}"
        );
        let pinned = spread.hint(&id(TargetWait::Halt, vec![0, 1]));
        assert!(
            pinned.ends_with(": more repeats, a quieter host"),
            "{pinned}"
        );
        let busy = Instability::HostBusy(0.5).hint(&id(TargetWait::Spin, vec![0, 1]));
        assert!(busy.ends_with("during a run: a quieter host"), "{busy}");
        let both = id(TargetWait::Halt, vec![0, 1]);
        let two = two_clusters(&[(1, 5.0, 9.0)], 1, &both);
        assert!(two.ends_with("preempted vCPU; a quieter host"), "{two}");
    }

    /// Issue 50: "samples in two clusters (around 1507328 and 2490368)"
    /// named no repeat.
    #[test]
    fn two_clusters_name_their_repeats() {
        let spin = id(TargetWait::Spin, vec![]);
        assert_eq!(
            two_clusters(&[(3, 1507328.0, 2490368.0)], 5, &spin),
            "samples in two clusters in repeat 3 of 5 (around 1507328 and 2490368): two paths or a preempted vCPU; --pin, a halted target"
        );
        let many = two_clusters(&[(2, 10.0, 20.0), (4, 11.0, 21.0)], 5, &spin);
        assert!(
            many.starts_with(
                "samples in two clusters in repeats 2, 4 of 5 (around 10 and 20 in repeat 2): "
            ),
            "{many}"
        );
        let halted = two_clusters(&[(1, 10.0, 20.0)], 1, &id(TargetWait::Halt, vec![]));
        assert!(
            halted.starts_with("samples in two clusters (around 10 and 20): "),
            "{halted}"
        );
        assert!(halted.ends_with("; --pin"), "{halted}");
    }
}
