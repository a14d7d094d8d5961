//! Host facts for `ipivmm host` and the JSON host fingerprint.
//!
//! Everything is read from /proc/cpuinfo, uname, /sys/module and /dev/kvm;
//! the interpretation (flag parsing, backend detection, APICv/IPIv/AVIC
//! verdicts) is done by pure functions over those texts.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// CPU flags that matter for interrupt virtualization.
pub const VIRT_FLAGS: &[&str] = &[
    "vmx",
    "svm",
    "hypervisor",
    "x2apic",
    "tsc_deadline_timer",
    "avic",
    "x2avic",
    "npt",
    "vgif",
    "v_vmsave_vmload",
    "ept",
    "vpid",
    "flexpriority",
    "tpr_shadow",
    "vnmi",
];

/// Module parameters recorded in the fingerprint (when present).
pub const INTERESTING_PARAMS: &[(&str, &[&str])] = &[
    (
        "kvm",
        &[
            "halt_poll_ns",
            "halt_poll_ns_grow",
            "halt_poll_ns_grow_start",
            "halt_poll_ns_shrink",
            "lapic_timer_advance",
            "lapic_timer_advance_ns",
            "min_timer_period_us",
            "pi_inject_timer",
            "enable_pmu",
            "ignore_msrs",
            "force_emulation_prefix",
            "nx_huge_pages",
        ],
    ),
    (
        "kvm_intel",
        &[
            "enable_apicv",
            "enable_ipiv",
            "flexpriority",
            "ept",
            "vpid",
            "nested",
            "ple_gap",
            "ple_window",
            "preemption_timer",
            "enable_shadow_vmcs",
            "vnmi",
        ],
    ),
    (
        "kvm_amd",
        &[
            "avic",
            "force_avic",
            "enable_ipiv",
            "npt",
            "nested",
            "vgif",
            "vls",
            "pause_filter_count",
            "pause_filter_thresh",
            "sev",
        ],
    ),
    ("kvm_pvm", &["no_x2apic", "force"]),
];

/// Which KVM implementation backs /dev/kvm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvmBackend {
    /// kvm_intel (VMX).
    KvmIntel,
    /// kvm_amd (SVM).
    KvmAmd,
    /// kvm_pvm (software, no VMX/SVM).
    KvmPvm,
    /// /dev/kvm works but no known vendor module is loaded and the CPU has no
    /// VMX/SVM flag (nested under another hypervisor or an unknown backend).
    NestedOrUnknown,
    /// No usable KVM.
    None,
}

impl std::fmt::Display for KvmBackend {
    /// The module's name (`kvm_amd`...), as in the JSON.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::KvmIntel => "kvm_intel",
            Self::KvmAmd => "kvm_amd",
            Self::KvmPvm => "kvm_pvm",
            Self::NestedOrUnknown => "nested_or_unknown",
            Self::None => "none",
        })
    }
}

/// Whether a hardware interrupt-virtualization feature can be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum ApicvSupport {
    /// Enabled by the host.
    Available,
    /// Not usable, and why.
    Unavailable(String),
}

impl ApicvSupport {
    /// `true` for [`ApicvSupport::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Self::Available)
    }
}

/// Verdicts for every hardware mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApicvVerdicts {
    /// Intel APIC virtualization (kvm_intel.enable_apicv).
    pub apicv: ApicvSupport,
    /// IPI virtualization: Intel IPIv (kvm_intel.enable_ipiv), or AMD
    /// AVIC IPI acceleration (kvm_amd.enable_ipiv).
    pub ipiv: ApicvSupport,
    /// AMD AVIC (kvm_amd.avic).
    pub avic: ApicvSupport,
    /// AMD x2AVIC (AVIC for x2APIC guests; CPU flag `x2avic`).
    pub x2avic: ApicvSupport,
}

/// State of /dev/kvm.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevKvm {
    /// The node exists.
    pub present: bool,
    /// It opened read-write.
    pub openable: bool,
    /// Why it did not open.
    pub error: Option<String>,
}

/// CPU identity from /proc/cpuinfo (first processor).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// `vendor_id`, e.g. `AuthenticAMD`.
    pub vendor: String,
    /// `model name`.
    pub model_name: String,
    /// `cpu family`.
    pub family: Option<u32>,
    /// `model`.
    pub model: Option<u32>,
    /// Number of `processor` entries.
    pub logical_cpus: u32,
    /// All `flags`.
    pub flags: Vec<String>,
    /// All `vmx flags` (Intel, Linux 5.8+), empty elsewhere.
    pub vmx_flags: Vec<String>,
}

