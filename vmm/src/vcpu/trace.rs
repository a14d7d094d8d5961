//! Tracepoint counters of one vCPU thread: `kvm:*` events counted by
//! perf_event_open on the calling thread, so each vCPU sees only its own.
use crate::config::VmConfig;
use crate::host::fds::FdLimit;
use crate::mode::ExitReasons;
use crate::results::source::Source;
use crate::results::SourceStatus;
use ipivmm_counters::bpf::{Attach, BpfExits, BpfSnapshot, BpfThread};
use ipivmm_counters::exit_reasons::{exit_reason_code, Isa};
use ipivmm_counters::sampler::exits::ExitSampler;
use ipivmm_counters::sampler::ExitTally;
use ipivmm_counters::sampler::InhibitSampler;
use ipivmm_counters::specs::{kvm_specs, ExitReasonSelection};
use ipivmm_counters::tracefs::Tracefs;
use ipivmm_counters::tracepoint::{Availability, CounterSpec, TracepointSet};
use ipivmm_host::facts::{HostInfo, KvmBackend};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Exit reasons that say where IPI cost goes; counted one by one when
/// counting every reason would cost too many file descriptors.
const IPI_EXIT_REASONS: &[(Isa, &[&str])] = &[
    (
        Isa::Vmx,
        &[
            "EXTERNAL_INTERRUPT",
            "INTERRUPT_WINDOW",
            "HLT",
            "VMCALL",
            "IO_INSTRUCTION",
            "MSR_READ",
            "MSR_WRITE",
            "PAUSE_INSTRUCTION",
            "APIC_ACCESS",
            "EPT_VIOLATION",
            "EPT_MISCONFIG",
            "PREEMPTION_TIMER",
            "APIC_WRITE",
        ],
    ),
    (
        Isa::Svm,
        &[
            "interrupt",
            "vintr",
            "hlt",
            "hypercall",
            "io",
            "msr",
            "pause",
            "npf",
            "avic_incomplete_ipi",
            "avic_unaccelerated_access",
        ],
    ),
];

/// Most `kvm_exit` per-reason counters per VM before falling back to the IPI-relevant set.
const MAX_EXIT_COUNTERS_PER_VM: usize = 1024;

/// What every vCPU thread of a run opens. Cheap to create; the tracefs
/// lookup, host probe and spec list are built once, by the first vCPU thread
/// that needs them, off the start-up path.
#[derive(Debug)]
pub struct TraceConfig {
    vcpus: usize,
    isa: Option<Isa>,
    exit_reasons: ExitReasons,
    ring_pages: usize,
    context_events: bool,
    mount: bool,
    root: Option<PathBuf>,
    fds: Option<FdLimit>,
    resolved: OnceLock<Resolved>,
    /// The run's BPF exit counter (with `ExitReasons::Bpf`), loaded once,
    /// with only its inhibit log attached.
    bpf: OnceLock<Result<Arc<BpfExits>, String>>,
    /// Whether a thread of its own was started to load it.
    loading: AtomicBool,
    /// Its counting programs attached (once), or why not.
    bpf_counting: OnceLock<Result<(), String>>,
    /// Attach the per-exit counters only once an uncounted part has ended
    /// (the built-in payload's phases before its uncounted part are not
    /// counted per exit), so that nothing is attached while it runs.
    after_uncounted: bool,
    /// The counter specs opened as perf events: those BPF does not count.
    perf_specs: OnceLock<Vec<CounterSpec>>,
    /// Why `kvm:kvm_exit` never fires on this host's KVM, when it does not
    /// (kvm_pvm): the exit_reasons source says so.
    silent_exits: Option<String>,
    /// The fd shortfall was logged (once per run, by the first vCPU to
    /// open its counters: checking it earlier would load the BPF object on
    /// the guest's path).
    shortfall_logged: AtomicBool,
}

/// What one vCPU thread opens within its share of the fd limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdShare {
    /// The first this many counter specs.
    pub counters: usize,
    /// The exit sampler (two fds), when sampled.
    pub exit_sampler: bool,
    /// The APICv inhibit sampler (one fd).
    pub inhibits: bool,
}

