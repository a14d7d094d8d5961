//! Results for people and programs, all from the one results model
//! ([`crate::results`]): the text report, CSV rows, SVG charts, the
//! side-by-side comparison of recorded runs, and the sweep progress bar.
pub mod compare;
pub mod csv;
pub mod dest;
pub mod junit;
pub mod progress;
pub mod scale_chart;
pub mod sweep_tables;

pub mod svg;
pub mod tap;
pub mod text;

use std::io::IsTerminal;

/// Errors of the output writers and readers.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A results file (or text) that cannot be used.
    #[error("{what}: {problem}")]
    BadInput {
        /// The file (or input) name.
        what: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Writing an output failed.
    #[error("writing {what}: {problem}")]
    Write {
        /// The output.
        what: String,
        /// Why.
        problem: String,
    },
    /// An in-memory report did not convert to the results model (a bug).
    #[error("results model: {0}")]
    Model(String),
}

/// Whether to colour text on stdout (a TTY, and `NO_COLOR` unset).
pub fn color_stdout() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// Whether to colour text on stderr (a TTY, and `NO_COLOR` unset).
pub fn color_stderr() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
}

/// Text colours used in terminal output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tint {
    /// Worse (slower, more exits) or an error.
    Red,
    /// Better.
    Green,
    /// Missing or a caveat.
    Yellow,
}

/// `text` wrapped in the ANSI colour `tint` when `color` is true.
pub fn paint(text: &str, tint: Tint, color: bool) -> String {
    if !color {
        return text.to_string();
    }
    let code = match tint {
        Tint::Red => 31,
        Tint::Green => 32,
        Tint::Yellow => 33,
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Longest [`slug`], bytes: a chart's name adds at most a few dozen bytes,
/// so every file name stays far below NAME_MAX (255) whatever a payload or
/// phase is called.
pub const MAX_SLUG: usize = 96;

/// A file-name-safe form of `s`: ASCII alphanumerics, '-', '_' and '.'; other
/// characters become '-'. Longer than [`MAX_SLUG`]: cut, with a hash of the
/// whole of `s` appended so that two long names that share a prefix stay
/// apart.
pub fn slug(s: &str) -> String {
    let full = slug_unbounded(s);
    if full.len() <= MAX_SLUG {
        return full;
    }
    // FNV-1a: stable across builds and platforms (file names must not change).
    let hash = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = MAX_SLUG - 9;
    format!("{}-{:08x}", full[..keep].trim_end_matches('-'), hash as u32)
}

fn slug_unbounded(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').to_string()
}

/// A count in a short human form: 950, 12.3k, 4.57M, 1.2G, 10M (trailing
/// zeros dropped).
pub fn human(v: f64) -> String {
    let a = v.abs();
    let (scaled, digits, suffix) = if a >= 1e9 {
        (v / 1e9, 2, "G")
    } else if a >= 1e6 {
        (v / 1e6, 2, "M")
    } else if a >= 1e4 {
        (v / 1e3, 1, "k")
    } else if a >= 100.0 {
        (v, 0, "")
    } else {
        (v, 2, "")
    };
    let mut s = format!("{scaled:.digits$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    s + suffix
}

/// A duration in ns in a short human form: 850 ns, 7.5 µs, 1.57 ms, 2.1 s.
pub fn human_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_numbers() {
        assert_eq!(slug("pingpong, 2 vCPUs / spin"), "pingpong-2-vCPUs-spin");
        // Issue 20, case 14: a 245-character payload name makes a file name
        // that fits, and two such names stay apart.
        let a = slug(&"p".repeat(245));
        let b = slug(&format!("{}q", "p".repeat(244)));
        assert!(a.len() <= MAX_SLUG && b.len() <= MAX_SLUG, "{a}");
        assert_ne!(a, b);
        assert_eq!(slug(&"x".repeat(MAX_SLUG)), "x".repeat(MAX_SLUG));
        assert_eq!(human(950.0), "950");
        assert_eq!(human(12_345.0), "12.3k");
        assert_eq!(human(29_078_070.0), "29.08M");
        assert_eq!(human(2.5), "2.5");
        assert_eq!(human(1_000_000.0), "1M");
        assert_eq!(human(90_000_000.0), "90M");
        assert_eq!(human(10_000.0), "10k");
        assert_eq!(human(3.0), "3");
        assert_eq!(human_ns(7_450.0), "7.5 µs");
        assert_eq!(human_ns(1_571_819.0), "1.57 ms");
        assert_eq!(human_ns(850.0), "850 ns");
        assert_eq!(paint("x", Tint::Red, false), "x");
        assert_eq!(paint("x", Tint::Red, true), "\x1b[31mx\x1b[0m");
    }
}
