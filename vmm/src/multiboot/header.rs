//! The Multiboot (v1) header: where it is, what it asks for, and, when
//! bit 16 of its flags is set, where the image goes (the "a.out kludge"
//! address fields). Multiboot Specification 0.6.96, 3.1.
use super::MultibootError;

/// The header's magic.
pub const MAGIC: u32 = 0x1BAD_B002;
/// The header lies 4-byte aligned within the image's first 8192 bytes.
pub const SEARCH: usize = 8192;
/// Flag bit 0: align modules on 4 KiB pages (ipivmm loads no modules).
pub const FLAG_PAGE_ALIGN: u32 = 1 << 0;
/// Flag bit 1: the memory fields of the info structure (always given).
pub const FLAG_MEMORY_INFO: u32 = 1 << 1;
/// Flag bit 2: a video mode table (ipivmm has no display; refused).
pub const FLAG_VIDEO_MODE: u32 = 1 << 2;
/// Flag bit 16: the address fields are valid (not an ELF image).
pub const FLAG_AOUT_KLUDGE: u32 = 1 << 16;
/// Bits 0-15 a boot loader must understand or refuse the image (3.1.2).
const REQUIRED_MASK: u32 = 0xffff;

/// The address fields (flag bit 16), physical addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AoutAddrs {
    /// Where the header itself is loaded.
    pub header_addr: u32,
    /// Where the text segment starts (the file's byte at
    /// `header offset - (header_addr - load_addr)`).
    pub load_addr: u32,
    /// End of the data segment; 0: to the end of the file.
    pub load_end_addr: u32,
    /// End of the bss (zeroed); 0: no bss.
    pub bss_end_addr: u32,
    /// The entry point.
    pub entry_addr: u32,
}

/// A found and checked header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Byte offset of the magic in the file.
    pub offset: usize,
    /// The flags.
    pub flags: u32,
    /// The address fields, when flag bit 16 is set.
    pub aout: Option<AoutAddrs>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Whether `image` has a Multiboot header (magic and checksum) in its first
/// 8 KiB: what tells a multiboot kernel from a bzImage.
pub fn is_multiboot(image: &[u8]) -> bool {
    locate(image).is_some()
}

/// The offset of the first magic whose checksum holds.
fn locate(image: &[u8]) -> Option<usize> {
    let end = image.len().min(SEARCH);
    (0..end.saturating_sub(11)).step_by(4).find(|&at| {
        matches!(
            (u32_at(image, at), u32_at(image, at + 4), u32_at(image, at + 8)),
            (Some(MAGIC), Some(flags), Some(sum)) if MAGIC.wrapping_add(flags).wrapping_add(sum) == 0
        )
    })
}

/// Find and check the header of `image`.
pub fn parse(image: &[u8]) -> Result<Header, MultibootError> {
    let offset = locate(image).ok_or(MultibootError::NoHeader)?;
    let flags = u32_at(image, offset + 4).ok_or(MultibootError::NoHeader)?;
    let unknown = flags & REQUIRED_MASK & !(FLAG_PAGE_ALIGN | FLAG_MEMORY_INFO | FLAG_VIDEO_MODE);
    if unknown != 0 {
        return Err(MultibootError::UnknownFlags(unknown));
    }
    if flags & FLAG_VIDEO_MODE != 0 {
        return Err(MultibootError::VideoMode);
    }
    let aout = if flags & FLAG_AOUT_KLUDGE != 0 {
        let field = |i: usize| {
            u32_at(image, offset + 12 + 4 * i).ok_or(MultibootError::Truncated("address fields"))
        };
        Some(AoutAddrs {
            header_addr: field(0)?,
            load_addr: field(1)?,
            load_end_addr: field(2)?,
            bss_end_addr: field(3)?,
            entry_addr: field(4)?,
        })
    } else {
        None
    };
    Ok(Header {
        offset,
        flags,
        aout,
    })
}

/// A header's bytes for the tests: the test kit's, with the address
/// fields from an [`AoutAddrs`].
#[cfg(test)]
pub(crate) fn encode(flags: u32, aout: Option<AoutAddrs>) -> Vec<u8> {
    let words = aout.map(|a| {
        [
            a.header_addr,
            a.load_addr,
            a.load_end_addr,
            a.bss_end_addr,
            a.entry_addr,
        ]
    });
    ipivmm_testkit::images::multiboot_header(flags, words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_found_aligned_in_the_first_8k_with_its_checksum() {
        let mut img = vec![0u8; 16384];
        img[4096..4108].copy_from_slice(&encode(FLAG_MEMORY_INFO, None));
        let h = parse(&img).unwrap();
        assert_eq!((h.offset, h.flags, h.aout), (4096, FLAG_MEMORY_INFO, None));
        assert!(is_multiboot(&img));
        // Misaligned, past 8 KiB, or with a bad checksum: not a header.
        let mut odd = vec![0u8; 16384];
        odd[4098..4110].copy_from_slice(&encode(0, None));
        assert_eq!(parse(&odd), Err(MultibootError::NoHeader));
        let mut late = vec![0u8; 16384];
        late[8192..8204].copy_from_slice(&encode(0, None));
        assert!(!is_multiboot(&late));
        let mut bad = encode(0, None);
        bad[8] ^= 1;
        assert!(!is_multiboot(&bad));
        // A header cut off by the end of the file is no header.
        assert!(!is_multiboot(&encode(0, None)[..11]));
        assert!(is_multiboot(&encode(0, None)));
    }

    #[test]
    fn the_address_fields_are_read_with_bit_16_and_unknown_needs_refused() {
        let a = AoutAddrs {
            header_addr: 0x10_0000,
            load_addr: 0x10_0000,
            load_end_addr: 0,
            bss_end_addr: 0x10_2000,
            entry_addr: 0x10_0020,
        };
        let img = encode(FLAG_AOUT_KLUDGE, Some(a));
        assert_eq!(parse(&img).unwrap().aout, Some(a));
        // Bit 16 with the fields cut off.
        let cut = &img[..20];
        assert_eq!(parse(cut), Err(MultibootError::Truncated("address fields")));
        assert_eq!(
            parse(&encode(1 << 3, None)),
            Err(MultibootError::UnknownFlags(1 << 3))
        );
        assert_eq!(
            parse(&encode(FLAG_VIDEO_MODE, None)),
            Err(MultibootError::VideoMode)
        );
        // Bits 17-31 are optional: ignored.
        assert!(parse(&encode(1 << 20, None)).is_ok());
    }
}
