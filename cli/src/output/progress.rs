//! The progress bar of a sweep's runs and of `run`'s repeats: indicatif on
//! stderr, so it never mixes with JSON or CSV on stdout; hidden with
//! `--quiet`. Where stderr is not a terminal (CI, a log file) nobody sees a
//! bar: one line per finished run instead, so a long sweep (or `run`'s five
//! VMs) is never minutes without a word.
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Instant;

/// Progress of a sweep over `total` runs.
pub struct SweepProgress {
    bar: ProgressBar,
    quiet: bool,
    /// What runs now (the run [`SweepProgress::start`] named) and since when.
    current: Mutex<Option<(String, Instant)>>,
    started: Instant,
    /// What one unit is called: "run" (a sweep's), "repeat" (`run`'s).
    noun: &'static str,
}

impl SweepProgress {
    /// A bar for `total` runs; hidden when `quiet` or stderr is not a TTY.
    pub fn new(total: u64, quiet: bool) -> Self {
        let visible = !quiet && std::io::stderr().is_terminal();
        Self::with_visibility(total, quiet, visible)
    }

    /// A bar that is drawn only when `visible` (tests use a hidden one).
    pub fn with_visibility(total: u64, quiet: bool, visible: bool) -> Self {
        Self::counting("run", total, quiet, visible)
    }

    /// `run`'s bar over its `total` repeats: "2/5 repeats", "repeat 2/5
    /// done"; hidden when `quiet` or stderr is not a TTY.
    pub fn repeats(total: u64, quiet: bool) -> Self {
        let visible = !quiet && std::io::stderr().is_terminal();
        Self::counting("repeat", total, quiet, visible)
    }

    fn counting(noun: &'static str, total: u64, quiet: bool, visible: bool) -> Self {
        let target = if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        let template = format!("{{bar:30}} {{pos}}/{{len}} {noun}s, {{elapsed}} elapsed  {{msg}}");
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Self {
            bar,
            quiet,
            current: Mutex::new(None),
            started: Instant::now(),
            noun,
        }
    }

    /// `runs` more runs to come (a round of reruns, another host stage).
    pub fn plan_more(&self, runs: u64) {
        self.bar.inc_length(runs);
    }

    /// Whether the bar is drawn.
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Shows what runs now, e.g. "pingpong kernel/x2apic/icr".
    pub fn start(&self, what: &str) {
        self.bar.set_message(what.to_string());
        if let Ok(mut c) = self.current.lock() {
            *c = Some((what.to_string(), Instant::now()));
        }
    }

    /// One run finished (or was not started); without a bar, says so in
    /// one line ([`SweepProgress::finished_line`]) unless quiet.
    pub fn finish_one(&self) {
        self.bar.inc(1);
        if self.quiet || !self.bar.is_hidden() {
            return;
        }
        let current = self.current.lock().ok().and_then(|mut c| c.take());
        eprintln!("{}", self.finished_line(current));
    }

    /// The line a finished run prints without a bar, e.g. `ipivmm: run
    /// 3/12 done (pingpong kernel/x2apic/icr, 4.2 s), 1 min 3 s elapsed`.
    fn finished_line(&self, run: Option<(String, Instant)>) -> String {
        let what = match run {
            Some((label, since)) => {
                format!(" ({label}, {:.1} s)", since.elapsed().as_secs_f64())
            }
            None => " (not run)".to_string(),
        };
        let total = self.bar.length().unwrap_or(0);
        let secs = self.started.elapsed().as_secs();
        let elapsed = match secs {
            0..60 => format!("{secs} s"),
            _ => format!("{} min {} s", secs / 60, secs % 60),
        };
        format!(
            "ipivmm: {} {}/{total} done{what}, {elapsed} elapsed",
            self.noun,
            self.bar.position()
        )
    }

    /// Prints a line to stderr above the bar (or plainly when it is hidden),
    /// unless quiet.
    pub fn println(&self, line: &str) {
        if self.quiet {
            return;
        }
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Runs finished so far.
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for SweepProgress {
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_or_not_a_tty_hides_the_bar() {
        let p = SweepProgress::new(3, true);
        assert!(!p.is_visible());
        let p = SweepProgress::with_visibility(3, false, false);
        assert!(!p.is_visible());
        p.start("pingpong kernel/xapic/icr");
        p.finish_one();
        p.finish_one();
        assert_eq!(p.position(), 2);
        p.finish();
    }

    #[test]
    fn without_a_bar_each_finished_run_is_one_line() {
        let p = SweepProgress::with_visibility(12, false, false);
        p.bar.inc(3);
        let line = p.finished_line(Some(("pingpong kernel/x2apic/icr".into(), Instant::now())));
        assert!(
            line.starts_with("ipivmm: run 3/12 done (pingpong kernel/x2apic/icr, 0.0 s), "),
            "{line}"
        );
        assert!(
            line.ends_with(" s elapsed") && !line.contains('\n'),
            "{line}"
        );
        let skipped = p.finished_line(None);
        assert!(skipped.contains("3/12 done (not run)"), "{skipped}");
        // A rerun of a busy repeat counts on: run 13/13, not 1/1.
        p.plan_more(1);
        p.bar.inc(10);
        assert!(p.finished_line(None).contains("13/13 done"));
    }

    #[test]
    fn runs_repeats_are_counted_as_repeats() {
        let p = SweepProgress::counting("repeat", 5, false, false);
        p.bar.inc(2);
        let line = p.finished_line(Some(("pingpong kernel/x2apic/icr".into(), Instant::now())));
        assert!(
            line.starts_with("ipivmm: repeat 2/5 done (pingpong kernel/x2apic/icr, "),
            "{line}"
        );
        assert!(!SweepProgress::repeats(5, true).is_visible());
    }
}
