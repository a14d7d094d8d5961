//! APICv/AVIC per VM: which lever inhibits it on this host, and what state
//! a run can claim. No KVM capability turns APICv off per VM; userspace can
//! only cause an inhibit (design.md, "Modes"):
//! - no in-kernel irqchip: APICV_INHIBIT_REASON_ABSENT (both vendors);
//! - in-kernel PIT with reinjection: PIT_REINJ (AMD AVIC only);
//! - xAPIC ID != vcpu_id via KVM_SET_LAPIC: APIC_ID_MODIFIED (xAPIC only).
use crate::config::Irqchip;
use crate::levers::ApicvRequest;
use ipivmm_abi::ApicMode;
use ipivmm_counters::host::{ApicvSupport, HostInfo, KvmBackend};
use serde::Serialize;

/// How ipivmm inhibits APICv for one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

/// The APICv plan of a run and what the report says about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApicvPlan {
    /// What was asked.
    pub requested: ApicvRequest,
    /// The lever used.
    pub lever: InhibitLever,
    /// "active", "inhibited", "unavailable" or "unknown".
    pub effective: &'static str,
    /// Why, in words.
    pub detail: String,
}

/// Why APICv cannot be inhibited with the lever the vendor needs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApicvError {
    /// Intel's lever needs xAPIC.
    #[error("--apicv inhibit on Intel changes xAPIC IDs (APIC_ID_MODIFIED), which x2APIC ignores: use --apic xapic or --irqchip user")]
    IntelNeedsXapic,
    /// AMD's lever needs the in-kernel PIT, i.e. the full in-kernel irqchip.
    #[error("--apicv inhibit on AMD needs an in-kernel PIT (PIT_REINJ), which --irqchip split cannot have: use --irqchip kernel or user")]
    AmdNeedsKernelIrqchip,
}

/// The lever a mode pulls by itself, without `--apicv inhibit`.
fn inherent_lever(irqchip: Irqchip) -> InhibitLever {
    if irqchip == Irqchip::User {
        InhibitLever::NoIrqchip
    } else {
        InhibitLever::None
    }
}

fn host_support(host: &HostInfo) -> (&'static str, &ApicvSupport) {
    match host.backend {
        KvmBackend::KvmAmd => ("AVIC", &host.verdicts.avic),
        _ => ("APICv", &host.verdicts.apicv),
    }
}

/// Decide the lever and the state to report.
pub fn plan(
    host: Option<&HostInfo>,
    request: ApicvRequest,
    irqchip: Irqchip,
    apic: ApicMode,
) -> Result<ApicvPlan, ApicvError> {
    let make = |lever, effective, detail: String| ApicvPlan {
        requested: request,
        lever,
        effective,
        detail,
    };
    let Some(host) = host else {
        let why = "host could not be fingerprinted".to_string();
        return Ok(make(inherent_lever(irqchip), "unknown", why));
    };
    let (name, support) = host_support(host);
    if let ApicvSupport::Unavailable(why) = support {
        let noop = if request == ApicvRequest::Inhibit {
            " (--apicv inhibit is a no-op here)"
        } else {
            ""
        };
        let detail = format!("{name} unavailable: {why}{noop}");
        return Ok(make(inherent_lever(irqchip), "unavailable", detail));
    }
    if irqchip == Irqchip::User {
        let detail = format!("{name} inhibited: no in-kernel LAPIC (ABSENT)");
        return Ok(make(InhibitLever::NoIrqchip, "inhibited", detail));
    }
    if request == ApicvRequest::Host {
        let detail = format!(
            "{name} enabled by the host's module parameters; kvm_apicv_inhibit_changed counts any inhibit"
        );
        return Ok(make(InhibitLever::None, "active", detail));
    }
    let lever = match host.backend {
        KvmBackend::KvmAmd if irqchip == Irqchip::Kernel => InhibitLever::PitReinject,
        KvmBackend::KvmAmd => return Err(ApicvError::AmdNeedsKernelIrqchip),
        _ if apic == ApicMode::Xapic => InhibitLever::ApicIdModified,
        _ => return Err(ApicvError::IntelNeedsXapic),
    };
    Ok(make(
        lever,
        "inhibited",
        format!("{name} inhibited with {lever:?}"),
    ))
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
            verdicts: ipivmm_counters::host::ApicvVerdicts {
                apicv: s(apicv),
                ipiv: s(apicv),
                avic: s(apicv),
                x2avic: s(apicv),
            },
        }
    }

    #[test]
    fn no_apicv_host_reports_unavailable_and_inhibit_is_a_noop() {
        let h = host(KvmBackend::KvmPvm, false);
        let p = plan(
            Some(&h),
            ApicvRequest::Inhibit,
            Irqchip::Kernel,
            ApicMode::X2apic,
        )
        .unwrap();
        assert_eq!(p.effective, "unavailable");
        assert_eq!(p.lever, InhibitLever::None);
        assert!(
            p.detail.contains("no-op") && p.detail.contains("kvm_pvm"),
            "{}",
            p.detail
        );
    }

    #[test]
    fn levers_follow_the_vendor() {
        let intel = host(KvmBackend::KvmIntel, true);
        let amd = host(KvmBackend::KvmAmd, true);
        let inh = ApicvRequest::Inhibit;
        assert_eq!(
            plan(Some(&intel), inh, Irqchip::Kernel, ApicMode::Xapic)
                .unwrap()
                .lever,
            InhibitLever::ApicIdModified
        );
        assert_eq!(
            plan(Some(&intel), inh, Irqchip::Kernel, ApicMode::X2apic),
            Err(ApicvError::IntelNeedsXapic)
        );
        assert_eq!(
            plan(Some(&amd), inh, Irqchip::Kernel, ApicMode::X2apic)
                .unwrap()
                .lever,
            InhibitLever::PitReinject
        );
        assert_eq!(
            plan(Some(&amd), inh, Irqchip::Split, ApicMode::Xapic),
            Err(ApicvError::AmdNeedsKernelIrqchip)
        );
        let user = plan(
            Some(&amd),
            ApicvRequest::Host,
            Irqchip::User,
            ApicMode::Xapic,
        )
        .unwrap();
        assert_eq!(
            (user.lever, user.effective),
            (InhibitLever::NoIrqchip, "inhibited")
        );
        let active = plan(
            Some(&intel),
            ApicvRequest::Host,
            Irqchip::Kernel,
            ApicMode::Xapic,
        )
        .unwrap();
        assert_eq!(active.effective, "active");
    }

    #[test]
    fn apic_id_lever_shifts_ids() {
        assert_eq!(apic_id(InhibitLever::ApicIdModified, 0), 1);
        assert_eq!(apic_id(InhibitLever::PitReinject, 3), 3);
    }
}
