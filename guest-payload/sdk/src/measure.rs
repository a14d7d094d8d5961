//! A phase measured both ways: its uncounted part (the host switches every
//! per-exit counter of the vCPU off: the latency it reports) and its
//! counted part (the exits), in the same VM, with the same work.
use crate::control;
use crate::sync::barrier;

/// The two parts of a phase measured both ways ([`measure_both_ways`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Every per-exit counter off: the headline latency.
    Uncounted,
    /// Counting on: the exits by reason, ICR-write exits.
    Counted,
    /// Between the two, outside any phase: the same work, unmeasured, after
    /// the host attached its per-exit counters at the uncounted part's end
    /// marker, so that the counted part starts warm. Only `Before` and
    /// `Run` are called for it.
    Warmup,
}

/// Where [`measure_both_ways`] is in a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Before the part's begin marker (reset what the part counts).
    Before(Part),
    /// Between the barriers after the begin and before the end marker:
    /// the measured work.
    Run(Part),
    /// After the end marker: send the part's samples and records (they
    /// belong to the part that ended last).
    Ended(Part),
}

/// Measures phase `id` named `name` both ways, on every vCPU that calls it
/// (all of them must): first its uncounted part ([`control::phase_begin_uncounted`]),
/// then, outside any phase, `Before` and `Run` of [`Part::Warmup`] (the host
/// attaches its per-exit counters at the uncounted part's end marker: this
/// runs the path warm again), then its counted part, each `Before`, begin marker, barrier, `Run`,
/// barrier, end marker, `Ended`, barrier. The host takes the headline
/// latency from the uncounted part's samples and the exits from the
/// counted part, and reports their ratio (what counting cost). `step` is
/// called for each step with the part; run the same work in both parts.
pub fn measure_both_ways(id: u32, name: &str, mut step: impl FnMut(Step)) {
    for part in [Part::Uncounted, Part::Counted] {
        if part == Part::Counted {
            step(Step::Before(Part::Warmup));
            barrier();
            step(Step::Run(Part::Warmup));
            barrier();
        }
        step(Step::Before(part));
        match part {
            Part::Uncounted => control::phase_begin_uncounted(id, name),
            _ => control::phase_begin(id, name),
        }
        barrier();
        step(Step::Run(part));
        barrier();
        control::phase_end(id);
        step(Step::Ended(part));
        barrier();
    }
}
