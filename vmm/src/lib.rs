//! ipivmm: a small KVM virtual machine monitor that measures what
//! inter-processor interrupts cost a guest under each interrupt-virtualization
//! mode, and where the cost goes (VM exits by reason, per vCPU, per phase).
//!
//! The library builds a VM from a [`config::VmConfig`], runs the built-in or a
//! custom payload with a watchdog, and returns a typed [`run::RunReport`].
pub mod arch;
pub mod boot_info;
pub mod cli;
pub mod commands;
pub mod config;
pub mod exits;
pub mod json;
pub mod latency;
pub mod layout;
pub mod monitor;
pub mod output;
pub mod payload;
pub mod payload_image;
pub mod report;
pub mod results;
pub mod run;
pub mod vcpu;
pub mod vm;
