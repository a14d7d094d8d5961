//! The comparison as text, every line within 120 columns: the files and
//! their hosts; per configuration (row), a table of its figures by column
//! (the medians over repeats, each column but the baseline with its ratio
//! and the gate's mark); the legend; then, per gated figure that is not a
//! pass, its decision with the interval and test it rests on; caveats,
//! warnings and notes.
use super::{Comparison, GateReport};
use crate::output::fit::wrap;
use crate::output::style::{paint, Tint};
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, ContentArrangement, Table};
use ipivmm_analysis::compare::Row;
use ipivmm_analysis::gate::{Decision, Judged, Scale};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::stats;
use std::fmt::Write;

/// The gate's mark of an outcome.
fn mark(o: &Decision) -> &'static str {
    match o {
        Decision::Regressed => "▲",
        Decision::Equivalent => "=",
        Decision::NotSlower => "≤",
        Decision::Undecided { .. } => "?",
        Decision::Failed { .. } => "✗",
    }
}

fn tint(o: &Decision) -> Option<Tint> {
    match o {
        Decision::Regressed | Decision::Failed { .. } => Some(Tint::Red),
        Decision::Undecided { .. } => Some(Tint::Yellow),
        _ => None,
    }
}

/// An interval's coverage as a percentage with the digits that tell it
/// apart from 100% (a live look decides at levels near 10⁻⁴: 99.98%).
fn coverage(c: f64) -> String {
    let missing = (1.0 - c).max(1e-9);
    // 1 − c = 2·10⁻⁴ needs 2 decimals of a percentage: ⌈−log₁₀⌉ − 2.
    let digits = ((-missing.log10() - 1e-6).ceil() - 2.0).clamp(1.0, 6.0) as usize;
    format!("{:.*}%", digits, c * 100.0)
}

/// One decision in one line (wrapped by the caller): the estimate with
/// its interval and coverage, the test and repeats, the outcome and why.
pub fn outcome_line(j: &Judged) -> String {
    let mut s = String::new();
    if let Some(t) = &j.test {
        let show = |v: f64| match t.scale {
            Scale::Ratio => format!("×{:.3}", v.exp()),
            Scale::Count => format!("{v:+.3}"),
        };
        let _ = write!(
            s,
            "{} [{}, {}] ({}), {}, p(slower) {:.3}, {} vs {} {}: ",
            show(t.estimate),
            show(t.lo),
            show(t.hi),
            coverage(t.coverage),
            t.method.name(),
            t.p_slower,
            t.n.0,
            t.n.1,
            match t.method {
                ipivmm_analysis::gate::Method::SignedRank => "rounds",
                ipivmm_analysis::gate::Method::Recordings => "recordings",
                _ => "repeats",
            }
        );
    }
    s.push_str(j.outcome.word());
    match &j.outcome {
        Decision::Undecided { why, needs } => {
            let _ = write!(s, " ({why}");
            match needs {
                Some(n) => {
                    let _ = write!(s, "; about {n} a side would decide it");
                }
                None => s.push_str("; no number of repeats is sure to decide it"),
            }
            s.push(')');
        }
        Decision::Failed { why } => {
            let _ = write!(s, " ({why})");
        }
        _ => {}
    }
    s
}

fn tinted(text: &str, tint: Option<Tint>, color: bool) -> String {
    match tint {
        Some(t) => paint(text, t, color),
        None => text.to_string(),
    }
}

fn figure_cell(r: &Row, m: Metric, col: usize) -> Option<String> {
    let v: Vec<f64> = r.summaries(col).filter_map(|s| m.value(s)).collect();
    let med = stats::median(&v)?;
    Some(m.format(med))
}

/// The gate's decisions that are not passes (and any with notes), one
/// line each: what `compare --fail-on-regression` says on stderr.
pub fn decisions(c: &Comparison, gate: &GateReport) -> Vec<(String, Option<Tint>)> {
    let mut out = Vec::new();
    for (e, j) in gate.endpoints.iter().zip(&gate.family.judged) {
        if j.outcome.passes() && e.notes.is_empty() {
            continue;
        }
        let r = &c.rows[e.row];
        let mut line = format!(
            "{}: {}, {} against {}: {}",
            c.row_label(r),
            e.metric.name(r.operation()),
            c.column_header(e.column),
            c.column_header(0),
            outcome_line(j)
        );
        for n in &e.notes {
            line.push_str(&format!("\n    note: {n}"));
        }
        out.push((line, tint(&j.outcome)));
    }
    out.extend(lever_notes(c).into_iter().map(|l| (l, Some(Tint::Yellow))));
    out
}

/// One line per row and column whose runs show a lever that did not act
/// on what it controls ([`ipivmm_analysis::results::lever_effect`]): halt polling
/// on with no poll attempted, say, so that "equivalent" beside it is not
/// read as "halt polling makes no difference".
pub fn lever_notes(c: &Comparison) -> Vec<String> {
    let mut out = Vec::new();
    for r in &c.rows {
        for i in 0..c.columns.len() {
            let polling: Vec<_> = r.summaries(i).filter_map(|s| s.halt_polling).collect();
            if let Some(n) = ipivmm_analysis::results::lever_effect::HaltPolling::note(&polling) {
                out.push(format!("{}, {}: {n}", c.row_label(r), c.column_header(i)));
            }
        }
    }
    out
}

/// [`lever_notes`] for `compare --run`'s rounds: each run's side (0 the
/// baseline A, 1 the new side B) and headline figures.
pub fn live_lever_notes(runs: &[ipivmm::experiment::interleaved::Kept]) -> Vec<String> {
    (0..2)
        .filter_map(|arm| {
            let polling: Vec<_> = runs
                .iter()
                .filter(|k| k.arm == arm && k.summary.completed)
                .filter_map(|k| k.summary.halt_polling)
                .collect();
            let n = ipivmm_analysis::results::lever_effect::HaltPolling::note(&polling)?;
            Some(format!("{}: {n}", ["A", "B"][arm]))
        })
        .collect()
}

