//! The append-only form of a results file that a command writes while its
//! runs go on (the CLI's `Journal`), and its reading by [`Document::load`].
//!
//! Why a second form: rewriting the whole document after every run wrote
//! O(N·file) bytes for N runs (40 repeats: 27 MB written for a 1.3 MB
//! file). Here each finished run is written once, appended as one line,
//! and the command's final write replaces the file (atomically) with the
//! whole pretty document: O(file) bytes in all. Geometric rewrites were
//! not chosen: a run finished between two rewrites would need a second
//! place to be durable in, and a reader that merges both.
//!
//! The layout, one JSON value a line:
//!
//! ```text
//! {"schema":"ipivmm.results/1","journal":"sweep","ipivmm_version":..,"host":..}
//! {"planned":3}
//! {"run":{..one run report..}}
//! ```
//!
//! The first line ([`Document::journal_header`]) is written whole and atomically before
//! the first VM, so an older file never reads as current. Each event is
//! written by one `write` of its whole line, then synced. A writer killed
//! in the middle of one leaves a last line with no newline: the reader
//! drops it (that run had not finished being kept). So a file cut at any
//! point loads as a whole document of every run kept, with `incomplete`
//! saying how many of how many.
use super::{Document, HostInfo, RunReport, SCHEMA};
use crate::Error;
use serde::{Deserialize, Serialize};

/// The first line of a journal.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Header {
    /// `ipivmm.results/1`.
    pub schema: String,
    /// The command writing it (`run`, `sweep`, `check`): says it is a
    /// journal, and names the command in `incomplete`.
    pub journal: String,
    /// Version of the ipivmm that wrote it.
    pub ipivmm_version: String,
    /// When the journal was started (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_at: Option<u64>,
    /// Host fingerprint, probed at start (a run's own is taken if none).
    pub host: Option<HostInfo>,
    /// Why the host could not be fingerprinted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
}

impl Header {
    /// The header of `what`'s journal, of the host of `doc` (a document
    /// with no run yet: its host and version).
    fn new(what: &str, doc: &Document) -> Self {
        Self {
            schema: SCHEMA.into(),
            journal: what.into(),
            ipivmm_version: doc.ipivmm_version.clone(),
            recorded_at: doc.recorded_at,
            host: doc.host.clone(),
            host_error: doc.host_error.clone(),
        }
    }
}

/// A line after the header.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Event {
    /// This many more runs are planned.
    Planned(usize),
    /// A finished run (without raw samples).
    Run(Box<RunReport>),
}

/// [`Event`] as written: a borrowed run, serialized as the owned one
/// reads back (`{"run": {...}}`).
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum EventRef<'a> {
    Run(&'a RunReport),
}

impl Document {
    /// The first line of a journal of command `what` (`run`, `sweep`,
    /// `check`), of this document's host and version (a document with no
    /// run yet).
    pub fn journal_header(&self, what: &str) -> Vec<u8> {
        to_line(&Header::new(what, self))
    }

    /// The journal line that says `runs` more runs are planned.
    pub fn journal_planned(runs: usize) -> Vec<u8> {
        to_line(&Event::Planned(runs))
    }
}

impl RunReport {
    /// This run as a journal line (its raw samples dropped first keeps the
    /// line small: [`RunReport::drop_samples`]).
    pub fn journal_line(&self) -> Vec<u8> {
        to_line(&EventRef::Run(self))
    }
}

fn to_line(v: &impl Serialize) -> Vec<u8> {
    // Plain data with string keys: serializing cannot fail.
    let mut line = serde_json::to_vec(v).unwrap_or_default();
    line.push(b'\n');
    line
}

/// What `incomplete` says of a journal of `what` with `done` runs of
/// `planned`.
pub(crate) fn incomplete_note(what: &str, done: usize, planned: usize) -> String {
    match planned.max(done) {
        0 => format!("{what} in progress (or killed): no run planned yet"),
        planned => format!(
            "{what} in progress (or killed): {done} of {planned} planned runs finished; \
             what did not run is listed when it ends"
        ),
    }
}

/// `text` read as a journal, if its first line is a journal header; the
/// document of every whole line, marked `incomplete`.
pub(super) fn parse(text: &str, what: &str) -> Option<Result<Document, Error>> {
    let (first, rest) = text.split_once('\n')?;
    #[derive(Deserialize)]
    struct Probe {
        journal: Option<String>,
    }
    serde_json::from_str::<Probe>(first).ok()?.journal?;
    let bad = |problem: String| Error::Unreadable {
        what: what.to_string(),
        problem,
    };
    let header: Header = match serde_json::from_str(first) {
        Ok(h) => h,
        Err(e) => return Some(Err(bad(format!("journal header: {e}")))),
    };
    if header.schema != SCHEMA {
        return Some(Err(bad(format!(
            "journal of schema {}; this ipivmm reads {SCHEMA}",
            header.schema
        ))));
    }
    let mut doc = Document {
        schema: header.schema,
        ipivmm_version: header.ipivmm_version,
        recorded_at: header.recorded_at,
        host: header.host,
        host_error: header.host_error,
        runs: Vec::new(),
        skipped: Vec::new(),
        preset: None,
        incomplete: None,
        configurations: Vec::new(),
    };
    let mut planned = 0usize;
    // Only lines ending in a newline: a last line without one is a write
    // cut by a kill, of a run not yet kept.
    let whole = match rest.rfind('\n') {
        Some(end) => &rest[..end],
        None => "",
    };
    for (i, line) in whole.lines().enumerate() {
        match serde_json::from_str::<Event>(line) {
            Ok(Event::Planned(n)) => planned = planned.saturating_add(n),
            Ok(Event::Run(r)) => {
                if doc.host.is_none() && r.host.is_some() {
                    doc.host = r.host.clone();
                    doc.host_error = None;
                }
                doc.runs.push(*r);
            }
            Err(e) => return Some(Err(bad(format!("journal line {}: {e}", i + 2)))),
        }
    }
    doc.configurations = super::repeats::ConfigurationStats::of(&doc.runs);
    doc.incomplete = Some(incomplete_note(&header.journal, doc.runs.len(), planned));
    Some(Ok(doc))
}
