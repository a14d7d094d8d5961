//! SVG charts (plotters, SVG backend, no fonts needed: text is written as
//! `<text>` and drawn by the viewer). Per group of runs with the same
//! workload or custom payload, vCPU count and target wait (see
//! [`GroupKey`]; a custom payload's charts are named and titled by its file
//! name), one bar per configuration (a mode, and a phase with samples:
//! [`summarize_phases`]; the built-in workloads sample only their
//! `measure` phase, a custom payload may sample several) over its repeats,
//! in its mode's colour, at most [`MAX_WIDTH`] pixels wide:
//! - `<group>-cycles.svg`: cycles per operation (what one sample times: a
//!   round trip, a broadcast...; a sample for a custom payload) at p50 with
//!   a p99 whisker;
//! - `<group>-exits.svg`: VM exits per delivered IPI (per sample), stacked
//!   by exit reason;
//! - `<group>-latency.svg`: the latency histogram of every bar, an outline
//!   each in one panel, on a log axis ticked at 1, 2 and 5 × 10^k cycles
//!   ([`log_ticks`](super::chart_kit::log_ticks));
//! - `<workload>-<target>-scale.svg` where a workload ran at several vCPU
//!   counts: its figures against N, a line per mode
//!   ([`super::scale_chart`]).
use super::chart_kit::{color, footer, framed_canvas, mode_color, FooterLine, FONT, MAX_WIDTH};
use super::chart_kit::{tick_label, Credit, DrawResult, Entry, LogAxis};
use super::error::OutputError;
use super::scale_chart::{render_scale, scale_groups};
use super::sink::{Command, DirSink, Docs, Kind, Sink};
use super::style::{human, human_ns};
use ipivmm_analysis::results::latency::Histogram;
use ipivmm_analysis::results::summary::{GroupKey, RunSummary};
use ipivmm_analysis::results::Document;
use ipivmm_analysis::results::RunReport;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// A bar chart: category slots across, a linear value up.
type BarChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Categories, RangedCoordf64>>;
/// The latency panel: log-scaled cycles across, % of samples up.
type LogChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogAxis, RangedCoordf64>>;
/// A drawing area of a chart.
type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

/// A chart renderer: one group's bars to SVG text.
type Renderer = fn(&GroupKey, &[Bar]) -> DrawResult<String>;

/// Text anchored at its bottom centre (labels above bars).
fn above() -> Pos {
    Pos::new(HPos::Center, VPos::Bottom)
}

/// One bar of a chart: one configuration (a mode, and the phase where the
/// chart shows several) with the figures of each of its repeats.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Mode label, plus the phase where the chart shows several (unique
    /// within the chart).
    pub label: String,
    /// The figures of its first repeat (what every repeat shares: the
    /// mode, the phase, the operation).
    pub summary: RunSummary,
    /// The figures of every repeat, the first included, in run order.
    pub repeats: Vec<RunSummary>,
    /// The file it came from (None: a live run).
    pub origin: Option<String>,
    /// Host, ipivmm and APIC mode it was measured with.
    pub credit: Credit,
}

/// A figure over a bar's repeats.
#[derive(Clone, Debug)]
struct Spread {
    /// The median.
    median: f64,
    /// The median's interval over the repeats (from two repeats).
    interval: Option<ipivmm_analysis::stats::Interval>,
    /// Each repeat's value.
    values: Vec<f64>,
}

impl Bar {
    /// The repeats whose figures the bar shows: those that completed (all
    /// of them when none did, so that a failed configuration still shows
    /// what it got to).
    fn counted(&self) -> Vec<&RunSummary> {
        let done: Vec<&RunSummary> = self.repeats.iter().filter(|s| s.completed).collect();
        match done.is_empty() {
            true => self.repeats.iter().collect(),
            false => done,
        }
    }

    /// `figure` over the counted repeats that have it.
    fn over_repeats(&self, figure: impl Fn(&RunSummary) -> Option<f64>) -> Option<Spread> {
        let values: Vec<f64> = self.counted().into_iter().filter_map(figure).collect();
        Some(Spread {
            median: ipivmm_analysis::stats::median(&values)?,
            interval: (values.len() > 1)
                .then(|| ipivmm_analysis::stats::Interval::of_median(&values))
                .flatten(),
            values,
        })
    }

