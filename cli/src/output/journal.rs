//! The journal of a command that runs VMs (`run`, `sweep`, each experiment
//! of `check`): the runs it finished, held once for its outputs, under one
//! guest memory budget for all of them, and, with a results file, that file
//! kept up to date as each run ends. The file is first written (atomically)
//! before the first VM, with no run, so that a command killed at any point
//! (SIGKILL, a frozen machine, a power cut) never leaves an older file that
//! reads as current: it leaves every finished run, and `Document::load`
//! reads it as a whole document marked `incomplete`, saying how many of
//! how many. The command's final write (its outputs) replaces it with the
//! whole document, which has no `incomplete`.
//!
//! The file in progress is the append-only form of
//! `ipivmm_analysis::results::journal`: a header line, then one line a plan and one
//! a finished run, each appended by one write and synced. It used to be the
//! whole document rewritten after every run: O(N·file) bytes for N runs (40
//! repeats of a sweep wrote 27 MB for a 1.3 MB file). Now each run is
//! written once here and once in the final document: O(file). Rewrites
//! spaced geometrically were the other way; they leave the runs between two
//! rewrites with no durable place unless written a second way, which is
//! this append anyway.
//!
//! The repeat loops call [`Journal::record`] with each report as it ends;
//! what stops a configuration's repeats is [`RunReport::stops_repeats`].
use super::atomic::write_atomic_with;
use ipivmm::SharedBudget;
use ipivmm_analysis::results::{Document, RunReport, SkippedMode};
use std::cell::{Ref, RefCell};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The runs of one command so far, and the file that holds them.
pub struct Journal {
    path: Option<PathBuf>,
    what: &'static str,
    budget: Arc<SharedBudget>,
    state: RefCell<State>,
}

struct State {
    doc: Document,
    /// The file being appended to (opened after its header is written).
    file: Option<std::fs::File>,
    /// Bytes written to the file so far.
    written: u64,
    error: Option<String>,
}

impl Journal {
    /// The journal of `what` (`run`, `sweep`, `check`) with a guest memory
    /// budget of `budget` bytes for all its runs, written to `path` when
    /// there is one (now, before any VM: a document with no run, marked
    /// incomplete). The repeat loop says how many runs it plans
    /// ([`Journal::plan_more`]).
    pub fn start(path: Option<&Path>, what: &'static str, budget: u64) -> Self {
        Self::start_shared(path, what, Arc::new(SharedBudget::new(budget)))
    }

    /// [`Journal::start`] drawing on `budget`, which other journals share
    /// (every experiment of one `check`: their documents are all held
    /// until the command ends).
    pub fn start_shared(
        path: Option<&Path>,
        what: &'static str,
        budget: Arc<SharedBudget>,
    ) -> Self {
        let j = Self {
            path: path.map(Path::to_path_buf),
            what,
            budget,
            state: RefCell::new(State {
                doc: Document::new(Vec::new(), Vec::new()),
                file: None,
                written: 0,
                error: None,
            }),
        };
        j.write_header();
        j
    }

    /// Bytes written to the file so far (the header and the lines after).
    pub fn bytes_written(&self) -> u64 {
        self.state.borrow().written
    }

    /// The budget every run of the command draws on (`RunOptions::budget`).
    pub fn budget(&self) -> Arc<SharedBudget> {
        self.budget.clone()
    }

    /// `runs` more runs are planned (the repeat loop's first plan, a
    /// round of reruns, one host stage of a sweep): the file says so at
    /// once, so that a command killed before its first run ends says how
    /// many it planned.
    pub fn plan_more(&self, runs: usize) {
        self.append(&Document::journal_planned(runs));
    }

    /// Keeps `report` (its raw samples freed: no output needs them, and
    /// the budget gets their bytes back) and rewrites the file. A failed
    /// write is kept for [`Journal::error`] and stops later ones; the
    /// command goes on (its final write reports its own errors).
    pub fn record(&self, mut report: RunReport) {
        self.budget.release(report.drop_samples());
        log::debug!(
            "{} kept: the command's guest data holds {} of its {} bytes",
            report.label(),
            self.budget.held(),
            self.budget.limit()
        );
        let mut s = self.state.borrow_mut();
        if s.doc.host.is_none() && report.host.is_some() {
            s.doc.host = report.host.clone();
            s.doc.host_error = None;
        }
        drop(s);
        self.append(&report.journal_line());
        self.state.borrow_mut().doc.runs.push(report);
    }

