//! SVG charts (plotters, SVG backend, no fonts needed: text is written as
//! `<text>` and drawn by the viewer). Per group of runs with the same
//! workload or custom payload, vCPU count and target wait (see
//! [`GroupKey`]; a custom payload's charts are named and titled by its file
//! name), one bar per mode and phase with samples
//! ([`summary::summarize_phases`]; the built-in workloads sample only their
//! `measure` phase, a custom payload may sample several):
//! - `<group>-cycles.svg`: cycles per operation (what one sample times: a
//!   round trip, a broadcast...; a sample for a custom payload) at p50 with
//!   a p99 whisker;
//! - `<group>-exits.svg`: VM exits per delivered IPI (per sample), stacked
//!   by exit reason;
//! - `<group>-latency.svg`: the latency histogram of every bar, one panel
//!   each, on a log axis ticked at 1, 2 and 5 × 10^k cycles ([`log_ticks`](super::chart_kit::log_ticks));
//! - `<workload>-<target>-scale.svg` where a workload ran at several vCPU
//!   counts: its figures against N, a line per mode
//!   ([`super::scale_chart`]).
use super::chart_kit::{color, footer, framed_canvas, FooterLine, FONT};
use super::chart_kit::{tick_label, Credit, DrawResult, Entry, LogAxis};
use super::error::OutputError;
use super::scale_chart::{render_scale, scale_groups};
use super::sink::{Command, DirSink, Docs, Kind, Sink};
use super::style::{human, human_ns};
use ipivmm::results::latency::Histogram;
use ipivmm::results::summary::{self, summarize_phases, GroupKey, RunSummary};
use ipivmm::results::Document;
use ipivmm::results::RunReport;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// A bar chart: category slots across, a linear value up.
type BarChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Categories, RangedCoordf64>>;
/// A histogram panel: log-scaled cycles across, % of samples up.
type LogChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogAxis, RangedCoordf64>>;

/// A chart renderer: one group's bars to SVG text.
type Renderer = fn(&GroupKey, &[Bar]) -> DrawResult<String>;

/// Text anchored at its bottom centre (labels above bars).
fn above() -> Pos {
    Pos::new(HPos::Center, VPos::Bottom)
}

/// One bar of a chart: its label and the figures of one run's phase.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Mode label, plus the phase where the chart shows several (unique
    /// within the chart).
    pub label: String,
    /// The figures.
    pub summary: RunSummary,
    /// The file it came from (None: a live run).
    pub origin: Option<String>,
    /// Host, ipivmm and APIC mode it was measured with.
    pub credit: Credit,
}

/// The footer of a bar chart: where its bars were measured, their samples.
fn bars_footer(bars: &[Bar]) -> Vec<FooterLine> {
    let series: Vec<(&Credit, Option<&str>, u64)> = bars
        .iter()
        .map(|b| {
            let n = b.summary.latency.as_ref().map_or(0, |l| l.count);
            (&b.credit, b.origin.as_deref(), n)
        })
        .collect();
    footer(&series, "bar")
}

/// Runs grouped by [`GroupKey`] in order of first appearance, each with a
/// unique label: the mode, then ` · <phase>` when the group shows more than
/// one phase, plus the origin (file) or a counter when a label appears twice.
pub fn group(entries: Vec<Entry>) -> Vec<(GroupKey, Vec<Bar>)> {
    let mut buckets: Vec<(GroupKey, Vec<Entry>)> = Vec::new();
    for e in entries {
        match buckets.iter_mut().find(|(k, _)| *k == e.summary.group) {
            Some((_, v)) => v.push(e),
            None => buckets.push((e.summary.group.clone(), vec![e])),
        }
    }
    buckets
        .into_iter()
        .map(|(key, entries)| (key, label_bars(entries)))
        .collect()
}

