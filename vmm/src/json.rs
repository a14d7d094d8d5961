//! The JSON document of a run: a versioned envelope around [`RunReport`].
use crate::run::RunReport;
use serde::Serialize;

/// Schema identifier; bump the number on incompatible changes.
pub const SCHEMA: &str = "ipivmm.run/1";

/// The top-level JSON object.
#[derive(Serialize)]
pub struct Document<'a> {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// ipivmm version.
    pub ipivmm_version: &'static str,
    /// The run.
    pub run: &'a RunReport,
}

/// Wrap a report for serialization.
pub fn document(report: &RunReport) -> Document<'_> {
    Document {
        schema: SCHEMA,
        ipivmm_version: env!("CARGO_PKG_VERSION"),
        run: report,
    }
}
