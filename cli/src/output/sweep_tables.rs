//! The text report of a sweep: one table per workload, a row per
//! configuration with the median over its repeats and the half-width of
//! its interval (`--wide` adds a row per repeat under it), its figures
//! named after the workload's operation (cycles per broadcast, per round
//! trip...) and per delivered IPI ([`Metric::shown`]); a scale table per
//! workload swept over several vCPU counts (a row per mode and metric, a
//! column per N, medians); the skipped combinations grouped by reason, and
//! a summary line.
use crate::output::fit::{Col, FitTable, Layout};
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use ipivmm_analysis::results::identity::{ConfigId, Field};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::repeats::ConfigurationStats;
use ipivmm_analysis::results::summary::RunSummary;
use ipivmm_analysis::results::{Document, PresetReport, RunReport, RunStatus, SkippedMode};
use std::time::Duration;

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn right_align(t: &mut Table, from: usize, to: usize) {
    for c in from..to {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// The runs of `doc`, summarized, grouped by workload in order of first appearance.
fn by_workload(doc: &Document) -> Vec<(String, Vec<(&RunReport, RunSummary)>)> {
    let mut groups: Vec<(String, Vec<(&RunReport, RunSummary)>)> = Vec::new();
    for r in &doc.runs {
        let w = r.mode.workload_label();
        let s = r.summary();
        match groups.iter_mut().find(|(g, _)| *g == w) {
            Some((_, v)) => v.push((r, s)),
            None => groups.push((w, vec![(r, s)])),
        }
    }
    groups
}

fn metrics_of(runs: &[(&RunReport, RunSummary)]) -> &'static [Metric] {
    Metric::shown(runs.iter().filter_map(|(_, s)| s.ipis_per_operation()))
}

/// What a preset asks and what this host can answer, printed before its
/// runs (and kept in the JSON's `preset` object): the question, the seed,
/// the host's caveats, one line per row.
pub fn preset_text(p: &PresetReport) -> String {
    let mut out = format!(
        "preset {}: {}
  {}
",
        p.preset, p.question, p.seed
    );
    if p.host.is_empty() {
        out.push_str(
            "  this host can answer it
",
        );
    }
    for c in &p.host {
        out.push_str(&format!(
            "  this host: {c}
"
        ));
    }
    for r in &p.rows {
        let what = match (&r.caveat, r.runs) {
            (None, _) => "answers".to_string(),
            (Some(c), true) => format!("runs, but {c}"),
            (Some(c), false) => format!("skipped: {c}"),
        };
        out.push_str(&format!("  {}: {what}\n", r.row));
    }
    out
}

/// The sweep as text (see the module doc), fitted to 120 columns;
/// `wall` is the sweep's duration.
pub fn render(doc: &Document, wall: Duration) -> String {
    render_with(doc, wall, Layout::Fit)
}

/// The sweep as text laid out by `layout` (`--wide`: every column). The
/// preset's question and caveats are not repeated: the command prints them
/// before the runs ([`preset_text`]).
pub fn render_with(doc: &Document, wall: Duration, layout: Layout) -> String {
    let mut out = String::new();
    for (w, runs) in by_workload(doc) {
        let op = runs.first().map_or("op", |(_, s)| s.operation);
        let metrics = metrics_of(&runs);
        let mut cols = vec![
            Col::key("mode"),
            Col::figure("vCPUs", 8),
            // APICv on or off is what a preset row varies: it stays.
            Col::figure("APICv", 8).left(),
            Col::key("repeats"),
        ];
        cols.extend(metrics.iter().map(|m| Col::figure(m.name(op), m.rank())));
        cols.push(Col::figure("IPIs/s", 1));
        let mut t = FitTable::new(cols);
        let mut repeated = false;
        let mut checks = Vec::new();
        for c in configurations_of(doc, &runs) {
            let members: Vec<&(&RunReport, RunSummary)> = runs
                .iter()
                .filter(|(r, _)| c.runs.iter().any(|&i| std::ptr::eq(*r, &doc.runs[i])))
                .collect();
            checks.push((c.label.clone(), members.clone()));
            t.add_row(configuration_row(c, &members, metrics));
            repeated |= members.len() > 1;
            // Each repeat under its configuration, with --wide.
            if layout == Layout::Wide && members.len() > 1 {
                for (r, s) in &members {
                    let mut cells = row(r, s, metrics);
                    cells[0] = format!("  repeat {}", r.repeat.map_or(1, |i| i + 1));
                    t.add_row(cells);
                }
            }
        }
        out.push_str(&format!("\n{w}\n{}\n", t.render(layout)));
        if repeated {
            out.push_str(&format!(
                "  (a row per configuration: the median over its repeats, ±: half the width of its interval{})\n",
                match layout {
                    Layout::Fit => "; --wide adds each repeat, the CSV has every run",
                    Layout::Wide => "",
                }
            ));
        }
        out.push_str(&scale_table(&w, op, &runs, doc));
        out.push_str(&lever_lines(doc, &runs));
        out.push_str(&crate::output::guest_cal::lines(&checks));
    }
    if let Some((r, o)) = doc
        .runs
        .iter()
        .find_map(|r| Some((r, r.observer_effect.as_ref()?)))
    {
        out.push_str(&format!("\n{}, measured on {}\n", o.text(), r.label()));
    }
    out.push_str(&skipped_text(&doc.skipped));
    let failed = doc.runs.iter().filter(|r| !r.succeeded()).count();
    let what = doc
        .preset
        .as_ref()
        .map_or(String::new(), |p| format!(" (preset {})", p.preset));
    out.push_str(&format!(
        "\nsweep{what}: {} runs ({} failed), {} skipped, {:.1} s\n",
        doc.runs.len(),
        failed,
        doc.skipped.len(),
        wall.as_secs_f64()
    ));
    match layout {
        Layout::Fit => crate::output::fit::wrap(&out),
        Layout::Wide => out,
    }
}

/// Under one workload's table: KVM's halt-polling counters per row where
/// its rows differ in the halt-polling limit (the `halt-polling` preset),
/// and every lever that did not act on what it controls
/// ([`ipivmm_analysis::results::lever_effect`]).
fn lever_lines(doc: &Document, runs: &[(&RunReport, RunSummary)]) -> String {
    let configs = configurations_of(doc, runs);
    let limits: std::collections::BTreeSet<Option<u32>> =
        configs.iter().map(|c| c.id.levers.halt_poll_ns).collect();
    let mut out = String::new();
    if limits.len() > 1 {
        out.push_str(
            "  halt polling per row (KVM stats of the measured phase, all vCPUs, the completed repeats added):\n",
        );
        for c in &configs {
            let total = c
                .runs
                .iter()
                .filter_map(|&i| runs.iter().find(|(r, _)| std::ptr::eq(*r, &doc.runs[i])))
                .filter(|(r, _)| r.succeeded())
                .filter_map(|(_, s)| s.halt_polling)
                .reduce(|a, b| a.plus(&b));
            let counts = total.map_or("no KVM halt-polling stats".into(), |h| h.counts_line());
            // The host's limit is the row without a `poll:` in its label.
            let host = if c.id.levers.halt_poll_ns.is_none() {
                " poll:host"
            } else {
                ""
            };
            out.push_str(&format!("    {}{host}: {counts}\n", c.label));
        }
    }
    for c in &configs {
        for l in &c.levers {
            out.push_str(&format!("  {}: {l}\n", c.label));
        }
    }
    out
}

/// The configurations of `doc` whose runs are among `runs` (one workload),
/// in order of first appearance.
fn configurations_of<'a>(
    doc: &'a Document,
    runs: &[(&RunReport, RunSummary)],
) -> Vec<&'a ConfigurationStats> {
    doc.configurations
        .iter()
        .filter(|c| {
            c.runs
                .first()
                .is_some_and(|&i| runs.iter().any(|(r, _)| std::ptr::eq(*r, &doc.runs[i])))
        })
        .collect()
}

