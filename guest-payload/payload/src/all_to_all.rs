//! All-to-all: every vCPU sends to every other. Each iteration is N-1
//! rounds; in round r vCPU i sends to (i + r) mod N and waits for the ack,
//! then all meet at a barrier. Each round is a permutation, so every vCPU
//! receives exactly one IPI per round and no two IPIs of the vector can
//! merge in a target's IRR: sent == received holds exactly. Every vCPU
//! samples its own round trips; `target_wait` does not apply (all are busy).

use crate::phases::{wait_ack, Ctx, Workload};
use ipivmm_guest::sync::barrier;
use ipivmm_guest::{percpu, tsc};

pub struct AllToAll;

impl Workload for AllToAll {
    fn body(&mut self, ctx: &mut Ctx, _round: u32, iters: u64, measure: bool) {
        for _ in 0..iters {
            for r in 1..ctx.n {
                let t = (ctx.me + r) % ctx.n;
                let before = percpu::received(t);
                let t0 = tsc::now();
                ctx.sender.unicast(t);
                wait_ack(t, before);
                let t1 = tsc::now();
                if measure {
                    ctx.samples.push(t1.wrapping_sub(t0));
                }
                barrier();
            }
        }
    }
}
