//! The results model: one set of types that a run produces, the JSON
//! document (`ipivmm.results/1`) writes, and CSV, charts and `compare` read
//! back. docs/results-schema.md describes every field.
//!
//! ```
//! use ipivmm_analysis::results::{Document, RunStatus};
//!
//! let doc = Document::from_json(
//!     r#"{"schema": "ipivmm.results/1", "ipivmm_version": "0.1.0", "host": null,
//!         "runs": [], "skipped": []}"#,
//!     "example",
//! )?;
//! assert!(doc.runs.is_empty());
//! assert_eq!(RunStatus::Cancelled.name(), "cancelled");
//! # Ok::<(), ipivmm_analysis::Error>(())
//! ```
pub mod apicv_observed;
pub mod columns;
mod exits;
pub(crate) mod fingerprint;
mod host;
pub mod identity;
pub mod inhibits;
pub mod journal;
pub mod latency;
pub mod lever_effect;
pub(crate) mod mechanism;
pub mod metrics;
pub mod observer;
pub mod recordings;
pub mod repeats;
pub mod slug;
pub mod source;
pub mod summary;
mod vcpu;

pub use exits::{ExitCounts, ExitKind};
pub use host::HostSettings;
pub use vcpu::{
    ExitReasonCounts, IcrExits, PhaseResult, ReasonCount, Registers, SourceStatus, VcpuEnd,
    VcpuResult,
};

use crate::mode::apicv::ApicvPlan;
use crate::mode::{ApicMode, IpiPath, Irqchip, Levers, TargetWait, Workload};
use crate::Error;
use ipivmm_host::facts::HostInfo;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Schema identifier; bump the number on incompatible changes.
pub(crate) const SCHEMA: &str = "ipivmm.results/1";
/// The schema family.
const SCHEMA_PREFIX: &str = "ipivmm.results/";
/// Largest results file `load` reads: far beyond any real run (a 1024-vCPU
/// sweep is a few MiB), small enough that a wrong path cannot exhaust memory.
pub(crate) const MAX_RESULTS_FILE: u64 = 256 << 20;

/// The sum of `values`, saturating at `u64::MAX` instead of wrapping: the
/// one way results are summed. Guest counters ride in every control message
/// and a results file can hold anything, so two vCPUs' 2^63 IPIs must add up
/// to "a lot", not to 0.
pub(crate) fn saturating_sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunStatus {
    /// Every vCPU sent Done with status 0.
    Completed,
    /// A vCPU faulted or the payload reported failure.
    Failed {
        /// One line per failing vCPU.
        reason: String,
    },
    /// The caller cancelled the run (a signal).
    Cancelled,
    /// The watchdog stopped the run.
    TimedOut {
        /// The timeout in seconds.
        after_s: u64,
        /// Where each unfinished vCPU was when stopped (every one of them;
        /// the one-line text shows the first few).
        stuck: String,
        /// What to change, from why the run could not finish in time (a
        /// vCPU waiting for a SIPI, the warm-up, the halt settle time, or
        /// the iterations).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        hint: String,
    },
    /// A guest sent more data than the run's guest memory budget
    /// (`--guest-memory-budget`) holds; the run was stopped and keeps what
    /// was measured until then.
    OverBudget {
        /// The vCPU whose data did not fit.
        vcpu: usize,
        /// What it was sending: `phases`, `records`, `samples` or `serial`.
        data: String,
        /// The budget, bytes.
        limit_bytes: u64,
        /// What happened, in one line.
        reason: String,
    },
}

