//! vCPU threads: named `vcpu{N}`, released together by a barrier, each
//! running its own KVM_RUN loop and snapshotting its own counters.
pub mod console_marks;
pub mod exit_handler;
pub mod sources;
pub mod store;
pub mod trace;
pub mod window;

use crate::irqchip::{Entry, SharedChip};
use crate::results::latency::LatencyStats;
use crate::results::{ExitCounts, Registers, VcpuEnd, VcpuResult};
use exit_handler::{handle_exit, Fault, Step};
use ipivmm_abi::GuestCounters;
use ipivmm_devices::budget::{Excess, GuestBudget};
use ipivmm_devices::bus::{Bus, DeviceEvent};
use ipivmm_devices::control::{ControlBody, ControlError, ControlRequest};
use kvm_ioctls::VcpuFd;
use sources::LoopCounts;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, OnceLock};
use std::time::Instant;
use vmm_sys_util::eventfd::EventFd;
use window::{OpenPhase, Sources};

/// State shared by the vCPU threads and the main thread.
pub struct Shared {
    /// Set to make every vCPU leave its loop at the next exit or kick.
    pub stop: AtomicBool,
    /// The guest powered off (`DeviceEvent::PowerOff`): every vCPU that
    /// stops ends as done, not as stopped.
    pub powered_off: AtomicBool,
    /// The value a multiboot test kernel wrote to the isa-debug-exit port
    /// (`DeviceEvent::DebugExit`), when one did.
    pub debug_exit: OnceLock<u32>,
    /// Per-vCPU results, updated as phases end (survive any failure).
    pub results: Vec<Mutex<VcpuResult>>,
    /// Written by each vCPU thread when it ends.
    pub ended: EventFd,
    /// When the first control message arrived.
    pub first_message: OnceLock<Instant>,
    /// Released when every vCPU is set up, so all start together.
    pub start: Barrier,
    /// When the last thread reached `start` (the VM was ready): set by the
    /// barrier's leader.
    pub ready: OnceLock<Instant>,
    /// The KVM stats layout of the VM's vCPUs, parsed by the first vCPU
    /// thread and shared by the others (the same for every vCPU).
    pub stats_layout: OnceLock<Arc<[ipivmm_counters::kvm_stats::StatDesc]>>,
    /// The APICv inhibit changes every thread of the VM saw.
    pub inhibits: Arc<crate::results::inhibits::InhibitLog>,
    /// The run's guest memory budget.
    pub budget: Arc<GuestBudget>,
    /// Where a multiboot kernel's console ended phases.
    pub console_marks: console_marks::ConsoleMarks,
}

impl Shared {
    /// Wait on `start`; the thread that releases it (the last to arrive)
    /// records when it arrived as `ready`, taken before the wait so that
    /// no released thread runs before it.
    pub fn arrive(&self) {
        let arrived = Instant::now();
        if self.start.wait().is_leader() {
            self.ready.get_or_init(|| arrived);
        }
    }

