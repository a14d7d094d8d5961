//! `ipivmm sweep`: run a plan of modes x workloads x vCPU counts and print
//! one table per workload, a row per mode, side by side. Planning, the
//! presets and running the plan are the library's (`crate::sweep`).
use super::{fail, finish, init_log, plan_outputs, skip_all};
use crate::cli::args::{repeat_choice, SweepArgs};
use crate::output::dest::print_text;
use crate::output::journal::Journal;
use crate::output::progress::SweepProgress;
use crate::output::{repeats, sweep_tables};
use crate::sweep::execute::SweepEvents;
use crate::sweep::host_stages::preflight;
use crate::sweep::planned::PlannedSweep;
use crate::sweep::presets::PresetHost;
use crate::sweep::{plan, SweepSpec, WorkloadArg};
use ipivmm::analysis::mode::LinuxWorkload;
use ipivmm_analysis::mode::{ApicMode, IpiPath, Irqchip, TargetWait};
use std::cell::RefCell;
use std::process::ExitCode;
use std::time::Duration;

/// Why a sweep was not planned.
#[derive(Debug)]
pub enum PlanError {
    /// The request itself is wrong (exit 2).
    Usage(String),
    /// Every combination is skipped on this host: with expectations, each
    /// is a skip (exit 4).
    NothingToRun(String),
    /// No VM can run here at all (no usable /dev/kvm): as `run` says it,
    /// a skip with expectations (exit 4), an error without.
    HostCannotRun(String),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::Usage(s) | PlanError::NothingToRun(s) | PlanError::HostCannotRun(s) => {
                f.write_str(s)
            }
        }
    }
}

impl From<String> for PlanError {
    fn from(s: String) -> Self {
        PlanError::Usage(s)
    }
}

impl From<PlanError> for String {
    fn from(e: PlanError) -> Self {
        e.to_string()
    }
}

/// Checks `args` and plans the sweep on this host; an error is a usage
/// error or a plan with nothing to run.
pub fn plan_sweep(args: &SweepArgs) -> Result<PlannedSweep, PlanError> {
    plan_on_this_host(args, false)
}

/// [`plan_sweep`]; with `empty_ok`, a plan whose every row is skipped here
/// too (what a dry run prints: the rows, and why none runs here).
fn plan_on_this_host(args: &SweepArgs, empty_ok: bool) -> Result<PlannedSweep, PlanError> {
    let host = ipivmm_host::facts::probe().ok();
    let preset_host = args
        .preset
        .map(|_| PresetHost::probe(std::path::Path::new("/dev/kvm"), host.clone()));
    let spec = spec_of(args, preset_host.as_ref())?;
    validate(&spec)?;
    let host_sweep = preflight(&spec.host_params, host.as_ref())?;
    let (runs, skipped) = plan(&spec, host.as_ref());
    if runs.is_empty() && host_sweep.is_none() && !empty_ok {
        return Err(PlanError::NothingToRun(format!(
            "nothing to run: all {} combinations are skipped ({})",
            skipped.len(),
            skipped.first().map_or(String::new(), |s| s.reason.clone())
        )));
    }
    let preset = args
        .preset
        .zip(preset_host.as_ref())
        .map(|(p, h)| p.report(h, &runs, &skipped));
    Ok(PlannedSweep::new(spec, host, host_sweep, preset))
}

