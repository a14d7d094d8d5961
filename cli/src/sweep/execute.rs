//! Running a planned sweep: the engine's one repeat loop
//! ([`ipivmm::experiment::rounds`]) over the plan, each finished run kept
//! in the command's journal ([`Journal`]). What happens along the way goes
//! to a [`SweepEvents`] (the command line draws a progress bar; `check`
//! and library callers can stay quiet with [`Quiet`]).
use super::PlannedRun;
use crate::output::journal::Journal;
use ipivmm::experiment::rounds::{Repeats, Rounds};
use ipivmm_analysis::results::SkippedMode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use ipivmm::experiment::rounds::RoundEvents as SweepEvents;
pub use ipivmm::experiment::Quiet;

/// How to run a sweep.
#[derive(Clone)]
pub struct SweepOptions<'a> {
    /// Pairs of runs measuring what counting costs, on the first run.
    pub observer_pairs: u32,
    /// Set (by a signal) to stop: the current run ends cancelled, the rest
    /// are skipped as "not run: cancelled".
    pub cancel: Arc<AtomicBool>,
    /// Repeats per combination (`--repeat`, N or auto), run in rounds over
    /// the whole plan (A B A B ..., not A A B B) so that drift hits every
    /// combination alike.
    pub repeats: Repeats,
    /// Where every finished run goes (and the guest memory budget they
    /// share).
    pub journal: &'a Journal,
}

/// What a sweep produced besides its runs (which are in the journal).
#[derive(Debug, Default)]
pub struct SweepOutcome {
    /// Combinations not run, each with the reason.
    pub skipped: Vec<SkippedMode>,
    /// Host switch or restore errors (`--host-param`), one line each.
    pub errors: Vec<String>,
}

/// Runs `runs` in rounds, each finished run into `opts.journal`; runs this
/// host cannot do (or not started after a cancel) join `skipped` with the
/// reason. The first run also measures what counting costs
/// (`observer_pairs` pairs of runs with the counters detached and attached).
pub fn run_all(
    runs: &[PlannedRun],
    skipped: &mut Vec<SkippedMode>,
    opts: &SweepOptions,
    observer_pairs: u32,
    events: &dyn SweepEvents,
) {
    let mut rounds = Rounds::new(opts.repeats, opts.cancel.clone());
    rounds.observer_pairs = observer_pairs;
    if rounds.run(runs, skipped, opts.journal, events) {
        events.note(
            "--repeat auto: the budget ran out before every configuration had the repeats it needs",
        );
    }
}
