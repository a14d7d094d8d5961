//! What the per-group charts (`svg`) and the scale chart (`scale_chart`)
//! share: the result type, the palette and font, what a chart is drawn
//! from and where it came from (the footer every chart carries), and the
//! logarithmic axis.
use ipivmm_analysis::results::summary::RunSummary;
use ipivmm_analysis::results::{Document, RunReport};
use ipivmm_host::facts::{HostInfo, KvmBackend};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::error::Error;

/// What drawing a chart returns.
pub type DrawResult<T> = Result<T, Box<dyn Error>>;

/// Colours of modes and exit reasons (Tableau 10, and two more: one per
/// irqchip/apic/ipi).
const PALETTE: [RGBColor; 12] = [
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
    RGBColor(0, 0, 128),
    RGBColor(128, 128, 0),
];

/// The charts' font.
pub(crate) const FONT: &str = "sans-serif";

/// Colour `i` of the palette (wrapping).
pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The colour of a mode, the same in every chart: one per irqchip/apic/ipi
/// (the label's first word), lighter where the label says more (`apicv-inhibit`,
/// levers, a placement, a host setting), so that a colour means a mode.
pub(crate) fn mode_color(label: &str) -> RGBColor {
    let base = label.split(' ').next().unwrap_or_default();
    let index_of =
        |part: Option<&str>, names: &[&str]| part.and_then(|p| names.iter().position(|n| *n == p));
    let mut parts = base.split('/');
    let slot = match (
        index_of(parts.next(), &["kernel", "split", "user"]),
        index_of(parts.next(), &["xapic", "x2apic"]),
        index_of(parts.next(), &["icr", "pv"]),
    ) {
        (Some(c), Some(a), Some(i)) => c * 4 + a * 2 + i,
        // Not a mode label (a custom name): a stable colour of its own.
        _ => base.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        }),
    };
    let c = color(slot);
    if base.len() == label.trim_end().len() {
        return c;
    }
    // A variant of the mode: its colour, 40% of the way to white.
    let light = |v: u8| v + ((255 - u16::from(v)) * 2 / 5) as u8;
    RGBColor(light(c.0), light(c.1), light(c.2))
}

/// The widest chart `--plot` writes, pixels: what a screen or a page shows
/// without scrolling.
pub(crate) const MAX_WIDTH: u32 = 2000;

/// A summary to chart and where it came from.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The file it was read from (None: a live run).
    pub origin: Option<String>,
    /// The figures.
    pub summary: RunSummary,
    /// The host and ipivmm that measured them, and the run's APIC mode.
    pub credit: Credit,
}

/// The host and the ipivmm that measured a chart's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    /// The host's name (None: not recorded, an older file).
    pub hostname: Option<String>,
    /// The KVM backend (None: the host was not fingerprinted).
    pub backend: Option<KvmBackend>,
    /// CPU model name.
    pub cpu_model: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// The ipivmm version that measured.
    pub version: String,
}

impl Provenance {
    /// Of a host fingerprint and the ipivmm `version` that measured on it.
    pub fn new(host: Option<&HostInfo>, version: &str) -> Self {
        Self {
            hostname: host.and_then(|h| h.hostname.clone()),
            backend: host.map(|h| h.backend.clone()),
            cpu_model: host.map(|h| h.cpu_model.clone()),
            kernel: host.map(|h| h.kernel_release.clone()),
            version: version.to_string(),
        }
    }

    /// Whether the figures come from a software KVM (kvm_pvm: no VMX/SVM),
    /// not from hardware interrupt virtualization.
    pub fn software(&self) -> bool {
        self.backend == Some(KvmBackend::KvmPvm)
    }

    /// The backend as a chart names it, with the software KVM's warning.
    pub fn backend_text(&self) -> String {
        match &self.backend {
            Some(KvmBackend::KvmPvm) => {
                "kvm_pvm: SOFTWARE KVM (no VMX/SVM), not hardware IPI costs".into()
            }
            Some(b @ (KvmBackend::KvmIntel | KvmBackend::KvmAmd)) => format!("{b} (hardware KVM)"),
            Some(b) => format!("{b} KVM backend"),
            None => "KVM backend not recorded".into(),
        }
    }

