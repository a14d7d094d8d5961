//! SIGINT, SIGTERM and SIGHUP: stop the run cleanly and keep what it
//! measured (signal-hook's flags).
//!
//! [`cancel_flag`] registers the three signals (once per process) and returns
//! the flag they set, to put in
//! [`RunOptions::cancel`](crate::run::RunOptions::cancel). The run loop sees
//! the flag within one kick interval, stops every vCPU, and returns a report
//! with status `Cancelled` and every phase finished so far; the caller then
//! writes its outputs as usual and exits non-zero. [`received`] names the
//! signal. A second signal while the first is being handled ends the process
//! at once with 128 + signal (signal-hook's conditional shutdown), so a user
//! or a script's `kill` can still end a process whose clean stop hangs.
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::flag;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Signals that cancel a run.
pub const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The flag and the last signal, once registered.
static INSTALLED: Mutex<Option<(Arc<AtomicBool>, Arc<AtomicUsize>)>> = Mutex::new(None);

/// Why the handlers could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub struct InterruptError {
    signal: &'static str,
    #[source]
    source: std::io::Error,
}

/// The name of signal `sig`, e.g. `SIGTERM`.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Registers the handlers (once per process; later calls return the same
/// flag) and returns the flag they set.
pub fn install() -> Result<Arc<AtomicBool>, InterruptError> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((cancel, _)) = installed.as_ref() {
        return Ok(Arc::clone(cancel));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicUsize::new(0));
    for sig in SIGNALS {
        let err = |source| InterruptError {
            signal: signal_name(sig),
            source,
        };
        // Order matters: the shutdown check runs first, so only a signal
        // that arrives after the flag is set ends the process.
        flag::register_conditional_shutdown(sig, 128 + sig, Arc::clone(&cancel)).map_err(err)?;
        flag::register(sig, Arc::clone(&cancel)).map_err(err)?;
        flag::register_usize(sig, Arc::clone(&last), sig as usize).map_err(err)?;
    }
    *installed = Some((Arc::clone(&cancel), last));
    Ok(cancel)
}

/// The cancel flag for [`RunOptions::cancel`](crate::run::RunOptions::cancel):
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

/// The signal that cancelled the run, if one arrived (e.g. to exit with
/// 128 + signal like a shell would).
pub fn received() -> Option<i32> {
    let installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    match installed.as_ref()?.1.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_is_idempotent_and_a_signal_sets_the_flag() {
        let a = install().expect("install");
        let b = cancel_flag();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!a.load(Ordering::SeqCst));
        signal_hook::low_level::raise(SIGHUP).expect("raise");
        assert!(a.load(Ordering::SeqCst));
        assert_eq!(received(), Some(SIGHUP));
        assert_eq!(signal_name(SIGHUP), "SIGHUP");
    }
}
