//! What the per-group charts (`svg`) and the scale chart (`scale_chart`)
//! share: the result type, the palette and font, what a chart is drawn
//! from, and the logarithmic axis.
use crate::results::summary::RunSummary;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::error::Error;

/// What drawing a chart returns.
pub type DrawResult<T> = Result<T, Box<dyn Error>>;

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

/// The charts' font.
pub(crate) const FONT: &str = "sans-serif";

/// Colour `i` of the palette (wrapping).
pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A summary to chart and where it came from (a file name; None for a live run).
pub type Entry = (Option<String>, RunSummary);

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
