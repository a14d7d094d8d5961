//! `ipivmm run`: one VM, one workload, a table and optional JSON.
use super::fail;
use crate::cli::RunArgs;
use crate::run::{run, RunOptions, RunStatus};
use ipivmm_devices::serial::SerialSink;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

/// Open the JSON destination before the run, so a bad path costs nothing.
fn open_json(args: &RunArgs) -> Result<Option<Box<dyn Write>>, String> {
    match args.json.as_deref() {
        None => Ok(None),
        Some(p) if p.as_os_str() == "-" => Ok(Some(Box::new(std::io::stdout()))),
        Some(p) => std::fs::File::create(p)
            .map(|f| Some(Box::new(f) as Box<dyn Write>))
            .map_err(|e| {
                format!(
                    "cannot write --json {}: {e}; pick a writable path",
                    p.display()
                )
            }),
    }
}

/// Run the `run` subcommand.
pub fn main(args: &RunArgs, started: Instant) -> ExitCode {
    let level = if args.verbose { "debug" } else { "warn" };
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_target(false)
        .try_init();
    let config = match args.to_config() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let csv_to_stdout = crate::output::dest::is_stdout(args.csv.as_deref());
    if csv_to_stdout && crate::output::dest::is_stdout(args.json.as_deref()) {
        return fail("--json - and --csv - cannot both write to stdout; send one to a file");
    }
    let json_to_stdout =
        args.json.as_deref().is_some_and(|p| p.as_os_str() == "-") || csv_to_stdout;
    let serial = match args.serial.as_str() {
        "stdout" if json_to_stdout => SerialSink::Log,
        "stdout" => SerialSink::Stdout,
        "log" => SerialSink::Log,
        "none" => SerialSink::Discard,
        other => return fail(format!("--serial {other}: expected stdout, log or none")),
    };
    let mut json_out = match open_json(args) {
        Ok(j) => j,
        Err(e) => return fail(e),
    };
    let mut csv_out = match args
        .csv
        .as_deref()
        .map(|p| crate::output::dest::open(p, "--csv"))
        .transpose()
    {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if let Some(dir) = &args.plot {
        if let Err(e) = crate::output::dest::prepare_dir(dir, "--plot") {
            return fail(e);
        }
    }
    let report = match run(
        &config,
        RunOptions {
            serial,
            started,
            cancel: Some(crate::interrupt::cancel_flag()),
        },
    ) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    log::info!(
        "timings: VM ready after {:.2} ms, first guest message after {}, total {:.1} ms, peak RSS {} KiB",
        report.timings.setup_ns as f64 / 1e6,
        report
            .timings
            .first_message_ns
            .map_or("never".into(), |ns| format!("{:.2} ms", ns as f64 / 1e6)),
        report.timings.total_ns as f64 / 1e6,
        report.timings.peak_rss_kib.unwrap_or(0)
    );
    if !args.quiet {
        let text = crate::report::render(&report);
        if json_to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    }
    if let Some(out) = json_out.as_mut() {
        let doc = crate::json::document(vec![&report], &[]);
        if let Err(e) = crate::json::write(out, &doc) {
            return fail(format!("writing --json: {e}"));
        }
    }
    if let Some(out) = csv_out.as_mut() {
        let written = crate::output::csv::write_runs(&[&report], &mut *out)
            .map_err(|e| e.to_string())
            .and_then(|_| out.flush().map_err(|e| e.to_string()));
        if let Err(e) = written {
            return fail(format!("writing --csv: {e}"));
        }
    }
    if let Some(dir) = &args.plot {
        match crate::output::svg::plot_runs(&[&report], dir) {
            Ok(files) => files
                .iter()
                .for_each(|f| log::info!("wrote {}", f.display())),
            Err(e) => return fail(e),
        }
    }
    if report.succeeded() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "ipivmm: run did not complete: {}",
            status_line(&report.status)
        );
        ExitCode::from(1)
    }
}

fn status_line(s: &RunStatus) -> String {
    match s {
        RunStatus::Completed => "completed".into(),
        RunStatus::Cancelled => "cancelled (Ctrl-C)".into(),
        RunStatus::Failed { reason } => reason.clone(),
        RunStatus::TimedOut { after_s, stuck } => {
            format!("timed out after {after_s} s, stopped {stuck} (raise --timeout or lower --iterations)")
        }
    }
}
