//! The `ipivmm` command line (private to the binary): flags parsed by clap
//! into the library's types, one module per subcommand.
pub mod args;
pub mod commands;

#[cfg(test)]
mod prop_tests;
