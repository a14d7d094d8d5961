//! One IDT shared by all vCPUs (same contents everywhere; each vCPU loads it).
//! Every gate is a 64-bit interrupt gate (IF cleared on entry) running on
//! IST1, the per-vCPU interrupt stack the host points the TSS at, except
//! the NMI's, which runs on IST2 (the lower half of that stack, see
//! [`NMI_STACK_BYTES`]): an NMI can arrive inside another handler, whose
//! frame a second entry at the IST1 top would overwrite. A handler finds
//! its vCPU through GS base, so the shared handlers are per-vCPU reentrant.
//! Vectors 0..32 report the exception as a Panic message, except the NMI
//! (vector 2) once [`set_nmi_hook`] registered a hook: it is counted and
//! runs the hook (no EOI: an NMI is not in the ISR); [`SPURIOUS_VECTOR`] is
//! counted and not EOI'd; every other vector counts as an IPI, runs the
//! registered hook, and is EOI'd.

use crate::apic::{self, Apic};
use crate::cpu;
use crate::{percpu, percpu::bump};
use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};
use ipivmm_abi::{CODE64_SELECTOR, INTERRUPT_IST, SPURIOUS_VECTOR};

/// The NMI's vector.
pub const NMI_VECTOR: u8 = 2;
/// IST index of the NMI gate.
pub const NMI_IST: u8 = 2;
/// Bytes below the IST1 top where IST2 (the NMI stack) starts: the host's
/// 16 KiB interrupt stack (docs/guest-abi.md) is split in two halves, the
/// upper for every other handler, the lower for NMIs.
pub const NMI_STACK_BYTES: u64 = 8 << 10;

/// Saved state of the interrupted code, as the stubs below push it.
#[repr(C)]
#[derive(Debug)]
pub struct InterruptFrame {
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rax: u64,
    /// Vector number (pushed by the stub).
    pub vector: u64,
    /// CPU error code, or 0 for vectors without one.
    pub error_code: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

// 256 stubs, 16 bytes apart from `ipivmm_isr_stubs`: push a dummy error code
// where the CPU pushes none, push the vector, join the common path. The
// common path saves the caller-saved registers (callee-saved ones are kept by
// the Rust dispatcher; there is no SSE state), keeps the stack 16-byte
// aligned for the call (CPU-aligned IST top - 7 qwords - 9 registers), and
// `iretq`s. AT&T syntax for `$imm` pushes.
global_asm!(
    ".section .text.ipivmm_isr, \"ax\"",
    ".p2align 4",
    ".global ipivmm_isr_stubs",
    "ipivmm_isr_stubs:",
    ".irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117,118,119,120,121,122,123,124,125,126,127,128,129,130,131,132,133,134,135,136,137,138,139,140,141,142,143,144,145,146,147,148,149,150,151,152,153,154,155,156,157,158,159,160,161,162,163,164,165,166,167,168,169,170,171,172,173,174,175,176,177,178,179,180,181,182,183,184,185,186,187,188,189,190,191,192,193,194,195,196,197,198,199,200,201,202,203,204,205,206,207,208,209,210,211,212,213,214,215,216,217,218,219,220,221,222,223,224,225,226,227,228,229,230,231,232,233,234,235,236,237,238,239,240,241,242,243,244,245,246,247,248,249,250,251,252,253,254,255",
    ".p2align 4",
    ".if (\\v == 8) || (\\v == 10) || (\\v == 11) || (\\v == 12) || (\\v == 13) || (\\v == 14) || (\\v == 17) || (\\v == 21) || (\\v == 29) || (\\v == 30)",
    ".else",
    "pushq $0",
    ".endif",
    "pushq $\\v",
    "jmp ipivmm_isr_common",
    ".endr",
    ".p2align 4",
    "ipivmm_isr_common:",
    "cld",
    "pushq %rax",
    "pushq %rcx",
    "pushq %rdx",
    "pushq %rsi",
    "pushq %rdi",
    "pushq %r8",
    "pushq %r9",
    "pushq %r10",
    "pushq %r11",
    "movq %rsp, %rdi",
    "call {dispatch}",
    "popq %r11",
    "popq %r10",
    "popq %r9",
    "popq %r8",
    "popq %rdi",
    "popq %rsi",
    "popq %rdx",
    "popq %rcx",
    "popq %rax",
    "addq $16, %rsp",
    "iretq",
    dispatch = sym dispatch,
    options(att_syntax)
);

extern "C" {
    static ipivmm_isr_stubs: [u8; 256 * 16];
}

/// One 16-byte IDT gate.
#[repr(C)]
#[derive(Clone, Copy)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

/// Present, DPL 0, 64-bit interrupt gate.
const INTERRUPT_GATE: u8 = 0x8e;

impl Gate {
    const EMPTY: Gate = Gate {
        offset_low: 0,
        selector: 0,
        ist: 0,
        type_attr: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    };

