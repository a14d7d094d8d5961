//! One module per subcommand; `main.rs` only dispatches.
pub mod compare;
pub mod host;
pub mod host_switch;
pub mod new_payload;
pub mod run;
pub mod sweep;

use std::process::ExitCode;

/// Print a one-line error and return the exit code for bad input (2).
pub fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("ipivmm: error: {msg}");
    ExitCode::from(2)
}

/// Log to stderr at `level` unless RUST_LOG says otherwise.
pub fn init_log(level: &str) {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_target(false)
        .try_init();
}
