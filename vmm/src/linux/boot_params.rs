//! The zero page (`boot_params`) of the 64-bit boot protocol: the image's
//! own setup header with what the loader fills in (boot.rst, "Details of
//! header fields": type_of_loader, cmd_line_ptr, ramdisk_image/size), the
//! e820 map and the RSDP's address.
use super::layout::{self, E820Entry};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, setup_header};

/// `type_of_loader` 0xff: "undefined" (no assigned boot loader ID).
const LOADER_UNDEFINED: u8 = 0xff;
/// `loadflags` bit 7: `heap_end_ptr` is valid (boot.rst asks loaders to set it).
const CAN_USE_HEAP: u8 = 1 << 7;
/// `heap_end_ptr`: the setup heap's end, 0xe00 bytes below 0x10000 as boot.rst suggests.
const HEAP_END: u16 = 0xfe00;

/// Where the initrd is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Initrd {
    /// Guest-physical address.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

/// The zero page for a kernel whose setup header is `hdr` (as the image
/// has it), with the command line at `layout::CMDLINE`, `initrd` if any,
/// the e820 map `e820` and the RSDP at `rsdp`.
pub fn build(
    mut hdr: setup_header,
    initrd: Option<Initrd>,
    e820: &[E820Entry],
    rsdp: u64,
) -> boot_params {
    hdr.type_of_loader = LOADER_UNDEFINED;
    hdr.loadflags |= CAN_USE_HEAP;
    hdr.heap_end_ptr = HEAP_END;
    hdr.cmd_line_ptr = layout::CMDLINE as u32;
    let (image, size) = initrd.map_or((0, 0), |i| (i.addr, i.len));
    hdr.ramdisk_image = image as u32;
    hdr.ramdisk_size = size as u32;
    let mut p = boot_params {
        hdr,
        acpi_rsdp_addr: rsdp,
        ..Default::default()
    };
    // Above 4 GiB the ext_ fields would carry the high halves; ipivmm's
    // RAM ends below 3 GiB, so they stay 0.
    let n = e820.len().min(p.e820_table.len());
    for (slot, e) in p.e820_table.iter_mut().zip(&e820[..n]) {
        *slot = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind as u32,
        };
    }
    p.e820_entries = n as u8;
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::layout::{e820, E820Kind};

    #[test]
    fn the_zero_page_carries_the_loader_fields_and_the_map() {
        let hdr = setup_header {
            header: 0x5372_6448,
            version: 0x020f,
            cmdline_size: 2047,
            ..Default::default()
        };
        let initrd = Initrd {
            addr: 0x0f00_0000,
            len: 0x12_3456,
        };
        let p = build(hdr, Some(initrd), &e820(256 << 20), 0xe0000);
        // Copy the packed fields out before comparing them.
        let h = p.hdr;
        let (ptr, img, size, loader, flags) = (
            h.cmd_line_ptr,
            h.ramdisk_image,
            h.ramdisk_size,
            h.type_of_loader,
            h.loadflags,
        );
        assert_eq!(ptr as u64, layout::CMDLINE);
        assert_eq!((img, size), (0x0f00_0000, 0x12_3456));
        assert_eq!(loader, 0xff);
        assert_ne!(flags & CAN_USE_HEAP, 0);
        let (version, rsdp) = (h.version, p.acpi_rsdp_addr);
        assert_eq!(version, 0x020f, "the image's own header is kept");
        assert_eq!(rsdp, 0xe0000);
        assert_eq!(p.e820_entries, 3);
        let last = p.e820_table[2];
        let (addr, len, kind) = (last.addr, last.size, last.r#type);
        assert_eq!(
            (addr, addr + len, kind),
            (0x10_0000, 256 << 20, E820Kind::Ram as u32)
        );
        let none = build(hdr, None, &e820(64 << 20), 0);
        let (img, size) = (none.hdr.ramdisk_image, none.hdr.ramdisk_size);
        assert_eq!((img, size), (0, 0));
    }

    #[test]
    fn the_zero_page_is_4_kib_with_the_header_at_0x1f1() {
        assert_eq!(std::mem::size_of::<boot_params>(), 4096);
        let p = build(setup_header::default(), None, &e820(64 << 20), 0);
        let bytes = vm_memory::ByteValued::as_slice(&p);
        // cmd_line_ptr is at 0x228 of the zero page (boot.rst).
        assert_eq!(
            &bytes[0x228..0x22c],
            &(layout::CMDLINE as u32).to_le_bytes()
        );
        assert_eq!(bytes[0x1e8], 3, "e820_entries");
    }
}
