//! The host: its facts (CPU, KVM backend, APICv/AVIC/IPIv verdicts, module
//! parameters; from `ipivmm-counters`) and what its KVM device can do.
mod caps;
pub(crate) mod device;
mod device_access;
pub(crate) mod fds;
pub(crate) mod load;

// The host facts a plan is executed against (`plan::Plan::execute`).
pub use caps::CapInfo;
pub use device::DeviceError;
pub use ipivmm_host::facts::{probe, HostInfo, KvmBackend};
use std::path::{Path, PathBuf};

/// The KVM device as [`KvmInfo::open`] found it: open, speaking API 12, with its
/// vCPU limits and the backend that serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvmInfo {
    /// The device node that was opened.
    pub device: PathBuf,
    /// `KVM_GET_API_VERSION` (12 on every KVM since Linux 2.6.22).
    pub api_version: i32,
    /// Most vCPUs one VM may have (`KVM_CAP_MAX_VCPUS`); a run is also
    /// limited by the xAPIC ID space ([`crate::VmConfig::validate`]).
    pub max_vcpus: usize,
    /// vCPUs KVM recommends per VM (`KVM_CAP_NR_VCPUS`).
    pub recommended_vcpus: usize,
    /// The module serving the device: kvm_intel, kvm_amd, kvm_pvm, ...
    pub backend: KvmBackend,
    /// The exits KVM lets a VM turn off (`KVM_CAP_X86_DISABLE_EXITS`):
    /// what `--disable-exits` may name here.
    pub exit_controls: crate::mode::levers::ExitControls,
}

impl std::fmt::Display for KvmInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: KVM API {}, backend {}, up to {} vCPUs per VM ({} recommended)",
            self.device.display(),
            self.api_version,
            self.backend,
            self.max_vcpus,
            self.recommended_vcpus
        )
    }
}

impl KvmInfo {
    /// Whether KVM is usable through `device`: opens it (the errors name the
    /// fix, e.g. permission denied → the `kvm` group), checks the API version
    /// and reads the vCPU limits and the backend. Creates no VM.
    ///
    /// ```
    /// use std::path::Path;
    ///
    /// match ipivmm::host::KvmInfo::open(Path::new("/dev/kvm")) {
    ///     Ok(kvm) => {
    ///         assert_eq!(kvm.api_version, 12);
    ///         assert!(kvm.max_vcpus >= 1);
    ///         println!("{kvm}");
    ///     }
    ///     Err(e) => println!("no KVM here: {e}"),
    /// }
    /// let e = ipivmm::host::KvmInfo::open(Path::new("/nonexistent/kvm")).unwrap_err();
    /// assert!(e.to_string().contains("does not exist; load the kvm module"), "{e}");
    /// ```
    pub fn open(device: &Path) -> Result<KvmInfo, DeviceError> {
        let kvm = device::open(device)?;
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .map(|t| ipivmm_host::facts::parse_cpuinfo(&t))
            .unwrap_or_default();
        let modules = ipivmm_host::facts::loaded_modules(Path::new("/sys/module"));
        Ok(KvmInfo {
            device: device.to_path_buf(),
            api_version: kvm.get_api_version(),
            max_vcpus: kvm.get_max_vcpus(),
            recommended_vcpus: kvm.get_nr_vcpus(),
            backend: ipivmm_host::facts::detect_backend(&modules, &cpu, true),
            exit_controls: crate::levers::allowed_exit_controls(|c| kvm.check_extension_raw(c)),
        })
    }
}
