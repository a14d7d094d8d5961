//! Ctrl-C and SIGTERM: stop the run cleanly and keep what it measured.
//!
//! [`cancel_flag`] installs a SIGINT/SIGTERM handler (once per process) and
//! returns the flag it sets, to put in
//! [`RunOptions::cancel`](crate::run::RunOptions::cancel). The run loop sees
//! the flag within one kick interval, stops every vCPU, and returns a report
//! with status `Cancelled` and every phase finished so far; the caller then
//! writes its outputs (`--json`, ...) as usual and exits non-zero.
//!
//! The handler is async-signal-safe: the first signal only stores `true` to
//! an atomic (and records which signal it was). A second signal while the
//! first is being handled restores the default action and re-raises, so a
//! user (or a script's `kill`) can still end a process whose clean stop
//! hangs.
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// The flag the handler sets; leaked into a static by [`install`], so the
/// pointer stays valid for the life of the process.
static FLAG: AtomicPtr<AtomicBool> = AtomicPtr::new(std::ptr::null_mut());
/// The signal that set the flag (0: none yet).
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// The installed flag, handed out to callers.
static INSTALLED: Mutex<Option<Arc<AtomicBool>>> = Mutex::new(None);

/// Signals that cancel a run.
pub const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// Why the handler could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub struct InterruptError {
    signal: &'static str,
    #[source]
    source: std::io::Error,
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Async-signal-safe: atomic loads and stores only, plus sigaction and
    // raise (both on the POSIX async-signal-safe list) for a second signal.
    let flag = FLAG.load(Ordering::Acquire);
    if flag.is_null() {
        return;
    }
    // SAFETY: FLAG only ever holds a pointer obtained from `Arc::into_raw`
    // on an Arc that is never released, so it is valid for the whole process.
    let flag = unsafe { &*flag };
    if flag.swap(true, Ordering::SeqCst) {
        // Second signal: the clean stop is taking too long; die as the
        // default action would.
        // SAFETY: a zeroed sigaction with SIG_DFL is a valid argument;
        // sigaction and raise are async-signal-safe.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    SIGNAL.store(sig, Ordering::SeqCst);
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Installs the SIGINT/SIGTERM handler (once per process; later calls
/// return the same flag) and returns the flag it sets.
pub fn install() -> Result<Arc<AtomicBool>, InterruptError> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(flag) = installed.as_ref() {
        return Ok(Arc::clone(flag));
    }
    let flag = Arc::new(AtomicBool::new(false));
    // One strong count is leaked on purpose: the handler may run at any time
    // for the rest of the process.
    let raw = Arc::into_raw(Arc::clone(&flag)) as *mut AtomicBool;
    FLAG.store(raw, Ordering::Release);
    for sig in SIGNALS {
        // SAFETY: sigaction is plain data; zeroed is a valid empty mask and
        // no flags. The handler has the one-argument signature that
        // sa_sigaction expects without SA_SIGINFO.
        let rc = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(InterruptError {
                signal: signal_name(sig),
                source: std::io::Error::last_os_error(),
            });
        }
    }
    *installed = Some(Arc::clone(&flag));
    Ok(flag)
}

/// The cancel flag for [`RunOptions::cancel`](crate::run::RunOptions::cancel):
/// installs the handler on first use. If the handler cannot be installed,
/// logs why and returns a flag that is never set (Ctrl-C then kills the
/// process the default way).
pub fn cancel_flag() -> Arc<AtomicBool> {
    match install() {
        Ok(flag) => flag,
        Err(e) => {
            log::warn!("{e}; Ctrl-C will kill ipivmm without writing partial results");
            Arc::new(AtomicBool::new(false))
        }
    }
}

/// The signal that cancelled the run, if one arrived (e.g. to exit with
/// 128 + signal like a shell would).
pub fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
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
        // SAFETY: raise() on the calling thread; the handler installed above
        // only stores to atomics.
        let rc = unsafe { libc::raise(libc::SIGTERM) };
        assert_eq!(rc, 0);
        assert!(a.load(Ordering::SeqCst));
        assert_eq!(received(), Some(libc::SIGTERM));
    }
}
