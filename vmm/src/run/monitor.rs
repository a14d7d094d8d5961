//! The main thread's wait: an event-manager loop over "a vCPU ended"
//! (eventfd) and the watchdog (timerfd).
use event_manager::{EventOps, Events, MutEventSubscriber};
use std::os::fd::AsRawFd;
use std::time::Duration;
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::timerfd::TimerFd;

/// Tracks vCPU threads ending and the watchdog.
pub struct RunMonitor {
    ended: EventFd,
    watchdog: TimerFd,
    running: u64,
    timed_out: bool,
}

impl RunMonitor {
    /// Watch `vcpus` threads that write `ended` when they stop; fire after `timeout`.
    pub fn new(ended: EventFd, vcpus: usize, timeout: Duration) -> std::io::Result<Self> {
        let mut watchdog = TimerFd::new()?;
        watchdog.reset(timeout, None)?;
        Ok(Self {
            ended,
            watchdog,
            running: vcpus as u64,
            timed_out: false,
        })
    }

    /// vCPU threads still running.
    pub fn running(&self) -> u64 {
        self.running
    }

    /// Whether the watchdog fired.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }
}

impl MutEventSubscriber for RunMonitor {
    fn process(&mut self, events: Events, _ops: &mut EventOps) {
        if events.fd() == self.ended.as_raw_fd() {
            // The eventfd counter adds up the threads that ended since the last read.
            if let Ok(n) = self.ended.read() {
                self.running = self.running.saturating_sub(n);
            }
        } else if events.fd() == self.watchdog.as_raw_fd() {
            let _ = self.watchdog.wait();
            self.timed_out = true;
        }
    }

    fn init(&mut self, ops: &mut EventOps) {
        for fd in [self.ended.as_raw_fd(), self.watchdog.as_raw_fd()] {
            if let Err(e) = ops.add(Events::with_data_raw(fd, 0, EventSet::IN)) {
                log::error!("cannot watch fd {fd}: {e:?}");
            }
        }
    }
}
