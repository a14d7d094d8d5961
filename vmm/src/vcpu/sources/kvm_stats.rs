//! The `kvm_stats` source: KVM's binary stats of the vCPU (its stats fd),
//! the cumulative ones as deltas over the phase.
use super::{LoopCounts, PhaseCounter};
use crate::results::source::Source;
use crate::results::{PhaseResult, SourceStatus};
use crate::vcpu::VcpuEnv;
use ipivmm_counters::kvm_stats::{stats_fd, StatsReader, StatsSnapshot};
use kvm_ioctls::VcpuFd;
use std::collections::BTreeMap;

struct KvmStats {
    /// None: the stats fd could not be read (the status says why).
    reader: Option<StatsReader>,
    status: SourceStatus,
    begin: Option<StatsSnapshot>,
}

/// Always reported; counts where the vCPU's stats fd opens.
pub fn open(vcpu: &VcpuFd, env: &VcpuEnv) -> Option<Box<dyn PhaseCounter>> {
    let status = |available, detail| SourceStatus::new(Source::KvmStats, available, detail);
    let (reader, status) = match stats_fd(vcpu).and_then(StatsReader::new) {
        Ok(mut r) => {
            // One copy of the descriptors per VM, not per vCPU.
            let shared = env
                .shared
                .stats_layout
                .get_or_init(|| r.shared_descriptors());
            r.share_descriptors(shared);
            (Some(r), status(true, None))
        }
        Err(e) => (None, status(false, Some(e.to_string()))),
    };
    Some(Box::new(KvmStats {
        reader,
        status,
        begin: None,
    }))
}

impl KvmStats {
    fn snapshot(&mut self) -> Option<StatsSnapshot> {
        self.reader.as_mut().and_then(|r| r.snapshot().ok())
    }
}

impl PhaseCounter for KvmStats {
    fn status(&self, out: &mut Vec<SourceStatus>) {
        out.push(self.status.clone());
    }

    fn begin(&mut self, _: &LoopCounts) {
        self.begin = self.snapshot();
    }

    fn end(&mut self, _: &LoopCounts, phase: &mut PhaseResult) {
        phase.kvm_stats = match (self.snapshot(), self.begin.take()) {
            (Some(e), Some(s)) => e.delta(&s),
            _ => BTreeMap::new(),
        };
    }
}
