//! What the kernel said about APICv/AVIC during a run: every
//! `kvm_apicv_inhibit_changed` event of the VM's threads, decoded with the
//! running kernel's reason names, and what it means per phase.
use serde::{Deserialize, Serialize};

/// One change of the VM's inhibit reasons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InhibitEvent {
    /// When, ms after ipivmm began creating the VM (just before
    /// KVM_CREATE_VM; the creation itself sets DISABLED or ABSENT).
    pub at_ms: f64,
    /// The reason that changed (the kernel's name, or its number).
    pub reason: String,
    /// Set (true) or cleared.
    pub set: bool,
    /// Every reason in effect after the change.
    pub inhibits: Vec<String>,
}

/// Whether the run's APICv lever showed in the kernel's own events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeverCheck {
    /// The inhibit reason the lever causes (`PIT_REINJ`, `APIC_ID_MODIFIED`, `ABSENT`).
    pub reason: String,
    /// Whether the kernel reported it set.
    pub observed: bool,
}

/// The APICv/AVIC inhibits observed over a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApicvObserved {
    /// Every change, in time order.
    pub changes: Vec<InhibitEvent>,
    /// The reasons in effect when the run ended (empty: none, so APICv/AVIC
    /// was active if the host has it).
    pub inhibits_at_end: Vec<String>,
    /// With `--apicv inhibit` (or no in-kernel irqchip) on a host with
    /// APICv/AVIC: whether the lever's reason was seen (without APICv the
    /// kernel records no other reason than DISABLED, so there is none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lever: Option<LeverCheck>,
    /// Events the kernel dropped (a full ring): the list may miss changes.
    pub lost: u64,
}

/// APICv/AVIC during one phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseApicv {
    /// Active for the whole phase: the host has it and no inhibit was in
    /// effect at any time of the phase.
    pub active: bool,
    /// Every reason in effect at some time of the phase.
    pub inhibits: Vec<String>,
}
