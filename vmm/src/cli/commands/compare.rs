//! `ipivmm compare A.json B.json ...`: recorded runs side by side, with
//! lined up by file, mode or vCPU count (`--by`) with ratios to a baseline;
//! optional CSV and charts of all of them.
use super::fail;
use crate::cli::args::CompareArgs;
use ipivmm::output::dest::{emit, print_text, Dest, Outputs};
use ipivmm::output::{color_stderr, color_stdout, compare, csv, svg};
use ipivmm::results::Document;
use std::process::ExitCode;

/// Run the `compare` subcommand.
pub fn main(args: &CompareArgs) -> ExitCode {
    let inputs: Vec<&std::path::Path> = args.files.iter().map(|p| p.as_path()).collect();
    let outputs = match Outputs::plan(None, args.csv.as_deref(), args.plot.as_deref(), &inputs) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let mut docs = Vec::with_capacity(args.files.len());
    for f in &args.files {
        match Document::load(f) {
            Ok(d) => docs.push((f.display().to_string(), d)),
            Err(e) => return fail(e),
        }
    }
    // A baseline that names no column is refused before anything is written.
    let comparison = match compare::compare_by(&docs, args.by, args.baseline.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut errors = Vec::new();
    if let Some(d) = &outputs.csv {
        let mut bytes = Vec::new();
        let written = csv::write_docs(&docs, &mut bytes)
            .map_err(|e| e.to_string())
            .and_then(|_| emit(d, &bytes).map_err(|e| e.to_string()));
        if let Err(e) = written {
            errors.push(format!("writing --csv: {e}"));
        }
    }
    if let Some(dir) = &outputs.plot {
        match svg::plot_docs(&docs, dir) {
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
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
