//! The `guest` source: the payload's own counters, sent with each control
//! message (the phase gets end minus begin, `GuestCounters::since`).
use super::{LoopCounts, PhaseCounter};
use crate::results::source::Source;
use crate::results::{PhaseResult, SourceStatus};
use crate::vcpu::VcpuEnv;
use ipivmm_abi::GuestCounters;
use kvm_ioctls::VcpuFd;

struct Guest {
    begin: GuestCounters,
}

/// Always there.
pub fn open(_: &VcpuFd, _: &VcpuEnv) -> Option<Box<dyn PhaseCounter>> {
    Some(Box::new(Guest {
        begin: GuestCounters::default(),
    }))
}

impl PhaseCounter for Guest {
    fn status(&self, out: &mut Vec<SourceStatus>) {
        out.push(SourceStatus::new(
            Source::Guest,
            true,
            Some("counted by the payload, sent with each control message".into()),
        ));
    }

    fn begin(&mut self, now: &LoopCounts) {
        self.begin = *now.guest;
    }

    fn end(&mut self, now: &LoopCounts, phase: &mut PhaseResult) {
        phase.guest = now.guest.since(&self.begin);
    }
}
