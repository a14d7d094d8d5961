//! IA32_APIC_BASE (MSR 0x1B): mode decoding and the legal transitions of
//! SDM vol. 3, 11.12.5 (figure "Local x2APIC State Transitions").

use super::error::ApicFault;
use super::regs::XAPIC_DEFAULT_BASE;

/// BSP flag (bit 8).
pub const APIC_BASE_BSP: u64 = 1 << 8;
/// x2APIC enable, EXTD (bit 10).
pub const APIC_BASE_EXTD: u64 = 1 << 10;
/// APIC global enable, EN (bit 11).
pub const APIC_BASE_EN: u64 = 1 << 11;
/// Bits 0..=7 and 9, always reserved.
const APIC_BASE_LOW_RESERVED: u64 = 0x2FF;

/// The architectural physical-address width, used when the VMM does not
/// say how many bits the guest's MAXPHYADDR has.
pub const DEFAULT_PHYS_ADDR_BITS: u8 = 52;

/// The state IA32_APIC_BASE's EN and EXTD bits put a local APIC in: off,
/// xAPIC or x2APIC. Not the APIC mode a run asks the guest to use
/// (`--apic`, [`ipivmm_abi::ApicMode`]): this one follows the guest's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApicBaseState {
    /// EN = 0, EXTD = 0: globally disabled; the APIC takes no interrupts.
    Disabled,
    /// EN = 1, EXTD = 0: xAPIC, registers in the MMIO page.
    XApic,
    /// EN = 1, EXTD = 1: x2APIC, registers in MSRs 0x800..=0x8FF.
    X2Apic,
}

impl ApicBaseState {
    /// Mode encoded by an IA32_APIC_BASE value; `None` for the invalid
    /// EN = 0, EXTD = 1 combination.
    pub fn from_apic_base(value: u64) -> Option<ApicBaseState> {
        match (value & APIC_BASE_EN != 0, value & APIC_BASE_EXTD != 0) {
            (false, false) => Some(ApicBaseState::Disabled),
            (true, false) => Some(ApicBaseState::XApic),
            (true, true) => Some(ApicBaseState::X2Apic),
            (false, true) => None,
        }
    }
}

/// IA32_APIC_BASE after reset: xAPIC mode at 0xFEE00000, BSP flag on vCPU 0.
pub fn reset_apic_base(bsp: bool) -> u64 {
    XAPIC_DEFAULT_BASE | APIC_BASE_EN | if bsp { APIC_BASE_BSP } else { 0 }
}

/// Checks a guest write of IA32_APIC_BASE against the current value and
/// returns the state it switches to.
///
/// Faults (all #GP): reserved bits (0..=7, 9, at or above
/// `phys_addr_bits`), EXTD without x2APIC support, EN = 0 with EXTD = 1,
/// x2APIC -> xAPIC, and disabled -> x2APIC. Legal: disabled <-> xAPIC,
/// xAPIC -> x2APIC, x2APIC -> disabled, and any write that keeps the mode
/// (e.g. moving the base address or the BSP flag).
pub fn check_transition(
    old: u64,
    new: u64,
    x2apic_supported: bool,
    phys_addr_bits: u8,
) -> Result<ApicBaseState, ApicFault> {
    let bits = u32::from(phys_addr_bits.clamp(12, 63));
    let mut reserved = APIC_BASE_LOW_RESERVED | (u64::MAX << bits);
    if !x2apic_supported {
        reserved |= APIC_BASE_EXTD;
    }
    if new & reserved != 0 {
        return Err(ApicFault::ApicBaseReserved(new));
    }
    let illegal = ApicFault::IllegalTransition { from: old, to: new };
    let to = ApicBaseState::from_apic_base(new).ok_or(illegal)?;
    let from = ApicBaseState::from_apic_base(old).unwrap_or(ApicBaseState::Disabled);
    match (from, to) {
        (ApicBaseState::X2Apic, ApicBaseState::XApic)
        | (ApicBaseState::Disabled, ApicBaseState::X2Apic) => Err(illegal),
        _ => Ok(to),
    }
}
