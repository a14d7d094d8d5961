//! One run: [`run()`] with its [`RunOptions`], its [`RunError`]. Inside,
//! stages that each do one job: `prepare` (every check, the host probed
//! once: [`VmConfig::prepare`](crate::VmConfig::prepare) on its own, to
//! ask whether a configuration can run here before any VM) → build the VM → wire the bus → spawn the vCPU
//! threads → supervise them (watchdog, cancel, kicks) → collect what they
//! produced.
pub(crate) mod collect;
pub(crate) mod creation_sampler;
pub(crate) mod devices;
pub(crate) mod monitor;
pub(crate) mod observer;
pub(crate) mod prepare;
pub(crate) mod spawn;
pub(crate) mod supervise;

pub use crate::error::RunError;
/// Host bytes a finished run's guest-driven data holds (what a budget
/// shared by several runs is charged for it).
pub use crate::vcpu::store::report_bytes;
pub use collect::peak_rss_kib;
use prepare::prepare;

use crate::results::{inhibits, RunReport};
use ipivmm_counters::sampler::InhibitSampler;
use ipivmm_devices::budget::{GuestBudget, SharedBudget};
use ipivmm_devices::serial::SerialSink;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// Host-side options of a run that are not part of the VM.
pub struct RunOptions {
    /// Where guest serial output goes.
    pub serial: SerialSink,
    /// When the process (or the caller's clock) started, for start-up timing.
    pub started: Instant,
    /// Set by the caller (e.g. a signal handler) to stop the run early; the
    /// report then has status `Cancelled` and every phase finished so far.
    pub cancel: Option<Arc<AtomicBool>>,
    /// One guest memory budget for several runs (the repeats and rows of one
    /// command), instead of `VmConfig::guest_memory_budget` for this run
    /// alone: the run draws on what the runs before it left, and what its
    /// report holds ([`crate::vcpu::store::report_bytes`]) is kept in it
    /// when it ends (a caller that frees part of a report gives it back:
    /// [`crate::results::RunReport::drop_samples`]).
    pub budget: Option<Arc<SharedBudget>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            serial: SerialSink::Capture,
            started: Instant::now(),
            cancel: None,
            budget: None,
        }
    }
}

/// A [`RunError::Host`] naming `what` failed.
fn host<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> RunError {
    move |e| RunError::Host(format!("{what}: {e}"))
}

/// Build and run one VM, in stages; a run that started always returns its
/// report, whatever happened to the guest.
pub fn run(config: &crate::config::VmConfig, opts: RunOptions) -> Result<RunReport, RunError> {
    // Opened (CPU-wide, for this thread) by another thread while the run is
    // prepared: off the guest's path.
    let sampler = creation_sampler::CreationSampler::start(config);
    let prepared = prepare(config)?;
    // Every vCPU holds fds from its creation on (its own, its stats fd):
    // the soft RLIMIT_NOFILE (often 1024) goes up to the hard limit first.
    crate::host::fds::raise_fd_limit();
    let sampler = sampler.join();
    let trace = crate::vcpu::trace::TraceConfig::for_run(&prepared.config, prepared.host.as_ref());
    // Inhibits set while the VM is created show on this thread only: it
    // samples its own, from before KVM_CREATE_VM to the end. The BPF object
    // is loaded once the guest runs (off its path), and the vCPU threads
    // wait for its inhibit log at their first phase marker.
    let created_ns = inhibits::InhibitLog::now_ns();
    let mut creation = sampler.finish(trace.as_deref());
    let vm = crate::vm::Vm::build(&prepared)?;
    let log = Arc::new(inhibits::InhibitLog::default());
    if let Some(s) = &mut creation {
        log.drain(s);
    }
    let budget = match &opts.budget {
        Some(shared) => shared.for_run(),
        None => GuestBudget::new(prepared.config.guest_memory_budget),
    };
    let linux = prepared.config.payload.linux().is_some();
    let multiboot = prepared.config.payload.multiboot().is_some();
    let devices = devices::wire(&vm, Arc::new(budget), opts.serial, linux, multiboot)?;
    let mut running = spawn::spawn(
        vm,
        devices,
        &prepared,
        opts.started,
        trace.clone(),
        log.clone(),
    )?;
    let outcome = supervise::supervise(&mut running, opts.cancel.as_deref())?;
    if let Some(s) = &mut creation {
        log.drain(s);
    }
    let bpf = trace.as_ref().and_then(|t| t.loaded_inhibit_log());
    // This thread's own changes are its sampler's (when it has one).
    let me = creation.as_ref().and_then(InhibitSampler::thread);
    if let Some((changes, lost, names)) = bpf.as_ref().and_then(|b| b.inhibit_changes_except(me)) {
        log.add(changes, lost, names);
    }
    let mut report = collect::report(running, outcome, &prepared, opts.started);
    let host_has_apicv = matches!(
        prepared.plan.effective,
        crate::mode::apicv::ApicvState::Active | crate::mode::apicv::ApicvState::Inhibited
    );
    report.apicv_observed = log.observed(
        created_ns,
        prepared.plan.lever,
        host_has_apicv,
        &mut report.vcpus,
        creation.is_some() || bpf.is_some(),
    );
    if let Some(shared) = &opts.budget {
        shared.keep(crate::vcpu::store::report_bytes(&report));
    }
    Ok(report)
}
