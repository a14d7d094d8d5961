//! IPI delivery across the local APICs of all vCPUs.
//!
//! Destination matching follows KVM's `kvm_apic_match_dest` (each target in
//! its own mode); acceptance follows SDM 11.6 / KVM's `__apic_accept_irq`.

use super::error::ApicFault;
use super::regs::{ESR_RECEIVE_ILLEGAL_VECTOR, ESR_SEND_ILLEGAL_VECTOR};
use super::state::Lapic;
use ipivmm_abi::{DeliveryMode, Destination, Icr, ICR_DELIVERY_MODE_MASK};

/// An IPI a vCPU asked for by writing its ICR (or SELF IPI MSR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpiRequest {
    /// Index of the sending vCPU.
    pub source: usize,
    /// The command, decoded by the ABI's [`Icr`] (the one the payloads
    /// build theirs with).
    pub icr: Icr,
}

/// What a target vCPU must be made to do after accepting an IPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PendingEvent {
    /// The vector is in the target's IRR: kick it so that it injects the
    /// vector (KVM_INTERRUPT) when its interrupt window opens.
    Fixed(u8),
    /// An NMI is pending: kick it and inject with KVM_NMI.
    Nmi,
    /// An INIT is pending: kick it; it resets and waits for SIPI.
    Init,
    /// A start-up IPI with this vector is pending.
    StartUp(u8),
}

/// A target that accepted the IPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Accepted {
    /// Index of the target vCPU.
    pub vcpu: usize,
    /// What the target now has pending.
    pub event: PendingEvent,
}

/// Why a matched target did not take the IPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Fixed/lowest-priority interrupt to a software-disabled APIC (SVR
    /// bit 8 clear): masked (SDM 11.4.7.2).
    SoftwareDisabled,
    /// Fixed/lowest-priority vector in 0..=15: ESR send/receive illegal
    /// vector is logged and the interrupt is not delivered.
    IllegalVector,
    /// INIT level de-assert: accepted by the bus, no effect on modern
    /// processors. Not counted as dropped.
    InitDeassert,
}

/// A matched target that did not take the IPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rejected {
    /// Index of the target vCPU.
    pub vcpu: usize,
    /// Why.
    pub reason: RejectReason,
}

/// Outcome of one IPI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Targets that accepted it, in vCPU order: kick each (unless it is the
    /// sender itself, which re-checks on its own before re-entering).
    pub accepted: Vec<Accepted>,
    /// Matched targets that refused it.
    pub rejected: Vec<Rejected>,
    /// The destination when it matched no enabled APIC at all (e.g. an IPI
    /// to a nonexistent APIC ID).
    pub unmatched_destination: Option<u32>,
    /// The delivery mode field (ICR bits 10:8) when the model does not
    /// implement it: SMI (010) or a reserved value (011, 111: none of
    /// [`DeliveryMode`]); nothing was delivered.
    pub unsupported: Option<u32>,
}

impl Delivery {
    /// Target vCPUs that need a kick, in order.
    pub fn kicks(&self) -> impl Iterator<Item = usize> + '_ {
        self.accepted.iter().map(|a| a.vcpu)
    }

    /// Whether the IPI reached nobody.
    pub fn is_dropped(&self) -> bool {
        self.accepted.is_empty()
    }
}

/// The local APICs of all vCPUs of a VM, indexed by vCPU index. Keep it
/// behind one `Mutex` shared by the vCPU threads: a delivery reads every
/// target's state and writes the chosen targets'.
#[derive(Debug, Clone)]
pub struct LapicGroup {
    lapics: Vec<Lapic>,
}

impl LapicGroup {
    /// `num_vcpus` APICs, vCPU `i` with APIC ID `i` (the xAPIC ID is its low
    /// 8 bits, so IDs alias in xAPIC mode beyond 255 vCPUs).
    pub fn new(num_vcpus: usize) -> LapicGroup {
        LapicGroup::with_apic_ids((0..num_vcpus).map(|i| i as u32))
    }

    /// One APIC per ID, vCPU `i` getting the `i`-th ID.
    pub fn with_apic_ids(ids: impl IntoIterator<Item = u32>) -> LapicGroup {
        LapicGroup::from_lapics(ids.into_iter().enumerate().map(|(i, id)| Lapic::new(i, id)))
    }

    /// A group of prepared APICs; each APIC's index is reset to its position.
    pub fn from_lapics(lapics: impl IntoIterator<Item = Lapic>) -> LapicGroup {
        let lapics = lapics
            .into_iter()
            .enumerate()
            .map(|(i, mut lapic)| {
                lapic.index = i;
                lapic
            })
            .collect();
        LapicGroup { lapics }
    }

    /// Number of vCPUs.
    pub fn len(&self) -> usize {
        self.lapics.len()
    }

    /// Whether the group has no vCPU.
    pub fn is_empty(&self) -> bool {
        self.lapics.is_empty()
    }

    /// The APIC of vCPU `vcpu`.
    pub fn get(&self, vcpu: usize) -> Option<&Lapic> {
        self.lapics.get(vcpu)
    }

    /// The APIC of vCPU `vcpu`, mutably.
    pub fn get_mut(&mut self, vcpu: usize) -> Option<&mut Lapic> {
        self.lapics.get_mut(vcpu)
    }

