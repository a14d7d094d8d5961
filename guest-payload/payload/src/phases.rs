//! The phase sequence every workload runs on every vCPU, and the pieces the
//! workloads share (acks, target waiting, stopping).
//!
//! Per vCPU: [Hello, sent by the SDK runtime] barrier;
//! phase 0 "idle": begin, barrier, end (no IPIs); barrier;
//! phase 1 "warmup": begin, barrier, body, barrier, end, barrier;
//! phase 2 measured both ways (`measure::measure_both_ways` in the SDK): its uncounted
//! part "measure-uncounted" (nothing per exit attached yet: the headline
//! latency), then, outside any phase, barrier, body(warmup), barrier (the
//! host attached its per-exit counters at the uncounted part's end), then
//! its counted part "measure" (the exits), each part: begin, barrier, body,
//! barrier, end, [senders: Samples(2) then Records(2)], barrier;
//! then Done(0) (sent by the runtime when `main` returns). Each body is a
//! round of its own (`stop` needs a fresh value per body).
//! Every IPI of a phase, wake-ups included, is sent and taken between the
//! two barriers around its body, so inside every vCPU's own window.

use core::sync::atomic::{AtomicU64, Ordering};
use ipivmm_abi::{BootInfo, TargetWait, MAX_VCPUS};
use ipivmm_guest::control;
use ipivmm_guest::cpu;
use ipivmm_guest::ipi::{Sender, VcpuSet};
use ipivmm_guest::measure::{measure_both_ways, Part, Step};
use ipivmm_guest::percpu::{self, Samples};
use ipivmm_guest::sync::{barrier, wait_until};
use ipivmm_guest::tsc;

/// Phase ids and names (one definition, shared with the host).
pub use ipivmm_abi::builtin_phases::{IDLE, MEASURE, WARMUP};
// MEASURE_UNCOUNTED is MEASURE's uncounted part, named by the SDK.

/// Longest wait for one IPI acknowledgement before failing loudly.
pub const ACK_TIMEOUT_SECS: u64 = 60;

/// Per-vCPU workload context.
pub struct Ctx {
    pub boot: &'static BootInfo,
    pub me: usize,
    pub n: usize,
    pub sender: Sender,
    pub wait: TargetWait,
    pub samples: Samples,
}

impl Ctx {
    pub fn new(boot: &'static BootInfo, me: usize) -> Self {
        Self {
            boot,
            me,
            n: boot.vcpu_count as usize,
            sender: Sender::from_boot(),
            wait: TargetWait::from_raw(boot.target_wait).unwrap_or(TargetWait::Spin),
            samples: Samples::take(),
        }
    }

    /// One timed operation: `op` sends with this vCPU's sender and returns
    /// once its IPIs were taken; its TSC cycles are a sample when `measure`.
    #[inline(always)]
    pub fn timed(&mut self, measure: bool, op: impl FnOnce(&Sender)) {
        let t0 = tsc::now();
        op(&self.sender);
        let t1 = tsc::now();
        if measure {
            self.samples.push(t1.wrapping_sub(t0));
        }
    }

    /// One timed round trip: a fixed IPI to vCPU `t`, until its handler
    /// has counted it.
    #[inline(always)]
    pub fn round_trip(&mut self, t: usize, measure: bool) {
        let before = percpu::received(t);
        self.timed(measure, |s| {
            s.unicast(t);
            wait_ack(t, before);
        });
    }
}

/// One workload's behaviour inside the common phase sequence.
pub trait Workload {
    /// Fewest vCPUs it can run with.
    fn min_vcpus(&self) -> usize {
        2
    }
    /// Per-vCPU set-up before the first barrier.
    fn setup(&mut self, _ctx: &mut Ctx) {}
    /// The body of round `round` (`iters` iterations; pass `round` to
    /// [`serve`] and [`stop`]); push samples into `ctx.samples` when
    /// `measure`.
    fn body(&mut self, ctx: &mut Ctx, round: u32, iters: u64, measure: bool);
    /// Named values of the measure phase, sent after the samples.
    fn records(&mut self, _ctx: &mut Ctx) {}
}

