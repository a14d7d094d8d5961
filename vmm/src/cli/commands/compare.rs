//! `ipivmm compare A.json B.json ...`: recorded runs side by side, with
//! lined up by file, mode or vCPU count (`--by`) with ratios to a baseline;
//! optional CSV and charts of all of them.
use super::{fail, init_log};
use crate::cli::args::CompareArgs;
use ipivmm::output::dest::{emit_with, print_text, Dest, Outputs};
use ipivmm::output::{color_stderr, color_stdout, compare, csv, svg};
use ipivmm::results::Document;
use std::process::ExitCode;

/// Run the `compare` subcommand. Each file is read, reduced to what the
/// comparison and the charts need, and dropped before the next is read; the
/// CSV (every counter of every run) reads the files again, one at a time,
/// streaming its rows. Memory is that of the largest file plus the summaries.
pub fn main(args: &CompareArgs) -> ExitCode {
    init_log("warn");
    let inputs: Vec<&std::path::Path> = args.files.iter().map(|p| p.as_path()).collect();
    let outputs = match Outputs::plan(None, args.csv.as_deref(), args.plot.as_deref(), &inputs) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut recorded = Vec::with_capacity(args.files.len());
    let mut chart_entries = Vec::new();
    for f in &args.files {
        let name = f.display().to_string();
        match Document::load(f) {
            Ok(d) => {
                if outputs.plot.is_some() {
                    chart_entries.extend(svg::doc_entries(&name, &d));
                }
                recorded.push((name, compare::Recorded::of(&d)));
            }
            Err(e) => return fail(e),
        }
    }
    // A baseline that names no column is refused before anything is written.
    let comparison = match compare::compare_recorded(&recorded, args.by, args.baseline.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut errors = Vec::new();
    if let Some(d) = &outputs.csv {
        let rows = |out: &mut dyn std::io::Write| -> std::io::Result<()> {
            let mut w = csv::Writer::new(out).map_err(std::io::Error::other)?;
            for f in &args.files {
                let doc = Document::load(f).map_err(std::io::Error::other)?;
                w.doc(&f.display().to_string(), &doc)
                    .map_err(std::io::Error::other)?;
            }
            w.finish().map_err(std::io::Error::other)
        };
        if let Err(e) = emit_with(d, rows) {
            errors.push(format!("writing --csv: {e}"));
        }
    }
    if let Some(dir) = &outputs.plot {
        match svg::plot_summaries(chart_entries, dir) {
            Ok(files) if !args.quiet => files
                .iter()
                .for_each(|f| eprintln!("wrote {}", f.display())),
            Ok(_) => {}
            Err(e) => errors.push(format!("writing --plot: {e}")),
        }
    }
    if !args.quiet {
        let to_stderr = outputs.csv == Some(Dest::Stdout);
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
    let regressions = if args.fail_on_regression {
        comparison.regressions(args.threshold)
    } else {
        Vec::new()
    };
    for r in &regressions {
        eprintln!("ipivmm: regression: {r}");
    }
    if errors.is_empty() && regressions.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
