//! Broadcast: vCPU 0 sends one all-but-self shorthand IPI (PV path: one
//! bitmap hypercall per 128 APIC IDs) and waits until every other vCPU's
//! handler counted it; one sample per broadcast.

use crate::phases::{serve, stop, Acks, Ctx, HaltGate, Workload};
use ipivmm_guest::ipi::VcpuSet;

pub struct Broadcast;

impl Workload for Broadcast {
    fn body(&mut self, ctx: &mut Ctx, round: u32, iters: u64, measure: bool) {
        if ctx.me != 0 {
            serve(round, ctx.wait);
            return;
        }
        let others = VcpuSet::all_but(0);
        let mut gate = HaltGate::new(ctx, ctx.wait);
        for _ in 0..iters {
            gate.wait(&others);
            let acks = Acks::snapshot(&others);
            ctx.timed(measure, |s| {
                s.all_but_self();
                acks.wait_all(&others);
            });
        }
        stop(round, ctx.wait, &others, || ctx.sender.all_but_self());
    }
}