impl CpuInfo {
    /// Whether `flag` is in `flags` or `vmx flags`.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().chain(&self.vmx_flags).any(|f| f == flag)
    }
}

/// Host facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// CPU identity (flags list trimmed to [`VIRT_FLAGS`] in `virt_flags`).
    pub cpu_vendor: String,
    /// CPU model name.
    pub cpu_model: String,
    /// CPU family/model numbers.
    pub cpu_family_model: (Option<u32>, Option<u32>),
    /// Logical CPUs.
    pub logical_cpus: u32,
    /// Which of [`VIRT_FLAGS`] are present.
    pub virt_flags: BTreeMap<String, bool>,
    /// `uname -r`.
    pub kernel_release: String,
    /// /dev/kvm state.
    pub dev_kvm: DevKvm,
    /// Detected backend.
    pub backend: KvmBackend,
    /// Loaded KVM modules among kvm, kvm_intel, kvm_amd, kvm_pvm.
    pub modules: Vec<String>,
    /// `module -> parameter -> raw value` for [`INTERESTING_PARAMS`].
    pub params: BTreeMap<String, BTreeMap<String, String>>,
    /// APICv / IPIv / AVIC / x2AVIC verdicts.
    pub verdicts: ApicvVerdicts,
    /// The host's name (`uname -n`), so that a chart or a table pasted
    /// elsewhere says where it was measured (None in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
}

impl HostInfo {
    /// A made-up host of `backend` whose APICv, IPIv, AVIC and x2AVIC are
    /// all available (`hardware`) or all unavailable for kvm_pvm's reason:
    /// the one fixture of the tests that plan against a host.
    pub fn synthetic(backend: KvmBackend, hardware: bool) -> Self {
        let v = if hardware {
            ApicvSupport::Available
        } else {
            ApicvSupport::Unavailable("kvm_pvm backend: no VMX/SVM, so no APICv/AVIC/IPIv".into())
        };
        let amd = backend == KvmBackend::KvmAmd;
        HostInfo {
            cpu_vendor: if amd { "AuthenticAMD" } else { "GenuineIntel" }.into(),
            cpu_model: "synthetic".into(),
            cpu_family_model: (None, None),
            logical_cpus: 2,
            virt_flags: Default::default(),
            kernel_release: "6.18".into(),
            dev_kvm: Default::default(),
            backend,
            modules: vec![],
            params: Default::default(),
            verdicts: ApicvVerdicts {
                apicv: v.clone(),
                ipiv: v.clone(),
                avic: v.clone(),
                x2avic: v,
            },
            hostname: Some("synthetic-host".into()),
        }
    }
}

/// Errors of host probing.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// /proc/cpuinfo could not be read.
    #[error("reading /proc/cpuinfo: {0}")]
    CpuInfo(#[source] std::io::Error),
}

/// Parses a boolean module parameter (`Y`/`N`/`1`/`0`, any case, trimmed).
pub fn parse_bool_param(s: &str) -> Option<bool> {
    match s.trim() {
        "Y" | "y" | "1" => Some(true),
        "N" | "n" | "0" => Some(false),
        _ => None,
    }
}

/// Parses an integer module parameter (decimal, may be negative).
pub fn parse_int_param(s: &str) -> Option<i64> {
    s.trim().parse().ok()
}

/// Parses /proc/cpuinfo text (first processor block for identity and flags).
pub fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut first = true;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k == "processor" {
            info.logical_cpus += 1;
            first = info.logical_cpus == 1;
            continue;
        }
        if !first {
            continue;
        }
        match k {
            "vendor_id" => info.vendor = v.to_string(),
            "model name" => info.model_name = v.to_string(),
            "cpu family" => info.family = v.parse().ok(),
            "model" => info.model = v.parse().ok(),
            "flags" => info.flags = v.split_whitespace().map(String::from).collect(),
            "vmx flags" => info.vmx_flags = v.split_whitespace().map(String::from).collect(),
            _ => {}
        }
    }
    info
}

