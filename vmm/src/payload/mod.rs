//! The built-in guest payload.
//!
//! `build.rs` compiles `guest-payload/` (the `ipivmm-guest` SDK and the
//! `ipivmm-payload` workloads) as a freestanding, SSE-free static ELF linked
//! at [`ipivmm_abi::PAYLOAD_START`], and it is embedded here. It runs the
//! workload named by `BootInfo::workload`; see `docs/payload-sdk.md`.

pub mod build;
pub mod image;
pub mod scrub;
pub mod template;

/// The built-in payload ELF image.
pub const BUILTIN_PAYLOAD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ipivmm-payload.elf"));
