//! Errors of the sampler: one line each, naming what to do about it.

use std::io;

use crate::tracefs::TracefsError;

/// Why a sampler could not be opened or controlled.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// tracefs is missing, or the event does not exist / has no readable format.
    #[error("{0}")]
    Tracefs(#[from] TracefsError),
    /// `perf_event_open` failed.
    #[error("{}", open_message(event, *id, source))]
    Open {
        /// `system:name` of the tracepoint.
        event: String,
        /// Its tracefs id.
        id: u64,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// Mapping the ring buffer failed.
    #[error("{}", mmap_message(*bytes, source))]
    Mmap {
        /// Size of the mapping asked for (metadata page included).
        bytes: usize,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// A perf ioctl failed.
    #[error("{what} failed: {source}")]
    Ioctl {
        /// Which ioctl.
        what: &'static str,
        /// OS error.
        #[source]
        source: io::Error,
    },
    /// The event format lacks a field the decoder needs.
    #[error(
        "event {event} has no field {field} on this kernel (format changed; update the decoder)"
    )]
    MissingField {
        /// `system:name`.
        event: String,
        /// The field (or alternatives, `a|b`).
        field: String,
    },
    /// The event does not exist on this kernel.
    #[error("event {0} does not exist on this kernel: load the module that defines it (modprobe kvm_intel / kvm_amd)")]
    NoSuchEvent(String),
    /// Nothing to sample.
    #[error("no tracepoint to sample")]
    NoEvents,
    /// The buffer size is not usable.
    #[error("ring buffer of {0} data pages: must be a power of two between 1 and 2^20")]
    BadPages(usize),
}

/// Result type of the sampler.
pub type Result<T> = std::result::Result<T, SamplerError>;

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn open_message(event: &str, id: u64, e: &io::Error) -> String {
    let what = format!("perf_event_open({event}, sampling)");
    match errno(e) {
        libc::EACCES | libc::EPERM => format!(
            "{what}: permission denied: sampling tracepoints with raw data needs root or \
             CAP_PERFMON (see /proc/sys/kernel/perf_event_paranoid)"
        ),
        libc::EMFILE => format!("{what}: too many open files (EMFILE): raise RLIMIT_NOFILE"),
        libc::ENFILE => format!("{what}: system-wide file limit reached (ENFILE)"),
        libc::ENOENT | libc::ENODEV => {
            format!("{what}: perf knows no tracepoint id {id} (ENOENT): is the kvm module loaded?")
        }
        libc::ENOSYS => format!("{what}: perf_event_open not supported by this kernel (ENOSYS)"),
        libc::EINVAL => format!("{what}: kernel rejected the attributes (EINVAL): {e}"),
        _ => format!("{what}: {e}"),
    }
}

fn mmap_message(bytes: usize, e: &io::Error) -> String {
    let what = format!("mmap of a {bytes}-byte perf ring buffer");
    match errno(e) {
        libc::EPERM | libc::ENOMEM | libc::EAGAIN => format!(
            "{what}: refused ({e}): over the locked-memory allowance: raise \
             /proc/sys/kernel/perf_event_mlock_kb or RLIMIT_MEMLOCK (ulimit -l), run as \
             root / CAP_IPC_LOCK, or use fewer buffer pages"
        ),
        libc::EINVAL => format!("{what}: EINVAL (data pages must be a power of two)"),
        _ => format!("{what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_fix() {
        let open = |errno| SamplerError::Open {
            event: "kvm:kvm_exit".into(),
            id: 7,
            source: io::Error::from_raw_os_error(errno),
        };
        assert!(open(libc::EACCES)
            .to_string()
            .contains("root or CAP_PERFMON"));
        assert!(open(libc::EPERM)
            .to_string()
            .contains("root or CAP_PERFMON"));
        assert!(open(libc::EMFILE).to_string().contains("RLIMIT_NOFILE"));
        assert!(open(libc::ENOENT).to_string().contains("kvm module loaded"));
        let mmap = SamplerError::Mmap {
            bytes: 8192,
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        let m = mmap.to_string();
        assert!(
            m.contains("perf_event_mlock_kb") && m.contains("RLIMIT_MEMLOCK"),
            "{m}"
        );
        for e in [open(libc::EACCES), mmap, SamplerError::BadPages(3)] {
            assert!(!e.to_string().contains('\n'));
        }
    }
}
