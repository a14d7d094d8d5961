//! `ipivmm sweep --dry-run`: the plan, before anything runs: every row,
//! the repeats, every skip with its reason, and the time it would take,
//! estimated from a short calibration (two runs of the first row).
use crate::sweep::planned::PlannedSweep;
use crate::sweep::{plan, PlannedRun};
use ipivmm::{RunOptions, SerialSink, VmConfig};
use ipivmm_analysis::results::RunConfig;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One run of a Linux row as measured under the QEMU lab (nested kvm_amd
/// on TCG, `cargo xtask lab linux`, docs/linux-guest.md): from `ipivmm run`
/// to the guest's power-off, 50 broadcasts, in seconds: 36–49 with the
/// machine to itself, 82–85 in `lab.probe=sweep` beside other builds. A
/// Linux row is not calibrated by running it (two boots); on hardware it
/// is faster, by how much not measured.
pub const LINUX_RUN_LAB_S: (u64, u64) = (36, 85);

/// Iterations of the two calibration runs (the second also times how a
/// run grows with its iterations).
const CALIBRATION: [u64; 2] = [10, 40];

/// A run's wall time as `fixed + per_iteration * iterations`, from two runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// The run's time outside its iterations.
    pub fixed: Duration,
    /// One measured iteration (both parts of the measured phase and its
    /// warm-ups included), at the calibrated row's IPIs per operation.
    pub per_iteration: Duration,
    /// IPIs per operation of the calibrated row.
    pub ipis_per_op: u64,
}

impl Calibration {
    /// From two runs of `iterations` taking `walls`.
    pub fn of(iterations: [u64; 2], walls: [Duration; 2], ipis_per_op: u64) -> Self {
        let di = iterations[1].saturating_sub(iterations[0]).max(1);
        let per_iteration = walls[1].saturating_sub(walls[0]) / di as u32;
        let fixed = walls[0].saturating_sub(per_iteration * iterations[0] as u32);
        Self {
            fixed,
            per_iteration,
            ipis_per_op: ipis_per_op.max(1),
        }
    }

    /// The estimate for one run of `c`: iterations (and warm-up) scaled by
    /// its IPIs per operation against the calibrated row's.
    pub fn estimate(&self, c: &VmConfig) -> Duration {
        let ipis = RunConfig::from(c).fan_out().unwrap_or(1).max(1);
        let scale = (ipis as f64 / self.ipis_per_op as f64).max(1.0);
        // An iteration as calibrated covers both parts of the measured
        // phase; a warm-up iteration runs twice too (its phase, and before
        // the counted part).
        let iterations = (c.iterations + c.warmup) as f64;
        self.fixed + self.per_iteration.mul_f64(iterations * scale)
    }
}

/// The wall time of one run of `c` with `iterations`, or why it failed;
/// a signal (`cancel`) stops it at once.
fn time_run(c: &VmConfig, iterations: u64, cancel: &Arc<AtomicBool>) -> Result<Duration, String> {
    let c = VmConfig {
        iterations,
        warmup: c.warmup.min(iterations),
        ..c.clone()
    };
    let started = Instant::now();
    let opts = RunOptions {
        serial: SerialSink::Discard,
        cancel: Some(cancel.clone()),
        ..RunOptions::default()
    };
    let r = ipivmm::run(&c, opts).map_err(|e| e.to_string())?;
    match r.succeeded() {
        true => Ok(started.elapsed()),
        false => Err(r.status.text()),
    }
}

/// Calibrates on `first`: two short runs (of a payload row: a Linux row
/// costs a boot, [`LINUX_RUN_LAB_S`]).
fn calibrate(first: &PlannedRun, cancel: &Arc<AtomicBool>) -> Result<Calibration, String> {
    let a = time_run(&first.config, CALIBRATION[0], cancel)?;
    if cancel.load(Ordering::SeqCst) {
        return Err("cancelled".into());
    }
    let b = time_run(&first.config, CALIBRATION[1], cancel)?;
    let ipis = RunConfig::from(&first.config).fan_out().unwrap_or(1);
    Ok(Calibration::of(CALIBRATION, [a, b], ipis))
}

