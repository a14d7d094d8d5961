//! VM exits by reason, with host time, counted in the kernel: an eBPF
//! program on `kvm:kvm_exit` and the raw tracepoint `kvm_entry` adds each
//! exit of a registered vCPU thread to that thread's element of a map
//! (what bcc's `kvmexit` does, plus host time and both ISAs), and the vCPU
//! thread reads its element at its phase markers through an mmap (no
//! syscall). Nothing is written per exit to any buffer, so nothing can be
//! lost or have to be drained.
//!
//! - [`layout`]: the maps' layout (mirrored from `bpf/kvm_exits.bpf.c`) and
//!   the reason slots (sparse SVM codes up to 0x403, VMGEXIT, VMX basic
//!   reasons).
//! - [`load`]: loading (through aya) and attaching, once per run
//!   ([`BpfExits`]); registering a vCPU thread ([`BpfThread`]), its
//!   counting switch and its snapshots.
//! - [`window`]: a snapshot, and the difference of two as the sampler's
//!   [`crate::sampler::ExitTally`], so a phase's exits read the same
//!   whatever counted them.
//!
//! The program is built once with clang (`scripts/build-bpf.sh`) and
//! shipped in the tree; `build.rs` embeds it ([`shipped`]: what it was
//! built from), so builds without clang count exits the same way.

pub mod layout;
pub mod load;
pub mod reason_at;
pub mod shipped;
pub mod window;

#[cfg(test)]
mod shipped_tests;
#[cfg(test)]
mod tests;

pub use load::{Attach, BpfError, BpfExits, BpfThread, ExitProgram, RawExit};
pub use reason_at::ReasonAt;
pub use window::BpfSnapshot;

/// The BPF object: the one shipped in the tree (`bpf/kvm_exits.bpf.o`,
/// checked against its source by `build.rs` and [`shipped`]'s tests).
/// Err is kept for callers that report why there is none; a build always
/// has one.
pub fn object() -> Result<&'static [u8], &'static str> {
    /// Kept 8-byte aligned: the ELF parser reads its headers in place.
    #[repr(C, align(8))]
    struct Aligned<T: ?Sized>(T);
    static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("IPIVMM_BPF_OBJECT")));
    Ok(&OBJECT.0)
}
