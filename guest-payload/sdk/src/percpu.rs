//! Per-vCPU state, at the start of each vCPU's scratch area
//! (`BootInfo::scratch_base + i * scratch_stride`), found by interrupt
//! handlers through GS base (`gs:[0]` holds the block's own address): a
//! handler cannot know its vCPU otherwise without an APIC read, which would
//! add an exit to the path being measured.

use crate::cpu;
use core::arch::asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use ipivmm_abi::{
    x2apic_logical_id, ApicMode, BootInfo, GuestCounters, LogicalModel, MAX_TEXT_LEN,
};

/// Bytes at the start of each vCPU's scratch area the SDK keeps for itself;
/// the sample area follows.
pub const PERCPU_RESERVED: u64 = 4096;

static BOOT: AtomicPtr<BootInfo> = AtomicPtr::new(core::ptr::null_mut());

/// The boot information block (valid once the runtime started this vCPU).
pub fn boot_info() -> &'static BootInfo {
    let p = BOOT.load(Ordering::Acquire);
    assert!(!p.is_null(), "boot_info() before the runtime stored it");
    // SAFETY: set once from the validated rdi of the entry point; the host
    // keeps the block in place and unchanged for the VM's lifetime.
    unsafe { &*p }
}

pub(crate) fn set_boot_info(boot: *const BootInfo) {
    BOOT.store(boot as *mut BootInfo, Ordering::Release);
}

/// The payload's own counters (see [`GuestCounters`]), updated by this vCPU
/// only (its main code and its handlers), read by others (acks) and sent with
/// every control message.
#[repr(C)]
#[derive(Default)]
pub struct Counters {
    /// ICR writes issued (PV IPI hypercalls are counted in `hypercalls` only).
    pub icr_writes: AtomicU64,
    /// Target vCPUs of those IPIs.
    pub ipis_sent: AtomicU64,
    /// IPIs of the measured vector taken.
    pub ipis_received: AtomicU64,
    /// Entries into any interrupt handler.
    pub handler_entries: AtomicU64,
    /// EOIs written.
    pub eois: AtomicU64,
    /// PV IPI hypercalls issued.
    pub hypercalls: AtomicU64,
    /// Spurious interrupts taken.
    pub spurious: AtomicU64,
    /// ICR writes of halting-barrier wake-ups (not in `icr_writes`).
    pub barrier_icr_writes: AtomicU64,
}

impl Counters {
    /// A plain copy for a control message.
    pub fn snapshot(&self) -> GuestCounters {
        GuestCounters {
            icr_writes: self.icr_writes.load(Ordering::Relaxed),
            ipis_sent: self.ipis_sent.load(Ordering::Relaxed),
            ipis_received: self.ipis_received.load(Ordering::Acquire),
            handler_entries: self.handler_entries.load(Ordering::Relaxed),
            eois: self.eois.load(Ordering::Relaxed),
            hypercalls: self.hypercalls.load(Ordering::Relaxed),
            spurious: self.spurious.load(Ordering::Relaxed),
            barrier_icr_writes: self.barrier_icr_writes.load(Ordering::Relaxed),
        }
    }
}

/// Adds `n` to `c` (a `lock xadd`: atomic against this vCPU's own handlers).
#[inline(always)]
pub fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Release);
}

/// One vCPU's SDK state.
#[repr(C)]
pub struct PerCpu {
    /// Own address; must stay the first field (read as `gs:[0]`).
    self_ptr: *const PerCpu,
    /// vCPU index.
    pub vcpu: u32,
    /// APIC ID (from `BootInfo::apic_ids`).
    pub apic_id: u32,
    /// Counters.
    pub counters: Counters,
    /// Times this vCPU reached its `hlt` (see [`halt_until_interrupt`]).
    pub halted_seq: AtomicU64,
    /// `halted_seq` as of this vCPU's last return from its `hlt`: the two
    /// differ exactly while it is halted or about to be.
    pub woken_seq: AtomicU64,
    /// NMIs taken with a hook set (`idt::set_nmi_hook`); not a
    /// [`GuestCounters`] field (no slot is free): see [`nmis_received`].
    pub nmis_received: AtomicU64,
    /// This vCPU's logical destination as `apic` programmed it: the
    /// `LogicalModel` in bits 63:32 (0: none), the logical ID in 31:0.
    pub(crate) logical: AtomicU64,
    /// Set while the panic path formats and sends its message.
    pub(crate) in_panic: AtomicBool,
    /// The sample area has been handed out.
    pub(crate) samples_taken: AtomicBool,
    /// Text of a panic / exception message (the host reads it by GPA).
    pub(crate) text: UnsafeCell<[u8; MAX_TEXT_LEN as usize]>,
}

