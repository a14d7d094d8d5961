//! Client of the control port (see `ipivmm_abi`): each call builds a
//! [`ControlMsg`] on the stack, writes its address to [`CONTROL_PORT`] with a
//! 32-bit `out`, and reads the host's reply. Every message carries this
//! vCPU's counters, which the host snapshots at phase markers.

use crate::{cpu, percpu};
use ipivmm_abi::{
    phase_flags, ControlMsg, MsgKind, ABI_VERSION, CONTROL_MAGIC, CONTROL_PORT, MAX_NAME_LEN,
    MAX_SAMPLES_PER_MSG, MAX_TEXT_LEN, REPLY_OK, UNIT_TSC_CYCLES,
};

/// Feature bits of the Hello message (`arg[0]`, informational).
pub mod features {
    /// CPUID reports x2APIC.
    pub const X2APIC: u64 = 1 << 0;
    /// CPUID 0x40000001 reports KVM_FEATURE_PV_SEND_IPI.
    pub const PV_SEND_IPI: u64 = 1 << 1;
    /// AMD/Hygon vendor (`vmmcall`).
    pub const AMD: u64 = 1 << 2;
    /// CPUID reports rdtscp.
    pub const RDTSCP: u64 = 1 << 3;
    /// CPUID reports an invariant TSC.
    pub const INVARIANT_TSC: u64 = 1 << 4;
    /// CPUID 0x40000001 reports KVM_FEATURE_PV_EOI (`--pv-eoi`).
    pub const PV_EOI: u64 = 1 << 5;
    /// CPUID 0x40000001 reports KVM_FEATURE_PV_TLB_FLUSH (`--pv-tlb-flush`).
    pub const PV_TLB_FLUSH: u64 = 1 << 6;
    /// CPUID 0x40000001 reports KVM_FEATURE_PV_SCHED_YIELD (`--pv-sched-yield`).
    pub const PV_SCHED_YIELD: u64 = 1 << 7;

    /// The KVM_FEATURE_* bit numbers of CPUID 0x40000001 EAX (the kernel's
    /// uapi kvm_para.h) reported as feature bits: (EAX bit, feature bit).
    pub const KVM_LEAF: [(u32, u64); 3] = [(6, PV_EOI), (9, PV_TLB_FLUSH), (13, PV_SCHED_YIELD)];

    /// Each bit's name, as the banner prints it.
    const NAMES: [(u64, &str); 8] = [
        (X2APIC, "x2apic"),
        (PV_SEND_IPI, "pv-send-ipi"),
        (AMD, "amd"),
        (RDTSCP, "rdtscp"),
        (INVARIANT_TSC, "invariant-tsc"),
        (PV_EOI, "pv-eoi"),
        (PV_TLB_FLUSH, "pv-tlb-flush"),
        (PV_SCHED_YIELD, "pv-sched-yield"),
    ];

    /// The bits of `f` by name (`x2apic amd invariant-tsc`; `none`), for
    /// the banner: a number alone says nothing to a reader.
    pub struct Names(pub u64);

    impl core::fmt::Display for Names {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            let mut first = true;
            for (bit, name) in NAMES {
                if self.0 & bit != 0 {
                    f.write_str(if first { "" } else { " " })?;
                    f.write_str(name)?;
                    first = false;
                }
            }
            if first {
                f.write_str("none")?;
            }
            Ok(())
        }
    }
}

/// Sends one message as vCPU `vcpu`; returns the host's reply.
fn send_as(vcpu: u32, kind: MsgKind, phase: u32, arg: [u64; 4]) -> u64 {
    let counters = if percpu::is_initialized() {
        percpu::current().counters.snapshot()
    } else {
        Default::default()
    };
    let mut msg = ControlMsg {
        magic: CONTROL_MAGIC,
        version: ABI_VERSION,
        kind: kind as u16,
        vcpu,
        phase,
        arg,
        counters,
        reply: u64::MAX,
        reserved: 0,
    };
    let addr = &mut msg as *mut ControlMsg as u64;
    // The port carries 32 bits: stacks are below 4 GiB (host layout).
    debug_assert!(addr <= u32::MAX as u64);
    cpu::outl(CONTROL_PORT, addr as u32);
    // SAFETY: `msg` is live; the host wrote `reply` during the exit above
    // (outl is a compiler memory barrier), so read it from memory.
    unsafe { core::ptr::read_volatile(&msg.reply) }
}

fn send(kind: MsgKind, phase: u32, arg: [u64; 4]) {
    let reply = send_as(percpu::current().vcpu, kind, phase, arg);
    if reply != REPLY_OK {
        panic!("host rejected {kind:?} (phase {phase}): reply {reply}");
    }
}

