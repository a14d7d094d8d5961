//! What each counting mechanism adds per traced event on this CPU, with
//! the kernel's own code paths (no TCG): the same programs and events as
//! for `kvm_exit`/`kvm_entry`, attached to `getppid(2)`'s tracepoints
//! (`syscalls:sys_enter_getppid` as the "exit", `sys_exit` as the "entry"),
//! which fire on any host. Each line is ns per getppid call, median of
//! ROUNDS rounds of CALLS calls, the mechanisms interleaved round by round:
//!
//! - `detached`: nothing attached;
//! - `bpf switched off`: the BPF object attached, this thread registered,
//!   its switch off (what an uncounted part of a phase costs);
//! - `bpf counting`: switch on (what a counted part costs);
//! - `sampler`: both events sampled into a ring (period 1, raw records),
//!   drained after each round;
//! - `counters xN`: N filtered counting events on the "exit", as
//!   `--exit-reasons counters` opens one per reason (110 on SVM).
//!
//! Needs root and tracefs. `cargo run --release -p ipivmm-counters
//! --example exit_cost [ROUNDS] [CALLS]`.
use std::sync::Arc;
use std::time::Instant;

use ipivmm_counters::bpf::{Attach, BpfExits};
use ipivmm_counters::sampler::event::SampledEvents;
use ipivmm_counters::tracefs::Tracefs;
use ipivmm_counters::tracepoint::TracepointCounter;

fn calls(n: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        // SAFETY: getppid takes no arguments and has no side effects.
        unsafe { libc::syscall(libc::SYS_getppid) };
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(15);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let tracefs = Tracefs::find().expect("tracefs (mount -t tracefs nodev /sys/kernel/tracing)");
    let enter = tracefs
        .event_format("syscalls", "sys_enter_getppid")
        .expect("syscalls:sys_enter_getppid");
    let exit_id = tracefs
        .event_id("raw_syscalls", "sys_exit")
        .expect("raw_syscalls:sys_exit");
    let at = Attach {
        exit: ("syscalls".into(), "sys_enter_getppid".into()),
        reason: vec!["__syscall_nr".into()],
        isa: vec![],
        entry: "sys_exit".into(),
        events: false,
    };
    let names = [
        "detached",
        "bpf switched off",
        "bpf counting",
        "sampler",
        "counters x10",
        "counters x110",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        results[0].push(calls(n));
        {
            let bpf = Arc::new(BpfExits::load(&tracefs, &at, 1, None).expect("BPF (root?)"));
            let mut me = bpf.register().expect("register");
            results[1].push(calls(n));
            me.set_counting(true);
            results[2].push(calls(n));
            let t = me.snapshot();
            assert!(t.counts().exits >= n, "the program counted");
        }
        {
            let mut s = SampledEvents::open(
                &[
                    (enter.id, "syscalls:sys_enter_getppid"),
                    (exit_id, "raw_syscalls:sys_exit"),
                ],
                1024,
            )
            .expect("sampler");
            s.enable().expect("enable");
            let mut per = Vec::new();
            // Drain every 2000 calls so the 4 MiB ring never fills.
            for _ in 0..n / 2000 {
                per.push(calls(2000));
                let _ = s.read();
            }
            results[3].push(per.iter().sum::<f64>() / per.len() as f64);
        }
        for (slot, k) in [(4, 10u64), (5, 110)] {
            let cs: Vec<TracepointCounter> = (0..k)
                .map(|i| {
                    TracepointCounter::open(
                        enter.id,
                        Some(&format!("__syscall_nr == {}", 1000 + i)),
                    )
                    .expect("counter")
                })
                .collect();
            results[slot].push(calls(n));
            drop(cs);
        }
    }
    let base = median(results[0].clone());
    println!(
        "ns per traced call (median of {rounds} rounds x {n} calls), and added over detached:"
    );
    for (name, r) in names.iter().zip(results) {
        let m = median(r);
        println!("{name:>18}: {m:8.1} ns  {:+8.1} ns", m - base);
    }
}
