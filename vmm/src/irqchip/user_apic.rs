//! Driving ipivmm's own LAPIC model (`--irqchip user`) from the vCPU loop:
//! MSR exits (the x2APIC registers, and IA32_APIC_BASE, which an MSR filter
//! hands to the model so that it owns the APIC mode: no KVM_GET_MSRS on the
//! IPI path), interrupt injection with KVM_INTERRUPT when the guest's
//! interrupt window is open, NMIs with KVM_NMI, INIT and start-up IPIs
//! (the vCPU reset and parked in wait-for-SIPI, then started in real mode at
//! the vector, as KVM does for APs), CR8 kept in step with the TPR, halted
//! vCPUs parked on a condition variable, and kicks for targets that are
//! running. Every event is taken by its target's own thread, before its
//! next KVM_RUN.
use super::{set_tss_address, Chip, Entry, MsrHandler};
use crate::arch::regs;
use crate::kvm_extra::{self, KvmCall};
use crate::results::source::Source;
use crate::results::SourceStatus;
use ipivmm_devices::bus::{AddressSpace, Bus, BusError};
use ipivmm_devices::lapic::mmio::{LapicMmio, XAPIC_PAGE_LEN};
use ipivmm_devices::lapic::{Delivery, Lapic, LapicCounters, LapicGroup};
use kvm_bindings::{
    kvm_enable_cap, KVM_CAP_X86_USER_SPACE_MSR, KVM_MAX_CPUID_ENTRIES, KVM_MSR_EXIT_REASON_FILTER,
    KVM_MSR_EXIT_REASON_INVAL, KVM_MSR_EXIT_REASON_UNKNOWN, KVM_VCPUEVENT_VALID_NMI_PENDING,
};
use kvm_ioctls::{MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags, VcpuFd, VmFd};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// IA32_APIC_BASE: filtered to userspace for the model ([`user_space_msrs`]).
pub(crate) const MSR_IA32_APICBASE: u32 = 0x1b;
/// x2APIC MSR range.
const X2APIC_MSRS: std::ops::RangeInclusive<u32> = 0x800..=0x8ff;
/// How long a halted vCPU sleeps before re-checking the stop flag.
const HALT_RECHECK: Duration = Duration::from_millis(20);

/// Per-vCPU presence: whether it is in KVM_RUN, its thread, its wake-up,
/// and whether it waits for a start-up IPI (after an INIT: KVM_SET_MP_STATE
/// needs an in-kernel LAPIC, so the wait-for-SIPI state is ours).
#[derive(Default)]
struct Presence {
    in_guest: AtomicBool,
    thread: AtomicU64,
    wake_gen: Mutex<u64>,
    wake: Condvar,
    wait_sipi: AtomicBool,
    /// The CR8 this vCPU last entered the guest with (the model's TPR).
    cr8_entered: AtomicU64,
}

/// Events a vCPU takes before it runs (taken under the group lock, acted on
/// without it).
struct Taken {
    init: bool,
    bsp: bool,
    sipi: Option<u8>,
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

    /// One model LAPIC per vCPU, with these APIC IDs (index = vCPU index),
    /// x2APIC-capable or not.
    pub fn for_vcpus(apic_ids: &[u32], x2apic: bool) -> Self {
        let lapics = apic_ids
            .iter()
            .enumerate()
            .map(|(i, &id)| Lapic::new(i, id).with_x2apic_support(x2apic));
        let group = Arc::new(Mutex::new(LapicGroup::from_lapics(lapics)));
        Self::new(group, apic_ids.len())
    }

    fn lock(&self) -> MutexGuard<'_, LapicGroup> {
        self.group.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// KVM_EXIT_HLT: park until something ends the halt
    /// ([`Lapic::wakes_from_halt`] with the guest's RFLAGS.IF `if_flag`) or
    /// `stop` is set. A start-up IPI that arrives meanwhile is dropped,
    /// unless an INIT precedes it (the INIT wakes the vCPU, and the SIPI
    /// then starts it: see [`Lapic::drop_stray_sipi`]).
    fn halt(&self, index: usize, if_flag: bool, stop: &AtomicBool) {
        self.park(index, stop, |l| {
            // Ignored outside wait-for-SIPI (and not waking the vCPU).
            l.drop_stray_sipi();
            l.wakes_from_halt(if_flag)
        });
    }

