//! What each counting mechanism adds per traced event on this CPU, with
//! the kernel's own code paths (no TCG): the same programs and events as
//! for `kvm_exit`/`kvm_entry`, attached to `getppid(2)`'s tracepoints
//! (`syscalls:sys_enter_getppid` as the "exit", `sys_exit` as the "entry"),
//! which fire on any host. Each line is ns per getppid call, median of
//! ROUNDS rounds of CALLS calls, the mechanisms interleaved round by round:
//!
//! - `detached`: nothing attached;
//! - `bpf, every thread off`: the BPF object loaded, this thread
//!   registered, every registered thread's switch off (what an uncounted
//!   part of a phase costs: the counting programs detached, an anchor event
//!   left on the "exit");
//! - `bpf attached, every thread off`: the same with the programs still
//!   attached (as right after loading), each returning after one load;
//! - `bpf, another thread counting`: this thread off while another
//!   registered thread counts (the exit program attached, returning after
//!   its thread lookup);
//! - `bpf counting`: switch on (what a counted part costs);
//! - `sampler`: both events sampled into a ring (period 1, raw records),
//!   drained after each round;
//! - `counters xN`: N filtered counting events on the "exit", as
//!   `--exit-reasons counters` opens one per reason (110 on SVM);
//! - `bpf raw ...`: the raw exit program (`on_exit_raw`, which the default
//!   uses where BTF says where KVM keeps the reason) on raw `sys_enter`,
//!   reading the number through `regs` as it reads a vCPU's reason: every
//!   thread off (it stays attached), and counting.
//!
//! Needs root and tracefs. `cargo run --release -p ipivmm-counters
//! --example exit_cost [ROUNDS] [CALLS]`.
use std::sync::Arc;
use std::time::Instant;

use ipivmm_counters::bpf::{Attach, BpfExits, ExitProgram};
use ipivmm_counters::sampler::event::SampledEvents;
use ipivmm_counters::tracefs::Tracefs;
use ipivmm_counters::tracepoint::TracepointCounter;

