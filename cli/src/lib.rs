//! The `ipivmm` command over the `ipivmm` engine: the command line
//! ([`cli`]), the output formats ([`output`]: text, JSON, CSV, SVG, TAP,
//! JUnit, comparisons) and sweeps ([`sweep`]). A library user needs only
//! the engine crate; this crate is what the binary adds to it.
#![warn(missing_docs)]

pub mod cli;
pub mod output;
pub mod sweep;