// SAFETY: `text` is only written by its own vCPU on the panic path (guarded by
// `in_panic`); everything else is atomics or immutable after init.
unsafe impl Sync for PerCpu {}

const _: () = assert!(core::mem::size_of::<PerCpu>() as u64 <= PERCPU_RESERVED);

/// Address of vCPU `vcpu`'s block.
fn addr_of(boot: &BootInfo, vcpu: usize) -> u64 {
    boot.scratch_base + vcpu as u64 * boot.scratch_stride
}

/// Initializes this vCPU's block and points GS base at it.
///
/// # Safety
/// Called once per vCPU, before interrupts are enabled, with a validated
/// `boot` whose scratch area for `vcpu` is at least [`PERCPU_RESERVED`] bytes
/// of RAM owned by this vCPU.
pub(crate) unsafe fn init(boot: &BootInfo, vcpu: usize) {
    let p = addr_of(boot, vcpu) as *mut PerCpu;
    // SAFETY: the caller guarantees the memory is ours; zero it all (atomics,
    // bools and byte arrays are valid all-zero) then set the plain fields.
    unsafe {
        core::ptr::write_bytes(p as *mut u8, 0, core::mem::size_of::<PerCpu>());
        (*p).self_ptr = p;
        (*p).vcpu = vcpu as u32;
        (*p).apic_id = boot.apic_id(vcpu);
        cpu::wrmsr(cpu::MSR_GS_BASE, p as u64);
    }
}

/// True once this vCPU's GS base points at a block (the panic path checks
/// before trusting `gs:[0]`).
pub fn is_initialized() -> bool {
    // SAFETY: IA32_GS_BASE exists on every x86-64 CPU; reading it is harmless.
    let gs = unsafe { cpu::rdmsr(cpu::MSR_GS_BASE) };
    let boot = BOOT.load(Ordering::Acquire);
    // SAFETY: a non-null BOOT is a validated block (see `boot_info`).
    gs != 0 && !boot.is_null() && gs >= unsafe { (*boot).scratch_base }
}

/// This vCPU's block.
#[inline(always)]
pub fn current() -> &'static PerCpu {
    let p: *const PerCpu;
    // SAFETY: the runtime set GS base to this vCPU's block before any code
    // that calls this runs (entry, handlers and user code all come later).
    unsafe {
        asm!("mov {}, qword ptr gs:[0]", out(reg) p, options(nostack, preserves_flags, readonly));
        &*p
    }
}

/// vCPU `vcpu`'s block (for reading another vCPU's counters, e.g. acks).
/// Valid once that vCPU has started (after the first barrier).
pub fn of(vcpu: usize) -> &'static PerCpu {
    let boot = boot_info();
    assert!(vcpu < boot.vcpu_count as usize, "vCPU {vcpu} out of range");
    // SAFETY: in-range blocks are RAM set up by their vCPU; all shared fields
    // are atomics.
    unsafe { &*(addr_of(boot, vcpu) as *const PerCpu) }
}

/// Publishes "about to halt" and halts until an interrupt (called with
/// interrupts disabled; returns with them enabled, after the handler ran).
/// The store precedes `sti; hlt` in program order and the `sti` shadow keeps
/// any interrupt out until the `hlt`, so a sender that sees the new sequence
/// number knows this vCPU is in, or a few instructions from, its `hlt`.
#[inline(always)]
pub fn halt_until_interrupt() {
    let me = current();
    let seq = me.halted_seq.fetch_add(1, Ordering::Release) + 1;
    cpu::enable_interrupts_and_halt();
    me.woken_seq.store(seq, Ordering::Release);
}