impl RunStatus {
    /// The state's name: `completed`, `failed`, `cancelled`, `timed_out`,
    /// `over_budget`.
    pub fn name(&self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Failed { .. } => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::TimedOut { .. } => "timed_out",
            RunStatus::OverBudget { .. } => "over_budget",
        }
    }

    /// One line for people, the one rendering of a status: the state and,
    /// for a failure, why and what to do.
    pub fn text(&self) -> String {
        match self {
            RunStatus::Completed => "completed".into(),
            RunStatus::Cancelled => "cancelled (a signal stopped it)".into(),
            RunStatus::Failed { reason } => format!("failed: {reason}"),
            RunStatus::TimedOut {
                after_s,
                stuck,
                hint,
            } => {
                let hint = if hint.is_empty() {
                    DEFAULT_TIMEOUT_HINT
                } else {
                    hint
                };
                format!(
                    "timed out after {after_s} s, stopped {} ({hint})",
                    first_few(stuck, STUCK_SHOWN)
                )
            }
            RunStatus::OverBudget { reason, .. } => format!(
                "over budget: {reason}; the run was stopped, what was measured before is kept (raise --guest-memory-budget, VmConfig::guest_memory_budget, if the payload really needs it)"
            ),
        }
    }
}

impl RunStatus {
    /// [`RunStatus::text`], naming the signal that cancelled the run when
    /// this process received one (`cancelled by SIGTERM`).
    pub fn line(&self) -> String {
        match (self, crate::interrupt::received()) {
            (RunStatus::Cancelled, Some((_, name))) => format!("cancelled by {name}"),
            _ => self.text(),
        }
    }
}

/// The fix a timeout names when nothing more specific explains it.
pub(crate) const DEFAULT_TIMEOUT_HINT: &str =
    "raise --timeout or lower --iterations: VmConfig::timeout, VmConfig::iterations";

/// Stuck vCPUs a timeout's one line names; the JSON keeps them all.
pub(crate) const STUCK_SHOWN: usize = 4;

/// The first `n` of the comma-separated `list`, then "... and N more".
fn first_few(list: &str, n: usize) -> String {
    let items: Vec<&str> = list.split(", ").collect();
    if items.len() <= n {
        return list.to_string();
    }
    format!(
        "{} ... and {} more (all in the JSON)",
        items[..n].join(", "),
        items.len() - n
    )
}

/// Timings of a run, in ns.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Timings {
    /// From the caller's start to the VM being ready: every vCPU created
    /// and set up, its thread started with its KVM stats open and waiting
    /// to start (the last one's arrival). Tracepoints are opened later, at
    /// each vCPU's first phase marker, so they show in `first_message_ns`
    /// only as the spawning they delay.
    pub setup_ns: u64,
    /// From the caller's start to the payload's first control message.
    pub first_message_ns: Option<u64>,
    /// From the caller's start to the end of the run.
    pub total_ns: u64,
    /// Peak resident memory of the process (VmHWM), KiB; includes the guest
    /// pages the payload touched.
    #[serde(default)]
    pub peak_rss_kib: Option<u64>,
    /// Guest RAM resident at the end of the run (mincore), KiB: the part of
    /// `peak_rss_kib` that is the guest's, so the VMM's own is about
    /// `peak_rss_kib - guest_resident_kib` (guest pages are never freed
    /// during a run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_resident_kib: Option<u64>,
}

/// What a run ran: its mode, workload and levers (the `mode` object of the
/// JSON document).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Irqchip.
    pub irqchip: Irqchip,
    /// APIC mode.
    pub apic: ApicMode,
    /// IPI path.
    pub ipi: IpiPath,
    /// Workload of the built-in payload (what BootInfo told a custom one).
    pub workload: Workload,
    /// How targets waited.
    pub target: TargetWait,
    /// With `target` = halt: the settle time after a target published that
    /// it is halting, ns.
    #[serde(default)]
    pub halt_settle_ns: u64,
    /// TSC cycles busy-waited in every measured IPI's handler
    /// (`--inject-delay-cycles`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ipi_delay_cycles: u64,
    /// The phase the headline, metrics and expectations read, as `--phase`
    /// picked it; absent: the measured-phase rule
    /// ([`RunReport::measured_phase`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// vCPUs.
    pub vcpus: usize,
    /// Iterations.
    pub iterations: u64,
    /// Warm-up iterations.
    pub warmup: u64,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// The levers (`disabled_exits`, `halt_poll_ns`, `realtime_hint` and
    /// `pin` always, the others when set).
    #[serde(flatten, serialize_with = "Levers::serialize_recorded")]
    pub levers: Levers,
    /// The custom payload, if not the built-in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// `BootInfo::params` (`--param`; the multicast's target set), when
    /// any is set.
    #[serde(default, skip_serializing_if = "is_zero_params")]
    pub params: [u64; 8],
    /// Host CPUs this process could run on (0: unknown, or recorded before
    /// ipivmm recorded it); more vCPUs than that is oversubscribed.
    #[serde(default)]
    pub host_cpus: usize,
}

