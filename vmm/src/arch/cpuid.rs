//! Per-vCPU CPUID, shaped from KVM_GET_SUPPORTED_CPUID.
//!
//! The guest learns its APIC ID, whether x2APIC exists, and which KVM
//! paravirtual features it may use only from CPUID, so these bits are the
//! levers for the `--apic`, `--ipi pv` and `--realtime-hint` modes.
use crate::mode::lever_table::KvmCpuidBits;
use kvm_bindings::kvm_cpuid_entry2;

/// CPUID.1:ECX bit 21, x2APIC.
pub(crate) const X2APIC_BIT: u32 = 1 << 21;
/// CPUID.1:ECX bit 31, running under a hypervisor.
pub(crate) const HYPERVISOR_BIT: u32 = 1 << 31;
/// CPUID.1:EDX bit 9, on-chip APIC.
pub(crate) const APIC_BIT: u32 = 1 << 9;
/// KVM feature leaf.
pub(crate) const KVM_CPUID_FEATURES: u32 = 0x4000_0001;
/// KVM_FEATURE_PV_SEND_IPI (EAX bit 11 of 0x40000001).
pub(crate) const KVM_FEATURE_PV_SEND_IPI: u32 = 1 << 11;

/// What one vCPU's CPUID must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuidShape {
    /// This vCPU's APIC ID.
    pub apic_id: u32,
    /// vCPUs in the VM.
    pub vcpu_count: u32,
    /// Advertise x2APIC.
    pub x2apic: bool,
    /// Advertise KVM_FEATURE_PV_SEND_IPI.
    pub pv_send_ipi: bool,
    /// The bits of 0x40000001 the levers decide (`--realtime-hint`, the
    /// PV features: [`crate::mode::lever_table::Effect`]): each set when
    /// its lever is on and cleared otherwise, whatever KVM offers, so the
    /// guest sees exactly what the configuration says.
    pub levers: KvmCpuidBits,
}

/// Errors shaping CPUID.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuidError {
    /// The host's KVM does not expose the KVM paravirtual leaves.
    #[error("KVM_GET_SUPPORTED_CPUID has no leaf {0:#x}: this KVM cannot advertise {1}")]
    MissingLeaf(u32, &'static str),
}

/// Rewrite `entries` (from KVM_GET_SUPPORTED_CPUID) for one vCPU.
pub fn shape(entries: &mut [kvm_cpuid_entry2], s: &CpuidShape) -> Result<(), CpuidError> {
    let mut saw_kvm_features = false;
    for e in entries.iter_mut() {
        match e.function {
            1 => {
                let logical = s.vcpu_count.min(0xff);
                e.ebx = (e.ebx & 0x0000_ffff) | (logical << 16) | ((s.apic_id & 0xff) << 24);
                e.ecx |= HYPERVISOR_BIT;
                if s.x2apic {
                    e.ecx |= X2APIC_BIT;
                } else {
                    e.ecx &= !X2APIC_BIT;
                }
                e.edx |= APIC_BIT;
            }
            // Extended topology: EDX is the x2APIC ID on every subleaf.
            0xb | 0x1f => e.edx = s.apic_id,
            KVM_CPUID_FEATURES => {
                saw_kvm_features = true;
                set_bit(&mut e.eax, KVM_FEATURE_PV_SEND_IPI, s.pv_send_ipi);
                let l = s.levers;
                e.eax = (e.eax & !l.eax_mask) | (l.eax & l.eax_mask);
                e.edx = (e.edx & !l.edx_mask) | (l.edx & l.edx_mask);
            }
            _ => {}
        }
    }
    if !saw_kvm_features && (s.pv_send_ipi || s.levers.eax != 0 || s.levers.edx != 0) {
        let what = if s.pv_send_ipi {
            "PV_SEND_IPI"
        } else {
            "the bits its levers ask for (--realtime-hint, --pv-*)"
        };
        return Err(CpuidError::MissingLeaf(KVM_CPUID_FEATURES, what));
    }
    Ok(())
}

