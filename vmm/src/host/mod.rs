//! The host: its facts (CPU, KVM backend, APICv/AVIC/IPIv verdicts, module
//! parameters; from `ipivmm-counters`) and what its KVM device can do.
pub mod caps;

pub use ipivmm_counters::host::{probe, ApicvSupport, ApicvVerdicts, HostInfo, KvmBackend};