    /// The result slot of vCPU `index`, even if a thread panicked holding it.
    pub fn result(&self, index: usize) -> MutexGuard<'_, VcpuResult> {
        self.results[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a vCPU thread needs besides its fd.
pub struct VcpuEnv {
    /// vCPU index.
    pub index: usize,
    /// Device bus.
    pub bus: Arc<Bus>,
    /// Shared run state.
    pub shared: Arc<Shared>,
    /// TSC frequency for ns figures.
    pub tsc_khz: u64,
    /// The run's tracepoint configuration (None: tracepoints off), which
    /// the per-exit sources open from (`vcpu::sources`); the loop never reads it.
    pub trace: Option<Arc<trace::TraceConfig>>,
    /// Host CPU to pin this vCPU thread to.
    pub pin: Option<usize>,
    /// The VM's irqchip: what the loop does around KVM_RUN, with MSR exits,
    /// deliveries and HLT exits, and its counters.
    pub irqchip: SharedChip,
    /// A guest that sends no phase markers (a multiboot kernel): the
    /// whole run, from the first KVM_RUN to the exit port, is one phase
    /// ([`WHOLE_RUN_PHASE`]) so its counters are read around it, unless
    /// its console ends phases ([`console_marks`]).
    pub whole_run_phase: bool,
}

/// The id and name of the phase a guest without markers runs in.
pub(crate) const WHOLE_RUN_PHASE: (u32, &str) = (1, "run");

/// The body of thread `vcpu{N}`.
pub(crate) fn vcpu_thread(mut vcpu: VcpuFd, env: VcpuEnv) {
    if let Some(cpu) = env.pin {
        if let Err(e) = crate::levers::pin_current_thread(cpu) {
            log::warn!("vcpu{}: pinning to CPU {cpu} failed: {e}", env.index);
        }
    }
    let ptr = std::ptr::addr_of_mut!(vcpu.get_kvm_run().immediate_exit);
    let _guard = crate::kick::ImmediateExitGuard::new(ptr);
    env.irqchip.register_thread(env.index);
    let kicks = env
        .whole_run_phase
        .then(|| console_marks::Registered::new(&env.shared.console_marks, env.index));
    let mut sources = Sources::open(&vcpu, &env);
    env.shared.result(env.index).sources = sources.status.clone();
    env.shared.arrive();
    let mut run_loop = RunLoop {
        vcpu: &mut vcpu,
        env: &env,
        sources: &mut sources,
        exits: ExitCounts::default(),
        guest: GuestCounters::default(),
        open: None,
        pending_samples: BTreeMap::new(),
        marks: Default::default(),
    };
    let end = run_loop.run();
    drop(kicks);
    let exits = run_loop.exits;
    // Samples still waiting for their phase: it never ended on this vCPU.
    let without_phase: BTreeMap<u32, u64> = run_loop
        .pending_samples
        .iter()
        .map(|(id, s)| (*id, s.len() as u64))
        .collect();
    drop(run_loop);
    sources.vcpu_ended();
    let failed = !matches!(end, VcpuEnd::Done { status: 0, .. });
    {
        let mut result = env.shared.result(env.index);
        result.end = Some(end);
        result.exits = exits;
        result.samples_without_phase = without_phase;
        finish_latency(&mut result, env.tsc_khz);
    }
    if failed {
        env.shared.stop.store(true, Ordering::SeqCst);
    }
    // A failed write only delays the main loop until its watchdog fires.
    let _ = env.shared.ended.write(1);
}

struct RunLoop<'a> {
    vcpu: &'a mut VcpuFd,
    env: &'a VcpuEnv,
    sources: &'a mut Sources,
    exits: ExitCounts,
    guest: GuestCounters,
    open: Option<OpenPhase>,
    pending_samples: BTreeMap<u32, Vec<u64>>,
    marks: console_marks::VcpuMarks,
}

impl RunLoop<'_> {
    fn run(&mut self) -> VcpuEnd {
        if self.env.whole_run_phase {
            self.begin_whole_run();
        }
        loop {
            // Phases a multiboot kernel's console ended (on any vCPU).
            if let Some(end) = self.catch_up_marks() {
                return end;
            }
            // A device (the serial capture) may have found this vCPU's guest
            // over the run's budget.
            if let Some(e) = self.env.shared.budget.excess() {
                if e.vcpu == self.env.index {
                    let reason = e.to_string();
                    return self.fault(reason);
                }
            }
            if self.env.shared.stop.load(Ordering::SeqCst) {
                return self.stopped();
            }
            let (chip, index) = (self.env.irqchip.as_ref(), self.env.index);
            match chip.before_run(index, self.vcpu) {
                Ok(Entry::Run) => {}
                Ok(Entry::WaitForSipi) => {
                    chip.wait_for_sipi(index, &self.env.shared.stop);
                    continue;
                }
                Err(e) => {
                    return self.fault(format!(
                        "delivering an interrupt, NMI, INIT or SIPI failed: {e}"
                    ))
                }
            }
            let ran = self.vcpu.run();
            chip.after_run(index);
            let step = match ran {
                Ok(exit) => {
                    let kind = exit_handler::exit_kind(&exit);
                    self.exits.bump(kind);
                    handle_exit(exit, &self.env.bus, chip.msrs(), index)
                }
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => {
                    Step::Interrupted
                }
                Err(e) => {
                    return self.fault(format!("KVM_RUN failed: {e}"));
                }
            };
            chip.after_exit(index, self.vcpu);
            // Keep the exit sampler's ring from filling between markers.
            self.sources.after_exit();
            match step {
                Step::Resume => {}
                Step::Interrupted => self.vcpu.set_kvm_immediate_exit(0),
                Step::Unclaimed(what) => {
                    log::debug!("vcpu{}: unclaimed {what}", self.env.index);
                    self.env.shared.result(self.env.index).unclaimed_accesses += 1;
                }
                Step::Event(DeviceEvent::Control(Ok(req))) => {
                    if let Some(end) = self.control(req) {
                        return end;
                    }
                }
                Step::Event(DeviceEvent::Lapic(delivery)) => chip.delivered(index, &delivery),
                Step::Event(DeviceEvent::ConsoleLine(line)) => {
                    if let Some(end) = self.console_line(&line) {
                        return end;
                    }
                }
                Step::Event(DeviceEvent::PowerOff) => {
                    self.env.shared.powered_off.store(true, Ordering::SeqCst);
                    self.env.shared.stop.store(true, Ordering::SeqCst);
                    return self.stopped();
                }
                Step::Event(DeviceEvent::DebugExit(value)) => {
                    // The writer ends with the guest's status; the others
                    // as after a power-off (done, 0).
                    let first = self.env.shared.debug_exit.set(value).is_ok();
                    self.env.shared.powered_off.store(true, Ordering::SeqCst);
                    self.env.shared.stop.store(true, Ordering::SeqCst);
                    if let Some(end) = self.end_whole_run() {
                        return end;
                    }
                    return if first {
                        VcpuEnd::Done {
                            status: u64::from(value),
                            message: format!(
                                "the guest wrote {value} to the isa-debug-exit port (QEMU's exit status {})",
                                ipivmm_devices::debug_exit::exit_status(value)
                            ),
                        }
                    } else {
                        self.power_off()
                    };
                }
                Step::Halted => {
                    if let Err(e) = chip.halted(index, self.vcpu, &self.env.shared.stop) {
                        return self.fault(e);
                    }
                }
                Step::MsrGp(why) => log::debug!("vcpu{}: #GP for {why}", self.env.index),
                Step::Event(DeviceEvent::Control(Err(ControlError::OverBudget(e)))) => {
                    return self.over_budget(e);
                }
                Step::Event(DeviceEvent::Control(Err(e))) => {
                    let msg = format!("control port: {e}");
                    self.env
                        .shared
                        .result(self.env.index)
                        .rejected_messages
                        .push(msg.clone());
                    return self.fault(msg);
                }
                Step::Fault(Fault::TripleFault) => return self.shutdown(),
                Step::Fault(f) => {
                    let emulation = matches!(f, Fault::InternalError);
                    let reason = self.describe(f);
                    let end = self.fault(reason);
                    return if emulation {
                        self.init_of_bsp(end)
                    } else {
                        end
                    };
                }
            }
        }
    }