    /// The runs so far.
    pub fn runs(&self) -> Ref<'_, [RunReport]> {
        Ref::map(self.state.borrow(), |s| s.doc.runs.as_slice())
    }

    /// Why the journal stopped writing, if it did.
    pub fn error(&self) -> Option<String> {
        self.state.borrow().error.clone()
    }

    /// The whole document: every run kept, `skipped`, no `incomplete`;
    /// and why the file could not be kept up to date, if it could not.
    pub fn finish(self, skipped: Vec<SkippedMode>) -> (Document, Option<String>) {
        let State { doc, error, .. } = self.state.into_inner();
        let mut whole = Document::new(doc.runs, skipped);
        if whole.host.is_none() {
            (whole.host, whole.host_error) = (doc.host, doc.host_error);
        }
        (whole, error)
    }

    /// The header line, written whole over whatever the file held, then
    /// the file opened for appending.
    fn write_header(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let mut s = self.state.borrow_mut();
        let line = s.doc.journal_header(self.what);
        let opened = write_atomic_with(path, |w| w.write_all(&line))
            .and_then(|_| std::fs::OpenOptions::new().append(true).open(path));
        match opened {
            Ok(f) => {
                s.file = Some(f);
                s.written += line.len() as u64;
            }
            Err(e) => {
                s.error = Some(format!(
                    "writing {} before the first run: {e}",
                    path.display()
                ))
            }
        }
    }

    /// `line` (one journal line) appended to the file by one write, then
    /// synced (a kill mid-write leaves a last line with no newline, which
    /// the reader drops).
    fn append(&self, line: &[u8]) {
        let Some(path) = &self.path else {
            return;
        };
        let mut s = self.state.borrow_mut();
        if s.error.is_some() {
            return;
        }
        let done = s.doc.runs.len();
        let written = match s.file.as_mut() {
            Some(f) => f.write_all(line).and_then(|_| f.sync_data()),
            None => return,
        };
        match written {
            Ok(()) => s.written += line.len() as u64,
            Err(e) => {
                let when = match done {
                    0 => "before the first run",
                    _ => "after a run",
                };
                s.error = Some(format!("writing {} {when}: {e}", path.display()));
            }
        }
    }
}

