//! `ipivmm compare A.json B.json ...`: recorded runs side by side, with
//! ratios to the first file; optional CSV and charts of all of them.
use super::fail;
use crate::cli::CompareArgs;
use crate::output::model::Document;
use crate::output::{color_stderr, color_stdout, compare, csv, dest, svg};
use std::io::Write;
use std::process::ExitCode;

/// Run the `compare` subcommand.
pub fn main(args: &CompareArgs) -> ExitCode {
    let mut docs = Vec::with_capacity(args.files.len());
    for f in &args.files {
        match Document::load(f) {
            Ok(d) => docs.push((f.display().to_string(), d)),
            Err(e) => return fail(e),
        }
    }
    let mut csv_out = match args
        .csv
        .as_deref()
        .map(|p| dest::open(p, "--csv"))
        .transpose()
    {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    if let Some(dir) = &args.plot {
        if let Err(e) = dest::prepare_dir(dir, "--plot") {
            return fail(e);
        }
    }
    let csv_to_stdout = dest::is_stdout(args.csv.as_deref());
    if !args.quiet {
        let c = compare::compare(&docs);
        if csv_to_stdout {
            eprint!("{}", compare::render(&c, args.threshold, color_stderr()));
        } else {
            print!("{}", compare::render(&c, args.threshold, color_stdout()));
        }
    }
    if let Some(out) = csv_out.as_mut() {
        if let Err(e) = csv::write_docs(&docs, &mut *out).and_then(|_| {
            out.flush().map_err(|e| crate::output::OutputError::Write {
                what: "--csv".into(),
                problem: e.to_string(),
            })
        }) {
            return fail(e);
        }
    }
    if let Some(dir) = &args.plot {
        match svg::plot_docs(&docs, dir) {
            Ok(files) => {
                if !args.quiet {
                    for f in files {
                        eprintln!("wrote {}", f.display());
                    }
                }
            }
            Err(e) => return fail(e),
        }
    }
    ExitCode::SUCCESS
}
