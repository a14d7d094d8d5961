//! exit-roundtrip: an example ipivmm payload that measures what one VM-exit
//! round trip costs the guest, per kind of exit, instead of IPIs.
//!
//! Every vCPU runs the same four phases; a sample is the TSC cycles around
//! one instruction (`lfence; rdtsc; lfence` on both sides):
//!
//! | id | phase | instruction | where KVM handles it |
//! |---:|---|---|---|
//! | 0 | `baseline` | nothing | the cost of the two TSC reads; subtract it |
//! | 1 | `cpuid` | `cpuid` leaf 0 | in the kernel (CPUID always exits) |
//! | 2 | `pio` | `in al, dx` from a port no device claims | in ipivmm: a userspace exit (KVM_EXIT_IO) |
//! | 3 | `rdmsr` | `rdmsr` of IA32_APIC_BASE | in the kernel |
//!
//! `BootInfo::iterations` samples per phase and vCPU are sent to the host;
//! `BootInfo::warmup` iterations run before each phase's `PhaseBegin` and are
//! not recorded. `--param N` (`BootInfo::params[0]`) picks the port of the
//! `pio` phase (default 0x80). Records: `cpuid` `max_leaf`; `pio` `port` and
//! `value` (what the last `in` read: 0xff from an unclaimed port); `rdmsr`
//! `msr` and `value`; every phase `samples_dropped` when the scratch area was
//! too small.
//!
//! Build: `cd examples/exit-roundtrip && cargo build --release` (see
//! docs/custom-payloads.md).
#![no_std]
#![no_main]

use core::hint::black_box;
use ipivmm_guest::percpu::Samples;
use ipivmm_guest::sync::barrier;
use ipivmm_guest::{control, cpu, println, tsc, BootInfo};

/// Phase ids (the same on every vCPU, as the ABI asks).
const BASELINE: u32 = 0;
const CPUID: u32 = 1;
const PIO: u32 = 2;
const RDMSR: u32 = 3;

/// Port of the `pio` phase when `params[0]` is 0: the legacy POST port,
/// which no ipivmm device claims (they read all-ones and exit to userspace).
const DEFAULT_PORT: u16 = 0x80;

/// An MSR KVM emulates in the kernel, present on every x86-64 CPU.
const MSR: u32 = cpu::MSR_APIC_BASE;

fn main(boot: &'static BootInfo, vcpu: usize) {
    let port = match boot.params[0] {
        0 => DEFAULT_PORT,
        p => p as u16,
    };
    if vcpu == 0 {
        println!(
            "exit-roundtrip: {} vCPUs, {} iterations + {} warm-up per phase, port {port:#x}",
            boot.vcpu_count, boot.iterations, boot.warmup
        );
    }
    let mut samples = Samples::take();

    measure(boot, &mut samples, BASELINE, "baseline", || {});

    let mut max_leaf = 0;
    measure(boot, &mut samples, CPUID, "cpuid", || {
        max_leaf = black_box(cpu::cpuid(0, 0)).eax;
    });
    control::record(CPUID, "max_leaf", u64::from(max_leaf));

    let mut value = 0;
    measure(boot, &mut samples, PIO, "pio", || value = cpu::inb(port));
    control::record(PIO, "port", u64::from(port));
    control::record(PIO, "value", u64::from(value));

    let mut msr = 0;
    // SAFETY: IA32_APIC_BASE exists on every x86-64 CPU, and reading it has
    // no side effect.
    measure(boot, &mut samples, RDMSR, "rdmsr", || {
        msr = unsafe { cpu::rdmsr(MSR) }
    });
    control::record(RDMSR, "msr", u64::from(MSR));
    control::record(RDMSR, "value", msr);

    if vcpu == 0 {
        println!("exit-roundtrip: done");
    }
} // returning sends Done(0, "ok")

/// Runs `op` `warmup` times, then inside phase `id` `iterations` times with
/// a TSC read on both sides, and sends the samples after the phase ended (so
/// their control-port exit is not in the window).
fn measure(boot: &BootInfo, samples: &mut Samples, id: u32, name: &str, mut op: impl FnMut()) {
    for _ in 0..boot.warmup {
        op();
    }
    barrier(); // every vCPU is warm
    control::phase_begin(id, name);
    for _ in 0..boot.iterations {
        let t0 = tsc::now();
        op();
        let t1 = tsc::now();
        samples.push(t1.wrapping_sub(t0));
    }
    control::phase_end(id);
    control::samples(id, samples.as_slice());
    if samples.dropped() != 0 {
        control::record(id, "samples_dropped", samples.dropped());
    }
    samples.clear();
    barrier(); // every vCPU left the phase before the next begins
}

ipivmm_guest::entry!(main);
