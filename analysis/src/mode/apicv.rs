//! APICv/AVIC per VM: which lever inhibits it on this host, and what state
//! a run can claim before it runs. No KVM capability turns APICv off per VM;
//! userspace can only cause an inhibit (design.md, "Modes"):
//! - no in-kernel irqchip: APICV_INHIBIT_REASON_ABSENT (both vendors);
//! - in-kernel PIT with reinjection: PIT_REINJ (AMD AVIC only);
//! - xAPIC ID != vcpu_id via KVM_SET_LAPIC: APIC_ID_MODIFIED (xAPIC only);
//! - a Hyper-V SynIC SINT with AutoEOI: HYPERV (both vendors, any APIC mode,
//!   any in-kernel LAPIC). `hyperv.c: synic_update_vector` (6.1 and 6.12)
//!   sets it VM-wide as soon as one vCPU's SynIC has an unmasked AutoEOI
//!   SINT, because AutoEOI needs KVM to inject interrupts by hand. ipivmm
//!   activates vCPU 0's SynIC (KVM_ENABLE_CAP(KVM_CAP_HYPERV_SYNIC2) on the
//!   vCPU, which needs an in-kernel irqchip) and writes SINT0 from the host
//!   (KVM_SET_MSRS, host-initiated: no Hyper-V CPUID needed); nothing in the
//!   guest ever signals it. It is the lever where the vendor one cannot work:
//!   Intel x2APIC (x2APIC IDs are read-only) and AMD split irqchip (no PIT).
//!
//! Where the host has no APICv/AVIC at all the lever is still pulled: it
//! changes nothing there, but KVM still records the inhibit
//! (`kvm_apicv_inhibit_changed`), so the run shows the lever works.
use crate::mode::{ApicMode, ApicvRequest, Mode};
use ipivmm_host::facts::{ApicvSupport, HostInfo, KvmBackend};
use serde::{Deserialize, Serialize};

/// How ipivmm inhibits APICv for one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InhibitLever {
    /// Nothing done.
    None,
    /// No in-kernel irqchip (`--irqchip user`).
    NoIrqchip,
    /// An in-kernel PIT with reinjection (AMD).
    PitReinject,
    /// Every xAPIC ID set to vcpu_id + 1 (Intel, xAPIC).
    ApicIdModified,
    /// vCPU 0's Hyper-V SynIC SINT0 unmasked with AutoEOI (Intel x2APIC,
    /// AMD split irqchip): [`InhibitLever::synic_sint`].
    HypervSynic,
}

/// SINT bit 16: masked (KVM ignores a masked SINT's AutoEOI).
#[cfg(test)]
const SINT_MASKED: u64 = 1 << 16;
/// SINT bit 17: AutoEOI.
const SINT_AUTO_EOI: u64 = 1 << 17;
/// The vector of the SynIC lever's SINT: 0x1F is valid for SynIC (KVM
/// counts vectors 16..=255, HV_SYNIC_FIRST_VALID_VECTOR) yet below every
/// vector a fixed IPI of ipivmm may use (0x20..=0xFE, `VmConfig::validate`),
/// so no interrupt of the run is ever auto-EOIed.
pub(crate) const SYNIC_LEVER_VECTOR: u8 = 0x1f;

impl InhibitLever {
    /// InhibitLever::HV_X64_MSR_SINT0 (Hyper-V TLFS: synthetic interrupt source 0), the
    /// MSR the [`InhibitLever::HypervSynic`] lever writes.
    pub const HV_X64_MSR_SINT0: u32 = 0x4000_0090;

    /// The SINT0 value of the SynIC lever: unmasked, AutoEOI, vector 0x1F
    /// (valid for SynIC, below every vector a fixed IPI of ipivmm uses).
    pub const fn synic_sint() -> u64 {
        SYNIC_LEVER_VECTOR as u64 | SINT_AUTO_EOI
    }
}

/// What a run can claim about APICv/AVIC before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ApicvState {
    /// Enabled by the host and not inhibited by ipivmm.
    Active,
    /// Inhibited by the lever.
    Inhibited,
    /// The host has none (or it is off).
    Unavailable,
    /// The host could not be fingerprinted.
    Unknown,
}

/// The APICv plan of a run and what the report says about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApicvPlan {
    /// What was asked.
    pub requested: ApicvRequest,
    /// The lever used.
    pub lever: InhibitLever,
    /// The state the plan leads to.
    pub effective: ApicvState,
    /// Why, in words.
    pub detail: String,
}

impl Default for ApicvPlan {
    /// What a results file written before the plan existed reads as.
    fn default() -> Self {
        Self {
            requested: ApicvRequest::Host,
            lever: InhibitLever::None,
            effective: ApicvState::Unknown,
            detail: "not recorded".into(),
        }
    }
}

fn host_support(host: &HostInfo) -> (&'static str, &ApicvSupport) {
    match host.backend {
        KvmBackend::KvmAmd => ("AVIC", &host.verdicts.avic),
        _ => ("APICv", &host.verdicts.apicv),
    }
}