fn label_bars(entries: Vec<Entry>) -> Vec<Bar> {
    let first_phase = entries.first().and_then(|e| e.summary.phase.clone());
    let several_phases = entries.iter().any(|e| e.summary.phase != first_phase);
    let mut bars: Vec<Bar> = Vec::new();
    for Entry {
        origin,
        summary: s,
        credit,
    } in entries
    {
        let mut label = match (&s.phase, several_phases) {
            (Some(p), true) => format!("{} · {p}", s.mode),
            _ => s.mode.clone(),
        };
        if bars.iter().any(|b| b.label == label) {
            if let Some(o) = &origin {
                label = format!("{label} [{o}]");
            }
            let mut n = 2;
            let base = label.clone();
            while bars.iter().any(|b| b.label == label) {
                label = format!("{base} #{n}");
                n += 1;
            }
        }
        bars.push(Bar {
            label,
            summary: s,
            origin,
            credit,
        });
    }
    bars
}

/// What the x axis shows: the mode, and the phase (one for all bars, or per bar).
fn x_what(bars: &[Bar]) -> String {
    let first = bars.first().and_then(|b| b.summary.phase.as_deref());
    match first {
        Some(p) if bars.iter().all(|b| b.summary.phase.as_deref() == Some(p)) => {
            format!("mode: irqchip/apic/ipi, phase '{p}'")
        }
        Some(_) => "mode: irqchip/apic/ipi · phase".to_string(),
        None => "mode: irqchip/apic/ipi".to_string(),
    }
}

/// Chart width for `n` bars with labels up to `longest` characters.
fn width_for(n: usize, longest: usize) -> u32 {
    let slot = (longest as u32 * 8 + 30).max(150);
    (140 + slot * n as u32 + 40).max(640)
}

/// A category axis: `n` slots, slot `i` spans `[i, i + 1)`, its tick and
/// label at `i + 0.5`.
#[derive(Clone, Copy, Debug)]
pub struct Categories(usize);

impl Ranged for Categories {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (span * v / self.0.max(1) as f64).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.0).map(|i| i as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

impl ValueFormatter<f64> for Categories {
    fn format(_: &f64) -> String {
        String::new()
    }
}

fn label_at<'a>(labels: &'a [String]) -> impl Fn(&f64) -> String + 'a {
    move |x: &f64| {
        let i = x.floor();
        if i >= 0.0 && (i as usize) < labels.len() {
            labels[i as usize].clone()
        } else {
            String::new()
        }
    }
}

/// The cycles-per-operation chart of one group (per round trip, per
/// broadcast...; per sample for a custom payload) as SVG text.
pub fn render_cycles(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let n = labels.len().max(1);
    let longest = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let unit = group.operation;
    let top = bars
        .iter()
        .filter_map(|b| b.summary.latency.as_ref())
        .map(|l| l.p99.max(l.p50))
        .fold(0.0, f64::max);
    let ymax = if top > 0.0 { top * 1.2 } else { 1.0 };
    let y_desc = match bars.iter().map(|b| b.summary.tsc_khz).find(|&k| k > 0) {
        Some(k) => format!("TSC cycles per {unit} ({:.2} GHz TSC)", k as f64 / 1e6),
        None => format!("TSC cycles per {unit}"),
    };
    let foot = bars_footer(bars);
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width_for(n, longest), 500, &foot)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{group}: cycles per {unit}"), (FONT, 24))
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(85)
            .build_cartesian_2d(Categories(n), 0f64..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&label_at(&labels))
            .y_label_formatter(&|v| human(*v))
            .x_desc(format!(
                "{} (bar = p50, red = its 95% interval, whisker = p99)",
                x_what(bars)
            ))
            .y_desc(y_desc)
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 17))
            .draw()?;
        for (i, b) in bars.iter().enumerate() {
            draw_cycles_bar(&mut chart, i, b, ymax)?;
        }
        root.present()?;
    }
    Ok(buf)
}