/// The machine's default configuration (`ipivmm::VmConfig::default`, as
/// its tests hold it): 2 vCPUs, 64 MiB, kernel irqchip, xAPIC, ICR writes,
/// the ping-pong workload with spinning targets, 1000 iterations after 100
/// of warm-up; the host's CPUs unknown (0).
impl Default for RunConfig {
    fn default() -> Self {
        Self {
            irqchip: Irqchip::Kernel,
            apic: ApicMode::Xapic,
            ipi: IpiPath::Icr,
            workload: Workload::Pingpong,
            target: TargetWait::Spin,
            halt_settle_ns: 20_000,
            ipi_delay_cycles: 0,
            phase: None,
            vcpus: 2,
            iterations: 1000,
            warmup: 100,
            memory_mib: 64,
            levers: Levers::default(),
            payload: None,
            params: [0; 8],
            host_cpus: 0,
        }
    }
}

fn is_zero_params(p: &[u64; 8]) -> bool {
    p.iter().all(|v| *v == 0)
}

impl RunConfig {
    /// The IPIs one operation of the built-in workload delivers in this
    /// run (its description's fan-out); None for a custom payload.
    pub fn fan_out(&self) -> Option<u64> {
        self.payload
            .is_none()
            .then(|| self.workload.spec().fan_out.ipis(self.vcpus, &self.params))
    }

    /// Whether the vCPUs outnumbered the host CPUs (their threads then wait
    /// for each other's time slices; the payload's barriers halt).
    pub fn oversubscribed(&self) -> bool {
        self.host_cpus > 0 && self.vcpus > self.host_cpus
    }

    /// What ran in the guest: the built-in workload's name, or the custom
    /// payload's file name (without directories).
    pub fn workload_label(&self) -> String {
        match &self.payload {
            None => self.workload.name().to_string(),
            Some(p) => Path::new(p)
                .file_name()
                .map_or_else(|| p.clone(), |n| n.to_string_lossy().into_owned()),
        }
    }

    /// The one label of a run of this configuration with APICv request
    /// `apicv` ([`identity::ConfigId::label`]: `irqchip/apic/ipi`, then
    /// the levers that differ from the defaults), e.g.
    /// `kernel/x2apic/icr apicv-inhibit -exits:hlt rt`.
    pub fn label(&self, apicv: crate::mode::ApicvRequest) -> String {
        identity::ConfigId::from_parts(self, apicv, None, None).label()
    }
}