/// The lever that inhibits APICv for `mode` (an in-kernel LAPIC) on
/// `backend`: the vendor's own where it works (the PIT on AMD's full
/// in-kernel irqchip, modified xAPIC IDs on Intel xAPIC), the SynIC one
/// where it cannot; None where no vendor lever exists (kvm_pvm, an unknown
/// backend).
fn vendor_lever(backend: &KvmBackend, mode: Mode) -> Option<InhibitLever> {
    match backend {
        KvmBackend::KvmAmd if mode.irqchip.pit_in_kernel() => Some(InhibitLever::PitReinject),
        KvmBackend::KvmIntel if mode.apic == ApicMode::Xapic => Some(InhibitLever::ApicIdModified),
        KvmBackend::KvmAmd | KvmBackend::KvmIntel => Some(InhibitLever::HypervSynic),
        _ => None,
    }
}

impl ApicvPlan {
    /// Decide the lever and the state to report. Every mode has one: an
    /// in-kernel LAPIC can always be inhibited on kvm_intel and kvm_amd.
    pub fn of(host: Option<&HostInfo>, mode: Mode) -> ApicvPlan {
        let make = |lever, effective, detail: String| ApicvPlan {
            requested: mode.apicv,
            lever,
            effective,
            detail,
        };
        let Some(host) = host else {
            let lever = if !mode.irqchip.lapic_in_kernel() {
                InhibitLever::NoIrqchip
            } else {
                InhibitLever::None
            };
            return make(
                lever,
                ApicvState::Unknown,
                "host could not be fingerprinted".into(),
            );
        };
        let (name, support) = host_support(host);
        let missing = match support {
            ApicvSupport::Unavailable(why) => Some(format!("{name} unavailable: {why}")),
            ApicvSupport::Available => None,
        };
        if !mode.irqchip.lapic_in_kernel() {
            let (state, detail) = match &missing {
                Some(m) => (ApicvState::Unavailable, m.clone()),
                None => (
                    ApicvState::Inhibited,
                    format!("{name} inhibited: no in-kernel LAPIC (ABSENT)"),
                ),
            };
            return make(InhibitLever::NoIrqchip, state, detail);
        }
        if mode.apicv == ApicvRequest::Host {
            return match missing {
                Some(m) => make(InhibitLever::None, ApicvState::Unavailable, m),
                None => make(
                    InhibitLever::None,
                    ApicvState::Active,
                    format!("{name} enabled by the host's module parameters; kvm_apicv_inhibit_changed shows any inhibit"),
                ),
            };
        }
        let lever = vendor_lever(&host.backend, mode);
        match (lever, missing) {
            (None, Some(m)) => make(InhibitLever::None, ApicvState::Unavailable, format!("{m} (--apicv inhibit is a no-op here)")),
            (None, None) => make(InhibitLever::None, ApicvState::Unknown, format!("no {name} inhibit lever for {:?}", host.backend)),
            (Some(l), Some(m)) => make(
                l,
                ApicvState::Unavailable,
                format!("{m}; the {l:?} lever is applied anyway (KVM records the inhibit) but changes nothing here"),
            ),
            (Some(l), None) => make(l, ApicvState::Inhibited, format!("{name} inhibited with {l:?}")),
        }
    }
}

