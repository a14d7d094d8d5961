//! The `ipivmm` command line: flags parsed by clap into the engine's types,
//! one module per subcommand.
pub mod args;
pub mod commands;
pub mod lever_flags;
pub mod linux_args;

#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod spelling_tests;