#[derive(Debug)]
struct Resolved {
    tracefs: Option<Tracefs>,
    specs: Vec<CounterSpec>,
    why_no_tracefs: Option<String>,
}

impl TraceConfig {
    /// The configuration of a run of `c` on the host `host` probed (None:
    /// tracepoints off), shared by the main thread (inhibits around VM
    /// creation, the BPF object's inhibit log at the end) and every vCPU
    /// thread's per-exit sources (`vcpu::sources`).
    pub fn for_run(c: &VmConfig, host: Option<&HostInfo>) -> Option<Arc<Self>> {
        let isa = host.and_then(|h| Isa::of_backend(&h.backend));
        c.tracepoints.then(|| {
            let t = TraceConfig::new(c.vcpus, isa, c.mount_tracefs, c.tracefs.clone())
                .with_exit_reasons(c.exit_reasons, exit_ring_pages(c.iterations, c.vcpus))
                .with_context_events(c.context_events)
                .with_fd_limit(Some(FdLimit::now(c.vcpus)))
                .with_silent_exits(silent_exits(host))
                // Every built-in workload measures both ways, after its idle
                // and warm-up phases: nothing is attached before its uncounted
                // part ends. (A shortfall of fds is logged once and listed in each vCPU's
                // sources when its counters open: checking it here would load
                // the BPF object on the guest's path.)
                .with_attach_after_uncounted(c.payload.is_builtin());
            Arc::new(t)
        })
    }

    /// Counters for a VM of `vcpus` vCPUs on a KVM whose exits use `isa`'s
    /// reasons, with tracefs at `root` (None: find it through /proc/mounts,
    /// mounting it first if `mount`).
    pub fn new(vcpus: usize, isa: Option<Isa>, mount: bool, root: Option<PathBuf>) -> Self {
        Self {
            vcpus,
            isa,
            exit_reasons: ExitReasons::Sampled,
            ring_pages: ipivmm_counters::sampler::exits::DEFAULT_DATA_PAGES,
            context_events: false,
            mount,
            root,
            fds: None,
            resolved: OnceLock::new(),
            bpf: OnceLock::new(),
            loading: AtomicBool::new(false),
            bpf_counting: OnceLock::new(),
            after_uncounted: false,
            perf_specs: OnceLock::new(),
            silent_exits: None,
            shortfall_logged: AtomicBool::new(false),
        }
    }

    /// On a KVM whose `kvm:kvm_exit` never fires (`why`), the exit_reasons
    /// source is reported unavailable with `why`, whatever was attached.
    pub fn with_silent_exits(mut self, why: Option<String>) -> Self {
        self.silent_exits = why;
        self
    }

    /// Attach the per-exit counters only after the first uncounted part,
    /// even where counted phases come before it (the built-in payload).
    pub fn with_attach_after_uncounted(mut self, on: bool) -> Self {
        self.after_uncounted = on;
        self
    }

    /// Whether the per-exit counters wait for the end of an uncounted part.
    pub fn attaches_after_uncounted(&self) -> bool {
        self.after_uncounted
    }

    /// Open tracepoints within `fds` (None: no limit is checked).
    pub fn with_fd_limit(mut self, fds: Option<FdLimit>) -> Self {
        self.fds = fds;
        self
    }

    /// Tracepoint fds one vCPU thread wants: one per counter, two for the
    /// exit sampler, one for the inhibit sampler.
    pub fn fds_wanted(&self) -> usize {
        let sampler = if self.samples_exits() { 2 } else { 0 };
        let inhibits = usize::from(self.bpf_inhibit_log().is_none());
        self.perf_specs().len() + sampler + inhibits
    }

    /// What each vCPU thread opens: everything when it fits, else counters
    /// first (in spec order), then the exit sampler, then the inhibit sampler.
    pub fn fd_share(&self) -> FdShare {
        let quota = self.fds.map_or(usize::MAX, |f| f.per_vcpu());
        let counters = self.perf_specs().len().min(quota);
        let mut left = quota - counters;
        let exit_sampler = self.samples_exits() && left >= 2;
        if exit_sampler {
            left -= 2;
        }
        FdShare {
            counters,
            exit_sampler,
            inhibits: left >= 1 && self.bpf_inhibit_log().is_none(),
        }
    }

