//! A sweep: the cross product of modes and workloads, as data. Planning is
//! pure (unit-tested); `commands::sweep` runs the plan.
use crate::apicv;
use crate::config::{self, apic_name, ipi_name, Irqchip, VmConfig};
use crate::levers::ApicvRequest;
use ipivmm_abi::{ApicMode, IpiPath, Workload};
use ipivmm_counters::host::{HostInfo, KvmBackend};

/// The dimensions a sweep crosses.
#[derive(Clone, Debug)]
pub struct SweepSpec {
    /// Interrupt controllers.
    pub irqchips: Vec<Irqchip>,
    /// APIC modes.
    pub apics: Vec<ApicMode>,
    /// IPI paths.
    pub ipis: Vec<IpiPath>,
    /// APICv requests.
    pub apicv: Vec<ApicvRequest>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// vCPU placements: (label, CPU list); one empty entry = not pinned.
    pub placements: Vec<(String, Vec<usize>)>,
    /// Everything else (vCPUs, iterations, levers...).
    pub base: VmConfig,
}

impl Default for SweepSpec {
    fn default() -> Self {
        Self {
            irqchips: vec![Irqchip::Kernel, Irqchip::Split, Irqchip::User],
            apics: vec![ApicMode::Xapic, ApicMode::X2apic],
            ipis: vec![IpiPath::Icr, IpiPath::Pv],
            apicv: vec![ApicvRequest::Host],
            workloads: Workload::ALL.to_vec(),
            placements: vec![(String::new(), Vec::new())],
            base: VmConfig {
                iterations: 100,
                warmup: 10,
                ..Default::default()
            },
        }
    }
}

/// One run of the plan.
#[derive(Clone, Debug)]
pub struct PlannedRun {
    /// "kernel/x2apic/icr" and any extra dimension.
    pub label: String,
    /// The run's configuration.
    pub config: VmConfig,
}

/// A combination that cannot run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The combination.
    pub label: String,
    /// Why.
    pub reason: String,
}

/// Label of one combination.
pub fn label(
    irqchip: Irqchip,
    apic: ApicMode,
    ipi: IpiPath,
    apicv: ApicvRequest,
    place: &str,
    w: Workload,
) -> String {
    let mut l = format!("{}/{}/{}", irqchip.name(), apic_name(apic), ipi_name(ipi));
    if apicv == ApicvRequest::Inhibit {
        l.push_str(" apicv-inhibit");
    }
    if !place.is_empty() {
        l.push(' ');
        l.push_str(place);
    }
    format!("{} {l}", w.name())
}

/// Why a combination cannot run on `host`, if it cannot.
pub fn skip_reason(c: &VmConfig, host: Option<&HostInfo>) -> Option<String> {
    if c.ipi == IpiPath::Pv && c.irqchip == Irqchip::User {
        return Some("PV IPIs need the in-kernel LAPIC (KVM_HC_SEND_IPI is handled by KVM)".into());
    }
    if c.ipi == IpiPath::Pv && host.is_some_and(|h| h.backend == KvmBackend::KvmPvm) {
        return Some(
            "hypercalls never return under kvm_pvm (vmcall/vmmcall loop in the emulator)".into(),
        );
    }
    if c.vcpus < config::min_vcpus(c.workload) {
        return Some(format!(
            "{} needs at least {} vCPUs",
            c.workload.name(),
            config::min_vcpus(c.workload)
        ));
    }
    if c.apicv == ApicvRequest::Inhibit && c.irqchip == Irqchip::User {
        return Some("APICv is already inhibited without an in-kernel irqchip (ABSENT)".into());
    }
    if let Err(e) = apicv::plan(host, c.apicv, c.irqchip, c.apic) {
        return Some(e.to_string());
    }
    None
}

/// Expand `spec` into runs and skips, workloads outermost so each workload's
/// modes run side by side.
pub fn plan(spec: &SweepSpec, host: Option<&HostInfo>) -> (Vec<PlannedRun>, Vec<Skip>) {
    let (mut runs, mut skips) = (Vec::new(), Vec::new());
    for &workload in &spec.workloads {
        for &irqchip in &spec.irqchips {
            for &apic in &spec.apics {
                for &ipi in &spec.ipis {
                    for &apicv in &spec.apicv {
                        for (place, pin) in &spec.placements {
                            let config = VmConfig {
                                irqchip,
                                apic,
                                ipi,
                                apicv,
                                workload,
                                pin: pin.clone(),
                                ..spec.base.clone()
                            };
                            let label = label(irqchip, apic, ipi, apicv, place, workload);
                            match skip_reason(&config, host) {
                                Some(reason) => skips.push(Skip { label, reason }),
                                None => runs.push(PlannedRun { label, config }),
                            }
                        }
                    }
                }
            }
        }
    }
    (runs, skips)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_counters::host::{ApicvSupport, ApicvVerdicts};

    fn pvm_host() -> HostInfo {
        let no = || ApicvSupport::Unavailable("kvm_pvm backend".into());
        HostInfo {
            cpu_vendor: "AuthenticAMD".into(),
            cpu_model: "x".into(),
            cpu_family_model: (None, None),
            logical_cpus: 2,
            virt_flags: Default::default(),
            kernel_release: "6.18".into(),
            dev_kvm: Default::default(),
            backend: KvmBackend::KvmPvm,
            modules: vec![],
            params: Default::default(),
            verdicts: ApicvVerdicts {
                apicv: no(),
                ipiv: no(),
                avic: no(),
                x2avic: no(),
            },
        }
    }

    #[test]
    fn default_sweep_skips_pv_here_with_reasons() {
        let (runs, skips) = plan(&SweepSpec::default(), Some(&pvm_host()));
        // 7 workloads x 3 irqchips x 2 APIC modes run with ICR writes...
        assert_eq!(runs.len(), 7 * 3 * 2);
        assert!(runs.iter().all(|r| r.config.ipi == IpiPath::Icr));
        // ...and every PV combination is skipped, for the right reason.
        assert_eq!(skips.len(), 7 * 3 * 2);
        for s in &skips {
            let user = s.label.contains("user/");
            assert!(
                if user {
                    s.reason.contains("in-kernel LAPIC")
                } else {
                    s.reason.contains("kvm_pvm")
                },
                "{s:?}"
            );
        }
        // Workloads stay together.
        assert!(runs[..6]
            .iter()
            .all(|r| r.config.workload == Workload::Pingpong));
    }

    #[test]
    fn too_few_vcpus_and_redundant_inhibit_are_skipped() {
        let spec = SweepSpec {
            irqchips: vec![Irqchip::User],
            apics: vec![ApicMode::X2apic],
            ipis: vec![IpiPath::Icr],
            apicv: vec![ApicvRequest::Host, ApicvRequest::Inhibit],
            workloads: vec![Workload::SelfIpi, Workload::Broadcast],
            base: VmConfig {
                vcpus: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let (runs, skips) = plan(&spec, Some(&pvm_host()));
        assert_eq!(runs.len(), 1, "self-ipi with host APICv runs on one vCPU");
        assert!(skips.iter().any(|s| s.reason.contains("already inhibited")));
        assert!(skips
            .iter()
            .any(|s| s.reason.contains("broadcast needs at least 2 vCPUs")));
    }
}
