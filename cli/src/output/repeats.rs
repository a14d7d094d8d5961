//! The repeats of each configuration as text (`run` and `sweep`, after
//! their tables): the p50 as the median over repeats with its 95% interval
//! and spread, each repeat's own p50 interval, counts as counts, what a
//! comparison at these repeats can detect, and what makes the figures
//! unstable ([`ipivmm_analysis::results::repeats`]).
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::repeats::{ConfigurationStats, CountStats, FigureStats};
use ipivmm_analysis::stats::Interval;
use std::fmt::Write;

/// How the repeat count was chosen, for the line that says it.
#[derive(Clone, Copy, Debug)]
pub struct RepeatChoice {
    /// Repeats per configuration.
    pub repeats: u32,
    /// Whether it is the default ([`ipivmm_analysis::results::repeats::ConfigurationStats::DEFAULT_REPEATS`]).
    pub default: bool,
    /// `--repeat auto` (`repeats` is then the most).
    pub auto: bool,
}

impl RepeatChoice {
    /// The engine's repeats for this choice, `budget` bounding `auto`.
    pub fn rounds(
        &self,
        budget: ipivmm::experiment::Budget,
    ) -> ipivmm::experiment::rounds::Repeats {
        use ipivmm::experiment::rounds::Repeats;
        match self.auto {
            true => Repeats::Auto {
                max: self.repeats,
                budget,
            },
            false => Repeats::Fixed(self.repeats),
        }
    }

    /// How many runs a journal plans for a configuration at first.
    pub fn planned(&self) -> u32 {
        match self.auto {
            true => ipivmm::experiment::rounds::Repeats::AUTO_MIN,
            false => self.repeats,
        }
    }
}

impl std::fmt::Display for RepeatChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.auto {
            return write!(
                f,
                "as many independent VMs per configuration as the gate's threshold needs at this host's spread (--repeat auto: at least {})",
                ipivmm::experiment::rounds::Repeats::AUTO_MIN
            );
        }
        let n = self.repeats;
        write!(
            f,
            "{n} independent VM{} per configuration",
            if n == 1 { "" } else { "s" }
        )?;
        if self.default {
            write!(
                f,
                " (the default --repeat {n}: the fewest that can show a difference at 95% is 4, one more for a failed run)"
            )
        } else {
            write!(f, " (--repeat {n})")
        }
    }
}

/// Which of `runs` (the repeats of one configuration) a run's text report
/// shows, and the line that says so above its tables: the completed repeat
/// whose headline p50 is nearest the median of the completed repeats' p50s
/// (an outlier first repeat, 6× the others on a busy host, made its
/// `counted÷uncounted` read as the cost of counting, issue 50); without
/// p50s the first that completed (else the first); "" for a single run.
pub fn shown_repeat(runs: &[ipivmm_analysis::results::RunReport]) -> (usize, String) {
    let p50s: Vec<Option<f64>> = runs
        .iter()
        .map(|r| match r.succeeded() {
            true => r.summary().latency.map(|l| l.p50),
            false => None,
        })
        .collect();
    let first = runs.iter().position(|r| r.succeeded());
    let (shown, why) = match (nearest_median(&p50s), first) {
        (Some(i), _) => (i, "the one nearest the median p50"),
        (None, Some(0)) => (0, "the first"),
        (None, Some(i)) => (i, "the first that completed"),
        (None, None) => (0, "the first"),
    };
    if runs.len() < 2 {
        return (shown, String::new());
    }
    let which = runs[shown].repeat.map_or(shown, |i| i as usize) + 1;
    let (comma, close) = match why {
        "the one nearest the median p50" => (", ", ""),
        _ => (" (", ")"),
    };
    (
        shown,
        format!(
            "The tables below are repeat {which} of {}{comma}{why}{close}; the figures over all {} repeats \
             follow them, every repeat is in --json.\n",
            runs.len(),
            runs.len()
        ),
    )
}

/// The index of the value nearest the median of the values present (the
/// first of equals), None when fewer than two are present (nothing to
/// choose between).
fn nearest_median(values: &[Option<f64>]) -> Option<usize> {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    if present.len() < 2 {
        return None;
    }
    let median = ipivmm_analysis::stats::median(&present)?;
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((i, (v.as_ref()? - median).abs())))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

/// `v` with its interval: `123456 [120000, 130000]`, the coverage named
/// where it is not 95% (`93.8%`).
pub fn with_interval(m: Metric, v: f64, i: Option<&Interval>) -> String {
    let mut s = m.format(v);
    if let Some(i) = i {
        let _ = write!(s, " [{}, {}]", m.format(i.lo), m.format(i.hi));
        if !i.reaches(Interval::CONFIDENCE) || (i.coverage - Interval::CONFIDENCE).abs() > 0.005 {
            let _ = write!(s, " ({:.1}%)", i.coverage * 100.0);
        }
    }
    s
}

