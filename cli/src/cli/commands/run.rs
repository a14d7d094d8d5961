//! `ipivmm run`: one VM, one workload; results files first, then the table.
use super::{fail, finish, init_log, plan_outputs, say, skip_all};
use crate::cli::args::{repeat_choice, RunArgs, SerialArg};
use crate::output::dest::print_text;
use crate::output::journal::Journal;
use crate::output::progress::SweepProgress;
use crate::output::{repeats, text};
use ipivmm::experiment::rounds::{Planned, RoundEvents, Rounds};
use ipivmm::SerialSink;
use ipivmm_analysis::results::RunReport;
use std::cell::RefCell;
use std::process::ExitCode;
use std::time::Instant;

/// Run the `run` subcommand.
pub fn main(args: &RunArgs, started: Instant) -> ExitCode {
    init_log(if args.verbose { "debug" } else { "warn" });
    let config = match args.to_config() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let inputs: Vec<&std::path::Path> = args
        .payload
        .iter()
        .map(|p| p.as_path())
        .chain(args.linux.inputs())
        .collect();
    let outputs = match plan_outputs(&args.output, &args.gate, &inputs) {
        Ok(out) => out,
        Err(e) => return fail(e),
    };
    if args.dry_run {
        return dry_run(&config);
    }
    let serial = match args.serial {
        // -q: nothing but errors, the guest's console included.
        SerialArg::Stdout if args.quiet => SerialSink::Discard,
        SerialArg::Stdout if outputs.uses_stdout() => SerialSink::Log,
        SerialArg::Stdout => SerialSink::Stdout,
        SerialArg::Log => SerialSink::Log,
        SerialArg::None => SerialSink::Discard,
    };
    // Every check of a run before the journal replaces an older results
    // file: a refused run (a bad payload, no KVM device) leaves it alone.
    if let Err(e) = config.prepare() {
        return match e.host_cannot_run() {
            true => skip_all(&args.gate, &outputs, "ipivmm run", &e.to_string()),
            false => fail(e),
        };
    }
    let choice = repeat_choice(args.repeat);
    let repeats = choice.rounds(args.budget);
    if let Some(why) = repeats.cannot_settle(1) {
        return fail(why);
    }
    let cancel = ipivmm_analysis::interrupt::cancel_flag();
    let journal = Journal::start(outputs.file_of("json"), "run", config.guest_memory_budget);
    // The engine's one repeat loop (run, sweep and check share it): a
    // busy repeat is kept and marked (auto runs more), one that cannot start is a
    // failed run and ends the repeats, a signal stops them.
    let mut rounds = Rounds::new(repeats, cancel.clone());
    rounds.observer_pairs = args.observer_effect;
    rounds.first_serial = serial;
    rounds.started = started;
    let mut skipped = Vec::new();
    let planned = [Planned::single(config.clone())];
    let events = RunEvents {
        quiet: args.quiet,
        bar: RefCell::new(None),
    };
    let out_of_budget = rounds.run(&planned, &mut skipped, &journal, &events);
    if let Some(b) = &*events.bar.borrow() {
        b.finish();
    }
    if journal.runs().is_empty() {
        if let Some(s) = skipped.first() {
            return skip_all(&args.gate, &outputs, "ipivmm run", &s.reason);
        }
    }
    if out_of_budget {
        say("ipivmm: --repeat auto: the budget ran out before the repeats the threshold needs");
    }
    for r in journal.runs().iter() {
        log_run(r);
    }
    let (doc, journal_error) = journal.finish(Vec::new());
    let mut errors = outputs.write(&doc);
    errors.extend(journal_error);
    if !args.quiet {
        let layout = crate::output::fit::Layout::wide(args.wide);
        // One repeat's tables (the first that completed), saying which.
        let (shown, note) = repeats::shown_repeat(&doc.runs);
        let mut text = layout.lines(&note);
        text.push_str(&text::render_with(&doc.runs[shown], layout));
        text.push('\n');
        text.push_str(
            &layout.lines(&repeats::render(&doc.configurations, Some(choice), &|i| {
                own_p50(&doc.runs[i])
            })),
        );
        print_text(&text, outputs.uses_stdout());
    }
    let mut ok = doc.runs.iter().all(|r| r.succeeded());
    // A phase the payload never finished: the figures are missing, and
    // saying so once is enough (every repeat runs the same payload).
    if let Some(why) = doc
        .runs
        .iter()
        .filter(|r| r.succeeded())
        .find_map(ipivmm_analysis::results::RunReport::missing_phase)
    {
        eprintln!("ipivmm: --phase: {why}");
        ok = false;
    }
    for r in doc.runs.iter().filter(|r| !r.succeeded()) {
        let which = r
            .repeat
            .map(|i| format!(" (repeat {} of {})", i + 1, choice.repeats))
            .unwrap_or_default();
        // Said once, with why the repeats after it did not run.
        let stopped = match r.stops_repeats() {
            Some(why) if doc.runs.len() < choice.repeats as usize => format!("; {why}"),
            _ => String::new(),
        };
        say(&format!(
            "ipivmm: run did not complete{which}: {}{stopped}",
            r.status.line()
        ));
    }
    finish(&doc, &args.gate, &outputs, "ipivmm run", ok, errors)
}

/// What the loop says as it goes: the repeats' progress (a bar on a
/// terminal, else a line per finished repeat; nothing with -q), busy
/// repeats and skips above it, a failed repeat said after the loop with its
/// status.
struct RunEvents {
    quiet: bool,
    bar: RefCell<Option<SweepProgress>>,
}

impl RoundEvents for RunEvents {
    /// One count over the run: a rerun of a busy repeat (--repeat auto)
    /// adds to it.
    fn planned(&self, runs: usize) {
        let mut bar = self.bar.borrow_mut();
        match &*bar {
            Some(b) => b.plan_more(runs as u64),
            None => *bar = Some(SweepProgress::repeats(runs as u64, self.quiet)),
        }
    }
    fn start(&self, label: &str) {
        if let Some(b) = &*self.bar.borrow() {
            b.start(label);
        }
    }
    fn note(&self, line: &str) {
        let line = format!("ipivmm: {line}");
        match &*self.bar.borrow() {
            Some(b) if b.is_visible() => b.println(crate::output::fit::wrap(&line).trim_end()),
            _ => say(&line),
        }
    }
    fn failed(&self, line: &str) {
        log::info!("{line}");
    }
    fn finished_one(&self) {
        if let Some(b) = &*self.bar.borrow() {
            b.finish_one();
        }
    }
}

/// The run's timings and unavailable counter sources, in the log (-v).
fn log_run(report: &RunReport) {
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
}

/// A run's headline p50 and its interval from the run's own samples.
pub fn own_p50(
    r: &ipivmm_analysis::results::RunReport,
) -> Option<(f64, ipivmm_analysis::stats::Interval)> {
    let s = r.summary();
    let l = s.latency?;
    Some((l.p50, l.p50_interval?))
}

/// `run --dry-run`: the checks of a run (prepare) and the report's header,
/// without a VM.
fn dry_run(config: &ipivmm::VmConfig) -> ExitCode {
    let prepared = match config.prepare() {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let mode = ipivmm_analysis::results::RunConfig::from(&prepared.config);
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