    /// Host, CPU, kernel and version in one line.
    pub fn host_text(&self) -> String {
        format!(
            "host {} · CPU {} · Linux {} · ipivmm {}",
            self.hostname.as_deref().unwrap_or("(name not recorded)"),
            self.cpu_model.as_deref().unwrap_or("not recorded"),
            self.kernel.as_deref().unwrap_or("not recorded"),
            self.version
        )
    }
}

/// What a chart credits one of its series (a bar, a line's point) with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credit {
    /// Host and ipivmm.
    pub provenance: Provenance,
    /// The run's APIC mode (`xapic`, `x2apic`).
    pub apic: String,
}

impl Credit {
    /// Of `run` in document `doc` (None: a live run, credited with its own
    /// host and this ipivmm).
    pub fn of(run: &RunReport, doc: Option<&Document>) -> Self {
        let provenance = match doc {
            Some(d) => Provenance::new(d.host.as_ref().or(run.host.as_ref()), &d.ipivmm_version),
            None => Provenance::new(run.host.as_ref(), env!("CARGO_PKG_VERSION")),
        };
        Self {
            provenance,
            apic: run.mode.apic.to_string(),
        }
    }
}

/// Height of one footer line, pixels.
pub(crate) const FOOTER_LINE_H: u32 = 18;

/// A footer line and whether it warns (a software KVM: drawn in red).
pub type FooterLine = (String, bool);

/// Most distinct hosts a footer lists before "... N more".
const MAX_FOOTER_HOSTS: usize = 4;

/// The footer of a chart of series credited `credits` (with their sample
/// counts and origins): each distinct backend and host, the APIC modes and
/// the samples per series.
pub fn footer(series: &[(&Credit, Option<&str>, u64)], per: &str) -> Vec<FooterLine> {
    let mut hosts: Vec<(&Provenance, Vec<&str>)> = Vec::new();
    for (c, origin, _) in series {
        match hosts.iter_mut().find(|(p, _)| **p == c.provenance) {
            Some((_, o)) => o.extend(origin.iter().copied()),
            None => hosts.push((&c.provenance, origin.iter().copied().collect())),
        }
    }
    let mut lines: Vec<FooterLine> = Vec::new();
    let several = hosts.len() > 1;
    for (p, origins) in hosts.iter().take(MAX_FOOTER_HOSTS) {
        let from = match (several, origins.first()) {
            (true, Some(o)) => format!("[{o}] "),
            _ => String::new(),
        };
        lines.push((format!("{from}{}", p.backend_text()), p.software()));
        lines.push((format!("{from}{}", p.host_text()), false));
    }
    if hosts.len() > MAX_FOOTER_HOSTS {
        lines.push((
            format!(
                "... {} more hosts (see the results files)",
                hosts.len() - MAX_FOOTER_HOSTS
            ),
            false,
        ));
    }
    let mut apics: Vec<&str> = series.iter().map(|(c, _, _)| c.apic.as_str()).collect();
    apics.sort_unstable();
    apics.dedup();
    let lo = series.iter().map(|s| s.2).min().unwrap_or(0);
    let hi = series.iter().map(|s| s.2).max().unwrap_or(0);
    let samples = if lo == hi {
        format!("{lo}")
    } else {
        format!("{lo} to {hi}")
    };
    lines.push((
        format!("APIC {} · samples per {per}: {samples}", apics.join(", ")),
        false,
    ));
    lines
}

/// Height of `lines` as a footer, pixels (with a margin).
pub(crate) fn footer_height(lines: &[FooterLine]) -> u32 {
    FOOTER_LINE_H * lines.len() as u32 + 10
}

