//! Self-IPI: every vCPU sends `iterations` IPIs to itself (ICR shorthand
//! "self"; PV: its own bit) and waits for its own handler; one sample each.
//! Needs no other vCPU; `target_wait` does not apply.

use crate::phases::{wait_ack, Ctx, Workload};
use ipivmm_guest::percpu;

pub struct SelfIpi;

impl Workload for SelfIpi {
    fn min_vcpus(&self) -> usize {
        1
    }

    fn body(&mut self, ctx: &mut Ctx, _round: u32, iters: u64, measure: bool) {
        for _ in 0..iters {
            let (me, before) = (ctx.me, percpu::received(ctx.me));
            ctx.timed(measure, |s| {
                s.to_self();
                wait_ack(me, before);
            });
        }
    }
}
