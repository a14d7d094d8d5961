//! Driving ipivmm's own LAPIC model (`--irqchip user`) from the vCPU loop:
//! x2APIC MSR exits, interrupt injection with KVM_INTERRUPT when the guest's
//! interrupt window is open, halted vCPUs parked on a condition variable, and
//! kicks for targets that are running.
use crate::vm::kvm_extra;
use ipivmm_devices::lapic::{Delivery, LapicCounters, LapicGroup};
use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// IA32_APIC_BASE: KVM keeps it even without an in-kernel LAPIC.
const MSR_IA32_APICBASE: u32 = 0x1b;
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

    /// An x2APIC MSR read; Err = inject #GP.
    pub fn read_msr(&self, index: usize, vcpu: &VcpuFd, msr: u32) -> Result<u64, String> {
        self.sync_apic_base(index, vcpu);
        let mut group = self.lock();
        let lapic = group.get_mut(index).ok_or("no LAPIC for this vCPU")?;
        lapic.read_msr(msr).map_err(|e| e.to_string())
    }

    /// An x2APIC MSR write; Err = inject #GP.
    pub fn write_msr(
        &self,
        index: usize,
        vcpu: &VcpuFd,
        msr: u32,
        value: u64,
    ) -> Result<Option<Delivery>, String> {
        self.sync_apic_base(index, vcpu);
        self.lock()
            .handle_msr_write(index, msr, value)
            .map_err(|e| e.to_string())
    }

    /// Whether `msr` belongs to the model.
    pub fn owns_msr(msr: u32) -> bool {
        X2APIC_MSRS.contains(&msr)
    }

    /// KVM handles IA32_APIC_BASE writes itself; mirror its value into the
    /// model before an x2APIC access so an EXTD switch is seen.
    fn sync_apic_base(&self, index: usize, vcpu: &VcpuFd) {
        let Ok(mut msrs) = Msrs::from_entries(&[kvm_msr_entry {
            index: MSR_IA32_APICBASE,
            ..Default::default()
        }]) else {
            return;
        };
        if vcpu.get_msrs(&mut msrs) != Ok(1) {
            return;
        }
        let base = msrs.as_slice()[0].data;
        let mut group = self.lock();
        if let Some(l) = group.get_mut(index) {
            if l.apic_base() != base {
                if let Err(e) = l.set_apic_base(base) {
                    log::warn!(
                        "vcpu{index}: IA32_APIC_BASE {base:#x} rejected by the LAPIC model: {e}"
                    );
                }
            }
        }
    }

    /// This vCPU's model counters.
    pub fn counters(&self, index: usize) -> Option<LapicCounters> {
        self.lock().get(index).map(|l| l.counters())
    }
}
