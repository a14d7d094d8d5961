//! What counting cost, measured over separate pairs of runs
//! (`run --observer-effect N`, `run::observer::measure`): the figures a
//! report carries. The in-run measure, the counted÷uncounted ratio of a
//! phase measured both ways, is in [`super::summary::RunSummary`].
use crate::mode::ExitReasons;
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
        let pairs = match self.pairs {
            1 => "1 pair of runs".to_string(),
            n => format!("{n} pairs of runs"),
        };
        format!(
            "counting cost: p50 {:.0} cycles with the counters ({how}) vs {:.0} without, {:+.1}% ({pairs}: {}){failed}",
            self.with_counters_p50,
            self.without_counters_p50,
            (self.ratio - 1.0) * 100.0,
            self.noise()
        )
    }

    /// Whether the pairs tell counting's cost from the noise between runs:
    /// the median of the pairs' ratios with its interval, when there are
    /// enough pairs for one.
    fn noise(&self) -> String {
        let ratios: Vec<f64> = self
            .runs
            .iter()
            .filter(|(without, _)| *without > 0.0)
            .map(|(without, with)| with / without)
            .collect();
        let interval = (ratios.len() >= crate::stats::MIN_REPEATS)
            .then(|| crate::stats::median_interval(&ratios, crate::stats::CONFIDENCE))
            .flatten();
        match interval {
            None => format!(
                "too few to tell from the noise between runs, which is often 10% or more; \
                 --observer-effect {} or more",
                crate::results::repeats::ConfigurationStats::DEFAULT_REPEATS
            ),
            Some(i) => {
                let pct = |r: f64| (r - 1.0) * 100.0;
                let what = match i.lo <= 1.0 && 1.0 <= i.hi {
                    true => "within the noise",
                    false => "beyond the noise",
                };
                format!(
                    "{what}, the pairs' ratio {:+.1}% to {:+.1}% at {:.0}%",
                    pct(i.lo),
                    pct(i.hi),
                    i.coverage * 100.0
                )
            }
        }
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
        // One pair says so, in the singular, and that it is noise.
        let one = ObserverEffect {
            pairs: 1,
            runs: vec![(1000.0, 1082.0)],
            ..e.clone()
        };
        assert!(
            one.text()
                .contains("(1 pair of runs: too few to tell from the noise between runs"),
            "{}",
            one.text()
        );
        // Five pairs: their ratios' interval says whether it is noise.
        let steady = ObserverEffect {
            pairs: 5,
            runs: [1.05, 1.06, 1.04, 1.05, 1.07]
                .map(|r| (1000.0, 1000.0 * r))
                .to_vec(),
            ..e.clone()
        };
        assert!(
            steady.text().contains(
                "(5 pairs of runs: beyond the noise, the pairs' ratio +4.0% to +7.0% at 94%)"
            ),
            "{}",
            steady.text()
        );
        let noisy = ObserverEffect {
            runs: [0.9, 1.2, 1.0, 0.95, 1.1]
                .map(|r| (1000.0, 1000.0 * r))
                .to_vec(),
            ..steady
        };
        assert!(
            noisy.text().contains("within the noise"),
            "{}",
            noisy.text()
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
