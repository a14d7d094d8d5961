//! Run reports built in code (no /dev/kvm) for the output tests.
#![allow(dead_code)]
use ipivmm::VmConfig;
use ipivmm_analysis::results::latency::LatencyStats;
use ipivmm_analysis::results::source::Source;
use ipivmm_analysis::results::{
    ExitCounts, ExitKind, IcrExits, PhaseResult, RunConfig, SourceStatus, Timings, VcpuEnd,
    VcpuResult,
};
use ipivmm_analysis::results::{RunReport, RunStatus};
use std::collections::BTreeMap;
use std::str::FromStr;

/// TSC rate of the fixtures: 2 GHz.
pub const TSC_KHZ: u64 = 2_000_000;
/// Measured IPIs per run.
pub const IPIS: u64 = 100;

/// The configuration `ipivmm run <flags>` would use, for the flags the
/// fixtures need (`--apic`, `--irqchip`, `--workload`, `--vcpus`).
pub fn config(flags: &[&str]) -> VmConfig {
    let mut c = VmConfig::default();
    for pair in flags.chunks(2) {
        let v = pair[1];
        match pair[0] {
            "--apic" => c.apic = FromStr::from_str(v).unwrap(),
            "--irqchip" => c.irqchip = FromStr::from_str(v).unwrap(),
            "--workload" => c.workload = FromStr::from_str(v).unwrap(),
            "--vcpus" => c.vcpus = v.parse().unwrap(),
            other => panic!("fixture flag {other} not supported"),
        }
    }
    c
}

/// What `ipivmm run <flags>` would record as its mode.
pub fn mode(flags: &[&str]) -> RunConfig {
    RunConfig::from(&config(flags))
}

/// Samples `base * (1 + k/100)`, k = 0..IPIS: p50 = 1.49 * base, p99 = 1.98 * base.
pub fn samples(base: u64) -> Vec<u64> {
    (0..IPIS).map(|k| base + k * base / 100).collect()
}

fn phase(id: u32, name: &str, sender: bool, base: u64, exits_per_ipi: u64) -> PhaseResult {
    let measured = id == 2;
    let ipis = if measured { IPIS } else { 0 };
    let mut exits = ExitCounts::default();
    exits.bump(ExitKind::IoOut);
    let samples = if measured && sender {
        samples(base)
    } else {
        Vec::new()
    };
    // Each vCPU takes half of the phase's exits: io for the markers, the rest MMIO.
    let kvm_exits = if measured {
        exits_per_ipi * ipis / 2
    } else {
        1
    };
    let kvm_stats = BTreeMap::from([
        ("exits".to_string(), kvm_exits),
        ("io_exits".to_string(), 1),
        ("mmio_exits".to_string(), kvm_exits.saturating_sub(1) / 2),
        ("halt_poll_success_ns".to_string(), 1234),
    ]);
    let tracepoints = BTreeMap::from([
        ("kvm_exit".to_string(), 0),
        (
            "kvm_apic:icr_write".to_string(),
            if sender { ipis } else { 0 },
        ),
    ]);
    PhaseResult {
        id,
        name: name.to_string(),
        wall_ns: 1_000_000,
        exits,
        guest: ipivmm::abi::GuestCounters {
            icr_writes: if sender { ipis } else { 0 },
            ipis_sent: if sender { ipis } else { 0 },
            ipis_received: if sender { 0 } else { ipis },
            handler_entries: if sender { 0 } else { ipis },
            eois: if sender { 0 } else { ipis },
            ..Default::default()
        },
        kvm_stats,
        tracepoints,
        by_source: Default::default(),
        exit_reasons: None,
        apicv: None,
        uncounted: false,
        unfinished: false,
        counted_while_off: 0,
        window_ns: (0, 0),
        icr_write_exits: Some(IcrExits {
            exits: if sender { ipis } else { 0 },
            accelerated: 0,
            source: ipivmm_analysis::results::IcrExits::SOURCE.into(),
        }),
        latency: LatencyStats::from_samples(&samples, TSC_KHZ),
        records: BTreeMap::from([("samples_dropped".to_string(), 0)]),
        samples,
    }
}

/// A completed 2-vCPU run: vCPU 0 sends IPIS IPIs with latency samples
/// around `base` cycles; all vCPUs together take `exits_per_ipi` KVM exits
/// per IPI in the measured phase.
///
/// Each call is a run of its own (its total time a nanosecond apart from
/// every other's): the gate counts a run found twice once, by content.
pub fn report(flags: &[&str], base: u64, exits_per_ipi: u64) -> RunReport {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let config = config(flags);
    let mode = RunConfig::from(&config);
    let apicv = ipivmm_analysis::mode::apicv::ApicvPlan::of(None, config.mode());
    let vcpus = (0..mode.vcpus)
        .map(|i| {
            let mut v = VcpuResult::new(i, i as u32);
            v.phases = vec![
                phase(0, "idle", i == 0, base, exits_per_ipi),
                phase(2, "measure", i == 0, base, exits_per_ipi),
            ];
            v.exits.bump(ExitKind::IoOut);
            v.sources = vec![
                SourceStatus::new(Source::KvmStats, true, None),
                SourceStatus::new(Source::Tracepoints, false, Some("not root".into())),
            ];
            v.end = Some(VcpuEnd::Done {
                status: 0,
                message: "ok".into(),
            });
            v
        })
        .collect();
    RunReport {
        mode,
        apicv,
        status: RunStatus::Completed,
        tsc_khz: TSC_KHZ,
        timings: Timings {
            setup_ns: 1_000,
            first_message_ns: Some(2_000),
            total_ns: 3_000_000 + nth,
            ..Default::default()
        },
        vcpus,
        serial_tail: "hello <&> \"guest\"\n".into(),
        serial_dropped_bytes: 0,
        observer_effect: None,
        apicv_observed: None,
        host_settings: None,
        host_param: None,
        placement: None,
        repeat: None,
        host_load: None,
        recorded_metrics: None,
        host: None,
    }
}

/// A fresh temporary directory for one test.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ipivmm-output-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