/// Runs the phase sequence.
pub fn run(w: &mut impl Workload, ctx: &mut Ctx) {
    if ctx.n < w.min_vcpus() {
        control::done(1, "this workload needs more vCPUs (pingpong, broadcast, multicast, flood and all-to-all need 2)");
    }
    w.setup(ctx);
    barrier();

    control::phase_begin(IDLE.0, IDLE.1);
    barrier();
    control::phase_end(IDLE.0);
    barrier();

    let (warmup, iterations) = (ctx.boot.warmup, ctx.boot.iterations);
    WAKE_IPIS.store(0, Ordering::Relaxed);
    control::phase_begin(WARMUP.0, WARMUP.1);
    barrier();
    w.body(ctx, 1, warmup, false);
    barrier();
    control::phase_end(WARMUP.0);
    barrier();

    let mut round = 1;
    let id = MEASURE.0;
    measure_both_ways(id, MEASURE.1, |step| match step {
        Step::Before(_) => {
            ctx.samples.clear();
            WAKE_IPIS.store(0, Ordering::Relaxed);
            round += 1;
        }
        // The host attached its per-exit counters at the uncounted part's
        // end: as many iterations as the warm-up phase, unmeasured.
        Step::Run(Part::Warmup) => w.body(ctx, round, warmup, false),
        Step::Run(_) => w.body(ctx, round, iterations, true),
        Step::Ended(_) => {
            if !ctx.samples.as_slice().is_empty() {
                control::samples(id, ctx.samples.as_slice());
            }
            if ctx.samples.dropped() > 0 {
                control::record(id, "samples_dropped", ctx.samples.dropped());
            }
            // Only a phase's sender (vCPU 0 in every workload that stops
            // its targets) counts wake-ups; the others read 0.
            let wakes = WAKE_IPIS.load(Ordering::Relaxed);
            if ctx.me == 0 && wakes > 0 {
                control::record(id, "wake_ipis", wakes);
            }
            w.records(ctx);
        }
    });
}

/// IPIs the phase's sender sent to end the phase (wake-ups of halted or
/// draining targets), outside any measured operation: recorded as
/// `wake_ipis` so the host can tell a workload's IPIs per operation exactly.
static WAKE_IPIS: AtomicU64 = AtomicU64::new(0);

/// Counts `n` end-of-phase wake-up IPIs (see [`WAKE_IPIS`]).
pub fn count_wake(n: usize) {
    WAKE_IPIS.fetch_add(n as u64, Ordering::Relaxed);
}

/// Set by a round's sender to the round + 1 when its receivers may leave.
static STOP: AtomicU64 = AtomicU64::new(0);

fn stop_value(round: u32) -> u64 {
    round as u64 + 1
}

/// Receiver side of a round: takes IPIs (in the SDK handler) until the
/// sender stops the round, spinning or halting per `wait`.
pub fn serve(round: u32, wait: TargetWait) {
    let stop = stop_value(round);
    match wait {
        TargetWait::Spin => wait_until("the end of the phase", u64::MAX / 4, || {
            STOP.load(Ordering::Acquire) >= stop
        }),
        TargetWait::Halt | TargetWait::HaltImmediate => loop {
            // Check with interrupts off, then `sti; hlt` atomically: a wake-up
            // IPI cannot slip in between the check and the halt.
            cpu::disable_interrupts();
            if STOP.load(Ordering::Acquire) >= stop {
                cpu::enable_interrupts();
                break;
            }
            percpu::halt_until_interrupt();
        },
    }
}

/// Makes every IPI of a [`TargetWait::Halt`] phase find its targets halted:
/// before each IPI the sender waits until each target is halting (the
/// first time in the phase) or has halted again since the sender's previous
/// IPI to it (`percpu::halted_seq` moved past what it saw then), and then
/// `BootInfo::halt_settle_ns` more, so that the `hlt` has left the guest.
/// With other waits it does nothing.
pub struct HaltGate {
    on: bool,
    settle_cycles: u64,
    /// `halted_seq` of each target when last IPI'd, [`NOT_YET`] before
    /// (a plain u64: the array lives on the sender's stack, 8 KiB at 1024 vCPUs).
    last: [u64; MAX_VCPUS],
}

