//! ipivmm's analysis side, without KVM: what a run recorded and what is
//! concluded from it. It builds and runs on a machine with no `/dev/kvm`
//! (a CI box judging recorded files, a notebook); the machine that runs
//! VMs is the `ipivmm` crate, which depends on this one.
//!
//! - [`results`]: the one results model (`ipivmm.results/1`): a run's
//!   [`RunReport`](results::RunReport), a file's
//!   [`Document`](results::Document), the configuration identity
//!   ([`results::identity::ConfigId`]), headline figures and metrics;
//! - [`mode`]: the configuration data a run records (its mode parts and
//!   levers), and the one feasibility check of a mode against a host;
//! - [`stats`]: the statistics of repeated runs;
//! - [`gate`]: the one decision rule every comparison goes through;
//! - [`compare`]: recordings lined up for the gate;
//! - [`expect`]: expectations (`ipis_per_operation == fan_out`) judged on
//!   results, and their verdicts as TAP and JUnit;
//! - [`plan`]: plan files (`plans/*.toml`) read and checked, and judged on
//!   recorded results;
//! - [`inputs`], [`interrupt`]: reading user-named files safely; the
//!   signals that cancel a command's runs;
//! - [`Error`]: a results file that cannot be read, recordings that cannot
//!   be judged, documents that cannot be compared.
//!
//! # Gating two recordings
//!
//! Two results files (`ipivmm run --json`, or a sweep's) compared
//! configuration by configuration, every figure decided by the gate:
//!
//! ```
//! use ipivmm_analysis::compare::{Comparison, GateOptions};
//! use ipivmm_analysis::gate::Verdict;
//! use ipivmm_analysis::results::Document;
//! use std::path::Path;
//!
//! let file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/run-pingpong-2026-12-01.json");
//! let before = Document::load(Path::new(file))?;
//! // A second recording of the same configuration (here the first, edited:
//! // the same run given twice is refused, a recording counts once).
//! let mut after = before.clone();
//! after.runs[0].timings.total_ns += 1;
//! let files = [("before.json".to_string(), before), ("after.json".to_string(), after)];
//! let report = Comparison::of(&files)?.gate(&GateOptions::default());
//! for (endpoint, judged) in report.endpoints.iter().zip(&report.family.judged) {
//!     println!("row {} {:?}: {:?}", endpoint.row, endpoint.metric, judged.outcome);
//! }
//! // One recording a side and no noise profile: the counts are judged, the
//! // latency stays undecided (exit 4), never a silent pass.
//! assert_eq!(report.verdict(), Verdict::Undecided);
//! assert_eq!(report.exit_code(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod compare;
mod error;
pub mod expect;
pub mod gate;
pub mod inputs;
pub mod interrupt;
pub mod mode;
pub mod plan;
pub mod results;
pub mod stats;

pub use error::Error;