/// How many times vCPU `vcpu` has reached its `hlt` (see [`halt_until_interrupt`]).
#[inline(always)]
pub fn halted_seq(vcpu: usize) -> u64 {
    of(vcpu).halted_seq.load(Ordering::Acquire)
}

/// Whether vCPU `vcpu` is halted, or past the point of no return into its
/// `hlt` (published, interrupts off or in the `sti` shadow).
#[inline(always)]
pub fn is_halting(vcpu: usize) -> bool {
    let pc = of(vcpu);
    pc.halted_seq.load(Ordering::Acquire) != pc.woken_seq.load(Ordering::Acquire)
}

/// IPIs of the measured vector vCPU `vcpu` has taken (what senders poll as
/// the acknowledgement).
#[inline(always)]
pub fn received(vcpu: usize) -> u64 {
    of(vcpu).counters.ipis_received.load(Ordering::Acquire)
}

/// NMIs vCPU `vcpu` has taken with a hook set (what a sender of NMIs polls
/// as the acknowledgement). The host does not see this count: report it
/// with `control::record` if the results should hold it.
#[inline(always)]
pub fn nmis_received(vcpu: usize) -> u64 {
    of(vcpu).nmis_received.load(Ordering::Acquire)
}

/// Records this vCPU's logical destination (called by `apic` when it
/// programs one).
pub(crate) fn set_logical(model: LogicalModel, id: u32) {
    current()
        .logical
        .store((model as u64) << 32 | u64::from(id), Ordering::Release);
}

/// vCPU `vcpu`'s logical model and ID as its `apic` setup programmed them
/// (xAPIC: `None` until it ran one; x2APIC: always, from its APIC ID).
pub fn logical_of(vcpu: usize) -> Option<(LogicalModel, u32)> {
    let raw = of(vcpu).logical.load(Ordering::Acquire);
    if let Some(m) = LogicalModel::from_raw((raw >> 32) as u32) {
        return Some((m, raw as u32));
    }
    match crate::settings::apic_mode() {
        ApicMode::X2apic => Some((
            LogicalModel::X2apicCluster,
            x2apic_logical_id(boot_info().apic_id(vcpu)),
        )),
        ApicMode::Xapic => None,
    }
}

/// Sample storage: this vCPU's scratch after [`PERCPU_RESERVED`]. Pushes
/// beyond the capacity are counted in `dropped`, not stored.
pub struct Samples {
    ptr: *mut u64,
    cap: usize,
    len: usize,
    dropped: u64,
}

impl Samples {
    /// Takes this vCPU's sample area. Panics if it was taken already.
    pub fn take() -> Samples {
        let pc = current();
        assert!(
            !pc.samples_taken.swap(true, Ordering::Relaxed),
            "sample area taken twice"
        );
        let boot = boot_info();
        let base = addr_of(boot, pc.vcpu as usize) + PERCPU_RESERVED;
        let cap = (boot.scratch_stride.saturating_sub(PERCPU_RESERVED) / 8) as usize;
        Samples {
            ptr: base as *mut u64,
            cap,
            len: 0,
            dropped: 0,
        }
    }

    /// Stores one sample.
    #[inline(always)]
    pub fn push(&mut self, v: u64) {
        if self.len < self.cap {
            // SAFETY: `len < cap` and the area is this vCPU's own scratch,
            // reachable only through this (unique) `Samples`.
            unsafe { self.ptr.add(self.len).write(v) };
            self.len += 1;
        } else {
            self.dropped += 1;
        }
    }

    /// Forgets the stored samples.
    pub fn clear(&mut self) {
        self.len = 0;
        self.dropped = 0;
    }

    /// Stored samples.
    pub fn as_slice(&self) -> &[u64] {
        // SAFETY: the first `len` entries were written by `push`.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Capacity in samples.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Samples that did not fit.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}