/// Detects the backend from loaded modules, CPU flags and /dev/kvm.
pub fn detect_backend(modules: &[String], cpu: &CpuInfo, dev_kvm_works: bool) -> KvmBackend {
    let loaded = |m: &str| modules.iter().any(|x| x == m);
    if loaded("kvm_pvm") {
        KvmBackend::KvmPvm
    } else if loaded("kvm_intel") {
        KvmBackend::KvmIntel
    } else if loaded("kvm_amd") {
        KvmBackend::KvmAmd
    } else if dev_kvm_works {
        // Built-in vendor modules do not always show up in /sys/module.
        if cpu.has("vmx") {
            KvmBackend::KvmIntel
        } else if cpu.has("svm") {
            KvmBackend::KvmAmd
        } else {
            KvmBackend::NestedOrUnknown
        }
    } else {
        KvmBackend::None
    }
}

fn param<'a>(
    params: &'a BTreeMap<String, BTreeMap<String, String>>,
    module: &str,
    name: &str,
) -> Option<&'a str> {
    params.get(module)?.get(name).map(String::as_str)
}

fn bool_verdict(
    params: &BTreeMap<String, BTreeMap<String, String>>,
    module: &str,
    name: &str,
    missing: &str,
    off: &str,
) -> ApicvSupport {
    match param(params, module, name).map(|v| (v, parse_bool_param(v))) {
        Some((_, Some(true))) => ApicvSupport::Available,
        Some((_, Some(false))) => ApicvSupport::Unavailable(format!("{module}.{name}=N: {off}")),
        Some((v, None)) => {
            ApicvSupport::Unavailable(format!("{module}.{name} has unexpected value {v:?}"))
        }
        None => ApicvSupport::Unavailable(missing.to_string()),
    }
}

/// Decides what each hardware mode can do on this host.
pub fn verdicts(
    backend: &KvmBackend,
    cpu: &CpuInfo,
    params: &BTreeMap<String, BTreeMap<String, String>>,
) -> ApicvVerdicts {
    match backend {
        KvmBackend::KvmPvm => {
            ApicvVerdicts::none("kvm_pvm backend: no VMX/SVM, so no APICv/AVIC/IPIv")
        }
        KvmBackend::NestedOrUnknown => ApicvVerdicts::none(
            "no VMX/SVM CPU flag and no kvm_intel/kvm_amd module: nested or unknown \
             KVM backend, hardware APIC virtualization not detectable",
        ),
        KvmBackend::None => ApicvVerdicts::none("no usable /dev/kvm"),
        KvmBackend::KvmIntel => intel_verdicts(params),
        KvmBackend::KvmAmd => amd_verdicts(cpu, params),
    }
}

fn unavailable(reason: &str) -> ApicvSupport {
    ApicvSupport::Unavailable(reason.to_string())
}

impl ApicvVerdicts {
    /// Every feature unavailable for one reason.
    fn none(reason: &str) -> Self {
        ApicvVerdicts {
            apicv: unavailable(reason),
            ipiv: unavailable(reason),
            avic: unavailable(reason),
            x2avic: unavailable(reason),
        }
    }
}

/// kvm_intel: APICv from `enable_apicv`, IPIv from `enable_ipiv` (needs APICv).
fn intel_verdicts(params: &BTreeMap<String, BTreeMap<String, String>>) -> ApicvVerdicts {
    let apicv = bool_verdict(
        params,
        "kvm_intel",
        "enable_apicv",
        "kvm_intel.enable_apicv not readable (module parameters missing)",
        "APICv disabled by the module parameter or unsupported by the CPU",
    );
    let ipiv = if let ApicvSupport::Unavailable(r) = &apicv {
        ApicvSupport::Unavailable(format!("IPIv needs APICv: {r}"))
    } else {
        bool_verdict(
            params,
            "kvm_intel",
            "enable_ipiv",
            "kernel has no kvm_intel.enable_ipiv (IPIv needs Linux 5.18+)",
            "IPIv disabled or unsupported by the CPU (needs Sapphire Rapids or later)",
        )
    };
    let r = "Intel host (kvm_intel): AVIC is AMD-only";
    ApicvVerdicts {
        apicv,
        ipiv,
        avic: unavailable(r),
        x2avic: unavailable(r),
    }
}

