//! `compare` for people: the engine lines recorded runs up and gates them
//! ([`ipivmm_analysis::compare`]); this module renders the comparison and the
//! gate's decisions as text ([`render`]).
mod render;

pub use ipivmm_analysis::compare::{Comparison, Dimension, GateOptions, GateReport, Recorded};
pub use render::{decisions, lever_notes, live_lever_notes, outcome_line, render};

/// How much a count per operation or per IPI may rise before
/// `--fail-on-regression` fails (`--count-tolerance`): 5%, relative to
/// the baseline or to one count, whichever is larger.
pub const DEFAULT_COUNT_TOLERANCE: f64 = ipivmm_analysis::gate::Policy::DEFAULT.count_tolerance;
