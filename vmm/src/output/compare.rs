//! Side-by-side comparison of recorded results (different hosts, kernels,
//! dates): the first document is the baseline, every other one gets ratios
//! against it; modes or workloads missing on one side are flagged.
use super::summary::{summarize, GroupKey, RunSummary};
use super::{human, paint, Tint};
use crate::results::Document;
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use std::fmt::Write;

/// A figure compared between documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Median cycles per IPI.
    P50Cycles,
    /// 99th-percentile cycles per IPI.
    P99Cycles,
    /// Median ns per IPI.
    P50Ns,
    /// VM exits (all vCPUs) per IPI.
    ExitsPerIpi,
    /// ICR-write exits per IPI.
    IcrExitsPerIpi,
}

impl Metric {
    /// Every metric, in table order.
    pub const ALL: [Metric; 5] = [
        Metric::P50Cycles,
        Metric::P99Cycles,
        Metric::P50Ns,
        Metric::ExitsPerIpi,
        Metric::IcrExitsPerIpi,
    ];

    /// Name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Metric::P50Cycles => "cycles/IPI p50",
            Metric::P99Cycles => "cycles/IPI p99",
            Metric::P50Ns => "µs/IPI p50",
            Metric::ExitsPerIpi => "exits/IPI",
            Metric::IcrExitsPerIpi => "ICR-write exits/IPI",
        }
    }

    /// The figure of a run, when known.
    pub fn value(self, s: &RunSummary) -> Option<f64> {
        match self {
            Metric::P50Cycles => s.latency.as_ref().map(|l| l.p50),
            Metric::P99Cycles => s.latency.as_ref().map(|l| l.p99),
            Metric::P50Ns => s.latency.as_ref().and_then(|l| l.p50_ns),
            Metric::ExitsPerIpi => s.exits_per_ipi(),
            Metric::IcrExitsPerIpi => s.icr_exits_per_ipi(),
        }
    }

    fn format(self, v: f64) -> String {
        match self {
            Metric::P50Cycles | Metric::P99Cycles => human(v),
            Metric::P50Ns => format!("{:.2}", v / 1e3),
            Metric::ExitsPerIpi | Metric::IcrExitsPerIpi => format!("{v:.2}"),
        }
    }
}

/// One (workload group, mode) row: the run of each document, if it has one.
#[derive(Clone, Debug)]
pub struct Row {
    /// Workload group.
    pub group: GroupKey,
    /// Mode label (with "#n" for the n-th repeat of a mode in one document).
    pub mode: String,
    /// Per document, in input order.
    pub cells: Vec<Option<RunSummary>>,
}

impl Row {
    /// `metric` of document `side` divided by the baseline's (document 0).
    pub fn ratio(&self, metric: Metric, side: usize) -> Option<f64> {
        let base = metric.value(self.cells.first()?.as_ref()?)?;
        let v = metric.value(self.cells.get(side)?.as_ref()?)?;
        (base > 0.0).then(|| v / base)
    }
}

/// The comparison of several documents.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Document names (file names), baseline first.
    pub names: Vec<String>,
    /// One line per document describing its host.
    pub hosts: Vec<String>,
    /// Rows in order of first appearance.
    pub rows: Vec<Row>,
    /// What is missing or did not complete, one line each.
    pub flags: Vec<String>,
}

fn host_line(d: &Document) -> String {
    let mut s = match &d.host {
        Some(h) => format!(
            "{} ({}), kernel {}, backend {}",
            h.cpu_model, h.cpu_vendor, h.kernel_release, h.backend
        ),
        None => format!(
            "host unknown ({})",
            d.host_error.as_deref().unwrap_or("not recorded")
        ),
    };
    let _ = write!(s, ", ipivmm {}", d.ipivmm_version);
    if let Some(t) = d.recorded_at {
        let _ = write!(s, ", recorded at {t} (Unix time)");
    }
    s
}

