//! Where a Linux guest's boot data goes in guest RAM, and the e820 map
//! that tells the kernel which RAM is its own.
//!
//! ```text
//! 0x0000_1000 .. 0x0000_7000  boot stack (rsp at entry)
//! 0x0000_7000                 boot_params ("zero page")
//! 0x0001_0000                 identity-mapped page tables (arch::layout::PML4)
//! 0x0002_0000                 vCPU 0's GDT and TSS (arch::layout)
//! 0x0006_0000                 kernel command line
//! 0x0009_fc00 .. 0x0010_0000  reserved (EBDA, ACPI tables from 0xe0000)
//! 0x0010_0000                 the bzImage's protected-mode kernel (it
//!                             decompresses itself within init_size)
//! top of RAM                  the initrd, page aligned, below initrd_addr_max
//! 0xfec0_0000                 IOAPIC (kernel irqchip), 0xfee0_0000 LAPIC
//! ```
//! The page tables, GDT and TSS are the payload's (`arch::layout`), below
//! `SYSTEM_END`: the kernel replaces them before it uses that RAM.
use crate::arch::layout as arch;

/// `boot_params`, the zero page, handed to the kernel in `rsi`.
pub(crate) const ZERO_PAGE: u64 = 0x7000;
/// Top of the boot stack (the decompressor sets up its own at once).
pub(crate) const BOOT_STACK_TOP: u64 = 0x7000 - 0x10;
/// The kernel command line.
pub(crate) const CMDLINE: u64 = 0x6_0000;
/// Most command-line bytes ipivmm writes (Linux's own limit is the
/// header's `cmdline_size`, 2047 on x86-64).
pub(crate) const CMDLINE_MAX: u64 = 0x1_0000;
/// End of the low RAM Linux may use (the EBDA follows).
pub(crate) const LOW_RAM_END: u64 = 0x9_fc00;
/// Where the ACPI tables go (RSDP first: the legacy scan finds it here too).
pub(crate) const ACPI_START: u64 = 0xe_0000;
/// End of the ACPI area (the BIOS area ends at 1 MiB).
pub(crate) const ACPI_END: u64 = 0x10_0000;
/// Where the protected-mode kernel is loaded (its `code32_start`).
pub(crate) const KERNEL_START: u64 = 0x10_0000;
/// The 64-bit entry is this far into the protected-mode kernel.
pub(crate) const ENTRY_64_OFFSET: u64 = 0x200;
/// The IOAPIC of `--irqchip kernel` (KVM's, at its default base).
pub(crate) const IOAPIC_BASE: u32 = 0xfec0_0000;
/// The xAPIC page.
pub(crate) const LAPIC_BASE: u32 = ipivmm_abi::XAPIC_BASE as u32;
/// Smallest RAM a Linux guest gets (a distribution kernel and a small
/// initramfs need well over this; the check against the kernel's own
/// `init_size` and the initrd comes on top).
pub const MIN_LINUX_MEM: u64 = 64 << 20;
/// RAM a Linux guest gets when none is asked for.
pub const DEFAULT_LINUX_MEM: u64 = 256 << 20;

const _: () = assert!(arch::SYSTEM_END <= CMDLINE && CMDLINE + CMDLINE_MAX <= LOW_RAM_END);
const _: () = assert!(arch::PML4 >= ZERO_PAGE + 0x1000);

/// An e820 entry's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum E820Kind {
    /// Usable RAM (E820_RAM, 1).
    Ram = 1,
    /// Reserved (E820_RESERVED, 2).
    Reserved = 2,
}

/// One entry of the e820 map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct E820Entry {
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// What it is.
    pub kind: E820Kind,
}

/// The e820 map of a guest with `mem_bytes` of RAM from address 0: low
/// RAM, the reserved BIOS area (where the ACPI tables are), RAM from 1 MiB.
pub fn e820(mem_bytes: u64) -> Vec<E820Entry> {
    vec![
        E820Entry {
            addr: 0,
            size: LOW_RAM_END,
            kind: E820Kind::Ram,
        },
        E820Entry {
            addr: LOW_RAM_END,
            size: KERNEL_START - LOW_RAM_END,
            kind: E820Kind::Reserved,
        },
        E820Entry {
            addr: KERNEL_START,
            size: mem_bytes.saturating_sub(KERNEL_START),
            kind: E820Kind::Ram,
        },
    ]
}

/// Where the initrd of `len` bytes goes in a guest of `mem_bytes`: the
/// highest page-aligned address where it ends below both the end of RAM
/// and `initrd_addr_max` (inclusive, as the header states it) and starts
/// above the kernel's `kernel_end` (its load address plus `init_size`).
/// None when it does not fit.
pub(crate) fn initrd_addr(
    mem_bytes: u64,
    initrd_addr_max: u32,
    kernel_end: u64,
    len: u64,
) -> Option<u64> {
    let limit = mem_bytes.min(u64::from(initrd_addr_max) + 1);
    let start = limit.checked_sub(len)? & !0xfff;
    (start >= kernel_end.next_multiple_of(0x1000)).then_some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_e820_map_covers_ram_but_the_bios_area() {
        let m = e820(256 << 20);
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].addr, m[0].size, m[0].kind),
            (0, 0x9fc00, E820Kind::Ram)
        );
        assert_eq!(m[1].kind, E820Kind::Reserved);
        assert!(m[1].addr <= ACPI_START && ACPI_END <= m[1].addr + m[1].size);
        assert_eq!(m[2].addr + m[2].size, 256 << 20);
        // Contiguous, in order, nothing past the end of RAM.
        for w in m.windows(2) {
            assert_eq!(w[0].addr + w[0].size, w[1].addr);
        }
    }

    #[test]
    fn the_initrd_goes_high_and_never_over_the_kernel() {
        let mem = 256u64 << 20;
        let at = initrd_addr(mem, 0x7fff_ffff, 0x10_0000 + (40 << 20), 10 << 20).unwrap();
        assert_eq!(at % 0x1000, 0);
        assert!(at + (10 << 20) <= mem);
        assert!(at >= 0x10_0000 + (40 << 20));
        // A kernel that claims the RAM: no room.
        assert_eq!(
            initrd_addr(mem, 0x7fff_ffff, mem - (1 << 20), 10 << 20),
            None
        );
        // initrd_addr_max caps it below the end of RAM (inclusive limit).
        let capped = initrd_addr(1 << 30, (128 << 20) - 1, 0x20_0000, 1 << 20).unwrap();
        assert_eq!(capped + (1 << 20), 128 << 20);
        // Larger than RAM: no underflow.
        assert_eq!(initrd_addr(1 << 20, 0x7fff_ffff, 0, 2 << 20), None);
    }
}
