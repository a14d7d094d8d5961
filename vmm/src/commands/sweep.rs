//! `ipivmm sweep`: run a plan of modes x workloads and print one table per
//! workload, a row per mode, side by side.
use super::fail;
use crate::cli::SweepArgs;
use crate::json::SkippedMode;
use crate::levers::{self, ApicvRequest};
use crate::output::{self, model, summary};
use crate::run::{run, RunOptions, RunReport, RunStatus};
use crate::sweep::{plan, PlannedRun, SweepSpec};
use crate::topology;
use comfy_table::{presets::UTF8_BORDERS_ONLY, CellAlignment, Table};
use ipivmm_abi::{ApicMode, TargetWait, Workload};
use ipivmm_counters::host::HostInfo;
use ipivmm_devices::serial::SerialSink;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Run the `sweep` subcommand.
pub fn main(args: &SweepArgs) -> ExitCode {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
    let host = ipivmm_counters::host::probe().ok();
    let spec = match spec_of(args, host.as_ref()) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let (runs, skips) = plan(&spec, host.as_ref());
    if runs.is_empty() {
        return fail(format!(
            "nothing to run: all {} combinations are skipped ({})",
            skips.len(),
            skips.first().map_or(String::new(), |s| s.reason.clone())
        ));
    }
    let json_stdout = output::dest::is_stdout(args.json.as_deref());
    let mut json_out = match args
        .json
        .as_deref()
        .map(|p| output::dest::open(p, "--json"))
        .transpose()
    {
        Ok(j) => j,
        Err(e) => return fail(e),
    };
    let mut csv_out = match args
        .csv
        .as_deref()
        .map(|p| output::dest::open(p, "--csv"))
        .transpose()
    {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if let Some(dir) = &args.plot {
        if let Err(e) = output::dest::prepare_dir(dir, "--plot") {
            return fail(e);
        }
    }

    let started = Instant::now();
    let cancel = crate::interrupt::cancel_flag();
    let progress = output::progress::SweepProgress::new(runs.len() as u64, args.quiet);
    let mut reports: Vec<RunReport> = Vec::new();
    let mut labels: Vec<String> = Vec::new();
    let mut skipped: Vec<SkippedMode> = skips
        .iter()
        .map(|s| SkippedMode {
            mode: s.label.clone(),
            reason: s.reason.clone(),
        })
        .collect();
    for PlannedRun { label, config } in &runs {
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
        match run(config, opts) {
            Ok(r) => {
                if !r.succeeded() {
                    progress.println(&format!("{label}: {}", status_text(&r.status)));
                }
                reports.push(r);
                labels.push(label.clone());
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
    let wall = started.elapsed();

    let refs: Vec<&RunReport> = reports.iter().collect();
    if !args.quiet {
        let labelled: Vec<(&str, &RunReport)> = labels
            .iter()
            .map(String::as_str)
            .zip(refs.iter().copied())
            .collect();
        let text = render(&labelled, &skipped, wall);
        if json_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }
    if let Some(out) = json_out.as_mut() {
        let doc = crate::json::document(refs.clone(), &skipped);
        if let Err(e) = crate::json::write(out, &doc) {
            return fail(format!("writing --json: {e}"));
        }
    }
    if let Some(out) = csv_out.as_mut() {
        if let Err(e) = output::csv::write_runs(&refs, out) {
            return fail(format!("writing --csv: {e}"));
        }
    }
    if let Some(dir) = &args.plot {
        if let Err(e) = output::svg::plot_runs(&refs, dir) {
            return fail(format!("writing --plot: {e}"));
        }
    }
    if cancel.load(Ordering::SeqCst) || reports.iter().any(|r| !r.succeeded()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn status_text(s: &RunStatus) -> String {
    match s {
        RunStatus::Completed => "completed".into(),
        RunStatus::Cancelled => "cancelled".into(),
        RunStatus::Failed { reason } => format!("FAILED: {reason}"),
        RunStatus::TimedOut { after_s, stuck } => format!("TIMED OUT after {after_s} s ({stuck})"),
    }
}

/// The sweep spec from presets and flags.
pub fn spec_of(args: &SweepArgs, host: Option<&HostInfo>) -> Result<SweepSpec, String> {
    let mut spec = SweepSpec::default();
    let host_cpus = levers::allowed_cpus();
    match args.preset.as_deref() {
        Some("avic-broadcast") => {
            // Wanpeng Li's report: broadcast, xAPIC vs x2APIC, AVIC on vs off,
            // dedicated vCPUs (HLT exits off, realtime hint), one vCPU per host CPU.
            spec.workloads = vec![Workload::Broadcast];
            spec.irqchips = vec![crate::config::Irqchip::Kernel];
            spec.ipis = vec![ipivmm_abi::IpiPath::Icr];
            spec.apicv = vec![ApicvRequest::Host, ApicvRequest::Inhibit];
            spec.base.vcpus = host_cpus.len().clamp(2, ipivmm_abi::MAX_VCPUS);
            spec.base.realtime_hint = true;
            spec.base.disable_exits = hlt_if_allowed();
        }
        Some("ipiv-unicast") => {
            // The IPIv series: 2 vCPUs, spinning target, xAPIC and x2APIC.
            spec.workloads = vec![Workload::Pingpong];
            spec.irqchips = vec![crate::config::Irqchip::Kernel];
            spec.ipis = vec![ipivmm_abi::IpiPath::Icr];
            spec.apicv = vec![ApicvRequest::Host, ApicvRequest::Inhibit];
            spec.base.vcpus = 2;
            spec.base.target_wait = TargetWait::Spin;
        }
        Some("apicv-topology") => {
            // The Xen report: the same workload with vCPUs close together vs spread apart.
            spec.workloads = vec![Workload::Pingpong];
            spec.irqchips = vec![crate::config::Irqchip::Kernel];
            spec.ipis = vec![ipivmm_abi::IpiPath::Icr];
            spec.apics = vec![ApicMode::X2apic];
            spec.base.vcpus = 2;
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
        Some(other) => return Err(format!("unknown preset '{other}'")),
        None => {}
    }
    let _ = host;
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
    if let Some(n) = args.vcpus {
        spec.base.vcpus = n;
    }
    if let Some(t) = args.target {
        spec.base.target_wait = t;
    }
    if let Some(bits) = args.disable_exits {
        spec.base.disable_exits = bits;
    }
    if args.halt_poll_ns.is_some() {
        spec.base.halt_poll_ns = args.halt_poll_ns;
    }
    spec.base.realtime_hint |= args.realtime_hint;
    spec.base.iterations = args.iterations;
    spec.base.warmup = args.warmup;
    if args.timeout == 0 {
        return Err("--timeout must be at least 1 second".into());
    }
    spec.base.timeout = Duration::from_secs(args.timeout);
    spec.base.tracepoints = !args.no_tracepoints;
    spec.base.mount_tracefs = args.mount_tracefs;
    if [
        spec.irqchips.is_empty(),
        spec.apics.is_empty(),
        spec.ipis.is_empty(),
        spec.workloads.is_empty(),
    ]
    .iter()
    .any(|e| *e)
    {
        return Err("every swept dimension needs at least one value".into());
    }
    Ok(spec)
}

/// HLT-exit disabling where this KVM allows it (the seed's `cpu-pm=on`).
fn hlt_if_allowed() -> u32 {
    let hlt = kvm_bindings::KVM_X86_DISABLE_EXITS_HLT;
    let allowed = crate::vm::open_kvm(std::path::Path::new("/dev/kvm"))
        .map(|k| {
            k.check_extension_raw(libc::c_ulong::from(kvm_bindings::KVM_CAP_X86_DISABLE_EXITS))
        })
        .unwrap_or(0);
    if allowed > 0 && (allowed as u32) & hlt != 0 {
        hlt
    } else {
        0
    }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// One table per workload, a row per mode (labelled as the plan named it:
/// "workload mode [apicv-inhibit] [placement]"; the mode's own levers follow).
pub fn render(reports: &[(&str, &RunReport)], skipped: &[SkippedMode], wall: Duration) -> String {
    let mut out = String::new();
    let mut workloads: Vec<&str> = Vec::new();
    for (_, r) in reports {
        if !workloads.contains(&r.mode.workload) {
            workloads.push(r.mode.workload);
        }
    }
    for w in workloads {
        let mut t = Table::new();
        t.load_style(UTF8_BORDERS_ONLY);
        t.set_header(vec![
            "mode",
            "APICv",
            "status",
            "p50 cycles",
            "p99 cycles",
            "p50 µs",
            "exits/IPI",
            "ICR-exits/IPI",
            "IPIs/s",
        ]);
        let mut vcpus = 0;
        for (label, r) in reports.iter().filter(|(_, r)| r.mode.workload == w) {
            vcpus = r.mode.vcpus;
            let (p50, p99, p50_us, epi, iepi, rate) = match model::Run::of_report(r) {
                Ok(m) => {
                    let s = summary::summarize(&m);
                    let lat = s.latency.as_ref();
                    let rate =
                        ipis_per_sec(r, s.ipis, summary::measured_phase(&m).map(|(id, _)| id));
                    (
                        fmt_opt(lat.map(|l| l.p50), 0),
                        fmt_opt(lat.map(|l| l.p99), 0),
                        fmt_opt(lat.and_then(|l| l.p50_ns).map(|ns| ns / 1000.0), 1),
                        fmt_opt(s.exits_per_ipi(), 2),
                        fmt_opt(s.icr_exits_per_ipi(), 2),
                        fmt_opt(rate, 0),
                    )
                }
                Err(_) => Default::default(),
            };
            let status = match &r.status {
                RunStatus::Completed => "ok".to_string(),
                RunStatus::Cancelled => "cancelled".into(),
                RunStatus::Failed { .. } => "FAILED".into(),
                RunStatus::TimedOut { .. } => "TIMEOUT".into(),
            };
            // The plan's label names the swept dimensions (APICv request,
            // placement); the mode's own levers follow it.
            let levers = r.mode.label();
            let levers = levers.split_once(' ').map_or("", |(_, rest)| rest);
            let mode = label.split_once(' ').map_or(*label, |(_, m)| m);
            let mode = if levers.is_empty() || mode.contains(levers) {
                mode.to_string()
            } else {
                format!("{mode} {levers}")
            };
            t.add_row(vec![
                mode,
                r.apicv.effective.to_string(),
                status,
                p50,
                p99,
                p50_us,
                epi,
                iepi,
                rate,
            ]);
        }
        for c in 3..9 {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        out.push_str(&format!("\n{w} ({vcpus} vCPUs)\n{t}\n"));
    }
    if !skipped.is_empty() {
        out.push_str(&format!("\nskipped {} combinations:\n", skipped.len()));
        // One line per reason: the modes it covers, without repeating workloads.
        let mut by_reason: Vec<(&str, Vec<&str>)> = Vec::new();
        for s in skipped {
            let mode = s.mode.split_once(' ').map_or(s.mode.as_str(), |(_, m)| m);
            match by_reason.iter_mut().find(|(r, _)| *r == s.reason) {
                Some((_, modes)) if modes.contains(&mode) => {}
                Some((_, modes)) => modes.push(mode),
                None => by_reason.push((&s.reason, vec![mode])),
            }
        }
        for (reason, modes) in by_reason {
            out.push_str(&format!(
                "  {} ({}): {reason}\n",
                modes.join(", "),
                skipped.iter().filter(|s| s.reason == reason).count()
            ));
        }
    }
    let failed = reports.iter().filter(|(_, r)| !r.succeeded()).count();
    out.push_str(&format!(
        "\nsweep: {} runs ({} failed), {} skipped, {:.1} s\n",
        reports.len(),
        failed,
        skipped.len(),
        wall.as_secs_f64()
    ));
    out
}

/// IPIs per second over the measured phase (vCPU 0's window).
fn ipis_per_sec(r: &RunReport, ipis: u64, phase: Option<u32>) -> Option<f64> {
    let wall = r.vcpus.first()?.phase(phase?)?.wall_ns;
    (wall > 0).then(|| ipis as f64 * 1e9 / wall as f64)
}