/// A figure over repeats: the median, `±x%` (half the width of its
/// interval over repeats, relative to the median) where it has one.
fn figure_cell(m: Metric, c: &ConfigurationStats) -> String {
    if let Some(f) = c.figures.get(m.key()) {
        let mut cell = m.format(f.median);
        if let Some(h) = f
            .interval
            .as_ref()
            .and_then(|i| i.relative_half_width(f.median))
        {
            cell.push_str(&format!(" ±{:.0}%", h * 100.0));
        }
        return cell;
    }
    match c.counts.get(m.key()) {
        Some(n) if n.exact => m.format(n.median),
        Some(n) => format!("{}–{}", m.format(n.min), m.format(n.max)),
        None => "-".into(),
    }
}

/// The row of configuration `c` (its runs `members`): how its repeats
/// ended and its figures over them.
fn configuration_row(
    c: &ConfigurationStats,
    members: &[&(&RunReport, RunSummary)],
    metrics: &[Metric],
) -> Vec<String> {
    let Some((first, _)) = members.first() else {
        return Vec::new();
    };
    let mut ended: Vec<(&str, usize)> = Vec::new();
    for (r, _) in members {
        let name = status_name(&r.status);
        match ended.iter_mut().find(|(n, _)| *n == name) {
            Some((_, k)) => *k += 1,
            None => ended.push((name, 1)),
        }
    }
    let status: Vec<String> = ended.iter().map(|(n, k)| format!("{k} {n}")).collect();
    let mut cells = vec![
        first.label(),
        first.mode.vcpus.to_string(),
        first.apicv.effective.to_string(),
        status.join(", "),
    ];
    cells.extend(metrics.iter().map(|&m| figure_cell(m, c)));
    let rates: Vec<f64> = members
        .iter()
        .filter(|(r, _)| r.succeeded())
        .filter_map(|(r, s)| ipis_per_sec(r, s.ipis_delivered, r.measured_phase()))
        .collect();
    cells.push(fmt_opt(ipivmm_analysis::stats::median(&rates), 0));
    cells
}