/// `s` cut to at most `max` bytes on a char boundary.
fn clip(s: &str, max: u64) -> &str {
    let mut end = s.len().min(max as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn text_args(s: &str, max: u64) -> (u64, u64) {
    let s = clip(s, max);
    (s.as_ptr() as u64, s.len() as u64)
}

/// "The payload is running" (the runtime sends it before `main`).
pub fn hello(features: u64) {
    send(MsgKind::Hello, 0, [features, 0, 0, 0]);
}

/// Begins phase `id` named `name` (at most 64 bytes kept).
pub fn phase_begin(id: u32, name: &str) {
    let (p, l) = text_args(name, MAX_NAME_LEN);
    send(MsgKind::PhaseBegin, id, [p, l, 0, 0]);
}

/// Ends phase `id`.
pub fn phase_end(id: u32) {
    send(MsgKind::PhaseEnd, id, [0; 4]);
}

/// Begins phase `id` named `name`, then waits in the barrier of all vCPUs
/// (`sync::barrier`): when it returns, every vCPU's window is open. Use it
/// (on every vCPU) before the first IPI of a phase: with a bare
/// [`phase_begin`] a sender's first IPI can reach a target that has not
/// begun yet, and lands in no phase of the target's (or in the one before).
pub fn phase_begin_synced(id: u32, name: &str) {
    phase_begin(id, name);
    crate::sync::barrier();
}

/// Waits in the barrier of all vCPUs, then ends phase `id`: every vCPU is
/// past its last send of the phase before any window closes. With the
/// senders' waits for acknowledgements before it, every IPI of the phase
/// is then sent and taken inside both its sender's and its target's
/// windows.
pub fn phase_end_synced(id: u32) {
    crate::sync::barrier();
    phase_end(id);
}

/// Begins the uncounted part of phase `id` named `name`: until its
/// [`phase_end`] the host switches every per-exit counter of this vCPU off,
/// so what the part times is not the counters' cost. The part is named
/// `name` + `-uncounted` (`name` clipped to fit 64 bytes). See
/// [`crate::measure::measure_both_ways`], which pairs it with the counted
/// part.
pub fn phase_begin_uncounted(id: u32, name: &str) {
    let suffix = phase_flags::UNCOUNTED_SUFFIX.as_bytes();
    let base = clip(name, MAX_NAME_LEN - suffix.len() as u64).as_bytes();
    let mut buf = [0u8; MAX_NAME_LEN as usize];
    buf[..base.len()].copy_from_slice(base);
    buf[base.len()..base.len() + suffix.len()].copy_from_slice(suffix);
    let len = (base.len() + suffix.len()) as u64;
    send(
        MsgKind::PhaseBegin,
        id,
        [buf.as_ptr() as u64, len, phase_flags::UNCOUNTED, 0],
    );
}

/// Latency samples (TSC cycles) of phase `id`, in chunks of at most
/// `MAX_SAMPLES_PER_MSG`. The host reads them by GPA (identity map).
pub fn samples(id: u32, values: &[u64]) {
    for chunk in values.chunks(MAX_SAMPLES_PER_MSG as usize) {
        send(
            MsgKind::Samples,
            id,
            [
                chunk.as_ptr() as u64,
                chunk.len() as u64,
                UNIT_TSC_CYCLES,
                0,
            ],
        );
    }
}

/// A named value of phase `id`.
pub fn record(id: u32, name: &str, value: u64) {
    let (p, l) = text_args(name, MAX_NAME_LEN);
    send(MsgKind::Record, id, [p, l, value, 0]);
}

/// This vCPU is finished (`status` 0 = success); the host does not resume it.
pub fn done(status: u64, msg: &str) -> ! {
    let (p, l) = text_args(msg, MAX_TEXT_LEN);
    send_as(percpu::current().vcpu, MsgKind::Done, 0, [status, p, l, 0]);
    cpu::halt_forever()
}

/// Fails the run with `msg`; the host does not resume this vCPU. Usable
/// before the per-vCPU state exists (`vcpu` is given explicitly).
pub fn panic_as(vcpu: u32, msg: &[u8]) -> ! {
    let len = msg.len().min(MAX_TEXT_LEN as usize);
    send_as(
        vcpu,
        MsgKind::Panic,
        0,
        [msg.as_ptr() as u64, len as u64, 0, 0],
    );
    cpu::halt_forever()
}

/// Fails the run with `msg` (prefer `panic!`, which also prints it).
pub fn panic(msg: &str) -> ! {
    panic_as(percpu::current().vcpu, msg.as_bytes())
}
