//! What of a run reaches a person's terminal, below everything that writes
//! there (the serial console and control port in `ipivmm-devices`, the
//! engine, the front end's outputs):
//!
//! - [`text`]: guest text escaped before it can reach a terminal;
//! - [`stdout`]: this process's stdout, written by a thread of its own so
//!   that no vCPU or writer ever blocks on it.
pub mod stdout;
pub mod text;
