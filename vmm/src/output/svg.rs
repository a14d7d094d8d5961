//! SVG charts (plotters, SVG backend, no fonts needed: text is written as
//! `<text>` and drawn by the viewer). Per group of runs with the same
//! workload, vCPU count and target wait (see [`GroupKey`]):
//! - `<group>-cycles.svg`: one bar per mode, cycles per IPI at p50 with a
//!   p99 whisker;
//! - `<group>-exits.svg`: VM exits per IPI, stacked by exit reason;
//! - `<group>-latency.svg`: the latency histogram of every mode, one panel each.
use super::summary::{summarize, GroupKey, RunSummary};
use super::{human, human_ns, OutputError};
use crate::results::latency::Histogram;
use crate::results::Document;
use crate::run::RunReport;
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use std::path::{Path, PathBuf};

type DrawResult<T> = Result<T, Box<dyn Error>>;

/// A chart renderer: one group's bars to SVG text.
type Renderer = fn(&GroupKey, &[Bar]) -> DrawResult<String>;

/// Colours of modes and exit reasons (Tableau 10).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const FONT: &str = "sans-serif";

/// Text anchored at its bottom centre (labels above bars).
fn above() -> Pos {
    Pos::new(HPos::Center, VPos::Bottom)
}

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// One bar of a chart: its label and the run's figures.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Mode label (unique within the chart).
    pub label: String,
    /// The run's figures.
    pub summary: RunSummary,
}

/// Runs grouped by [`GroupKey`] in order of first appearance, each with a
/// unique label: the mode, plus the origin (file) or a counter when a mode
/// appears twice in a group.
pub fn group(entries: Vec<(Option<String>, RunSummary)>) -> Vec<(GroupKey, Vec<Bar>)> {
    let mut groups: Vec<(GroupKey, Vec<Bar>)> = Vec::new();
    for (origin, s) in entries {
        let i = match groups.iter().position(|(k, _)| *k == s.group) {
            Some(i) => i,
            None => {
                groups.push((s.group.clone(), Vec::new()));
                groups.len() - 1
            }
        };
        let bars = &mut groups[i].1;
        let mut label = s.mode.clone();
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
        bars.push(Bar { label, summary: s });
    }
    groups
}

/// Chart width for `n` bars with labels up to `longest` characters.
fn width_for(n: usize, longest: usize) -> u32 {
    let slot = (longest as u32 * 8 + 30).max(150);
    (140 + slot * n as u32 + 40).max(640)
}

/// A category axis: `n` slots, slot `i` spans `[i, i + 1)`, its tick and
/// label at `i + 0.5`.
#[derive(Clone, Copy, Debug)]
struct Categories(usize);

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

fn category_axis(n: usize) -> Categories {
    Categories(n)
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

/// The cycles-per-IPI chart of one group as SVG text.
pub fn render_cycles(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let n = labels.len().max(1);
    let longest = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let mut buf = String::new();
    {
        let root =
            SVGBackend::with_string(&mut buf, (width_for(n, longest), 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = bars
            .iter()
            .filter_map(|b| b.summary.latency.as_ref())
            .map(|l| l.p99.max(l.p50))
            .fold(0.0, f64::max);
        let ymax = if top > 0.0 { top * 1.2 } else { 1.0 };
        let tsc = bars.iter().map(|b| b.summary.tsc_khz).find(|&k| k > 0);
        let caption = format!("{group}: cycles per IPI");
        let mut chart = ChartBuilder::on(&root)
            .caption(&caption, (FONT, 24))
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(85)
            .build_cartesian_2d(category_axis(n), 0f64..ymax)?;
        let fmt = label_at(&labels);
        let y_desc = match tsc {
            Some(k) => format!("TSC cycles per IPI ({:.2} GHz TSC)", k as f64 / 1e6),
            None => "TSC cycles per IPI".to_string(),
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&fmt)
            .y_label_formatter(&|v| human(*v))
            .x_desc("mode: irqchip/apic/ipi (bar = p50, whisker = p99)")
            .y_desc(y_desc)
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 17))
            .draw()?;
        for (i, b) in bars.iter().enumerate() {
            let x = i as f64;
            let Some(l) = &b.summary.latency else {
                chart.draw_series(std::iter::once(Text::new(
                    "no samples",
                    (x + 0.3, ymax * 0.05),
                    (FONT, 15).into_font().color(&BLACK.mix(0.6)),
                )))?;
                continue;
            };
            let c = color(i);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + 0.2, 0.0), (x + 0.8, l.p50)],
                c.mix(0.85).filled(),
            )))?;
            let whisker = ShapeStyle::from(&BLACK).stroke_width(2);
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x + 0.5, l.p50), (x + 0.5, l.p99)],
                whisker,
            )))?;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x + 0.42, l.p99), (x + 0.58, l.p99)],
                whisker,
            )))?;
            // p50 inside the bar when it is tall enough, else above the p99 cap
            // (never across the whisker).
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
            chart.draw_series(std::iter::once(
                EmptyElement::at((x + 0.58, l.p99))
                    + Text::new(
                        format!("p99 {}", human(l.p99)),
                        (4, -6),
                        (FONT, 13).into_font(),
                    ),
            ))?;
        }
        root.present()?;
    }
    Ok(buf)
}