/// kvm_amd: AVIC from `avic` and the CPU flag (or `force_avic`), x2AVIC from
/// its CPU flag, IPI acceleration from `enable_ipiv` where the kernel has it.
fn amd_verdicts(
    cpu: &CpuInfo,
    params: &BTreeMap<String, BTreeMap<String, String>>,
) -> ApicvVerdicts {
    let avic = amd_avic(cpu, params);
    let x2avic = match &avic {
        ApicvSupport::Unavailable(r) => {
            ApicvSupport::Unavailable(format!("x2AVIC needs AVIC: {r}"))
        }
        ApicvSupport::Available if cpu.has("x2avic") => ApicvSupport::Available,
        ApicvSupport::Available => unavailable(
            "CPU has no x2avic flag: x2APIC guests run hybrid AVIC \
             (x2APIC MSR accesses intercepted)",
        ),
    };
    let ipiv = match &avic {
        ApicvSupport::Unavailable(r) => {
            ApicvSupport::Unavailable(format!("AVIC IPI acceleration needs AVIC: {r}"))
        }
        ApicvSupport::Available => match param(params, "kvm_amd", "enable_ipiv") {
            // Kernels before kvm_amd.enable_ipiv always accelerate IPIs with AVIC.
            None => ApicvSupport::Available,
            Some(_) => bool_verdict(
                params,
                "kvm_amd",
                "enable_ipiv",
                "",
                "AVIC IPI acceleration disabled by the module parameter",
            ),
        },
    };
    ApicvVerdicts {
        apicv: unavailable("AMD host (kvm_amd): APICv is Intel-only"),
        ipiv,
        avic,
        x2avic,
    }
}

/// AVIC: `kvm_amd.avic`, and the CPU's avic flag unless `force_avic` is set.
fn amd_avic(cpu: &CpuInfo, params: &BTreeMap<String, BTreeMap<String, String>>) -> ApicvSupport {
    match bool_verdict(
        params,
        "kvm_amd",
        "avic",
        "kvm_amd.avic not readable (module parameters missing)",
        "AVIC is off (load kvm_amd with avic=1)",
    ) {
        ApicvSupport::Available if !cpu.has("avic") => {
            let forced = param(params, "kvm_amd", "force_avic")
                .and_then(parse_bool_param)
                .unwrap_or(false);
            if forced {
                ApicvSupport::Available
            } else {
                unavailable("kvm_amd.avic=Y but the CPU has no avic flag")
            }
        }
        v => v,
    }
}

/// Reads `/sys/module/<m>/parameters/<p>` for [`INTERESTING_PARAMS`] under
/// `sys_module` (normally `/sys/module`). Missing or unreadable files are
/// left out.
pub fn read_params(sys_module: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (module, names) in INTERESTING_PARAMS {
        let dir = sys_module.join(module).join("parameters");
        let mut m = BTreeMap::new();
        for name in *names {
            if let Ok(v) = std::fs::read_to_string(dir.join(name)) {
                m.insert((*name).to_string(), v.trim().to_string());
            }
        }
        if !m.is_empty() {
            out.insert((*module).to_string(), m);
        }
    }
    out
}

/// Which of the KVM modules are loaded (directories under `sys_module`).
pub fn loaded_modules(sys_module: &Path) -> Vec<String> {
    ["kvm", "kvm_intel", "kvm_amd", "kvm_pvm"]
        .iter()
        .filter(|m| sys_module.join(m).is_dir())
        .map(|m| m.to_string())
        .collect()
}

/// Checks whether /dev/kvm exists and opens read-write.
pub fn probe_dev_kvm() -> DevKvm {
    let path = Path::new("/dev/kvm");
    let present = path.exists();
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => DevKvm {
            present,
            openable: true,
            error: None,
        },
        Err(e) => DevKvm {
            present,
            openable: false,
            error: Some(e.to_string()),
        },
    }
}

/// `uname -r`.
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// Assembles [`HostInfo`] from pre-read inputs (pure).
pub fn host_info_from(
    cpu: &CpuInfo,
    kernel_release: String,
    dev_kvm: DevKvm,
    modules: Vec<String>,
    params: BTreeMap<String, BTreeMap<String, String>>,
) -> HostInfo {
    let backend = detect_backend(&modules, cpu, dev_kvm.openable);
    let verdicts = verdicts(&backend, cpu, &params);
    HostInfo {
        cpu_vendor: cpu.vendor.clone(),
        cpu_model: cpu.model_name.clone(),
        cpu_family_model: (cpu.family, cpu.model),
        logical_cpus: cpu.logical_cpus,
        virt_flags: VIRT_FLAGS
            .iter()
            .map(|f| (f.to_string(), cpu.has(f)))
            .collect(),
        kernel_release,
        dev_kvm,
        backend,
        modules,
        params,
        verdicts,
        hostname: None,
    }
}

