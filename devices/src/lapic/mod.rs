//! ipivmm's own local APIC model, used with `--irqchip user` (no in-kernel
//! irqchip). Pure logic, no KVM: the vCPU loop feeds it APIC MMIO exits
//! (xAPIC) and WRMSR/RDMSR exits (x2APIC) and acts on what it returns.
//!
//! - [`Lapic`]: one vCPU's registers (SDM vol. 3 ch. 11), access paths
//!   [`Lapic::read_mmio`], [`Lapic::write_mmio`], [`Lapic::read_msr`],
//!   [`Lapic::write_msr`], mode switching with [`Lapic::set_apic_base`], and
//!   the injection side: [`Lapic::pending_vector`], [`Lapic::ack`],
//!   [`Lapic::take_nmi`], [`Lapic::take_init`], [`Lapic::take_sipi`].
//! - [`IpiRequest`]: an interrupt command ([`ipivmm_abi::Icr`], the one
//!   decoder host and guest share) and who sent it.
//! - [`LapicGroup`]: all vCPUs' APICs; [`LapicGroup::deliver`] resolves the
//!   targets of an IPI and returns a [`Delivery`] saying whom to kick.
//! - [`LapicCounters`]: per-vCPU counts (ICR writes, IPIs delivered and
//!   dropped, EOIs, NMIs, INITs...).
//!
//! See `docs/lapic-model.md` for what is modelled and how the VMM drives it.
#![warn(missing_docs)]

mod accept;
mod access;
mod base;
mod counters;
mod error;
mod group;
pub mod mmio;
pub mod regs;
mod state;

#[cfg(test)]
mod tests;

pub use base::{
    check_transition, ApicBaseState, APIC_BASE_BSP, APIC_BASE_EN, APIC_BASE_EXTD,
    DEFAULT_PHYS_ADDR_BITS,
};
pub use counters::LapicCounters;
pub use error::ApicFault;
pub use group::{Accepted, Delivery, IpiRequest, LapicGroup, PendingEvent, RejectReason, Rejected};
pub use regs::{
    Lvt, Register, VectorSet, APIC_VERSION, APIC_VERSION_WITH_CMCI, MSR_IA32_APIC_BASE,
    X2APIC_MSR_EOI, X2APIC_MSR_FIRST, X2APIC_MSR_ICR, X2APIC_MSR_LAST, X2APIC_MSR_SELF_IPI,
    XAPIC_DEFAULT_BASE, XAPIC_MMIO_SIZE,
};
pub use state::{x2apic_ldr, Lapic};