/// The exits-per-IPI chart of one group (stacked by reason) as SVG text.
pub fn render_exits(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let n = labels.len().max(1);
    // Reasons in the legend: by total share over all bars, largest first.
    let mut reasons: Vec<(String, f64)> = Vec::new();
    for b in bars {
        let (Some(e), ipis) = (&b.summary.exits, b.summary.ipis) else {
            continue;
        };
        for (r, v) in &e.by_reason {
            let per = if ipis > 0 {
                *v as f64 / ipis as f64
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
    let sources: Vec<&str> = bars
        .iter()
        .filter_map(|b| b.summary.exits.as_ref().map(|e| e.source))
        .collect();
    let source = match sources.first() {
        Some(s) if sources.iter().all(|x| x == s) => source_name(s).to_string(),
        Some(_) => "mixed sources, see the mode labels".to_string(),
        None => "no exit counters".to_string(),
    };
    let longest_reason = reasons.iter().map(|r| r.0.len()).max().unwrap_or(5);
    let legend_w = (longest_reason as u32 * 8 + 50).max(140);
    let longest = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let width = width_for(n, longest) + legend_w;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (width, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let (left, right) = root.split_horizontally(width - legend_w);
        let top = bars
            .iter()
            .filter_map(|b| b.summary.exits_per_ipi())
            .fold(0.0, f64::max);
        let ymax = if top > 0.0 { top * 1.15 } else { 1.0 };
        let caption = format!("{group}: VM exits per IPI");
        let mut chart = ChartBuilder::on(&left)
            .caption(&caption, (FONT, 24))
            .margin(15)
            .x_label_area_size(55)
            .y_label_area_size(70)
            .build_cartesian_2d(category_axis(n), 0f64..ymax)?;
        let fmt = label_at(&labels);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&fmt)
            .y_label_formatter(&|v| human(*v))
            .x_desc(format!(
                "mode: irqchip/apic/ipi (exits of all vCPUs, from {source})"
            ))
            .y_desc("VM exits per IPI")
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 17))
            .draw()?;
        for (i, b) in bars.iter().enumerate() {
            let x = i as f64;
            let (Some(e), true) = (&b.summary.exits, b.summary.ipis > 0) else {
                chart.draw_series(std::iter::once(Text::new(
                    "no IPIs or exits",
                    (x + 0.25, ymax * 0.05),
                    (FONT, 15).into_font().color(&BLACK.mix(0.6)),
                )))?;
                continue;
            };
            let ipis = b.summary.ipis as f64;
            let mut base = 0.0;
            for (r, v) in &e.by_reason {
                let h = *v as f64 / ipis;
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
        }
        // Legend, outside the plot so it never hides a bar.
        let right = right.margin(60, 10, 5, 10);
        right.draw(&Text::new("exit reason", (0, 0), (FONT, 17).into_font()))?;
        for (i, (r, _)) in reasons.iter().enumerate() {
            let y = 26 + 22 * i as i32;
            right.draw(&Rectangle::new(
                [(0, y), (14, y + 14)],
                color(i).mix(0.85).filled(),
            ))?;
            right.draw(&Text::new(r.as_str(), (20, y), (FONT, 15).into_font()))?;
        }
        root.present()?;
    }
    Ok(buf)
}

/// Human name of a counter source.
pub fn source_name(s: &str) -> &str {
    match s {
        "tracepoints" => "kvm_exit tracepoints",
        "kvm_stats" => "KVM binary stats",
        "userspace_exits" => "userspace exits",
        other => other,
    }
}

/// The latency histograms of one group (one panel per mode) as SVG text.
pub fn render_latency(group: &GroupKey, bars: &[Bar]) -> DrawResult<String> {
    let n = bars.len().max(1);
    let panel_h = 210u32;
    let longest = bars.iter().map(|b| b.label.len()).max().unwrap_or(0);
    let width = (longest as u32 * 8 + 520).max(760);
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
    let (xmin, xmax) = (lo / 1.2, (hi * 1.2).max(lo * 2.0));
    let mut buf = String::new();
    {
        let root =
            SVGBackend::with_string(&mut buf, (width, 50 + panel_h * n as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(&format!("{group}: latency histogram per mode"), (FONT, 24))?;
        let panels = root.split_evenly((n, 1));
        for (i, (b, area)) in bars.iter().zip(panels.iter()).enumerate() {
            let h: &Histogram = &b.summary.histogram;
            let total = h.total().max(1) as f64;
            let top = h
                .buckets
                .iter()
                .map(|x| x.count as f64 * 100.0 / total)
                .fold(0.0, f64::max);
            let caption = match &b.summary.latency {
                Some(l) => format!(
                    "{}: {} samples, p50 {} / p99 {} cycles",
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
                .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..(top * 1.15).max(1.0))?;
            chart
                .configure_mesh()
                .x_label_formatter(&|v| human(*v))
                .y_label_formatter(&|v| format!("{v:.0}%"))
                .x_desc("latency, TSC cycles (log scale)")
                .y_desc("% of samples")
                .label_style((FONT, 14))
                .axis_desc_style((FONT, 15))
                .draw()?;
            let c = color(i);
            chart.draw_series(h.buckets.iter().map(|x| {
                Rectangle::new(
                    [
                        (x.lo.max(1) as f64, 0.0),
                        (x.hi as f64, x.count as f64 * 100.0 / total),
                    ],
                    c.mix(0.85).filled(),
                )
            }))?;
            if let Some(l) = &b.summary.latency {
                let top = (top * 1.15).max(1.0);
                for (v, name) in [(l.p50, "p50"), (l.p99, "p99")] {
                    if v <= 0.0 {
                        continue;
                    }
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(v, 0.0), (v, top)],
                        ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(1),
                    )))?;
                    chart.draw_series(std::iter::once(Text::new(
                        name,
                        (v * 1.02, top * 0.95),
                        (FONT, 13).into_font(),
                    )))?;
                }
            }
        }
        root.present()?;
    }
    Ok(buf)
}