    /// When not every vCPU can open every tracepoint within RLIMIT_NOFILE:
    /// why, with the fix (one line; each vCPU's sources list the gap).
    pub fn fd_shortfall(&self) -> Option<String> {
        let fds = self.fds?;
        self.tracefs()?;
        let wanted = self.fds_wanted();
        let quota = fds.per_vcpu();
        (quota < wanted).then(|| {
            format!(
                "RLIMIT_NOFILE {} leaves {quota} of the {wanted} tracepoint fds each of {} vCPUs wants; raise it: ulimit -n {}",
                fds.limit,
                fds.vcpus,
                fds.needed(wanted)
            )
        })
    }

    /// Count exits by reason this way, with `ring_pages` data pages per
    /// vCPU when sampling.
    pub fn with_exit_reasons(mut self, how: ExitReasons, ring_pages: usize) -> Self {
        self.exit_reasons = how;
        self.ring_pages = ring_pages;
        self
    }

    /// Whether exits are sampled: asked for, or BPF could not load.
    fn samples_exits(&self) -> bool {
        match self.exit_reasons {
            ExitReasons::Sampled => true,
            ExitReasons::Bpf => self.bpf_counting().is_some_and(|b| b.is_err()),
            ExitReasons::Counters | ExitReasons::Off => false,
        }
    }

    /// Starts loading the run's BPF object on a thread of its own (once),
    /// off the guest's path: the first vCPU thread that needs it waits for
    /// it ([`TraceConfig::bpf`]). Without the thread, that vCPU loads it.
    pub fn start_loading(self: &Arc<Self>) {
        if self.exit_reasons != ExitReasons::Bpf
            || self.bpf.get().is_some()
            || self.loading.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let cfg = self.clone();
        let spawned = std::thread::Builder::new()
            .name("bpf-load".into())
            .spawn(move || {
                cfg.bpf();
            });
        if let Err(e) = spawned {
            log::debug!("bpf: loading on a thread of its own: {e}");
        }
    }

    /// The run's BPF exit counter with only its inhibit log attached,
    /// loaded by the first caller (None: not asked for; Err: why it could
    /// not load, the sampler counts instead).
    pub fn bpf(&self) -> Option<&Result<Arc<BpfExits>, String>> {
        if self.exit_reasons != ExitReasons::Bpf {
            return None;
        }
        Some(self.bpf.get_or_init(|| {
            let tracefs = self.tracefs().ok_or_else(|| "no tracefs".to_string())?;
            let silent = self
                .silent_exits
                .as_ref()
                .map(|_| "it never fires on this KVM");
            let at = Attach::for_kvm(self.isa, silent);
            BpfExits::load(tracefs, &at, self.vcpus, self.isa)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        }))
    }

    /// The run's BPF object with its counting programs attached (by the
    /// first caller: a vCPU thread opening its counters), or why not.
    pub fn bpf_counting(&self) -> Option<Result<&Arc<BpfExits>, String>> {
        let b = match self.bpf()? {
            Ok(b) => b,
            Err(why) => return Some(Err(why.clone())),
        };
        let attached = self
            .bpf_counting
            .get_or_init(|| b.attach_counting().map_err(|e| e.to_string()));
        Some(attached.as_ref().map(|()| b).map_err(Clone::clone))
    }

    /// The run's BPF object when it logs every APICv inhibit change of the
    /// process (no inhibit sampler is opened then, on any thread); loads it
    /// if no thread did yet.
    pub fn bpf_inhibit_log(&self) -> Option<Arc<BpfExits>> {
        match self.bpf() {
            Some(Ok(b)) if b.logs_inhibits().is_ok() => Some(b.clone()),
            _ => None,
        }
    }

