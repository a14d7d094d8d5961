//! `ipivmm compare A.json B.json ...`: recorded runs side by side, with
//! lined up by file, mode or vCPU count (`--by`) with ratios to a baseline;
//! optional CSV and charts of all of them.
use super::{fail, init_log};
use crate::cli::args::CompareArgs;
use crate::output::dest::{print_text, Outputs};
use crate::output::sink::Files;
use crate::output::{color_stderr, color_stdout, compare};
use ipivmm::results::Document;
use std::process::ExitCode;

/// Run the `compare` subcommand. Each file is read, reduced to what the
/// comparison needs, and dropped before the next is read; each output
/// (CSV, charts) then reads the files again, one at a time, the CSV
/// streaming its rows. Memory is that of the largest file plus the
/// summaries (and the charts' entries).
pub fn main(args: &CompareArgs) -> ExitCode {
    init_log("warn");
    if let Some(Err(e)) = args.phase.as_deref().map(ipivmm::config::check_phase_name) {
        return fail(e);
    }
    let inputs: Vec<&std::path::Path> = args.files.iter().map(|p| p.as_path()).collect();
    let outputs = match Outputs::plan_all(&args.output.requests(None), &inputs) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut recorded = Vec::with_capacity(args.files.len());
    for f in &args.files {
        match Document::load(f) {
            Ok(mut d) => {
                if let Some(phase) = &args.phase {
                    d.read_phase(phase);
                }
                recorded.push((f.display().to_string(), compare::Recorded::of(&d)))
            }
            Err(e) => return fail(e),
        }
    }
    // A baseline that names no column is refused before anything is written.
    let comparison = match compare::compare_recorded(&recorded, args.by, args.baseline.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let errors = outputs.write_from(&Files(&args.files, args.phase.as_deref()), &mut |f| {
        if !args.quiet {
            eprintln!("wrote {}", f.display());
        }
    });
    if !args.quiet {
        let to_stderr = outputs.uses_stdout();
        let color = if to_stderr {
            color_stderr()
        } else {
            color_stdout()
        };
        print_text(
            &compare::render(&comparison, args.threshold, color),
            to_stderr,
        );
    }
    // What reading them cost (RUST_LOG=info): the figure the memory bound
    // of one document at a time is checked against.
    log::info!(
        "compare: {} files, {} runs, peak RSS {} KiB",
        recorded.len(),
        recorded.iter().map(|(_, r)| r.runs.len()).sum::<usize>(),
        ipivmm::run::collect::peak_rss_kib().unwrap_or(0)
    );
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    if !args.fail_on_regression {
        return if errors.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let gate = comparison.gate(args.threshold, args.count_tolerance);
    // Said even with -q: a gate that compared nothing, or could not judge
    // what it compared, has not passed.
    if gate.compared == 0 {
        let why = comparison
            .flags
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("; ");
        eprintln!(
            "ipivmm: error: nothing compared: no figure of the baseline has a completed run to compare with in another column{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            }
        );
        return ExitCode::from(NOTHING_COMPARED);
    }
    for r in &gate.regressions {
        eprintln!("ipivmm: regression: {r}");
    }
    for i in &gate.inconclusive {
        eprintln!("ipivmm: inconclusive: {i}");
    }
    eprintln!(
        "ipivmm: gate: {} figures compared, {} judged, {} regressions, {} inconclusive",
        gate.compared,
        gate.judged,
        gate.regressions.len(),
        gate.inconclusive.len()
    );
    if !errors.is_empty() || !gate.regressions.is_empty() {
        ExitCode::from(1)
    } else if !gate.inconclusive.is_empty() {
        // A figure the gate could not judge is not a pass, even where the
        // others held (kselftest's SKIP).
        ExitCode::from(4)
    } else {
        ExitCode::SUCCESS
    }
}

/// The exit status of `compare --fail-on-regression` when nothing was
/// compared (docs/ci.md): an error, not a pass.
pub const NOTHING_COMPARED: u8 = 3;
