//! The KVM capabilities ipivmm relies on, as `ipivmm host` reports them.
use kvm_bindings::{
    KVM_CAP_BINARY_STATS_FD, KVM_CAP_GET_TSC_KHZ, KVM_CAP_HALT_POLL, KVM_CAP_HYPERV_SYNIC2,
    KVM_CAP_IRQCHIP, KVM_CAP_MAX_VCPUS, KVM_CAP_PIT2, KVM_CAP_SPLIT_IRQCHIP, KVM_CAP_X2APIC_API,
    KVM_CAP_X86_DISABLE_EXITS, KVM_CAP_X86_MSR_FILTER, KVM_CAP_X86_USER_SPACE_MSR,
};
use kvm_ioctls::Kvm;
use serde::Serialize;

/// One capability and what ipivmm uses it for.
#[derive(Clone, Debug, Serialize)]
pub struct CapInfo {
    /// KVM_CAP_* name.
    pub name: &'static str,
    /// KVM_CHECK_EXTENSION result (0 = absent).
    pub value: i32,
    /// What depends on it.
    pub used_for: &'static str,
    /// Decoded value, where it is a bit set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoded: Option<String>,
}

const CAPS: &[(u32, &str, &str)] = &[
    (KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP", "--irqchip kernel"),
    (
        KVM_CAP_SPLIT_IRQCHIP,
        "KVM_CAP_SPLIT_IRQCHIP",
        "--irqchip split",
    ),
    (
        KVM_CAP_X86_USER_SPACE_MSR,
        "KVM_CAP_X86_USER_SPACE_MSR",
        "--irqchip user with x2APIC (MSR exits)",
    ),
    (
        KVM_CAP_X86_MSR_FILTER,
        "KVM_CAP_X86_MSR_FILTER",
        "--irqchip user: trapping IA32_APIC_BASE",
    ),
    (
        KVM_CAP_X86_DISABLE_EXITS,
        "KVM_CAP_X86_DISABLE_EXITS",
        "--disable-exits",
    ),
    (KVM_CAP_HALT_POLL, "KVM_CAP_HALT_POLL", "--halt-poll-ns"),
    (
        KVM_CAP_BINARY_STATS_FD,
        "KVM_CAP_BINARY_STATS_FD",
        "KVM stats counters",
    ),
    (KVM_CAP_MAX_VCPUS, "KVM_CAP_MAX_VCPUS", "--vcpus limit"),
    (
        KVM_CAP_X2APIC_API,
        "KVM_CAP_X2APIC_API",
        "32-bit x2APIC IDs",
    ),
    (KVM_CAP_GET_TSC_KHZ, "KVM_CAP_GET_TSC_KHZ", "cycles to ns"),
    (
        KVM_CAP_PIT2,
        "KVM_CAP_PIT2",
        "--apicv inhibit on AMD (PIT reinjection)",
    ),
    (
        KVM_CAP_HYPERV_SYNIC2,
        "KVM_CAP_HYPERV_SYNIC2",
        "--apicv inhibit on Intel x2APIC, AMD split (SynIC AutoEOI)",
    ),
];

impl CapInfo {
    /// Every capability of the KVM device at `device` (opened for it; the
    /// error names the fix).
    pub fn query(device: &std::path::Path) -> Result<Vec<CapInfo>, super::DeviceError> {
        let kvm = super::device::open(device)?;
        Ok(Self::of(&kvm))
    }

    /// Every capability of `kvm`.
    fn of(kvm: &Kvm) -> Vec<CapInfo> {
        CAPS.iter()
            .map(|&(cap, name, used_for)| {
                let value = kvm.check_extension_raw(libc::c_ulong::from(cap));
                let decoded = (cap == KVM_CAP_X86_DISABLE_EXITS).then(|| {
                    let names =
                        crate::mode::levers::ExitControls::from_bits(value.max(0) as u32).names();
                    format!(
                        "allowed: {}",
                        if names.is_empty() {
                            "none".into()
                        } else {
                            names.join(",")
                        }
                    )
                });
                CapInfo {
                    name,
                    value,
                    used_for,
                    decoded,
                }
            })
            .collect()
    }
}
