//! What counting cost, measured over separate pairs of runs
//! (`run --observer-effect N`, `run::observer::measure`): the figures a
//! report carries. The in-run measure, the counted÷uncounted ratio of a
//! phase measured both ways, is in [`super::summary::RunSummary`].
use crate::config::ExitReasons;
use serde::{Deserialize, Serialize};

/// What counting cost one configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObserverEffect {
    /// Pairs of runs measured.
    pub pairs: u32,
    /// How exits were counted by reason in the counted runs (as asked).
    pub exit_reasons: ExitReasons,
    /// What the counted runs' sources say counted them
    /// (`results::mechanism`), one entry per distinct answer; empty in
    /// files recorded before it was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mechanism: Vec<String>,
    /// Median p50 latency with the counters attached, TSC cycles.
    pub with_counters_p50: f64,
    /// Median p50 latency with every counter detached, TSC cycles.
    pub without_counters_p50: f64,
    /// `with / without`: 1.03 means counting added 3%.
    pub ratio: f64,
    /// Every run's p50, in run order: (without, with).
    pub runs: Vec<(f64, f64)>,
    /// Runs of the pairs that failed (their pair is left out), one line
    /// each: which run, and how it ended. The measured run itself still
    /// runs and its results are written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

impl ObserverEffect {
    /// One line for reports.
    pub fn text(&self) -> String {
        let failed = match self.failed.len() {
            0 => String::new(),
            n => format!("; {n} runs failed: {}", self.failed.join("; ")),
        };
        if self.pairs == 0 {
            return format!("counting cost: not measured{failed}");
        }
        // What counted, as the runs say; as asked only for older files.
        let how = match self.mechanism.is_empty() {
            true => format!("exit reasons {}", self.exit_reasons),
            false => format!("exit counting: {}", self.mechanism.join(", ")),
        };
        format!(
            "counting cost: p50 {:.0} cycles with the counters ({how}) vs {:.0} without, {:+.1}% ({} pairs of runs){failed}",
            self.with_counters_p50,
            self.without_counters_p50,
            (self.ratio - 1.0) * 100.0,
            self.pairs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text() {
        let e = ObserverEffect {
            pairs: 3,
            exit_reasons: ExitReasons::Sampled,
            with_counters_p50: 1030.0,
            without_counters_p50: 1000.0,
            ratio: 1.03,
            runs: vec![],
            failed: vec![],
            mechanism: vec![],
        };
        assert!(
            e.text().contains("+3.0%") && e.text().contains("exit reasons sampled"),
            "{}",
            e.text()
        );
        // Asked for bpf, the runs say the sampler counted: the line says so.
        let e = ObserverEffect {
            exit_reasons: ExitReasons::Bpf,
            mechanism: vec!["sampler (bpf unavailable: not root)".into()],
            ..e
        };
        assert!(
            e.text()
                .contains("exit counting: sampler (bpf unavailable: not root)")
                && !e.text().contains("bpf)"),
            "{}",
            e.text()
        );
    }
}
