//! The `ipivmm` command.
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use ipivmm_cli::cli::args::{Cli, Command};
use ipivmm_cli::cli::commands;
use std::process::ExitCode;
use std::time::Instant;

/// Runs before Rust's runtime starts, which puts /dev/null on a closed
/// fd 1 (so `>&-` would swallow TAP or JSON meant for stdout, exit 0): it
/// records the closed stdout while it can still be seen.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

extern "C" fn note_closed_stdout() {
    use std::os::fd::AsFd;
    if rustix::io::fcntl_getfd(std::io::stdout().as_fd()).is_err() {
        ipivmm_cli::output::dest::record_stdout_closed_at_start();
    }
}

fn main() -> ExitCode {
    let started = Instant::now();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    match cli.command {
        Command::Run(args) => commands::run::main(&args, started),
        Command::Host(args) => commands::host::main(&args),
        Command::Sweep(args) => commands::sweep::main(&args),
        Command::Compare(args) => commands::compare::main(&args),
        Command::Calibrate(args) => commands::calibrate::main(&args),
        Command::NewPayload(args) => commands::new_payload::main(&args),
        Command::Check(args) => commands::check::main(&args),
    }
}

/// Help goes out as clap writes it, its lines fitted to 120 columns, and
/// the version as it is; every other parse error becomes one line naming
/// the flag, like ipivmm's own errors.
fn clap_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let help = ipivmm_cli::output::fit::wrap_help(&e.render().to_string());
            match e.use_stderr() {
                true => eprint!("{help}"),
                false => print!("{help}"),
            }
            match e.kind() {
                ErrorKind::DisplayHelp => ExitCode::SUCCESS,
                _ => ExitCode::from(2),
            }
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            // clap lists the choices (or the missing flags) on later lines:
            // keep them on this one.
            let choices = match (
                e.get(ContextKind::ValidValue),
                e.get(ContextKind::InvalidArg),
            ) {
                (Some(ContextValue::Strings(v)), _) if !v.is_empty() => {
                    format!(": expected one of {}", v.join(", "))
                }
                (_, Some(ContextValue::Strings(v)))
                    if e.kind() == ErrorKind::MissingRequiredArgument =>
                {
                    format!(" {}", v.join(", "))
                }
                _ => String::new(),
            };
            eprintln!("ipivmm: error: {first}{choices} (see --help)");
            ExitCode::from(2)
        }
    }
}