/// Run the `sweep` subcommand.
pub fn main(args: &SweepArgs) -> ExitCode {
    init_log("warn");
    // Signals from here on cancel the sweep cleanly (host switch included).
    let cancel = ipivmm_analysis::interrupt::cancel_flag();
    let outputs = match plan_outputs(&args.output, &args.gate, &[]) {
        Ok(out) => out,
        Err(e) => return fail(e),
    };
    let planned = match plan_sweep(args) {
        Ok(p) => p,
        Err(PlanError::NothingToRun(why)) if args.dry_run => {
            // The plan still says what would run where it can (a Linux
            // row: on a hardware KVM or in the lab), then why not here.
            if let Ok(p) = plan_on_this_host(args, true) {
                let layout = crate::output::fit::Layout::wide(args.wide);
                let choice = repeat_choice(args.repeat);
                let cancel = ipivmm_analysis::interrupt::cancel_flag();
                let (repeats, pairs) = (choice.planned(), args.observer_effect);
                super::sweep_dry_run::main(&p, repeats, pairs, &cancel, layout);
            }
            return skip_all(&args.gate, &outputs, "ipivmm sweep", &why);
        }
        Err(PlanError::NothingToRun(why) | PlanError::HostCannotRun(why)) => {
            return skip_all(&args.gate, &outputs, "ipivmm sweep", &why)
        }
        Err(e) => return fail(e),
    };
    if let Some(note) = oversubscription_note(planned.spec()) {
        if !args.quiet {
            super::say(&note);
        }
    }
    // What the preset asks and what this host can answer, before anything runs.
    if let (Some(p), false) = (planned.preset(), args.quiet) {
        let text = sweep_tables::preset_text(p);
        match args.wide {
            true => eprint!("{text}"),
            false => eprint!("{}", crate::output::fit::wrap(&text)),
        }
    }
    let choice = repeat_choice(args.repeat);
    if args.dry_run {
        let layout = crate::output::fit::Layout::wide(args.wide);
        let (repeats, pairs) = (choice.planned(), args.observer_effect);
        return super::sweep_dry_run::main(&planned, repeats, pairs, &cancel, layout);
    }
    let layout = crate::output::fit::Layout::wide(args.wide);
    if !args.quiet {
        eprint!("{}", layout.lines(&format!("repeats: {choice}\n")));
    }
    let configs = crate::sweep::plan(planned.spec(), planned.host()).0.len();
    if let Some(why) = choice.rounds(args.budget).cannot_settle(configs) {
        return fail(why);
    }
    let journal = Journal::start(
        outputs.file_of("json"),
        "sweep",
        planned.spec().base.guest_memory_budget,
    );
    let progress = Progress::new(args.quiet);
    let swept = planned.run(
        args.observer_effect,
        choice.rounds(args.budget),
        &cancel,
        &progress,
        journal,
    );
    drop(progress);
    let errors = outputs.write(&swept.doc);
    if !args.quiet {
        let mut text = sweep_tables::render_with(&swept.doc, swept.wall, layout);
        text.push('\n');
        text.push_str(
            &layout.lines(&repeats::render(&swept.doc.configurations, None, &|i| {
                super::run::own_p50(&swept.doc.runs[i])
            })),
        );
        print_text(&text, outputs.uses_stdout());
    }
    if args.quiet {
        // Nothing else is printed: say what ran and where it went.
        eprintln!("{}", quiet_summary(&swept.doc, &outputs.destinations()));
    }
    let errors: Vec<String> = errors.into_iter().chain(swept.errors).collect();
    finish(
        &swept.doc,
        &args.gate,
        &outputs,
        "ipivmm sweep",
        swept.ok,
        errors,
    )
}

/// The one line of a quiet sweep: what ran, and where the results went
/// (`dest`, one `--flag PATH` each) or that they went nowhere.
fn quiet_summary(doc: &ipivmm_analysis::results::Document, dest: &[String]) -> String {
    let failed = doc.runs.iter().filter(|r| !r.succeeded()).count();
    let runs = match doc.runs.len() {
        1 => "1 run".to_string(),
        n => format!("{n} runs"),
    };
    let went = match dest.is_empty() {
        true => "not kept: give --json FILE (or --csv, --plot) to keep them".to_string(),
        false => format!("in {}", dest.join(", ")),
    };
    format!(
        "ipivmm: sweep: {runs} ({failed} failed), {} skipped; results {went}",
        doc.skipped.len()
    )
}

/// The sweep's events on the terminal: a progress bar per stage (hidden
/// when quiet or stderr is not a terminal) and the notes above it.
struct Progress {
    quiet: bool,
    bar: RefCell<Option<SweepProgress>>,
}

impl Progress {
    fn new(quiet: bool) -> Self {
        Self {
            quiet,
            bar: RefCell::new(None),
        }
    }

    /// `text` above the bar, or on stderr (wrapped at 120 columns).
    fn print(&self, text: &str) {
        let text = crate::output::fit::wrap(text);
        match &*self.bar.borrow() {
            Some(b) if b.is_visible() => b.println(text.trim_end()),
            _ => eprintln!("{}", text.trim_end()),
        }
    }
}

impl SweepEvents for Progress {
    /// One count over the sweep: a round of reruns (a busy repeat) or
    /// another host stage adds to it (a new bar said "run 1/1" after "run
    /// 10/10").
    fn planned(&self, runs: usize) {
        let mut bar = self.bar.borrow_mut();
        match &*bar {
            Some(b) => b.plan_more(runs as u64),
            None => *bar = Some(SweepProgress::new(runs as u64, self.quiet)),
        }
    }
    fn start(&self, label: &str) {
        if let Some(b) = &*self.bar.borrow() {
            b.start(label);
        }
    }
    fn note(&self, line: &str) {
        if !self.quiet {
            self.print(line);
        }
    }
    fn failed(&self, line: &str) {
        self.print(line);
    }
    fn host(&self, line: &str) {
        self.print(line);
    }
    fn finished_one(&self) {
        if let Some(b) = &*self.bar.borrow() {
            b.finish_one();
        }
    }
}