    /// For a vCPU thread's first phase marker: waits for the BPF object's
    /// inhibit log (loading it if no thread did), or, without one, opens
    /// the thread's own inhibit sampler (None: nothing to open).
    pub fn vcpu_inhibit_sampler(&self) -> Option<InhibitSampler> {
        if self.bpf_inhibit_log().is_some() {
            return None;
        }
        let tracefs = self.tracefs()?;
        InhibitSampler::open(tracefs, crate::results::inhibits::InhibitLog::RING_PAGES).ok()
    }

    /// [`TraceConfig::bpf_inhibit_log`] if the object was loaded (never
    /// loads it: for the end of a run whose guest may never have started).
    pub fn loaded_inhibit_log(&self) -> Option<Arc<BpfExits>> {
        match self.bpf.get() {
            Some(Ok(b)) if b.logs_inhibits().is_ok() => Some(b.clone()),
            _ => None,
        }
    }

    /// The counter specs each vCPU thread opens as perf events: every spec
    /// but those the run's BPF object counts in the kernel.
    fn perf_specs(&self) -> &[CounterSpec] {
        self.perf_specs.get_or_init(|| {
            let specs = &self.resolved().specs;
            match self.bpf_counting() {
                Some(Ok(b)) => specs
                    .iter()
                    .filter(|s| !b.counters().contains(&s.name.as_str()))
                    .cloned()
                    .collect(),
                _ => specs.clone(),
            }
        })
    }

    /// Also count the context events (`specs::CONTEXT_EVENTS`).
    pub fn with_context_events(mut self, on: bool) -> Self {
        self.context_events = on;
        self
    }

    /// The tracefs the counters use (None: not found, or not mountable).
    pub fn tracefs(&self) -> Option<&Tracefs> {
        self.resolved().tracefs.as_ref()
    }

    fn resolved(&self) -> &Resolved {
        self.resolved.get_or_init(|| {
            let isa = (self.exit_reasons == ExitReasons::Counters)
                .then_some(self.isa)
                .flatten();
            let mut r = resolve(isa, self.vcpus, self.mount, self.root.as_deref());
            if self.context_events {
                r.specs.extend(ipivmm_counters::specs::context_specs());
            }
            r
        })
    }
}

/// Data pages of each vCPU's exit-sampler ring: room for a phase of
/// `iterations` with a few exits each between two drains (the sampler is
/// drained at every userspace exit), within 512 MiB for the whole VM; a
/// phase that still overflows it reports its lost records.
pub(crate) fn exit_ring_pages(iterations: u64, vcpus: usize) -> usize {
    const RECORD_PAIR: u64 = 176;
    const EXITS_PER_ITERATION: u64 = 8;
    let want = iterations.saturating_mul(EXITS_PER_ITERATION * RECORD_PAIR) / 4096;
    let cap = (512 << 20) / 4096 / vcpus.max(1) as u64;
    let pages = want.clamp(64, 4096).min(cap.max(16));
    // The kernel wants a power of two.
    1 << (63 - pages.max(1).leading_zeros())
}

/// Why `kvm:kvm_exit` never fires on the run's KVM, when it does not.
fn silent_exits(host: Option<&HostInfo>) -> Option<String> {
    (host?.backend == KvmBackend::KvmPvm).then(|| {
        "kvm_pvm backend: kvm:kvm_exit never fires (software KVM without VMX/SVM exits), so no exit is counted by reason; totals and kinds come from KVM's binary stats".to_string()
    })
}

/// Tracefs at `root` (`--tracefs`), else where /proc/mounts says, mounted
/// first when `mount` asks for it; Err says why there is none.
pub(crate) fn locate_tracefs(root: Option<&Path>, mount: bool) -> Result<Tracefs, String> {
    match root {
        Some(root) if root.join("events").is_dir() => Ok(Tracefs::at(root)),
        Some(root) => Err(format!("no tracefs at {}", root.display())),
        None if mount => ipivmm_counters::tracefs::mount_tracefs().map_err(|e| e.to_string()),
        None => Tracefs::find().map_err(|e| e.to_string()),
    }
}