/// [`HaltGate`]'s mark of a target not IPI'd yet in this phase.
const NOT_YET: u64 = u64::MAX;

impl HaltGate {
    /// A gate for `wait` (targets not yet IPI'd in this phase).
    pub fn new(ctx: &Ctx, wait: TargetWait) -> Self {
        let settle_ns = ctx.boot.halt_settle_ns;
        Self {
            on: wait == TargetWait::Halt,
            settle_cycles: settle_ns.saturating_mul(ctx.boot.tsc_khz) / 1_000_000,
            last: [NOT_YET; MAX_VCPUS],
        }
    }

    /// Waits until every vCPU of `targets` is halted (see the type), and
    /// records them as IPI'd in this state.
    pub fn wait(&mut self, targets: &VcpuSet) {
        if !self.on {
            return;
        }
        for t in targets.iter() {
            match self.last[t] {
                NOT_YET => wait_until("a target to halt", ACK_TIMEOUT_SECS, || {
                    percpu::is_halting(t)
                }),
                seen => wait_until("a target to halt again", ACK_TIMEOUT_SECS, || {
                    percpu::halted_seq(t) != seen
                }),
            }
            self.last[t] = percpu::halted_seq(t);
        }
        let start = ipivmm_guest::tsc::now_plain();
        while ipivmm_guest::tsc::now_plain().wrapping_sub(start) < self.settle_cycles {
            cpu::pause();
        }
    }

    /// [`HaltGate::wait`] for one target.
    pub fn wait_one(&mut self, t: usize) {
        let mut set = VcpuSet::new();
        set.insert(t);
        self.wait(&set);
    }
}

/// Sender side: lets the receivers of round `round` leave [`serve`].
/// Halted receivers need an IPI to notice; the caller sends it with `wake`
/// (after this, so the woken receiver sees the flag) and it is counted and
/// acked like any other IPI of the phase.
pub fn stop(round: u32, wait: TargetWait, targets: &VcpuSet, wake: impl FnOnce()) {
    STOP.store(stop_value(round), Ordering::Release);
    if wait != TargetWait::Spin {
        let acks = Acks::snapshot(targets);
        count_wake(targets.len());
        wake();
        acks.wait_all(targets);
    }
}

/// Receive counts of a set of vCPUs before an IPI, to wait for its ack.
pub struct Acks([u64; MAX_VCPUS]);

impl Acks {
    /// Current counts of `set`.
    pub fn snapshot(set: &VcpuSet) -> Self {
        let mut a = [0; MAX_VCPUS];
        for v in set.iter() {
            a[v] = percpu::received(v);
        }
        Self(a)
    }

    /// Waits until every vCPU of `set` took one more IPI.
    pub fn wait_all(&self, set: &VcpuSet) {
        for v in set.iter() {
            wait_ack(v, self.0[v]);
        }
    }
}

/// Waits until vCPU `v` has taken more than `before` IPIs.
#[inline(always)]
pub fn wait_ack(v: usize, before: u64) {
    let pc = percpu::of(v);
    wait_until("an IPI acknowledgement", ACK_TIMEOUT_SECS, || {
        pc.counters.ipis_received.load(Ordering::Acquire) != before
    });
}

/// The vCPUs other than 0, round robin: target of iteration `i`.
pub fn round_robin(i: u64, n: usize) -> usize {
    1 + (i % (n as u64 - 1)) as usize
}

/// Records cycles/IPI style summaries that need no floats.
pub fn record_rate(phase: u32, ipis: u64, cycles: u64, tsc_khz: u64) {
    control::record(phase, "ipis", ipis);
    control::record(phase, "cycles", cycles);
    if cycles > 0 && tsc_khz > 0 {
        // ipis * (khz * 1000) / cycles in u64 (no u128 division helpers).
        let per_sec = match (ipis * 1000).checked_mul(tsc_khz) {
            Some(x) => x / cycles,
            None => ipis / (cycles / tsc_khz).max(1) * 1000,
        };
        control::record(phase, "ipis_per_sec", per_sec);
    }
}