    /// The latency histogram of the counted repeats, merged.
    fn histogram(&self) -> Histogram {
        let mut h = Histogram::default();
        for s in self.counted() {
            h.merge(&s.histogram);
        }
        h
    }
}

/// Whether any bar has more than one repeat (the charts then say what a
/// bar is over).
fn repeated(bars: &[Bar]) -> bool {
    bars.iter().any(|b| b.repeats.len() > 1)
}

/// The colour of each bar: its mode's ([`mode_color`]), or, where two bars
/// of one chart would share one (a payload's phases of one mode), its
/// place's in the palette.
fn bar_colors(bars: &[Bar]) -> Vec<RGBColor> {
    let mut out: Vec<RGBColor> = Vec::new();
    for (i, b) in bars.iter().enumerate() {
        let c = mode_color(&b.label);
        out.push(match out.contains(&c) {
            true => color(i),
            false => c,
        });
    }
    out
}

/// The footer of a bar chart: where its bars were measured, the samples of
/// each run.
fn bars_footer(bars: &[Bar]) -> Vec<FooterLine> {
    let series: Vec<(&Credit, Option<&str>, u64)> = bars
        .iter()
        .flat_map(|b| {
            b.repeats.iter().map(move |s| {
                let n = s.latency.as_ref().map_or(0, |l| l.count);
                (&b.credit, b.origin.as_deref(), n)
            })
        })
        .collect();
    footer(&series, "run")
}

/// Runs grouped by [`GroupKey`] in order of first appearance, one bar per
/// configuration (its repeats together), each with a unique label: the
/// mode, then ` · <phase>` when the group shows more than one phase, plus
/// the origin (file) or a counter when a label appears twice.
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
    // (the label before it was made unique, the bar)
    let mut bars: Vec<(String, Bar)> = Vec::new();
    for Entry {
        origin,
        summary: s,
        credit,
    } in entries
    {
        let base = match (&s.phase, several_phases) {
            (Some(p), true) => format!("{} · {p}", s.mode),
            _ => s.mode.clone(),
        };
        // Another run of the same configuration from the same file: a repeat.
        if let Some((_, b)) = bars
            .iter_mut()
            .find(|(l, b)| *l == base && b.origin == origin)
        {
            b.repeats.push(s);
            continue;
        }
        let mut label = base.clone();
        if bars.iter().any(|(_, b)| b.label == label) {
            if let Some(o) = &origin {
                label = format!("{label} [{o}]");
            }
            let mut n = 2;
            let stem = label.clone();
            while bars.iter().any(|(_, b)| b.label == label) {
                label = format!("{stem} #{n}");
                n += 1;
            }
        }
        bars.push((
            base,
            Bar {
                label,
                repeats: vec![s.clone()],
                summary: s,
                origin,
                credit,
            },
        ));
    }
    bars.into_iter().map(|(_, b)| b).collect()
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

/// Pixels per character of a label at the labels' size.
const CHAR_W: u32 = 8;

/// Chart width for `n` bars with labels up to `longest` characters and an
/// axis description of `desc` characters, at most [`MAX_WIDTH`] (less
/// `extra`, a legend beside it).
fn width_for(n: usize, longest: usize, desc: usize, extra: u32) -> u32 {
    let slot = (longest as u32 * CHAR_W + 30).max(150);
    let bars = 140 + slot * n as u32 + 40;
    // The description is drawn at 17 px: about 9 px a character.
    let text = desc as u32 * 9 + 160;
    bars.max(text).clamp(640, MAX_WIDTH - extra)
}

