//! Pure IPI encoding helpers shared by the guest SDK (which sends IPIs) and
//! the host (which decodes and checks them): the ICR and its builders
//! ([`icr`]), logical destinations and target counts ([`logical`]), the
//! KVM_HC_SEND_IPI destination bitmaps ([`pv`]), and the set bits of a vCPU
//! bitmap ([`bits`]).

mod bits;
mod icr;
mod logical;
mod pv;

pub use bits::*;
pub use icr::*;
pub use logical::*;
pub use pv::*;