/// Everything a run produced, including partial results of a failed run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    /// What ran.
    pub mode: RunConfig,
    /// APICv/AVIC plan of the VM.
    #[serde(default)]
    pub apicv: ApicvPlan,
    /// How it ended.
    pub status: RunStatus,
    /// TSC frequency in kHz.
    pub tsc_khz: u64,
    /// Timings.
    pub timings: Timings,
    /// Per-vCPU results.
    pub vcpus: Vec<VcpuResult>,
    /// The last part of the guest's serial output.
    pub serial_tail: String,
    /// Bytes of guest serial output dropped on the way to stdout
    /// (`--serial stdout`): its queue was full because stdout did not take
    /// them (a slow or stuck reader). 0 in older files.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub serial_dropped_bytes: u64,
    /// What counting cost this configuration, when it was measured (paired
    /// runs with the counters detached: `run --observer-effect`, and the first
    /// run of every sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer_effect: Option<observer::ObserverEffect>,
    /// The host's module parameters, CPU flags and APICv/AVIC/IPIv verdicts
    /// when this run was prepared (None: not probed, or an older file).
    #[serde(default)]
    pub host_settings: Option<HostSettings>,
    /// The host setting of the `sweep --host-param` stage this run ran
    /// under, e.g. `kvm_amd.avic=1` (None outside such a sweep).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_param: Option<String>,
    /// The named vCPU placement of a sweep this run ran with (`close`,
    /// `spread`: the `apicv-topology` preset; `mode.pin` has the CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// APICv/AVIC inhibits as the kernel reported them during the run
    /// (`kvm_apicv_inhibit_changed`; needs tracepoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apicv_observed: Option<apicv_observed::ApicvObserved>,
    /// The host as the run saw it (for the document; not per run in JSON).
    #[serde(skip)]
    pub host: Option<HostInfo>,
    /// Which of the repeats of its configuration this run is (0-based;
    /// `--repeat N` runs N independent VMs per configuration); absent for
    /// a single run and in files written before repeats existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// What else the host did during the run (/proc/stat), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_load: Option<crate::stats::HostLoad>,
    /// The `metrics` object as a results file recorded it (None for a run
    /// in memory: each write derives it anew). Kept as read, for checking
    /// a file's figures against its counters (`recorded.*` expectations).
    /// A run read from a file without one gets an empty object (a file
    /// whose metrics were stripped records none), never None: its figures
    /// are then "not recorded", not derived anew from its own counters.
    #[serde(default = "no_metrics_recorded", rename = "metrics", skip_serializing)]
    pub recorded_metrics: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The `metrics` of a run read from a file that has none.
fn no_metrics_recorded() -> Option<serde_json::Map<String, serde_json::Value>> {
    Some(serde_json::Map::new())
}

impl RunReport {
    /// Why a run stops its configuration's other repeats, if it does: a run
    /// that could not start will not start the next time either, and a guest
    /// that went over the guest memory budget does the same every time (the
    /// budget is the whole command's).
    pub fn stops_repeats(&self) -> Option<&'static str> {
        match &self.status {
            RunStatus::OverBudget { .. } => Some(
                "its other repeats are not run (a guest that floods the host does so every time, \
                 and the budget is the whole command's)",
            ),
            RunStatus::Failed { .. } if self.vcpus.is_empty() => {
                Some("its other repeats are not run")
            }
            _ => None,
        }
    }

    /// Whether every vCPU finished successfully.
    pub fn succeeded(&self) -> bool {
        self.status == RunStatus::Completed
    }

    /// A run of `config` that could not start (`why`: the error, which
    /// names the fix): status `failed`, no vCPU results. A command keeps it
    /// among its runs, so that a run refused for a reason other than the
    /// host's (too few file descriptors, a payload gone) reads as a failed
    /// run, never as a skip.
    pub fn not_started(mode: RunConfig, apicv: crate::mode::ApicvRequest, why: &str) -> Self {
        RunReport {
            mode,
            apicv: crate::mode::apicv::ApicvPlan {
                requested: apicv,
                detail: "the run did not start".into(),
                ..Default::default()
            },
            status: RunStatus::Failed {
                reason: format!("could not start: {why}"),
            },
            tsc_khz: 0,
            timings: Timings::default(),
            vcpus: Vec::new(),
            serial_tail: String::new(),
            serial_dropped_bytes: 0,
            observer_effect: None,
            host_settings: None,
            host_param: None,
            placement: None,
            apicv_observed: None,
            host: None,
            repeat: None,
            host_load: None,
            recorded_metrics: None,
        }
    }

    /// Frees the phases' raw samples (their statistics stay: `latency`,
    /// the histogram, the p50's interval; the JSON never has them) and
    /// returns the bytes their buffers held, for
    /// the guest memory budget (`ipivmm_devices::budget::SharedBudget::release`).
    pub fn drop_samples(&mut self) -> u64 {
        let mut freed = 0u64;
        for p in self.vcpus.iter_mut().flat_map(|v| v.phases.iter_mut()) {
            freed = freed.saturating_add((p.samples.capacity() * 8) as u64);
            p.samples = Vec::new();
        }
        freed
    }

    /// The headline metrics of the run's measured phase: the `metrics`
    /// object the JSON carries for it (`runs[].metrics`), per operation and
    /// per delivered IPI.
    ///
    /// ```
    /// use ipivmm_analysis::results::Document;
    ///
    /// let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/run-pingpong-2026-12-01.json");
    /// let doc = Document::load(std::path::Path::new(file))?;
    /// let m = doc.runs[0].metrics();
    /// assert_eq!(m.values.get("ipis_per_operation"), Some(&1.0));
    /// # Ok::<(), ipivmm_analysis::Error>(())
    /// ```
    pub fn metrics(&self) -> metrics::RunMetrics {
        metrics::RunMetrics::of(&self.summary())
    }

    /// The one label of a run: [`Mode::label`](crate::mode::Mode::label), the levers that differ
    /// from the defaults, the named placement and the host setting of a
    /// `--host-param` sweep, e.g.
    /// `kernel/x2apic/icr apicv-inhibit -exits:hlt rt pin:0,1 close kvm_amd.avic=1`
    /// (docs/modes.md, "Labels", explains every part).
    pub fn label(&self) -> String {
        self.id().label()
    }

    /// The configuration this run ran ([`identity::ConfigId`]): what its
    /// repeats, rows and comparisons line up by.
    pub fn id(&self) -> identity::ConfigId {
        identity::ConfigId::of(self)
    }
}