fn write(path: &Path, text: &str) -> Result<(), OutputError> {
    std::fs::write(path, text).map_err(|e| OutputError::Write {
        what: path.display().to_string(),
        problem: e.to_string(),
    })
}

/// Writes the three charts of every group into `dir` (created if missing);
/// returns the files written.
pub fn plot_summaries(
    entries: Vec<(Option<String>, RunSummary)>,
    dir: &Path,
) -> Result<Vec<PathBuf>, OutputError> {
    std::fs::create_dir_all(dir).map_err(|e| OutputError::Write {
        what: dir.display().to_string(),
        problem: e.to_string(),
    })?;
    let mut written = Vec::new();
    for (key, bars) in group(entries) {
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
    Ok(written)
}

/// Charts of in-memory reports into `dir`: per workload group, one bar per mode.
pub fn plot_runs(runs: &[&RunReport], dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    plot_summaries(runs.iter().map(|r| (None, summarize(r))).collect(), dir)
}

/// Charts of recorded documents (origin = file name) into `dir`.
pub fn plot_docs(docs: &[(String, Document)], dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    let entries = docs
        .iter()
        .flat_map(|(o, d)| d.runs.iter().map(move |r| (Some(o.clone()), summarize(r))))
        .collect();
    plot_summaries(entries, dir)
}
