//! Picking a VM's irqchip: the one place that names every [`Chip`]
//! implementation (`vcpu::irqchip` holds the trait and KVM's, and
//! `vcpu::user_apic` ipivmm's), so neither of those files imports the other.
use super::irqchip::{InKernel, SharedChip};
use super::user_apic::UserApic;
use crate::mode::{ApicMode, Irqchip};
use std::sync::Arc;

#[cfg(doc)]
use super::irqchip::Chip;

/// The irqchip of `--irqchip kind` for a VM of these APIC IDs (index =
/// vCPU index) in APIC mode `apic`: the one place that picks it.
pub fn for_mode(kind: Irqchip, apic_ids: &[u32], apic: ApicMode) -> SharedChip {
    match kind {
        Irqchip::Kernel => Arc::new(InKernel { split: false }),
        Irqchip::Split => Arc::new(InKernel { split: true }),
        Irqchip::User => Arc::new(UserApic::for_vcpus(apic_ids, apic == ApicMode::X2apic)),
    }
}