fn resolve(isa: Option<Isa>, vcpus: usize, mount: bool, root: Option<&Path>) -> Resolved {
    let (tracefs, why_no_tracefs) = match locate_tracefs(root, mount) {
        Ok(t) => (Some(t.with_format_cache()), None),
        Err(e) => (None, Some(e)),
    };
    let selection = match isa {
        Some(isa) => {
            let all = ipivmm_counters::exit_reasons::exit_reasons(isa).len();
            if all * vcpus <= MAX_EXIT_COUNTERS_PER_VM {
                ExitReasonSelection::All
            } else {
                ExitReasonSelection::Only(ipi_exit_codes(isa))
            }
        }
        None => ExitReasonSelection::None,
    };
    Resolved {
        tracefs,
        specs: kvm_specs(isa, &selection),
        why_no_tracefs,
    }
}

fn ipi_exit_codes(isa: Isa) -> Vec<u32> {
    IPI_EXIT_REASONS
        .iter()
        .filter(|(i, _)| *i == isa)
        .flat_map(|(_, names)| names.iter().filter_map(|n| exit_reason_code(isa, n)))
        .collect()
}

/// How one vCPU thread counts its exits by reason.
pub enum ExitSource {
    /// In the kernel: this thread's element of the run's BPF map, and its
    /// snapshot at the last phase marker.
    Bpf(BpfThread, BpfSnapshot),
    /// Sampled into this thread's ring.
    Sampled(ExitSampler),
}

impl ExitSource {
    fn set_counting(&mut self, on: bool) -> Result<Option<ExitTally>, String> {
        match self {
            ExitSource::Bpf(t, _) => t.set_counting(on).map(|()| None).map_err(|e| e.to_string()),
            ExitSource::Sampled(s) if on => s.enable().map(|()| None).map_err(|e| e.to_string()),
            ExitSource::Sampled(s) => s.disable().map(Some).map_err(|e| e.to_string()),
        }
    }
}

/// The tracepoint counters of the calling thread, and its exit source.
pub struct ThreadTrace {
    set: TracepointSet,
    exits: Option<ExitSource>,
}

impl ThreadTrace {
    /// Open the counters on the calling thread; never fails as a whole.
    pub fn open(cfg: Option<&TraceConfig>) -> (Option<Self>, SourceStatus) {
        let unavailable =
            |detail: String| SourceStatus::new(Source::Tracepoints, false, Some(detail));
        let Some(cfg) = cfg else {
            return (
                None,
                unavailable("disabled (--no-tracepoints, VmConfig::tracepoints = false)".into()),
            );
        };
        let config = cfg;
        let cfg = cfg.resolved();
        let Some(tracefs) = &cfg.tracefs else {
            let why = cfg.why_no_tracefs.as_deref().unwrap_or_default();
            return (None, unavailable(no_tracefs_detail(why)));
        };
        let share = config.fd_share();
        let shortfall = config.fd_shortfall();
        let specs = config.perf_specs();
        let set = TracepointSet::open(Some(tracefs), &specs[..share.counters]);
        let statuses = set.statuses();
        let mut missing: Vec<String> = statuses
            .iter()
            .filter_map(|s| match &s.availability {
                Availability::Available => None,
                Availability::Unavailable(r) => Some(format!("{}: {r}", s.name)),
            })
            .collect();
        if let Some(why) = &shortfall {
            if !config.shortfall_logged.swap(true, Ordering::SeqCst) {
                log::warn!("tracepoints: not every counter is opened: {why}");
            }
            let mut left: Vec<&str> = specs[share.counters..]
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            if !share.inhibits && config.bpf_inhibit_log().is_none() {
                left.push("the APICv inhibit sampler");
            }
            if !left.is_empty() {
                missing.push(format!("not opened ({why}): {}", left.join(", ")));
            }
        }
        // With BPF counting them all, no perf counter is needed at all.
        if set.available() == 0 && !specs.is_empty() {
            let first = missing
                .first()
                .cloned()
                .unwrap_or_else(|| "no counters".into());
            return (
                None,
                unavailable(format!("no tracepoint could be opened ({first})")),
            );
        }
        let in_bpf = cfg.specs.len() - specs.len();
        let detail = (!missing.is_empty() || in_bpf > 0).then(|| {
            let mut d = format!(
                "{} of {} counters open",
                set.available() + in_bpf,
                cfg.specs.len()
            );
            if in_bpf > 0 {
                d.push_str(&format!(
                    " ({in_bpf} counted in the kernel by the BPF object)"
                ));
            }
            if !missing.is_empty() {
                d.push_str(&format!("; missing: {}", missing.join("; ")));
            }
            d
        });
        let status = SourceStatus::new(Source::Tracepoints, true, detail);
        let t = Self { set, exits: None };
        (Some(t), status)
    }

