//! One run: build the VM, start the vCPU threads together, wait for them
//! (or the watchdog), and collect what they produced.
use crate::apicv::{self, ApicvPlan};
use crate::config::Irqchip;
use crate::config::{apic_name, ipi_name, target_name, VmConfig};
use crate::levers::ApicvRequest;
use crate::monitor::RunMonitor;
use crate::results::{VcpuEnd, VcpuResult};
use crate::vcpu::trace::TraceConfig;
use crate::vcpu::user_apic::UserApic;
use crate::vcpu::{self, kick, Shared, VcpuEnv};
use crate::vm::{load_payload, open_kvm, Vm, VmError};
use event_manager::{EventManager, SubscriberOps};
use ipivmm_abi::IpiPath;
use ipivmm_abi::{CONTROL_PORT, SERIAL_PORT};
use ipivmm_counters::host::KvmBackend;
use ipivmm_devices::bus::{AddressSpace, Bus};
use ipivmm_devices::control::ControlPort;
use ipivmm_devices::lapic::mmio::{LapicMmio, XAPIC_PAGE_LEN};
use ipivmm_devices::lapic::{Lapic, LapicGroup};
use ipivmm_devices::serial::{SerialConsole, SerialSink};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::signal::Killable;

/// How often the main loop re-kicks vCPUs that should stop.
const KICK_INTERVAL_MS: i32 = 50;
/// How long stopped vCPUs get to leave KVM_RUN before they are abandoned.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Host-side options of a run that are not part of the VM.
pub struct RunOptions {
    /// Where guest serial output goes.
    pub serial: SerialSink,
    /// When the process (or the caller's clock) started, for start-up timing.
    pub started: Instant,
    /// Set by the caller (e.g. a Ctrl-C handler) to stop the run early; the
    /// report then has status `Cancelled` and every phase finished so far.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            serial: SerialSink::Capture,
            started: Instant::now(),
            cancel: None,
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunStatus {
    /// Every vCPU sent Done with status 0.
    Completed,
    /// A vCPU faulted or the payload reported failure.
    Failed {
        /// One line per failing vCPU.
        reason: String,
    },
    /// The caller cancelled the run (Ctrl-C).
    Cancelled,
    /// The watchdog stopped the run.
    TimedOut {
        /// The timeout in seconds.
        after_s: u64,
        /// Where each unfinished vCPU was when stopped.
        stuck: String,
    },
}

/// Timings of a run, in ns.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    /// From `RunOptions::started` to the VM being ready.
    pub setup_ns: u64,
    /// From `RunOptions::started` to the payload's first control message.
    pub first_message_ns: Option<u64>,
    /// From `RunOptions::started` to the end of the run.
    pub total_ns: u64,
    /// Peak resident memory of the process (VmHWM), KiB; includes the guest
    /// pages the payload touched.
    pub peak_rss_kib: Option<u64>,
}

/// The mode a run used, for reports.
#[derive(Clone, Debug, Serialize)]
pub struct ModeSummary {
    /// Irqchip.
    pub irqchip: &'static str,
    /// APIC mode.
    pub apic: &'static str,
    /// IPI path.
    pub ipi: &'static str,
    /// Workload.
    pub workload: &'static str,
    /// Target wait mode.
    pub target: &'static str,
    /// vCPUs.
    pub vcpus: usize,
    /// Iterations.
    pub iterations: u64,
    /// Warm-up iterations.
    pub warmup: u64,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// Exits turned off (KVM_CAP_X86_DISABLE_EXITS).
    pub disabled_exits: Vec<&'static str>,
    /// Per-VM halt-polling limit, ns (None = host default).
    pub halt_poll_ns: Option<u32>,
    /// KVM_HINTS_REALTIME advertised.
    pub realtime_hint: bool,
    /// Host CPU of each vCPU (empty = not pinned).
    pub pin: Vec<usize>,
    /// The custom payload, if not the built-in one (then `workload` is only
    /// what BootInfo told it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
}

