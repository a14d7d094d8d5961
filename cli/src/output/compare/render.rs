//! The comparison as text: the files and their hosts, one table (rows: the
//! row key and a metric; columns: the compared values, each but the
//! baseline with its ratio to it), then the notable changes, the warnings
//! and the notes.
use super::{Comparison, Dimension, Judged, Row, DEFAULT_COUNT_TOLERANCE};
use ipivmm::results::metrics::Metric;
use ipivmm::stats::{self, Verdict};

use crate::output::{paint, Tint};
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use std::fmt::Write;

pub(super) fn column_header(c: &Comparison, i: usize) -> String {
    match c.by {
        Dimension::File => format!("[{}]", i + 1),
        Dimension::Vcpus => format!("N={}", c.columns[i]),
        _ => c.columns[i].clone(),
    }
}

/// The row key as table cells: workload, then vCPUs, mode and file where
/// they are not the columns.
fn key_cells(c: &Comparison, r: &Row) -> Vec<String> {
    let mut cells = vec![r.key.workload.clone()];
    if let Some(n) = r.key.vcpus {
        cells.push(n.to_string());
    }
    if let Some(m) = &r.key.mode {
        cells.push(m.clone());
    }
    if let Some(f) = &r.key.file {
        let i = c.files.iter().position(|(n, _)| n == f).unwrap_or(0);
        cells.push(format!("[{}]", i + 1));
    }
    cells
}

fn key_headers(c: &Comparison) -> Vec<String> {
    let mut h = vec!["workload".to_string()];
    if c.by != Dimension::Vcpus {
        h.push("vCPUs".into());
    }
    if c.by != Dimension::Mode {
        // Where a part of it is the columns, `*` stands for that part.
        h.push("mode".into());
    }
    if c.rows.iter().any(|r| r.key.file.is_some()) {
        h.push("file".into());
    }
    h
}

/// The comparison as text, coloured when `color`; ratios at or beyond
/// `1 ± threshold` are marked ▲ (higher) / ▼ (lower) and listed.
pub fn render(c: &Comparison, threshold: f64, color: bool) -> String {
    let mut out = String::new();
    for (i, (name, host)) in c.files.iter().enumerate() {
        let base = if c.by == Dimension::File && i == 0 {
            " (baseline)"
        } else {
            ""
        };
        let _ = writeln!(out, "[{}] {name}{base}: {host}", i + 1);
    }
    if c.by != Dimension::File {
        if let Some(b) = c.columns.first() {
            let _ = writeln!(out, "columns: one per {}, baseline {b}", c.by);
        }
    }
    if !c.incomplete.is_empty() {
        // Before the table: its 'incomplete' cells are not measurements.
        let _ = writeln!(
            out,
            "{}",
            paint(
                &format!(
                    "not compared: {} run{} that did not complete (cells 'incomplete', in no ratio): {}",
                    c.incomplete.len(),
                    if c.incomplete.len() == 1 { "" } else { "s" },
                    c.incomplete.join("; ")
                ),
                Tint::Yellow,
                color
            )
        );
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    let mut header = key_headers(c);
    let fixed = header.len() + 1;
    header.push("metric".into());
    header.extend((0..c.columns.len()).map(|i| column_header(c, i)));
    t.set_header(header);
    let mut notable = Vec::new();
    for r in &c.rows {
        for &m in r.metrics() {
            let values: Vec<Option<f64>> = (0..r.cells.len()).map(|i| r.value(m, i)).collect();
            if values.iter().all(Option::is_none) {
                continue;
            }
            let mut row = key_cells(c, r);
            row.push(m.name(r.operation()));
            for (i, v) in values.iter().enumerate() {
                if r.cells[i].is_some() && r.measured(i).is_none() {
                    row.push("incomplete".into());
                    continue;
                }
                let Some(v) = v else {
                    row.push(match (&r.cells[i], &r.skipped[i]) {
                        (Some(_), _) => "-".into(),
                        (None, Some(_)) => "skipped".into(),
                        (None, None) => "missing".into(),
                    });
                    continue;
                };
                let mut cell = m.format(*v);
                let each = r.values(m, i);
                if each.len() > 1 && !m.is_count() {
                    // The median's interval over repeats, as ± of the median.
                    if let Some(h) = stats::median_interval(&each, stats::CONFIDENCE)
                        .and_then(|iv| iv.relative_half_width(*v))
                    {
                        let _ = write!(cell, " ±{:.0}%", h * 100.0);
                    }
                }
                if i > 0 {
                    if let (Some(q), Some(j)) = (
                        r.ratio(m, i),
                        r.judge(m, i, threshold, DEFAULT_COUNT_TOLERANCE),
                    ) {
                        let (mark, tint) = mark(&j, m, threshold);
                        let _ = write!(cell, " ×{q:.2}");
                        if let Some(mark) = mark {
                            cell.push(' ');
                            cell.push_str(mark);
                        }
                        if let Some(tint) = tint {
                            notable.push((
                                format!(
                                    "{} {}: {} against {}: {}",
                                    r.key,
                                    m.name(r.operation()),
                                    column_header(c, i),
                                    column_header(c, 0),
                                    j.line()
                                ),
                                tint,
                            ));
                        }
                    }
                }
                row.push(cell);
            }
            t.add_row(row);
        }
    }
    for col in fixed..(fixed + c.columns.len()) {
        if let Some(col) = t.column_mut(col) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    let _ = writeln!(out, "{t}");
    let _ = writeln!(
        out,
        "×r: ratio of medians over repeats to {}; ±: the 95% interval of a median over repeats. \
         ▲ slower / ▼ faster: significant (rank test, p < 0.05) and by {:.0}% or more; \
         ≈ significant but smaller; = no significant difference; ? inconclusive (too few repeats or too noisy: not a pass). \
         Counts (exits, ICR-write exits per IPI): ▲ ▼ beyond {:.0}%. \
         An operation is what one sample times (a round trip, a broadcast...); IPI = one delivered IPI",
        column_header(c, 0),
        threshold * 100.0,
        DEFAULT_COUNT_TOLERANCE * 100.0
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
    for n in &c.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// The mark of a judged cell and, for a notable one, its tint: ▲/▼ for a
/// significant change beyond the threshold (counts: beyond their
/// tolerance), ≈ significant but smaller, = no significant difference,
/// ? inconclusive. Figures where higher is neither better nor worse get
/// no tint.
fn mark(j: &Judged, m: Metric, threshold: f64) -> (Option<&'static str>, Option<Tint>) {
    let tint = |up: bool| {
        m.higher_is_worse()
            .then_some(if up { Tint::Red } else { Tint::Green })
    };
    match j {
        Judged::Figure(f) => match f.verdict {
            Verdict::Slower if f.ratio >= 1.0 + threshold => (Some("▲"), tint(true)),
            Verdict::Faster if f.ratio <= 1.0 / (1.0 + threshold) => (Some("▼"), tint(false)),
            Verdict::Slower | Verdict::Faster => (Some("≈"), None),
            Verdict::NoSignificantDifference => (Some("="), None),
            Verdict::Inconclusive => (Some("?"), None),
        },
        Judged::Count {
            regression: true, ..
        } => (Some("▲"), tint(true)),
        Judged::Count {
            ratio, exact: true, ..
        } if *ratio < 1.0 / (1.0 + DEFAULT_COUNT_TOLERANCE) => (Some("▼"), tint(false)),
        Judged::Count {
            inconclusive: None, ..
        } => (None, None),
        Judged::Count { .. } => (Some("?"), None),
    }
}