    /// Open the exit source of the calling thread: its element of the
    /// run's BPF counter (`ExitReasons::Bpf`, counting from now on), else
    /// its exit sampler (`Sampled`, or `Bpf` where BPF could not load: the
    /// status says why). The status's detail starts with the mechanism.
    pub fn open_exit_source(cfg: Option<&TraceConfig>) -> (Option<ExitSource>, SourceStatus) {
        let (source, status) = Self::open_exit_source_as_configured(cfg);
        match cfg.and_then(|c| c.silent_exits.as_deref()) {
            Some(why) if status.available => {
                let how = status.detail.as_deref().unwrap_or("attached");
                let status = SourceStatus {
                    available: false,
                    detail: Some(format!("{why} ({how}: every exit counts as missing)")),
                    ..status
                };
                (source, status)
            }
            _ => (source, status),
        }
    }

    fn open_exit_source_as_configured(
        cfg: Option<&TraceConfig>,
    ) -> (Option<ExitSource>, SourceStatus) {
        let status = |available, detail: String| {
            SourceStatus::new(Source::ExitReasons, available, Some(detail))
        };
        let not_bpf = match cfg.and_then(TraceConfig::bpf_counting) {
            Some(Ok(bpf)) => match bpf
                .register()
                .and_then(|mut t| t.set_counting(true).map(|()| t))
            {
                Ok(mut t) => {
                    let at = t.snapshot();
                    return (
                        Some(ExitSource::Bpf(t, at)),
                        status(
                            true,
                            format!("bpf: counted in the kernel per vCPU thread, host time to raw kvm_entry; exits on the {}", bpf.exit_detail()),
                        ),
                    );
                }
                Err(e) => Some(e.to_string()),
            },
            Some(Err(why)) => Some(why),
            None => None,
        };
        let (sampler, st) = Self::open_exit_sampler(cfg);
        let st = match not_bpf {
            Some(why) => SourceStatus {
                detail: st.detail.map(|d| format!("{d} (bpf unavailable: {why})")),
                ..st
            },
            None => st,
        };
        (sampler.map(ExitSource::Sampled), st)
    }

    /// Open the exit sampler of the calling thread (with `ExitReasons::Sampled`,
    /// or `Bpf` where BPF could not load).
    fn open_exit_sampler(cfg: Option<&TraceConfig>) -> (Option<ExitSampler>, SourceStatus) {
        let status = |available, detail: String| {
            SourceStatus::new(Source::ExitReasons, available, Some(detail))
        };
        let Some(cfg) = cfg.filter(|c| c.samples_exits()) else {
            let how = cfg.map_or(ExitReasons::Off, |c| c.exit_reasons);
            return (
                None,
                status(
                    false,
                    format!("{how}: not by reason (exit_reasons is `{how}`)"),
                ),
            );
        };
        let Some(tracefs) = &cfg.resolved().tracefs else {
            return (None, status(false, "no tracefs".into()));
        };
        if !cfg.fd_share().exit_sampler {
            let why = cfg.fd_shortfall().unwrap_or_default();
            return (None, status(false, format!("not opened ({why})")));
        }
        match ExitSampler::open(tracefs, cfg.ring_pages) {
            Ok(s) => {
                let kib = s.buffer_bytes() / 1024;
                (
                    Some(s),
                    status(
                        true,
                        format!("sampled: kvm_exit/kvm_entry into a {kib} KiB ring"),
                    ),
                )
            }
            Err(e) => (None, status(false, e.to_string())),
        }
    }

    /// Attach an exit source.
    pub fn with_exit_source(mut self, s: Option<ExitSource>) -> Self {
        self.exits = s;
        self
    }