/// The comparison as text, coloured when `color`, with the gate's
/// decisions (`gate`) marked in the tables; below them, the decisions
/// that are not passes unless `decisions_apart` (the caller prints them
/// itself: `--fail-on-regression` puts them on stderr).
pub fn render(c: &Comparison, gate: &GateReport, color: bool, decisions_apart: bool) -> String {
    let mut out = String::new();
    for (i, (name, host)) in c.files.iter().enumerate() {
        let base = if c.columns.first().is_some_and(|b| b.files.contains(&i)) {
            " (baseline)"
        } else {
            ""
        };
        let at = c.recorded_at[i].map_or_else(String::new, |t| {
            format!(", recorded at {}", crate::output::style::iso_time(t))
        });
        let _ = writeln!(out, "[{}] {name}{base}: {host}{at}", i + 1);
    }
    if c.by != ipivmm_analysis::compare::Dimension::File {
        if let Some(b) = c.columns.first() {
            let _ = writeln!(out, "columns: one per {}, baseline {}", c.by, b.name);
        }
    }
    let failed = c.not_completed();
    if !failed.is_empty() {
        // Before the tables: their 'incomplete' cells are not measurements.
        let line = format!(
            "not compared: {} run{} that did not complete (cells 'incomplete', in no ratio): {}",
            failed.len(),
            if failed.len() == 1 { "" } else { "s" },
            failed.join("; ")
        );
        let _ = writeln!(out, "{}", paint(&line, Tint::Yellow, color));
    }
    for (ri, r) in c.rows.iter().enumerate() {
        let _ = writeln!(out, "{}", c.row_label(r));
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_content_arrangement(ContentArrangement::Dynamic);
        t.set_width(118);
        let mut header = vec!["figure".to_string()];
        header.extend((0..c.columns.len()).map(|i| {
            let n = r.cells[i].completed().count();
            format!("{} (n={n})", c.column_header(i))
        }));
        t.set_header(header);
        let ipis = (0..c.columns.len())
            .flat_map(|i| r.summaries(i))
            .filter_map(|s| s.ipis_per_operation());
        for &m in Metric::shown(ipis) {
            let cells: Vec<Option<String>> =
                (0..c.columns.len()).map(|i| figure_cell(r, m, i)).collect();
            if cells.iter().all(Option::is_none) {
                continue;
            }
            let mut row = vec![m.name(r.operation())];
            for (i, cell) in cells.into_iter().enumerate() {
                let mut text = cell.unwrap_or_else(|| {
                    let cell = &r.cells[i];
                    match (cell.runs.is_empty(), &cell.skipped) {
                        (false, _) if cell.completed().next().is_none() => "incomplete".into(),
                        (false, _) => "-".into(),
                        (true, Some(_)) => "skipped".into(),
                        (true, None) => "missing".into(),
                    }
                });
                if i > 0 {
                    let judged = gate
                        .endpoints
                        .iter()
                        .zip(&gate.family.judged)
                        .find(|(e, _)| e.row == ri && e.column == i && e.metric == m);
                    let base: Vec<f64> = r.summaries(0).filter_map(|s| m.value(s)).collect();
                    let new: Vec<f64> = r.summaries(i).filter_map(|s| m.value(s)).collect();
                    if let (Some(b), Some(n)) = (stats::median(&base), stats::median(&new)) {
                        if b > 0.0 {
                            let _ = write!(text, " ×{:.2}", n / b);
                        }
                    }
                    if let Some((_, j)) = judged {
                        text.push(' ');
                        text.push_str(&tinted(mark(&j.outcome), tint(&j.outcome), color));
                    }
                }
                row.push(text);
            }
            t.add_row(row);
        }
        for i in 1..=c.columns.len() {
            if let Some(col) = t.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        let _ = writeln!(out, "{t}");
    }
    let legend = format!(
        "Cells: the median over a column's completed repeats (n); ×r: its ratio to the baseline {}. \
         The gate (docs/statistics.md) marks the figures it judges: ▲ regressed (slower, significant \
         after Holm's correction, and by {:.0}% or more), = equivalent (the 90% interval within ±{:.0}%), \
         ≤ not slower by {:.0}%, ? undecided (not enough data to tell: not a pass), ✗ failed. \
         Counts are judged as differences within {:.0}% of the baseline or of one count. \
         An operation is what one sample times (a round trip, a broadcast...); IPI = one delivered IPI.",
        c.column_header(0),
        gate.policy.threshold * 100.0,
        gate.policy.threshold * 100.0,
        gate.policy.threshold * 100.0,
        gate.policy.count_tolerance * 100.0,
    );
    let _ = writeln!(out, "{legend}");
    if !decisions_apart {
        for (line, t) in decisions(c, gate) {
            let _ = writeln!(out, "{}", tinted(&line, t, color));
        }
    }
    for cav in &gate.caveats {
        let _ = writeln!(
            out,
            "{}",
            paint(&format!("caveat: {cav}"), Tint::Yellow, color)
        );
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
    wrap(&out)
}

#[cfg(test)]
mod coverage_tests {
    #[test]
    fn coverage_shows_the_digits_that_differ_from_100() {
        assert_eq!(super::coverage(0.90), "90.0%");
        assert_eq!(super::coverage(0.95), "95.0%");
        assert_eq!(super::coverage(0.9998), "99.98%");
        assert_eq!(super::coverage(0.99999), "99.999%");
    }
}