/// `uname -n`: the host's name.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Probes this host.
pub fn probe() -> Result<HostInfo, HostError> {
    let text = std::fs::read_to_string("/proc/cpuinfo").map_err(HostError::CpuInfo)?;
    let cpu = parse_cpuinfo(&text);
    let sys_module = Path::new("/sys/module");
    let mut info = host_info_from(
        &cpu,
        kernel_release(),
        probe_dev_kvm(),
        loaded_modules(sys_module),
        read_params(sys_module),
    );
    info.hostname = Some(hostname());
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMD_PVM: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
model\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: fpu apic x2apic hypervisor vmmcall\n\n\
processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu other\n";

    const INTEL: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\
model\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\
flags\t\t: fpu vmx x2apic tsc_deadline_timer\n\
vmx flags\t: vnmi preemption_timer posted_intr invvpid ept_x_only flexpriority apicv\n";

    fn params(list: &[(&str, &str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut m: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (module, k, v) in list {
            m.entry(module.to_string())
                .or_default()
                .insert(k.to_string(), v.to_string());
        }
        m
    }

    fn mods(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bool_and_int_params() {
        for (s, v) in [
            ("Y\n", true),
            ("y", true),
            ("1", true),
            ("N", false),
            (" 0 ", false),
        ] {
            assert_eq!(parse_bool_param(s), Some(v), "{s:?}");
        }
        assert_eq!(parse_bool_param("yes"), None);
        assert_eq!(parse_bool_param(""), None);
        assert_eq!(parse_int_param("200000\n"), Some(200_000));
        assert_eq!(parse_int_param("-1"), Some(-1));
        assert_eq!(parse_int_param("Y"), None);
    }

    #[test]
    fn cpuinfo() {
        let c = parse_cpuinfo(AMD_PVM);
        assert_eq!(c.vendor, "AuthenticAMD");
        assert_eq!(c.model_name, "AMD EPYC");
        assert_eq!((c.family, c.model), (Some(25), Some(17)));
        assert_eq!(c.logical_cpus, 2);
        assert!(c.has("x2apic"));
        assert!(!c.has("svm"));
        assert!(!c.has("other"), "flags come from the first processor only");
        let i = parse_cpuinfo(INTEL);
        assert!(i.has("vmx") && i.has("apicv") && i.has("flexpriority"));
        assert_eq!(parse_cpuinfo("garbage\n\n:::\n"), CpuInfo::default());
    }

    #[test]
    fn backend_detection() {
        let amd = parse_cpuinfo(AMD_PVM);
        let intel = parse_cpuinfo(INTEL);
        assert_eq!(
            detect_backend(&mods(&["kvm", "kvm_pvm"]), &amd, true),
            KvmBackend::KvmPvm
        );
        assert_eq!(
            detect_backend(&mods(&["kvm", "kvm_intel"]), &intel, true),
            KvmBackend::KvmIntel
        );
        assert_eq!(
            detect_backend(&mods(&["kvm"]), &intel, true),
            KvmBackend::KvmIntel
        );
        assert_eq!(
            detect_backend(&mods(&["kvm"]), &amd, true),
            KvmBackend::NestedOrUnknown
        );
        assert_eq!(detect_backend(&[], &amd, false), KvmBackend::None);
    }

    #[test]
    fn pvm_has_no_hardware_modes() {
        let v = verdicts(
            &KvmBackend::KvmPvm,
            &parse_cpuinfo(AMD_PVM),
            &BTreeMap::new(),
        );
        for s in [&v.apicv, &v.ipiv, &v.avic, &v.x2avic] {
            assert_eq!(
                s,
                &ApicvSupport::Unavailable(
                    "kvm_pvm backend: no VMX/SVM, so no APICv/AVIC/IPIv".into()
                )
            );
        }
    }

    #[test]
    fn intel_verdicts() {
        let cpu = parse_cpuinfo(INTEL);
        let p = params(&[
            ("kvm_intel", "enable_apicv", "Y"),
            ("kvm_intel", "enable_ipiv", "Y"),
        ]);
        let v = verdicts(&KvmBackend::KvmIntel, &cpu, &p);
        assert!(v.apicv.is_available() && v.ipiv.is_available());
        assert!(!v.avic.is_available() && !v.x2avic.is_available());

        let p = params(&[
            ("kvm_intel", "enable_apicv", "Y"),
            ("kvm_intel", "enable_ipiv", "N"),
        ]);
        let v = verdicts(&KvmBackend::KvmIntel, &cpu, &p);
        assert!(v.apicv.is_available());
        assert!(matches!(&v.ipiv, ApicvSupport::Unavailable(r) if r.contains("enable_ipiv=N")));

        let p = params(&[("kvm_intel", "enable_apicv", "Y")]);
        let v = verdicts(&KvmBackend::KvmIntel, &cpu, &p);
        assert!(matches!(&v.ipiv, ApicvSupport::Unavailable(r) if r.contains("5.18")));

        let p = params(&[
            ("kvm_intel", "enable_apicv", "N"),
            ("kvm_intel", "enable_ipiv", "Y"),
        ]);
        let v = verdicts(&KvmBackend::KvmIntel, &cpu, &p);
        assert!(
            matches!(&v.ipiv, ApicvSupport::Unavailable(r) if r.starts_with("IPIv needs APICv"))
        );
    }

    #[test]
    fn amd_verdicts() {
        let mut cpu = parse_cpuinfo(AMD_PVM);
        cpu.flags.extend(["svm".to_string(), "avic".to_string()]);
        let p = params(&[("kvm_amd", "avic", "Y")]);
        let v = verdicts(&KvmBackend::KvmAmd, &cpu, &p);
        assert!(v.avic.is_available());
        assert!(v.ipiv.is_available());
        assert!(matches!(&v.x2avic, ApicvSupport::Unavailable(r) if r.contains("hybrid")));
        assert!(!v.apicv.is_available());

        cpu.flags.push("x2avic".into());
        let p = params(&[("kvm_amd", "avic", "1"), ("kvm_amd", "enable_ipiv", "0")]);
        let v = verdicts(&KvmBackend::KvmAmd, &cpu, &p);
        assert!(v.avic.is_available() && v.x2avic.is_available());
        assert!(!v.ipiv.is_available());

        let p = params(&[("kvm_amd", "avic", "N")]);
        let v = verdicts(&KvmBackend::KvmAmd, &cpu, &p);
        assert!(matches!(&v.avic, ApicvSupport::Unavailable(r) if r.contains("avic=1")));
        assert!(
            matches!(&v.x2avic, ApicvSupport::Unavailable(r) if r.starts_with("x2AVIC needs AVIC"))
        );

        // avic=Y without the CPU flag only works with force_avic.
        let cpu = parse_cpuinfo(AMD_PVM);
        let v = verdicts(
            &KvmBackend::KvmAmd,
            &cpu,
            &params(&[("kvm_amd", "avic", "Y")]),
        );
        assert!(!v.avic.is_available());
        let p = params(&[("kvm_amd", "avic", "Y"), ("kvm_amd", "force_avic", "Y")]);
        assert!(verdicts(&KvmBackend::KvmAmd, &cpu, &p).avic.is_available());
    }

    #[test]
    fn reads_params_from_a_sysfs_tree() {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let p = dir.as_path().join("kvm/parameters");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("halt_poll_ns"), "200000\n").unwrap();
        std::fs::write(p.join("not_interesting"), "1\n").unwrap();
        std::fs::create_dir_all(dir.as_path().join("kvm_pvm")).unwrap();
        let params = read_params(dir.as_path());
        assert_eq!(params["kvm"]["halt_poll_ns"], "200000");
        assert!(!params["kvm"].contains_key("not_interesting"));
        assert!(!params.contains_key("kvm_intel"));
        assert_eq!(loaded_modules(dir.as_path()), ["kvm", "kvm_pvm"]);
    }

    #[test]
    fn probes_this_host() {
        let h = probe().unwrap();
        assert!(!h.kernel_release.is_empty());
        assert!(h.logical_cpus >= 1);
        let json = format!("{:?}", h);
        assert!(json.contains("verdicts"));
        if h.modules.iter().any(|m| m == "kvm_pvm") && h.dev_kvm.openable {
            assert_eq!(h.backend, KvmBackend::KvmPvm);
            assert!(!h.verdicts.apicv.is_available());
        }
    }
}
