//! How figures, times and verdicts read for people: short numbers, ANSI
//! colour where the terminal takes it, ISO 8601 times.
use std::io::IsTerminal;

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

/// Unix seconds as an ISO 8601 time in UTC, e.g. `2026-12-02T02:24:11Z`
/// (the seconds themselves when out of chrono's range).
pub fn iso_time(unix_secs: u64) -> String {
    i64::try_from(unix_secs)
        .ok()
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .map_or_else(
            || format!("{unix_secs} (Unix time)"),
            |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
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
    fn numbers() {
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
        assert_eq!(iso_time(1_796_172_296), "2026-12-02T00:44:56Z");
        assert_eq!(iso_time(u64::MAX), format!("{} (Unix time)", u64::MAX));
        assert_eq!(paint("x", Tint::Red, false), "x");
        assert_eq!(paint("x", Tint::Red, true), "\x1b[31mx\x1b[0m");
    }
}
