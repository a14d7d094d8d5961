//! Stage 3 of a run: one thread per vCPU, named `vcpu{N}`, each opening its
//! own counters and then waiting on a barrier, so that all start together.
use super::devices::Devices;
use super::host;
use super::monitor::RunMonitor;
use crate::error::RunError;
use crate::kick;
use crate::results::inhibits::InhibitLog;
use crate::results::VcpuResult;
use crate::vcpu::trace::TraceConfig;
use crate::vcpu::{self, Shared, VcpuEnv};
use crate::vm::Prepared;
use crate::vm::Vm;
use event_manager::{EventManager, SubscriberId, SubscriberOps};
use ipivmm_devices::serial::SerialHandle;
use kvm_ioctls::VmFd;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;
use vm_memory::GuestMemoryMmap;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// A VM whose vCPU threads run.
pub struct Running {
    /// The vCPU threads, index = vCPU.
    pub threads: Vec<JoinHandle<()>>,
    /// What the threads share with the main thread.
    pub shared: Arc<Shared>,
    /// The main thread's event loop (vCPU ends, watchdog).
    pub monitor: EventManager<RunMonitor>,
    /// The monitor's subscriber.
    pub monitor_id: SubscriberId,
    /// The console, for the report.
    pub serial: SerialHandle,
    /// TSC rate of the VM.
    pub tsc_khz: u64,
    /// When the VM was ready, ns after the caller's start.
    pub setup_ns: u64,
    /// Kept alive until the threads are gone.
    pub vm_fd: VmFd,
    /// Kept alive until the threads are gone.
    pub memory: GuestMemoryMmap,
}

/// Start the vCPU threads of `vm` and release them together.
pub fn spawn(
    vm: Vm,
    devices: Devices,
    p: &Prepared,
    started: Instant,
    trace: Option<Arc<TraceConfig>>,
    inhibits: Arc<InhibitLog>,
) -> Result<Running, RunError> {
    let c = &p.config;
    kick::install_kick_handler().map_err(host("installing the kick signal handler"))?;
    let ended = EventFd::new(EFD_NONBLOCK).map_err(host("eventfd"))?;
    let shared = Arc::new(Shared {
        stop: false.into(),
        powered_off: false.into(),
        debug_exit: Default::default(),
        results: vm
            .apic_ids
            .iter()
            .enumerate()
            .map(|(i, id)| Mutex::new(VcpuResult::new(i, *id)))
            .collect(),
        ended: ended.try_clone().map_err(host("eventfd"))?,
        first_message: OnceLock::new(),
        start: Barrier::new(c.vcpus + 1),
        ready: OnceLock::new(),
        stats_layout: OnceLock::new(),
        inhibits,
        budget: devices.budget.clone(),
        console_marks: vcpu::console_marks::ConsoleMarks::new(c.vcpus),
    });
    let mut monitor = EventManager::<RunMonitor>::new().map_err(host("event manager"))?;
    let watch = RunMonitor::new(ended, c.vcpus, c.timeout).map_err(host("watchdog timer"))?;
    let monitor_id = monitor.add_subscriber(watch);
    let Vm {
        vcpus,
        memory,
        fd,
        tsc_khz,
        irqchip,
        ..
    } = vm;
    let mut threads = Vec::with_capacity(c.vcpus);
    for (index, vcpu) in vcpus.into_iter().enumerate() {
        let env = VcpuEnv {
            index,
            bus: devices.bus.clone(),
            shared: shared.clone(),
            tsc_khz,
            trace: trace.clone(),
            pin: c.levers.pin.get(index).copied(),
            irqchip: irqchip.clone(),
            whole_run_phase: c.payload.multiboot().is_some(),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("vcpu{index}"))
            .spawn(move || vcpu::vcpu_thread(vcpu, env));
        // Threads already waiting on the barrier can never be released; they
        // hold only their own fds, which the process exit reclaims.
        threads.push(spawned.map_err(|e| RunError::Host(format!("spawning vcpu{index}: {e}")))?);
    }
    shared.arrive();
    // Ready when the last vCPU thread has opened its counters and waits:
    // the threads set up in parallel with the spawning of the next ones.
    let ready = shared.ready.get().copied().unwrap_or_else(Instant::now);
    let setup_ns = ready.saturating_duration_since(started).as_nanos() as u64;
    Ok(Running {
        threads,
        shared,
        monitor,
        monitor_id,
        serial: devices.serial,
        tsc_khz,
        setup_ns,
        vm_fd: fd,
        memory,
    })
}