    /// Where this vCPU's guest data goes, charged to the run's budget.
    fn store(&self) -> store::Store<'_> {
        store::Store {
            budget: &self.env.shared.budget,
            vcpu: self.env.index,
        }
    }

    /// The end of a vCPU whose guest data did not fit: a fault naming the
    /// excess when it is the run's (the first), else stopped, as the run is
    /// stopping for another vCPU's excess.
    fn over_budget(&mut self, e: Excess) -> VcpuEnd {
        if self.env.shared.budget.excess() == Some(&e) {
            self.fault(e.to_string())
        } else {
            self.stopped()
        }
    }

    /// Stopped by the host: where it was, the phase it was in, and
    /// whether it was waiting for a start-up IPI (what the timeout hint
    /// names) (KVM's MP state with an in-kernel LAPIC, ours with
    /// the user one).
    fn stopped(&mut self) -> VcpuEnd {
        if self.env.shared.powered_off.load(Ordering::SeqCst) {
            return self.power_off();
        }
        let wait_for_sipi = self.env.irqchip.waits_for_sipi(self.env.index, self.vcpu);
        VcpuEnd::Stopped {
            registers: registers(self.vcpu),
            phase: self.open.as_ref().map(|p| p.name.clone()),
            wait_for_sipi,
        }
    }

    /// An emulation failure at the reset vector of vCPU 0 is an INIT it
    /// received: an INIT restarts the BSP at F000:FFF0 rather than holding
    /// it for a SIPI (an AP waits), where no payload code is, and the first
    /// real-mode instruction fails to emulate (seen with ipivmm's LAPIC
    /// model; kvm_pvm's in-kernel LAPIC left the BSP running). Say so, not
    /// only "emulation failed".
    fn init_of_bsp(&self, end: VcpuEnd) -> VcpuEnd {
        match end {
            VcpuEnd::Fault {
                reason,
                registers: Some(r),
            } if self.env.index == 0 && r.is_reset_state() => VcpuEnd::Fault {
                reason: format!(
                    "vcpu0 received an INIT: an INIT restarts vCPU 0 (the BSP) at the reset vector F000:FFF0 rather than holding it for a SIPI as it does other vCPUs, and the first instruction there failed ({reason}); do not send INIT to vCPU 0 (all-including-self or a destination naming it)"
                ),
                registers: Some(r),
            },
            end => end,
        }
    }

    fn fault(&mut self, reason: String) -> VcpuEnd {
        VcpuEnd::Fault {
            reason,
            registers: registers(self.vcpu),
        }
    }

    /// KVM_EXIT_SHUTDOWN. kvm_amd re-initialises the VMCB on a shutdown
    /// intercept (svm.c `shutdown_interception`), so what reads back is the
    /// reset state, not the faulting one: say so rather than dump it.
    fn shutdown(&mut self) -> VcpuEnd {
        let reason = self.describe(Fault::TripleFault);
        match registers(self.vcpu) {
            Some(r) if r.is_reset_state() => VcpuEnd::Fault {
                reason: format!("{reason}; registers unavailable: KVM reset the vCPU on shutdown (kvm_amd re-initialises the VMCB)"),
                registers: None,
            },
            registers => VcpuEnd::Fault { reason, registers },
        }
    }

    fn describe(&mut self, f: Fault) -> String {
        match f {
            Fault::TripleFault => "guest triple fault (KVM_EXIT_SHUTDOWN)".into(),
            Fault::InternalError => {
                let run = self.vcpu.get_kvm_run();
                // SAFETY: KVM set exit_reason to KVM_EXIT_INTERNAL_ERROR for this
                // exit, so `internal` is the active member of the exit union.
                let internal = unsafe { run.__bindgen_anon_1.internal };
                let n = (internal.ndata as usize).min(internal.data.len());
                format!(
                    "KVM internal error, suberror {} ({}), data {:x?}",
                    internal.suberror,
                    internal_suberror_name(internal.suberror),
                    &internal.data[..n]
                )
            }
            Fault::FailEntry { reason, cpu } => {
                format!("KVM_EXIT_FAIL_ENTRY: hardware entry failure reason {reason:#x} on host CPU {cpu}")
            }
            Fault::SystemEvent(kind) => format!("guest system event {kind} (reset/shutdown/crash)"),
            Fault::Device(e) => format!("device failure: {e}"),
            Fault::Unexpected(kind) => format!("unexpected {kind} exit in this mode"),
        }
    }

    /// The phase still open at the end, kept and marked: a phase left open
    /// is not a finished one, but what it counted up to then is no less
    /// real. Some(end): it did not fit in the budget.
    fn close_unfinished(&mut self) -> Option<VcpuEnd> {
        self.close_open(true)
    }

    /// End the open phase, `unfinished` or complete, into the run's
    /// results; Some(end) if its data did not fit the budget.
    fn close_open(&mut self, unfinished: bool) -> Option<VcpuEnd> {
        let open = self.open.take()?;
        let now = LoopCounts {
            exits: &self.exits,
            guest: &self.guest,
        };
        let result = self.sources.end(open, &now);
        let mut result = self.with_boot(result);
        result.unfinished = unfinished;
        let early = self.pending_samples.remove(&result.id);
        let mut r = self.env.shared.result(self.env.index);
        if let Err(e) = self.store().phase(&mut r, result, early) {
            drop(r);
            return Some(self.over_budget(e));
        }
        None
    }

    /// The end of every vCPU of a guest that powered off (a Linux guest's
    /// `poweroff`, ACPI S5) or whose other vCPU wrote the exit port: done,
    /// status 0.
    fn power_off(&mut self) -> VcpuEnd {
        let closed = match self.env.shared.debug_exit.get() {
            // The guest ended its run: its whole-run phase is complete.
            Some(_) => self.end_whole_run(),
            None => self.close_unfinished(),
        };
        if let Some(end) = closed {
            return end;
        }
        let message = match self.env.shared.debug_exit.get() {
            Some(_) => "another vCPU ended the run (isa-debug-exit)",
            None => "the guest powered off (ACPI S5)",
        };
        VcpuEnd::Done {
            status: 0,
            message: message.into(),
        }
    }

    /// Open the whole-run phase of a guest without markers, before its
    /// first instruction: the counters' begin snapshot.
    fn begin_whole_run(&mut self) {
        if self.sources.at_begin(false) {
            self.env.shared.result(self.env.index).sources = self.sources.status.clone();
        }
        self.sources.guest_started();
        let now = LoopCounts {
            exits: &self.exits,
            guest: &self.guest,
        };
        let (id, name) = WHOLE_RUN_PHASE;
        self.open = Some(self.sources.begin(id, name.into(), &now));
    }

    /// End the open phase as complete (the guest ended the run through
    /// the exit port), after the phases its console ended before;
    /// Some(end) if its data did not fit the budget.
    fn end_whole_run(&mut self) -> Option<VcpuEnd> {
        if let Some(end) = self.catch_up_marks() {
            return Some(end);
        }
        self.close_open(false)
    }

    /// Act on a control message; Some(end) when the vCPU stops.
    fn control(&mut self, req: ControlRequest) -> Option<VcpuEnd> {
        self.guest = req.counters;
        let index = self.env.index;
        match req.body {
            ControlBody::Hello { .. } => {
                self.env.shared.first_message.get_or_init(Instant::now);
                // The guest runs (the BPF object loads beside it, off its path).
                self.sources.guest_started();
            }
            ControlBody::PhaseBegin {
                phase,
                name,
                uncounted,
            } => {
                if let Some(open) = &self.open {
                    return Some(self.fault(format!(
                        "payload began phase {phase} '{name}' while phase {} '{}' was still open",
                        open.id, open.name
                    )));
                }
                if self.sources.at_begin(uncounted) {
                    self.env.shared.result(index).sources = self.sources.status.clone();
                }
                let now = LoopCounts {
                    exits: &self.exits,
                    guest: &self.guest,
                };
                let mut open = self.sources.begin(phase, name, &now);
                if uncounted {
                    // After the begin snapshot: the marker's own exit is
                    // counted, nothing of the part is.
                    if let Err(e) = self.sources.set_counting(false) {
                        return Some(self.fault(format!(
                            "switching the counters off for the uncounted phase {phase} failed: {e}"
                        )));
                    }
                    open.uncounted = true;
                }
                self.open = Some(open);
            }
            ControlBody::PhaseEnd { phase } => match self.open.take() {
                Some(open) if open.id == phase => {
                    let uncounted = open.uncounted;
                    let now = LoopCounts {
                        exits: &self.exits,
                        guest: &self.guest,
                    };
                    let result = self.sources.end(open, &now);
                    if uncounted && self.sources.at_uncounted_end() {
                        self.env.shared.result(index).sources = self.sources.status.clone();
                    }
                    if uncounted {
                        if let Err(e) = self.sources.set_counting(true) {
                            return Some(self.fault(format!(
                                "switching the counters back on after the uncounted phase {phase} failed: {e}"
                            )));
                        }
                    }
                    let early = self.pending_samples.remove(&phase);
                    let mut r = self.env.shared.result(index);
                    if let Err(e) = self.store().phase(&mut r, result, early) {
                        drop(r);
                        return Some(self.over_budget(e));
                    }
                }
                other => {
                    let open =
                        other.map_or("none".to_string(), |o| format!("{} '{}'", o.id, o.name));
                    return Some(self.fault(format!(
                        "payload ended phase {phase} but the open phase is {open}"
                    )));
                }
            },
            ControlBody::Samples { phase, samples, .. } => {
                let open = self.open.as_ref().is_some_and(|o| o.id == phase);
                let mut r = self.env.shared.result(index);
                let store = store::Store {
                    budget: &self.env.shared.budget,
                    vcpu: index,
                };
                let pending = &mut self.pending_samples;
                if let Err(e) = store.samples(&mut r, pending, phase, open, samples) {
                    drop(r);
                    return Some(self.over_budget(e));
                }
            }
            ControlBody::Record { phase, name, value } => {
                let mut r = self.env.shared.result(index);
                let Some(p) = r.phases.iter_mut().rev().find(|p| p.id == phase) else {
                    drop(r);
                    return Some(self.fault(format!(
                        "payload recorded '{name}' for phase {phase}, which has not ended"
                    )));
                };
                if let Err(e) = self.store().record(p, name, value) {
                    drop(r);
                    return Some(self.over_budget(e));
                }
            }
            ControlBody::Done { status, message } => {
                if let Some(end) = self.close_unfinished() {
                    return Some(end);
                }
                return Some(VcpuEnd::Done { status, message });
            }
            ControlBody::Panic { message } => {
                return Some(self.fault(format!("payload panic: {message}")));
            }
        }
        None
    }
}