/// ` (3 of 6 repeats)` when a figure is not every repeat's.
fn of_how_many(n: usize, completed: usize) -> String {
    match n < completed {
        true => format!(" ({n} of {completed} repeats)"),
        false => String::new(),
    }
}

fn figure_line(m: Metric, op: &str, f: &FigureStats, completed: usize) -> String {
    let mut s = format!(
        "  {:<24} median {}{}",
        m.name(op),
        with_interval(m, f.median, f.interval.as_ref()),
        of_how_many(f.values.len(), completed)
    );
    if let Some(c) = f.cov {
        let _ = write!(s, ", CoV {:.1}%", c * 100.0);
    }
    if f.values.len() > 1 {
        let each: Vec<String> = f.values.iter().map(|v| m.format(*v)).collect();
        let _ = write!(s, "; per repeat {}", each.join(" "));
    }
    s
}

fn count_line(m: Metric, op: &str, c: &CountStats, completed: usize) -> String {
    let name = m.name(op);
    let n = c.values.len();
    if c.exact {
        let every = match (n > 1, n < completed) {
            (_, true) => format!(" in {n} of {completed} repeats"),
            (true, false) => " in every repeat".into(),
            (false, false) => String::new(),
        };
        format!("  {name:<24} {}{every} (a count)", m.format(c.median))
    } else {
        format!(
            "  {name:<24} {} to {} across repeats, median {} (counts; they differ between repeats here){}",
            m.format(c.min),
            m.format(c.max),
            m.format(c.median),
            of_how_many(n, completed)
        )
    }
}