    fn new(handler: u64, ist: u8) -> Gate {
        Gate {
            offset_low: handler as u16,
            selector: CODE64_SELECTOR,
            ist,
            type_attr: INTERRUPT_GATE,
            offset_mid: (handler >> 16) as u16,
            offset_high: (handler >> 32) as u32,
            reserved: 0,
        }
    }
}

#[repr(C, align(16))]
struct Idt(UnsafeCell<[Gate; 256]>);

// SAFETY: written once under `BUILT` (a `Once`) before any vCPU loads it,
// read-only afterwards.
unsafe impl Sync for Idt {}

static IDT: Idt = Idt(UnsafeCell::new([Gate::EMPTY; 256]));
static BUILT: crate::sync::Once = crate::sync::Once::new();

/// Fills the IDT (first caller) and loads it on this vCPU.
pub(crate) fn init_and_load() {
    BUILT.call(|| {
        // Only the address of the stubs is taken (no read).
        let base = core::ptr::addr_of!(ipivmm_isr_stubs) as u64;
        // SAFETY: inside `Once::call`: the only writer, and nobody loads the
        // IDT before `call` returns.
        let gates = unsafe { &mut *IDT.0.get() };
        for (v, gate) in gates.iter_mut().enumerate() {
            let ist = if v == NMI_VECTOR as usize {
                NMI_IST
            } else {
                INTERRUPT_IST
            };
            *gate = Gate::new(base + 16 * v as u64, ist);
        }
    });
    install_nmi_stack();
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let ptr = Pointer {
        limit: (core::mem::size_of::<[Gate; 256]>() - 1) as u16,
        base: IDT.0.get() as u64,
    };
    // SAFETY: the IDT is complete and lives forever; every gate points at a stub.
    unsafe { asm!("lidt [{}]", in(reg) &ptr, options(readonly, nostack, preserves_flags)) };
}

/// Points this vCPU's TSS IST2 at [`NMI_STACK_BYTES`] below its IST1 (the
/// TSS is found through TR and the GDT: its address is the host's). Runs
/// before `lidt`, so no NMI can use the gate before its stack exists.
fn install_nmi_stack() {
    // 64-bit TSS descriptor (SDM 8.2.3): base 15:0 at +2, 23:16 at +4,
    // 31:24 at +7, 63:32 at +8. 64-bit TSS (SDM 8.7): IST1 at +0x24, IST2
    // at +0x2c (both 4-byte aligned only).
    let desc = cpu::gdt_base() + u64::from(cpu::task_register() & !7);
    // SAFETY: TR selects this vCPU's 16-byte TSS descriptor in its GDT,
    // identity-mapped host-built tables (entry convention); the TSS it
    // names is this vCPU's own, and only IST2, which nothing else uses, is
    // written. Unaligned accesses, as the layout requires.
    unsafe {
        let d = desc as *const u8;
        let base = u64::from(core::ptr::read_unaligned(d.add(2) as *const u16))
            | u64::from(*d.add(4)) << 16
            | u64::from(*d.add(7)) << 24
            | u64::from(core::ptr::read_unaligned(d.add(8) as *const u32)) << 32;
        let ist1 = core::ptr::read_unaligned((base + 0x24) as *const u64);
        if ist1 < NMI_STACK_BYTES {
            crate::control::panic("TSS IST1 is unset: no interrupt stack to split for NMIs");
        }
        core::ptr::write_unaligned((base + 0x2c) as *mut u64, ist1 - NMI_STACK_BYTES);
    }
}

/// Called in every IPI handler (any vector but exceptions and spurious) after
/// the counters are bumped and before the EOI. 0 = none.
static HOOK: AtomicUsize = AtomicUsize::new(0);

/// Registers `hook(vector)` to run in the interrupt handler of this and every
/// other vCPU (it must be reentrant per vCPU: use [`percpu::current`]).
pub fn set_ipi_hook(hook: fn(u8)) {
    HOOK.store(hook as usize, Ordering::Release);
}

/// Called in the NMI handler once set. 0 = none: an NMI is an exception.
static NMI_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Registers `hook(frame)` to run in the NMI handler of this and every
/// other vCPU, with the interrupted state. Without a hook an NMI fails the
/// run (`exception 2 (NMI)`), as any unexpected exception. Each NMI taken
/// with a hook adds 1 to this vCPU's `handler_entries` and to
/// [`percpu::nmis_received`] (the SDK's own count: the ABI's counters have
/// no slot for it); no EOI. The hook runs with interrupts off and further
/// NMIs blocked until it returns, on the NMI stack ([`NMI_STACK_BYTES`]),
/// possibly in the middle of other code of this vCPU, another handler
/// included: it must not take a lock that code may hold.
pub fn set_nmi_hook(hook: fn(&InterruptFrame)) {
    NMI_HOOK.store(hook as usize, Ordering::Release);
}

extern "C" fn dispatch(frame: &mut InterruptFrame) {
    let vector = frame.vector as u8;
    if vector >= 32 {
        resume_after_hlt(frame);
    }
    let pc = percpu::current();
    let c = &pc.counters;
    if vector == NMI_VECTOR {
        let hook = NMI_HOOK.load(Ordering::Acquire);
        if hook != 0 {
            // An NMI is not held back by `sti`'s shadow on every CPU (SDM
            // vol. 2, STI: "may be blocked"), so one can come with RIP at
            // the `hlt` of `sti; hlt` on any host: as for interrupts.
            resume_after_hlt(frame);
            bump(&c.handler_entries, 1);
            bump(&pc.nmis_received, 1);
            // SAFETY: NMI_HOOK only ever holds 0 or a `fn(&InterruptFrame)`
            // stored by `set_nmi_hook`.
            let f = unsafe { core::mem::transmute::<usize, fn(&InterruptFrame)>(hook) };
            f(frame);
            return;
        }
    }
    if vector == ipivmm_abi::barrier_vector(crate::settings::ipi_vector())
        && percpu::boot_info().flags & ipivmm_abi::BOOT_FLAG_HALTING_BARRIERS != 0
    {
        // A barrier wake-up (sync::Barrier::wait_with): not a workload IPI,
        // not counted.
        apic::current().eoi();
        return;
    }
    bump(&c.handler_entries, 1);
    if vector < 32 {
        exception(frame);
    }
    if vector == SPURIOUS_VECTOR {
        // No EOI for a spurious interrupt (SDM 11.9).
        bump(&c.spurious, 1);
        return;
    }
    if vector == crate::settings::ipi_vector() {
        // An injected delay (`--inject-delay-cycles`): before the receipt
        // is counted, so a sender waiting for it sees every cycle of it.
        let delay = percpu::boot_info().ipi_delay_cycles;
        if delay > 0 {
            let start = crate::tsc::now_plain();
            while crate::tsc::now_plain().wrapping_sub(start) < delay {
                core::hint::spin_loop();
            }
        }
        bump(&c.ipis_received, 1);
    }
    let hook = HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: HOOK only ever holds 0 or a `fn(u8)` stored by `set_ipi_hook`.
        let f: fn(u8) = unsafe { core::mem::transmute::<usize, fn(u8)>(hook) };
        f(vector);
    }
    apic::current().eoi();
    bump(&c.eois, 1);
}

