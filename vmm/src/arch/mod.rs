//! x86-64 machine setup as plain functions (no /dev/kvm needed to test them):
//! descriptor tables, page tables, CPUID shaping, boot registers, LAPIC LVTs,
//! and the guest memory layout they all place.
pub mod cpuid;
pub mod gdt;
pub mod lapic_regs;
pub mod layout;
pub mod paging;
pub mod regs;
