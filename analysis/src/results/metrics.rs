//! The headline metrics of a run, one home for their names: per operation
//! (what one latency sample times: one unicast round trip, one broadcast,
//! one multicast, one self-IPI, one send; [`crate::mode::Workload::operation`])
//! and per delivered IPI (a broadcast to N vCPUs delivers N-1). Tables,
//! `compare`, the scale chart, the JSON `metrics` object and the CSV's
//! `metrics` rows all take their names and figures from [`Metric`].
use super::summary::RunSummary;
use serde::Serialize;
use std::collections::BTreeMap;

/// A headline figure of a run's measured phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Median TSC cycles per operation.
    CyclesPerOpP50,
    /// 99th-percentile TSC cycles per operation.
    CyclesPerOpP99,
    /// Median ns per operation (shown as µs).
    NsPerOpP50,
    /// Median cycles per operation divided by the IPIs one operation delivers.
    CyclesPerIpiP50,
    /// Delivered IPIs per operation.
    IpisPerOp,
    /// VM exits (all vCPUs) per operation.
    ExitsPerOp,
    /// VM exits (all vCPUs) per delivered IPI.
    ExitsPerIpi,
    /// ICR-write exits per operation.
    IcrExitsPerOp,
    /// ICR-write exits per delivered IPI.
    IcrExitsPerIpi,
    /// What counting cost the median: the counted part's p50 over the
    /// uncounted part's (the headline's), in the same run.
    ObserverP50,
    /// The same for the 99th percentile.
    ObserverP99,
}

impl Metric {
    /// Every metric, in table order.
    pub const ALL: [Metric; 11] = [
        Metric::CyclesPerOpP50,
        Metric::CyclesPerOpP99,
        Metric::NsPerOpP50,
        Metric::CyclesPerIpiP50,
        Metric::IpisPerOp,
        Metric::ExitsPerOp,
        Metric::ExitsPerIpi,
        Metric::IcrExitsPerOp,
        Metric::IcrExitsPerIpi,
        Metric::ObserverP50,
        Metric::ObserverP99,
    ];