/// `labels` cut (with `…`) to what a slot of a chart `width` wide for
/// `n` bars holds.
fn fit_labels(labels: &[String], width: u32) -> Vec<String> {
    let slot = (width.saturating_sub(180)) / labels.len().max(1) as u32;
    let room = (slot.saturating_sub(20) / CHAR_W).max(6) as usize;
    labels
        .iter()
        .map(|l| match l.chars().count() > room {
            true => l.chars().take(room - 1).chain(['…']).collect(),
            false => l.clone(),
        })
        .collect()
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

/// What a bar chart's axes say.
struct Axes {
    caption: String,
    /// One label per slot.
    labels: Vec<String>,
    ymax: f64,
    x_desc: String,
    y_desc: String,
    /// Room for the value labels, pixels.
    y_label_area: u32,
}

/// The axes of a bar chart in `area`: the caption, a slot per label with
/// the label under it, values from 0 to `ymax` with their grid; the one
/// chart frame the cycles and the exits charts share.
fn bar_axes<'a, 'b>(area: &'a Area<'b>, a: &Axes) -> DrawResult<BarChart<'a, 'b>> {
    let mut chart = ChartBuilder::on(area)
        .caption(&a.caption, (FONT, 24))
        .margin(15)
        .x_label_area_size(55)
        .y_label_area_size(a.y_label_area)
        .build_cartesian_2d(Categories(a.labels.len().max(1)), 0f64..a.ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&label_at(&a.labels))
        .y_label_formatter(&|v| human(*v))
        .x_desc(&a.x_desc)
        .y_desc(&a.y_desc)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 17))
        .draw()?;
    Ok(chart)
}

