//! The scale chart: how a workload's figures grow with the vCPU count, one
//! line per mode in its colour through the median of each vCPU count's
//! repeats (their interval as an error bar), one panel per metric ([`Metric::scale`]: cost per
//! operation and per delivered IPI, exits per operation and per IPI), the
//! vCPU count across on a log2 axis, a panel's values on a log axis when
//! they span more than a factor of 20 (and none is below 1). Written as `<workload>-<target>-scale.svg`
//! by `--plot` for every workload that ran at two or more vCPU counts.
use super::chart_kit::{
    footer, framed_canvas, mode_color, Credit, DrawResult, Entry, FooterLine, LogAxis, FONT,
};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::summary::RunSummary;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;

/// A point of a line: the vCPU count and each repeat's figures there.
pub type Point = (usize, Vec<RunSummary>);

/// A point as drawn: N, the median, and the median's interval (lo, hi).
type Drawn = (f64, f64, Option<(f64, f64)>);

/// Runs of one workload and target wait at several vCPU counts.
#[derive(Clone, Debug)]
pub struct ScaleGroup {
    /// Workload (or custom payload) name.
    pub workload: String,
    /// Target wait.
    pub target: String,
    /// What one operation is.
    pub operation: &'static str,
    /// One line per mode: its label and its (vCPUs, each repeat's figures)
    /// points, by N (runs that completed only).
    pub lines: Vec<(String, Vec<Point>)>,
    /// Every point's credit, origin and samples (for the footer).
    pub credits: Vec<(Credit, Option<String>, u64)>,
    /// Runs left out because they did not complete: `label N=n`.
    pub incomplete: Vec<String>,
    /// Where each point's runs came from: (line label, N, file).
    points: Vec<(String, usize, Option<String>)>,
}

impl ScaleGroup {
    /// File-name stem, e.g. `broadcast-halt-scale`.
    pub fn slug(&self) -> String {
        ipivmm_analysis::results::slug::slug(&format!("{}-{}-scale", self.workload, self.target))
    }

    /// The vCPU counts of the group, ascending.
    pub fn counts(&self) -> Vec<usize> {
        let mut n: Vec<usize> = self
            .lines
            .iter()
            .flat_map(|(_, p)| p.iter().map(|(n, _)| *n))
            .collect();
        n.sort_unstable();
        n.dedup();
        n
    }
}

/// The entries grouped by workload and target wait, keeping the groups that
/// ran at two or more vCPU counts; a line per mode label (with the phase
/// when a group shows several, and the file when two files hold the same
/// mode at one N).
pub fn scale_groups(entries: &[Entry]) -> Vec<ScaleGroup> {
    let mut groups: Vec<ScaleGroup> = Vec::new();
    for Entry {
        origin,
        summary: s,
        credit,
    } in entries
    {
        let g = match groups
            .iter_mut()
            .position(|g| g.workload == s.group.workload && g.target == s.group.target)
        {
            Some(i) => &mut groups[i],
            None => {
                groups.push(ScaleGroup {
                    workload: s.group.workload.clone(),
                    target: s.group.target.clone(),
                    operation: s.operation,
                    lines: Vec::new(),
                    credits: Vec::new(),
                    incomplete: Vec::new(),
                    points: Vec::new(),
                });
                groups.last_mut().expect("just pushed")
            }
        };
        let several_phases = entries.iter().any(|e| {
            let o = &e.summary;
            o.group.workload == s.group.workload
                && o.group.target == s.group.target
                && o.phase != s.phase
        });
        let mut label = match (&s.phase, several_phases) {
            (Some(p), true) => format!("{} · {p}", s.mode),
            _ => s.mode.clone(),
        };
        // The same mode at the same N from the same file is a repeat of
        // that point; from another file, a line of its own.
        let n = s.group.vcpus;
        let taken = |l: &str, g: &ScaleGroup| g.points.iter().any(|(x, m, _)| x == l && *m == n);
        let mine = |l: &str, g: &ScaleGroup| {
            g.points
                .iter()
                .any(|(x, m, o)| x == l && *m == n && o == origin)
        };
        if taken(&label, g) && !mine(&label, g) {
            if let Some(o) = origin {
                label = format!("{label} [{o}]");
            }
            let base = label.clone();
            let mut k = 2;
            while taken(&label, g) && !mine(&label, g) {
                label = format!("{base} #{k}");
                k += 1;
            }
        }
        // A run that did not complete has the figures of the phase it got
        // to (a warm-up, an idle wait): never a point of the line.
        if !s.completed {
            g.incomplete.push(format!("{label} N={}", s.group.vcpus));
            continue;
        }
        g.points.push((label.clone(), n, origin.clone()));
        let samples = s.latency.as_ref().map_or(0, |l| l.count);
        g.credits.push((credit.clone(), origin.clone(), samples));
        let line = match g.lines.iter().position(|(l, _)| *l == label) {
            Some(i) => &mut g.lines[i].1,
            None => {
                g.lines.push((label, Vec::new()));
                &mut g.lines.last_mut().expect("just pushed").1
            }
        };
        match line.iter_mut().find(|(n, _)| *n == s.group.vcpus) {
            Some((_, repeats)) => repeats.push(s.clone()),
            None => line.push((s.group.vcpus, vec![s.clone()])),
        }
    }
    for g in &mut groups {
        for (_, pts) in &mut g.lines {
            pts.sort_by_key(|(n, _)| *n);
        }
    }
    groups.retain(|g| g.counts().len() >= 2);
    groups
}