    /// The metrics a table shows for runs whose operations deliver
    /// `ipis_per_operation` IPIs each (None: unknown): all of them when an
    /// operation delivers several; for one IPI per operation the per-IPI
    /// figures would repeat the per-operation ones, so exits are shown per
    /// IPI alone.
    pub fn shown(ipis_per_operation: impl IntoIterator<Item = f64>) -> &'static [Metric] {
        const UNICAST: [Metric; 7] = [
            Metric::CyclesPerOpP50,
            Metric::CyclesPerOpP99,
            Metric::NsPerOpP50,
            Metric::ExitsPerIpi,
            Metric::IcrExitsPerIpi,
            Metric::ObserverP50,
            Metric::ObserverP99,
        ];
        if ipis_per_operation
            .into_iter()
            .all(|k| (k - 1.0).abs() < 1e-9)
        {
            &UNICAST
        } else {
            &Metric::ALL
        }
    }

    /// The metrics of a scale table or chart (against the vCPU count): for
    /// operations of several IPIs the cost per operation and per delivered
    /// IPI and the exits per operation and per IPI; for unicast ones the
    /// cost per operation and the exits per IPI.
    pub fn scale(shown: &[Metric]) -> &'static [Metric] {
        if shown.contains(&Metric::CyclesPerIpiP50) {
            &[
                Metric::CyclesPerOpP50,
                Metric::CyclesPerIpiP50,
                Metric::ExitsPerOp,
                Metric::ExitsPerIpi,
            ]
        } else {
            &[Metric::CyclesPerOpP50, Metric::ExitsPerIpi]
        }
    }

    /// Key in the JSON `metrics` object and the CSV `counter` column.
    pub fn key(self) -> &'static str {
        match self {
            Metric::CyclesPerOpP50 => "cycles_per_operation_p50",
            Metric::CyclesPerOpP99 => "cycles_per_operation_p99",
            Metric::NsPerOpP50 => "ns_per_operation_p50",
            Metric::CyclesPerIpiP50 => "cycles_per_ipi_p50",
            Metric::IpisPerOp => "ipis_per_operation",
            Metric::ExitsPerOp => "exits_per_operation",
            Metric::ExitsPerIpi => "exits_per_ipi",
            Metric::IcrExitsPerOp => "icr_write_exits_per_operation",
            Metric::IcrExitsPerIpi => "icr_write_exits_per_ipi",
            Metric::ObserverP50 => "counted_over_uncounted_p50",
            Metric::ObserverP99 => "counted_over_uncounted_p99",
        }
    }

    /// The phase the figure comes from: latency figures from the latency
    /// phase (the uncounted part of a phase measured both ways), the rest
    /// from the measured phase.
    pub fn phase(self, s: &RunSummary) -> Option<&str> {
        match self {
            Metric::CyclesPerOpP50
            | Metric::CyclesPerOpP99
            | Metric::NsPerOpP50
            | Metric::CyclesPerIpiP50 => s.latency_phase.as_deref(),
            _ => s.phase.as_deref(),
        }
    }

    /// Whether a higher figure is a regression (cycles, exits); the IPIs
    /// an operation delivers are the workload's fan-out, and the counting
    /// cost is the instrument's, not the system's: neither better nor worse.
    pub fn higher_is_worse(self) -> bool {
        !matches!(
            self,
            Metric::IpisPerOp | Metric::ObserverP50 | Metric::ObserverP99
        )
    }

    /// How much the column matters when a text table must fit 120
    /// columns: the lowest ranks give way first (the front end's `output::fit`).
    pub fn rank(self) -> u8 {
        match self {
            Metric::CyclesPerOpP50 | Metric::ExitsPerIpi => 9,
            Metric::IcrExitsPerIpi | Metric::CyclesPerIpiP50 => 8,
            Metric::CyclesPerOpP99 => 7,
            Metric::NsPerOpP50 | Metric::ExitsPerOp => 6,
            Metric::IpisPerOp => 5,
            Metric::IcrExitsPerOp => 4,
            Metric::ObserverP50 => 3,
            Metric::ObserverP99 => 2,
        }
    }

    /// Whether the figure is a count per operation or per IPI (exits,
    /// ICR-write exits, IPIs): reported as counts, exact where every repeat
    /// agrees, and judged against a count tolerance, never with a latency
    /// interval or threshold ([`crate::stats`]).
    pub fn is_count(self) -> bool {
        matches!(
            self,
            Metric::IpisPerOp
                | Metric::ExitsPerOp
                | Metric::ExitsPerIpi
                | Metric::IcrExitsPerOp
                | Metric::IcrExitsPerIpi
        )
    }

    /// Unit in the CSV `unit` column.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::CyclesPerOpP50 | Metric::CyclesPerOpP99 | Metric::CyclesPerIpiP50 => "cycles",
            Metric::NsPerOpP50 => "ns",
            _ => "ratio",
        }
    }

    /// Table header, naming the operation (`op`: "broadcast", "round trip",
    /// or "op" where rows of several workloads share a column).
    pub fn name(self, op: &str) -> String {
        match self {
            Metric::CyclesPerOpP50 => format!("cycles/{op} p50"),
            Metric::CyclesPerOpP99 => format!("cycles/{op} p99"),
            Metric::NsPerOpP50 => format!("µs/{op} p50"),
            Metric::CyclesPerIpiP50 => "cycles/IPI p50".into(),
            Metric::IpisPerOp => format!("IPIs/{op}"),
            Metric::ExitsPerOp => format!("exits/{op}"),
            Metric::ExitsPerIpi => "exits/IPI".into(),
            Metric::IcrExitsPerOp => format!("ICR-write exits/{op}"),
            Metric::IcrExitsPerIpi => "ICR-write exits/IPI".into(),
            Metric::ObserverP50 => "counted÷uncounted p50".into(),
            Metric::ObserverP99 => "counted÷uncounted p99".into(),
        }
    }

    /// The figure of a run, when known.
    pub fn value(self, s: &RunSummary) -> Option<f64> {
        match self {
            Metric::CyclesPerOpP50 => s.latency.as_ref().map(|l| l.p50),
            Metric::CyclesPerOpP99 => s.latency.as_ref().map(|l| l.p99),
            Metric::NsPerOpP50 => s.latency.as_ref().and_then(|l| l.p50_ns),
            Metric::CyclesPerIpiP50 => s.p50_cycles_per_ipi(),
            Metric::IpisPerOp => s.ipis_per_operation(),
            Metric::ExitsPerOp => s.exits_per_operation(),
            Metric::ExitsPerIpi => s.exits_per_ipi(),
            Metric::IcrExitsPerOp => s.icr_exits_per_operation(),
            Metric::IcrExitsPerIpi => s.icr_exits_per_ipi(),
            Metric::ObserverP50 => s.observer_p50(),
            Metric::ObserverP99 => s.observer_p99(),
        }
    }

    /// The metric a command line names: its key, or a short name (`p50`,
    /// `p99`, `us`, `cycles-per-ipi`, `exits`, `exits-per-op`,
    /// `icr-exits`, `icr-exits-per-op`, `ipis`, `observer`, `observer-p99`).
    pub fn parse(s: &str) -> Option<Metric> {
        let by_alias = match s {
            "p50" => Some(Metric::CyclesPerOpP50),
            "p99" => Some(Metric::CyclesPerOpP99),
            "us" | "ns" => Some(Metric::NsPerOpP50),
            "cycles-per-ipi" => Some(Metric::CyclesPerIpiP50),
            "ipis" => Some(Metric::IpisPerOp),
            "exits" => Some(Metric::ExitsPerIpi),
            "exits-per-op" => Some(Metric::ExitsPerOp),
            "icr-exits" => Some(Metric::IcrExitsPerIpi),
            "icr-exits-per-op" => Some(Metric::IcrExitsPerOp),
            "observer" => Some(Metric::ObserverP50),
            "observer-p99" => Some(Metric::ObserverP99),
            _ => None,
        };
        by_alias.or_else(|| Metric::ALL.into_iter().find(|m| m.key() == s))
    }

    /// The figure as a table shows it (cycles whole, ns as µs, ratios to
    /// two places).
    pub fn format(self, v: f64) -> String {
        match self {
            Metric::CyclesPerOpP50 | Metric::CyclesPerOpP99 | Metric::CyclesPerIpiP50 => {
                format!("{v:.0}")
            }
            Metric::NsPerOpP50 => format!("{:.2}", v / 1e3),
            Metric::ObserverP50 | Metric::ObserverP99 => format!("×{v:.2}"),
            _ => format!("{v:.2}"),
        }
    }
}