    /// Parks vCPU `index`'s thread until `done` holds of its APIC (checked
    /// under the group lock) or `stop` is set.
    fn park(&self, index: usize, stop: &AtomicBool, done: impl Fn(&mut Lapic) -> bool) {
        let Some(p) = self.presence.get(index) else {
            return;
        };
        let mut gen = p.wake_gen.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let pending = self.lock().get_mut(index).is_some_and(&done);
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
    fn kick(&self, sender: usize, delivery: &Delivery, signal: i32) {
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
}

/// `--irqchip user`: no irqchip in KVM, ipivmm's LAPIC model instead.
impl Chip for UserApic {
    /// No in-kernel irqchip: only KVM's real-mode TSS, and the MSR exits
    /// the model needs ([`user_space_msrs`]).
    fn create(&self, fd: &VmFd) -> Result<(), KvmCall> {
        set_tss_address(fd)?;
        user_space_msrs(fd)
    }

    /// The model's LAPICs start with their LINTs and APIC IDs set
    /// ([`Lapic::new`]): nothing to program in KVM.
    fn setup_vcpu(&self, _vcpu: &VcpuFd, _apic_id: Option<u32>) -> Result<(), KvmCall> {
        Ok(())
    }

    /// The xAPIC page, on the MMIO bus.
    fn wire(&self, bus: &mut Bus) -> Result<(), BusError> {
        let mmio = Arc::new(Mutex::new(LapicMmio::new(self.group.clone())));
        bus.insert(
            AddressSpace::Mmio,
            ipivmm_abi::XAPIC_BASE,
            XAPIC_PAGE_LEN,
            mmio,
        )
    }

    /// Record the calling thread as vCPU `index`'s thread (for kicks).
    fn register_thread(&self, index: usize) {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        if let Some(p) = self.presence.get(index) {
            p.thread.store(me as u64, Ordering::SeqCst);
        }
    }

    /// Before KVM_RUN, in the order KVM's `kvm_apic_accept_events` and
    /// `inject_pending_event` take them: an INIT resets the vCPU (an AP then
    /// waits for SIPI: [`Entry::WaitForSipi`]); a SIPI starts a waiting vCPU
    /// in real mode at its vector and is ignored otherwise; an NMI is
    /// injected with KVM_NMI; then the highest pending vector is injected if
    /// the guest can take it now, or KVM is asked to exit when it can. CR8
    /// gets the model's TPR.
    fn before_run(&self, index: usize, vcpu: &mut VcpuFd) -> std::io::Result<Entry> {
        let Some(p) = self.presence.get(index) else {
            return Ok(Entry::Run);
        };
        // Set first: a kick from now on signals this thread, whose next
        // KVM_RUN then returns at once and comes back here.
        p.in_guest.store(true, Ordering::SeqCst);
        let taken = {
            let mut group = self.lock();
            let Some(lapic) = group.get_mut(index) else {
                return Ok(Entry::Run);
            };
            Taken {
                init: lapic.take_init(),
                bsp: lapic.is_bsp(),
                // Taken whatever the state: outside wait-for-SIPI it is
                // dropped, as KVM drops it.
                sipi: lapic.take_sipi(),
            }
        };
        if taken.init {
            reset_for_init(vcpu)?;
            p.wait_sipi.store(!taken.bsp, Ordering::SeqCst);
        }
        if p.wait_sipi.load(Ordering::SeqCst) {
            let Some(vector) = taken.sipi else {
                p.in_guest.store(false, Ordering::SeqCst);
                return Ok(Entry::WaitForSipi);
            };
            start_at(vcpu, vector)?;
            p.wait_sipi.store(false, Ordering::SeqCst);
        }
        let mut group = self.lock();
        let Some(lapic) = group.get_mut(index) else {
            return Ok(Entry::Run);
        };
        let nmi = lapic.take_nmi();
        let pending = lapic.pending_vector();
        let run = vcpu.get_kvm_run();
        run.cr8 = lapic.cr8();
        p.cr8_entered.store(run.cr8, Ordering::SeqCst);
        let can_inject = run.ready_for_interrupt_injection != 0 && run.if_flag != 0;
        let inject = match pending {
            Some(vector) if can_inject => {
                lapic.ack(vector);
                run.request_interrupt_window = u8::from(lapic.pending_vector().is_some());
                Some(vector)
            }
            Some(_) => {
                run.request_interrupt_window = 1;
                None
            }
            None => {
                run.request_interrupt_window = 0;
                None
            }
        };
        drop(group);
        if nmi {
            vcpu.nmi()
                .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
        }
        if let Some(vector) = inject {
            kvm_extra::interrupt(vcpu, vector)?;
        }
        Ok(Entry::Run)
    }

    /// After KVM_RUN returned.
    fn after_run(&self, index: usize) {
        if let Some(p) = self.presence.get(index) {
            p.in_guest.store(false, Ordering::SeqCst);
        }
    }

    /// After the exit was handled: a CR8 the guest changed while it ran
    /// (`kvm_run.cr8` differs from what it entered with) becomes the
    /// model's TPR (without an in-kernel APIC, CR8 lives in `kvm_run.cr8`).
    /// A TPR the exit itself wrote (MMIO, MSR) is left alone: the next
    /// [`Chip::before_run`] hands it to CR8.
    fn after_exit(&self, index: usize, vcpu: &mut VcpuFd) {
        let Some(p) = self.presence.get(index) else {
            return;
        };
        let cr8 = vcpu.get_kvm_run().cr8;
        if cr8 != p.cr8_entered.load(Ordering::SeqCst) {
            if let Some(lapic) = self.lock().get_mut(index) {
                lapic.set_cr8(cr8);
            }
            p.cr8_entered.store(cr8, Ordering::SeqCst);
        }
    }

    /// Whether vCPU `index` waits for a start-up IPI (ours: KVM_SET_MP_STATE
    /// needs an in-kernel LAPIC).
    fn waits_for_sipi(&self, index: usize, _vcpu: &VcpuFd) -> bool {
        self.presence
            .get(index)
            .is_some_and(|p| p.wait_sipi.load(Ordering::SeqCst))
    }

    /// [`Entry::WaitForSipi`]: park until a SIPI or another INIT is
    /// pending ([`Lapic::ends_wait_for_sipi`]) or `stop` is set.
    fn wait_for_sipi(&self, index: usize, stop: &AtomicBool) {
        self.park(index, stop, |l| l.ends_wait_for_sipi());
    }

    fn source(&self) -> Option<SourceStatus> {
        Some(SourceStatus::new(
            Source::UserLapic,
            true,
            Some("ipivmm's LAPIC model: every ICR write is a userspace exit".into()),
        ))
    }

    /// This vCPU's model counters.
    fn counters(&self, index: usize) -> Option<BTreeMap<String, u64>> {
        self.lock().get(index).map(|l| named(&l.counters()))
    }

    fn msrs(&self) -> Option<&dyn MsrHandler> {
        Some(self)
    }

    fn delivered(&self, sender: usize, delivery: &Delivery) {
        self.kick(sender, delivery, crate::kick::kick_signal());
    }

    fn halted(&self, index: usize, vcpu: &mut VcpuFd, stop: &AtomicBool) -> Result<(), String> {
        let if_flag = vcpu.get_kvm_run().if_flag != 0;
        self.halt(index, if_flag, stop);
        Ok(())
    }
}

/// The model's counters a phase reports (`user_lapic`), by name.
fn named(c: &LapicCounters) -> BTreeMap<String, u64> {
    [
        ("icr_writes", c.icr_writes),
        ("self_ipi_writes", c.self_ipi_writes),
        ("ipis_delivered", c.ipis_delivered),
        ("ipis_coalesced", c.ipis_coalesced),
        ("ipis_dropped", c.ipis_dropped),
        ("eois", c.eois),
        ("nmis", c.nmis),
        ("faults", c.faults),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Resets the vCPU's registers to their INIT state ([`regs::init_sregs`],
/// [`regs::init_regs`] with the processor signature of its CPUID leaf 1)
/// and drops what KVM had queued for it (interrupt, exception, NMI), as
/// KVM's `kvm_vcpu_reset(vcpu, init_event = true)` does.
fn reset_for_init(vcpu: &VcpuFd) -> std::io::Result<()> {
    let errno = |e: vmm_sys_util::errno::Error| std::io::Error::from_raw_os_error(e.errno());
    let sregs = vcpu.get_sregs().map_err(errno)?;
    vcpu.set_sregs(&regs::init_sregs(sregs)).map_err(errno)?;
    let signature = vcpu
        .get_cpuid2(KVM_MAX_CPUID_ENTRIES)
        .ok()
        .and_then(|c| {
            c.as_slice()
                .iter()
                .find(|e| e.function == 1 && e.index == 0)
                .map(|e| e.eax)
        })
        .unwrap_or(0x600);
    vcpu.set_regs(&regs::init_regs(signature)).map_err(errno)?;
    let mut events = vcpu.get_vcpu_events().map_err(errno)?;
    events.exception.injected = 0;
    events.exception.pending = 0;
    events.interrupt.injected = 0;
    events.nmi.injected = 0;
    events.nmi.pending = 0;
    events.flags = KVM_VCPUEVENT_VALID_NMI_PENDING;
    vcpu.set_vcpu_events(&events).map_err(errno)
}

/// A start-up IPI of `vector`: real mode at `vector << 12`.
fn start_at(vcpu: &VcpuFd, vector: u8) -> std::io::Result<()> {
    let errno = |e: vmm_sys_util::errno::Error| std::io::Error::from_raw_os_error(e.errno());
    let mut r = vcpu.get_regs().map_err(errno)?;
    let mut s = vcpu.get_sregs().map_err(errno)?;
    regs::sipi_start(&mut r, &mut s, vector);
    vcpu.set_sregs(&s).map_err(errno)?;
    vcpu.set_regs(&r).map_err(errno)
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

/// Without KVM's LAPIC the model answers its MSRs: x2APIC MSRs are invalid
/// for KVM then and exit to userspace (KVM_EXIT_X86_RDMSR/WRMSR), and an MSR
/// filter sends IA32_APIC_BASE there too, so the model sees every APIC mode
/// switch as it happens (api.rst, KVM_X86_SET_MSR_FILTER: a denied access
/// exits with KVM_MSR_EXIT_REASON_FILTER when that reason is enabled).
fn user_space_msrs(fd: &VmFd) -> Result<(), KvmCall> {
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_USER_SPACE_MSR,
        ..Default::default()
    };
    let reasons =
        KVM_MSR_EXIT_REASON_INVAL | KVM_MSR_EXIT_REASON_UNKNOWN | KVM_MSR_EXIT_REASON_FILTER;
    cap.args[0] = u64::from(reasons);
    fd.enable_cap(&cap)
        .map_err(KvmCall::named("KVM_ENABLE_CAP(KVM_CAP_X86_USER_SPACE_MSR)"))?;
    let deny_apic_base = MsrFilterRange {
        flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
        base: MSR_IA32_APICBASE,
        msr_count: 1,
        bitmap: &[0],
    };
    fd.set_msr_filter(MsrFilterDefaultAction::ALLOW, &[deny_apic_base])
        .map_err(KvmCall::named("KVM_X86_SET_MSR_FILTER"))
}