/// "no samples" (or whatever `what` says) in slot `x` of a bar chart.
fn draw_missing(chart: &mut BarChart, x: f64, ymax: f64, what: &str) -> DrawResult<()> {
    chart.draw_series(std::iter::once(Text::new(
        what.to_string(),
        (x + 0.25, ymax * 0.05),
        (FONT, 15).into_font().color(&BLACK.mix(0.6)),
    )))?;
    Ok(())
}

/// Bar `i`: p50 bar, p99 whisker and their labels.
fn draw_cycles_bar(chart: &mut BarChart, i: usize, b: &Bar, ymax: f64) -> DrawResult<()> {
    let x = i as f64;
    let Some(l) = &b.summary.latency else {
        return draw_missing(chart, x, ymax, "no samples");
    };
    chart.draw_series(std::iter::once(Rectangle::new(
        [(x + 0.2, 0.0), (x + 0.8, l.p50)],
        color(i).mix(0.85).filled(),
    )))?;
    let whisker = ShapeStyle::from(&BLACK).stroke_width(2);
    chart.draw_series([
        PathElement::new(vec![(x + 0.5, l.p50), (x + 0.5, l.p99)], whisker),
        PathElement::new(vec![(x + 0.42, l.p99), (x + 0.58, l.p99)], whisker),
    ])?;
    // The p50's interval from the run's own samples, as an error bar
    // beside the whisker (absent where several vCPUs' samples were pooled).
    if let Some(iv) = &l.p50_interval {
        let err = ShapeStyle::from(&RED).stroke_width(2);
        chart.draw_series([
            PathElement::new(vec![(x + 0.32, iv.lo), (x + 0.32, iv.hi)], err),
            PathElement::new(vec![(x + 0.27, iv.lo), (x + 0.37, iv.lo)], err),
            PathElement::new(vec![(x + 0.27, iv.hi), (x + 0.37, iv.hi)], err),
        ])?;
    }
    draw_p50_label(chart, x, l, ymax)?;
    chart.draw_series(std::iter::once(
        EmptyElement::at((x + 0.58, l.p99))
            + Text::new(
                format!("p99 {}", human(l.p99)),
                (4, -6),
                (FONT, 13).into_font(),
            ),
    ))?;
    Ok(())
}

/// p50 (cycles, then ns) inside the bar when it is tall enough, else above
/// the p99 cap (never across the whisker).
fn draw_p50_label(
    chart: &mut BarChart,
    x: f64,
    l: &summary::Headline,
    ymax: f64,
) -> DrawResult<()> {
    let mut lines = vec![format!("p50 {}", human(l.p50))];
    if let Some(ns) = l.p50_ns {
        lines.push(human_ns(ns));
    }
    let inside = l.p50 / ymax > 0.14;
    for (k, line) in lines.iter().enumerate() {
        let k = k as i32;
        let el = if inside {
            EmptyElement::at((x + 0.5, l.p50))
                + Text::new(
                    line.clone(),
                    (0, 8 + 19 * k),
                    (FONT, 16)
                        .into_font()
                        .color(&WHITE)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )
        } else {
            EmptyElement::at((x + 0.5, l.p99))
                + Text::new(
                    line.clone(),
                    (0, -24 - 19 * (lines.len() as i32 - 1 - k)),
                    (FONT, 16).into_font().color(&BLACK).pos(above()),
                )
        };
        chart.draw_series(std::iter::once(el))?;
    }
    Ok(())
}

/// Exit reasons of all bars, by total share per unit, largest first.
fn exit_reasons(bars: &[Bar]) -> Vec<(String, f64)> {
    let mut reasons: Vec<(String, f64)> = Vec::new();
    for b in bars {
        let (Some(e), units) = (&b.summary.exits, b.summary.units()) else {
            continue;
        };
        for (r, v) in &e.by_reason {
            let per = if units > 0 {
                *v as f64 / units as f64
            } else {
                0.0
            };
            match reasons.iter_mut().find(|(x, _)| x == r) {
                Some(x) => x.1 += per,
                None => reasons.push((r.clone(), per)),
            }
        }
    }
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
    reasons
}

