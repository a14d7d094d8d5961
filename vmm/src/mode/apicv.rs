//! APICv/AVIC per VM: which lever inhibits it on this host, and what state
//! a run can claim before it runs. No KVM capability turns APICv off per VM;
//! userspace can only cause an inhibit (design.md, "Modes"):
//! - no in-kernel irqchip: APICV_INHIBIT_REASON_ABSENT (both vendors);
//! - in-kernel PIT with reinjection: PIT_REINJ (AMD AVIC only);
//! - xAPIC ID != vcpu_id via KVM_SET_LAPIC: APIC_ID_MODIFIED (xAPIC only).
//!
//! Where the host has no APICv/AVIC at all the lever is still pulled: it
//! changes nothing there, but KVM still records the inhibit
//! (`kvm_apicv_inhibit_changed`), so the run shows the lever works.
use crate::mode::{ApicMode, ApicvRequest, Irqchip, Mode};
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

/// Why APICv cannot be inhibited with the lever the vendor needs.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApicvError {
    /// Intel's lever needs xAPIC.
    #[error("--apicv inhibit (VmConfig::apicv) on Intel changes xAPIC IDs (APIC_ID_MODIFIED), which x2APIC ignores: use --apic xapic or --irqchip user (VmConfig::apic, VmConfig::irqchip)")]
    IntelNeedsXapic,
    /// AMD's lever needs the in-kernel PIT, i.e. the full in-kernel irqchip.
    #[error("--apicv inhibit (VmConfig::apicv) on AMD needs an in-kernel PIT (PIT_REINJ), which --irqchip split cannot have: use --irqchip kernel or user (VmConfig::irqchip)")]
    AmdNeedsKernelIrqchip,
}

fn host_support(host: &HostInfo) -> (&'static str, &ApicvSupport) {
    match host.backend {
        KvmBackend::KvmAmd => ("AVIC", &host.verdicts.avic),
        _ => ("APICv", &host.verdicts.apicv),
    }
}

/// The lever that inhibits APICv for `mode` on `backend`; None where no
/// vendor lever exists (kvm_pvm, an unknown backend).
fn vendor_lever(backend: &KvmBackend, mode: Mode) -> Result<Option<InhibitLever>, ApicvError> {
    Ok(match backend {
        KvmBackend::KvmAmd if mode.irqchip == Irqchip::Kernel => Some(InhibitLever::PitReinject),
        KvmBackend::KvmAmd => return Err(ApicvError::AmdNeedsKernelIrqchip),
        KvmBackend::KvmIntel if mode.apic == ApicMode::Xapic => Some(InhibitLever::ApicIdModified),
        KvmBackend::KvmIntel => return Err(ApicvError::IntelNeedsXapic),
        _ => None,
    })
}

/// Decide the lever and the state to report.
pub fn plan(host: Option<&HostInfo>, mode: Mode) -> Result<ApicvPlan, ApicvError> {
    let make = |lever, effective, detail: String| ApicvPlan {
        requested: mode.apicv,
        lever,
        effective,
        detail,
    };
    let Some(host) = host else {
        let lever = if mode.irqchip == Irqchip::User {
            InhibitLever::NoIrqchip
        } else {
            InhibitLever::None
        };
        return Ok(make(
            lever,
            ApicvState::Unknown,
            "host could not be fingerprinted".into(),
        ));
    };
    let (name, support) = host_support(host);
    let missing = match support {
        ApicvSupport::Unavailable(why) => Some(format!("{name} unavailable: {why}")),
        ApicvSupport::Available => None,
    };
    if mode.irqchip == Irqchip::User {
        let (state, detail) = match &missing {
            Some(m) => (ApicvState::Unavailable, m.clone()),
            None => (
                ApicvState::Inhibited,
                format!("{name} inhibited: no in-kernel LAPIC (ABSENT)"),
            ),
        };
        return Ok(make(InhibitLever::NoIrqchip, state, detail));
    }
    if mode.apicv == ApicvRequest::Host {
        return Ok(match missing {
            Some(m) => make(InhibitLever::None, ApicvState::Unavailable, m),
            None => make(
                InhibitLever::None,
                ApicvState::Active,
                format!("{name} enabled by the host's module parameters; kvm_apicv_inhibit_changed shows any inhibit"),
            ),
        });
    }
    let lever = vendor_lever(&host.backend, mode)?;
    Ok(match (lever, missing) {
        (None, Some(m)) => make(InhibitLever::None, ApicvState::Unavailable, format!("{m} (--apicv inhibit is a no-op here)")),
        (None, None) => make(InhibitLever::None, ApicvState::Unknown, format!("no {name} inhibit lever for {:?}", host.backend)),
        (Some(l), Some(m)) => make(
            l,
            ApicvState::Unavailable,
            format!("{m}; the {l:?} lever is applied anyway (KVM records the inhibit) but changes nothing here"),
        ),
        (Some(l), None) => make(l, ApicvState::Inhibited, format!("{name} inhibited with {l:?}")),
    })
}

/// APIC ID of vCPU `index` under `lever`.
pub fn apic_id(lever: InhibitLever, index: usize) -> u32 {
    match lever {
        InhibitLever::ApicIdModified => index as u32 + 1,
        _ => index as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::IpiPath;
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
        let p = plan(
            Some(&h),
            mode(Irqchip::Kernel, ApicMode::X2apic, ApicvRequest::Inhibit),
        )
        .unwrap();
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
        let p = plan(
            Some(&amd),
            mode(Irqchip::Kernel, ApicMode::X2apic, ApicvRequest::Inhibit),
        )
        .unwrap();
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
        let lever = |h, m| plan(Some(h), m).map(|p| p.lever);
        assert_eq!(
            lever(&intel, mode(Irqchip::Kernel, ApicMode::Xapic, inh)),
            Ok(InhibitLever::ApicIdModified)
        );
        assert_eq!(
            lever(&intel, mode(Irqchip::Kernel, ApicMode::X2apic, inh)),
            Err(ApicvError::IntelNeedsXapic)
        );
        assert_eq!(
            lever(&amd, mode(Irqchip::Kernel, ApicMode::X2apic, inh)),
            Ok(InhibitLever::PitReinject)
        );
        assert_eq!(
            lever(&amd, mode(Irqchip::Split, ApicMode::Xapic, inh)),
            Err(ApicvError::AmdNeedsKernelIrqchip)
        );
        let user = plan(
            Some(&amd),
            mode(Irqchip::User, ApicMode::Xapic, ApicvRequest::Host),
        )
        .unwrap();
        assert_eq!(
            (user.lever, user.effective),
            (InhibitLever::NoIrqchip, ApicvState::Inhibited)
        );
        let active = plan(
            Some(&intel),
            mode(Irqchip::Kernel, ApicMode::Xapic, ApicvRequest::Host),
        )
        .unwrap();
        assert_eq!(active.effective, ApicvState::Active);
        assert_eq!(
            serde_json::to_string(&active.effective).unwrap(),
            "\"active\""
        );
    }

    #[test]
    fn apic_id_lever_shifts_ids() {
        assert_eq!(apic_id(InhibitLever::ApicIdModified, 0), 1);
        assert_eq!(apic_id(InhibitLever::PitReinject, 3), 3);
    }
}
