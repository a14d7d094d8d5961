//! The project's own tasks, run as `cargo xtask ...` (the alias in
//! .cargo/config.toml). One task so far: `cargo xtask lab`, ipivmm on a real
//! hardware KVM module under an emulated CPU (docs/lab.md, docs/lab-intel.md).
use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod lab;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "The ipivmm project's own tasks"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// ipivmm and its KVM test binaries on a real kvm_amd (QEMU TCG) or
    /// kvm_intel (Bochs), checked against the results' own types.
    Lab(Box<lab::Args>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Lab(args) => lab::main(*args),
    };
    match result {
        Ok(verdict) => verdict.exit_code(),
        Err(e) => {
            eprintln!("lab: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