/// Where the exit counts came from, for the axis description.
fn exit_source(bars: &[Bar]) -> String {
    let sources: Vec<&str> = bars
        .iter()
        .filter_map(|b| b.summary.exits.as_ref().map(|e| e.source))
        .collect();
    match sources.first() {
        Some(s) if sources.iter().all(|x| x == s) => source_name(s).to_string(),
        Some(_) => "mixed sources, see the mode labels".to_string(),
        None => "no exit counters".to_string(),
    }
}

/// The exits-per-IPI (per sample) chart of one group, stacked by reason, as
/// SVG text.
pub fn render_exits(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let n = labels.len().max(1);
    let unit = group.unit();
    let reasons = exit_reasons(bars);
    let longest_reason = reasons.iter().map(|r| r.0.len()).max().unwrap_or(5);
    let legend_w = (longest_reason as u32 * 8 + 50).max(140);
    let longest = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let width = width_for(n, longest) + legend_w;
    let top = bars
        .iter()
        .filter_map(|b| b.summary.exits_per_unit())
        .fold(0.0, f64::max);
    let ymax = if top > 0.0 { top * 1.15 } else { 1.0 };
    let foot = bars_footer(bars);
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width, 500, &foot)?;
        let (left, right) = root.split_horizontally(width - legend_w);
        let mut chart = ChartBuilder::on(&left)
            .caption(format!("{group}: VM exits per {unit}"), (FONT, 24))
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(70)
            .build_cartesian_2d(Categories(n), 0f64..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&label_at(&labels))
            .y_label_formatter(&|v| human(*v))
            .x_desc(format!(
                "{} (exits of all vCPUs, from {})",
                x_what(bars),
                exit_source(bars)
            ))
            .y_desc(format!("VM exits per {unit}"))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 17))
            .draw()?;
        for (i, b) in bars.iter().enumerate() {
            draw_exits_bar(&mut chart, i, b, &reasons, ymax, unit)?;
        }
        draw_legend(&right.margin(60, 10, 5, 10), &reasons)?;
        root.present()?;
    }
    Ok(buf)
}

/// Bar `i`: its exits per unit stacked by reason, the total on top.
fn draw_exits_bar(
    chart: &mut BarChart,
    i: usize,
    b: &Bar,
    reasons: &[(String, f64)],
    ymax: f64,
    unit: &str,
) -> DrawResult<()> {
    let x = i as f64;
    let units = b.summary.units();
    let (Some(e), true) = (&b.summary.exits, units > 0) else {
        return draw_missing(chart, x, ymax, &format!("no {unit}s or exits"));
    };
    let mut base = 0.0;
    for (r, v) in &e.by_reason {
        let h = *v as f64 / units as f64;
        let ci = reasons.iter().position(|(x, _)| x == r).unwrap_or(0);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x + 0.2, base), (x + 0.8, base + h)],
            color(ci).mix(0.85).filled(),
        )))?;
        base += h;
    }
    chart.draw_series(std::iter::once(
        EmptyElement::at((x + 0.5, base))
            + Text::new(
                format!("{base:.2}"),
                (0, -6),
                (FONT, 16).into_font().color(&BLACK).pos(above()),
            ),
    ))?;
    Ok(())
}

/// The exit-reason legend, outside the plot so it never hides a bar.
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    reasons: &[(String, f64)],
) -> DrawResult<()> {
    area.draw(&Text::new("exit reason", (0, 0), (FONT, 17).into_font()))?;
    for (i, (r, _)) in reasons.iter().enumerate() {
        let y = 26 + 22 * i as i32;
        area.draw(&Rectangle::new(
            [(0, y), (14, y + 14)],
            color(i).mix(0.85).filled(),
        ))?;
        area.draw(&Text::new(r.as_str(), (20, y), (FONT, 15).into_font()))?;
    }
    Ok(())
}

/// Human name of a counter source (the key itself when it names none).
pub fn source_name(s: &str) -> &str {
    ipivmm::results::source::Source::of_key(s).map_or(s, |src| src.human())
}

