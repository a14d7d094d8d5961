//! `ipivmm-hostile`: guests that misbehave on purpose, for ipivmm's test
//! suite (`tests/build.rs` builds this crate and the tests embed the ELF).
//! One case per `BootInfo::params[0]` ([`cases::Case`]), written with the
//! `ipivmm-guest` SDK like any payload; each case's doc says what it does.
#![no_std]
#![no_main]

mod cases;

use cases::*;
use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, Ordering};
use ipivmm_abi::{
    ControlMsg, GuestCounters, MsgKind, ABI_VERSION, CONTROL_MAGIC, MAX_SAMPLES_PER_MSG,
};
use ipivmm_guest::apic::{self, Apic};
use ipivmm_guest::{control, cpu, ipi, percpu, print, sync, BootInfo};

fn main(boot: &'static BootInfo, vcpu: usize) {
    let Some(case) = Case::from_raw(boot.params[0]) else {
        control::done(2, "ipivmm-hostile: unknown case in BootInfo::params[0]")
    };
    match case {
        Case::MaxSamples => max_samples(boot, vcpu),
        Case::PrintForever => print_forever(vcpu),
        Case::NmiThenHalts => event_then_halts(vcpu, Event::Nmi),
        Case::InitThenHalts => event_then_halts(vcpu, Event::Init),
        Case::InitSipiThenHalts => event_then_halts(vcpu, Event::InitSipi),
        Case::PanicEscapes if vcpu == 0 => control::panic(ESCAPE_TEXT),
        Case::DoneEscapes if vcpu == 0 => control::done(1, ESCAPE_TEXT),
        Case::PanicEscapes | Case::DoneEscapes => {}
        Case::PhaseIdReuse => phase_id_reuse(vcpu),
        Case::OrphanSamples => orphan_samples(vcpu),
        Case::HugeCounters => huge_counters(),
    }
}

ipivmm_guest::entry!(main);

/// Sends `n` samples of value `v` for phase `id` from a stack buffer.
fn samples_of(id: u32, v: u64, n: u64) {
    let buf = [v; 128];
    let mut left = n;
    while left > 0 {
        let k = left.min(buf.len() as u64);
        control::samples(id, &buf[..k as usize]);
        left -= k;
    }
}

/// [`Case::MaxSamples`].
fn max_samples(boot: &BootInfo, vcpu: usize) {
    if vcpu != 0 {
        return;
    }
    let messages = match boot.params[1] {
        0 => MAX_SAMPLES_MESSAGES,
        n => n,
    };
    control::phase_begin(0, MAX_SAMPLES_PHASE);
    control::phase_end(0);
    // One message's worth of u64::MAX in this vCPU's scratch, sent again
    // and again (the host copies it each time).
    let base = boot.scratch_base + percpu::PERCPU_RESERVED;
    let room = boot.scratch_stride.saturating_sub(percpu::PERCPU_RESERVED) / 8;
    let count = MAX_SAMPLES_PER_MSG.min(room);
    let ptr = base as *mut u64;
    // `rep stosq`: one emulated instruction per u64, not per byte.
    // SAFETY: vCPU 0's scratch after the SDK's per-vCPU block is free guest
    // RAM of `room >= count` u64s (BootInfo), identity-mapped, used by
    // nobody else (this case takes no `percpu::Samples`); DF is clear (ABI).
    unsafe {
        asm!("rep stosq", inout("rcx") count => _, inout("rdi") ptr => _, in("rax") u64::MAX,
            options(nostack, preserves_flags))
    };
    for _ in 0..messages {
        // The SDK's `samples` takes a slice; this one is `count` u64s above.
        // SAFETY: as above; initialised by the write_bytes.
        let values = unsafe { core::slice::from_raw_parts(ptr, count as usize) };
        control::samples(0, values);
    }
}

