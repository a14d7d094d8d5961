//! The machine state a multiboot kernel starts in (3.2): 32-bit protected
//! mode, paging off, flat 4 GiB code and data segments, EAX the boot
//! loader's magic, EBX the information structure, interrupts off. The
//! kernel loads its own GDT before it touches a segment register; ipivmm
//! still gives GDTR a valid flat GDT (as QEMU's multiboot ROM does).
use crate::arch::gdt::segment_from_descriptor;
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};

/// EAX at entry: the boot loader is multiboot-compliant.
pub const BOOTLOADER_MAGIC: u32 = 0x2BAD_B002;
/// Where the 32-bit GDT goes: low RAM, below any kernel (1 MiB and up)
/// and away from page 0 (kvm-unit-tests' AP trampoline).
pub const GDT_ADDR: u64 = 0x8000;
/// 32-bit code: base 0, limit 4 GiB, execute/read, accessed, D, G.
pub const CODE32_DESC: u64 = 0x00cf_9b00_0000_ffff;
/// 32-bit data: base 0, limit 4 GiB, read/write, accessed, B, G.
pub const DATA32_DESC: u64 = 0x00cf_9300_0000_ffff;
/// Selector of the code descriptor.
pub const CODE_SELECTOR: u16 = 0x08;
/// Selector of the data descriptor.
pub const DATA_SELECTOR: u16 = 0x10;
/// CR0 at entry: PE and ET (paging off, caches on).
pub const CR0: u64 = 0x11;
/// A 32-bit busy TSS type: TR must be usable for VM entry on real
/// hardware, whatever the kernel does with it later.
const TSS32_BUSY: u8 = 0xb;

/// The GDT's bytes: null, code, data.
pub fn gdt_bytes() -> [u8; 24] {
    let mut out = [0u8; 24];
    for (chunk, e) in out.chunks_exact_mut(8).zip([0, CODE32_DESC, DATA32_DESC]) {
        chunk.copy_from_slice(&e.to_le_bytes());
    }
    out
}

/// vCPU 0's special registers, starting from what KVM reported.
pub fn sregs(mut s: kvm_sregs) -> kvm_sregs {
    let data = segment_from_descriptor(DATA32_DESC, DATA_SELECTOR);
    s.cs = segment_from_descriptor(CODE32_DESC, CODE_SELECTOR);
    s.ds = data;
    s.es = data;
    s.fs = data;
    s.gs = data;
    s.ss = data;
    s.tr = kvm_segment {
        base: 0,
        limit: 0x67,
        selector: 0,
        type_: TSS32_BUSY,
        present: 1,
        ..Default::default()
    };
    s.ldt = kvm_segment {
        type_: 2,
        present: 1,
        limit: 0xffff,
        ..Default::default()
    };
    s.gdt.base = GDT_ADDR;
    s.gdt.limit = (gdt_bytes().len() - 1) as u16;
    s.idt.base = 0;
    s.idt.limit = 0;
    s.cr0 = CR0;
    s.cr3 = 0;
    s.cr4 = 0;
    s.efer = 0;
    s
}

/// vCPU 0's general registers: the entry, the magic and the info address.
pub fn regs(entry: u32, info: u64) -> kvm_regs {
    kvm_regs {
        rip: u64::from(entry),
        rax: u64::from(BOOTLOADER_MAGIC),
        rbx: info,
        rflags: 0x2,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_flat_32_bit_protected_mode_without_paging() {
        let s = sregs(kvm_sregs::default());
        assert_eq!(s.cr0 & 1, 1, "protected mode");
        assert_eq!(s.cr0 & (1 << 31), 0, "paging off");
        assert_eq!((s.efer, s.cr4), (0, 0), "no long mode, no PAE");
        for seg in [s.cs, s.ds, s.ss] {
            assert_eq!(
                (seg.base, seg.limit, seg.g, seg.db, seg.l),
                (0, u32::MAX, 1, 1, 0)
            );
            assert_eq!(seg.present, 1);
        }
        assert_eq!(s.cs.type_ & 0x8, 0x8, "CS is code");
        assert_eq!(s.ds.type_ & 0x8, 0, "DS is data");
        // GDTR names the GDT ipivmm writes, whose entries are CS and DS.
        let g = gdt_bytes();
        assert_eq!(usize::from(s.gdt.limit) + 1, g.len());
        let desc =
            |sel: u16| u64::from_le_bytes(g[sel as usize..sel as usize + 8].try_into().unwrap());
        assert_eq!(desc(s.cs.selector), CODE32_DESC);
        assert_eq!(desc(s.ds.selector), DATA32_DESC);
        let r = regs(0x40_00bc, 0x1_0000);
        assert_eq!(
            (r.rip, r.rax, r.rbx, r.rflags),
            (0x40_00bc, 0x2BAD_B002, 0x1_0000, 2)
        );
    }
}
