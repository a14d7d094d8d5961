//! The APICv inhibit sampler of the thread that creates the VM (inhibits
//! set during creation show on that thread only). It samples CPU-wide and
//! keeps that thread's samples ([`InhibitSampler::open_for_thread`]): a
//! task-bound event would cost the first of its kind on the host a
//! `synchronize_rcu` (7–16 ms here) before `KVM_CREATE_VM`. It is opened by
//! another thread while the run is prepared, so what opening costs (an
//! event and ring per CPU, registering the tracepoint) is off the guest's
//! path to its first message too.
use crate::config::VmConfig;
use crate::results::inhibits;
use crate::vcpu::trace::{locate_tracefs, TraceConfig};
use ipivmm_counters::sampler::InhibitSampler;
use std::thread::JoinHandle;

/// The sampler of the calling thread: being opened, opened (None: it
/// could not be), or not started.
pub enum CreationSampler {
    /// Being opened by another thread.
    Opening(JoinHandle<Option<InhibitSampler>>),
    /// Opened (None: it could not be).
    Opened(Option<InhibitSampler>),
    /// Not started: tracefs must be mounted first, or nothing counts.
    NotStarted,
}

/// The calling thread's id, as the sampler's samples give it.
fn this_thread() -> u32 {
    rustix::thread::gettid()
        .as_raw_nonzero()
        .get()
        .unsigned_abs()
}

impl CreationSampler {
    /// Starts opening the sampler for the calling thread when `config`
    /// counts and tracefs is already where it says (a tracefs that must
    /// be mounted first is left to [`CreationSampler::finish`]).
    pub fn start(config: &VmConfig) -> Self {
        if !config.tracepoints {
            return Self::NotStarted;
        }
        // Never mounted from here: that is the trace configuration's job.
        let Ok(tracefs) = locate_tracefs(config.tracefs.as_deref(), false) else {
            return Self::NotStarted;
        };
        let tid = this_thread();
        let opener = std::thread::Builder::new()
            .name("inhibit-sampler".into())
            .spawn(move || {
                InhibitSampler::open_for_thread(&tracefs, inhibits::InhibitLog::RING_PAGES, tid)
                    .ok()
            });
        opener.map_or(Self::NotStarted, Self::Opening)
    }

    /// Waits for the sampler being opened: it holds one fd per CPU, which
    /// the run's fd budget ([`crate::host::fds::FdLimit::now`]) must see
    /// as open.
    pub fn join(self) -> Self {
        match self {
            Self::Opening(opener) => Self::Opened(opener.join().ok().flatten()),
            other => other,
        }
    }

    /// The sampler of the calling thread, opened and enabled, before the
    /// VM is created: the one started, or one opened now through `trace`'s
    /// tracefs (mounted if the configuration says so) when none was
    /// started.
    pub fn finish(self, trace: Option<&TraceConfig>) -> Option<InhibitSampler> {
        match self.join() {
            Self::Opened(sampler) => sampler,
            Self::Opening(_) | Self::NotStarted => trace.and_then(|t| {
                let tracefs = t.tracefs()?;
                let pages = inhibits::InhibitLog::RING_PAGES;
                InhibitSampler::open_for_thread(tracefs, pages, this_thread()).ok()
            }),
        }
    }
}
