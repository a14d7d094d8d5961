//! The sweep progress bar: indicatif on stderr, so it never mixes with JSON
//! or CSV on stdout; hidden when stderr is not a terminal or with `--quiet`.
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// Progress of a sweep over `total` runs.
pub struct SweepProgress {
    bar: ProgressBar,
    quiet: bool,
}

impl SweepProgress {
    /// A bar for `total` runs; hidden when `quiet` or stderr is not a TTY.
    pub fn new(total: u64, quiet: bool) -> Self {
        let visible = !quiet && std::io::stderr().is_terminal();
        Self::with_visibility(total, quiet, visible)
    }

    /// A bar that is drawn only when `visible` (tests use a hidden one).
    pub fn with_visibility(total: u64, quiet: bool, visible: bool) -> Self {
        let target = if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        let style =
            ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} elapsed  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Self { bar, quiet }
    }

    /// Whether the bar is drawn.
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden()
    }

    /// Shows what runs now, e.g. "pingpong kernel/x2apic/icr".
    pub fn start(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    /// One run finished.
    pub fn finish_one(&self) {
        self.bar.inc(1);
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
}