/// The x range every latency panel shares: the buckets of all bars, with a
/// margin.
fn latency_range(bars: &[Bar]) -> LogAxis {
    let lo = bars
        .iter()
        .filter_map(|b| b.summary.histogram.buckets.first().map(|x| x.lo))
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let hi = bars
        .iter()
        .filter_map(|b| b.summary.histogram.buckets.last().map(|x| x.hi))
        .max()
        .unwrap_or(10) as f64;
    LogAxis::new(lo / 1.2, (hi * 1.2).max(lo * 2.0))
}

/// The latency histograms of one group (one panel per bar) as SVG text.
pub fn render_latency(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let n = bars.len().max(1);
    let panel_h = 210u32;
    let longest = bars.iter().map(|b| b.label.len()).max().unwrap_or(0);
    let width = (longest as u32 * 8 + 520).max(760);
    let x = latency_range(bars);
    let foot = bars_footer(bars);
    let height = 50 + panel_h * n as u32;
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width, height, &foot)?;
        let first = bars.first().map(|b| &b.summary.phase);
        let per = if bars.iter().all(|b| Some(&b.summary.phase) == first) {
            "mode"
        } else {
            "mode and phase"
        };
        let root = root.titled(&format!("{group}: latency histogram per {per}"), (FONT, 24))?;
        let panels = root.split_evenly((n, 1));
        for (i, (b, area)) in bars.iter().zip(panels.iter()).enumerate() {
            draw_latency_panel(area, i, b, x, group.operation)?;
        }
        root.present()?;
    }
    Ok(buf)
}

/// One panel: bar `i`'s histogram in % of its samples, p50 and p99 marked.
fn draw_latency_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    i: usize,
    b: &Bar,
    x: LogAxis,
    unit: &str,
) -> DrawResult<()> {
    let h: &Histogram = &b.summary.histogram;
    let total = h.total().max(1) as f64;
    let pct = |count: u64| count as f64 * 100.0 / total;
    let top = h.buckets.iter().map(|x| pct(x.count)).fold(0.0, f64::max);
    let ymax = (top * 1.15).max(1.0);
    let caption = match &b.summary.latency {
        Some(l) => format!(
            "{}: {} samples, p50 {} / p99 {} cycles per {unit}",
            b.label,
            l.count,
            human(l.p50),
            human(l.p99)
        ),
        None => format!("{}: no samples", b.label),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 16))
        .margin(8)
        .x_label_area_size(38)
        .y_label_area_size(70)
        .build_cartesian_2d(x, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| format!("{v:.0}%"))
        .x_desc("latency, TSC cycles (log scale)")
        .y_desc("% of samples")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;
    let c = color(i);
    chart.draw_series(h.buckets.iter().map(|x| {
        Rectangle::new(
            [(x.lo.max(1) as f64, 0.0), (x.hi as f64, pct(x.count))],
            c.mix(0.85).filled(),
        )
    }))?;
    if let Some(l) = &b.summary.latency {
        draw_percentile_marks(&mut chart, l, ymax)?;
    }
    Ok(())
}

/// Vertical p50 and p99 lines across a histogram panel.
fn draw_percentile_marks(chart: &mut LogChart, l: &summary::Headline, ymax: f64) -> DrawResult<()> {
    for (v, name) in [(l.p50, "p50"), (l.p99, "p99")] {
        if v <= 0.0 {
            continue;
        }
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(v, 0.0), (v, ymax)],
            ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(1),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            name,
            (v * 1.02, ymax * 0.95),
            (FONT, 13).into_font(),
        )))?;
    }
    Ok(())
}

