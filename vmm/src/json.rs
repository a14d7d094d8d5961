//! The JSON results document: one versioned envelope for `run` (one run)
//! and `sweep` (many), with the host fingerprint. docs/results-schema.md
//! describes it field by field.
use crate::run::RunReport;
use ipivmm_counters::host::HostInfo;
use serde::Serialize;

/// Schema identifier; bump the number on incompatible changes.
pub const SCHEMA: &str = "ipivmm.results/1";

/// A mode a sweep did not run, and why.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedMode {
    /// The mode, as "irqchip/apic/ipi/workload".
    pub mode: String,
    /// Why it cannot run here.
    pub reason: String,
}

/// The top-level JSON object.
#[derive(Serialize)]
pub struct Document<'a> {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// ipivmm version.
    pub ipivmm_version: &'static str,
    /// Host fingerprint (None if it could not be read, with `host_error`).
    pub host: Option<HostInfo>,
    /// Why the host could not be fingerprinted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_error: Option<String>,
    /// The runs, in the order they ran.
    pub runs: Vec<&'a RunReport>,
    /// Modes that were asked for but skipped.
    pub skipped: &'a [SkippedMode],
}

/// Wrap reports for serialization, fingerprinting the host now.
pub fn document<'a>(runs: Vec<&'a RunReport>, skipped: &'a [SkippedMode]) -> Document<'a> {
    let (host, host_error) = match ipivmm_counters::host::probe() {
        Ok(h) => (Some(h), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Document {
        schema: SCHEMA,
        ipivmm_version: env!("CARGO_PKG_VERSION"),
        host,
        host_error,
        runs,
        skipped,
    }
}

/// Write `doc` pretty-printed with a trailing newline.
pub fn write<W: std::io::Write>(mut out: W, doc: &Document<'_>) -> Result<(), String> {
    serde_json::to_writer_pretty(&mut out, doc).map_err(|e| e.to_string())?;
    writeln!(out).map_err(|e| e.to_string())
}
