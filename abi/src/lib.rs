//! The guest ABI of ipivmm: what the host hands a payload at entry and what the
//! payload sends back through the control port.
//!
//! This crate is `no_std` and dependency-free so that the freestanding guest
//! payload and the host share one definition. Every struct is `repr(C)` with
//! only fixed-width integer fields, so its layout is the same on both sides;
//! `docs/guest-abi.md` documents it in prose.
//!
//! # Entry convention
//! Every vCPU enters the payload's ELF entry point in 64-bit long mode, with
//! paging on (identity map of the low 4 GiB), interrupts disabled, and:
//! - `rdi` = guest-physical address of the [`BootInfo`] block,
//! - `rsi` = this vCPU's index (0-based),
//! - `rsp` = top of this vCPU's stack (16-byte aligned),
//! - CS = [`CODE64_SELECTOR`], DS/ES/SS/FS/GS = [`DATA_SELECTOR`],
//!   TR = [`TSS_SELECTOR`] with IST1 pointing at a per-vCPU interrupt stack.
//!
//! # Control port
//! The payload writes, with a 32-bit `out` to [`CONTROL_PORT`], the
//! guest-physical address of a [`ControlMsg`]. The host decodes it while the
//! writing vCPU is stopped in that exit, acts on it, writes [`ControlMsg::reply`]
//! and resumes the vCPU.
#![cfg_attr(not(feature = "host"), no_std)]

pub mod c_header;
mod counters;
mod ipi;
pub use counters::{GuestCounter, GuestCounters};
pub use ipi::*;

/// Version of this ABI; [`BootInfo::abi_version`] and [`ControlMsg::version`]
/// carry it. Bump on any incompatible change.
pub const ABI_VERSION: u16 = 1;

/// `BootInfo::magic`: "IPIVMMBI" little-endian.
pub const BOOT_INFO_MAGIC: u64 = u64::from_le_bytes(*b"IPIVMMBI");
/// `ControlMsg::magic`: "IPIM" little-endian.
pub const CONTROL_MAGIC: u32 = u32::from_le_bytes(*b"IPIM");

/// Most vCPUs a VM can have (x2APIC mode, 32-bit APIC IDs): x86 KVM's
/// default `KVM_MAX_VCPUS`. [`BootInfo::apic_ids`] holds the first
/// [`BOOT_APIC_IDS`] APIC IDs and [`BootInfo::apic_ids_ext`] the rest
/// ([`BootInfo::apic_id`] reads either).
pub const MAX_VCPUS: usize = 1024;

/// Slots of [`BootInfo::apic_ids`], the array's size since the first ABI
/// (the block only grows at its end, so it stayed).
pub const BOOT_APIC_IDS: usize = 254;

/// Most vCPUs a VM can have in xAPIC mode: physical IDs 0..=0xFE (0xFF is
/// the broadcast destination).
pub const MAX_XAPIC_VCPUS: usize = 255;

/// Highest APIC ID an xAPIC vCPU may have (0xFF is broadcast).
pub const MAX_XAPIC_ID: u32 = 0xFE;

/// I/O port of the control device (32-bit `out`, value = GPA of a `ControlMsg`).
pub const CONTROL_PORT: u16 = 0x0ce0;
/// I/O port of the 16550 serial console (COM1).
pub const SERIAL_PORT: u16 = 0x03f8;

/// GDT selectors the host sets up for every vCPU.
pub const CODE64_SELECTOR: u16 = 0x08;
/// Data segment selector.
pub const DATA_SELECTOR: u16 = 0x10;
/// 64-bit TSS selector (16-byte descriptor).
pub const TSS_SELECTOR: u16 = 0x18;
/// IST index (1-based, as in the IDT gate) of the per-vCPU interrupt stack.
pub const INTERRUPT_IST: u8 = 1;

/// Guest-physical range a payload's loadable segments must fall in.
/// Linker scripts place the image at [`PAYLOAD_START`].
pub const PAYLOAD_START: u64 = 0x0010_0000;
/// End (exclusive) of the payload range.
pub const PAYLOAD_END: u64 = 0x0080_0000;

/// xAPIC MMIO base (identity-mapped, uncached).
pub const XAPIC_BASE: u64 = 0xfee0_0000;
/// [`BootInfo::flags`]: more than 4 vCPUs per host CPU (heavily oversubscribed), so the
/// SDK's barrier halts its waiters instead of spinning and the last vCPU to
/// arrive wakes them with one all-but-self IPI on [`barrier_vector`] (a
/// spinning waiter would hold a host CPU the others need to arrive).
pub const BOOT_FLAG_HALTING_BARRIERS: u32 = 1;

/// Vector of the barrier wake-ups ([`BOOT_FLAG_HALTING_BARRIERS`]): 0xFE,
/// or 0xFD when the measured IPIs use 0xFE. The SDK's handler does not
/// count it in the guest counters.
pub const fn barrier_vector(ipi_vector: u8) -> u8 {
    if ipi_vector == 0xfe {
        0xfd
    } else {
        0xfe
    }
}

