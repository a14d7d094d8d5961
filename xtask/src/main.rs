//! The project's own tasks, run as `cargo xtask ...` (the alias in
//! .cargo/config.toml): `cargo xtask lab`, ipivmm on a real hardware KVM
//! module under an emulated CPU (docs/lab.md, docs/lab-intel.md); `cargo
//! xtask linux-initrd`, the Linux guest's initramfs (docs/linux-guest.md);
//! `cargo xtask abi-header`, the C guest tool's header generated from abi/.
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
    /// ipivmm's Linux guest initramfs (docs/linux-guest.md): busybox,
    /// hackbench, the IPI module, the phase tool and the workloads; prints
    /// its path.
    LinuxInitrd(lab::linux_guest::Args),
    /// Writes guest-linux/ipivmm-abi.h (the phase tool's view of the
    /// control-message ABI) from abi/src.
    AbiHeader,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (task, result) = match cli.task {
        Task::Lab(args) => ("lab", lab::main(*args)),
        Task::LinuxInitrd(args) => (
            "linux-initrd",
            lab::linux_guest::main(args).map(|()| lab::LabOutcome::Passed),
        ),
        Task::AbiHeader => (
            "abi-header",
            lab::linux_guest::write_header().map(|()| lab::LabOutcome::Passed),
        ),
    };
    match result {
        Ok(verdict) => verdict.exit_code(),
        Err(e) => {
            eprintln!("{task}: error: {e:#}");
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