/// A loaded counter with its counting programs attached.
fn attached(
    b: Result<BpfExits, ipivmm_counters::bpf::BpfError>,
) -> Result<BpfExits, ipivmm_counters::bpf::BpfError> {
    let b = b?;
    b.attach_counting()?;
    Ok(b)
}

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
        exit_program: ExitProgram::Record {
            why_not_raw: "the record program is measured".into(),
        },
    };
    let orig_ax = ipivmm_counters::bpf::reason_at::kernel_offset(
        std::path::Path::new("/sys/kernel/btf"),
        "pt_regs",
        "orig_ax",
    )
    .expect("kernel BTF");
    // The raw program on raw sys_enter, reading the number through regs as
    // it reads a vCPU's exit reason (it runs at every syscall: only
    // getppid's are made while it is timed).
    let raw = Attach {
        exit_program: ExitProgram::Raw(ipivmm_counters::bpf::RawExit {
            event: "sys_enter".into(),
            at: ipivmm_counters::bpf::ReasonAt::Vmx {
                exit_reason: orig_ax,
            },
            what: "pt_regs' orig_ax",
        }),
        ..at.clone()
    };
    let names = [
        "detached",
        "bpf, every thread off",
        "bpf attached, all off",
        "bpf, another counting",
        "bpf counting",
        "sampler",
        "counters x10",
        "counters x110",
        "bpf raw, all off",
        "bpf raw counting",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    // Wall time of the first switch on (attach) and the last off (detach).
    let mut switches = Vec::new();
    let mut attaches = Vec::new();
    let mut closes = Vec::new();
    for _ in 0..rounds {
        results[0].push(calls(n));
        {
            let bpf =
                Arc::new(attached(BpfExits::load(&tracefs, &at, 2, None)).expect("BPF (root?)"));
            let mut me = bpf.register().expect("register");
            // Attached from the load on, every switch off.
            results[2].push(calls(n));
            {
                let (on_tx, on_rx) = std::sync::mpsc::channel();
                let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
                let other = bpf.clone();
                let counting = std::thread::spawn(move || {
                    let mut t = other.register().expect("register");
                    t.set_counting(true).expect("switch on");
                    on_tx.send(()).expect("main thread");
                    let _ = done_rx.recv();
                });
                on_rx.recv().expect("the counting thread");
                results[3].push(calls(n));
                done_tx.send(()).expect("the counting thread");
                counting.join().expect("the counting thread");
            }
            let t = std::time::Instant::now();
            me.set_counting(true).expect("switch on");
            attaches.push(t.elapsed().as_nanos() as f64);
            results[4].push(calls(n));
            let s = me.snapshot();
            assert!(s.counts().exits >= n, "the program counted");
            let t = std::time::Instant::now();
            me.set_counting(false).expect("switch off");
            switches.push(t.elapsed().as_nanos() as f64);
            let t = std::time::Instant::now();
            bpf.settle();
            closes.push(t.elapsed().as_nanos() as f64);
            results[1].push(calls(n));
            // Attaching after a detach (the counted part after an uncounted one).
            let t = std::time::Instant::now();
            me.set_counting(true).expect("switch on");
            attaches.push(t.elapsed().as_nanos() as f64);
            me.set_counting(false).expect("switch off");
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
            results[5].push(per.iter().sum::<f64>() / per.len() as f64);
        }
        {
            let bpf = Arc::new(attached(BpfExits::load(&tracefs, &raw, 2, None)).expect("BPF raw"));
            let mut me = bpf.register().expect("register");
            results[8].push(calls(n));
            me.set_counting(true).expect("switch on");
            results[9].push(calls(n));
            me.set_counting(false).expect("switch off");
        }
        for (slot, k) in [(6, 10u64), (7, 110)] {
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
        println!("{name:>22}: {m:8.1} ns  {:+8.1} ns", m - base);
    }
    println!(
        "bpf: the first switch on (attaching if detached): median {:.1} us, max {:.1} us",
        median(attaches.clone()) / 1e3,
        attaches.iter().copied().fold(0.0, f64::max) / 1e3
    );
    println!(
        "bpf: the last switch off (detaching): median {:.1} us, max {:.1} us",
        median(switches.clone()) / 1e3,
        switches.iter().copied().fold(0.0, f64::max) / 1e3
    );
    println!(
        "bpf: closing the detached links, on their own thread: median {:.1} us, max {:.1} us",
        median(closes.clone()) / 1e3,
        closes.iter().copied().fold(0.0, f64::max) / 1e3
    );
    kvm_switches(&tracefs, rounds);
}

/// What switching costs on the real attachment (kvm:kvm_exit, raw kvm_entry
/// and the event counters), where the kvm module is loaded: the wall time of
/// the last switch off, of the close it starts, and of the next switch on.
fn kvm_switches(tracefs: &Tracefs, rounds: usize) {
    if !tracefs.has_event("kvm", "kvm_exit") {
        println!("bpf on kvm: no kvm:kvm_exit here (kvm not loaded): not measured");
        return;
    }
    let at = Attach::for_kvm(None, None);
    let bpf = Arc::new(attached(BpfExits::load(tracefs, &at, 1, None)).expect("BPF on kvm"));
    let mut me = bpf.register().expect("register");
    me.set_counting(true).expect("switch on");
    let (mut off, mut close, mut on) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        me.set_counting(false).expect("switch off");
        off.push(t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        bpf.settle();
        close.push(t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        me.set_counting(true).expect("switch on");
        on.push(t.elapsed().as_nanos() as f64);
    }
    let us = |v: &Vec<f64>| {
        (
            median(v.clone()) / 1e3,
            v.iter().copied().fold(0.0, f64::max) / 1e3,
        )
    };
    let (a, b, c) = (us(&off), us(&close), us(&on));
    println!(
        "bpf on kvm: last switch off {:.1} us (max {:.1}), closing on its thread {:.1} us (max {:.1}), next switch on {:.1} us (max {:.1})",
        a.0, a.1, b.0, b.1, c.0, c.1
    );
}