/// The built-in payload's phases, `(id, name)`, in the order it runs them:
/// the host's reports (the measured phase) and timeout hints (the warm-up)
/// rely on them.
pub mod builtin_phases {
    /// No IPIs: the exits of an idle guest.
    pub const IDLE: (u32, &str) = (0, "idle");
    /// Warm-up, no samples.
    pub const WARMUP: (u32, &str) = (1, "warmup");
    /// The measured phase's counted part (exits by reason, ICR-write
    /// exits); its samples are sent after its end.
    pub const MEASURE: (u32, &str) = (2, "measure");
    /// The measured phase's uncounted part, run first with the same
    /// iterations: its latency is the headline (nothing per-exit counted).
    pub const MEASURE_UNCOUNTED: (u32, &str) = (2, "measure-uncounted");
}

/// Bits of `PhaseBegin`'s `arg[2]`.
pub mod phase_flags {
    /// The uncounted part of a measured phase: from this begin marker to
    /// its end marker the host switches every per-exit counter of the vCPU
    /// off (exit sampler, BPF exit counter, tracepoint counters), so the
    /// latency the part measures is not the counters' (KVM's binary stats,
    /// the guest's own counters and ipivmm's LAPIC model still count: they
    /// cost nothing per exit). Its counted part is the phase of the same id
    /// without the flag; the host takes exits from that one and the
    /// headline latency from this one.
    pub const UNCOUNTED: u64 = 1 << 0;
    /// Every defined bit (the host rejects others).
    pub const ALL: u64 = UNCOUNTED;
    /// What the SDK appends to a phase's name for its uncounted part.
    pub const UNCOUNTED_SUFFIX: &str = "-uncounted";
}

/// Default vector of the measured IPIs.
pub const DEFAULT_IPI_VECTOR: u8 = 0x40;
/// Spurious-interrupt vector the payload programs in the SVR.
pub const SPURIOUS_VECTOR: u8 = 0xff;

mod modes;

pub use modes::{
    ApicMode, FanOut, IpiPath, OperationsPerIteration, TargetWait, Workload, WorkloadSpec,
};

/// Handed to every vCPU in `rdi` at entry; one shared read-only block.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BootInfo {
    /// [`BOOT_INFO_MAGIC`].
    pub magic: u64,
    /// [`ABI_VERSION`].
    pub abi_version: u16,
    /// Reserved, zero.
    pub reserved0: u16,
    /// Number of vCPUs in the VM.
    pub vcpu_count: u32,
    /// TSC frequency in kHz (KVM_GET_TSC_KHZ), 0 if unknown.
    pub tsc_khz: u64,
    /// [`ApicMode`] as u32.
    pub apic_mode: u32,
    /// [`IpiPath`] as u32.
    pub ipi_path: u32,
    /// [`Workload`] as u32 (custom payloads may ignore it).
    pub workload: u32,
    /// [`TargetWait`] as u32.
    pub target_wait: u32,
    /// Measured iterations.
    pub iterations: u64,
    /// Warm-up iterations (not recorded).
    pub warmup: u64,
    /// Vector of the measured IPIs.
    pub ipi_vector: u32,
    /// `BOOT_FLAG_*` bits; the others are reserved, zero.
    pub flags: u32,
    /// GPA of the first vCPU's scratch area (free guest RAM for samples).
    pub scratch_base: u64,
    /// Bytes of scratch per vCPU; vCPU i owns
    /// `scratch_base + i * scratch_stride .. + scratch_stride`.
    pub scratch_stride: u64,
    /// Workload-specific parameters (custom payloads: `--param`).
    pub params: [u64; 8],
    /// APIC ID of vCPU i for i < [`BOOT_APIC_IDS`] (index = vCPU index).
    pub apic_ids: [u32; BOOT_APIC_IDS],
    /// With [`TargetWait::Halt`]: how long a sender waits, in ns, after a
    /// target published that it is halting, so that its `hlt` has left the
    /// guest before the IPI is sent.
    pub halt_settle_ns: u64,
    /// APIC ID of vCPU i for i >= [`BOOT_APIC_IDS`], at index
    /// `i - BOOT_APIC_IDS` (appended when VMs grew past 254 vCPUs).
    pub apic_ids_ext: [u32; MAX_VCPUS - BOOT_APIC_IDS],
    /// TSC cycles every IPI handler of the measured vector busy-waits
    /// before it counts the IPI received (`--inject-delay-cycles`): a known
    /// effect to check a comparison against; 0 = none. Appended at 4248.
    pub ipi_delay_cycles: u64,
}

