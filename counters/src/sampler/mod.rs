//! Sampling `kvm:*` tracepoints into a per-thread perf ring buffer.
//!
//! One exit-reason mechanism whose cost per exit does not grow with the
//! number of reasons: instead of one filtered counting event per reason
//! (every filter evaluated on every exit), each vCPU thread samples
//! `kvm:kvm_exit` and `kvm:kvm_entry` with their raw data into one ring and
//! decodes reason and host time in userspace ([`ExitSampler`]).
//! `kvm:kvm_apicv_inhibit_changed` is sampled the same way
//! ([`InhibitSampler`]).
//!
//! Small modules, one job each:
//! - [`ring`]: the mmap ring (acquire/release on `data_head`/`data_tail`,
//!   wrap-around) and pure record parsing.
//! - [`event`]: opening sampling tracepoint events on the calling thread
//!   (or CPU-wide), sharing one ring (`SET_OUTPUT`), sample ids,
//!   enable/disable.
//! - `cpus`: the online CPUs, for CPU-wide events.
//! - [`raw`]: reading fields of a tracepoint's raw data by its `format`.
//! - [`exits`]: exit/entry pairing into per-reason counts and host time
//!   ([`ExitTally`], defined in `tally.rs`).
//! - [`inhibit`]: APICv inhibit changes and their names.
//! - [`error`]: errors with the fix in the message.
//!
//! Nothing is silently under-counted: records the kernel drops are reported
//! (`PERF_RECORD_LOST` → `lost`), as are throttling, undecodable records and
//! exits that could not be paired.

mod cpus;
pub mod error;
pub mod event;
pub mod exits;
pub mod inhibit;
pub mod raw;
mod records;
pub mod ring;
mod tally;

#[cfg(test)]
mod tests;

pub use error::{Result, SamplerError};
pub use exits::{ExitSampler, ExitTally, ReasonTally};
pub use inhibit::{decode_mask, inhibit_names, InhibitChange, InhibitSampler};

use crate::tracefs::{EventFormat, Tracefs, TracefsError};

/// The format of `system:name`, with a missing event reported with its fix.
pub(crate) fn event_format(
    tracefs: &Tracefs,
    system: &str,
    name: &str,
) -> Result<std::sync::Arc<EventFormat>> {
    tracefs
        .event_format_shared(system, name)
        .map_err(|e| match e {
            TracefsError::NoSuchEvent { system, name } => {
                SamplerError::NoSuchEvent(format!("{system}:{name}"))
            }
            e => SamplerError::Tracefs(e),
        })
}
