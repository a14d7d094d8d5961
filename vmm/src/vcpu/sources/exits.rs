//! The `userspace_exits` source: the exits the run loop handled, by kind
//! (counted by the loop itself, `ExitCounts::bump`).
use super::{LoopCounts, PhaseCounter};
use crate::results::source::Source;
use crate::results::{ExitCounts, PhaseResult, SourceStatus};
use crate::vcpu::VcpuEnv;
use kvm_ioctls::VcpuFd;

struct UserspaceExits {
    begin: ExitCounts,
}

/// Always there.
pub fn open(_: &VcpuFd, _: &VcpuEnv) -> Option<Box<dyn PhaseCounter>> {
    Some(Box::new(UserspaceExits {
        begin: ExitCounts::default(),
    }))
}

impl PhaseCounter for UserspaceExits {
    fn status(&self, out: &mut Vec<SourceStatus>) {
        out.push(SourceStatus::new(Source::UserspaceExits, true, None));
    }

    fn begin(&mut self, now: &LoopCounts) {
        self.begin = *now.exits;
    }

    fn end(&mut self, now: &LoopCounts, phase: &mut PhaseResult) {
        phase.exits = now.exits.since(&self.begin);
    }
}
