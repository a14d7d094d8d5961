//! One module per subcommand; `main.rs` only dispatches.
pub mod calibrate;
pub mod check;
pub mod compare;
pub mod host;
pub mod host_switch;
pub mod new_payload;
pub mod run;
pub mod sweep;
pub mod sweep_dry_run;

use crate::cli::args::{GateArgs, OutputArgs};
use crate::output::dest::Outputs;
use clap::Parser;
use ipivmm_analysis::results::Document;
use std::process::ExitCode;

/// Print a one-line error and return the exit code for bad input (2).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ipivmm: error: {msg}");
    ExitCode::from(2)
}

/// A line for people on stderr, wrapped at 120 columns (a run's status
/// names its cause and the fix, which can take more than one line).
pub fn say(line: &str) {
    eprint!("{}", crate::output::fit::wrap(&format!("{line}\n")));
}

/// Log to stderr at `level` unless RUST_LOG says otherwise.
pub fn init_log(level: &str) {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_target(false)
        .try_init();
}

/// The outputs of `o` and `gate`, checked before the run.
pub fn plan_outputs(
    o: &OutputArgs,
    gate: &GateArgs,
    inputs: &[&std::path::Path],
) -> Result<Outputs, String> {
    Outputs::plan_all(&o.requests(Some(gate)), inputs)
}

/// Nothing could run here (`why`): with expectations, each is a skip with
/// the reason, in TAP and JUnit as asked, and the exit is 4 (kselftest's
/// SKIP); without, the error as usual (exit 2).
pub fn skip_all(gate: &GateArgs, outputs: &Outputs, suite: &str, why: &str) -> ExitCode {
    if gate.expect.is_empty() {
        return fail(why);
    }
    let verdicts = ipivmm_analysis::expect::Verdicts(
        gate.expect
            .iter()
            .map(|e| ipivmm_analysis::expect::Verdict {
                name: e.text.clone(),
                outcome: ipivmm_analysis::expect::Outcome::Skip(why.to_string()),
            })
            .collect(),
    );
    let errors = outputs.write_verdicts(&verdicts, suite);
    eprintln!(
        "ipivmm: expectations: 0 passed, 0 failed, {} skipped",
        verdicts.0.len()
    );
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    let code = not_run_here(suite, why);
    if errors.is_empty() {
        code
    } else {
        ExitCode::from(1)
    }
}

/// The one wording and exit status of a gate that could not run here
/// (no usable /dev/kvm, a mode this host cannot run): `run --expect`,
/// `sweep --expect`, `check` and `compare --run --fail-on-regression`
/// alike say "nothing ran" with the reason and exit 4 (kselftest's SKIP:
/// never a pass, never a failure of the thing gated).
pub fn not_run_here(suite: &str, why: &str) -> ExitCode {
    say(&format!("{suite}: nothing ran: {why}"));
    ExitCode::from(NOT_RUN_HERE)
}

/// The exit status of a gate that could not run here ([`not_run_here`]).
pub const NOT_RUN_HERE: u8 = 4;

/// When a signal cancelled the command: one line naming it, and the exit
/// code that says so, 128 + the signal (130 for SIGINT, 143 for SIGTERM,
/// 129 for SIGHUP), as a shell reports a process a signal ended; the
/// command stopped cleanly and wrote what it had first.
pub fn cancelled() -> Option<ExitCode> {
    let (sig, name) = ipivmm_analysis::interrupt::received()?;
    eprintln!("ipivmm: cancelled by {name}: what finished is kept, the rest did not run");
    Some(ExitCode::from(128u8.saturating_add(sig as u8)))
}

/// The exit code of a command that ran: with expectations, kselftest's
/// (0 all hold, 1 one fails or a run failed, 4 none could be judged),
/// written as TAP and JUnit; without, 0 when `ok`. Any output error makes
/// it 1; a signal that cancelled it, 128 + the signal ([`cancelled`]).
pub fn finish(
    doc: &Document,
    gate: &GateArgs,
    outputs: &Outputs,
    suite: &str,
    ok: bool,
    mut errors: Vec<String>,
) -> ExitCode {
    let code = if gate.expect.is_empty() {
        u8::from(!ok)
    } else {
        let verdicts = ipivmm_analysis::expect::Verdicts::of(doc, &gate.expect);
        errors.extend(outputs.write_verdicts(&verdicts, suite));
        if !outputs.lists_verdicts_on_stdout() {
            for v in &verdicts.0 {
                match &v.outcome {
                    ipivmm_analysis::expect::Outcome::Fail(why) => {
                        eprintln!("ipivmm: expectation failed: {}: {why}", v.name)
                    }
                    ipivmm_analysis::expect::Outcome::Undecided(why) => {
                        eprintln!("ipivmm: expectation undecided: {}: {why}", v.name)
                    }
                    _ => {}
                }
            }
        }
        eprintln!("ipivmm: expectations: {}", verdicts.summary());
        // A run that failed fails the command even where no expectation
        // read it; nothing judged at all stays 4.
        match verdicts.exit_code() {
            0 if !ok => 1,
            c => c,
        }
    };
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    if let Some(cancelled) = cancelled() {
        cancelled
    } else if !errors.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::from(code)
    }
}

/// The configuration `ipivmm run FLAGS` would run; flags that would be
/// ignored here are refused.
pub fn run_flags(flags: &str) -> Result<ipivmm::VmConfig, String> {
    let words = shlex::split(flags)
        .ok_or_else(|| format!("--run '{flags}': cannot split into words (unbalanced quotes?)"))?;
    let argv = ["ipivmm", "run"].into_iter().map(String::from).chain(words);
    let cli = crate::cli::args::Cli::try_parse_from(argv).map_err(|e| {
        format!(
            "--run '{flags}': {}",
            e.to_string().lines().next().unwrap_or_default()
        )
    })?;
    let crate::cli::args::Command::Run(a) = cli.command else {
        unreachable!("the command word is run")
    };
    if a.dry_run || a.repeat.is_some() || !a.gate.expect.is_empty() || !a.output.given.is_empty() {
        return Err(format!(
            "--run '{flags}': --dry-run, --repeat, --expect and outputs belong to the command itself, not to a --run"
        ));
    }
    a.to_config().map_err(|e| format!("--run '{flags}': {e}"))
}
