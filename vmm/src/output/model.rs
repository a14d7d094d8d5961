//! A deserializable mirror of the `ipivmm.results/1` JSON document
//! ([`crate::json::Document`]), so `compare`, `--plot` and CSV can work from
//! recorded files. Unknown fields are ignored (newer writers may add some);
//! every field the writer emits is mirrored, which the round-trip test
//! checks. docs/results-schema.md describes the fields.
use crate::latency::LatencyStats;
use crate::run::RunReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

use super::OutputError;

/// The top-level document.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Document {
    /// Schema identifier, e.g. `ipivmm.results/1`.
    pub schema: String,
    /// Version of the ipivmm that wrote it.
    pub ipivmm_version: String,
    /// When the document was written (Unix seconds), if the writer recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_at: Option<u64>,
    /// Host fingerprint.
    pub host: Option<Host>,
    /// Why the host could not be fingerprinted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
    /// The runs.
    pub runs: Vec<Run>,
    /// Modes that were skipped.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
}

/// A skipped mode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Skipped {
    /// The mode, as "irqchip/apic/ipi/workload".
    pub mode: String,
    /// Why.
    pub reason: String,
}

/// Host fingerprint (mirror of `ipivmm_counters::host::HostInfo`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Host {
    /// CPU vendor id.
    pub cpu_vendor: String,
    /// CPU model name.
    pub cpu_model: String,
    /// CPU family and model numbers.
    pub cpu_family_model: (Option<u32>, Option<u32>),
    /// Logical CPUs.
    pub logical_cpus: u32,
    /// Virtualization-relevant CPU flags.
    pub virt_flags: BTreeMap<String, bool>,
    /// Kernel release.
    pub kernel_release: String,
    /// /dev/kvm state.
    pub dev_kvm: DevKvm,
    /// KVM backend, e.g. `kvm_intel`, `kvm_amd`, `kvm_pvm`.
    pub backend: String,
    /// Loaded KVM modules.
    pub modules: Vec<String>,
    /// Module parameters: module -> parameter -> raw value.
    pub params: BTreeMap<String, BTreeMap<String, String>>,
    /// APICv / IPIv / AVIC / x2AVIC verdicts.
    pub verdicts: BTreeMap<String, Verdict>,
}

/// /dev/kvm state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DevKvm {
    /// The node exists.
    pub present: bool,
    /// It opened read-write.
    pub openable: bool,
    /// Why not.
    pub error: Option<String>,
}

/// Whether a hardware interrupt-virtualization feature is usable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum Verdict {
    /// Enabled by the host.
    Available,
    /// Not usable, and why.
    Unavailable(String),
}

/// One run (mirror of [`RunReport`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// The mode and configuration.
    pub mode: Mode,
    /// APICv/AVIC state of the VM (absent in files written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apicv: Option<Apicv>,
    /// How it ended.
    pub status: Status,
    /// TSC frequency, kHz.
    pub tsc_khz: u64,
    /// Timings, ns.
    pub timings: Timings,
    /// Per-vCPU results.
    pub vcpus: Vec<Vcpu>,
    /// Tail of the guest's serial output.
    pub serial_tail: String,
}

/// Mode and configuration of a run (mirror of [`crate::run::ModeSummary`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mode {
    /// Irqchip: kernel, split, user.
    pub irqchip: String,
    /// Guest APIC: xapic, x2apic.
    pub apic: String,
    /// IPI path: icr, pv.
    pub ipi: String,
    /// Workload.
    pub workload: String,
    /// Target wait: spin, halt.
    pub target: String,
    /// vCPUs.
    pub vcpus: usize,
    /// Measured iterations.
    pub iterations: u64,
    /// Warm-up iterations.
    pub warmup: u64,
    /// Guest RAM, MiB.
    pub memory_mib: u64,
    /// Exits turned off with KVM_CAP_X86_DISABLE_EXITS (hlt, pause, mwait, cstate).
    #[serde(default)]
    pub disabled_exits: Vec<String>,
    /// Per-VM halt-polling limit, ns (null = host default).
    #[serde(default)]
    pub halt_poll_ns: Option<u32>,
    /// KVM_HINTS_REALTIME advertised to the guest.
    #[serde(default)]
    pub realtime_hint: bool,
    /// Host CPU of each vCPU (empty = not pinned).
    #[serde(default)]
    pub pin: Vec<usize>,
    /// The custom payload (absent: the built-in one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

impl Mode {
    /// "irqchip/apic/ipi", the label of the mode in charts and tables.
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.irqchip, self.apic, self.ipi)
    }

    /// The label plus the levers that differ from the defaults, e.g.
    /// "kernel/x2apic/icr no-exit:hlt poll=0ns rt pin=2,3".
    pub fn full_label(&self) -> String {
        let mut s = self.label();
        if !self.disabled_exits.is_empty() {
            s += &format!(" no-exit:{}", self.disabled_exits.join(","));
        }
        if let Some(ns) = self.halt_poll_ns {
            s += &format!(" poll={ns}ns");
        }
        if self.realtime_hint {
            s += " rt";
        }
        if !self.pin.is_empty() {
            let cpus: Vec<String> = self.pin.iter().map(|c| c.to_string()).collect();
            s += &format!(" pin={}", cpus.join(","));
        }
        s
    }
}

