//! Stage 4 of a run: the main thread waits for the vCPU threads to end, the
//! watchdog to fire or the caller to cancel; then it stops every vCPU (a
//! real-time signal whose handler sets `immediate_exit`, re-sent until they
//! leave KVM_RUN) and joins the threads.
use super::spawn::Running;
use crate::error::RunError;
use crate::kick;
use event_manager::SubscriberOps;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vmm_sys_util::signal::Killable;

/// How often the main loop re-kicks vCPUs that should stop.
const KICK_INTERVAL_MS: i32 = 50;
/// How long stopped vCPUs get to leave KVM_RUN before they are abandoned.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How the wait ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitEnd {
    /// The watchdog fired.
    pub timed_out: bool,
    /// The caller cancelled.
    pub cancelled: bool,
    /// Some vCPU thread did not stop within the grace period (left detached).
    pub abandoned: bool,
}

/// Wait for `r`'s vCPU threads, stopping them on a timeout or `cancel`.
pub(crate) fn supervise(r: &mut Running, cancel: Option<&AtomicBool>) -> Result<WaitEnd, RunError> {
    let mut out = WaitEnd::default();
    let mut stop_since: Option<Instant> = None;
    loop {
        let _ = r.monitor.run_with_timeout(KICK_INTERVAL_MS);
        let m = r
            .monitor
            .subscriber_mut(r.monitor_id)
            .map_err(|e| RunError::Host(format!("event manager: {e:?}")))?;
        if m.running() == 0 {
            break;
        }
        if m.timed_out() && !out.timed_out {
            out.timed_out = true;
            r.shared.stop.store(true, Ordering::SeqCst);
        }
        if !out.cancelled && cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            out.cancelled = true;
            r.shared.stop.store(true, Ordering::SeqCst);
        }
        if r.shared.stop.load(Ordering::SeqCst) {
            let since = *stop_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STOP_GRACE {
                log::error!("vCPU threads did not stop within {STOP_GRACE:?}; abandoning them");
                out.abandoned = true;
                break;
            }
            for t in r.threads.iter().filter(|t| !t.is_finished()) {
                let _ = t.kill(kick::kick_signal());
            }
        }
    }
    Ok(out)
}
