//! Driving ipivmm's own LAPIC model (`--irqchip user`) from the vCPU loop:
//! MSR exits (the x2APIC registers, and IA32_APIC_BASE, which an MSR filter
//! hands to the model so that it owns the APIC mode: no KVM_GET_MSRS on the
//! IPI path), interrupt injection with KVM_INTERRUPT when the guest's
//! interrupt window is open, halted vCPUs parked on a condition variable, and
//! kicks for targets that are running.
use super::exit_handler::MsrHandler;
use crate::vm::kvm_extra;
use ipivmm_devices::lapic::{Delivery, LapicCounters, LapicGroup};
use kvm_ioctls::VcpuFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// IA32_APIC_BASE: filtered to userspace for the model (vm::create_irqchip).
pub const MSR_IA32_APICBASE: u32 = 0x1b;
/// x2APIC MSR range.
const X2APIC_MSRS: std::ops::RangeInclusive<u32> = 0x800..=0x8ff;
/// How long a halted vCPU sleeps before re-checking the stop flag.
const HALT_RECHECK: Duration = Duration::from_millis(20);

/// Per-vCPU presence: whether it is in KVM_RUN, its thread, its wake-up.
#[derive(Default)]
struct Presence {
    in_guest: AtomicBool,
    thread: AtomicU64,
    wake_gen: Mutex<u64>,
    wake: Condvar,
}

/// The LAPIC model shared by all vCPU threads of a VM.
pub struct UserApic {
    group: Arc<Mutex<LapicGroup>>,
    presence: Vec<Presence>,
}

impl UserApic {
    /// Share `group` between `vcpus` threads.
    pub fn new(group: Arc<Mutex<LapicGroup>>, vcpus: usize) -> Self {
        Self {
            group,
            presence: (0..vcpus).map(|_| Presence::default()).collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LapicGroup> {
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record the calling thread as vCPU `index`'s thread (for kicks).
    pub fn register_thread(&self, index: usize) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        if let Some(p) = self.presence.get(index) {
            p.thread.store(me as u64, Ordering::SeqCst);
        }
    }

    /// Before KVM_RUN: inject the highest pending vector if the guest can
    /// take it now, otherwise ask KVM to exit when it can.
    pub fn before_run(&self, index: usize, vcpu: &mut VcpuFd) -> std::io::Result<()> {
        if let Some(p) = self.presence.get(index) {
            p.in_guest.store(true, Ordering::SeqCst);
        }
        let mut group = self.lock();
        let Some(lapic) = group.get_mut(index) else {
            return Ok(());
        };
        let pending = lapic.pending_vector();
        let run = vcpu.get_kvm_run();
        let can_inject = run.ready_for_interrupt_injection != 0 && run.if_flag != 0;
        match pending {
            Some(vector) if can_inject => {
                lapic.ack(vector);
                let more = lapic.pending_vector().is_some();
                drop(group);
                kvm_extra::interrupt(vcpu, vector)?;
                vcpu.get_kvm_run().request_interrupt_window = u8::from(more);
            }
            Some(_) => run.request_interrupt_window = 1,
            None => run.request_interrupt_window = 0,
        }
        Ok(())
    }

    /// After KVM_RUN returned.
    pub fn after_run(&self, index: usize) {
        if let Some(p) = self.presence.get(index) {
            p.in_guest.store(false, Ordering::SeqCst);
        }
    }

    /// KVM_EXIT_HLT: park until an interrupt is pending or `stop` is set.
    pub fn halt(&self, index: usize, stop: &AtomicBool) {
        let Some(p) = self.presence.get(index) else {
            return;
        };
        let mut gen = p.wake_gen.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let pending = self
                .lock()
                .get(index)
                .is_some_and(|l| l.pending_vector().is_some() || l.has_pending_event());
            if pending || stop.load(Ordering::SeqCst) {
                return;
            }
            let seen = *gen;
            let (g, _) = p
                .wake
                .wait_timeout_while(gen, HALT_RECHECK, |g| *g == seen)
                .unwrap_or_else(|e| e.into_inner());
            gen = g;
        }
    }

    /// Wake or kick every target of `delivery` except the sender.
    pub fn kick(&self, sender: usize, delivery: &Delivery, signal: i32) {
        for target in delivery.kicks().filter(|&t| t != sender) {
            let Some(p) = self.presence.get(target) else {
                continue;
            };
            *p.wake_gen.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            p.wake.notify_all();
            if p.in_guest.load(Ordering::SeqCst) {
                let thread = p.thread.load(Ordering::SeqCst);
                if thread != 0 {
                    // SAFETY: `thread` is the pthread_t of a live vCPU thread
                    // (registered by itself; vCPU threads outlive every
                    // delivery, which happens on another vCPU thread).
                    unsafe { libc::pthread_kill(thread as libc::pthread_t, signal) };
                }
            }
        }
    }

    /// This vCPU's model counters.
    pub fn counters(&self, index: usize) -> Option<LapicCounters> {
        self.lock().get(index).map(|l| l.counters())
    }
}

impl MsrHandler for UserApic {
    fn read_msr(&self, vcpu: usize, msr: u32) -> Result<u64, String> {
        let mut group = self.lock();
        let lapic = group.get_mut(vcpu).ok_or("no LAPIC for this vCPU")?;
        match msr {
            MSR_IA32_APICBASE => Ok(lapic.apic_base()),
            m if X2APIC_MSRS.contains(&m) => lapic.read_msr(m).map_err(|e| e.to_string()),
            m => Err(format!("MSR {m:#x} is not emulated")),
        }
    }

    fn write_msr(&self, vcpu: usize, msr: u32, value: u64) -> Result<Option<Delivery>, String> {
        let mut group = self.lock();
        match msr {
            MSR_IA32_APICBASE => {
                let lapic = group.get_mut(vcpu).ok_or("no LAPIC for this vCPU")?;
                lapic
                    .set_apic_base(value)
                    .map(|_| None)
                    .map_err(|e| e.to_string())
            }
            m if X2APIC_MSRS.contains(&m) => group
                .handle_msr_write(vcpu, m, value)
                .map_err(|e| e.to_string()),
            m => Err(format!("MSR {m:#x} is not emulated")),
        }
    }
}
