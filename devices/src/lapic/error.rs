//! Faults of the x2APIC MSR interface and of IA32_APIC_BASE writes.

use thiserror::Error;

/// A guest access the architecture answers with #GP(0). The VMM injects
/// #GP into the vCPU (or, with KVM_CAP_X86_USER_SPACE_MSR, sets `error = 1`
/// in the MSR exit so KVM injects it) and may report the access.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum ApicFault {
    /// The MSR is outside the x2APIC range and is not IA32_APIC_BASE.
    #[error("MSR {0:#x} is not a local APIC MSR")]
    NotApicMsr(u32),
    /// An x2APIC MSR was accessed while the APIC is not in x2APIC mode.
    #[error("x2APIC MSR {0:#x} accessed while the APIC is not in x2APIC mode")]
    NotX2ApicMode(u32),
    /// The MSR is in the x2APIC range but names no register in x2APIC mode
    /// (e.g. 0x80E DFR, 0x831 ICR high, 0x809 APR).
    #[error("x2APIC MSR {0:#x} is reserved")]
    ReservedMsr(u32),
    /// WRMSR to a read-only register (ID, version, PPR, LDR, ISR...).
    #[error("x2APIC MSR {0:#x} is read-only")]
    ReadOnly(u32),
    /// RDMSR of a write-only register (EOI, SELF IPI).
    #[error("x2APIC MSR {0:#x} is write-only")]
    WriteOnly(u32),
    /// WRMSR that sets reserved bits of the register.
    #[error("WRMSR {value:#x} to x2APIC MSR {msr:#x} sets reserved bits")]
    ReservedBits {
        /// The MSR written.
        msr: u32,
        /// The value written.
        value: u64,
    },
    /// WRMSR of a non-zero value to the x2APIC EOI register (SDM table 11-6).
    #[error("non-zero write {0:#x} to the x2APIC EOI register")]
    NonZeroEoi(u64),
    /// IA32_APIC_BASE value with reserved bits set, or EXTD without x2APIC
    /// support.
    #[error("IA32_APIC_BASE value {0:#x} sets reserved bits")]
    ApicBaseReserved(u64),
    /// IA32_APIC_BASE transition the SDM forbids (x2APIC to xAPIC, disabled
    /// to x2APIC, or EXTD without EN).
    #[error("illegal IA32_APIC_BASE transition from {from:#x} to {to:#x}")]
    IllegalTransition {
        /// Value before the write.
        from: u64,
        /// Value the guest tried to write.
        to: u64,
    },
    /// The VMM named a vCPU the group does not have (a VMM bug, not a
    /// guest fault).
    #[error("no local APIC for vCPU {0}")]
    NoSuchVcpu(usize),
}
