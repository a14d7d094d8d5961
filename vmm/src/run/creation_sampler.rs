//! The APICv inhibit sampler of the thread that creates the VM (inhibits
//! set during creation show on that thread only), opened by another thread
//! while the run is prepared: its `perf_event_open` (registering the
//! tracepoint, several ms) is then off the guest's path to its first
//! message.
use crate::config::VmConfig;
use crate::results::inhibits;
use crate::vcpu::trace::TraceConfig;
use ipivmm_counters::sampler::InhibitSampler;
use ipivmm_counters::tracefs::Tracefs;
use std::thread::JoinHandle;

/// A sampler being opened for the calling thread, or none to open.
pub struct CreationSampler(Option<JoinHandle<Option<InhibitSampler>>>);

impl CreationSampler {
    /// Starts opening the sampler for the calling thread when `config`
    /// counts and tracefs is already where it says (a tracefs that must
    /// be mounted first is left to [`CreationSampler::finish`]).
    pub fn start(config: &VmConfig) -> Self {
        if !config.tracepoints {
            return Self(None);
        }
        let tracefs = match &config.tracefs {
            Some(root) if root.join("events").is_dir() => Some(Tracefs::at(root)),
            Some(_) => None,
            None => Tracefs::find().ok(),
        };
        let Some(tracefs) = tracefs else {
            return Self(None);
        };
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let opener = std::thread::Builder::new()
            .name("inhibit-sampler".into())
            .spawn(move || {
                InhibitSampler::open_on(&tracefs, inhibits::INHIBIT_RING_PAGES, Some(tid)).ok()
            });
        Self(opener.ok())
    }

    /// The sampler, opened and enabled, before the VM is created: the one
    /// started, or one opened now through `trace`'s tracefs (mounted if
    /// the configuration says so) when none was started.
    pub fn finish(self, trace: Option<&TraceConfig>) -> Option<InhibitSampler> {
        match self.0 {
            Some(opener) => opener.join().ok().flatten(),
            None => trace.and_then(|t| {
                let tracefs = t.tracefs()?;
                InhibitSampler::open(tracefs, inhibits::INHIBIT_RING_PAGES).ok()
            }),
        }
    }
}