    /// Whether an exit source is attached.
    pub fn has_exit_source(&self) -> bool {
        self.exits.is_some()
    }

    /// Everything the exit sampler saw since the last drain (None: no
    /// sampler; the BPF counter has nothing to drain).
    pub fn drain_exits(&mut self) -> Option<ExitTally> {
        match &mut self.exits {
            Some(ExitSource::Sampled(s)) => Some(s.drain()),
            _ => None,
        }
    }

    /// At a phase marker: the exits since the previous marker (the
    /// sampler's drain, or the BPF counter's window).
    pub fn mark_exits(&mut self) -> Option<ExitTally> {
        match &mut self.exits {
            Some(ExitSource::Sampled(s)) => Some(s.drain()),
            Some(ExitSource::Bpf(t, last)) => {
                let now = t.snapshot();
                let window = now.since(last);
                *last = now;
                Some(window)
            }
            None => None,
        }
    }

    /// Turns every per-exit counter of this thread off or on (at a phase
    /// marker, by the vCPU thread itself): the BPF switch (a store into
    /// the shared map), or `PERF_EVENT_IOC_DISABLE`/`ENABLE` on the exit
    /// sampler and on each tracepoint counter. Switching the sampler off
    /// drains it: what it held is returned (it belongs to the open phase).
    /// Err: what could not be switched (the rest was).
    pub fn set_counting(&mut self, on: bool) -> Result<Option<ExitTally>, String> {
        let set = self.set.set_enabled(on).map_err(|e| e.to_string());
        let exits = match &mut self.exits {
            Some(e) => e.set_counting(on)?,
            None => None,
        };
        set.map(|()| exits)
    }

    /// Read every counter: the perf counters now, and those the BPF object
    /// counts as of the last phase marker ([`ThreadTrace::mark_exits`],
    /// which the windows call first).
    pub fn read(&mut self) -> BTreeMap<String, u64> {
        let mut values = self.set.read_all().values;
        if let Some(ExitSource::Bpf(t, last)) = &self.exits {
            values.extend(last.counter_values(t.exits().counters()));
        }
        values
    }
}

