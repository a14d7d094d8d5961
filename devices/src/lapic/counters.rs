//! Per-vCPU event counts kept by the model.

/// What one vCPU's local APIC saw. In `--irqchip user` mode every ICR write
/// is a userspace exit handled by the model, so `icr_writes` is exactly the
/// number of ICR-write exits of that vCPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LapicCounters {
    /// ICR writes that send an IPI: xAPIC offset 0x300, x2APIC MSR 0x830
    /// (sender side). Faulting writes are not counted.
    pub icr_writes: u64,
    /// x2APIC SELF IPI MSR (0x83F) writes (sender side).
    pub self_ipi_writes: u64,
    /// Fixed/lowest-priority IPIs accepted into this vCPU's IRR (receiver).
    pub ipis_delivered: u64,
    /// Of `ipis_delivered`, those whose vector was already pending in the
    /// IRR, so the guest will see one interrupt for several IPIs (receiver).
    pub ipis_coalesced: u64,
    /// IPIs this vCPU sent that were dropped (sender side): one per IPI that
    /// matched no APIC (e.g. a nonexistent APIC ID) plus one per matched
    /// target that refused it (software-disabled APIC, illegal vector).
    pub ipis_dropped: u64,
    /// IPIs this vCPU sent with a delivery mode the model does not implement
    /// (SMI, reserved, ExtINT).
    pub ipis_unsupported: u64,
    /// EOI writes.
    pub eois: u64,
    /// NMIs accepted (receiver).
    pub nmis: u64,
    /// INITs accepted (receiver).
    pub inits: u64,
    /// Start-up IPIs accepted (receiver).
    pub sipis: u64,
    /// xAPIC MMIO accesses ignored: wrong size or alignment, out of the
    /// page, reserved register, or the page is off (x2APIC / disabled).
    pub ignored_accesses: u64,
    /// x2APIC MSR accesses that faulted (#GP).
    pub faults: u64,
}

impl LapicCounters {
    /// Sum of every counter: each only grows, so the sum is a cheap
    /// monotonicity check for tests and fuzzers.
    pub fn total(&self) -> u64 {
        self.icr_writes
            + self.self_ipi_writes
            + self.ipis_delivered
            + self.ipis_coalesced
            + self.ipis_dropped
            + self.ipis_unsupported
            + self.eois
            + self.nmis
            + self.inits
            + self.sipis
            + self.ignored_accesses
            + self.faults
    }
}