/// The `metrics` object of a run in the JSON document: derived from the
/// run's counters when written (readers recompute it; it is never read back).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunMetrics {
    /// The measured phase (its counted part: the exits).
    pub phase: Option<String>,
    /// The phase the latency figures came from: the measured phase's
    /// uncounted part where it has one (nothing per-exit counted), else
    /// the measured phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_phase: Option<String>,
    /// What one operation is.
    pub operation: &'static str,
    /// Operations measured (latency samples plus those the guest dropped).
    pub operations: u64,
    /// IPIs sent (per target).
    pub ipis_sent: u64,
    /// IPIs delivered (counted by the targets' handlers).
    pub ipis_delivered: u64,
    /// IPIs sent to end the phase (wake-ups), in neither operation count.
    pub wake_ipis: u64,
    /// The IPIs one operation of the built-in workload delivers, from its
    /// description (`ipivmm_abi::Workload::spec`); None for a custom
    /// payload. `ipis_per_operation` should equal it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<u64>,
    /// Where the exit counts came from (`tracepoints`, `kvm_stats`, `userspace_exits`).
    pub exits_source: Option<&'static str>,
    /// Every [`Metric`] that is known, by [`Metric::key`].
    #[serde(flatten)]
    pub values: BTreeMap<&'static str, f64>,
}

impl RunMetrics {
    /// The metrics of a summary.
    pub fn of(s: &RunSummary) -> Self {
        Self {
            phase: s.phase.clone(),
            latency_phase: s.latency_phase.clone(),
            operation: s.operation,
            operations: s.operations,
            ipis_sent: s.ipis,
            ipis_delivered: s.ipis_delivered,
            wake_ipis: s.wake_ipis,
            fan_out: s.fan_out,
            exits_source: s.exits.as_ref().map(|e| e.source),
            values: Metric::ALL
                .iter()
                .filter_map(|m| Some((m.key(), m.value(s)?)))
                .collect(),
        }
    }
}

/// Serializes `runs` each with its `metrics` object (the JSON document's
/// `runs`), streamed: nothing is held twice.
pub(super) fn serialize_runs<S: serde::Serializer>(
    runs: &[super::RunReport],
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct WithMetrics<'a> {
        #[serde(flatten)]
        run: &'a super::RunReport,
        id: super::identity::ConfigId,
        metrics: RunMetrics,
    }
    s.collect_seq(runs.iter().map(|run| WithMetrics {
        run,
        id: run.id(),
        metrics: RunMetrics::of(&run.summary()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names_are_unique() {
        for (i, m) in Metric::ALL.iter().enumerate() {
            for o in &Metric::ALL[..i] {
                assert_ne!(m.key(), o.key());
                assert_ne!(m.name("op"), o.name("op"));
            }
        }
        assert_eq!(
            Metric::CyclesPerOpP50.name("broadcast"),
            "cycles/broadcast p50"
        );
    }
}
