//! `ipivmm-guest`: a `no_std` SDK for ipivmm guest payloads.
//!
//! A payload is a freestanding x86-64 ELF the host enters in long mode on
//! every vCPU. This crate provides the entry point and bring-up
//! ([`entry!`]), an IDT whose handlers count IPIs and EOI ([`idt`]), xAPIC /
//! x2APIC access ([`apic`]), counted IPI sends including the KVM PV IPI
//! hypercall ([`ipi`]), TSC reads ([`tsc`]), cross-vCPU barriers ([`sync`]),
//! the control-port client ([`control`]), per-vCPU counters and sample
//! storage ([`percpu`]) and a serial console ([`print!`]). See
//! `docs/payload-sdk.md`.
//!
//! Build with the flags of `guest-payload/.cargo/config.toml` (no SSE, static,
//! no libc) and a linker script like `guest-payload/payload/link.ld`.
#![no_std]

pub mod apic;
pub mod control;
pub mod cpu;
pub mod idt;
pub mod ipi;
pub mod measure;
mod mem;
mod panic;
pub mod percpu;
pub mod runtime;
pub mod serial;
pub mod settings;
pub mod sync;
pub mod tsc;

pub use ipivmm_abi as abi;
pub use ipivmm_abi::BootInfo;
pub use panic::report as fail;

/// Registers the payload's `main(&'static BootInfo, vcpu_index)`, run on
/// every vCPU after the runtime's bring-up; when it returns the vCPU sends
/// Done(0).
///
/// ```ignore
/// fn main(boot: &'static ipivmm_guest::BootInfo, vcpu: usize) { /* ... */ }
/// ipivmm_guest::entry!(main);
/// ```
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        #[doc(hidden)]
        #[no_mangle]
        pub fn __ipivmm_guest_main(boot: &'static $crate::BootInfo, vcpu: usize) {
            let f: fn(&'static $crate::BootInfo, usize) = $main;
            f(boot, vcpu)
        }
    };
}