impl ModeSummary {
    /// Short label of the mode, e.g. "kernel/x2apic/icr" plus any levers.
    pub fn label(&self) -> String {
        let mut l = format!("{}/{}/{}", self.irqchip, self.apic, self.ipi);
        if !self.disabled_exits.is_empty() {
            l.push_str(&format!(" -exits:{}", self.disabled_exits.join("+")));
        }
        if let Some(ns) = self.halt_poll_ns {
            l.push_str(&format!(" poll:{ns}"));
        }
        if self.realtime_hint {
            l.push_str(" rt");
        }
        if !self.pin.is_empty() {
            l.push_str(&format!(
                " pin:{}",
                self.pin
                    .iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        l
    }

    /// Summary of `c`.
    pub fn of(c: &VmConfig) -> Self {
        Self {
            irqchip: c.irqchip.name(),
            apic: apic_name(c.apic),
            ipi: ipi_name(c.ipi),
            workload: c.workload.name(),
            target: target_name(c.target_wait),
            vcpus: c.vcpus,
            iterations: c.iterations,
            warmup: c.warmup,
            memory_mib: c.memory_bytes >> 20,
            disabled_exits: crate::levers::exit_control_names(c.disable_exits),
            halt_poll_ns: c.halt_poll_ns,
            realtime_hint: c.realtime_hint,
            pin: c.pin.clone(),
            payload: match &c.payload {
                crate::config::PayloadSource::Builtin => None,
                crate::config::PayloadSource::File(p) => Some(p.display().to_string()),
                crate::config::PayloadSource::Bytes(_) => {
                    Some("<ELF image from the library>".into())
                }
            },
        }
    }
}

/// Everything a run produced, including partial results of a failed run.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The mode.
    pub mode: ModeSummary,
    /// APICv/AVIC state of the VM.
    pub apicv: ApicvPlan,
    /// How it ended.
    pub status: RunStatus,
    /// TSC frequency in kHz.
    pub tsc_khz: u64,
    /// Timings.
    pub timings: Timings,
    /// Per-vCPU results.
    pub vcpus: Vec<VcpuResult>,
    /// The last part of the guest's serial output.
    pub serial_tail: String,
}

impl RunReport {
    /// Whether every vCPU finished successfully.
    pub fn succeeded(&self) -> bool {
        self.status == RunStatus::Completed
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// VM setup failed.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The mode cannot run on this host.
    #[error("{0}")]
    Mode(String),
    /// A host resource (thread, eventfd, timer, signal) failed.
    #[error("host resource: {0}")]
    Host(String),
}

fn host<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> RunError {
    move |e| RunError::Host(format!("{what}: {e}"))
}

/// Build and run one VM.
pub fn run(config: &VmConfig, opts: RunOptions) -> Result<RunReport, RunError> {
    let image = load_payload(&config.payload)?;
    let kvm = open_kvm(&config.kvm_device)?;
    config
        .validate(crate::vm::max_vcpus(&kvm))
        .map_err(VmError::from)?;
    // The host is fingerprinted before the VM only when a lever depends on it,
    // to keep start-up short; otherwise after the run, for the report.
    let needs_host = config.ipi == IpiPath::Pv || config.apicv == ApicvRequest::Inhibit;
    let early_host = needs_host
        .then(ipivmm_counters::host::probe)
        .and_then(Result::ok);
    if config.ipi == IpiPath::Pv {
        check_pv_backend(early_host.as_ref())?;
    }
    let early_plan = apicv::plan(
        early_host.as_ref(),
        config.apicv,
        config.irqchip,
        config.apic,
    )
    .map_err(|e| RunError::Mode(e.to_string()))?;
    let vm = Vm::build(kvm, config, &image, early_plan.lever)?;
    kick::install_kick_handler().map_err(host("installing the kick signal handler"))?;
    raise_fd_limit();

    let (serial, serial_handle) = SerialConsole::new(opts.serial);
    let mut bus = Bus::new();
    bus.insert(
        AddressSpace::Pio,
        u64::from(SERIAL_PORT),
        8,
        Arc::new(Mutex::new(serial)),
    )
    .map_err(host("serial on the bus"))?;
    bus.insert(
        AddressSpace::Pio,
        u64::from(CONTROL_PORT),
        4,
        Arc::new(Mutex::new(ControlPort::new(vm.memory.clone()))),
    )
    .map_err(host("control port on the bus"))?;
    let user_apic = if config.irqchip == Irqchip::User {
        let x2apic = config.apic == ipivmm_abi::ApicMode::X2apic;
        let group = Arc::new(Mutex::new(LapicGroup::from_lapics(
            vm.apic_ids
                .iter()
                .enumerate()
                .map(|(i, &id)| Lapic::new(i, id).with_x2apic_support(x2apic)),
        )));
        bus.insert(
            AddressSpace::Mmio,
            ipivmm_abi::XAPIC_BASE,
            XAPIC_PAGE_LEN,
            Arc::new(Mutex::new(LapicMmio::new(group.clone()))),
        )
        .map_err(host("LAPIC on the bus"))?;
        Some(Arc::new(UserApic::new(group, config.vcpus)))
    } else {
        None
    };
    let bus = Arc::new(bus);

    let ended = EventFd::new(EFD_NONBLOCK).map_err(host("eventfd"))?;
    let shared = Arc::new(Shared {
        stop: false.into(),
        results: vm
            .apic_ids
            .iter()
            .enumerate()
            .map(|(i, id)| Mutex::new(VcpuResult::new(i, *id)))
            .collect(),
        ended: ended.try_clone().map_err(host("eventfd"))?,
        first_message: OnceLock::new(),
        start: Barrier::new(config.vcpus + 1),
    });

    let mut monitor = EventManager::<RunMonitor>::new().map_err(host("event manager"))?;
    let monitor_id = monitor.add_subscriber(
        RunMonitor::new(ended, config.vcpus, config.timeout).map_err(host("watchdog timer"))?,
    );

    let tsc_khz = vm.tsc_khz;
    let trace = config.tracepoints.then(|| {
        Arc::new(TraceConfig::new(
            config.vcpus,
            config.mount_tracefs,
            config.tracefs.clone(),
        ))
    });
    let mut threads: Vec<JoinHandle<()>> = Vec::with_capacity(config.vcpus);
    let Vm {
        vcpus, memory, fd, ..
    } = vm;
    for (index, vcpu) in vcpus.into_iter().enumerate() {
        let env = VcpuEnv {
            index,
            bus: bus.clone(),
            shared: shared.clone(),
            apic: config.apic,
            tsc_khz,
            trace: trace.clone(),
            pin: config.pin.get(index).copied(),
            user_apic: user_apic.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("vcpu{index}"))
            .spawn(move || vcpu::vcpu_thread(vcpu, env));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                // Threads already waiting on the barrier can never be released; they
                // hold only their own fds, which the process exit reclaims.
                return Err(RunError::Host(format!("spawning vcpu{index}: {e}")));
            }
        }
    }
    let setup_ns = opts.started.elapsed().as_nanos() as u64;
    shared.start.wait();

    let mut timed_out = false;
    let mut cancelled = false;
    let mut abandoned = false;
    let mut stop_since: Option<Instant> = None;
    loop {
        let _ = monitor.run_with_timeout(KICK_INTERVAL_MS);
        let m = monitor
            .subscriber_mut(monitor_id)
            .map_err(|e| RunError::Host(format!("event manager: {e:?}")))?;
        if m.running() == 0 {
            break;
        }
        if m.timed_out() && !timed_out {
            timed_out = true;
            shared.stop.store(true, Ordering::SeqCst);
        }
        if !cancelled
            && opts
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::SeqCst))
        {
            cancelled = true;
            shared.stop.store(true, Ordering::SeqCst);
        }
        if shared.stop.load(Ordering::SeqCst) {
            let since = *stop_since.get_or_insert_with(Instant::now);
            if since.elapsed() > STOP_GRACE {
                log::error!("vCPU threads did not stop within {STOP_GRACE:?}; abandoning them");
                abandoned = true;
                break;
            }
            for t in threads.iter().filter(|t| !t.is_finished()) {
                let _ = t.kill(kick::kick_signal());
            }
        }
    }
    // Every thread has signalled its end and is only unwinding its fds:
    // join them so a run leaves no thread or fd behind. Threads stuck in the
    // kernel past the grace period are left detached rather than hang us.
    for t in threads {
        if !abandoned || t.is_finished() {
            let _ = t.join();
        }
    }
    drop(fd);
    drop(memory);
    serial_handle.flush();

    let vcpus: Vec<VcpuResult> = (0..config.vcpus)
        .map(|i| shared.result(i).clone())
        .collect();
    let status = if cancelled {
        RunStatus::Cancelled
    } else if timed_out {
        RunStatus::TimedOut {
            after_s: config.timeout.as_secs(),
            stuck: stuck_vcpus(&vcpus),
        }
    } else {
        status_of(&vcpus)
    };
    let first_message_ns = shared
        .first_message
        .get()
        .map(|t| t.duration_since(opts.started).as_nanos() as u64);
    let apicv = if needs_host {
        early_plan
    } else {
        let host = ipivmm_counters::host::probe().ok();
        apicv::plan(host.as_ref(), config.apicv, config.irqchip, config.apic).unwrap_or(early_plan)
    };
    Ok(RunReport {
        mode: ModeSummary::of(config),
        apicv,
        status,
        tsc_khz,
        timings: Timings {
            setup_ns,
            first_message_ns,
            total_ns: opts.started.elapsed().as_nanos() as u64,
            peak_rss_kib: peak_rss_kib(),
        },
        vcpus,
        serial_tail: serial_handle.tail_text(),
    })
}

