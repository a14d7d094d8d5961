//! Thin wrappers over the privileged and timing instructions the SDK uses.
//! Every one of them is handled by KVM's instruction emulator (the guest runs
//! emulated under the software `kvm_pvm` backend), so no SSE, no fences other
//! than the ones `tsc` documents, nothing exotic.

use core::arch::asm;

/// IA32_APIC_BASE.
pub const MSR_APIC_BASE: u32 = 0x1b;
/// IA32_GS_BASE: the SDK points it at the vCPU's [`crate::percpu::PerCpu`].
pub const MSR_GS_BASE: u32 = 0xc000_0101;

/// Result of `cpuid`.
#[derive(Clone, Copy, Debug)]
pub struct Cpuid {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// `cpuid` with `leaf`/`subleaf`.
#[allow(unused_unsafe)]
pub fn cpuid(leaf: u32, subleaf: u32) -> Cpuid {
    // SAFETY: cpuid exists on every x86-64 CPU and has no memory effects;
    // core's wrapper takes care of the reserved rbx.
    let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
    Cpuid {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// Reads MSR `msr`.
///
/// # Safety
/// `msr` must exist (else #GP) and reading it must have no side effect the
/// caller did not intend.
pub unsafe fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees the MSR exists.
    unsafe {
        asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nostack, preserves_flags))
    };
    (hi as u64) << 32 | lo as u64
}

/// Writes MSR `msr`.
///
/// # Safety
/// `msr` must exist and `value` must not break the SDK's invariants (GS base,
/// APIC mode).
pub unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller guarantees the write is valid; wrmsr may have any
    // side effect, so no `nomem`.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32, options(nostack, preserves_flags))
    };
}

/// `out dx, al`.
pub fn outb(port: u16, value: u8) {
    // SAFETY: port I/O traps to the host; the SDK only uses the serial and
    // control ports, whose writes have no effect on guest memory except
    // what the ABI documents (the control reply), hence no `nomem`.
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nostack, preserves_flags)) };
}

/// `in al, dx`.
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: a port read has no effect on guest memory.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") v, options(nomem, nostack, preserves_flags))
    };
    v
}

/// `out dx, eax`: the control port write. The host reads and writes guest
/// memory (the message and its reply) during this exit, so it is a full
/// compiler memory barrier.
pub fn outl(port: u16, value: u32) {
    // SAFETY: see above; the host only touches memory the ABI names.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nostack, preserves_flags))
    };
}

/// `pause`: spin-loop hint.
#[inline(always)]
pub fn pause() {
    core::hint::spin_loop();
}

/// `sti`: enables interrupts. Safe because the SDK runtime loads the IDT
/// before any user code runs.
#[inline(always)]
pub fn enable_interrupts() {
    // SAFETY: the IDT is loaded (runtime invariant); handlers preserve all state.
    unsafe { asm!("sti", options(nomem, nostack)) };
}

/// `mfence; lfence`: every earlier store is globally visible before the next
/// instruction (a non-serializing WRMSR such as an x2APIC ICR write) runs.
#[inline(always)]
pub fn store_fence_before_wrmsr() {
    // SAFETY: fences only order memory accesses; no state changes.
    unsafe { asm!("mfence", "lfence", options(nostack, preserves_flags)) };
}

/// `cli`: disables interrupts.
#[inline(always)]
pub fn disable_interrupts() {
    // SAFETY: masking interrupts has no memory effect.
    unsafe { asm!("cli", options(nomem, nostack)) };
}

/// `sti; hlt`: enables interrupts and halts until the next one; the `sti`
/// shadow guarantees no interrupt slips in between. Returns after the
/// handler of the waking interrupt ran, with interrupts enabled.
#[inline(always)]
pub fn enable_interrupts_and_halt() {
    // SAFETY: as `enable_interrupts`; the handler may change memory, hence no `nomem`.
    unsafe { asm!("sti", "hlt", options(nostack)) };
}

/// Halts forever with interrupts disabled (the host does not resume a vCPU
/// after Done/Panic; this is the backstop if it does).
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: cli; hlt only stops this vCPU.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}

/// True if RFLAGS.IF is set.
pub fn interrupts_enabled() -> bool {
    let flags: u64;
    // SAFETY: pushfq/pop only touches the stack slot it pushes.
    unsafe { asm!("pushfq", "pop {}", out(reg) flags, options(nomem, preserves_flags)) };
    flags & (1 << 9) != 0
}

/// CR2 (faulting address of the last page fault).
pub fn cr2() -> u64 {
    let v: u64;
    // SAFETY: reading CR2 has no side effect (CPL 0).
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// The GDTR: base of this vCPU's GDT (`sgdt`).
pub fn gdt_base() -> u64 {
    #[repr(C, packed)]
    struct Gdtr {
        limit: u16,
        base: u64,
    }
    let mut gdtr = Gdtr { limit: 0, base: 0 };
    // SAFETY: `sgdt` stores 10 bytes into `gdtr`, which is 10 bytes.
    unsafe {
        asm!("sgdt [{}]", in(reg) core::ptr::addr_of_mut!(gdtr), options(nostack, preserves_flags))
    };
    gdtr.base
}

/// The task register's selector (`str`).
pub fn task_register() -> u16 {
    let sel: u16;
    // SAFETY: `str` only reads TR into a register.
    unsafe { asm!("str {:x}", out(reg) sel, options(nomem, nostack, preserves_flags)) };
    sel
}
