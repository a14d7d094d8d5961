//! Userspace exits by kind: every exit the run loop sees is counted here (the
//! machine names a KVM exit's kind: `ipivmm`'s vCPU loop).
use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::collections::BTreeMap;

/// The kinds of userspace exit ipivmm tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// KVM_EXIT_IO, `in`.
    IoIn,
    /// KVM_EXIT_IO, `out`.
    IoOut,
    /// KVM_EXIT_MMIO read.
    MmioRead,
    /// KVM_EXIT_MMIO write.
    MmioWrite,
    /// KVM_EXIT_HLT (only without an in-kernel LAPIC).
    Hlt,
    /// KVM_EXIT_IRQ_WINDOW_OPEN.
    IrqWindowOpen,
    /// KVM_EXIT_X86_RDMSR.
    MsrRead,
    /// KVM_EXIT_X86_WRMSR.
    MsrWrite,
    /// KVM_EXIT_HYPERCALL.
    Hypercall,
    /// KVM_EXIT_INTR: KVM_RUN interrupted by a signal (a kick).
    Intr,
    /// KVM_EXIT_SHUTDOWN (triple fault).
    Shutdown,
    /// KVM_EXIT_INTERNAL_ERROR.
    InternalError,
    /// KVM_EXIT_FAIL_ENTRY.
    FailEntry,
    /// KVM_EXIT_SYSTEM_EVENT.
    SystemEvent,
    /// KVM_EXIT_IOAPIC_EOI (split irqchip).
    IoapicEoi,
    /// Anything else.
    Other,
}

impl ExitKind {
    /// Every kind, in report order.
    pub const ALL: [ExitKind; 16] = [
        ExitKind::IoIn,
        ExitKind::IoOut,
        ExitKind::MmioRead,
        ExitKind::MmioWrite,
        ExitKind::Hlt,
        ExitKind::IrqWindowOpen,
        ExitKind::MsrRead,
        ExitKind::MsrWrite,
        ExitKind::Hypercall,
        ExitKind::Intr,
        ExitKind::Shutdown,
        ExitKind::InternalError,
        ExitKind::FailEntry,
        ExitKind::SystemEvent,
        ExitKind::IoapicEoi,
        ExitKind::Other,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ExitKind::IoIn => "io_in",
            ExitKind::IoOut => "io_out",
            ExitKind::MmioRead => "mmio_read",
            ExitKind::MmioWrite => "mmio_write",
            ExitKind::Hlt => "hlt",
            ExitKind::IrqWindowOpen => "irq_window_open",
            ExitKind::MsrRead => "msr_read",
            ExitKind::MsrWrite => "msr_write",
            ExitKind::Hypercall => "hypercall",
            ExitKind::Intr => "intr",
            ExitKind::Shutdown => "shutdown",
            ExitKind::InternalError => "internal_error",
            ExitKind::FailEntry => "fail_entry",
            ExitKind::SystemEvent => "system_event",
            ExitKind::IoapicEoi => "ioapic_eoi",
            ExitKind::Other => "other",
        }
    }
}

/// Count of userspace exits per kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitCounts([u64; ExitKind::ALL.len()]);

impl ExitCounts {
    /// Count one exit.
    pub fn bump(&mut self, kind: ExitKind) {
        self.0[kind as usize] += 1;
    }

    /// Count of one kind.
    pub fn get(&self, kind: ExitKind) -> u64 {
        self.0[kind as usize]
    }

    /// All exits (saturating: a results file can say anything).
    pub fn total(&self) -> u64 {
        super::saturating_sum(self.0.iter().copied())
    }

    /// Counts since `earlier`.
    pub fn since(&self, earlier: &ExitCounts) -> ExitCounts {
        let mut d = ExitCounts::default();
        for (i, v) in d.0.iter_mut().enumerate() {
            *v = self.0[i].saturating_sub(earlier.0[i]);
        }
        d
    }

    /// Non-zero kinds with their counts.
    pub fn nonzero(&self) -> impl Iterator<Item = (ExitKind, u64)> + '_ {
        ExitKind::ALL
            .into_iter()
            .map(|k| (k, self.get(k)))
            .filter(|(_, v)| *v > 0)
    }
}

impl Serialize for ExitCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.nonzero() {
            m.serialize_entry(k.name(), &v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for ExitCounts {
    /// Kinds this version does not know are counted as `other`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, u64>::deserialize(d)?;
        let mut c = ExitCounts::default();
        for (name, n) in map {
            let kind = ExitKind::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .unwrap_or(ExitKind::Other);
            c.0[kind as usize] = c.0[kind as usize].saturating_add(n);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_index_their_own_slot() {
        for (i, k) in ExitKind::ALL.into_iter().enumerate() {
            assert_eq!(k as usize, i);
        }
    }

    #[test]
    fn counts_window_by_difference() {
        let mut c = ExitCounts::default();
        c.bump(ExitKind::IoOut);
        let begin = c;
        c.bump(ExitKind::IoOut);
        c.bump(ExitKind::MmioWrite);
        let d = c.since(&begin);
        assert_eq!(d.get(ExitKind::IoOut), 1);
        assert_eq!(d.get(ExitKind::MmioWrite), 1);
        assert_eq!(d.total(), 2);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, r#"{"io_out":1,"mmio_write":1}"#);
        let back: ExitCounts = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
        let future: ExitCounts = serde_json::from_str(r#"{"io_out":2,"warp":3}"#).unwrap();
        assert_eq!(
            (future.get(ExitKind::IoOut), future.get(ExitKind::Other)),
            (2, 3)
        );
    }
}