/// An interrupt taken with RIP at a `hlt` was taken before that `hlt` ran:
/// inside the one-instruction interrupt shadow of the `sti` before it
/// (`sti; hlt` in `cpu::enable_interrupts_and_halt`), which the
/// architecture forbids (SDM vol. 2, STI) but the lab's nested kvm_amd under
/// QEMU TCG did (twice in 144 runs; docs/counters.md, "The halted-target
/// hang"). Returning to the `hlt` would halt with the wake-up already
/// consumed: the sender waits for a halt that never comes. So the handler
/// returns after the `hlt`, as a CPU that honoured the shadow would have.
/// Hooked NMIs do the same (a wait loop around `sti; hlt` re-checks its
/// condition, so skipping one `hlt` is never wrong).
fn resume_after_hlt(frame: &mut InterruptFrame) {
    const HLT: u8 = 0xf4;
    // SAFETY: `frame.rip` is the interrupted instruction of this payload's
    // ring-0 code, mapped and readable.
    if unsafe { core::ptr::read_volatile(frame.rip as *const u8) } == HLT {
        frame.rip += 1;
    }
}

const EXCEPTION_NAMES: [&str; 32] = [
    "#DE divide error",
    "#DB debug",
    "NMI",
    "#BP breakpoint",
    "#OF overflow",
    "#BR bound range",
    "#UD invalid opcode",
    "#NM device not available",
    "#DF double fault",
    "coprocessor overrun",
    "#TS invalid TSS",
    "#NP segment not present",
    "#SS stack fault",
    "#GP general protection",
    "#PF page fault",
    "reserved 15",
    "#MF x87 error",
    "#AC alignment check",
    "#MC machine check",
    "#XM SIMD error",
    "#VE virtualization",
    "#CP control protection",
    "reserved 22",
    "reserved 23",
    "reserved 24",
    "reserved 25",
    "reserved 26",
    "reserved 27",
    "#HV hypervisor injection",
    "#VC VMM communication",
    "#SX security",
    "reserved 31",
];

/// Reports a CPU exception through a Panic message; never returns.
fn exception(frame: &InterruptFrame) -> ! {
    let v = frame.vector as usize;
    let cr2 = if v == 14 { crate::cpu::cr2() } else { 0 };
    crate::panic::report(format_args!(
        "exception {v} ({}) at rip={:#x} error_code={:#x} cr2={:#x} rsp={:#x} rflags={:#x} cs={:#x}",
        EXCEPTION_NAMES[v], frame.rip, frame.error_code, cr2, frame.rsp, frame.rflags, frame.cs
    ))
}