fn set_bit(reg: &mut u32, bit: u32, on: bool) {
    if on {
        *reg |= bit;
    } else {
        *reg &= !bit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The bits of the kernel's uapi kvm_para.h, stated here apart from the
    // lever table's, which the tests hold to them.
    /// KVM_HINTS_REALTIME (EDX bit 0 of 0x40000001): vCPUs are never preempted.
    const KVM_HINTS_REALTIME: u32 = 1 << 0;
    /// KVM_FEATURE_PV_EOI (EAX bit 6 of 0x40000001; the `--pv-eoi` lever).
    const KVM_FEATURE_PV_EOI: u32 = 1 << 6;
    /// KVM_FEATURE_PV_TLB_FLUSH (EAX bit 9 of 0x40000001; `--pv-tlb-flush`).
    const KVM_FEATURE_PV_TLB_FLUSH: u32 = 1 << 9;
    /// KVM_FEATURE_PV_SCHED_YIELD (EAX bit 13 of 0x40000001; `--pv-sched-yield`).
    const KVM_FEATURE_PV_SCHED_YIELD: u32 = 1 << 13;

    /// The KVM feature bits (0x40000001 EAX) a supported CPUID offers; 0
    /// without the leaf.
    fn kvm_features(entries: &[kvm_cpuid_entry2]) -> u32 {
        entries
            .iter()
            .find(|e| e.function == KVM_CPUID_FEATURES)
            .map_or(0, |e| e.eax)
    }

    fn entry(function: u32, index: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            eax: 0,
            ebx: 0x0000_0800,
            ecx: X2APIC_BIT,
            edx: 0,
            ..Default::default()
        }
    }

    fn supported() -> Vec<kvm_cpuid_entry2> {
        let mut kvm = entry(KVM_CPUID_FEATURES, 0);
        kvm.eax = KVM_FEATURE_PV_SEND_IPI | 1;
        vec![
            entry(0, 0),
            entry(1, 0),
            entry(0xb, 0),
            entry(0xb, 1),
            entry(0x1f, 0),
            kvm,
        ]
    }

    fn shape_of(apic_id: u32, x2apic: bool, pv: bool, rt: bool) -> Vec<kvm_cpuid_entry2> {
        let mut e = supported();
        let s = CpuidShape {
            apic_id,
            vcpu_count: 4,
            x2apic,
            pv_send_ipi: pv,
            levers: crate::mode::Levers {
                realtime_hint: rt,
                ..Default::default()
            }
            .kvm_cpuid_bits(),
        };
        shape(&mut e, &s).unwrap();
        e
    }

    #[test]
    fn apic_id_lands_in_leaf_1_b_and_1f() {
        let e = shape_of(3, true, false, false);
        assert_eq!(e[1].ebx >> 24, 3);
        assert_eq!((e[1].ebx >> 16) & 0xff, 4);
        assert_eq!(e[1].ebx & 0xffff, 0x0800, "CLFLUSH size preserved");
        assert_eq!(e[2].edx, 3);
        assert_eq!(e[3].edx, 3);
        assert_eq!(e[4].edx, 3);
    }

    #[test]
    fn x2apic_bit_follows_mode() {
        assert_ne!(shape_of(0, true, false, false)[1].ecx & X2APIC_BIT, 0);
        assert_eq!(shape_of(0, false, false, false)[1].ecx & X2APIC_BIT, 0);
        assert_ne!(shape_of(0, false, false, false)[1].ecx & HYPERVISOR_BIT, 0);
    }

    #[test]
    fn pv_ipi_and_realtime_hint_follow_the_request() {
        let off = shape_of(0, true, false, false);
        assert_eq!(off[5].eax & KVM_FEATURE_PV_SEND_IPI, 0);
        assert_eq!(off[5].eax & 1, 1, "other KVM features untouched");
        let on = shape_of(0, true, true, true);
        assert_ne!(on[5].eax & KVM_FEATURE_PV_SEND_IPI, 0);
        assert_eq!(on[5].edx & KVM_HINTS_REALTIME, 1);
    }

    #[test]
    fn missing_kvm_leaf_is_an_error_only_when_needed() {
        let mut e = vec![entry(1, 0)];
        let mut s = CpuidShape {
            apic_id: 0,
            vcpu_count: 1,
            x2apic: false,
            pv_send_ipi: false,
            levers: KvmCpuidBits::default(),
        };
        assert!(shape(&mut e, &s).is_ok());
        s.pv_send_ipi = true;
        assert!(matches!(
            shape(&mut e, &s),
            Err(CpuidError::MissingLeaf(_, "PV_SEND_IPI"))
        ));
    }

    #[test]
    fn pv_feature_levers_set_exactly_their_bits() {
        use crate::mode::Levers;
        // The bits of the kernel's uapi kvm_para.h.
        assert_eq!(
            [
                KVM_FEATURE_PV_EOI,
                KVM_FEATURE_PV_TLB_FLUSH,
                KVM_FEATURE_PV_SCHED_YIELD
            ],
            [1 << 6, 1 << 9, 1 << 13]
        );
        let all = KVM_FEATURE_PV_EOI | KVM_FEATURE_PV_TLB_FLUSH | KVM_FEATURE_PV_SCHED_YIELD;
        let mut offered = supported();
        offered[5].eax |= all;
        for (levers, want) in [
            (Levers::default(), 0),
            (
                Levers {
                    pv_eoi: true,
                    ..Levers::default()
                },
                KVM_FEATURE_PV_EOI,
            ),
            (
                Levers {
                    pv_tlb_flush: true,
                    pv_sched_yield: true,
                    ..Levers::default()
                },
                KVM_FEATURE_PV_TLB_FLUSH | KVM_FEATURE_PV_SCHED_YIELD,
            ),
        ] {
            let mut e = offered.clone();
            let s = CpuidShape {
                apic_id: 0,
                vcpu_count: 2,
                x2apic: true,
                pv_send_ipi: false,
                levers: levers.kvm_cpuid_bits(),
            };
            shape(&mut e, &s).unwrap();
            assert_eq!(e[5].eax & all, want, "{levers:?}");
            assert_eq!(e[5].eax & 1, 1, "other KVM features untouched");
            assert_eq!(kvm_features(&e) & all, want);
        }
        assert_eq!(kvm_features(&[entry(1, 0)]), 0);
    }
}
