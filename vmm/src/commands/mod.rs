//! One module per subcommand; `main.rs` only dispatches.
pub mod compare;
pub mod host;
pub mod run;
pub mod sweep;

use std::process::ExitCode;

/// Print a one-line error and return the exit code for bad input (2).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ipivmm: error: {msg}");
    ExitCode::from(2)
}
