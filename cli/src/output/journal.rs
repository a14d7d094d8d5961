//! Durable rows: a sweep's `--json FILE` rewritten (atomically) after every
//! run, so a SIGKILL, a frozen machine or a power cut leaves every finished
//! run readable. While the sweep goes on the document carries `incomplete`
//! (what is missing); the sweep's final write replaces it with the whole
//! document, which has none.
use super::atomic::write_atomic;
use ipivmm::results::{Document, RunReport};
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

/// The runs finished so far, and the file that holds them.
pub struct Journal {
    path: PathBuf,
    planned: Cell<usize>,
    doc: RefCell<Option<Document>>,
    error: RefCell<Option<String>>,
}

impl Journal {
    /// A journal written to `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            planned: Cell::new(0),
            doc: RefCell::new(None),
            error: RefCell::new(None),
        }
    }

    /// `runs` more runs are planned (a sweep, or one host stage of it).
    pub fn plan_more(&self, runs: usize) {
        self.planned.set(self.planned.get().saturating_add(runs));
    }

    /// Adds `report` (its raw samples left out: they are not in the JSON)
    /// and rewrites the file. A failed write is kept for [`Journal::error`]
    /// and stops later ones; the sweep goes on (its final write reports
    /// its own errors).
    pub fn record(&self, report: &RunReport) {
        if self.error.borrow().is_some() {
            return;
        }
        let mut r = report.clone();
        for p in r.vcpus.iter_mut().flat_map(|v| v.phases.iter_mut()) {
            p.samples = Vec::new();
        }
        let mut slot = self.doc.borrow_mut();
        let doc = slot.get_or_insert_with(|| Document::new(Vec::new(), Vec::new()));
        if doc.host.is_none() {
            doc.host = r.host.clone();
            doc.host_error = None;
        }
        doc.runs.push(r);
        doc.configurations = ipivmm::results::repeats::configurations(&doc.runs);
        doc.incomplete = Some(format!(
            "sweep in progress (or killed): {} of {} planned runs finished; skipped combinations are listed when it ends",
            doc.runs.len(),
            self.planned.get().max(doc.runs.len())
        ));
        if let Err(e) = write_atomic(&self.path, doc.to_json().as_bytes()) {
            *self.error.borrow_mut() =
                Some(format!("writing {} after a run: {e}", self.path.display()));
        }
    }

    /// Why the journal stopped writing, if it did.
    pub fn error(&self) -> Option<String> {
        self.error.borrow().clone()
    }
}
