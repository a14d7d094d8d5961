//! Multicast: vCPU 0 sends to an explicit set (`params[0]`: bitmap of vCPU
//! indices, 0 = all others; bit 0 ignored) and waits for every ack; one
//! sample per multicast. `params[1]`: 0 = one physical ICR write per target,
//! 1 = logical destination (one ICR write per x2APIC cluster / for xAPIC
//! vCPUs 0..8, physical for the rest). PV path: bitmap hypercall. vCPUs
//! outside the set just wait for the end of the phase.

use crate::phases::{serve, stop, Acks, Ctx, HaltGate, Workload};
use ipivmm_abi::BootInfo;
use ipivmm_guest::apic::{self, Apic};
use ipivmm_guest::ipi::{self, VcpuSet};

pub struct Multicast {
    targets: VcpuSet,
    how: ipi::Multicast,
}

impl Multicast {
    pub fn new(boot: &BootInfo) -> Self {
        let n = boot.vcpu_count as usize;
        let targets = if boot.params[0] == 0 {
            VcpuSet::all_but(0)
        } else {
            let mut s = VcpuSet::new();
            (1..n.min(64))
                .filter(|v| boot.params[0] >> v & 1 == 1)
                .for_each(|v| s.insert(v));
            s
        };
        let how = if boot.params[1] == 1 {
            ipi::Multicast::Logical
        } else {
            ipi::Multicast::Physical
        };
        Self { targets, how }
    }
}

impl Workload for Multicast {
    fn setup(&mut self, ctx: &mut Ctx) {
        if self.targets.is_empty() {
            ipivmm_guest::control::done(1, "multicast: params[0] selects no vCPU other than 0");
        }
        if self.how == ipi::Multicast::Logical {
            apic::current().setup_logical(ctx.me);
        }
    }

    fn body(&mut self, ctx: &mut Ctx, round: u32, iters: u64, measure: bool) {
        if ctx.me != 0 {
            serve(round, ctx.wait);
            return;
        }
        let mut gate = HaltGate::new(ctx, ctx.wait);
        for _ in 0..iters {
            gate.wait(&self.targets);
            let acks = Acks::snapshot(&self.targets);
            ctx.timed(measure, |s| {
                s.multicast(&self.targets, self.how);
                acks.wait_all(&self.targets);
            });
        }
        // Everyone outside the set spins or halts too: wake them all.
        let others = VcpuSet::all_but(0);
        stop(round, ctx.wait, &others, || {
            ctx.sender.multicast(&others, ipi::Multicast::Physical)
        });
    }

    fn records(&mut self, ctx: &mut Ctx) {
        if ctx.me == 0 {
            ipivmm_guest::control::record(
                crate::phases::MEASURE.0,
                "targets",
                self.targets.len() as u64,
            );
        }
    }
}
