//! A sweep checked and planned on this host (what `sweep` runs and `sweep
//! --dry-run` prints), and what running it gives. The command line makes
//! one (`commands::sweep::plan_sweep`); both commands read it here.
use super::execute::{SweepEvents, SweepOptions};
use super::host_stages::HostSweep;
use super::{execute, SweepSpec};
use crate::output::journal::Journal;
use ipivmm_analysis::results::Document;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A sweep checked and planned: what it will run on this host.
pub struct PlannedSweep {
    spec: SweepSpec,
    host: Option<ipivmm_host::facts::HostInfo>,
    host_sweep: Option<HostSweep>,
    preset: Option<ipivmm_analysis::results::PresetReport>,
}

/// A sweep that ran.
pub struct Swept {
    /// Its results.
    pub doc: Document,
    /// Host-switch errors.
    pub errors: Vec<String>,
    /// How long it took.
    pub wall: Duration,
    /// Whether every run completed (and any ran, and nothing was cancelled).
    pub ok: bool,
}

impl PlannedSweep {
    /// A plan of `spec` on `host` (None: not probed), with its host-setting
    /// stages and the preset's report, if any.
    pub fn new(
        spec: SweepSpec,
        host: Option<ipivmm_host::facts::HostInfo>,
        host_sweep: Option<HostSweep>,
        preset: Option<ipivmm_analysis::results::PresetReport>,
    ) -> Self {
        PlannedSweep {
            spec,
            host,
            host_sweep,
            preset,
        }
    }

    /// The sweep's dimensions.
    pub fn spec(&self) -> &SweepSpec {
        &self.spec
    }

    /// The host it is planned on (None: not probed).
    pub fn host(&self) -> Option<&ipivmm_host::facts::HostInfo> {
        self.host.as_ref()
    }

    /// What the preset asks and this host can answer, if it is a preset.
    pub fn preset(&self) -> Option<&ipivmm_analysis::results::PresetReport> {
        self.preset.as_ref()
    }

    /// Runs the plan, telling `events`, each run into `journal`; stops at
    /// `cancel`.
    pub fn run(
        self,
        observer_pairs: u32,
        repeats: ipivmm::experiment::rounds::Repeats,
        cancel: &std::sync::Arc<std::sync::atomic::AtomicBool>,
        events: &dyn SweepEvents,
        journal: Journal,
    ) -> Swept {
        let started = Instant::now();
        let opts = SweepOptions {
            observer_pairs,
            cancel: cancel.clone(),
            repeats,
            journal: &journal,
        };
        let out = execute(
            &self.spec,
            self.host.as_ref(),
            self.host_sweep.as_ref(),
            &opts,
            events,
        );
        let wall = started.elapsed();
        let (mut doc, journal_error) = journal.finish(out.skipped);
        doc.preset = self.preset;
        let ok = !cancel.load(Ordering::SeqCst)
            && !doc.runs.is_empty()
            && out.errors.is_empty()
            && doc.runs.iter().all(|r| r.succeeded());
        Swept {
            doc,
            errors: out.errors.into_iter().chain(journal_error).collect(),
            wall,
            ok,
        }
    }
}