    /// All APICs in vCPU order.
    pub fn iter(&self) -> impl Iterator<Item = &Lapic> {
        self.lapics.iter()
    }

    /// MMIO write exit of vCPU `vcpu` at `offset` in its APIC page; delivers
    /// the IPI if the write sent one. `None` for an unknown vCPU.
    pub fn handle_mmio_write(&mut self, vcpu: usize, offset: u64, data: &[u8]) -> Option<Delivery> {
        let req = self.lapics.get_mut(vcpu)?.write_mmio(offset, data)?;
        Some(self.deliver(&req))
    }

    /// WRMSR exit of vCPU `vcpu`; delivers the IPI if the write sent one.
    pub fn handle_msr_write(
        &mut self,
        vcpu: usize,
        msr: u32,
        value: u64,
    ) -> Result<Option<Delivery>, ApicFault> {
        let lapic = self
            .lapics
            .get_mut(vcpu)
            .ok_or(ApicFault::NoSuchVcpu(vcpu))?;
        Ok(lapic.write_msr(msr, value)?.map(|req| self.deliver(&req)))
    }

    /// Delivers an IPI: resolves the targets, applies the delivery mode to
    /// each and updates the counters (sender: drops, unsupported; targets:
    /// delivered, NMIs, INITs, SIPIs). Never panics; a `source` that is not
    /// a vCPU of the group matches no `Self`/`AllExcludingSelf` exclusion.
    ///
    /// Lowest priority picks the lowest-index software-enabled match (KVM
    /// hashes the vector instead; the SDM leaves arbitration model-specific).
    pub fn deliver(&mut self, req: &IpiRequest) -> Delivery {
        let icr = req.icr;
        let mut out = Delivery::default();
        let (mode, vector) = match icr.delivery_mode() {
            None | Some(DeliveryMode::Smi) => {
                out.unsupported = Some((icr.low() & ICR_DELIVERY_MODE_MASK) >> 8);
                self.count_sender(req.source, |c| c.ipis_unsupported += 1);
                return out;
            }
            Some(mode) => (mode, icr.vector()),
        };
        let fixed = matches!(mode, DeliveryMode::Fixed | DeliveryMode::LowestPriority);
        if fixed && vector < 16 {
            if let Some(src) = self.lapics.get_mut(req.source) {
                src.record_error(ESR_SEND_ILLEGAL_VECTOR);
            }
        }
        let mut targets: Vec<usize> = (0..self.lapics.len())
            .filter(|&i| self.matches(i, req))
            .collect();
        if targets.is_empty() {
            out.unmatched_destination = Some(icr.dest());
            self.count_sender(req.source, |c| c.ipis_dropped += 1);
            return out;
        }
        if mode == DeliveryMode::LowestPriority {
            let chosen = targets
                .iter()
                .copied()
                .find(|&i| self.lapics.get(i).is_some_and(Lapic::is_sw_enabled));
            if let Some(chosen) = chosen {
                targets = vec![chosen];
            }
        }
        for vcpu in targets {
            let Some(target) = self.lapics.get_mut(vcpu) else {
                continue;
            };
            let result = match mode {
                DeliveryMode::Fixed | DeliveryMode::LowestPriority => {
                    if vector < 16 {
                        target.record_error(ESR_RECEIVE_ILLEGAL_VECTOR);
                        Err(RejectReason::IllegalVector)
                    } else if !target.is_sw_enabled() {
                        Err(RejectReason::SoftwareDisabled)
                    } else {
                        target.accept_fixed(vector);
                        Ok(PendingEvent::Fixed(vector))
                    }
                }
                DeliveryMode::Nmi => {
                    target.accept_nmi();
                    Ok(PendingEvent::Nmi)
                }
                DeliveryMode::Init if icr.is_init_deassert() => Err(RejectReason::InitDeassert),
                DeliveryMode::Init => {
                    target.accept_init();
                    Ok(PendingEvent::Init)
                }
                DeliveryMode::StartUp => {
                    target.accept_sipi(vector);
                    Ok(PendingEvent::StartUp(vector))
                }
                // Returned above.
                DeliveryMode::Smi => continue,
            };
            match result {
                Ok(event) => out.accepted.push(Accepted { vcpu, event }),
                Err(reason) => {
                    if reason != RejectReason::InitDeassert {
                        self.count_sender(req.source, |c| c.ipis_dropped += 1);
                    }
                    out.rejected.push(Rejected { vcpu, reason });
                }
            }
        }
        out
    }

    /// Whether vCPU `i`'s APIC is a destination of `req`. A globally
    /// disabled APIC is never one.
    fn matches(&self, i: usize, req: &IpiRequest) -> bool {
        let Some(target) = self.lapics.get(i) else {
            return false;
        };
        if !target.is_hw_enabled() {
            return false;
        }
        match req.icr.destination() {
            Destination::Physical(id) => target.matches_physical(id),
            Destination::Logical(dest) => target.matches_logical(dest),
            Destination::SelfOnly => i == req.source,
            Destination::AllIncludingSelf => true,
            Destination::AllButSelf => i != req.source,
        }
    }

    fn count_sender(&mut self, source: usize, f: impl FnOnce(&mut super::LapicCounters)) {
        if let Some(src) = self.lapics.get_mut(source) {
            f(&mut src.counters);
        }
    }
}