/// A mode a sweep did not run, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedMode {
    /// The combination, as "workload Nv mode-label" (for people).
    pub mode: String,
    /// Why it was not run.
    pub reason: String,
    /// The configuration (what comparisons and scopes match; absent in
    /// files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<identity::ConfigId>,
}

/// What a `sweep --preset` answers on the host it ran on (the `preset`
/// object of the JSON document).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetReport {
    /// The preset, e.g. `avic-broadcast`.
    pub preset: String,
    /// The question it answers.
    pub question: String,
    /// What the seed report found, with its direction.
    pub seed: String,
    /// Why this host cannot answer the question (or part of it); empty
    /// when it can.
    pub host: Vec<String>,
    /// Every row of the plan.
    pub rows: Vec<PresetRow>,
}

/// One row of a preset: whether it ran, and why it cannot answer the
/// question here if it cannot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresetRow {
    /// The row's label (`workload Nv mode ...`).
    pub row: String,
    /// It ran (false: skipped).
    pub runs: bool,
    /// Why it does not answer the question on this host (for a skipped
    /// row, the skip reason); None: it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
}

/// The JSON document of `run` and `sweep`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Document {
    /// `ipivmm.results/1`.
    pub schema: String,
    /// Version of the ipivmm that wrote it.
    pub ipivmm_version: String,
    /// When the document was written (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_at: Option<u64>,
    /// Host fingerprint (None if it could not be read, with `host_error`).
    pub host: Option<HostInfo>,
    /// Why the host could not be fingerprinted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
    /// The runs, in the order they ran; each written with its derived
    /// `metrics` object ([`metrics::RunMetrics`]).
    #[serde(serialize_with = "metrics::serialize_runs")]
    pub runs: Vec<RunReport>,
    /// Modes that were asked for but skipped.
    #[serde(default)]
    pub skipped: Vec<SkippedMode>,
    /// With `sweep --preset`: the question and what this host can answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<PresetReport>,
    /// Present while the runs are still being written (a sweep appends
    /// each finished run as it completes): what is missing. A file that
    /// still has it when read was left by a sweep that was killed or is
    /// still running; its runs are complete, the rest never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Each configuration with its repeats' figures: medians with their
    /// intervals, spreads, counts, the effect they can detect
    /// ([`repeats::ConfigurationStats`]); derived from `runs` when written
    /// (readers recompute it; it is never read back).
    #[serde(default, skip_deserializing)]
    pub configurations: Vec<repeats::ConfigurationStats>,
}

