//! Every guest-physical address ipivmm uses, in one place.
//!
//! ```text
//! 0x0000_0000  null page (mapped, unused)
//! 0x0000_1000  BootInfo (one shared, read-only block)
//! 0x0001_0000  PML4, PDPT, 4 page directories: identity map of 4 GiB, 2 MiB pages
//! 0x0002_0000  per-vCPU GDTs (GDT_STRIDE each)
//! 0x0002_8000  per-vCPU 64-bit TSSs (TSS_STRIDE each)
//! 0x0010_0000  payload image (PAYLOAD_START .. PAYLOAD_END)
//! 0x0080_0000  per-vCPU stacks: stack, then IST1 stack (STACK_STRIDE each)
//! SCRATCH_BASE per-vCPU scratch for payload samples, to the end of RAM
//! 0xFEE0_0000  xAPIC page (not RAM)
//! ```
use ipivmm_abi::MAX_VCPUS;

/// The BootInfo block handed to every vCPU in `rdi`.
pub const BOOT_INFO: u64 = 0x1000;
/// Page-map level 4 table.
pub const PML4: u64 = 0x1_0000;
/// Page-directory-pointer table (the first 512 GiB).
pub const PDPT: u64 = 0x1_1000;
/// Four page directories of 2 MiB pages, one per GiB of the low 4 GiB.
pub const PD_BASE: u64 = 0x1_2000;
/// Number of page directories (GiB identity-mapped).
pub const PD_COUNT: u64 = 4;
/// First per-vCPU GDT.
pub const GDT_BASE: u64 = 0x2_0000;
/// Bytes per GDT: null, code64, data, TSS (16 bytes) = 40, padded.
pub const GDT_STRIDE: u64 = 0x40;
/// First per-vCPU TSS.
pub const TSS_BASE: u64 = GDT_BASE + GDT_STRIDE * MAX_VCPUS as u64;
/// Bytes per TSS (the 64-bit TSS is 104 bytes).
pub const TSS_STRIDE: u64 = 0x80;
/// End of the host-built system tables.
pub const SYSTEM_END: u64 = TSS_BASE + TSS_STRIDE * MAX_VCPUS as u64;

/// First vCPU's stack area.
pub const STACK_BASE: u64 = 0x80_0000;
/// Bytes of stack area per vCPU: the main stack then the IST1 stack.
pub const STACK_STRIDE: u64 = 0x1_0000;
/// Of `STACK_STRIDE`, bytes given to the IST1 (interrupt) stack at the top.
pub const IST_SIZE: u64 = 0x4000;
/// Start of the per-vCPU scratch areas.
pub const SCRATCH_BASE: u64 = STACK_BASE + STACK_STRIDE * MAX_VCPUS as u64;

/// Smallest guest RAM ipivmm accepts: the fixed areas plus 1 MiB of scratch.
pub const MIN_MEM_BYTES: u64 = SCRATCH_BASE + 0x10_0000;
/// Largest guest RAM: stays below the 3 GiB PCI/APIC hole.
pub const MAX_MEM_BYTES: u64 = 0xC000_0000;
/// Default guest RAM.
pub const DEFAULT_MEM_BYTES: u64 = 64 << 20;

/// GDT of vCPU `index`.
pub const fn gdt_addr(index: usize) -> u64 {
    GDT_BASE + GDT_STRIDE * index as u64
}

/// TSS of vCPU `index`.
pub const fn tss_addr(index: usize) -> u64 {
    TSS_BASE + TSS_STRIDE * index as u64
}

/// Initial `rsp` of vCPU `index` (top of its main stack, 16-byte aligned).
pub const fn stack_top(index: usize) -> u64 {
    STACK_BASE + STACK_STRIDE * index as u64 + (STACK_STRIDE - IST_SIZE)
}

/// IST1 stack top of vCPU `index`.
pub const fn ist_top(index: usize) -> u64 {
    STACK_BASE + STACK_STRIDE * (index as u64 + 1)
}

/// Bytes of scratch each of `vcpus` vCPUs gets in `mem_bytes` of RAM, page aligned.
pub const fn scratch_stride(mem_bytes: u64, vcpus: usize) -> u64 {
    if vcpus == 0 || mem_bytes <= SCRATCH_BASE {
        return 0;
    }
    ((mem_bytes - SCRATCH_BASE) / vcpus as u64) & !0xfff
}

// The regions must not overlap: checked when the crate compiles.
const _: () = {
    assert!(BOOT_INFO + ipivmm_abi::BOOT_INFO_SIZE as u64 <= PML4);
    assert!(PD_BASE + PD_COUNT * 0x1000 <= GDT_BASE);
    assert!(SYSTEM_END <= ipivmm_abi::PAYLOAD_START);
    assert!(ipivmm_abi::PAYLOAD_END <= STACK_BASE);
    assert!(MIN_MEM_BYTES <= DEFAULT_MEM_BYTES);
    assert!(MAX_MEM_BYTES <= ipivmm_abi::XAPIC_BASE);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_aligned_and_disjoint() {
        for i in [0usize, 1, MAX_VCPUS - 1] {
            assert_eq!(stack_top(i) % 16, 0);
            assert_eq!(ist_top(i) % 16, 0);
            assert!(stack_top(i) < ist_top(i));
            assert!(ist_top(i) <= SCRATCH_BASE);
            if i > 0 {
                assert!(ist_top(i - 1) <= stack_top(i) - (STACK_STRIDE - IST_SIZE));
            }
        }
    }

    #[test]
    fn scratch_is_split_evenly() {
        let s = scratch_stride(DEFAULT_MEM_BYTES, 4);
        assert_eq!(s % 0x1000, 0);
        assert!(SCRATCH_BASE + 4 * s <= DEFAULT_MEM_BYTES);
        assert_eq!(scratch_stride(SCRATCH_BASE, 4), 0);
        assert_eq!(scratch_stride(DEFAULT_MEM_BYTES, 0), 0);
    }
}
