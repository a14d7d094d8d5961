//! Identity map of the low 4 GiB with 2 MiB pages, so the payload and the
//! xAPIC page at 0xFEE00000 are reachable from the first instruction.
use crate::arch::layout::{PDPT, PD_BASE, PD_COUNT, PML4};

const PRESENT: u64 = 1 << 0;
const WRITABLE: u64 = 1 << 1;
const WRITE_THROUGH: u64 = 1 << 3;
const CACHE_DISABLE: u64 = 1 << 4;
const PAGE_SIZE_2M: u64 = 1 << 7;
const TWO_MIB: u64 = 1 << 21;

/// Bytes of all tables: PML4, PDPT and `PD_COUNT` page directories, contiguous.
pub(crate) const TABLES_SIZE: usize = (2 + PD_COUNT as usize) * 0x1000;

/// The page tables as bytes, to be written at `layout::PML4`.
pub(crate) fn identity_map_tables() -> Vec<u8> {
    debug_assert_eq!(PDPT, PML4 + 0x1000);
    debug_assert_eq!(PD_BASE, PDPT + 0x1000);
    let mut entries = vec![0u64; TABLES_SIZE / 8];
    entries[0] = PDPT | PRESENT | WRITABLE;
    for gib in 0..PD_COUNT {
        entries[512 + gib as usize] = (PD_BASE + gib * 0x1000) | PRESENT | WRITABLE;
        for j in 0..512u64 {
            let addr = (gib << 30) | (j * TWO_MIB);
            entries[1024 + (gib * 512 + j) as usize] = addr | page_flags(addr);
        }
    }
    entries.iter().flat_map(|e| e.to_le_bytes()).collect()
}

/// Flags of the 2 MiB page at `addr`: MMIO above 3 GiB (the xAPIC page) is uncached.
fn page_flags(addr: u64) -> u64 {
    let mmio = if addr >= 0xC000_0000 {
        CACHE_DISABLE | WRITE_THROUGH
    } else {
        0
    };
    PRESENT | WRITABLE | PAGE_SIZE_2M | mmio
}

/// Walk the tables as the MMU would, for tests: the physical address `va` maps to.
#[cfg(test)]
fn translate(tables: &[u8], va: u64) -> Option<u64> {
    let read = |gpa: u64| -> Option<u64> {
        let off = usize::try_from(gpa.checked_sub(PML4)?).ok()?;
        Some(u64::from_le_bytes(
            tables.get(off..off + 8)?.try_into().ok()?,
        ))
    };
    let frame = |e: u64| e & 0x000f_ffff_ffff_f000;
    let pml4e = read(PML4 + ((va >> 39) & 0x1ff) * 8)?;
    if pml4e & PRESENT == 0 {
        return None;
    }
    let pdpte = read(frame(pml4e) + ((va >> 30) & 0x1ff) * 8)?;
    if pdpte & PRESENT == 0 {
        return None;
    }
    let pde = read(frame(pdpte) + ((va >> 21) & 0x1ff) * 8)?;
    if pde & PRESENT == 0 || pde & PAGE_SIZE_2M == 0 {
        return None;
    }
    Some((pde & 0x000f_ffff_ffe0_0000) | (va & (TWO_MIB - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_4gib_is_identity_mapped() {
        let t = identity_map_tables();
        assert_eq!(t.len(), TABLES_SIZE);
        for va in [
            0u64,
            0x1000,
            0x10_0000,
            0x80_0000,
            0x3fff_ffff,
            0xfee0_0300,
            0xffff_ffff,
        ] {
            assert_eq!(translate(&t, va), Some(va), "va {va:#x}");
        }
    }

    #[test]
    fn above_4gib_is_unmapped() {
        let t = identity_map_tables();
        assert_eq!(translate(&t, 0x1_0000_0000), None);
        assert_eq!(translate(&t, 0x80_0000_0000), None);
    }

    #[test]
    fn apic_page_is_uncached_and_ram_is_not() {
        assert_ne!(page_flags(0xfee0_0000) & CACHE_DISABLE, 0);
        assert_eq!(page_flags(0x10_0000) & CACHE_DISABLE, 0);
    }
}
