//! All-to-all: every vCPU sends to every other. Each iteration is N-1
//! rounds; in round r vCPU i sends to (i + r) mod N and waits for the ack,
//! then all meet at a barrier. Each round is a permutation, so every vCPU
//! receives exactly one IPI per round and no two IPIs of the vector can
//! merge in a target's IRR: sent == received holds exactly. Every vCPU
//! samples its own round trips; `target_wait` does not apply (all are busy).

use crate::phases::{Ctx, Workload};
use ipivmm_guest::sync::barrier;

pub struct AllToAll;

impl Workload for AllToAll {
    fn body(&mut self, ctx: &mut Ctx, _round: u32, iters: u64, measure: bool) {
        for _ in 0..iters {
            for r in 1..ctx.n {
                ctx.round_trip((ctx.me + r) % ctx.n, measure);
                barrier();
            }
        }
    }
}