/// Compute the latency statistics of every phase that received samples
/// (once, at the end of the run, not per Samples message), sorting the
/// samples in place rather than copying them.
pub(crate) fn finish_latency(result: &mut VcpuResult, tsc_khz: u64) {
    for p in &mut result.phases {
        p.samples.sort_unstable();
        p.latency = LatencyStats::of_sorted(&p.samples, tsc_khz);
    }
}

/// KVM_INTERNAL_ERROR_* names.
pub(crate) fn internal_suberror_name(code: u32) -> &'static str {
    match code {
        1 => "instruction emulation failed",
        2 => "simultaneous exceptions",
        3 => "delivery event (vectoring) failed",
        4 => "unexpected exit reason",
        _ => "unknown",
    }
}

fn registers(vcpu: &VcpuFd) -> Option<Registers> {
    let r = vcpu.get_regs().ok()?;
    let s = vcpu.get_sregs().ok()?;
    Some(Registers {
        rip: r.rip,
        rsp: r.rsp,
        rflags: r.rflags,
        rax: r.rax,
        rbx: r.rbx,
        rcx: r.rcx,
        rdx: r.rdx,
        rsi: r.rsi,
        rdi: r.rdi,
        rbp: r.rbp,
        cr0: s.cr0,
        cr2: s.cr2,
        cr3: s.cr3,
        cr4: s.cr4,
        efer: s.efer,
    })
}