/// Compares `docs` (name, document); the first is the baseline.
pub fn compare(docs: &[(String, Document)]) -> Comparison {
    let n = docs.len();
    let mut rows: Vec<Row> = Vec::new();
    let mut flags = Vec::new();
    for (side, (name, d)) in docs.iter().enumerate() {
        let mut seen: Vec<(GroupKey, String)> = Vec::new();
        for run in &d.runs {
            let s = summarize(run);
            let base = s.mode.clone();
            let repeat = seen
                .iter()
                .filter(|(g, m)| *g == s.group && *m == base)
                .count();
            seen.push((s.group.clone(), base.clone()));
            let mode = if repeat == 0 {
                base
            } else {
                format!("{base} #{}", repeat + 1)
            };
            if !s.completed {
                flags.push(format!("{} / {mode}: did not complete in {name}", s.group));
            }
            let i = match rows
                .iter()
                .position(|r| r.group == s.group && r.mode == mode)
            {
                Some(i) => i,
                None => {
                    rows.push(Row {
                        group: s.group.clone(),
                        mode,
                        cells: vec![None; n],
                    });
                    rows.len() - 1
                }
            };
            rows[i].cells[side] = Some(s);
        }
    }
    // Whole groups missing on a side are flagged once; otherwise per mode.
    let mut groups: Vec<&GroupKey> = Vec::new();
    for r in &rows {
        if !groups.contains(&&r.group) {
            groups.push(&r.group);
        }
    }
    for g in groups {
        let in_group: Vec<&Row> = rows.iter().filter(|r| &r.group == g).collect();
        for (side, (name, _)) in docs.iter().enumerate() {
            if in_group.iter().all(|r| r.cells[side].is_none()) {
                flags.push(format!("workload {g}: missing in {name}"));
                continue;
            }
            for r in in_group.iter().filter(|r| r.cells[side].is_none()) {
                flags.push(format!("{g} / {}: mode missing in {name}", r.mode));
            }
        }
    }
    Comparison {
        names: docs.iter().map(|(n, _)| n.clone()).collect(),
        hosts: docs.iter().map(|(_, d)| host_line(d)).collect(),
        rows,
        flags,
    }
}

/// The comparison as text: the documents, one table (rows: workload, mode,
/// metric; columns: each document and its ratio to the baseline), then the
/// notable changes (ratio beyond `1 ± threshold`) and the flags, coloured
/// when `color`.
pub fn render(c: &Comparison, threshold: f64, color: bool) -> String {
    let mut out = String::new();
    for (i, (name, host)) in c.names.iter().zip(&c.hosts).enumerate() {
        let base = if i == 0 { " (baseline)" } else { "" };
        let _ = writeln!(out, "[{}] {name}{base}: {host}", i + 1);
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    let mut header = vec![
        "workload".to_string(),
        "mode".to_string(),
        "metric".to_string(),
    ];
    for i in 0..c.names.len() {
        header.push(format!("[{}]", i + 1));
        if i > 0 {
            header.push(format!("[{}]/[1]", i + 1));
        }
    }
    t.set_header(header);
    let mut notable = Vec::new();
    for r in &c.rows {
        for m in Metric::ALL {
            let values: Vec<Option<f64>> = r
                .cells
                .iter()
                .map(|s| s.as_ref().and_then(|s| m.value(s)))
                .collect();
            if values.iter().all(Option::is_none) {
                continue;
            }
            let mut row = vec![r.group.to_string(), r.mode.clone(), m.name().to_string()];
            for (i, v) in values.iter().enumerate() {
                row.push(match (v, &r.cells[i]) {
                    (Some(v), _) => m.format(*v),
                    (None, None) => "missing".into(),
                    (None, Some(_)) => "-".into(),
                });
                if i > 0 {
                    row.push(match r.ratio(m, i) {
                        Some(q) if q >= 1.0 + threshold => {
                            notable.push((
                                format!(
                                    "{} / {} {}: [{}] is {q:.2}x [1]",
                                    r.group,
                                    r.mode,
                                    m.name(),
                                    i + 1
                                ),
                                Tint::Red,
                            ));
                            format!("{q:.2} ▲")
                        }
                        Some(q) if q <= 1.0 / (1.0 + threshold) => {
                            notable.push((
                                format!(
                                    "{} / {} {}: [{}] is {q:.2}x [1]",
                                    r.group,
                                    r.mode,
                                    m.name(),
                                    i + 1
                                ),
                                Tint::Green,
                            ));
                            format!("{q:.2} ▼")
                        }
                        Some(q) => format!("{q:.2}"),
                        None => "-".into(),
                    });
                }
            }
            t.add_row(row);
        }
    }
    for col in 3..(3 + 2 * c.names.len()) {
        if let Some(col) = t.column_mut(col) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{t}");
    let _ = writeln!(
        out,
        "ratios: [n]/[1]; ▲ = higher by {:.0}% or more (slower, more exits), ▼ = lower",
        threshold * 100.0
    );
    for (line, tint) in notable {
        let _ = writeln!(out, "{}", paint(&line, tint, color));
    }
    for f in &c.flags {
        let _ = writeln!(
            out,
            "{}",
            paint(&format!("warning: {f}"), Tint::Yellow, color)
        );
    }
    out
}