/// Tracepoint counters cost one fd each per vCPU thread: lift the soft
/// RLIMIT_NOFILE to the hard limit (failure only means fewer counters, each
/// reported unavailable with EMFILE).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 && lim.rlim_cur < lim.rlim_max
    {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid rlimit; raising the soft limit up to the hard one is always allowed.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
}

/// Refuse PV IPIs where the hypercall cannot work.
fn check_pv_backend(host: Option<&ipivmm_counters::host::HostInfo>) -> Result<(), RunError> {
    match host.map(|h| &h.backend) {
        Some(KvmBackend::KvmPvm) => Err(RunError::Mode(
            "--ipi pv cannot run on the kvm_pvm backend: a guest vmcall/vmmcall never returns there (KVM_HC_SEND_IPI included); run it on a hardware KVM host (kvm_intel/kvm_amd) or use --ipi icr".into(),
        )),
        _ => Ok(()),
    }
}

/// VmHWM of this process from /proc/self/status, in KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// "vcpuN at rip=..." for every vCPU the host had to stop.
pub fn stuck_vcpus(vcpus: &[VcpuResult]) -> String {
    let stuck: Vec<String> = vcpus
        .iter()
        .filter_map(|v| match &v.end {
            Some(VcpuEnd::Stopped { registers }) => Some(match registers {
                Some(r) => format!("vcpu{} at rip={:#x} rsp={:#x}", v.index, r.rip, r.rsp),
                None => format!("vcpu{} (registers unreadable)", v.index),
            }),
            None => Some(format!("vcpu{} did not stop", v.index)),
            _ => None,
        })
        .collect();
    stuck.join(", ")
}

/// Completed when every vCPU is Done(0); otherwise one line per culprit.
pub fn status_of(vcpus: &[VcpuResult]) -> RunStatus {
    let mut reasons = Vec::new();
    for v in vcpus {
        match &v.end {
            Some(VcpuEnd::Done { status: 0, .. }) => {}
            Some(VcpuEnd::Done { status, message }) => reasons.push(format!(
                "vcpu{}: payload reported failure {status}: {message}",
                v.index
            )),
            Some(VcpuEnd::Fault { reason, registers }) => {
                let regs = registers
                    .as_ref()
                    .map(|r| format!(" [{r}]"))
                    .unwrap_or_default();
                reasons.push(format!("vcpu{}: {reason}{regs}", v.index));
            }
            Some(VcpuEnd::Stopped { .. }) => {}
            None => reasons.push(format!("vcpu{}: did not stop", v.index)),
        }
    }
    if reasons.is_empty()
        && vcpus
            .iter()
            .all(|v| matches!(v.end, Some(VcpuEnd::Done { .. })))
    {
        RunStatus::Completed
    } else {
        if reasons.is_empty() {
            reasons.push("run stopped before every vCPU finished".into());
        }
        RunStatus::Failed {
            reason: reasons.join("; "),
        }
    }
}
