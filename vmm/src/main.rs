//! The `ipivmm` command.
use clap::Parser;
use ipivmm::cli::{Cli, Command};
use ipivmm::commands;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let started = Instant::now();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => commands::run::main(&args, started),
        Command::Host(args) => commands::host::main(&args),
        Command::Compare(args) => commands::compare::main(&args),
    }
}