impl InhibitLever {
    /// APIC ID of vCPU `index` under this lever.
    pub fn apic_id(self, index: usize) -> u32 {
        match self {
            InhibitLever::ApicIdModified => index as u32 + 1,
            _ => index as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::{IpiPath, Irqchip};
    use std::collections::BTreeMap;

    fn host(backend: KvmBackend, apicv: bool) -> HostInfo {
        let s = |on: bool| {
            if on {
                ApicvSupport::Available
            } else {
                ApicvSupport::Unavailable("kvm_pvm backend: no VMX/SVM".into())
            }
        };
        HostInfo {
            cpu_vendor: "x".into(),
            cpu_model: "x".into(),
            cpu_family_model: (None, None),
            logical_cpus: 2,
            virt_flags: BTreeMap::new(),
            kernel_release: "6.18".into(),
            dev_kvm: Default::default(),
            backend,
            modules: vec![],
            params: BTreeMap::new(),
            verdicts: ipivmm_host::facts::ApicvVerdicts {
                apicv: s(apicv),
                ipiv: s(apicv),
                avic: s(apicv),
                x2avic: s(apicv),
            },
            hostname: None,
        }
    }

    fn mode(irqchip: Irqchip, apic: ApicMode, apicv: ApicvRequest) -> Mode {
        Mode {
            irqchip,
            apic,
            ipi: IpiPath::Icr,
            apicv,
        }
    }

    #[test]
    fn no_apicv_host_reports_unavailable_and_inhibit_is_a_noop() {
        let h = host(KvmBackend::KvmPvm, false);
        let p = ApicvPlan::of(
            Some(&h),
            mode(Irqchip::Kernel, ApicMode::X2apic, ApicvRequest::Inhibit),
        );
        assert_eq!(p.effective, ApicvState::Unavailable);
        assert_eq!(p.lever, InhibitLever::None);
        assert!(
            p.detail.contains("no-op") && p.detail.contains("kvm_pvm"),
            "{}",
            p.detail
        );
    }

    #[test]
    fn vendor_lever_is_pulled_even_without_apicv() {
        let amd = host(KvmBackend::KvmAmd, false);
        let p = ApicvPlan::of(
            Some(&amd),
            mode(Irqchip::Kernel, ApicMode::X2apic, ApicvRequest::Inhibit),
        );
        assert_eq!(
            (p.lever, p.effective),
            (InhibitLever::PitReinject, ApicvState::Unavailable)
        );
        assert!(p.detail.contains("applied anyway"), "{}", p.detail);
    }

    #[test]
    fn levers_follow_the_vendor() {
        let intel = host(KvmBackend::KvmIntel, true);
        let amd = host(KvmBackend::KvmAmd, true);
        let inh = ApicvRequest::Inhibit;
        let lever = |h, m| ApicvPlan::of(Some(h), m).lever;
        assert_eq!(
            lever(&intel, mode(Irqchip::Kernel, ApicMode::Xapic, inh)),
            InhibitLever::ApicIdModified
        );
        assert_eq!(
            lever(&amd, mode(Irqchip::Kernel, ApicMode::X2apic, inh)),
            InhibitLever::PitReinject
        );
        let user = ApicvPlan::of(
            Some(&amd),
            mode(Irqchip::User, ApicMode::Xapic, ApicvRequest::Host),
        );
        assert_eq!(
            (user.lever, user.effective),
            (InhibitLever::NoIrqchip, ApicvState::Inhibited)
        );
        let active = ApicvPlan::of(
            Some(&intel),
            mode(Irqchip::Kernel, ApicMode::Xapic, ApicvRequest::Host),
        );
        assert_eq!(active.effective, ApicvState::Active);
        assert_eq!(
            serde_json::to_string(&active.effective).unwrap(),
            "\"active\""
        );
    }

    #[test]
    fn synic_lever_where_the_vendor_lever_cannot_work() {
        let intel = host(KvmBackend::KvmIntel, true);
        let amd = host(KvmBackend::KvmAmd, true);
        let inh = ApicvRequest::Inhibit;
        // Intel x2APIC (either in-kernel irqchip) and AMD split: every
        // in-kernel-LAPIC combination can be inhibited, nothing is refused.
        for (h, m) in [
            (&intel, mode(Irqchip::Kernel, ApicMode::X2apic, inh)),
            (&intel, mode(Irqchip::Split, ApicMode::X2apic, inh)),
            (&amd, mode(Irqchip::Split, ApicMode::Xapic, inh)),
            (&amd, mode(Irqchip::Split, ApicMode::X2apic, inh)),
        ] {
            let p = ApicvPlan::of(Some(h), m);
            assert_eq!(
                (p.lever, p.effective),
                (InhibitLever::HypervSynic, ApicvState::Inhibited),
                "{m:?}"
            );
            assert!(p.detail.contains("HypervSynic"), "{}", p.detail);
        }
        // The SynIC lever keeps the APIC IDs (x2APIC IDs cannot change).
        assert_eq!(InhibitLever::HypervSynic.apic_id(5), 5);
        assert_eq!(
            serde_json::to_string(&InhibitLever::HypervSynic).unwrap(),
            "\"hyperv_synic\""
        );
    }

    #[test]
    fn synic_sint_is_unmasked_auto_eoi_on_a_vector_no_ipi_uses() {
        let v = InhibitLever::synic_sint();
        assert_eq!(v & SINT_MASKED, 0, "a masked SINT does not count");
        assert_ne!(v & SINT_AUTO_EOI, 0, "the inhibit needs AutoEOI");
        let vector = (v & 0xff) as u8;
        // KVM ignores SINT vectors below 16 (HV_SYNIC_FIRST_VALID_VECTOR).
        assert!(vector >= 16);
        // Below every vector a fixed IPI or the payload's barrier/spurious
        // vectors can take, so nothing of the run is auto-EOIed.
        assert!(vector < 0x20);
        assert_ne!(
            vector,
            ipivmm_abi::barrier_vector(ipivmm_abi::DEFAULT_IPI_VECTOR)
        );
        assert_ne!(vector, ipivmm_abi::SPURIOUS_VECTOR);
        // (The machine's VmConfig::validate refuses it as an IPI vector:
        // its test `the_synic_vector_is_no_ipi_vector`.)
        // Nothing but vector and AutoEOI (no polling bit 18, no reserved bits).
        assert_eq!(v & !(0xff | SINT_AUTO_EOI), 0);
    }

    #[test]
    fn apic_id_lever_shifts_ids() {
        assert_eq!(InhibitLever::ApicIdModified.apic_id(0), 1);
        assert_eq!(InhibitLever::PitReinject.apic_id(3), 3);
    }
}
