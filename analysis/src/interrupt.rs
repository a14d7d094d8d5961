//! SIGINT, SIGTERM and SIGHUP: stop the run cleanly and keep what it
//! measured (signal-hook's flags).
//!
//! [`cancel_flag`] registers the three signals (once per process) and returns
//! the flag they set, to put in
//! `ipivmm::RunOptions::cancel`. The run loop sees
//! the flag within one kick interval, stops every vCPU, and returns a report
//! with status `Cancelled` and every phase finished so far; the caller then
//! writes its outputs as usual and exits non-zero. [`received`] names the
//! signal. Two deliveries of one request are one request: `timeout`, a
//! supervisor or a shell's `kill 0` sends SIGTERM to the process and to its
//! group, so the same signal arrives twice within microseconds, and the
//! clean stop must go on. A second *distinct* request — another signal, or
//! the same one more than `DUPLICATE_WINDOW_NS` after the first — ends
//! the process at once with 128 + signal, so a user or a script can still
//! end a process whose clean stop hangs.
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Within this time of the first signal, the same signal again is the same
/// request delivered twice (process and process group), not a second one.
pub(crate) const DUPLICATE_WINDOW_NS: u64 = 500_000_000;

/// What a signal means given what came before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// The first: stop cleanly.
    First,
    /// The first one delivered again: ignore it.
    Duplicate,
    /// A second request: end the process now.
    Escalate,
}

/// Classifies signal `sig` arriving at `now_ns`, given the first signal
/// (`first`, 0 if none) and when it arrived. Pure: the handler's logic.
pub(crate) fn classify(first: usize, first_at_ns: u64, sig: usize, now_ns: u64) -> Request {
    if first == 0 {
        Request::First
    } else if first == sig && now_ns.saturating_sub(first_at_ns) <= DUPLICATE_WINDOW_NS {
        Request::Duplicate
    } else {
        Request::Escalate
    }
}

/// CLOCK_MONOTONIC in ns (async-signal-safe: one clock_gettime).
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// Signals that cancel a run.
pub(crate) const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The flag and the last signal, once registered.
static INSTALLED: Mutex<Option<(Arc<AtomicBool>, Arc<AtomicUsize>)>> = Mutex::new(None);

/// Why the handlers could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub(crate) struct InterruptError {
    signal: &'static str,
    #[source]
    source: std::io::Error,
}

/// The name of signal `sig`, e.g. `SIGTERM`.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Registers the handlers (once per process; later calls return the same
/// flag) and returns the flag they set.
pub(crate) fn install() -> Result<Arc<AtomicBool>, InterruptError> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((cancel, _)) = installed.as_ref() {
        return Ok(Arc::clone(cancel));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicUsize::new(0));
    let first_at = Arc::new(AtomicU64::new(0));
    for sig in SIGNALS {
        let err = |source| InterruptError {
            signal: signal_name(sig),
            source,
        };
        let (cancel, last, first_at) = (cancel.clone(), last.clone(), first_at.clone());
        let handler = move || {
            let now = monotonic_ns();
            // The first signal wins the exchange; a racing one sees it.
            let first =
                match last.compare_exchange(0, sig as usize, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        first_at.store(now, Ordering::SeqCst);
                        cancel.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(first) => first,
                };
            if classify(first, first_at.load(Ordering::SeqCst), sig as usize, now)
                == Request::Escalate
            {
                signal_hook::low_level::exit(128 + sig);
            }
        };
        // SAFETY: the handler is async-signal-safe: it only touches atomics
        // it owns (Arc clones kept alive by the registration), reads the
        // monotonic clock (clock_gettime is async-signal-safe per POSIX)
        // and may call `_exit` (signal_hook::low_level::exit); it allocates,
        // locks and prints nothing.
        unsafe { signal_hook::low_level::register(sig, handler) }.map_err(err)?;
    }
    *installed = Some((Arc::clone(&cancel), last));
    Ok(cancel)
}

/// The cancel flag for `ipivmm::RunOptions::cancel`:
/// registers the handlers on first use. If they cannot be registered, logs
/// why and returns a flag that is never set (a signal then kills the process
/// the default way).
pub fn cancel_flag() -> Arc<AtomicBool> {
    match install() {
        Ok(flag) => flag,
        Err(e) => {
            log::warn!("{e}; a signal will kill ipivmm without writing partial results");
            Arc::new(AtomicBool::new(false))
        }
    }
}

/// The signal that cancelled the run, if one arrived: its number (e.g. to
/// exit with 128 + signal like a shell would) and its name (`SIGTERM`).
pub fn received() -> Option<(i32, &'static str)> {
    let installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    match installed.as_ref()?.1.load(Ordering::SeqCst) {
        0 => None,
        s => Some((s as i32, signal_name(s as i32))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_delivery_is_one_request_and_a_distinct_one_escalates() {
        let w = DUPLICATE_WINDOW_NS;
        let (term, int) = (SIGTERM as usize, SIGINT as usize);
        assert_eq!(classify(0, 0, term, 5), Request::First);
        // timeout(1) forwarding SIGTERM to the process and its group.
        assert_eq!(classify(term, 100, term, 100 + 50_000), Request::Duplicate);
        assert_eq!(classify(term, 100, term, 100 + w), Request::Duplicate);
        // A user asking again later, or with another signal.
        assert_eq!(classify(term, 100, term, 101 + w), Request::Escalate);
        assert_eq!(classify(term, 100, int, 101), Request::Escalate);
    }

    #[test]
    fn install_is_idempotent_and_a_signal_sets_the_flag() {
        let a = install().expect("install");
        let b = cancel_flag();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!a.load(Ordering::SeqCst));
        signal_hook::low_level::raise(SIGHUP).expect("raise");
        assert!(a.load(Ordering::SeqCst));
        assert_eq!(received(), Some((SIGHUP, "SIGHUP")));
        assert_eq!(signal_name(SIGHUP), "SIGHUP");
    }
}
