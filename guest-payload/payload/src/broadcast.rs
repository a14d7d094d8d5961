//! Broadcast: vCPU 0 sends one all-but-self shorthand IPI (PV path: one
//! bitmap hypercall per 128 APIC IDs) and waits until every other vCPU's
//! handler counted it; one sample per broadcast.

use crate::phases::{serve, stop, Acks, Ctx, HaltGate, Workload};
use ipivmm_guest::ipi::VcpuSet;
use ipivmm_guest::tsc;

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
            let t0 = tsc::now();
            ctx.sender.all_but_self();
            acks.wait_all(&others);
            let t1 = tsc::now();
            if measure {
                ctx.samples.push(t1.wrapping_sub(t0));
            }
        }
        stop(round, ctx.wait, &others, || ctx.sender.all_but_self());
    }
}
