//! `ipivmm sweep`: run a plan of modes x workloads x vCPU counts and print
//! one table per workload, a row per mode, side by side.
use super::sweep_host::{preflight, run_stages};
use super::{fail, init_log, status_line};
use crate::cli::args::{Preset, SweepArgs};
use ipivmm::mode::levers::{allowed_exit_controls, ExitControl};
use ipivmm::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, TargetWait, Workload};
use ipivmm::output::dest::{print_text, Outputs};
use ipivmm::output::progress::SweepProgress;
use ipivmm::output::sweep_tables;
use ipivmm::results::SkippedMode;
use ipivmm::sweep::{plan, topology, PlannedRun, SweepSpec};
use ipivmm::vm::{max_vcpus, open_kvm};
use ipivmm::SerialSink;
use ipivmm::{run, Document, RunOptions, RunReport};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Run the `sweep` subcommand.
pub fn main(args: &SweepArgs) -> ExitCode {
    init_log("warn");
    // Signals from here on cancel the sweep cleanly (host switch included).
    let cancel = ipivmm::interrupt::cancel_flag();
    let host = ipivmm::host::probe().ok();
    let spec = match spec_of(args).and_then(|s| validate(&s).map(|_| s)) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let host_sweep = match preflight(&spec.host_params, host.as_ref()) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    let (runs, mut skipped) = plan(&spec, host.as_ref());
    if let Some(note) = oversubscription_note(&spec) {
        if !args.quiet {
            eprintln!("{note}");
        }
    }
    if runs.is_empty() && host_sweep.is_none() {
        return fail(format!(
            "nothing to run: all {} combinations are skipped ({})",
            skipped.len(),
            skipped.first().map_or(String::new(), |s| s.reason.clone())
        ));
    }
    let o = &args.output;
    let outputs = match Outputs::plan(o.json.as_deref(), o.csv.as_deref(), o.plot.as_deref(), &[]) {
        Ok(out) => out,
        Err(e) => return fail(e),
    };
    let started = Instant::now();
    let (reports, switch_errors) = match &host_sweep {
        None => (
            run_all(&runs, &mut skipped, args.quiet, args.observer_effect),
            Vec::new(),
        ),
        Some(hs) => {
            let out = run_stages(&spec, hs, args.quiet, &cancel, args.observer_effect);
            skipped = out.skipped;
            (out.reports, out.errors)
        }
    };
    let wall = started.elapsed();
    let ran = reports.len();
    let doc = Document::new(reports, skipped);
    let errors = outputs.write(&doc);
    if !args.quiet {
        print_text(&sweep_tables::render(&doc, wall), outputs.uses_stdout());
    }
    for e in errors.iter().chain(&switch_errors) {
        eprintln!("ipivmm: error: {e}");
    }
    let cancelled = cancel.load(Ordering::SeqCst);
    let failed = !errors.is_empty() || !switch_errors.is_empty();
    if cancelled || ran == 0 || failed || doc.runs.iter().any(|r| !r.succeeded()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs the plan in order; runs that could not start (or were not started
/// after a cancel) join the skipped list with the reason.
/// The first run also measures what counting costs (`observer_pairs` pairs
/// of runs with the counters detached and attached), so every sweep says it.
pub fn run_all(
    runs: &[PlannedRun],
    skipped: &mut Vec<SkippedMode>,
    quiet: bool,
    observer_pairs: u32,
) -> Vec<RunReport> {
    let cancel = ipivmm::interrupt::cancel_flag();
    let progress = SweepProgress::new(runs.len() as u64, quiet);
    let mut reports = Vec::with_capacity(runs.len());
    for PlannedRun {
        label,
        config,
        host_param,
    } in runs
    {
        if cancel.load(Ordering::SeqCst) {
            skipped.push(SkippedMode {
                mode: label.clone(),
                reason: "not run: sweep cancelled".into(),
            });
            continue;
        }
        progress.start(label);
        let opts = RunOptions {
            serial: SerialSink::Discard,
            started: Instant::now(),
            cancel: Some(cancel.clone()),
        };
        let observer = if reports.is_empty() {
            ipivmm::run::observer::measure(config, observer_pairs, Some(cancel.clone()))
                .unwrap_or_else(|e| {
                    progress.println(&format!("{label}: counting cost not measured: {e}"));
                    None
                })
        } else {
            None
        };
        match run(config, opts) {
            Ok(mut r) => {
                r.observer_effect = observer;
                r.host_param = host_param.clone();
                if !r.succeeded() {
                    progress.println(&format!("{label}: {}", status_line(&r.status)));
                }
                reports.push(r);
            }
            Err(e) => {
                progress.println(&format!("{label}: could not start: {e}"));
                skipped.push(SkippedMode {
                    mode: label.clone(),
                    reason: format!("could not start: {e}"),
                });
            }
        }
        progress.finish_one();
    }
    progress.finish();
    reports
}

/// Checks every configuration's own values the way `run` does, before any
/// run: a bad value is a usage error (exit 2), not a sweep of skips.
fn validate(spec: &SweepSpec) -> Result<(), String> {
    let max = open_kvm(&spec.base.kvm_device)
        .map(|k| max_vcpus(&k))
        .map_err(|e| e.to_string())?;
    // xAPIC's 255-vCPU limit is a skipped row (sweep::skip_reason), not a
    // usage error, when the sweep also has x2APIC rows.
    let apic = if spec.apics.contains(&ApicMode::X2apic) {
        ApicMode::X2apic
    } else {
        spec.apics.first().copied().unwrap_or(ApicMode::X2apic)
    };
    for &vcpus in &spec.vcpus {
        let c = ipivmm::VmConfig {
            vcpus,
            apic,
            memory_bytes: spec
                .base
                .memory_bytes
                .max(ipivmm::vm::layout::default_mem_bytes(vcpus)),
            ..spec.base.clone()
        };
        c.validate(max).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The sweep spec from presets and flags.
pub fn spec_of(args: &SweepArgs) -> Result<SweepSpec, String> {
    let mut spec = SweepSpec::default();
    if let Some(p) = args.preset {
        apply_preset(&mut spec, p);
    }
    if let Some(v) = &args.irqchip {
        spec.irqchips = v.clone();
    }
    if let Some(v) = &args.apic {
        spec.apics = v.clone();
    }
    if let Some(v) = &args.ipi {
        spec.ipis = v.clone();
    }
    if let Some(v) = &args.apicv {
        spec.apicv = v.clone();
    }
    if let Some(v) = &args.workload {
        spec.workloads = v.clone();
    }
    if let Some(v) = &args.vcpus {
        spec.vcpus = v.0.clone();
    }
    if let Some(v) = &args.host_param {
        spec.host_params = v.0.clone();
    }
    if let Some(t) = args.target {
        spec.base.target_wait = t;
    }
    spec.base.iterations = args.iterations;
    spec.base.warmup = args.warmup;
    spec.base.timeout = Duration::from_secs(args.timeout);
    args.levers.apply(&mut spec.base);
    let empty = [
        spec.irqchips.is_empty(),
        spec.apics.is_empty(),
        spec.ipis.is_empty(),
        spec.apicv.is_empty(),
        spec.workloads.is_empty(),
        spec.vcpus.is_empty(),
    ];
    if empty.iter().any(|e| *e) {
        return Err("every swept dimension needs at least one value".into());
    }
    Ok(spec)
}

/// The seed experiments at this host's scale; presets skip rows this host
/// cannot tell apart (e.g. `apicv=inhibit` without APICv).
fn apply_preset(spec: &mut SweepSpec, p: Preset) {
    let host_cpus = ipivmm::mode::levers::allowed_cpus();
    spec.skip_duplicates = true;
    spec.irqchips = vec![Irqchip::Kernel];
    spec.ipis = vec![IpiPath::Icr];
    match p {
        Preset::AvicBroadcast => {
            // Wanpeng Li's report: broadcast, xAPIC vs x2APIC, AVIC on vs off,
            // dedicated vCPUs (HLT exits off, realtime hint), one vCPU per host CPU.
            // The regression showed at 180 vCPUs: the N curve up to there,
            // or to what this KVM allows.
            spec.workloads = vec![Workload::Broadcast];
            spec.apicv = vec![ApicvRequest::Host, ApicvRequest::Inhibit];
            let kvm_max = open_kvm(&spec.base.kvm_device)
                .map(|k| max_vcpus(&k))
                .unwrap_or(2);
            let top = AVIC_BROADCAST_VCPUS.min(kvm_max).max(2);
            spec.vcpus = ipivmm::sweep::vcpus::range(2, top).unwrap_or_else(|_| vec![2]);
            spec.base.realtime_hint = true;
            // Dedicated vCPUs: HLT exits off, unless vCPUs outnumber host
            // CPUs (a vCPU halted in the guest would then hold its CPU).
            if top <= host_cpus.len() {
                spec.base.disable_exits = hlt_if_allowed();
            }
        }
        Preset::IpivUnicast => {
            // The IPIv series: 2 vCPUs, spinning target, xAPIC and x2APIC.
            spec.workloads = vec![Workload::Pingpong];
            spec.apicv = vec![ApicvRequest::Host, ApicvRequest::Inhibit];
            spec.vcpus = vec![2];
            spec.base.target_wait = TargetWait::Spin;
        }
        Preset::ApicvTopology => {
            // The Xen report: the same workload with vCPUs close together vs spread apart.
            spec.workloads = vec![Workload::Pingpong];
            spec.apics = vec![ApicMode::X2apic];
            spec.vcpus = vec![2];
            let places =
                topology::read_places(std::path::Path::new("/sys/devices/system/cpu"), &host_cpus);
            let close = topology::close_together(&places, 2);
            let spread = topology::spread_apart(&places, 2);
            let fmt = |v: &[usize]| {
                v.iter()
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            spec.placements = vec![
                (format!("close[{}]", fmt(&close)), close),
                (format!("spread[{}]", fmt(&spread)), spread),
            ];
        }
    }
}

/// vCPUs of the seed's AVIC broadcast report.
pub const AVIC_BROADCAST_VCPUS: usize = 180;

/// A note for a sweep whose largest VM outnumbers the host CPUs, if it does.
fn oversubscription_note(spec: &SweepSpec) -> Option<String> {
    let cpus = ipivmm::mode::levers::allowed_cpus().len();
    let n = spec.vcpus.iter().copied().max()?;
    (cpus > 0 && n > cpus).then(|| {
        let spin = if spec.base.target_wait == TargetWait::Spin {
            "; spinning targets each need a time slice per IPI (--target halt-immediate is much faster)"
        } else {
            ""
        };
        format!(
            "ipivmm: note: oversubscribed: up to {n} vCPUs on {cpus} host CPUs: rows above {cpus} vCPUs time-share the CPUs{spin}"
        )
    })
}

/// HLT-exit disabling where this KVM allows it (the seed's `cpu-pm=on`).
fn hlt_if_allowed() -> ipivmm::mode::levers::ExitControls {
    let allowed = open_kvm(std::path::Path::new("/dev/kvm"))
        .map(|k| allowed_exit_controls(|c| k.check_extension_raw(c)))
        .unwrap_or_default();
    [ExitControl::Hlt]
        .into_iter()
        .filter(|c| allowed.contains(*c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;
    use ipivmm::host::{ApicvSupport, ApicvVerdicts, HostInfo, KvmBackend};

    fn sweep_args(flags: &[&str]) -> SweepArgs {
        let mut argv = vec!["ipivmm", "sweep"];
        argv.extend_from_slice(flags);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Sweep(a) => a,
            _ => unreachable!("sweep was parsed"),
        }
    }

    fn host(backend: KvmBackend, apicv: bool) -> HostInfo {
        let v = if apicv {
            ApicvSupport::Available
        } else {
            ApicvSupport::Unavailable("kvm_pvm backend: no VMX/SVM, so no APICv/AVIC/IPIv".into())
        };
        HostInfo {
            cpu_vendor: "GenuineIntel".into(),
            cpu_model: "x".into(),
            cpu_family_model: (None, None),
            logical_cpus: 2,
            virt_flags: Default::default(),
            kernel_release: "6.18".into(),
            dev_kvm: Default::default(),
            backend,
            modules: vec![],
            params: Default::default(),
            verdicts: ApicvVerdicts {
                apicv: v.clone(),
                ipiv: v.clone(),
                avic: v.clone(),
                x2avic: v,
            },
        }
    }

    /// `sweep --preset ipiv-unicast --iterations 5 --warmup 1` on a host
    /// without APICv: the inhibit rows would run the same VM as the host
    /// rows, so they are skipped, each with the reason.
    #[test]
    fn ipiv_unicast_preset_skips_inhibit_rows_without_apicv() {
        let args = sweep_args(&[
            "--preset",
            "ipiv-unicast",
            "--iterations",
            "5",
            "--warmup",
            "1",
        ]);
        let spec = spec_of(&args).unwrap();
        assert!(spec.skip_duplicates);
        assert_eq!((spec.base.iterations, spec.base.warmup), (5, 1));
        let (runs, skips) = plan(&spec, Some(&host(KvmBackend::KvmPvm, false)));
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pingpong 2v kernel/xapic/icr",
                "pingpong 2v kernel/x2apic/icr"
            ]
        );
        let skipped: Vec<&str> = skips.iter().map(|s| s.mode.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "pingpong 2v kernel/xapic/icr apicv-inhibit",
                "pingpong 2v kernel/x2apic/icr apicv-inhibit"
            ]
        );
        for s in &skips {
            assert!(
                s.reason
                    .starts_with("identical to the apicv=host row on this host: APICv unavailable"),
                "{s:?}"
            );
        }
        // Where APICv is on (Intel), both inhibit rows run: xAPIC with
        // modified APIC IDs, x2APIC with the SynIC lever.
        let (runs, skips) = plan(&spec, Some(&host(KvmBackend::KvmIntel, true)));
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pingpong 2v kernel/xapic/icr",
                "pingpong 2v kernel/xapic/icr apicv-inhibit",
                "pingpong 2v kernel/x2apic/icr",
                "pingpong 2v kernel/x2apic/icr apicv-inhibit"
            ]
        );
        assert!(skips.is_empty(), "{skips:?}");
    }
}