/// Checks every configuration's own values the way `run` does, before any
/// run: a bad value is a usage error (exit 2), not a sweep of skips.
fn validate(spec: &SweepSpec) -> Result<(), PlanError> {
    // The Linux guest's files, read and checked once as `run` does (the
    // user's mistakes before the host's).
    if let Some(g) = &spec.linux {
        g.check_files()
            .map_err(|e| PlanError::Usage(e.to_string()))?;
    }
    let max = ipivmm::host::KvmInfo::open(&spec.base.kvm_device)
        .map(|k| k.max_vcpus)
        .map_err(|e| PlanError::HostCannotRun(e.to_string()))?;
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
                .max(ipivmm::VmConfig::default_memory_bytes(vcpus)),
            ..spec.base.clone()
        };
        c.validate(max)
            .map_err(|e| PlanError::Usage(e.to_string()))?;
    }
    Ok(())
}

/// The sweep spec from the preset (planned for `preset_host`) and flags.
pub fn spec_of(args: &SweepArgs, preset_host: Option<&PresetHost>) -> Result<SweepSpec, String> {
    let mut spec = SweepSpec {
        linux: args.linux.sweep_guest()?,
        ..SweepSpec::default()
    };
    if let (Some(p), Some(h)) = (args.preset, preset_host) {
        p.apply(&mut spec, h);
    }
    // Each Linux row is a boot (tens of seconds nested): a Linux sweep
    // crosses the in-kernel irqchip and ICR writes unless asked for more.
    if spec.linux.is_some() && args.preset.is_none() {
        spec.irqchips = vec![Irqchip::Kernel];
        spec.ipis = vec![IpiPath::Icr];
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
    spec.base.headline_phase = args.phase.clone();
    spec.base.timeout = Duration::from_secs(args.timeout);
    spec.host_cpus = ipivmm_analysis::mode::levers::allowed_cpus().len();
    spec.force = args.force;
    args.levers.apply(&mut spec.base);
    // `--pin` is the one placement of every row, unless a preset places
    // the vCPUs itself (close, spread).
    let pin = &args.levers.set.0.pin;
    if !pin.is_empty() {
        if spec.placements.iter().any(|(name, _)| !name.is_empty()) {
            return Err(
                "--pin: this preset places the vCPUs itself (close, spread); drop --pin".into(),
            );
        }
        spec.placements = vec![(String::new(), pin.clone())];
    }
    // With a swept limit (the halt-polling preset), an explicit
    // --halt-poll-ns is its polling side, against 0.
    if let (Some(ns), false) = (args.levers.set.0.halt_poll_ns, spec.halt_polls.is_empty()) {
        spec.halt_polls = match ns {
            0 => vec![Some(0)],
            ns => vec![Some(ns), Some(0)],
        };
    }
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
    linux_workloads_have_a_guest(&spec)?;
    Ok(spec)
}

/// A `linux:NAME` workload needs `--kernel`, and `--kernel` a `linux:NAME`
/// workload to boot it for: one line naming the flag either way.
fn linux_workloads_have_a_guest(spec: &SweepSpec) -> Result<(), String> {
    let linux = spec.workloads.iter().find_map(|w| match w {
        WorkloadArg::Linux(w) => Some(*w),
        WorkloadArg::Payload(_) => None,
    });
    match (linux, &spec.linux) {
        (Some(w), None) => Err(crate::cli::linux_args::needs_kernel(w)),
        (None, Some(g)) => Err(format!(
            "--kernel {}: no --workload is a Linux guest's; add linux:NAME (one of {})",
            g.kernel.display(),
            LinuxWorkload::ALL
                .iter()
                .map(|w| w.label())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok(()),
    }
}

/// A note for a sweep whose largest VM outnumbers the host CPUs, if it does.
fn oversubscription_note(spec: &SweepSpec) -> Option<String> {
    let cpus = ipivmm_analysis::mode::levers::allowed_cpus().len();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;
    use ipivmm::host::KvmBackend;
    use ipivmm_host::facts::HostInfo;

    fn sweep_args(flags: &[&str]) -> SweepArgs {
        let mut argv = vec!["ipivmm", "sweep"];
        argv.extend_from_slice(flags);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Sweep(a) => *a,
            _ => unreachable!("sweep was parsed"),
        }
    }

    fn host(backend: KvmBackend, apicv: bool) -> HostInfo {
        HostInfo::synthetic(backend, apicv)
    }

    fn two_cpus() -> PresetHost {
        PresetHost {
            cpus: vec![0, 1],
            kvm_max_vcpus: 1024,
            ..Default::default()
        }
    }

    /// `sweep --preset halt-polling` sweeps the host's limit against 0;
    /// with `--halt-poll-ns N` the polling side is N, and the labels say
    /// which row is which.
    #[test]
    fn halt_polling_preset_takes_an_explicit_limit_as_its_polling_side() {
        let spec = spec_of(
            &sweep_args(&["--preset", "halt-polling"]),
            Some(&two_cpus()),
        )
        .unwrap();
        assert_eq!(spec.halt_polls, [None, Some(0)]);
        let args = sweep_args(&["--preset", "halt-polling", "--halt-poll-ns", "50000"]);
        let spec = spec_of(&args, Some(&two_cpus())).unwrap();
        assert_eq!(spec.halt_polls, [Some(50_000), Some(0)]);
        let (runs, _) = plan(&spec, Some(&host(KvmBackend::KvmPvm, false)));
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pingpong 2v kernel/x2apic/icr poll:50000",
                "pingpong 2v kernel/x2apic/icr poll:0"
            ]
        );
        // Without the preset, --halt-poll-ns is every row's one setting,
        // unlabelled as before.
        let args = sweep_args(&["--workload", "pingpong", "--halt-poll-ns", "0"]);
        let spec = spec_of(&args, None).unwrap();
        assert!(spec.halt_polls.is_empty());
        let (runs, _) = plan(&spec, Some(&host(KvmBackend::KvmPvm, false)));
        assert!(runs
            .iter()
            .all(|r| r.config.levers.halt_poll_ns == Some(0) && !r.label.contains("poll")));
    }

    /// Issue 49: `sweep --kernel K --initrd I --workload linux:ipi-broadcast
    /// --apic xapic,x2apic` plans 2 rows (a Linux sweep crosses the
    /// in-kernel irqchip and ICR writes unless asked for more); a Linux
    /// workload without --kernel, or --kernel without one, is one line
    /// naming the flag.
    #[test]
    fn linux_workloads_need_a_kernel_and_plan_two_rows() {
        let k = ["--kernel", "/boot/vmlinuz", "--initrd", "/tmp/initrd"];
        let mut flags = k.to_vec();
        flags.extend([
            "--workload",
            "linux:ipi-broadcast",
            "--apic",
            "xapic,x2apic",
        ]);
        let spec = spec_of(&sweep_args(&flags), None).unwrap();
        let (runs, skips) = plan(&spec, Some(&host(KvmBackend::KvmAmd, true)));
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "linux:ipi-broadcast 2v kernel/xapic/icr",
                "linux:ipi-broadcast 2v kernel/x2apic/icr"
            ]
        );
        assert!(skips.is_empty(), "{skips:?}");
        let e = spec_of(
            &sweep_args(&["--workload", "linux:ipi-broadcast,pingpong"]),
            None,
        )
        .unwrap_err();
        assert!(
            e.starts_with(
                "--workload linux:ipi-broadcast: a Linux guest's workload needs --kernel"
            ),
            "{e}"
        );
        let mut payload_only = k.to_vec();
        payload_only.extend(["--workload", "pingpong"]);
        let e = spec_of(&sweep_args(&payload_only), None).unwrap_err();
        assert!(
            e.contains("no --workload is a Linux guest's; add linux:NAME"),
            "{e}"
        );
        // Explicit dimensions still sweep.
        let mut split = flags.clone();
        split.extend(["--irqchip", "kernel,split"]);
        assert_eq!(
            spec_of(&sweep_args(&split), None).unwrap().irqchips.len(),
            2
        );
    }

    /// `avic-broadcast` with a Linux guest runs the seed's own guest
    /// workloads: the broadcast module and the ebizzy-like allocation.
    #[test]
    fn avic_broadcast_with_a_kernel_runs_the_guests_broadcast_and_ebizzy() {
        let args = sweep_args(&["--preset", "avic-broadcast", "--kernel", "/boot/vmlinuz"]);
        let spec = spec_of(&args, Some(&two_cpus())).unwrap();
        let names: Vec<String> = spec
            .workloads
            .iter()
            .map(|w| match w {
                WorkloadArg::Linux(w) => w.label(),
                WorkloadArg::Payload(w) => w.to_string(),
            })
            .collect();
        assert_eq!(names, ["linux:ipi-broadcast", "linux:ebizzy"]);
        let spec = spec_of(
            &sweep_args(&["--preset", "avic-broadcast"]),
            Some(&two_cpus()),
        )
        .unwrap();
        assert!(matches!(
            spec.workloads[..],
            [WorkloadArg::Payload(
                ipivmm_analysis::mode::Workload::Broadcast
            )]
        ));
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
        let spec = spec_of(&args, Some(&two_cpus())).unwrap();
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
