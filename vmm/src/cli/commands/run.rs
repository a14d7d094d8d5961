//! `ipivmm run`: one VM, one workload; results files first, then the table.
use super::{fail, finish, init_log, plan_outputs, skip_all};
use crate::cli::args::{RunArgs, SerialArg};
use ipivmm::output::dest::print_text;
use ipivmm::output::text;
use ipivmm::SerialSink;
use ipivmm::{run, Document, RunOptions};
use std::process::ExitCode;
use std::time::Instant;

/// Run the `run` subcommand.
pub fn main(args: &RunArgs, started: Instant) -> ExitCode {
    init_log(if args.verbose { "debug" } else { "warn" });
    let config = match args.to_config() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let inputs: Vec<&std::path::Path> = args.payload.iter().map(|p| p.as_path()).collect();
    let outputs = match plan_outputs(&args.output, &args.gate, &inputs) {
        Ok(out) => out,
        Err(e) => return fail(e),
    };
    if args.dry_run {
        return dry_run(&config);
    }
    let serial = match args.serial {
        SerialArg::Stdout if outputs.uses_stdout() => SerialSink::Log,
        SerialArg::Stdout => SerialSink::Stdout,
        SerialArg::Log => SerialSink::Log,
        SerialArg::None => SerialSink::Discard,
    };
    let opts = RunOptions {
        serial,
        started,
        cancel: Some(ipivmm::interrupt::cancel_flag()),
    };
    // A pair that cannot start does not stop the run itself: its own
    // outcome (and JSON) is what the user asked for.
    let observer =
        ipivmm::run::observer::measure(&config, args.observer_effect, opts.cancel.clone())
            .unwrap_or_else(|e| {
                log::warn!("counting cost not measured: {e}");
                None
            });
    let mut report = match run(&config, opts) {
        Ok(r) => r,
        Err(e) if e.host_cannot_run() => {
            return skip_all(&args.gate, &outputs, "ipivmm run", &e.to_string())
        }
        Err(e) => return fail(e),
    };
    report.observer_effect = observer;
    let t = &report.timings;
    log::info!(
        "timings: VM ready after {:.2} ms, first guest message after {}, total {:.1} ms, peak RSS {} KiB",
        t.setup_ns as f64 / 1e6,
        t.first_message_ns.map_or("never".into(), |ns| format!("{:.2} ms", ns as f64 / 1e6)),
        t.total_ns as f64 / 1e6,
        t.peak_rss_kib.unwrap_or(0)
    );
    // The text report says in one line why a counter source is
    // unavailable; -v logs the whole reason (the JSON has it too).
    for s in report.vcpus.first().iter().flat_map(|v| &v.sources) {
        if let (false, Some(detail)) = (s.available, &s.detail) {
            log::info!("counter source {} unavailable: {detail}", s.source);
        }
    }
    let doc = Document::new(vec![report], Vec::new());
    let errors = outputs.write(&doc);
    let report = &doc.runs[0];
    if !args.quiet {
        let layout = ipivmm::output::fit::Layout::wide(args.wide);
        print_text(&text::render_with(report, layout), outputs.uses_stdout());
    }
    if !report.succeeded() {
        eprintln!("ipivmm: run did not complete: {}", report.status.line());
    }
    finish(
        &doc,
        &args.gate,
        &outputs,
        "ipivmm run",
        report.succeeded(),
        errors,
    )
}

/// `run --dry-run`: the checks of a run (prepare) and the report's header,
/// without a VM.
fn dry_run(config: &ipivmm::VmConfig) -> ExitCode {
    let prepared = match ipivmm::run::prepare(config) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let mode = ipivmm::run::RunConfig::of(&prepared.config);
    println!("{}", text::header_line(&mode, &mode.label(config.apicv)));
    println!(
        "APICv: {} ({})",
        prepared.plan.effective, prepared.plan.detail
    );
    println!(
        "dry run: configuration, payload, outputs, {} and host checked; no VM built",
        config.kvm_device.display()
    );
    ExitCode::SUCCESS
}