impl BootInfo {
    /// APIC ID of vCPU `vcpu` (from [`BootInfo::apic_ids`] or
    /// [`BootInfo::apic_ids_ext`]); 0 beyond [`MAX_VCPUS`].
    #[inline(always)]
    pub fn apic_id(&self, vcpu: usize) -> u32 {
        if vcpu < BOOT_APIC_IDS {
            self.apic_ids[vcpu]
        } else {
            self.apic_ids_ext
                .get(vcpu - BOOT_APIC_IDS)
                .copied()
                .unwrap_or(0)
        }
    }
}

/// What a [`ControlMsg`] asks the host to do.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgKind {
    /// First message of a vCPU: "the payload is running". `arg[0]` = guest
    /// feature bits (informational).
    Hello = 1,
    /// Begin measured phase `phase`; `arg[0]`/`arg[1]` = GPA/length of its
    /// UTF-8 name (at most [`MAX_NAME_LEN`] bytes), `arg[2]` = flags
    /// ([`phase_flags`]; 0 from payloads that predate them). Counters are
    /// snapshot.
    PhaseBegin = 2,
    /// End phase `phase`; counters are snapshot again and the window closed.
    PhaseEnd = 3,
    /// Latency samples of phase `phase`: `arg[0]` = GPA of a `u64` array,
    /// `arg[1]` = count (at most [`MAX_SAMPLES_PER_MSG`]), `arg[2]` = unit
    /// (0 = TSC cycles). May be sent several times per phase.
    Samples = 4,
    /// A named value of phase `phase`: `arg[0]`/`arg[1]` = GPA/length of the
    /// name, `arg[2]` = the value.
    Record = 5,
    /// This vCPU is finished: `arg[0]` = status (0 = success), `arg[1]`/`arg[2]`
    /// = GPA/length of an optional message. The vCPU is not resumed.
    Done = 6,
    /// The payload failed: `arg[0]`/`arg[1]` = GPA/length of the message.
    /// The vCPU is not resumed; the run fails.
    Panic = 7,
}

impl MsgKind {
    /// Decode the `ControlMsg::kind` field.
    pub fn from_raw(raw: u16) -> Option<Self> {
        Some(match raw {
            1 => Self::Hello,
            2 => Self::PhaseBegin,
            3 => Self::PhaseEnd,
            4 => Self::Samples,
            5 => Self::Record,
            6 => Self::Done,
            7 => Self::Panic,
            _ => return None,
        })
    }
}

/// Longest phase or record name, in bytes.
pub const MAX_NAME_LEN: u64 = 64;
/// Longest message text (Done/Panic), in bytes.
pub const MAX_TEXT_LEN: u64 = 1024;
/// Most samples one `Samples` message may carry.
pub const MAX_SAMPLES_PER_MSG: u64 = 1 << 20;
/// `Samples` unit: TSC cycles.
pub const UNIT_TSC_CYCLES: u64 = 0;

/// One request through the control port. Lives in guest memory; the port
/// write carries its GPA. 128 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ControlMsg {
    /// [`CONTROL_MAGIC`].
    pub magic: u32,
    /// [`ABI_VERSION`].
    pub version: u16,
    /// [`MsgKind`] as u16.
    pub kind: u16,
    /// Index of the sending vCPU (checked against the vCPU that exited).
    pub vcpu: u32,
    /// Phase id (for phase, sample and record messages).
    pub phase: u32,
    /// Arguments, by kind.
    pub arg: [u64; 4],
    /// The sender's counters at the time of the message.
    pub counters: GuestCounters,
    /// Written by the host: [`REPLY_OK`] or an error code.
    pub reply: u64,
    /// Reserved, zero.
    pub reserved: u64,
}

/// `ControlMsg::reply`: accepted.
pub const REPLY_OK: u64 = 0;
/// `ControlMsg::reply`: rejected (bad magic, version, kind, pointer, ...).
/// The host also reports why.
pub const REPLY_REJECTED: u64 = 1;

const _: () = assert!(core::mem::size_of::<ControlMsg>() == 128);
const _: () = assert!(core::mem::size_of::<GuestCounters>() == 64);
const _: () = assert!(core::mem::size_of::<BootInfo>().is_multiple_of(8));

/// Size of [`ControlMsg`] in guest memory.
pub const CONTROL_MSG_SIZE: usize = core::mem::size_of::<ControlMsg>();
/// Size of [`BootInfo`] in guest memory.
pub const BOOT_INFO_SIZE: usize = core::mem::size_of::<BootInfo>();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_msg_layout_is_stable() {
        assert_eq!(core::mem::offset_of!(ControlMsg, arg), 16);
        assert_eq!(core::mem::offset_of!(ControlMsg, counters), 48);
        assert_eq!(core::mem::offset_of!(ControlMsg, reply), 112);
    }

    #[test]
    fn msg_kind_decodes_only_known_values() {
        for raw in 0..=8u16 {
            let k = MsgKind::from_raw(raw);
            assert_eq!(k.is_some(), (1..=7).contains(&raw));
            if let Some(k) = k {
                assert_eq!(k as u16, raw);
            }
        }
    }
}