/// The plan as text; `repeats`: runs per row; `observer_pairs`: the
/// counting-cost pairs on the first row; `calibration` of the first row.
pub fn render(
    runs: &[PlannedRun],
    skipped: &[ipivmm_analysis::results::SkippedMode],
    repeats: u32,
    observer_pairs: u32,
    stages: usize,
    calibration: Result<Calibration, String>,
) -> String {
    let mut out = String::new();
    let linux = |r: &&PlannedRun| r.config.payload.linux().is_some();
    let stage_note = match stages {
        0 | 1 => String::new(),
        n => format!(", under each of {n} host settings"),
    };
    let _ = writeln!(
        out,
        "sweep plan (dry run, nothing ran but the calibration): {} rows x {repeats} repeats{stage_note}, {} skipped",
        runs.len(),
        skipped.len()
    );
    for r in runs {
        let _ = writeln!(out, "  run   {}", r.label);
    }
    // The skips by reason, as the sweep's report lists them.
    out.push_str(&crate::output::sweep_tables::skipped_text(skipped));
    out.push_str(&linux_cost(runs, skipped));
    let linux_runs = runs.iter().filter(linux).count() as u32;
    let linux_first = runs.first().is_some_and(|r| linux(&r));
    let linux_total = Duration::from_secs(LINUX_RUN_LAB_S.1)
        * (linux_runs * repeats + if linux_first { 2 * observer_pairs } else { 0 })
        * stages.max(1) as u32;
    let _ = match calibration {
        Ok(cal) => {
            let payload = || runs.iter().filter(|r| !linux(r));
            let per_row: Duration = payload().map(|r| cal.estimate(&r.config)).sum();
            let first = runs
                .first()
                .filter(|r| !linux(r))
                .map_or(Duration::ZERO, |r| cal.estimate(&r.config));
            let total = (per_row * repeats + first * 2 * observer_pairs) * stages.max(1) as u32
                + linux_total;
            writeln!(
                out,
                "estimated time: about {:.0} s ({} runs; calibrated on the first row: {:.0} ms per run + {:.2} ms per iteration at {} IPI{} per operation, scaled by each row's; a row with more vCPUs than host CPUs takes longer)",
                total.as_secs_f64(),
                (runs.len() as u32 * repeats + 2 * observer_pairs) as usize * stages.max(1),
                cal.fixed.as_secs_f64() * 1e3,
                cal.per_iteration.as_secs_f64() * 1e3,
                cal.ipis_per_op,
                if cal.ipis_per_op == 1 { "" } else { "s" },
            )
        }
        Err(_) if linux_runs > 0 && linux_runs as usize == runs.len() => {
            writeln!(
            out,
            "estimated time: about {:.0} s ({} runs of a Linux guest at the lab's pace, {} s each)",
            linux_total.as_secs_f64(),
            (linux_runs * repeats) as usize * stages.max(1)
                + if linux_first { 2 * observer_pairs as usize } else { 0 },
            LINUX_RUN_LAB_S.1
        )
        }
        Err(why) => writeln!(
            out,
            "estimated time: unknown (the calibration run failed: {why})"
        ),
    };
    out
}

/// What a Linux row costs, when the plan has one (run or skipped here): a
/// boot per run, its time as the lab measured it, the guest's RAM, and the
/// cross-check every row carries.
fn linux_cost(runs: &[PlannedRun], skipped: &[ipivmm_analysis::results::SkippedMode]) -> String {
    let prefix = ipivmm::analysis::mode::LinuxWorkload::PREFIX;
    let planned = runs
        .iter()
        .filter(|r| r.config.payload.linux().is_some())
        .count();
    let skipped = skipped
        .iter()
        .filter(|s| s.mode.starts_with(prefix))
        .count();
    if planned + skipped == 0 {
        return String::new();
    }
    let timeout = runs
        .iter()
        .find(|r| r.config.payload.linux().is_some())
        .map(|r| r.config.timeout.as_secs())
        .filter(|&t| t < LINUX_RUN_LAB_S.1)
        .map_or(String::new(), |t| {
            format!("; --timeout {t} s is less than a lab run: give --timeout 600 in the lab")
        });
    format!(
        "a Linux row ({planned} planned, {skipped} skipped here): one boot per run, {}-{} s a run under the QEMU lab's nested kvm_amd (docs/linux-guest.md; not measured on hardware), {} MiB of guest RAM per VM, one VM at a time; each row cross-checks the IPIs its guest's kernel counted (/proc/interrupts CAL) against the IPIs its workload sent{timeout}\n",
        LINUX_RUN_LAB_S.0,
        LINUX_RUN_LAB_S.1,
        ipivmm::linux::LinuxGuest::DEFAULT_MEMORY_BYTES >> 20,
    )
}

