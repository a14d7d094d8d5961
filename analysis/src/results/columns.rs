//! One description per counter a report shows as a column: its header,
//! what it means, and how to read it from a phase.
//! The text report's phase tables are built from [`PhaseResult::COLUMNS`]; the CSV
//! and JSON carry every counter of every source as is
//! ([`PhaseResult::counters`]), so a counter added to a source (a tracepoint
//! spec, a KVM stat, a guest counter) is in them with no change here, and
//! becomes a report column with one entry below. docs/architecture.md walks
//! through an example.
use super::PhaseResult;

/// A counter shown as a column of the per-phase tables. Every counter is
/// windowed the same way: the vCPU thread snapshots its sources at the
/// phase's begin and end markers, and the column is the difference.
pub struct Column {
    /// Table header.
    pub header: &'static str,
    /// What it counts, for docs and `--help`-like listings.
    pub doc: &'static str,
    /// The figure of one vCPU's phase (None: not measured in this run).
    pub value: fn(&PhaseResult) -> Option<u64>,
    /// How much the column matters when the text table must fit 120
    /// columns: the lowest ranks give way first (`--wide` shows them all;
    /// the front end's `output::fit`).
    pub rank: u8,
}

impl PhaseResult {
    /// The columns of the per-phase tables, in order.
    pub const COLUMNS: &'static [Column] = &[
        Column {
            header: "ICR writes",
            doc: "writes to the ICR the vCPU issued (an all-but-self broadcast is one)",
            value: |p| Some(p.guest.icr_writes),
            rank: 5,
        },
        Column {
            header: "PV calls",
            doc: "KVM_HC_SEND_IPI hypercalls the vCPU issued (not ICR writes)",
            value: |p| Some(p.guest.hypercalls),
            rank: 1,
        },
        Column {
            header: "IPIs sent",
            doc: "IPIs the vCPU asked to send, counted per target",
            value: |p| Some(p.guest.ipis_sent),
            rank: 6,
        },
        Column {
            header: "IPIs recv",
            doc: "IPIs of the measured vector the vCPU's handler took",
            value: |p| Some(p.guest.ipis_received),
            rank: 6,
        },
        Column {
            header: "ICR-write exits",
            doc: "ICR writes that left guest mode (docs/kernel-paths.md says which events count)",
            value: |p| p.icr_write_exits.as_ref().map(|i| i.exits),
            rank: 9,
        },
        Column {
            header: "accel. ICR",
            doc: "ICR writes that did not exit (APICv/IPIv/AVIC): ICR writes minus ICR-write exits",
            value: |p| p.icr_write_exits.as_ref().map(|i| i.accelerated),
            rank: 7,
        },
        Column {
            header: "user exits",
            doc: "exits that reached ipivmm (the phase markers included)",
            value: |p| Some(p.exits.total()),
            rank: 2,
        },
        Column {
            header: "KVM exits",
            doc: "every VM exit of the vCPU (KVM stat `exits`)",
            value: |p| p.kvm_stats.get("exits").copied(),
            rank: 8,
        },
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_unique_and_documented() {
        for (i, c) in PhaseResult::COLUMNS.iter().enumerate() {
            assert!(!c.doc.is_empty(), "{}", c.header);
            assert!(
                PhaseResult::COLUMNS[..i]
                    .iter()
                    .all(|o| o.header != c.header),
                "{}",
                c.header
            );
        }
    }
}
