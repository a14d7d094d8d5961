//! Library use in long test suites: many VM create/run/destroy cycles in one
//! process must not leak file descriptors or threads.
//!
//! `IPIVMM_LIFECYCLE_CYCLES` overrides the number of cycles (default 1000);
//! `scripts/bench-lifecycle.sh` runs this test with more cycles and reports
//! RSS growth.
use ipivmm::config::VmConfig;
use ipivmm::run::{run, RunOptions};
use ipivmm_analysis::mode::Workload;
use ipivmm_analysis::results::{RunStatus, VcpuEnd};
use ipivmm_tests::{code_payload, hostile, kvm_available};
use std::time::{Duration, Instant};

/// Warm-up runs before the baseline: one-time allocations (the kick signal
/// handler, lazily opened host files, allocator arenas) happen here.
const WARMUP: usize = 5;

fn count_entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn open_fds() -> usize {
    count_entries("/proc/self/fd")
}

fn threads() -> usize {
    count_entries("/proc/self/task")
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// `run` returns once every vCPU has reported its end; a vCPU thread may
/// still be closing its fds (vCPU fd, stats fd) for a moment after that, and
/// the run does not join it. Wait up to 2 s for fds and threads to come back
/// to `(fds, threads)`; returns what was counted last.
fn settle(fds: usize, threads_: usize) -> (usize, usize) {
    let deadline = Instant::now() + ipivmm_testkit::scaled(Duration::from_secs(2));
    loop {
        let now = (open_fds(), threads());
        if (now.0 <= fds && now.1 <= threads_) || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn cycles() -> usize {
    std::env::var("IPIVMM_LIFECYCLE_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn one_cycle(cfg: &VmConfig) {
    let r = match run(cfg, RunOptions::default()) {
        Ok(r) => r,
        Err(e) => panic!("run could not start: {e}"),
    };
    assert_eq!(r.status, RunStatus::Completed, "{:?}", r.status);
    assert!(matches!(
        r.vcpus[0].end,
        Some(VcpuEnd::Done { status: 0, .. })
    ));
}

#[test]
fn thousand_vm_cycles_leak_no_fds_or_threads() {
    if !kvm_available("thousand_vm_cycles_leak_no_fds_or_threads") {
        return;
    }
    // The smallest VM: 1 vCPU, minimum RAM, a payload that sends Done at
    // once, no tracepoints (they need root; they are per-run fds too, but
    // the point here is the VM itself).
    let cfg = VmConfig {
        vcpus: 1,
        workload: Workload::SelfIpi,
        memory_bytes: ipivmm::VmConfig::MIN_MEMORY_BYTES.next_multiple_of(1 << 20),
        payload: code_payload(hostile::DONE_IMMEDIATELY),
        timeout: ipivmm_testkit::scaled(Duration::from_secs(10)),
        tracepoints: false,
        ..Default::default()
    };
    for _ in 0..WARMUP {
        one_cycle(&cfg);
    }
    // Baseline once the warm-up's vCPU threads are gone: the harness's main
    // thread and this test's thread.
    let (_, threads0) = settle(usize::MAX, 2);
    let fds0 = open_fds();
    let rss0 = rss_kib();
    let n = cycles();
    let report = std::env::var_os("IPIVMM_LIFECYCLE_REPORT").is_some();
    if report {
        println!("lifecycle: baseline after {WARMUP} warm-up runs: {fds0} fds, {threads0} threads, RSS {rss0} KiB");
    }
    let started = Instant::now();
    for i in 0..n {
        one_cycle(&cfg);
        // A leak of one fd per cycle would hit the default soft limit (1024)
        // long before the end: check as we go for a clear message.
        if i % 100 == 99 || (report && (i + 1) % (n / 10).max(1) == 0) {
            let (fds, threads_) = settle(fds0, threads0);
            if report {
                println!(
                    "lifecycle: after {} cycles: {fds} fds, {threads_} threads, RSS {} KiB",
                    i + 1,
                    rss_kib()
                );
            }
            assert!(
                fds <= fds0,
                "after {} cycles: {fds} fds open, {fds0} at the start",
                i + 1
            );
        }
    }
    let took = started.elapsed();
    let (fds1, threads1) = settle(fds0, threads0);
    let rss1 = rss_kib();
    println!(
        "lifecycle: {n} cycles in {:.1} s ({:.2} ms each); fds {fds0} -> {fds1}; threads {threads0} -> {threads1}; \
         RSS {rss0} -> {rss1} KiB ({:+} KiB)",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e3 / n.max(1) as f64,
        rss1 as i64 - rss0 as i64
    );
    assert!(
        fds1 <= fds0,
        "open fds grew from {fds0} to {fds1} over {n} cycles"
    );
    // The test harness may run other tests' threads concurrently: this test
    // is alone in its binary, so the count is ours.
    assert!(
        threads1 <= threads0,
        "threads grew from {threads0} to {threads1} over {n} cycles"
    );
}