/// The text of every configuration's repeats. `single_p50` gives each
/// run's own p50 interval (from its samples) by run index.
pub fn render(
    configs: &[ConfigurationStats],
    choice: Option<RepeatChoice>,
    single_p50: &dyn Fn(usize) -> Option<(f64, Interval)>,
) -> String {
    let mut out = String::new();
    if let Some(c) = choice {
        let _ = writeln!(out, "repeats: {c}");
    }
    for c in configs {
        let op = c.operation;
        let _ = writeln!(
            out,
            "{}, {} vCPU{} / {}: {} of {} repeat{} completed",
            c.workload,
            c.vcpus,
            if c.vcpus == 1 { "" } else { "s" },
            c.label,
            c.completed,
            c.runs.len(),
            if c.runs.len() == 1 { "" } else { "s" }
        );
        // What the figures below count, when it is not every completed one.
        if let Some(why) = &c.repeats_differ {
            let _ = writeln!(out, "  {why}: each figure counts the repeats that have it");
        } else if c.repeats < c.completed {
            let _ = writeln!(
                out,
                "  {} of them measured no phase: each figure counts the repeats that have it",
                c.completed - c.repeats
            );
        }
        for m in Metric::ALL {
            if let Some(f) = c.figures.get(m.key()) {
                let _ = writeln!(out, "{}", figure_line(m, op, f, c.completed));
            } else if let Some(n) = c.counts.get(m.key()) {
                let _ = writeln!(out, "{}", count_line(m, op, n, c.completed));
            }
        }
        let own: Vec<String> = c
            .runs
            .iter()
            .filter_map(|&i| single_p50(i))
            .map(|(v, i)| with_interval(Metric::CyclesPerOpP50, v, Some(&i)))
            .collect();
        if !own.is_empty() {
            let _ = writeln!(
                out,
                "  each run's p50 with its interval from its own samples: {}",
                own.join("; ")
            );
        }
        let p50 = Metric::CyclesPerOpP50.name(op);
        // The repeats that have the p50: the n of what it can detect.
        let n_p50 = c.p50().map_or(0, |f| f.values.len());
        match (c.min_detectable_effect, c.repeats_for_target) {
            (Some(e), Some(n)) => {
                let _ = writeln!(
                    out,
                    "  at {n_p50} repeats this host detects a change of {:.0}% or more in {p50} \
                     (95% confidence, 80% power); {:.0}% needs {n} repeats",
                    e * 100.0,
                    c.target_effect * 100.0
                );
            }
            (None, Some(n)) => {
                let _ = writeln!(
                    out,
                    "  at {n_p50} repeat{} no change can be shown at 95%; {:.0}% in {p50} needs {n} repeats \
                     (95% confidence, 80% power)",
                    if n_p50 == 1 { "" } else { "s" },
                    c.target_effect * 100.0
                );
            }
            _ if n_p50 == 1 => {
                let _ = writeln!(
                    out,
                    "  one repeat: no spread, no interval over repeats, nothing a comparison could show (--repeat 5)"
                );
            }
            _ => {}
        }
        for u in &c.unstable {
            let _ = writeln!(out, "  unstable: {u}");
        }
        // A lever that did not act: what the figures above cannot show.
        for l in &c.levers {
            let _ = writeln!(out, "  {l}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_say_which_repeat_they_are() {
        let config = ipivmm::VmConfig::default();
        let mut runs: Vec<ipivmm_analysis::results::RunReport> = (0..3)
            .map(|i| {
                let mut r = config.not_started("test");
                r.repeat = Some(i);
                r
            })
            .collect();
        assert_eq!(shown_repeat(&runs[..1]), (0, String::new()));
        runs[1].status = ipivmm_analysis::results::RunStatus::Completed;
        let (i, note) = shown_repeat(&runs);
        assert_eq!(i, 1);
        assert!(
            note.starts_with("The tables below are repeat 2 of 3 (the first that completed)"),
            "{note}"
        );
    }

    /// Issue 50: repeat 1 at 6× the others is not the one shown; the one
    /// nearest the median is, failed and p50-less repeats aside.
    #[test]
    fn the_repeat_shown_is_the_one_nearest_the_median() {
        let at = |v: &[f64]| nearest_median(&v.iter().map(|x| Some(*x)).collect::<Vec<_>>());
        assert_eq!(at(&[6.3e6, 1.0e6, 1.1e6, 0.9e6, 1.05e6]), Some(4));
        assert_eq!(at(&[6.3e6, 1.0e6, 1.2e6, 0.9e6, 1.3e6]), Some(2));
        // Even counts: the median between the middle two, the first nearest.
        assert_eq!(at(&[4.0, 1.0, 2.0, 3.0]), Some(2));
        assert_eq!(
            nearest_median(&[None, Some(5.0), None, Some(7.0), Some(100.0)]),
            Some(3)
        );
        assert_eq!(nearest_median(&[Some(5.0), None]), None);
        assert_eq!(nearest_median(&[]), None);
    }

    /// Issue 50: a run's repeats block says, beside its figures, that
    /// halt polling (on: the host's 200 µs) attempted no poll in the
    /// target's halts; a run that polled says nothing.
    #[test]
    fn the_repeats_say_when_halt_polling_had_nothing_to_act_on() {
        let run = |attempted: u64| {
            let mut r = ipivmm::VmConfig::default().not_started("test");
            r.status = ipivmm_analysis::results::RunStatus::Completed;
            let mut host = ipivmm_analysis::results::HostSettings::of(
                &ipivmm_host::facts::HostInfo::synthetic(ipivmm::host::KvmBackend::KvmPvm, false),
            );
            host.params
                .entry("kvm".into())
                .or_default()
                .insert("halt_poll_ns".into(), "200000".into());
            r.host_settings = Some(host);
            let mut v = ipivmm_analysis::results::VcpuResult::new(1, 1);
            let mut p = ipivmm_analysis::results::PhaseResult {
                id: 2,
                name: "measure".into(),
                ..Default::default()
            };
            for (k, n) in [
                ("halt_exits", 200),
                ("halt_attempted_poll", attempted),
                ("halt_successful_poll", attempted),
                ("halt_wakeup", 200 - attempted),
            ] {
                p.kvm_stats.insert(k.into(), n);
            }
            p.guest.ipis_received = 200;
            v.phases.push(p);
            r.vcpus.push(v);
            r
        };
        let text = |r: ipivmm_analysis::results::RunReport| {
            let configs = ConfigurationStats::of(&[r]);
            render(&configs, None, &|_| None)
        };
        let t = text(run(0));
        assert!(
            t.contains("  halt polling: 0 polls attempted in 200 halts with halt_poll_ns 200000 (the host's kvm.halt_poll_ns): the lever had nothing to act on here"),
            "{t}"
        );
        assert!(!text(run(190)).contains("halt polling"));
    }

    #[test]
    fn interval_names_a_coverage_other_than_95() {
        let i = Interval {
            lo: 90.0,
            hi: 110.0,
            coverage: 0.9375,
        };
        assert_eq!(
            with_interval(Metric::CyclesPerOpP50, 100.0, Some(&i)),
            "100 [90, 110] (93.8%)"
        );
        let i = Interval {
            coverage: 0.951,
            ..i
        };
        assert_eq!(
            with_interval(Metric::CyclesPerOpP50, 100.0, Some(&i)),
            "100 [90, 110]"
        );
        assert_eq!(with_interval(Metric::CyclesPerOpP50, 100.0, None), "100");
    }
}