/// A log2 axis over vCPU counts, ticked at the counts that ran.
#[derive(Clone, Debug)]
struct CountAxis {
    counts: Vec<usize>,
    lo: f64,
    hi: f64,
}

impl CountAxis {
    fn new(counts: Vec<usize>) -> Self {
        let lo = counts.first().copied().unwrap_or(1).max(1) as f64;
        let hi = (counts.last().copied().unwrap_or(2) as f64).max(lo * 2.0);
        Self {
            counts,
            lo: lo / 1.25,
            hi: hi * 1.25,
        }
    }
}

impl Ranged for CountAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let (a, b) = (self.lo.log2(), self.hi.log2());
        let t = (v.max(self.lo).log2() - a) / (b - a);
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Every count when they fit, else every other one.
        let step = (self.counts.len() / hint.max_num_points().max(1)).max(1);
        self.counts
            .iter()
            .step_by(step)
            .map(|&n| n as f64)
            .collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for CountAxis {
    fn format(v: &f64) -> String {
        format!("{v:.0}")
    }
}

const PANEL_H: u32 = 330;
const LEGEND_W: u32 = 330;

/// The scale chart of `g` as SVG text.
pub fn render_scale(g: &ScaleGroup) -> DrawResult<String> {
    let shown = Metric::shown(g.lines.iter().flat_map(|(_, p)| {
        p.iter()
            .flat_map(|(_, r)| r.iter().filter_map(|s| s.ipis_per_operation()))
    }));
    let metrics = Metric::scale(shown);
    let width = 760 + LEGEND_W;
    let foot = scale_footer(g);
    let height = 50 + PANEL_H * metrics.len() as u32;
    let mut buf = String::new();
    {
        let root = framed_canvas(&mut buf, width, height, &foot)?;
        let title = format!(
            "{}, target {}: cost against vCPU count (one {} = one sample)",
            g.workload, g.target, g.operation
        );
        let root = root.titled(&title, (FONT, 22))?;
        let (plots, legend) = root.split_horizontally(width - LEGEND_W);
        for (m, area) in metrics.iter().zip(plots.split_evenly((metrics.len(), 1))) {
            draw_panel(&area, g, *m)?;
        }
        draw_legend(&legend.margin(40, 10, 5, 10), g)?;
        root.present()?;
    }
    Ok(buf)
}

/// Most incomplete runs a scale chart's footer names.
const MAX_INCOMPLETE_NAMED: usize = 4;