impl ipivmm::experiment::rounds::Keep for Journal {
    fn keep(&self, report: RunReport) {
        self.record(report);
    }
    fn budget(&self) -> Arc<SharedBudget> {
        Journal::budget(self)
    }
    fn plan_more(&self, runs: usize) {
        Journal::plan_more(self, runs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_analysis::results::RunStatus;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ipivmm-journal-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn report(label_vcpus: usize) -> RunReport {
        let config = ipivmm::VmConfig {
            vcpus: label_vcpus,
            ..Default::default()
        };
        config.not_started("a test run")
    }

    #[test]
    fn the_file_is_incomplete_from_the_start_and_whole_at_the_end() {
        let d = dir("start");
        let path = d.join("r.json");
        std::fs::write(&path, "{\"old\": true}").unwrap();
        let j = Journal::start(Some(&path), "run", 1 << 20);
        // Before any run: no older file reads as current.
        let doc = Document::load(&path).unwrap();
        assert!(doc.runs.is_empty());
        let note = doc.incomplete.unwrap();
        assert_eq!(note, "run in progress (or killed): no run planned yet");
        // The plan is on disk before the first run ends (it used to wait
        // for one: a sweep killed in its first run said "0 of 0").
        j.plan_more(3);
        let note = Document::load(&path).unwrap().incomplete.unwrap();
        assert!(
            note.starts_with("run in progress (or killed): 0 of 3 planned runs"),
            "{note}"
        );
        j.record(report(2));
        j.record(report(4));
        let doc = Document::load(&path).unwrap();
        assert_eq!(doc.runs.len(), 2);
        assert!(doc
            .incomplete
            .unwrap()
            .contains("2 of 3 planned runs finished"));
        assert_eq!(j.runs().len(), 2);
        let (whole, error) = j.finish(Vec::new());
        assert!(error.is_none() && whole.incomplete.is_none());
        assert_eq!(whole.runs.len(), 2);
        assert_eq!(whole.configurations.len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A run with some weight, as a sweep keeps it (samples dropped, the
    /// rest of the report kept).
    fn heavy_report(i: usize) -> RunReport {
        let mut r = report(2);
        r.status = RunStatus::Completed;
        for v in 0..2 {
            let mut vr = ipivmm_analysis::results::VcpuResult::new(v, v as u32);
            for p in 0..8 {
                vr.phases.push(ipivmm_analysis::results::PhaseResult {
                    name: format!("phase{p}-run{i}"),
                    ..Default::default()
                });
            }
            r.vcpus.push(vr);
        }
        r
    }

    /// Issue 47 (6.1): 40 repeats rewrote the whole document after each,
    /// about 20 times the final file's bytes. Now the journal's bytes and
    /// the final write together stay within 3 times the final file.
    #[test]
    fn forty_runs_write_a_bounded_multiple_of_the_file() {
        let d = dir("bytes");
        let path = d.join("r.json");
        let j = Journal::start(Some(&path), "sweep", 1 << 30);
        j.plan_more(40);
        for i in 0..40 {
            j.record(heavy_report(i));
        }
        let journal_bytes = j.bytes_written();
        assert_eq!(journal_bytes, std::fs::metadata(&path).unwrap().len());
        let (whole, error) = j.finish(Vec::new());
        assert!(error.is_none());
        let final_bytes = whole.to_json().len() as u64;
        let ratio = (journal_bytes + final_bytes) as f64 / final_bytes as f64;
        // What the old whole rewrite after every run wrote, for the record.
        let rewrites: u64 = (1..=whole.runs.len())
            .map(|k| {
                Document::new(whole.runs[..k].to_vec(), Vec::new())
                    .to_json()
                    .len() as u64
            })
            .sum();
        eprintln!(
            "40 runs: {journal_bytes} journal + {final_bytes} final bytes ({ratio:.2}x); \
             rewriting after every run: {rewrites} bytes ({:.1}x)",
            (rewrites + final_bytes) as f64 / final_bytes as f64
        );
        assert!(
            ratio <= 3.0,
            "{journal_bytes} journal + {final_bytes} final bytes: {ratio:.1}x"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A kill after any number of runs (the file cut at any line end, or
    /// in the middle of a line being written) loads as a whole document of
    /// the runs kept, marked incomplete.
    #[test]
    fn a_journal_cut_anywhere_loads_its_finished_runs_as_incomplete() {
        let d = dir("cut");
        let path = d.join("r.json");
        let j = Journal::start(Some(&path), "run", 1 << 30);
        j.plan_more(5);
        let mut ends = vec![std::fs::read(&path).unwrap().len()];
        for i in 0..5 {
            j.record(heavy_report(i));
            ends.push(std::fs::read(&path).unwrap().len());
        }
        let full = std::fs::read(&path).unwrap();
        let cut = d.join("cut.json");
        for (k, &end) in ends.iter().enumerate() {
            std::fs::write(&cut, &full[..end]).unwrap();
            let doc = Document::load(&cut).unwrap();
            assert_eq!(doc.runs.len(), k);
            let note = doc.incomplete.unwrap();
            assert!(
                note.contains(&format!("{k} of 5 planned runs finished")),
                "{note}"
            );
            assert_eq!(doc.configurations.len(), k.min(1));
            // Killed in the middle of writing the next run's line.
            if end + 10 < full.len() {
                std::fs::write(&cut, &full[..end + 10]).unwrap();
                let doc = Document::load(&cut).unwrap();
                assert_eq!(doc.runs.len(), k);
                assert!(doc.incomplete.is_some());
            }
        }
        drop(j);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn samples_are_freed_and_their_bytes_given_back() {
        let j = Journal::start(None, "sweep", 1 << 20);
        let mut r = report(2);
        let mut v = ipivmm_analysis::results::VcpuResult::new(0, 0);
        v.phases.push(ipivmm_analysis::results::PhaseResult {
            samples: vec![7; 1000],
            ..Default::default()
        });
        r.vcpus.push(v);
        j.budget().keep(ipivmm::run::report_bytes(&r));
        let with_samples = j.budget().held();
        j.record(r);
        assert_eq!(j.budget().held(), with_samples - 8000);
        assert!(j.runs()[0].vcpus[0].phases[0].samples.is_empty());
    }

    #[test]
    fn a_write_that_fails_is_said_once_and_the_runs_are_kept() {
        let d = dir("fails");
        let path = d.join("gone").join("r.json");
        let j = Journal::start(Some(&path), "check", 1 << 20);
        j.record(report(2));
        let error = j.error().unwrap();
        assert!(error.contains("before the first run"), "{error}");
        assert_eq!(j.runs().len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn runs_that_could_not_start_or_went_over_budget_stop_their_repeats() {
        let mut r = report(2);
        assert_eq!(r.stops_repeats(), Some("its other repeats are not run"));
        r.vcpus
            .push(ipivmm_analysis::results::VcpuResult::new(0, 0));
        r.status = RunStatus::Completed;
        assert!(r.stops_repeats().is_none());
        r.status = RunStatus::OverBudget {
            vcpu: 1,
            data: "phases".into(),
            limit_bytes: 1 << 27,
            reason: "vcpu1: ...".into(),
        };
        let why = r.stops_repeats().unwrap();
        assert!(why.contains("its other repeats are not run"), "{why}");
    }
}