/// `sweep --dry-run`: prints the plan of `planned` on stdout. A signal
/// during the calibration ends it at once: the plan is not printed, the
/// exit code says the command was cancelled.
pub fn main(
    planned: &PlannedSweep,
    repeats: u32,
    observer_pairs: u32,
    cancel: &Arc<AtomicBool>,
    layout: crate::output::fit::Layout,
) -> std::process::ExitCode {
    let (runs, skipped) = plan(planned.spec(), planned.host());
    let calibration = match runs.iter().find(|r| r.config.payload.linux().is_none()) {
        Some(first) => calibrate(first, cancel),
        None => Err("no payload row to calibrate on".into()),
    };
    if let Some(code) = super::cancelled() {
        return code;
    }
    let stages = planned.spec().host_params.len();
    let text = render(
        &runs,
        &skipped,
        repeats,
        observer_pairs,
        stages,
        calibration,
    );
    print!("{}", layout.lines(&text));
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_follows_iterations_and_fan_out() {
        let ms = Duration::from_millis;
        // 10 iterations in 300 ms, 40 in 600 ms: 10 ms each, 200 ms fixed.
        let cal = Calibration::of([10, 40], [ms(300), ms(600)], 1);
        assert_eq!((cal.fixed, cal.per_iteration), (ms(200), ms(10)));
        let c = VmConfig {
            iterations: 100,
            warmup: 10,
            ..Default::default()
        };
        assert_eq!(cal.estimate(&c), ms(200 + 1100));
        // A broadcast to 7 targets: 7 IPIs per operation.
        let b = VmConfig {
            workload: ipivmm_analysis::mode::Workload::Broadcast,
            vcpus: 8,
            ..c.clone()
        };
        assert_eq!(cal.estimate(&b), ms(200 + 7 * 1100));
    }

    /// A Linux row is not calibrated (a boot each): the plan says what it
    /// costs, as the lab measured it, and counts it at the lab's pace.
    #[test]
    fn a_linux_row_is_costed_at_the_labs_pace() {
        let linux = PlannedRun {
            label: "linux:ipi-broadcast 2v kernel/x2apic/icr".into(),
            config: VmConfig {
                payload: ipivmm::PayloadSource::Linux(ipivmm::linux::LinuxGuest::new("/k")),
                timeout: Duration::from_secs(30),
                ..VmConfig::default()
            },
            host_param: None,
            placement: None,
        };
        let text = render(
            std::slice::from_ref(&linux),
            &[],
            2,
            0,
            1,
            Err("no payload row to calibrate on".into()),
        );
        assert!(
            text.contains(
                "a Linux row (1 planned, 0 skipped here): one boot per run, 36-85 s a run"
            ),
            "{text}"
        );
        assert!(text.contains("256 MiB of guest RAM per VM"), "{text}");
        assert!(
            text.contains("--timeout 30 s is less than a lab run"),
            "{text}"
        );
        assert!(
            text.contains("estimated time: about 170 s (2 runs of a Linux guest"),
            "{text}"
        );
        // Beside a payload row: the payload calibrated, the Linux row added.
        let ms = Duration::from_millis;
        let cal = Calibration::of([10, 40], [ms(300), ms(600)], 1);
        let payload = PlannedRun {
            label: "pingpong 2v kernel/x2apic/icr".into(),
            config: VmConfig::default(),
            host_param: None,
            placement: None,
        };
        let both = render(&[payload.clone(), linux], &[], 1, 0, 1, Ok(cal));
        let alone = cal.estimate(&payload.config).as_secs_f64() + 85.0;
        assert!(
            both.contains(&format!("estimated time: about {alone:.0} s (2 runs")),
            "{both}"
        );
    }

    #[test]
    fn the_plan_lists_rows_skips_and_the_estimate() {
        let run = PlannedRun {
            label: "pingpong 2v kernel/x2apic/icr".into(),
            config: VmConfig::default(),
            host_param: None,
            placement: None,
        };
        let skip = ipivmm_analysis::results::SkippedMode {
            mode: "broadcast 4v kernel/x2apic/icr".into(),
            reason: "4 spinning vCPUs on 2 host CPUs".into(),
            id: None,
        };
        let ms = Duration::from_millis;
        let cal = Calibration::of([10, 40], [ms(300), ms(600)], 1);
        let text = render(&[run], &[skip], 3, 1, 1, Ok(cal));
        assert!(text.contains("1 rows x 3 repeats, 1 skipped"), "{text}");
        assert!(
            text.contains("  run   pingpong 2v kernel/x2apic/icr"),
            "{text}"
        );
        assert!(
            text.contains("  4v kernel/x2apic/icr (1): 4 spinning vCPUs on 2 host CPUs"),
            "{text}"
        );
        assert!(text.contains("estimated time: about "), "{text}");
        let failed = render(&[], &[], 1, 0, 1, Err("no row to run".into()));
        assert!(!failed.contains("a Linux row"), "{failed}");
        assert!(failed.contains("unknown (the calibration run failed: no row to run)"));
    }
}