/// The footer: where the points were measured, and the runs left out.
fn scale_footer(g: &ScaleGroup) -> Vec<FooterLine> {
    let series: Vec<(&Credit, Option<&str>, u64)> = g
        .credits
        .iter()
        .map(|(c, o, n)| (c, o.as_deref(), *n))
        .collect();
    let mut lines = footer(&series, "run");
    if !g.incomplete.is_empty() {
        let mut named: Vec<&str> = g
            .incomplete
            .iter()
            .take(MAX_INCOMPLETE_NAMED)
            .map(String::as_str)
            .collect();
        let more = g.incomplete.len().saturating_sub(MAX_INCOMPLETE_NAMED);
        let more = format!("{more} more");
        if g.incomplete.len() > MAX_INCOMPLETE_NAMED {
            named.push(&more);
        }
        lines.push((
            format!(
                "not drawn: {} runs that did not complete ({})",
                g.incomplete.len(),
                named.join(", ")
            ),
            true,
        ));
    }
    lines
}

/// A line's points for `m`: at each N the median over the repeats, and
/// the median's interval over them (from two repeats).
fn points(pts: &[Point], m: Metric) -> Vec<Drawn> {
    pts.iter()
        .filter_map(|(n, repeats)| {
            let values: Vec<f64> = repeats.iter().filter_map(|s| m.value(s)).collect();
            let median = ipivmm_analysis::stats::median(&values)?;
            let interval = (values.len() > 1)
                .then(|| ipivmm_analysis::stats::Interval::of_median(&values))
                .flatten()
                .map(|i| (i.lo, i.hi));
            Some((*n as f64, median, interval))
        })
        .collect()
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    g: &ScaleGroup,
    m: Metric,
) -> DrawResult<()> {
    let x = CountAxis::new(g.counts());
    let all: Vec<f64> = g
        .lines
        .iter()
        .flat_map(|(_, p)| {
            points(p, m)
                .into_iter()
                .flat_map(|(_, v, i)| [Some(v), i.map(|i| i.0), i.map(|i| i.1)])
                .flatten()
        })
        .collect();
    let (lo, hi) = all
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    let name = m.name(g.operation);
    if all.is_empty() {
        area.draw(&Text::new(
            format!("{name}: no figures"),
            (40, 40),
            (FONT, 16).into_font(),
        ))?;
        return Ok(());
    }
    let x_desc = "vCPUs (log2)";
    if lo >= 1.0 && hi / lo > 20.0 {
        // Figures that span decades as N grows (costs, exits per broadcast): log scale.
        let y = LogAxis::new(lo / 1.5, hi * 1.5);
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(format!("{name} (log)"))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()?;
        draw_lines(&mut chart, g, m)?;
    } else {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(x, 0f64..(hi * 1.15).max(1e-3))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_label_formatter(&|v| super::style::human(*v))
            .y_desc(name)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()?;
        draw_lines(&mut chart, g, m)?;
    }
    Ok(())
}

/// One line per mode in its colour, a dot at each vCPU count (the median
/// of its repeats) with their interval as an error bar.
fn draw_lines<Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<CountAxis, Y>>,
    g: &ScaleGroup,
    m: Metric,
) -> DrawResult<()>
where
    Y: Ranged<ValueType = f64>,
{
    for (label, p) in &g.lines {
        let c = mode_color(label);
        let pts = points(p, m);
        let xy: Vec<(f64, f64)> = pts.iter().map(|(n, v, _)| (*n, *v)).collect();
        chart.draw_series(LineSeries::new(xy.clone(), c.stroke_width(2)))?;
        chart.draw_series(xy.into_iter().map(|xy| Circle::new(xy, 4, c.filled())))?;
        chart.draw_series(pts.iter().filter_map(|(n, _, i)| {
            let (lo, hi) = (*i)?;
            Some(PathElement::new(
                vec![(*n, lo), (*n, hi)],
                c.stroke_width(2),
            ))
        }))?;
    }
    Ok(())
}

fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    g: &ScaleGroup,
) -> DrawResult<()> {
    area.draw(&Text::new("mode", (0, 0), (FONT, 17).into_font()))?;
    for (i, (label, _)) in g.lines.iter().enumerate() {
        let y = 26 + 22 * i as i32;
        area.draw(&Rectangle::new(
            [(0, y + 5), (18, y + 9)],
            mode_color(label).filled(),
        ))?;
        area.draw(&Text::new(label.as_str(), (24, y), (FONT, 15).into_font()))?;
    }
    Ok(())
}
