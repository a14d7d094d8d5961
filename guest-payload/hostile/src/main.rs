//! `ipivmm-hostile`: guests that misbehave on purpose, for ipivmm's test
//! suite (`tests/build.rs` builds this crate and the tests embed the ELF).
//! One case per `BootInfo::params[0]` ([`cases::Case`]), written with the
//! `ipivmm-guest` SDK like any payload; each case's doc says what it does.
#![no_std]
#![no_main]

mod cases;

use cases::*;
use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use ipivmm_abi::ApicMode;
use ipivmm_abi::{
    ControlMsg, GuestCounters, MsgKind, ABI_VERSION, CONTROL_MAGIC, MAX_SAMPLES_PER_MSG,
};
use ipivmm_guest::ipi::{Icr, Ipi, LogicalModel, VcpuSet};
use ipivmm_guest::{apic, control, cpu, idt, ipi, percpu, print, runtime, sync, BootInfo};

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
        Case::SdkSend => sdk_send(boot, vcpu),
        Case::NmiInIpiHandler => nmi_in_ipi_handler(vcpu),
        Case::InitSelf if vcpu == 0 => {
            ipi::send(Icr::init().physical(ipi::apic_id_of(0)));
            control::done(0, "INIT to self returned")
        }
        Case::InitSelf => {}
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
    // vmm/src/arch/layout.rs), used by nothing else; the trampoline is
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
            let target = ipi::apic_id_of(1);
            // No phase around the NMI: vCPU 1's panic may end the run
            // before a PhaseEnd.
            if event != Event::Nmi {
                control::phase_begin(0, EVENT_PHASE);
            }
            match event {
                Event::Nmi => ipi::send(Icr::nmi().physical(target)),
                Event::Init | Event::InitSipi => {
                    ipi::send(Icr::init().physical(target));
                    ipi::send(Icr::init_deassert().physical(target));
                }
            }
            if event == Event::InitSipi {
                // SAFETY: prepare_startup put the trampoline at SIPI_VECTOR
                // << 12; it only sends vCPU 1's Done and halts.
                match unsafe { Ipi::new_startup(Icr::startup(SIPI_VECTOR).physical(target)) } {
                    Ok(sipi) => sipi.send(),
                    Err(e) => panic!("start-up IPI refused: {e}"),
                }
            }
            if event != Event::Nmi {
                control::phase_end(0);
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

/// [`Case::SdkSend`].
fn sdk_send(boot: &BootInfo, vcpu: usize) {
    let Some(kind) = SdkSend::from_raw(boot.params[1]) else {
        control::done(2, "ipivmm-hostile: unknown SdkSend in BootInfo::params[1]")
    };
    let model = match (apic::mode(), boot.params[2]) {
        (ApicMode::Xapic, 1) => LogicalModel::XapicCluster,
        (mode, _) => LogicalModel::default_for(mode),
    };
    if kind.is_logical() && apic::setup_logical(model).is_none() {
        panic!("vCPU {vcpu} has no logical ID in {model:?}");
    }
    if kind.is_nmi() {
        idt::set_nmi_hook(|_| {});
    }
    let nmis = percpu::nmis_received(vcpu);
    control::phase_begin_synced(0, SDK_PHASE);
    let (icrs, targets) = if vcpu == 0 {
        sdk_rounds(kind, boot.vcpu_count as usize)
    } else {
        (0, 0)
    };
    control::phase_end_synced(0);
    control::record(0, "nmis_received", percpu::nmis_received(vcpu) - nmis);
    if vcpu == 0 {
        control::record(0, "icrs", icrs);
        control::record(0, "targets", targets);
    }
}

/// The IPIs (NMIs) all vCPUs have taken.
fn taken(n: usize, nmi: bool) -> u64 {
    (0..n)
        .map(|v| {
            if nmi {
                percpu::nmis_received(v)
            } else {
                percpu::received(v)
            }
        })
        .sum()
}

/// vCPU 0's rounds of [`Case::SdkSend`]; returns (ICRs, targets) per round.
fn sdk_rounds(kind: SdkSend, n: usize) -> (u64, u64) {
    let v = runtime::ipi_vector();
    let base = if kind.is_nmi() {
        Icr::nmi()
    } else if kind.is_lowest_priority() {
        Icr::lowest_priority(v)
    } else {
        Icr::fixed(v)
    };
    let others = VcpuSet::all_but(0);
    let mut list: [Option<Icr>; 64] = [None; 64];
    let mut len = 0;
    let mut push = |icr: Icr| {
        if len < list.len() {
            list[len] = Some(icr);
            len += 1;
        }
    };
    match kind {
        SdkSend::FixedPhysical | SdkSend::NmiPhysical => others
            .iter()
            .for_each(|t| push(base.physical(ipi::apic_id_of(t)))),
        SdkSend::LowestPriorityPhysical => push(base.physical(ipi::apic_id_of(1))),
        SdkSend::FixedLogical | SdkSend::LowestPriorityLogical | SdkSend::NmiLogical => {
            let mut logical = [0u32; 64];
            let mut groups = 0;
            ipi::for_each_logical_group(
                &others,
                |dest, _| {
                    if groups < logical.len() {
                        logical[groups] = dest;
                        groups += 1;
                    }
                },
                |t| panic!("vCPU {t} has no logical ID"),
            );
            logical[..groups]
                .iter()
                .for_each(|&d| push(base.logical(d)));
        }
        SdkSend::FixedSelf => push(base.self_only()),
        SdkSend::FixedAll => push(base.all_including_self()),
        SdkSend::FixedAllButSelf | SdkSend::LowestPriorityAllButSelf | SdkSend::NmiAllButSelf => {
            push(base.all_but_self())
        }
    }
    let mut ipis = [None; 64];
    let mut per_round = 0;
    for (slot, icr) in ipis.iter_mut().zip(list[..len].iter().flatten()) {
        let ipi = Ipi::new(*icr).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        per_round += ipi.targets();
        *slot = Some(ipi);
    }
    for round in 0..SDK_ROUNDS {
        let before = taken(n, kind.is_nmi());
        ipis[..len].iter().flatten().for_each(Ipi::send);
        sync::wait_until("the round's IPIs to be taken", 30, || {
            taken(n, kind.is_nmi()) - before >= per_round
        });
        let _ = round;
    }
    (len as u64, per_round)
}

/// [`Case::NmiInIpiHandler`]: vCPU 1's IPI hook entries and returns.
static HOOK_ENTERED: AtomicU64 = AtomicU64::new(0);
static HOOK_LEFT: AtomicU64 = AtomicU64::new(0);

/// vCPU 1's IPI hook of [`Case::NmiInIpiHandler`]: waits for an NMI.
fn wait_for_nmi_in_handler(vector: u8) {
    let me = percpu::current().vcpu as usize;
    if me != 1 || vector != runtime::ipi_vector() {
        return;
    }
    let before = percpu::nmis_received(me);
    HOOK_ENTERED.fetch_add(1, Ordering::Release);
    sync::wait_until("an NMI inside the IPI handler", 10, || {
        percpu::nmis_received(me) != before
    });
    HOOK_LEFT.fetch_add(1, Ordering::Release);
}

/// [`Case::NmiInIpiHandler`].
fn nmi_in_ipi_handler(vcpu: usize) {
    idt::set_nmi_hook(|_| {});
    idt::set_ipi_hook(wait_for_nmi_in_handler);
    let nmis = percpu::nmis_received(vcpu);
    control::phase_begin_synced(0, SDK_PHASE);
    if vcpu == 0 {
        let target = ipi::apic_id_of(1);
        let refused = |e: ipi::SendError| -> Ipi { panic!("{e}") };
        let fixed =
            Ipi::new(Icr::fixed(runtime::ipi_vector()).physical(target)).unwrap_or_else(refused);
        let nmi = Ipi::new(Icr::nmi().physical(target)).unwrap_or_else(refused);
        for round in 1..=NMI_NEST_ROUNDS {
            fixed.send();
            sync::wait_until("vCPU 1's IPI hook", 10, || {
                HOOK_ENTERED.load(Ordering::Acquire) == round
            });
            nmi.send();
            sync::wait_until("vCPU 1's IPI hook to return", 10, || {
                HOOK_LEFT.load(Ordering::Acquire) == round
            });
        }
    }
    control::phase_end_synced(0);
    control::record(0, "nmis_received", percpu::nmis_received(vcpu) - nmis);
    if vcpu == 0 {
        control::record(0, "icrs", 2);
        control::record(0, "targets", 2);
    }
}