impl Document {
    /// A document of `runs`, with the host the first run saw (fingerprinted
    /// now if none did).
    pub fn new(runs: Vec<RunReport>, skipped: Vec<SkippedMode>) -> Self {
        let probed = match runs.iter().find_map(|r| r.host.clone()) {
            Some(h) => Ok(h),
            None => ipivmm_host::facts::probe().map_err(|e| e.to_string()),
        };
        let (host, host_error) = match probed {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(e)),
        };
        Self {
            schema: SCHEMA.into(),
            ipivmm_version: env!("CARGO_PKG_VERSION").into(),
            recorded_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs()),
            host,
            host_error,
            configurations: repeats::ConfigurationStats::of(&runs),
            runs,
            skipped,
            preset: None,
            incomplete: None,
        }
    }

    /// Makes every run's headline, metrics and expectations read phase
    /// `name` (`compare --phase`), and the per-configuration figures with
    /// them.
    pub fn read_phase(&mut self, name: &str) {
        for r in &mut self.runs {
            r.mode.phase = Some(name.to_string());
        }
        self.configurations = repeats::ConfigurationStats::of(&self.runs);
    }

    /// The document as pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Parses a document from JSON text (or the append-only [`journal`]
    /// form of a command still running or killed); `what` names the input
    /// in errors.
    pub fn from_json(text: &str, what: &str) -> Result<Self, Error> {
        if let Some(doc) = journal::parse(text, what) {
            return doc;
        }
        let bad = |problem: String| Error::Unreadable {
            what: what.to_string(),
            problem,
        };
        // The schema first, skipping everything else without building it
        // (a serde_json::Value of the whole document would take several
        // times the text's size: issue 20, case 17).
        #[derive(Deserialize)]
        struct Probe {
            schema: Option<serde_json::Value>,
        }
        let probe: Probe = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let schema = probe
            .schema
            .as_ref()
            .and_then(|s| s.as_str())
            .ok_or_else(|| bad("not an ipivmm results document (no \"schema\" field)".into()))?;
        match schema.strip_prefix(SCHEMA_PREFIX) {
            Some("1") => {}
            Some(v) => {
                return Err(bad(format!(
                    "schema {schema} is version {v}; this ipivmm reads {SCHEMA}"
                )))
            }
            None => {
                return Err(bad(format!(
                    "schema \"{schema}\" is not an ipivmm results schema ({SCHEMA})"
                )))
            }
        }
        let mut doc: Self =
            serde_json::from_str(text).map_err(|e| bad(format!("does not match {SCHEMA}: {e}")))?;
        // Derived, never read back: recomputed from the runs as read.
        doc.configurations = repeats::ConfigurationStats::of(&doc.runs);
        Ok(doc)
    }

    /// Reads and parses a results file: a regular file of at most
    /// `MAX_RESULTS_FILE` bytes, opened without blocking (a FIFO or a
    /// device is refused, not waited on).
    pub fn load(path: &Path) -> Result<Self, Error> {
        let what = path.display().to_string();
        let text =
            crate::inputs::read_text(path, MAX_RESULTS_FILE).map_err(|e| Error::Unreadable {
                what: what.clone(),
                problem: format!("cannot read: {e}"),
            })?;
        Self::from_json(&text, &what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_inputs_get_one_line_errors() {
        let e = Document::from_json("not json", "a.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("a.json: not JSON"), "{e}");
        let e = Document::from_json("{\"runs\": []}", "b.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.json") && e.contains("no \"schema\""), "{e}");
        let e = Document::from_json("{\"schema\": \"ipivmm.results/2\"}", "c.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("version 2"), "{e}");
        let e = Document::from_json("{\"schema\": \"other/1\"}", "d.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an ipivmm results schema"), "{e}");
        let e = Document::from_json(
            "{\"schema\": \"ipivmm.results/1\", \"ipivmm_version\": \"0\", \"host\": null}",
            "e.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing field `runs`"), "{e}");
        assert!(!e.contains('\n'));
        let e = Document::load(Path::new("/nonexistent/x.json"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/x.json: cannot read"), "{e}");
    }

    #[test]
    fn unknown_fields_are_tolerated() {
        let d = Document::from_json(
            r#"{"schema": "ipivmm.results/1", "ipivmm_version": "9", "host": null,
                "future": {"x": 1}, "runs": [], "skipped": []}"#,
            "f.json",
        )
        .unwrap();
        assert_eq!(d.ipivmm_version, "9");
    }

    /// Issue 20, case 19: the one line names a few stuck vCPUs and the
    /// count of the others (1024 of them made a 39.8 KB line).
    #[test]
    fn a_timeout_line_names_a_few_vcpus_and_counts_the_rest() {
        let stuck: Vec<String> = (0..1024)
            .map(|i| format!("vcpu{i} at rip=0x102125 rsp=0x8ff000"))
            .collect();
        let s = RunStatus::TimedOut {
            after_s: 60,
            stuck: stuck.join(", "),
            hint: String::new(),
        };
        let t = s.text();
        assert!(t.len() < 400, "{} bytes: {t}", t.len());
        assert!(t.contains("vcpu3 at") && !t.contains("vcpu4 at"), "{t}");
        assert!(t.contains("... and 1020 more"), "{t}");
        assert!(t.contains(DEFAULT_TIMEOUT_HINT), "{t}");
        let two = RunStatus::TimedOut {
            after_s: 1,
            stuck: "vcpu0 at rip=0x1, vcpu1 at rip=0x2".into(),
            hint: "lower --warmup".into(),
        };
        assert!(
            two.text().ends_with("vcpu1 at rip=0x2 (lower --warmup)"),
            "{}",
            two.text()
        );
    }

    #[test]
    fn every_status_round_trips() {
        for s in [
            RunStatus::Completed,
            RunStatus::Cancelled,
            RunStatus::Failed { reason: "x".into() },
            RunStatus::TimedOut {
                after_s: 3,
                stuck: "vcpu0 at rip=0x1".into(),
                hint: String::new(),
            },
            RunStatus::TimedOut {
                after_s: 3,
                stuck: "vcpu0 at rip=0x1".into(),
                hint: "lower --warmup".into(),
            },
            RunStatus::OverBudget {
                vcpu: 3,
                data: "samples".into(),
                limit_bytes: 1 << 20,
                reason: "vcpu3: the guest's samples exceeded".into(),
            },
        ] {
            let json = serde_json::to_string(&s).unwrap();
            assert!(json.contains(s.name()), "{json}");
            assert_eq!(serde_json::from_str::<RunStatus>(&json).unwrap(), s);
        }
    }

    #[test]
    fn labels_name_mode_levers_and_payload() {
        let rc = RunConfig {
            levers: Levers {
                disabled_exits: crate::mode::levers::ExitControls::from_bits(2),
                halt_poll_ns: Some(0),
                pin: vec![2, 3],
                ..Levers::default()
            },
            payload: Some("/x/y/demo".into()),
            ..Default::default()
        };
        assert_eq!(
            rc.label(crate::mode::ApicvRequest::Host),
            "kernel/xapic/icr -exits:hlt poll:0 pin:2,3"
        );
        assert_eq!(rc.workload_label(), "demo");
        assert_eq!(RunConfig::default().workload_label(), "pingpong");
    }

    #[test]
    fn a_host_param_run_is_labelled_with_its_setting_and_old_files_load() {
        let doc = Document::from_json(
            include_str!("../../tests/fixtures/run-pingpong-2026-12-01.json"),
            "example",
        )
        .unwrap();
        let mut r = doc.runs[0].clone();
        assert_eq!(
            (r.host_param.as_ref(), r.host_settings.as_ref()),
            (None, None)
        );
        let plain = r.label();
        r.host_param = Some("kvm_amd.avic=1".into());
        assert_eq!(r.label(), format!("{plain} kvm_amd.avic=1"));
        let back: RunReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.host_param.as_deref(), Some("kvm_amd.avic=1"));
    }
}