/// The cycles-per-operation chart of one group (per round trip, per
/// broadcast...; per sample for a custom payload) as SVG text: a bar per
/// configuration at the median p50 over its repeats.
pub fn render_cycles(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let n = labels.len().max(1);
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let unit = group.operation;
    let top = bars
        .iter()
        .flat_map(|b| b.counted())
        .filter_map(|s| s.latency.as_ref())
        .map(|l| l.p99.max(l.p50))
        .fold(0.0, f64::max);
    let ymax = if top > 0.0 { top * 1.2 } else { 1.0 };
    let y_desc = match bars.iter().map(|b| b.summary.tsc_khz).find(|&k| k > 0) {
        Some(k) => format!("TSC cycles per {unit} ({:.2} GHz TSC)", k as f64 / 1e6),
        None => format!("TSC cycles per {unit}"),
    };
    let what = match repeated(bars) {
        true => "bar = median p50 over the repeats, red = its interval over them, dots = each repeat, whisker = median p99",
        false => "bar = p50, red = its 95% interval, whisker = p99",
    };
    let x_desc = format!("{} ({what})", x_what(bars));
    let width = width_for(n, longest, x_desc.chars().count(), 0);
    let axes = Axes {
        caption: format!("{group}: cycles per {unit}"),
        labels: fit_labels(&labels, width),
        ymax,
        x_desc,
        y_desc,
        y_label_area: 85,
    };
    let foot = bars_footer(bars);
    let colors = bar_colors(bars);
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width, 500, &foot)?;
        let mut chart = bar_axes(&root, &axes)?;
        for (i, b) in bars.iter().enumerate() {
            draw_cycles_bar(&mut chart, i, b, colors[i], ymax)?;
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

/// A vertical error bar at `x` from `lo` to `hi`, capped.
fn error_bar(chart: &mut BarChart, x: f64, lo: f64, hi: f64, style: ShapeStyle) -> DrawResult<()> {
    chart.draw_series([
        PathElement::new(vec![(x, lo), (x, hi)], style),
        PathElement::new(vec![(x - 0.05, lo), (x + 0.05, lo)], style),
        PathElement::new(vec![(x - 0.05, hi), (x + 0.05, hi)], style),
    ])?;
    Ok(())
}

/// Bar `i`: the p50 (the median over the repeats), its interval (over the
/// repeats, or from the run's own samples for one run), each repeat's p50
/// as a dot, the p99 whisker and their labels.
fn draw_cycles_bar(
    chart: &mut BarChart,
    i: usize,
    b: &Bar,
    c: RGBColor,
    ymax: f64,
) -> DrawResult<()> {
    let x = i as f64;
    let (Some(p50), Some(p99)) = (
        b.over_repeats(|s| Some(s.latency.as_ref()?.p50)),
        b.over_repeats(|s| Some(s.latency.as_ref()?.p99)),
    ) else {
        return draw_missing(chart, x, ymax, "no samples");
    };
    chart.draw_series(std::iter::once(Rectangle::new(
        [(x + 0.2, 0.0), (x + 0.8, p50.median)],
        c.mix(0.85).filled(),
    )))?;
    let whisker = ShapeStyle::from(&BLACK).stroke_width(2);
    chart.draw_series([
        PathElement::new(vec![(x + 0.5, p50.median), (x + 0.5, p99.median)], whisker),
        PathElement::new(
            vec![(x + 0.42, p99.median), (x + 0.58, p99.median)],
            whisker,
        ),
    ])?;
    let err = ShapeStyle::from(&RED).stroke_width(2);
    if p50.values.len() > 1 {
        if let Some(iv) = &p50.interval {
            error_bar(chart, x + 0.32, iv.lo, iv.hi, err)?;
        }
        let k = p50.values.len() as f64;
        chart.draw_series(p50.values.iter().enumerate().map(|(j, v)| {
            let at = x + 0.68 + 0.08 * (j as f64 / (k - 1.0).max(1.0) - 0.5);
            Circle::new((at, *v), 3, BLACK.filled())
        }))?;
    } else if let Some(iv) = b
        .counted()
        .first()
        .and_then(|s| s.latency.as_ref()?.p50_interval)
    {
        // One run: the p50's interval from its own samples (absent where
        // several vCPUs' samples were pooled).
        error_bar(chart, x + 0.32, iv.lo, iv.hi, err)?;
    }
    let ns = b
        .over_repeats(|s| s.latency.as_ref()?.p50_ns)
        .map(|f| f.median);
    draw_p50_label(chart, x, p50.median, ns, p99.median, ymax)?;
    chart.draw_series(std::iter::once(
        EmptyElement::at((x + 0.58, p99.median))
            + Text::new(
                format!("p99 {}", human(p99.median)),
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
    p50: f64,
    p50_ns: Option<f64>,
    p99: f64,
    ymax: f64,
) -> DrawResult<()> {
    let mut lines = vec![format!("p50 {}", human(p50))];
    if let Some(ns) = p50_ns {
        lines.push(human_ns(ns));
    }
    let inside = p50 / ymax > 0.14;
    for (k, line) in lines.iter().enumerate() {
        let k = k as i32;
        let el = if inside {
            EmptyElement::at((x + 0.5, p50))
                + Text::new(
                    line.clone(),
                    (0, 8 + 19 * k),
                    (FONT, 16)
                        .into_font()
                        .color(&WHITE)
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )
        } else {
            EmptyElement::at((x + 0.5, p99))
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

/// A bar's exits per unit by reason over its counted repeats: every
/// repeat's exits of a reason over all their units (counts pool).
fn pooled_reasons(b: &Bar) -> Vec<(String, f64)> {
    let counted: Vec<&RunSummary> = b
        .counted()
        .into_iter()
        .filter(|s| s.exits.is_some() && s.units() > 0)
        .collect();
    let units: u64 = counted
        .iter()
        .map(|s| s.units())
        .fold(0, u64::saturating_add);
    let mut out: Vec<(String, f64)> = Vec::new();
    for s in &counted {
        for (r, v) in s.exits.iter().flat_map(|e| &e.by_reason) {
            let per = *v as f64 / units.max(1) as f64;
            match out.iter_mut().find(|(x, _)| x == r) {
                Some(x) => x.1 += per,
                None => out.push((r.clone(), per)),
            }
        }
    }
    out
}

/// Exit reasons of all bars, by total share per unit, largest first.
fn exit_reasons(bars: &[Bar]) -> Vec<(String, f64)> {
    let mut reasons: Vec<(String, f64)> = Vec::new();
    for b in bars {
        for (r, per) in pooled_reasons(b) {
            match reasons.iter_mut().find(|(x, _)| *x == r) {
                Some(x) => x.1 += per,
                None => reasons.push((r, per)),
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
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let top = bars
        .iter()
        .flat_map(|b| b.counted())
        .filter_map(|s| s.exits_per_unit())
        .fold(0.0, f64::max);
    let ymax = if top > 0.0 { top * 1.15 } else { 1.0 };
    let over = match repeated(bars) {
        true => "; over a configuration's repeats, in red their spread",
        false => "",
    };
    let x_desc = format!(
        "{} (exits of all vCPUs, from {}{over})",
        x_what(bars),
        exit_source(bars)
    );
    let width = width_for(n, longest, x_desc.chars().count(), legend_w) + legend_w;
    let axes = Axes {
        caption: format!("{group}: VM exits per {unit}"),
        labels: fit_labels(&labels, width - legend_w),
        ymax,
        x_desc,
        y_desc: format!("VM exits per {unit}"),
        y_label_area: 70,
    };
    let foot = bars_footer(bars);
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width, 500, &foot)?;
        let (left, right) = root.split_horizontally(width - legend_w);
        let mut chart = bar_axes(&left, &axes)?;
        for (i, b) in bars.iter().enumerate() {
            draw_exits_bar(&mut chart, i, b, &reasons, ymax, unit)?;
        }
        draw_legend(
            &right.margin(60, 10, 5, 10),
            "exit reason",
            &reasons
                .iter()
                .enumerate()
                .map(|(i, (r, _))| (r.clone(), color(i)))
                .collect::<Vec<_>>(),
        )?;
        root.present()?;
    }
    Ok(buf)
}

/// Bar `i`: its exits per unit stacked by reason (pooled over its
/// repeats), the total on top, the repeats' spread of it in red.
fn draw_exits_bar(
    chart: &mut BarChart,
    i: usize,
    b: &Bar,
    reasons: &[(String, f64)],
    ymax: f64,
    unit: &str,
) -> DrawResult<()> {
    let x = i as f64;
    let stack = pooled_reasons(b);
    if stack.is_empty() {
        return draw_missing(chart, x, ymax, &format!("no {unit}s or exits"));
    }
    let mut base = 0.0;
    for (r, h) in &stack {
        let ci = reasons.iter().position(|(x, _)| x == r).unwrap_or(0);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x + 0.2, base), (x + 0.8, base + h)],
            color(ci).mix(0.85).filled(),
        )))?;
        base += h;
    }
    if let Some(iv) = b
        .over_repeats(|s| s.exits_per_unit())
        .and_then(|t| t.interval)
    {
        error_bar(
            chart,
            x + 0.32,
            iv.lo,
            iv.hi,
            ShapeStyle::from(&RED).stroke_width(2),
        )?;
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

/// A legend, outside the plot so it never hides a bar: `title`, then each
/// name with its colour.
fn draw_legend(area: &Area<'_>, title: &str, entries: &[(String, RGBColor)]) -> DrawResult<()> {
    area.draw(&Text::new(
        title.to_string(),
        (0, 0),
        (FONT, 17).into_font(),
    ))?;
    for (i, (name, c)) in entries.iter().enumerate() {
        let y = 26 + 22 * i as i32;
        area.draw(&Rectangle::new(
            [(0, y), (14, y + 14)],
            c.mix(0.85).filled(),
        ))?;
        area.draw(&Text::new(name.as_str(), (20, y), (FONT, 15).into_font()))?;
    }
    Ok(())
}

/// Human name of a counter source (the key itself when it names none).
pub fn source_name(s: &str) -> &str {
    ipivmm_analysis::results::source::Source::of_key(s).map_or(s, |src| src.human())
}

/// The x range of the latency chart: the buckets of all bars, with a
/// margin.
fn latency_range(hists: &[Histogram]) -> LogAxis {
    let lo = hists
        .iter()
        .filter_map(|h| h.buckets.first().map(|x| x.lo))
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let hi = hists
        .iter()
        .filter_map(|h| h.buckets.last().map(|x| x.hi))
        .max()
        .unwrap_or(10) as f64;
    LogAxis::new(lo / 1.2, (hi * 1.2).max(lo * 2.0))
}

/// The latency histograms of one group as SVG text: one panel, each
/// configuration's histogram (its repeats' samples together) as an outline
/// in its mode's colour, its p50 marked; the legend names each with its
/// samples, p50 and p99.
pub fn render_latency(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let legend: Vec<String> = bars
        .iter()
        .map(|b| {
            match (
                b.over_repeats(|s| Some(s.latency.as_ref()?.p50)),
                b.over_repeats(|s| Some(s.latency.as_ref()?.p99)),
            ) {
                (Some(p50), Some(p99)) => format!(
                    "{}: {} samples, p50 {} / p99 {}",
                    b.label,
                    b.histogram().total(),
                    human(p50.median),
                    human(p99.median)
                ),
                _ => format!("{}: no samples", b.label),
            }
        })
        .collect();
    let legend_w = (legend.iter().map(|l| l.chars().count()).max().unwrap_or(10) as u32 * 8 + 40)
        .clamp(200, MAX_WIDTH - 760);
    let width = 760 + legend_w;
    let hists: Vec<Histogram> = bars.iter().map(Bar::histogram).collect();
    let x = latency_range(&hists);
    let foot = bars_footer(bars);
    let colors = bar_colors(bars);
    let height = 480u32.max(80 + 22 * bars.len() as u32);
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width, height, &foot)?;
        let first = bars.first().map(|b| &b.summary.phase);
        let per = if bars.iter().all(|b| Some(&b.summary.phase) == first) {
            "mode"
        } else {
            "mode and phase"
        };
        let over = match repeated(bars) {
            true => ", repeats together",
            false => "",
        };
        let root = root.titled(
            &format!("{group}: latency histogram per {per}{over}"),
            (FONT, 24),
        )?;
        let (plot, right) = root.split_horizontally(width - legend_w);
        let top = hists
            .iter()
            .flat_map(|h| {
                let total = h.total().max(1) as f64;
                h.buckets
                    .iter()
                    .map(move |b| b.count as f64 * 100.0 / total)
            })
            .fold(0.0, f64::max);
        let ymax = (top * 1.15).max(1.0);
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(x, 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| tick_label(*v))
            .y_label_formatter(&|v| format!("{v:.0}%"))
            .x_desc(format!(
                "latency, TSC cycles per {} (log scale); dashed: p50",
                group.operation
            ))
            .y_desc("% of samples")
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()?;
        for ((b, h), c) in bars.iter().zip(&hists).zip(&colors) {
            draw_outline(&mut chart, h, *c)?;
            if let Some(p50) = b.over_repeats(|s| Some(s.latency.as_ref()?.p50)) {
                draw_p50_mark(&mut chart, p50.median, ymax, *c)?;
            }
        }
        let entries: Vec<(String, RGBColor)> = legend.into_iter().zip(colors).collect();
        draw_legend(&right.margin(30, 10, 5, 10), "configuration", &entries)?;
        root.present()?;
    }
    Ok(buf)
}

/// A histogram in % of its samples as a step outline (bars of several
/// configurations overlap: outlines stay readable).
fn draw_outline(chart: &mut LogChart, h: &Histogram, c: RGBColor) -> DrawResult<()> {
    let total = h.total().max(1) as f64;
    let mut pts: Vec<(f64, f64)> = Vec::new();
    for b in &h.buckets {
        let (lo, hi, y) = (
            b.lo.max(1) as f64,
            b.hi as f64,
            b.count as f64 * 100.0 / total,
        );
        if pts.last().is_none_or(|(x, _)| *x < lo) {
            pts.push((lo, 0.0));
        }
        pts.extend([(lo, y), (hi, y), (hi, 0.0)]);
    }
    chart.draw_series(std::iter::once(PathElement::new(pts, c.stroke_width(2))))?;
    Ok(())
}

/// A dashed vertical line at the p50 in colour `c`.
fn draw_p50_mark(chart: &mut LogChart, p50: f64, ymax: f64, c: RGBColor) -> DrawResult<()> {
    if p50 <= 0.0 {
        return Ok(());
    }
    let dashes = (0..20).map(|k| {
        let (a, b) = (ymax * k as f64 / 20.0, ymax * (k as f64 + 0.5) / 20.0);
        PathElement::new(vec![(p50, a), (p50, b)], c.stroke_width(1))
    });
    chart.draw_series(dashes)?;
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
    run.phase_summaries()
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