/// APICv/AVIC state of a run (mirror of `crate::apicv::ApicvPlan`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Apicv {
    /// What was asked: `host` or `inhibit`.
    pub requested: String,
    /// The lever used: `none`, `no_irqchip`, `pit_reinject`, `apic_id_modified`.
    pub lever: String,
    /// `active`, `inhibited`, `unavailable` or `unknown`.
    pub effective: String,
    /// Why, in words.
    pub detail: String,
}

/// How a run ended (mirror of [`crate::run::RunStatus`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Status {
    /// Every vCPU finished.
    Completed,
    /// A vCPU faulted or the payload failed.
    Failed {
        /// Why.
        reason: String,
    },
    /// The watchdog stopped it.
    TimedOut {
        /// Timeout, s.
        after_s: u64,
        /// Where the vCPUs were.
        stuck: String,
    },
}

/// Timings of a run, ns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Timings {
    /// Until the VM was ready.
    pub setup_ns: u64,
    /// Until the first guest message.
    pub first_message_ns: Option<u64>,
    /// Whole run.
    pub total_ns: u64,
    /// Peak resident memory of the process, KiB.
    #[serde(default)]
    pub peak_rss_kib: Option<u64>,
}

/// One vCPU (mirror of [`crate::results::VcpuResult`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Vcpu {
    /// Index.
    pub index: usize,
    /// APIC ID.
    pub apic_id: u32,
    /// Finished phases.
    pub phases: Vec<Phase>,
    /// Userspace exits of the whole run, by kind.
    pub exits: BTreeMap<String, u64>,
    /// Counter sources and their availability.
    pub sources: Vec<Source>,
    /// How the vCPU ended.
    pub end: Option<serde_json::Value>,
    /// Rejected control-port messages.
    pub rejected_messages: Vec<String>,
    /// Unclaimed port/MMIO accesses.
    pub unclaimed_accesses: u64,
}

/// Availability of a counter source.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Source {
    /// Source name.
    pub source: String,
    /// Whether it produced figures.
    pub available: bool,
    /// Why not, or caveats.
    pub detail: Option<String>,
}

/// One phase of one vCPU (mirror of [`crate::results::PhaseResult`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Phase {
    /// Phase id.
    pub id: u32,
    /// Phase name.
    pub name: String,
    /// Wall time, ns.
    pub wall_ns: u64,
    /// Userspace exits by kind (source `userspace_exits`).
    pub exits: BTreeMap<String, u64>,
    /// Guest-kept counters (source `guest`).
    pub guest: BTreeMap<String, u64>,
    /// KVM binary stats deltas (source `kvm_stats`).
    pub kvm_stats: BTreeMap<String, u64>,
    /// Tracepoint counter deltas (source `tracepoints`).
    pub tracepoints: BTreeMap<String, u64>,
    /// ICR-write exits and where the figure came from.
    pub icr_write_exits: Option<IcrExits>,
    /// Latency statistics and histogram.
    pub latency: Option<LatencyStats>,
    /// Named values the payload recorded.
    pub records: BTreeMap<String, u64>,
}

/// ICR-write exits of a phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IcrExits {
    /// ICR writes that left guest mode.
    pub exits: u64,
    /// Guest-issued ICR writes minus exits.
    pub accelerated: u64,
    /// Which counter the figure comes from.
    pub source: String,
}

/// The supported schema family and version.
const SCHEMA_PREFIX: &str = "ipivmm.results/";

impl Document {
    /// Parses a document from JSON text; `what` names the input in errors.
    pub fn from_json(text: &str, what: &str) -> Result<Self, OutputError> {
        let bad = |problem: String| OutputError::BadInput {
            what: what.to_string(),
            problem,
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let schema = value
            .get("schema")
            .and_then(|s| s.as_str())
            .ok_or_else(|| bad("not an ipivmm results document (no \"schema\" field)".into()))?;
        match schema.strip_prefix(SCHEMA_PREFIX) {
            Some("1") => {}
            Some(v) => {
                return Err(bad(format!(
                    "schema {schema} is version {v}; this ipivmm reads {}",
                    crate::json::SCHEMA
                )))
            }
            None => {
                return Err(bad(format!(
                    "schema \"{schema}\" is not an ipivmm results schema ({})",
                    crate::json::SCHEMA
                )))
            }
        }
        Document::deserialize(&value)
            .map_err(|e| bad(format!("does not match {}: {e}", crate::json::SCHEMA)))
    }

    /// Reads and parses a results file.
    pub fn load(path: &Path) -> Result<Self, OutputError> {
        let what = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| OutputError::BadInput {
            what: what.clone(),
            problem: format!("cannot read: {e}"),
        })?;
        Self::from_json(&text, &what)
    }
}

impl Run {
    /// The mode's [`Mode::full_label`], plus "apicv-inhibited" when the run
    /// asked for APICv/AVIC to be inhibited.
    pub fn label(&self) -> String {
        let mut s = self.mode.full_label();
        if self
            .apicv
            .as_ref()
            .is_some_and(|a| a.requested == "inhibit")
        {
            s += " apicv-inhibited";
        }
        s
    }

    /// The model of an in-memory report (through its JSON form).
    pub fn of_report(r: &RunReport) -> Result<Self, OutputError> {
        let v = serde_json::to_value(r).map_err(|e| OutputError::Model(e.to_string()))?;
        Run::deserialize(&v).map_err(|e| OutputError::Model(e.to_string()))
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
}
