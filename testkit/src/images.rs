//! Smallest well-formed guest images, written byte by byte from the
//! formats' specifications (ELF, Linux's boot protocol, Multiboot v1), not
//! by ipivmm's own parsers: tests feed them to the loaders, so a loader and
//! its fixture cannot share a mistake.

/// An ELF64 x86-64 executable: one PT_LOAD (R+X) of `code` at virtual and
/// physical `addr`, entry at `addr`.
pub fn elf64(addr: u64, code: &[u8]) -> Vec<u8> {
    let mut e = vec![0u8; 64 + 56];
    e[0..4].copy_from_slice(b"\x7fELF");
    e[4] = 2; // ELFCLASS64
    e[5] = 1; // little-endian
    e[6] = 1; // EV_CURRENT
    e[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    e[20..24].copy_from_slice(&1u32.to_le_bytes());
    e[24..32].copy_from_slice(&addr.to_le_bytes());
    e[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    e[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    e[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    e[56..58].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let ph = 64;
    e[ph..ph + 4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    e[ph + 4..ph + 8].copy_from_slice(&5u32.to_le_bytes()); // R+X
    e[ph + 8..ph + 16].copy_from_slice(&120u64.to_le_bytes());
    e[ph + 16..ph + 24].copy_from_slice(&addr.to_le_bytes());
    e[ph + 24..ph + 32].copy_from_slice(&addr.to_le_bytes());
    e[ph + 32..ph + 40].copy_from_slice(&(code.len() as u64).to_le_bytes());
    e[ph + 40..ph + 48].copy_from_slice(&(code.len() as u64).to_le_bytes());
    e.extend_from_slice(code);
    e
}

/// A bzImage with a valid 64-bit setup header (boot protocol 2.15, 4
/// setup sectors, loaded high, XLF_KERNEL_64, `release` at the header's
/// kernel_version pointer) and `kernel` as its protected-mode code.
pub fn bzimage(kernel: &[u8], release: &str) -> Vec<u8> {
    let setup = 5 * 512;
    let mut b = vec![0u8; setup];
    b[0x1f1] = 4; // setup_sects
    b[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes()); // boot_flag
    b[0x202..0x206].copy_from_slice(&0x5372_6448u32.to_le_bytes()); // "HdrS"
    b[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes()); // version
                                                               // kernel_version: the string at 0x400 (pointer 0x200).
    b[0x20e..0x210].copy_from_slice(&0x200u16.to_le_bytes());
    let version = format!("{release} (ipivmm test) #1");
    b[0x400..0x400 + version.len()].copy_from_slice(version.as_bytes());
    b[0x211] = 1; // loadflags: LOADED_HIGH
    b[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes()); // code32_start
    b[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
    b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // xloadflags: XLF_KERNEL_64
    b[0x238..0x23c].copy_from_slice(&2047u32.to_le_bytes()); // cmdline_size
    let init = (kernel.len() as u32).max(0x1000).next_multiple_of(0x1000);
    b[0x260..0x264].copy_from_slice(&init.to_le_bytes()); // init_size
    b.extend_from_slice(kernel);
    b
}

/// Multiboot v1's magic.
pub const MULTIBOOT_MAGIC: u32 = 0x1BAD_B002;
/// Multiboot header flag bit 16: the address fields follow.
pub const MULTIBOOT_AOUT_KLUDGE: u32 = 1 << 16;

/// A Multiboot v1 header's 12 bytes (magic, `flags`, checksum), or 32 with
/// the address fields `aout`: header_addr, load_addr, load_end_addr,
/// bss_end_addr, entry_addr (flag bit 16 is the caller's to set).
pub fn multiboot_header(flags: u32, aout: Option<[u32; 5]>) -> Vec<u8> {
    let checksum = 0u32.wrapping_sub(MULTIBOOT_MAGIC.wrapping_add(flags));
    let words = [MULTIBOOT_MAGIC, flags, checksum]
        .into_iter()
        .chain(aout.into_iter().flatten());
    words.flat_map(u32::to_le_bytes).collect()
}

/// An ELF32 i386 executable: one PT_LOAD (RWX) of `code` at physical and
/// virtual `paddr` plus `bss` zero bytes, entry at its start.
pub fn elf32(code: &[u8], paddr: u32, bss: u32) -> Vec<u8> {
    let mut f = vec![0u8; 0x54];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4] = 1; // ELFCLASS32
    f[5] = 1; // little-endian
    f[6] = 1; // EV_CURRENT
    f[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    f[18..20].copy_from_slice(&3u16.to_le_bytes()); // EM_386
    f[20..24].copy_from_slice(&1u32.to_le_bytes());
    f[24..28].copy_from_slice(&paddr.to_le_bytes());
    f[28..32].copy_from_slice(&0x34u32.to_le_bytes()); // e_phoff
    f[40..42].copy_from_slice(&0x34u16.to_le_bytes()); // e_ehsize
    f[42..44].copy_from_slice(&32u16.to_le_bytes()); // e_phentsize
    f[44..46].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
    let ph = 0x34;
    let len = code.len() as u32;
    // p_type PT_LOAD, p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_flags RWX, p_align
    for (k, v) in [1, 0x54, paddr, paddr, len, len + bss, 7, 4]
        .into_iter()
        .enumerate()
    {
        f[ph + 4 * k..ph + 4 * k + 4].copy_from_slice(&u32::to_le_bytes(v));
    }
    f.extend_from_slice(code);
    f
}

/// A Multiboot kernel: an [`elf32`] whose code starts with a header of
/// flags 0, followed by `code` (at least 12 bytes in all).
pub fn multiboot_elf32(code: &[u8], paddr: u32, bss: u32) -> Vec<u8> {
    let mut c = multiboot_header(0, None);
    c.extend_from_slice(code);
    elf32(&c, paddr, bss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multiboot_header_sums_to_zero_and_carries_its_address_fields() {
        let h = multiboot_header(MULTIBOOT_AOUT_KLUDGE, Some([1, 2, 3, 4, 5]));
        let w: Vec<u32> = h
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(w.len(), 8);
        assert_eq!(w[0].wrapping_add(w[1]).wrapping_add(w[2]), 0);
        assert_eq!(&w[3..], [1, 2, 3, 4, 5]);
        assert_eq!(multiboot_header(0, None).len(), 12);
    }

    #[test]
    fn elf_headers_say_their_class_and_machine() {
        let e = elf64(0x40_0000, &[0xf4]);
        assert_eq!((e[4], u16::from_le_bytes([e[18], e[19]])), (2, 62));
        assert_eq!(e.len(), 121);
        let f = elf32(&[0xf4], 0x10_0000, 0);
        assert_eq!((f[4], u16::from_le_bytes([f[18], f[19]])), (1, 3));
    }
}
