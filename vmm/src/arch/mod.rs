//! x86-64 machine setup as plain functions (no /dev/kvm needed to test them):
//! descriptor tables, page tables, CPUID shaping, boot registers, LAPIC LVTs,
//! and the guest memory layout they all place.
pub(crate) mod cpuid;
pub(crate) mod gdt;
pub(crate) mod lapic_regs;
pub(crate) mod layout;
pub(crate) mod paging;
pub(crate) mod regs;