/// Why there are no tracepoints, with the fix once (some reasons, such as
/// "not mounted", carry it already).
fn no_tracefs_detail(why: &str) -> String {
    if why.contains("--mount-tracefs") {
        why.to_string()
    } else {
        format!("{why} (mount tracefs or pass --mount-tracefs: VmConfig::mount_tracefs = true)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::fds::OTHER_FDS_PER_VCPU;

    #[test]
    fn the_tracefs_hint_is_given_once() {
        let not_mounted = ipivmm_counters::tracefs::TracefsError::NotMounted.to_string();
        for why in [not_mounted.as_str(), "no tracefs at /x"] {
            let d = no_tracefs_detail(why);
            assert_eq!(d.matches("--mount-tracefs").count(), 1, "{d}");
        }
    }

    #[test]
    fn the_fd_limit_is_shared_evenly_after_the_other_fds() {
        let f = FdLimit {
            limit: 20_000,
            open: 10,
            vcpus: 1024,
        };
        // 20000 - 10 - 2048 - 64 = 17878 → 17 per vCPU.
        assert_eq!(f.per_vcpu(), 17);
        assert_eq!(f.needed(12), 10 + 1024 * 14 + 64);
        let tight = FdLimit { limit: 100, ..f };
        assert_eq!(tight.per_vcpu(), 0, "never negative");
        let unlimited = FdLimit {
            limit: u64::MAX,
            ..f
        };
        assert!(unlimited.per_vcpu() > 1 << 40);
    }

    #[test]
    fn a_short_share_keeps_counters_first_then_the_exit_sampler() {
        let root = std::env::temp_dir().join(format!("ipivmm-fdshare-{}", std::process::id()));
        std::fs::create_dir_all(root.join("events")).unwrap();
        let cfg = |limit: u64| {
            TraceConfig::new(4, None, false, Some(root.clone()))
                .with_exit_reasons(ExitReasons::Sampled, 64)
                .with_fd_limit(Some(FdLimit {
                    limit,
                    open: 0,
                    vcpus: 4,
                }))
        };
        let roomy = cfg(100_000);
        let specs = roomy.resolved().specs.len();
        assert_eq!(roomy.fds_wanted(), specs + 3);
        assert!(roomy.fd_shortfall().is_none());
        let all = roomy.fd_share();
        assert_eq!(
            (all.counters, all.exit_sampler, all.inhibits),
            (specs, true, true)
        );
        // Exactly the counters and the exit sampler fit: no inhibit sampler.
        let limit = (64 + 4 * (OTHER_FDS_PER_VCPU + specs + 2)) as u64;
        let short = cfg(limit).fd_share();
        assert_eq!(
            (short.counters, short.exit_sampler, short.inhibits),
            (specs, true, false)
        );
        let why = cfg(limit).fd_shortfall().expect("a shortfall");
        assert!(
            why.contains("ulimit -n") && why.contains(&format!("RLIMIT_NOFILE {limit}")),
            "{why}"
        );
        let none = cfg(10).fd_share();
        assert_eq!(
            (none.counters, none.exit_sampler, none.inhibits),
            (0, false, false)
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn without_bpf_the_sampler_counts_and_the_source_says_why() {
        // A tracefs without kvm events: BPF cannot load (no kvm_exit format),
        // so the exit sampler is what this thread would open, and fails the
        // same way; the status names both.
        let root = std::env::temp_dir().join(format!("ipivmm-nobpf-{}", std::process::id()));
        std::fs::create_dir_all(root.join("events")).unwrap();
        let cfg = TraceConfig::new(2, None, false, Some(root.clone()))
            .with_exit_reasons(ExitReasons::Bpf, 64);
        let why = cfg.bpf().expect("bpf asked for").as_ref().unwrap_err();
        assert!(
            why.contains("kvm_exit") || why.contains("not built"),
            "{why}"
        );
        assert!(cfg.samples_exits(), "the sampler takes over");
        assert_eq!(cfg.fds_wanted(), cfg.resolved().specs.len() + 3);
        let (src, status) = ThreadTrace::open_exit_source(Some(&cfg));
        assert!(src.is_none());
        let detail = status.detail.unwrap();
        assert!(
            detail.contains("bpf unavailable: ") && detail.contains(why.as_str()),
            "{detail}"
        );
        let off = TraceConfig::new(2, None, false, Some(root.clone()))
            .with_exit_reasons(ExitReasons::Off, 64);
        assert!(off.bpf().is_none() && !off.samples_exits());
        let (_, status) = ThreadTrace::open_exit_source(Some(&off));
        assert!(status.detail.unwrap().starts_with("off: "));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn exit_rings_are_powers_of_two_within_the_budget() {
        assert_eq!(exit_ring_pages(10, 2), 64);
        assert_eq!(exit_ring_pages(1000, 2), 256);
        assert_eq!(exit_ring_pages(1_000_000, 2), 4096);
        assert_eq!(exit_ring_pages(1000, 1024), 128);
        assert_eq!(exit_ring_pages(100_000, 8192), 16);
        for (i, v) in [(1, 1), (5000, 7), (77_777, 300)] {
            assert!(exit_ring_pages(i, v).is_power_of_two());
        }
    }

    #[test]
    fn ipi_exit_reasons_all_have_codes() {
        for (isa, names) in IPI_EXIT_REASONS {
            assert_eq!(ipi_exit_codes(*isa).len(), names.len(), "{isa:?}");
        }
    }

    #[test]
    fn missing_tracefs_is_reported_with_the_fix() {
        let cfg = TraceConfig::new(2, None, false, Some("/nonexistent/tracefs".into()));
        let (t, status) = ThreadTrace::open(Some(&cfg));
        assert!(t.is_none());
        assert!(!status.available);
        let detail = status.detail.unwrap();
        assert!(detail.contains("/nonexistent/tracefs") && detail.contains("--mount-tracefs"));
        assert_eq!(detail.matches("--mount-tracefs").count(), 1, "{detail}");
        let (_, off) = ThreadTrace::open(None);
        assert!(off.detail.unwrap().contains("disabled"));
    }
}
