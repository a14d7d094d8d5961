//! TSC timing. [`now`] is `lfence; rdtsc; lfence`: the read waits for every
//! earlier instruction and no later one starts before it, so a sample brackets
//! exactly the code between two reads. (`lfence` works under the software
//! `kvm_pvm` backend too: checked with a ping-pong run.) [`now_plain`] is a
//! bare `rdtsc` for timeouts, where order does not matter.

use core::arch::asm;

/// `lfence; rdtsc; lfence`: an ordered TSC read, for samples.
#[inline(always)]
pub fn now() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: fences and a counter read; no memory effect. Not `nomem`, so
    // the compiler keeps it in program order with surrounding memory accesses.
    unsafe {
        asm!("lfence", "rdtsc", "lfence", out("eax") lo, out("edx") hi, options(nostack, preserves_flags))
    };
    (hi as u64) << 32 | lo as u64
}

/// `rdtsc` alone: cheap, may be reordered with nearby instructions.
#[inline(always)]
pub fn now_plain() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: a counter read; no memory effect.
    unsafe { asm!("rdtsc", out("eax") lo, out("edx") hi, options(nostack, preserves_flags)) };
    (hi as u64) << 32 | lo as u64
}

/// `rdtscp; lfence`: waits for earlier instructions; also returns TSC_AUX.
/// Needs CPUID 0x80000001 EDX[27] (see `control::features::RDTSCP`).
#[inline(always)]
pub fn now_rdtscp() -> (u64, u32) {
    let (lo, hi, aux): (u32, u32, u32);
    // SAFETY: a counter read and a fence; no memory effect.
    unsafe {
        asm!("rdtscp", "lfence", out("eax") lo, out("edx") hi, out("ecx") aux, options(nostack, preserves_flags))
    };
    ((hi as u64) << 32 | lo as u64, aux)
}

/// TSC cycles in `secs` seconds at `tsc_khz` (3 GHz assumed when unknown).
pub fn cycles_for_secs(tsc_khz: u64, secs: u64) -> u64 {
    let khz = if tsc_khz == 0 { 3_000_000 } else { tsc_khz };
    khz.saturating_mul(1000).saturating_mul(secs)
}

/// Nanoseconds of `cycles` at `tsc_khz` (0 when unknown). Integer only.
pub fn cycles_to_ns(tsc_khz: u64, cycles: u64) -> u64 {
    if tsc_khz == 0 {
        return 0;
    }
    // Split to stay in u64 (u128 division would pull in compiler_builtins).
    (cycles / tsc_khz) * 1_000_000 + (cycles % tsc_khz) * 1_000_000 / tsc_khz
}
