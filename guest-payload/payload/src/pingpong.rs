//! Unicast ping-pong: vCPU 0 sends a fixed IPI to vCPU 1, 2, ... in turn and
//! waits for the target's handler to count it; one sample per IPI (round
//! trip in TSC cycles). Targets wait spinning or halted (`BootInfo::target_wait`,
//! forced to halt for `PingpongHalt`), interrupts enabled; with `halt` the
//! sender first waits until the target is halted (`HaltGate`), outside the
//! measured round trip.

use crate::phases::{self, round_robin, serve, stop, Ctx, HaltGate, Workload};
use ipivmm_abi::TargetWait;
use ipivmm_guest::ipi::VcpuSet;

pub struct Pingpong {
    force_halt: bool,
}

impl Pingpong {
    pub fn new(force_halt: bool) -> Self {
        Self { force_halt }
    }

    fn wait(&self, ctx: &Ctx) -> TargetWait {
        if self.force_halt {
            TargetWait::Halt
        } else {
            ctx.wait
        }
    }
}

impl Workload for Pingpong {
    fn body(&mut self, ctx: &mut Ctx, round: u32, iters: u64, measure: bool) {
        let wait = self.wait(ctx);
        if ctx.me != 0 {
            serve(round, wait);
            return;
        }
        let mut gate = HaltGate::new(ctx, wait);
        for i in 0..iters {
            let t = round_robin(i, ctx.n);
            gate.wait_one(t);
            ctx.round_trip(t, measure);
        }
        let others = VcpuSet::all_but(0);
        stop(round, wait, &others, || {
            others.iter().for_each(|t| ctx.sender.unicast(t))
        });
    }

    fn records(&mut self, ctx: &mut Ctx) {
        if ctx.me == 0 {
            ipivmm_guest::control::record(phases::MEASURE.0, "targets", ctx.n as u64 - 1);
        }
    }
}
