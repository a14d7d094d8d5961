//! The journal of a command that runs VMs (`run`, `sweep`, each experiment
//! of `check`): the runs it finished, held once for its outputs, under one
//! guest memory budget for all of them, and, with a results file, that file
//! rewritten (atomically) after every run. The file is first written before
//! the first VM, with no run and `incomplete` set, so that a command killed
//! at any point (SIGKILL, a frozen machine, a power cut) never leaves an
//! older file that reads as current: it leaves a whole document of every
//! finished run, saying how many of how many. The command's final write
//! (its outputs) replaces it with the whole document, which has no
//! `incomplete`.
//!
//! The repeat loops call [`Journal::record`] with each report as it ends;
//! what stops a configuration's repeats is [`stops_repeats`].
use super::atomic::write_atomic_with;
use ipivmm::results::{Document, RunReport, SkippedMode};
use ipivmm::SharedBudget;
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
    planned: usize,
    doc: Document,
    error: Option<String>,
}

impl Journal {
    /// The journal of `what` (`run`, `sweep`, `check`) with a guest memory
    /// budget of `budget` bytes for all its runs, written to `path` when
    /// there is one (now, before any VM: a document with no run, marked
    /// incomplete). The repeat loop says how many runs it plans
    /// ([`Journal::plan_more`]).
    pub fn start(path: Option<&Path>, what: &'static str, budget: u64) -> Self {
        let j = Self {
            path: path.map(Path::to_path_buf),
            what,
            budget: Arc::new(SharedBudget::new(budget)),
            state: RefCell::new(State {
                planned: 0,
                doc: Document::new(Vec::new(), Vec::new()),
                error: None,
            }),
        };
        j.write();
        j
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
        let mut s = self.state.borrow_mut();
        s.planned = s.planned.saturating_add(runs);
        drop(s);
        self.write();
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
        s.doc.runs.push(report);
        drop(s);
        self.write();
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

    /// The document so far, to the file (streamed: a large document is not
    /// held twice).
    fn write(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let mut s = self.state.borrow_mut();
        if s.error.is_some() {
            return;
        }
        let (done, planned) = (s.doc.runs.len(), s.planned.max(s.doc.runs.len()));
        s.doc.configurations = ipivmm::results::repeats::configurations(&s.doc.runs);
        s.doc.incomplete = Some(match planned {
            0 => format!("{} in progress (or killed): no run planned yet", self.what),
            _ => format!(
                "{} in progress (or killed): {done} of {planned} planned runs finished; \
                 what did not run is listed when it ends",
                self.what
            ),
        });
        let doc = &s.doc;
        let written = write_atomic_with(path, |w| {
            let mut w = std::io::BufWriter::new(w);
            serde_json::to_writer_pretty(&mut w, doc)?;
            w.write_all(b"\n")?;
            w.flush()
        });
        if let Err(e) = written {
            let when = if done == 0 {
                "before the first run"
            } else {
                "after a run"
            };
            s.error = Some(format!("writing {} {when}: {e}", path.display()));
        }
    }
}

pub use ipivmm::experiment::rounds::stops_repeats;

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
    use ipivmm::results::RunStatus;

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
        RunReport::not_started(&config, "a test run")
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

    #[test]
    fn samples_are_freed_and_their_bytes_given_back() {
        let j = Journal::start(None, "sweep", 1 << 20);
        let mut r = report(2);
        let mut v = ipivmm::results::VcpuResult::new(0, 0);
        v.phases.push(ipivmm::results::PhaseResult {
            samples: vec![7; 1000],
            ..Default::default()
        });
        r.vcpus.push(v);
        j.budget().keep(ipivmm::vcpu::store::report_bytes(&r));
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
        assert_eq!(stops_repeats(&r), Some("its other repeats are not run"));
        r.vcpus.push(ipivmm::results::VcpuResult::new(0, 0));
        r.status = RunStatus::Completed;
        assert!(stops_repeats(&r).is_none());
        r.status = RunStatus::OverBudget {
            vcpu: 1,
            data: "phases".into(),
            limit_bytes: 1 << 27,
            reason: "vcpu1: ...".into(),
        };
        let why = stops_repeats(&r).unwrap();
        assert!(why.contains("its other repeats are not run"), "{why}");
    }
}
