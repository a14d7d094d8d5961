//! Flood: vCPU 0 fires `iterations` IPIs round robin at the other vCPUs
//! without waiting (receivers count; IPIs that find the vector already
//! pending merge, so received <= sent), one sample per send (its cost in TSC
//! cycles), then a drain: one acked IPI per target, so nothing is still in
//! flight when the phase ends. Records: ipis, cycles, ipis_per_sec.

use crate::phases::{self, count_wake, round_robin, serve, stop, Acks, Ctx, Workload};
use ipivmm_guest::ipi::VcpuSet;
use ipivmm_guest::tsc;

#[derive(Default)]
pub struct Flood {
    cycles: u64,
    ipis: u64,
}

impl Workload for Flood {
    fn body(&mut self, ctx: &mut Ctx, round: u32, iters: u64, measure: bool) {
        if ctx.me != 0 {
            serve(round, ctx.wait);
            return;
        }
        let start = tsc::now();
        for i in 0..iters {
            let t = round_robin(i, ctx.n);
            let t0 = tsc::now();
            ctx.sender.unicast(t);
            let t1 = tsc::now();
            if measure {
                ctx.samples.push(t1.wrapping_sub(t0));
            }
        }
        self.cycles = tsc::now().wrapping_sub(start);
        self.ipis = iters;
        // Drain (and wake halted receivers): the ack of a later IPI of the
        // same vector means no earlier one is still pending.
        let others = VcpuSet::all_but(0);
        stop(round, ipivmm_abi::TargetWait::Spin, &others, || {});
        let acks = Acks::snapshot(&others);
        count_wake(others.len());
        others.iter().for_each(|t| ctx.sender.unicast(t));
        acks.wait_all(&others);
    }

    fn records(&mut self, ctx: &mut Ctx) {
        if ctx.me == 0 {
            phases::record_rate(phases::MEASURE.0, self.ipis, self.cycles, ctx.boot.tsc_khz);
        }
    }
}
