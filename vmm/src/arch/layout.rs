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
//! scratch_base(N) per-vCPU scratch for payload samples, to the end of RAM
//!              (right after the N vCPUs' stacks: guest RAM grows with N)
//! 0xFEE0_0000  xAPIC page (not RAM)
//! ```
use ipivmm_abi::MAX_VCPUS;

/// The BootInfo block handed to every vCPU in `rdi`.
pub const BOOT_INFO: u64 = 0x1000;
/// Page-map level 4 table.
pub const PML4: u64 = 0x1_0000;
/// Page-directory-pointer table (the first 512 GiB).
pub(crate) const PDPT: u64 = 0x1_1000;
/// Four page directories of 2 MiB pages, one per GiB of the low 4 GiB.
pub(crate) const PD_BASE: u64 = 0x1_2000;
/// Number of page directories (GiB identity-mapped).
pub(crate) const PD_COUNT: u64 = 4;
/// First per-vCPU GDT.
pub const GDT_BASE: u64 = 0x2_0000;
/// Bytes per GDT: null, code64, data, TSS (16 bytes) = 40, padded.
pub(crate) const GDT_STRIDE: u64 = 0x40;
/// First per-vCPU TSS.
pub(crate) const TSS_BASE: u64 = GDT_BASE + GDT_STRIDE * MAX_VCPUS as u64;
/// Bytes per TSS (the 64-bit TSS is 104 bytes).
pub(crate) const TSS_STRIDE: u64 = 0x80;
/// End of the host-built system tables.
pub(crate) const SYSTEM_END: u64 = TSS_BASE + TSS_STRIDE * MAX_VCPUS as u64;

/// First vCPU's stack area.
pub const STACK_BASE: u64 = 0x80_0000;
/// Bytes of stack area per vCPU: the main stack then the IST1 stack.
pub(crate) const STACK_STRIDE: u64 = 0x1_0000;
/// Of `STACK_STRIDE`, bytes given to the IST1 (interrupt) stack at the top.
pub(crate) const IST_SIZE: u64 = 0x4000;
/// Bytes of scratch each vCPU needs at the least: the SDK's per-vCPU block
/// (4 KiB, `ipivmm_guest::percpu::PERCPU_RESERVED`) and one page of samples.
pub(crate) const MIN_SCRATCH_PER_VCPU: u64 = 0x2000;
/// Of each vCPU's scratch, bytes the guest SDK keeps for its per-vCPU block.
pub const PERCPU_RESERVED: u64 = 0x1000;

/// Start of the per-vCPU scratch areas of a VM of `vcpus` vCPUs: right
/// after their stacks.
pub const fn scratch_base(vcpus: usize) -> u64 {
    STACK_BASE + STACK_STRIDE * vcpus as u64
}

/// Smallest guest RAM for `vcpus` vCPUs: the fixed areas, their stacks and
/// at least 1 MiB of scratch (never less than `MIN_SCRATCH_PER_VCPU` each).
pub const fn min_mem_bytes(vcpus: usize) -> u64 {
    let per_vcpu = MIN_SCRATCH_PER_VCPU * vcpus as u64;
    let scratch = if per_vcpu > 0x10_0000 {
        per_vcpu
    } else {
        0x10_0000
    };
    scratch_base(vcpus) + scratch
}

/// Smallest guest RAM ipivmm accepts (one vCPU).
pub const MIN_MEM_BYTES: u64 = min_mem_bytes(1);

/// Largest guest RAM: stays below the 3 GiB PCI/APIC hole.
pub const MAX_MEM_BYTES: u64 = 0xC000_0000;
/// Default guest RAM (up to 2 vCPUs; see [`default_mem_bytes`]).
pub(crate) const DEFAULT_MEM_BYTES: u64 = 64 << 20;

/// Scratch (sample space) the default guest RAM gives a VM, whatever its
/// vCPU count, as long as each vCPU gets [`MIN_SCRATCH_PER_VCPU`].
pub(crate) const DEFAULT_SCRATCH_BYTES: u64 = DEFAULT_MEM_BYTES - scratch_base(2);

/// Guest RAM a run of `vcpus` vCPUs gets when none is asked for:
/// `DEFAULT_MEM_BYTES`, or, when that many vCPUs' stacks do not leave
/// `DEFAULT_SCRATCH_BYTES` of scratch, their stacks plus that much
/// (rounded up to 1 MiB): 128 MiB at 1024 vCPUs.
pub const fn default_mem_bytes(vcpus: usize) -> u64 {
    let min_scratch = MIN_SCRATCH_PER_VCPU * vcpus as u64;
    let scratch = if min_scratch > DEFAULT_SCRATCH_BYTES {
        min_scratch
    } else {
        DEFAULT_SCRATCH_BYTES
    };
    let need = (scratch_base(vcpus) + scratch).next_multiple_of(1 << 20);
    if need > DEFAULT_MEM_BYTES {
        need
    } else {
        DEFAULT_MEM_BYTES
    }
}

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
    let base = scratch_base(vcpus);
    if vcpus == 0 || mem_bytes <= base {
        return 0;
    }
    ((mem_bytes - base) / vcpus as u64) & !0xfff
}

// The regions must not overlap: checked when the crate compiles.
const _: () = {
    assert!(BOOT_INFO + ipivmm_abi::BOOT_INFO_SIZE as u64 <= PML4);
    assert!(PD_BASE + PD_COUNT * 0x1000 <= GDT_BASE);
    assert!(SYSTEM_END <= ipivmm_abi::PAYLOAD_START);
    assert!(ipivmm_abi::PAYLOAD_END <= STACK_BASE);
    assert!(MIN_MEM_BYTES <= DEFAULT_MEM_BYTES);
    assert!(min_mem_bytes(MAX_VCPUS) <= MAX_MEM_BYTES);
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
            assert!(ist_top(i) <= scratch_base(MAX_VCPUS));
            assert_eq!(ist_top(i), scratch_base(i + 1));
            if i > 0 {
                assert!(ist_top(i - 1) <= stack_top(i) - (STACK_STRIDE - IST_SIZE));
            }
        }
    }

    #[test]
    fn scratch_is_split_evenly() {
        let s = scratch_stride(DEFAULT_MEM_BYTES, 4);
        assert_eq!(s % 0x1000, 0);
        assert!(scratch_base(4) + 4 * s <= DEFAULT_MEM_BYTES);
        assert_eq!(scratch_stride(scratch_base(4), 4), 0);
        assert_eq!(scratch_stride(DEFAULT_MEM_BYTES, 0), 0);
    }

    #[test]
    fn default_memory_grows_with_vcpus_and_keeps_their_samples() {
        assert_eq!(default_mem_bytes(1), DEFAULT_MEM_BYTES);
        assert_eq!(default_mem_bytes(2), DEFAULT_MEM_BYTES);
        assert_eq!(default_mem_bytes(1024), 128 << 20);
        for n in [3, 255, 300, 1024] {
            let m = default_mem_bytes(n);
            assert_eq!(m % (1 << 20), 0);
            assert!(m >= min_mem_bytes(n), "{n}");
            // The same total sample space as two vCPUs get in 64 MiB.
            assert!(m - scratch_base(n) >= DEFAULT_SCRATCH_BYTES, "{n}");
            // 1000 iterations fit at any count.
            assert!(scratch_stride(m, n) >= PERCPU_RESERVED + 1000 * 8, "{n}");
        }
        assert!(min_mem_bytes(1024) > DEFAULT_MEM_BYTES);
    }
}
