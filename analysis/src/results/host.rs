//! The host's interrupt-virtualization state as one run saw it: the KVM
//! module parameters read back when the run was prepared, the CPU flags,
//! and the APICv/AVIC/IPIv verdicts drawn from them. A host-wide switch
//! (`ipivmm host --set`, `sweep --host-param`) changes these between runs,
//! so every run records its own copy next to the document's fingerprint.
use ipivmm_host::facts::{ApicvVerdicts, HostInfo, KvmBackend};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `host_settings` object of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSettings {
    /// The KVM backend (`kvm_amd`, `kvm_intel`, `kvm_pvm`...).
    pub backend: KvmBackend,
    /// `module -> parameter -> value` as sysfs printed it when the run was
    /// prepared (the parameters `ipivmm host` lists).
    pub params: BTreeMap<String, BTreeMap<String, String>>,
    /// What the CPU supports: `{flag: bool}` for the virtualization flags.
    pub cpu_flags: BTreeMap<String, bool>,
    /// APICv/AVIC/IPIv verdicts from the parameters and the flags.
    pub verdicts: ApicvVerdicts,
}

impl HostSettings {
    /// The settings part of a host probe.
    pub fn of(host: &HostInfo) -> Self {
        Self {
            backend: host.backend.clone(),
            params: host.params.clone(),
            cpu_flags: host.virt_flags.clone(),
            verdicts: host.verdicts.clone(),
        }
    }

    /// The value of `module.param` as read back (`None`: not recorded).
    pub fn param(&self, key: &str) -> Option<&str> {
        let (module, param) = key.split_once('.')?;
        self.params.get(module)?.get(param).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_host::facts::ApicvSupport;

    #[test]
    fn records_params_flags_and_verdicts() {
        let no = || ApicvSupport::Unavailable("AVIC is off".into());
        let host = HostInfo {
            cpu_vendor: "AuthenticAMD".into(),
            cpu_model: "x".into(),
            cpu_family_model: (None, None),
            logical_cpus: 2,
            virt_flags: BTreeMap::from([("svm".into(), true), ("avic".into(), false)]),
            kernel_release: "6.1".into(),
            dev_kvm: Default::default(),
            backend: KvmBackend::KvmAmd,
            modules: vec!["kvm".into(), "kvm_amd".into()],
            params: BTreeMap::from([(
                "kvm_amd".into(),
                BTreeMap::from([("avic".into(), "N".into()), ("npt".into(), "Y".into())]),
            )]),
            verdicts: ApicvVerdicts {
                apicv: no(),
                ipiv: no(),
                avic: no(),
                x2avic: no(),
            },
            hostname: None,
        };
        let s = HostSettings::of(&host);
        assert_eq!(s.param("kvm_amd.npt"), Some("Y"));
        assert_eq!((s.param("kvm_amd.x"), s.param("npt")), (None, None));
        assert!(!s.cpu_flags["avic"] && s.cpu_flags["svm"]);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"backend\":\"kvm_amd\""), "{json}");
        assert_eq!(serde_json::from_str::<HostSettings>(&json).unwrap(), s);
    }
}