fn status_name(status: &RunStatus) -> &'static str {
    match status {
        RunStatus::Completed => "ok",
        RunStatus::Cancelled => "cancelled",
        RunStatus::Failed { .. } => "FAILED",
        RunStatus::TimedOut { .. } => "TIMEOUT",
        RunStatus::OverBudget { .. } => "OVER BUDGET",
    }
}

fn row(r: &RunReport, s: &RunSummary, metrics: &[Metric]) -> Vec<String> {
    let rate = ipis_per_sec(r, s.ipis_delivered, r.measured_phase());
    let status = status_name(&r.status);
    // A run that did not complete shows the figures of the phase it got
    // to (a timeout in the measured phase shows the warm-up's): say which.
    let status = match (&r.status, &s.phase) {
        (RunStatus::Completed, _) | (_, None) => status.to_string(),
        (_, Some(p)) => format!("{status} (figures: '{p}')"),
    };
    let mut cells = vec![
        r.label(),
        r.mode.vcpus.to_string(),
        r.apicv.effective.to_string(),
        status,
    ];
    cells.extend(
        metrics
            .iter()
            .map(|m| m.value(s).map_or("-".into(), |v| m.format(v))),
    );
    cells.push(fmt_opt(rate, 0));
    cells
}

/// With runs at two or more vCPU counts: a row per (mode, metric), a column
/// per vCPU count (the median over the repeats), so a figure's growth with
/// N reads across.
fn scale_table(
    workload: &str,
    op: &str,
    runs: &[(&RunReport, RunSummary)],
    doc: &Document,
) -> String {
    let mut counts: Vec<usize> = runs.iter().map(|(r, _)| r.mode.vcpus).collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.len() < 2 {
        return String::new();
    }
    // A row per configuration but for its vCPU count (joined by identity;
    // the mode label only names the row).
    let mut modes: Vec<(ConfigId, &str)> = Vec::new();
    for (_, s) in runs {
        let row = s.id.without(&[Field::Vcpus]);
        if !modes.iter().any(|(m, _)| *m == row) {
            modes.push((row, &s.mode));
        }
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    let mut header = vec!["mode".to_string(), "metric".to_string()];
    header.extend(counts.iter().map(|n| format!("N={n}")));
    t.set_header(header);
    let metrics = Metric::scale(metrics_of(runs));
    for (row, mode) in &modes {
        for &m in metrics {
            let mut cells = vec![mode.to_string(), m.name(op)];
            for n in &counts {
                let c = configurations_of(doc, runs)
                    .into_iter()
                    .find(|c| c.vcpus == *n && c.id.without(&[Field::Vcpus]) == *row);
                cells.push(match c {
                    None => "not run".into(),
                    Some(c) => {
                        let f = c.figures.get(m.key()).map(|f| f.median);
                        f.or_else(|| c.counts.get(m.key()).map(|n| n.median))
                            .map_or("-".into(), |v| m.format(v))
                    }
                });
            }
            t.add_row(cells);
        }
    }
    right_align(&mut t, 2, 2 + counts.len());
    format!("\n{workload} by vCPU count\n{t}\n")
}

/// One line per reason: the combinations it covers, without repeating workloads.
pub fn skipped_text(skipped: &[SkippedMode]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let mut out = format!("\nskipped {} combinations:\n", skipped.len());
    let mut by_reason: Vec<(&str, Vec<&str>, usize)> = Vec::new();
    for s in skipped {
        let mode = s.mode.split_once(' ').map_or(s.mode.as_str(), |(_, m)| m);
        match by_reason.iter_mut().find(|(r, _, _)| *r == s.reason) {
            Some((_, modes, n)) => {
                *n += 1;
                if !modes.contains(&mode) {
                    modes.push(mode);
                }
            }
            None => by_reason.push((&s.reason, vec![mode], 1)),
        }
    }
    for (reason, modes, n) in by_reason {
        out.push_str(&format!("  {} ({n}): {reason}\n", modes.join(", ")));
    }
    out
}

/// Delivered IPIs per second over the measured phase (vCPU 0's window).
fn ipis_per_sec(r: &RunReport, ipis: u64, phase: Option<(u32, String)>) -> Option<f64> {
    let (id, name) = phase?;
    let wall = r.vcpus.first()?.phase_of(id, &name)?.wall_ns;
    (wall > 0).then(|| ipis as f64 * 1e9 / wall as f64)
}
