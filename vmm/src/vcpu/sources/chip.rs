//! The irqchip's own counters, where it keeps any (`Chip::source`,
//! `Chip::counters`): ipivmm's LAPIC model's, the `user_lapic` source.
use super::{map_delta, LoopCounts, PhaseCounter};
use crate::irqchip::SharedChip;
use crate::results::{PhaseResult, SourceStatus};
use crate::vcpu::VcpuEnv;
use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;

struct ChipCounters {
    chip: SharedChip,
    index: usize,
    status: SourceStatus,
    begin: Option<BTreeMap<String, u64>>,
}

/// Only where the VM's irqchip names a source of its own.
pub fn open(_: &VcpuFd, env: &VcpuEnv) -> Option<Box<dyn PhaseCounter>> {
    let status = env.irqchip.source()?;
    Some(Box::new(ChipCounters {
        chip: env.irqchip.clone(),
        index: env.index,
        status,
        begin: None,
    }))
}

impl PhaseCounter for ChipCounters {
    fn status(&self, out: &mut Vec<SourceStatus>) {
        out.push(self.status.clone());
    }

    fn begin(&mut self, _: &LoopCounts) {
        self.begin = self.chip.counters(self.index);
    }

    fn end(&mut self, _: &LoopCounts, phase: &mut PhaseResult) {
        let delta = match (self.chip.counters(self.index), self.begin.take()) {
            (Some(e), Some(s)) => map_delta(&e, &s),
            _ => BTreeMap::new(),
        };
        phase.by_source.set(self.status.source, delta);
    }
}