/// The `--plot DIR` sink of `run`, `sweep` and `compare`: every chart is
/// `*.svg`, its name derived from the results.
pub static SINK: Sink = Sink {
    flag: "plot",
    help: &[
        (
            &[Command::Run, Command::Sweep],
            "Write SVG charts (cycles per IPI, exits per IPI by reason, latency histogram) into DIR",
        ),
        (
            &[Command::Compare],
            "Also write SVG charts of every run of every file into DIR (created if missing)",
        ),
    ],
    kind: Kind::Dir(DirSink {
        write: write_sink,
        names: "*.svg",
        what: "a chart",
        claims: is_chart_name,
    }),
};

/// Whether a chart may take this file name.
fn is_chart_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"))
}

/// The charts of every document of `docs` into `dir`, from what the charts
/// need of each (its entries), so that no document is kept.
fn write_sink(docs: &dyn Docs, dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    let mut entries = Vec::new();
    docs.each(&mut |origin, d| {
        entries.extend(entries_of(origin, d));
        Ok(())
    })?;
    plot_summaries(entries, dir)
}

/// A chart, written like every results file (`atomic::write_atomic`): whole
/// or not at all, and a link at its name is replaced, never written through.
fn write(path: &Path, text: &str) -> Result<(), OutputError> {
    super::atomic::write_atomic(path, text.as_bytes()).map_err(|e| OutputError::Write {
        what: path.display().to_string(),
        problem: e.to_string(),
    })
}

/// Writes the three charts of every group into `dir` (created if missing);
/// returns the files written.
pub fn plot_summaries(entries: Vec<Entry>, dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    std::fs::create_dir_all(dir).map_err(|e| OutputError::Write {
        what: dir.display().to_string(),
        problem: e.to_string(),
    })?;
    let mut written = Vec::new();
    for (key, bars) in group(entries.clone()) {
        let slug = key.slug();
        let charts: [(&str, Renderer); 3] = [
            ("cycles", render_cycles),
            ("exits", render_exits),
            ("latency", render_latency),
        ];
        for (kind, render) in charts {
            let path = dir.join(format!("{slug}-{kind}.svg"));
            let svg = render(&key, &bars).map_err(|e| OutputError::Write {
                what: path.display().to_string(),
                problem: e.to_string(),
            })?;
            write(&path, &svg)?;
            written.push(path);
        }
    }
    for g in scale_groups(&entries) {
        let path = dir.join(format!("{}.svg", g.slug()));
        let svg = render_scale(&g).map_err(|e| OutputError::Write {
            what: path.display().to_string(),
            problem: e.to_string(),
        })?;
        write(&path, &svg)?;
        written.push(path);
    }
    Ok(written)
}

/// Charts of in-memory reports into `dir`: per workload (or payload) group,
/// one bar per mode and phase with samples.
pub fn plot_runs(runs: &[&RunReport], dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    let entries = runs
        .iter()
        .flat_map(|r| run_entries(None, r, None))
        .collect();
    plot_summaries(entries, dir)
}

/// The entries of `run` (of document `doc`, read from `origin`): one per
/// phase with samples.
fn run_entries(origin: Option<&str>, run: &RunReport, doc: Option<&Document>) -> Vec<Entry> {
    let credit = Credit::of(run, doc);
    summarize_phases(run)
        .into_iter()
        .map(|summary| Entry {
            origin: origin.map(str::to_string),
            summary,
            credit: credit.clone(),
        })
        .collect()
}

/// What the charts need of recorded document `d` (origin = its file
/// name): one entry per run and phase with samples, so that the document
/// itself need not be kept.
pub fn doc_entries(origin: &str, d: &Document) -> Vec<Entry> {
    entries_of(Some(origin), d)
}

/// [`doc_entries`] of a document from `origin` (`None`: in memory).
fn entries_of(origin: Option<&str>, d: &Document) -> Vec<Entry> {
    d.runs
        .iter()
        .flat_map(|r| run_entries(origin, r, Some(d)))
        .collect()
}

/// Charts of recorded documents (origin = file name) into `dir`.
pub fn plot_docs(docs: &[(String, Document)], dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    let entries = docs.iter().flat_map(|(o, d)| doc_entries(o, d)).collect();
    plot_summaries(entries, dir)
}