/// [`Case::PrintForever`].
fn print_forever(vcpu: usize) {
    if vcpu != 0 {
        cpu::halt_forever();
    }
    loop {
        print!("{PRINT_LINE}");
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Event {
    Nmi,
    Init,
    InitSipi,
}

/// vCPU 1 is about to halt.
static READY: AtomicBool = AtomicBool::new(false);

/// ICR low words (SDM 11.6.1): delivery mode in bits 10:8, level (14) and
/// trigger (15).
const ICR_NMI: u32 = 0b100 << 8 | 1 << 14;
const ICR_INIT_ASSERT: u32 = 0b101 << 8 | 1 << 14 | 1 << 15;
const ICR_INIT_DEASSERT: u32 = 0b101 << 8 | 1 << 15;
const ICR_STARTUP: u32 = 0b110 << 8 | 1 << 14;

// The start-up trampoline (real mode, copied to SIPI_VECTOR << 12 by vCPU
// 0): a 32-bit `out` of the GPA of the Done message vCPU 0 prepared, then
// halt. Kept in .rodata (it is data to copy, never run in place).
global_asm!(
    ".section .rodata.hostile_trampoline, \"a\"",
    ".global hostile_trampoline_start",
    ".global hostile_trampoline_end",
    "hostile_trampoline_start:",
    ".code16",
    "mov eax, {msg}",
    "mov dx, {port}",
    "out dx, eax",
    "2:",
    "hlt",
    "jmp 2b",
    ".code64",
    "hostile_trampoline_end:",
    msg = const SIPI_MSG_GPA,
    port = const ipivmm_abi::CONTROL_PORT,
);

extern "C" {
    static hostile_trampoline_start: u8;
    static hostile_trampoline_end: u8;
}

/// Puts the trampoline at `SIPI_VECTOR << 12` and vCPU 1's Done message
/// (and its text) at [`SIPI_MSG_GPA`].
fn prepare_startup() {
    let start = core::ptr::addr_of!(hostile_trampoline_start);
    let end = core::ptr::addr_of!(hostile_trampoline_end);
    let len = end as usize - start as usize;
    let dest = (u64::from(SIPI_VECTOR) << 12) as *mut u8;
    let text = (SIPI_MSG_GPA + 128) as *mut u8;
    let msg = ControlMsg {
        magic: CONTROL_MAGIC,
        version: ABI_VERSION,
        kind: MsgKind::Done as u16,
        vcpu: 1,
        phase: 0,
        arg: [0, text as u64, SIPI_DONE_TEXT.len() as u64, 0],
        counters: GuestCounters::default(),
        reply: u64::MAX,
        reserved: 0,
    };
    // SAFETY: SIPI_VECTOR << 12 and SIPI_MSG_GPA are free, identity-mapped
    // guest RAM below the payload (above the host's system tables, see
    // vmm/src/vm/layout.rs), used by nothing else; the trampoline is
    // `len` bytes of our own image.
    unsafe {
        core::ptr::copy_nonoverlapping(start, dest, len);
        core::ptr::copy_nonoverlapping(SIPI_DONE_TEXT.as_ptr(), text, SIPI_DONE_TEXT.len());
        core::ptr::write_volatile(SIPI_MSG_GPA as *mut ControlMsg, msg);
    }
}

/// [`Case::NmiThenHalts`], [`Case::InitThenHalts`], [`Case::InitSipiThenHalts`].
fn event_then_halts(vcpu: usize, event: Event) {
    match vcpu {
        0 => {
            if event == Event::InitSipi {
                prepare_startup();
            }
            sync::wait_until("vCPU 1 to be ready", 10, || READY.load(Ordering::Acquire));
            let a = apic::current();
            let target = ipi::apic_id_of(1);
            match event {
                Event::Nmi => a.write_icr(target, ICR_NMI),
                Event::Init | Event::InitSipi => {
                    a.write_icr(target, ICR_INIT_ASSERT);
                    a.write_icr(target, ICR_INIT_DEASSERT);
                }
            }
            if event == Event::InitSipi {
                a.write_icr(target, ICR_STARTUP | u32::from(SIPI_VECTOR));
            }
        }
        1 => {
            READY.store(true, Ordering::Release);
            for _ in 0..HALTS {
                // SAFETY: halts this vCPU with interrupts masked; only an
                // NMI, INIT or SMI wakes it (or, wrongly, the host).
                unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
            }
            cpu::enable_interrupts();
        }
        _ => {}
    }
}

/// [`Case::PhaseIdReuse`].
fn phase_id_reuse(vcpu: usize) {
    let run = |i: u64, id: u32, name: &str| {
        control::phase_begin(id, name);
        samples_of(id, reuse_value(i), REUSE_SAMPLES);
        control::phase_end(id);
        control::record(id, "which", i);
    };
    match vcpu {
        0 => {
            run(0, 0, REUSE_NAMES[0]);
            run(1, 0, REUSE_NAMES[1]);
            run(3, 1, REUSE_SAME);
            run(4, 1, REUSE_SAME);
        }
        1 => run(2, 0, REUSE_NAMES[2]),
        _ => {}
    }
}

/// [`Case::OrphanSamples`].
fn orphan_samples(vcpu: usize) {
    if vcpu != 0 {
        return;
    }
    control::phase_begin(0, "kept");
    samples_of(0, 500, 10);
    control::phase_end(0);
    samples_of(ORPHAN_NEVER_BEGAN, 600, ORPHAN_SAMPLES);
    control::phase_begin(ORPHAN_NEVER_ENDED, "never-ends");
    samples_of(ORPHAN_NEVER_ENDED, 700, ORPHAN_SAMPLES);
    control::done(0, "left phase 8 open")
}

/// [`Case::HugeCounters`].
fn huge_counters() {
    control::phase_begin(0, "measure");
    let c = &percpu::current().counters;
    for counter in [&c.icr_writes, &c.ipis_sent, &c.ipis_received, &c.eois] {
        percpu::bump(counter, HUGE_COUNTER);
    }
    samples_of(0, 1000, 10);
    control::phase_end(0);
}
