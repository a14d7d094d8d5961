//! `ipivmm calibrate`: this host's noise profile (the engine's
//! `experiment::calibrate`), printed and written for `compare
//! --noise-profile`.
use super::{fail, init_log, run_flags};
use crate::cli::args::CalibrateArgs;
use crate::output::atomic::write_atomic;
use crate::output::fit::wrap;
use ipivmm::experiment::calibrate::{CalibrationEvents, Spec};
use ipivmm_analysis::gate::profile::{Control, NoiseProfile};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::RunReport;
use std::process::ExitCode;

struct Progress {
    quiet: bool,
    recordings: usize,
}

impl CalibrationEvents for Progress {
    fn run(&self, recording: usize, repeat: usize, r: &RunReport) {
        if self.quiet {
            return;
        }
        let which = if recording == self.recordings {
            "injected".to_string()
        } else {
            format!("recording {}", recording + 1)
        };
        let p50 = Metric::CyclesPerOpP50
            .value(&r.summary())
            .map_or_else(|| "-".into(), |v| format!("{v:.0}"));
        eprintln!("{which}, repeat {}: p50 {p50} cycles", repeat + 1);
    }
}

fn control(c: &Control) -> String {
    format!(
        "{} of {} passed, {} exit 1, {} undecided",
        c.passed, c.comparisons, c.failed, c.undecided
    )
}

/// The profile in words.
pub fn summary(p: &NoiseProfile) -> String {
    let medians: Vec<String> = p
        .recording_medians
        .iter()
        .map(|m| format!("{m:.0}"))
        .collect();
    let inj = p.injected.injected.unwrap_or(0.0) * 100.0;
    let several = match (&p.aa_recordings, &p.injected_recordings) {
        (Some(aa), Some(i)) => format!(
            "with the other recordings as the baseline (compare --baseline ... as many as there are): A/A {}; \
             injected +{inj:.0}% {}\n",
            control(aa),
            control(i)
        ),
        _ => String::new(),
    };
    wrap(&format!(
        "noise profile: {} on {}\n\
         recordings: {} of {} repeats, medians {} (the last injected +{inj:.0}%)\n\
         spread (log sd of the p50): {:.3} within a recording, {:.3} between recordings (drift), {:.3} between two \
         consecutive runs\n\
         A/A (every pair of recordings): {} as files (one a side, no profile: compare leaves latency undecided); {} \
         with the drift\n\
         injected +{inj:.0}% (each recording against it): {} as files; {} with the drift\n\
         {several}",
        p.config,
        p.host,
        p.recordings,
        p.repeats,
        medians.join(", "),
        p.within_log_sd,
        p.between_log_sd,
        p.round_log_sd.unwrap_or(0.0),
        control(&p.aa),
        control(&p.aa_with_drift),
        control(&p.injected),
        control(&p.injected_with_drift),
    ))
}

/// Run the `calibrate` subcommand.
pub fn main(args: &CalibrateArgs) -> ExitCode {
    init_log("warn");
    let config = match run_flags(&args.run) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // Where the profile goes, and whether a VM can run at all, before the
    // first VM: a bad --output found after every run loses them all.
    if let Some(path) = &args.output {
        if let Err(e) = crate::output::dest::check_file(path, "--output") {
            return fail(e);
        }
    }
    if let Err(e) = config.prepare() {
        return fail(e);
    }
    let host = match ipivmm_host::facts::probe() {
        Ok(h) => format!(
            "{} ({}), kernel {}, backend {}",
            h.cpu_model, h.cpu_vendor, h.kernel_release, h.backend
        ),
        Err(e) => format!("host unknown ({e})"),
    };
    let spec = Spec {
        config,
        recordings: usize::from(args.recordings),
        repeats: usize::from(args.repeat),
        pause: args.pause,
        injected: args.inject,
        policy: ipivmm_analysis::gate::Policy::DEFAULT,
    };
    let events = Progress {
        quiet: args.quiet,
        recordings: spec.recordings,
    };
    let profile = match spec.run(host, ipivmm_analysis::interrupt::cancel_flag(), &events) {
        Ok(p) => p,
        Err(ipivmm::experiment::calibrate::CalibrateError::Cancelled) => {
            eprintln!("ipivmm: calibrate cancelled: no profile written");
            return super::cancelled().unwrap_or(ExitCode::from(130));
        }
        Err(e) => return fail(e),
    };
    print!("{}", summary(&profile));
    if let Some(path) = &args.output {
        let json = match serde_json::to_string_pretty(&profile) {
            Ok(j) => j,
            Err(e) => return fail(e),
        };
        if let Err(e) = write_atomic(path, json.as_bytes()) {
            return fail(format!("{}: {e}", path.display()));
        }
        eprintln!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
