//! Tracepoint counters of one vCPU thread (placeholder until wired).
use crate::results::SourceStatus;
use ipivmm_abi::ApicMode;
use std::collections::BTreeMap;

/// Which tracepoints to count.
#[derive(Clone, Debug)]
pub struct TraceConfig;

/// The tracepoint counters of the calling thread.
pub struct ThreadTrace;

impl ThreadTrace {
    /// Open the counters on the calling thread.
    pub fn open(_cfg: Option<&TraceConfig>) -> (Option<Self>, SourceStatus) {
        (
            None,
            SourceStatus {
                source: "tracepoints".into(),
                available: false,
                detail: Some("not enabled".into()),
            },
        )
    }

    /// Read every counter.
    pub fn read(&mut self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }
}

/// Name of the counter that sees ICR writes handled by KVM in `apic` mode.
pub fn icr_counter_name(apic: ApicMode) -> &'static str {
    match apic {
        ApicMode::Xapic => "kvm_apic:icr_write",
        ApicMode::X2apic => "kvm_msr:icr_write",
    }
}