/// Draws `lines` into `area` (the strip [`footer_height`] high at the
/// bottom of a chart).
pub(crate) fn draw_footer(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    lines: &[FooterLine],
) -> DrawResult<()> {
    for (i, (text, warn)) in lines.iter().enumerate() {
        let color = if *warn {
            RGBColor(200, 0, 0)
        } else {
            RGBColor(60, 60, 60)
        };
        let style = (FONT, 13).into_font().color(&color);
        area.draw(&Text::new(
            text.as_str(),
            (15, 4 + (FOOTER_LINE_H * i as u32) as i32),
            style,
        ))?;
    }
    Ok(())
}

/// A white canvas `width` wide for a chart `height` high with `foot`
/// drawn below it (its [`footer_height`] added): the area the chart goes
/// in. Every chart starts here, so every chart carries its footer.
pub(crate) fn framed_canvas<'a>(
    buf: &'a mut String,
    width: u32,
    height: u32,
    foot: &[FooterLine],
) -> DrawResult<DrawingArea<SVGBackend<'a>, plotters::coord::Shift>> {
    let root =
        SVGBackend::with_string(buf, (width, height + footer_height(foot))).into_drawing_area();
    root.fill(&WHITE)?;
    let (chart, foot_area) = root.split_vertically(height);
    draw_footer(&foot_area, foot)?;
    Ok(chart)
}

/// A logarithmic axis over `[lo, hi]` (both > 0) whose ticks are
/// [`log_ticks`], labelled by [`tick_label`].
#[derive(Clone, Copy, Debug)]
pub struct LogAxis {
    lo: f64,
    hi: f64,
}

impl LogAxis {
    /// The axis over `[lo, hi]`; `lo` is raised to 1 and `hi` above `lo`.
    pub fn new(lo: f64, hi: f64) -> Self {
        let lo = lo.max(1.0);
        Self {
            lo,
            hi: hi.max(lo * 1.5),
        }
    }
}

impl Ranged for LogAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let (a, b) = (self.lo.ln(), self.hi.ln());
        let t = (v.max(self.lo / 1e3).ln() - a) / (b - a);
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        log_ticks(self.lo, self.hi)
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for LogAxis {
    fn format(v: &f64) -> String {
        tick_label(*v)
    }
}

/// Ticks of a log axis over `[lo, hi]`: 1, 2 and 5 × 10^k for ranges up to
/// four decades; for wider ones 1 × 10^k, plus the first m × 10^k (m in
/// 2..9) of the lowest decade when its 1 × 10^k is below `lo`, so that every
/// decade on the axis has a label; 1..9 × 10^k when that would leave fewer
/// than three ticks, and every 10^(k-1) when even that would.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = (lo.max(1.0), hi.max(lo.max(1.0)));
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let within = |mults: &[f64]| -> Vec<f64> {
        (k0..=k1)
            .flat_map(|k| mults.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let ticks = if k1 - k0 <= 4 {
        within(&[1.0, 2.0, 5.0])
    } else {
        let mut t = within(&[1.0]);
        let base = 10f64.powi(k0);
        if lo > base {
            let m = (lo / base).ceil();
            if m < 10.0 && m * base <= hi {
                t.insert(0, m * base);
            }
        }
        t
    };
    if ticks.len() >= 3 {
        return ticks;
    }
    let ticks = within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    if ticks.len() >= 3 {
        return ticks;
    }
    // Less than a decade wide: every 10^(k-1).
    let step = 10f64.powi(k0 - 1);
    ((lo / step).ceil() as u64..=(hi / step).floor() as u64)
        .map(|m| m as f64 * step)
        .collect()
}

/// A tick value in cycles with a k/M/G suffix: 1, 20, 500, 1k, 2M, 5G, 1.5k.
pub fn tick_label(v: f64) -> String {
    let (div, suffix) = if v >= 1e9 {
        (1e9, "G")
    } else if v >= 1e6 {
        (1e6, "M")
    } else if v >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / div;
    let text = if (x - x.round()).abs() < 1e-6 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    };
    text + suffix
}
