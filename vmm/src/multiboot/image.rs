//! Where a multiboot kernel's bytes go: from the header's address fields
//! (flag bit 16, the "a.out kludge"), else from its ELF32 program headers
//! (kvm-unit-tests' x86 `.flat` files are `objcopy -O elf32-i386` of an
//! x86-64 link: PT_LOADs at their physical addresses, entry in the header).
//! Every field is checked against the file and guest RAM.
use super::header::Header;
use super::MultibootError;
use std::ops::Range;

/// Lowest address a kernel may load at: below 1 MiB are the real-mode
/// area and the BIOS holes a multiboot kernel does not own.
pub const MIN_LOAD: u64 = 0x10_0000;
/// Highest end a kernel may load to: the 32-bit entry addresses 4 GiB.
pub const MAX_END: u64 = 1 << 32;
/// Most PT_LOAD segments accepted.
pub const MAX_SEGMENTS: usize = 16;

/// One piece of the image: `file` bytes of the image copied to `addr`,
/// then zeros to `addr + mem_len`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Guest-physical address.
    pub addr: u64,
    /// The bytes of the image to copy.
    pub file: Range<usize>,
    /// Bytes the segment takes in memory (at least `file.len()`).
    pub mem_len: u64,
}

/// Where everything of the image goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The pieces, in file order.
    pub segments: Vec<Segment>,
    /// The 32-bit entry point.
    pub entry: u32,
    /// Lowest address loaded.
    pub start: u64,
    /// One past the highest address loaded (bss included).
    pub end: u64,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The layout of `image` (whose header is `h`) in `mem_bytes` of RAM.
pub fn layout(image: &[u8], h: &Header, mem_bytes: u64) -> Result<Layout, MultibootError> {
    let (segments, entry) = match h.aout {
        Some(a) => (aout_segments(image, h, a)?, a.entry_addr),
        None => elf32_segments(image)?,
    };
    let start = segments.iter().map(|s| s.addr).min().unwrap_or(0);
    let end = segments
        .iter()
        .map(|s| s.addr + s.mem_len)
        .max()
        .unwrap_or(0);
    for s in &segments {
        let seg_end = s.addr + s.mem_len;
        if s.addr < MIN_LOAD || seg_end > MAX_END {
            return Err(MultibootError::Placement(format!(
                "a segment at {:#x}..{seg_end:#x} is outside 1 MiB..4 GiB",
                s.addr
            )));
        }
        if seg_end > mem_bytes {
            return Err(MultibootError::DoesNotFit {
                end: seg_end,
                mem_mib: mem_bytes >> 20,
            });
        }
    }
    if !segments
        .iter()
        .any(|s| (s.addr..s.addr + s.mem_len).contains(&u64::from(entry)))
    {
        return Err(MultibootError::Placement(format!(
            "the entry point {entry:#x} is in no loaded segment"
        )));
    }
    Ok(Layout {
        segments,
        entry,
        start,
        end,
    })
}

/// Flag bit 16: the file from the header back to `load_addr` is the text,
/// up to `load_end_addr` (0: the file's end), then bss to `bss_end_addr`.
fn aout_segments(
    image: &[u8],
    h: &Header,
    a: super::header::AoutAddrs,
) -> Result<Vec<Segment>, MultibootError> {
    let bad = |what: &str| MultibootError::Placement(format!("header address fields: {what}"));
    if a.load_addr > a.header_addr {
        return Err(bad("load_addr is above header_addr"));
    }
    let back = (a.header_addr - a.load_addr) as usize;
    let file_start = h
        .offset
        .checked_sub(back)
        .ok_or_else(|| bad("load_addr is before the file's start"))?;
    let file_len = if a.load_end_addr == 0 {
        image.len() - file_start
    } else {
        if a.load_end_addr < a.load_addr {
            return Err(bad("load_end_addr is below load_addr"));
        }
        (a.load_end_addr - a.load_addr) as usize
    };
    let file_end = file_start
        .checked_add(file_len)
        .filter(|&e| e <= image.len())
        .ok_or(MultibootError::Truncated(
            "the text and data load_end_addr names",
        ))?;
    let loaded_end = u64::from(a.load_addr) + file_len as u64;
    let mem_end = if a.bss_end_addr == 0 {
        loaded_end
    } else if u64::from(a.bss_end_addr) < loaded_end {
        return Err(bad("bss_end_addr is below the loaded end"));
    } else {
        u64::from(a.bss_end_addr)
    };
    Ok(vec![Segment {
        addr: u64::from(a.load_addr),
        file: file_start..file_end,
        mem_len: mem_end - u64::from(a.load_addr),
    }])
}

/// An ELF32 i386 executable's PT_LOAD segments at their physical addresses.
fn elf32_segments(image: &[u8]) -> Result<(Vec<Segment>, u32), MultibootError> {
    let not = |what: &str| MultibootError::NotElf32(what.to_string());
    if image.get(..4) != Some(b"\x7fELF") {
        return Err(not(
            "no ELF magic (and the header has no address fields, flag bit 16)",
        ));
    }
    if image.get(4) != Some(&1) {
        return Err(not(
            "an ELF64 file; a multiboot kernel is ELF32 (objcopy -O elf32-i386)",
        ));
    }
    if image.get(5) != Some(&1) || u16_at(image, 18) != Some(3) {
        return Err(not("not little-endian i386 (e_machine 3)"));
    }
    let trunc = MultibootError::Truncated("the ELF header");
    let entry = u32_at(image, 24).ok_or(trunc.clone())?;
    let phoff = u32_at(image, 28).ok_or(trunc.clone())? as usize;
    let phentsize = usize::from(u16_at(image, 42).ok_or(trunc.clone())?);
    let phnum = usize::from(u16_at(image, 44).ok_or(trunc)?);
    if phentsize < 32 {
        return Err(not("program header entries shorter than 32 bytes"));
    }
    let mut segments = Vec::new();
    for i in 0..phnum {
        let at = phoff
            .checked_add(i * phentsize)
            .ok_or(MultibootError::Truncated("the program headers"))?;
        let field = |k: usize| {
            u32_at(image, at + 4 * k).ok_or(MultibootError::Truncated("the program headers"))
        };
        if field(0)? != 1 {
            continue; // not PT_LOAD
        }
        let (offset, paddr, filesz, memsz) = (field(1)?, field(3)?, field(4)?, field(5)?);
        if filesz > memsz {
            return Err(not("a PT_LOAD's p_filesz exceeds its p_memsz"));
        }
        let file_end = (offset as usize)
            .checked_add(filesz as usize)
            .filter(|&e| e <= image.len())
            .ok_or(MultibootError::Truncated("a PT_LOAD segment's bytes"))?;
        if memsz == 0 {
            continue;
        }
        segments.push(Segment {
            addr: u64::from(paddr),
            file: offset as usize..file_end,
            mem_len: u64::from(memsz),
        });
        if segments.len() > MAX_SEGMENTS {
            return Err(not("more than 16 PT_LOAD segments"));
        }
    }
    if segments.is_empty() {
        return Err(not("no PT_LOAD segment"));
    }
    let mut sorted: Vec<&Segment> = segments.iter().collect();
    sorted.sort_by_key(|s| s.addr);
    if sorted
        .windows(2)
        .any(|w| w[0].addr + w[0].mem_len > w[1].addr)
    {
        return Err(not("PT_LOAD segments overlap"));
    }
    Ok((segments, entry))
}

#[cfg(test)]
mod tests {
    use super::super::header::{self, AoutAddrs, FLAG_AOUT_KLUDGE};
    use super::*;

    fn elf_with_header(code_len: usize, paddr: u32, bss: u32) -> Vec<u8> {
        let mut code = header::encode(0, None);
        code.resize(code_len.max(12), 0xf4);
        ipivmm_testkit::images::elf32(&code, paddr, bss)
    }

    #[test]
    fn an_elf32_kernel_loads_its_pt_loads_at_their_physical_addresses() {
        let img = elf_with_header(64, 0x40_0000, 0x1000);
        let h = header::parse(&img).unwrap();
        let l = layout(&img, &h, 64 << 20).unwrap();
        assert_eq!(l.entry, 0x40_0000);
        assert_eq!(
            l.segments,
            vec![Segment {
                addr: 0x40_0000,
                file: 0x54..0x54 + 64,
                mem_len: 64 + 0x1000
            }]
        );
        assert_eq!((l.start, l.end), (0x40_0000, 0x40_1040));
        // Too little RAM for the bss: one line naming --memory.
        let e = layout(&img, &h, 0x40_0800).unwrap_err().to_string();
        assert!(e.contains("--memory") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn bad_elf_fields_are_refused_not_trusted() {
        let good = elf_with_header(64, 0x40_0000, 0);
        let h = header::parse(&good).unwrap();
        let mut elf64 = good.clone();
        elf64[4] = 2;
        assert!(layout(&elf64, &h, 64 << 20)
            .unwrap_err()
            .to_string()
            .contains("ELF64"));
        // p_filesz past the end of the file.
        let mut long = good.clone();
        long[0x34 + 16..0x34 + 20].copy_from_slice(&0x10_0000u32.to_le_bytes());
        long[0x34 + 20..0x34 + 24].copy_from_slice(&0x10_0000u32.to_le_bytes());
        assert!(matches!(
            layout(&long, &h, 64 << 20),
            Err(MultibootError::Truncated(_))
        ));
        // A segment below 1 MiB, or wrapping past 4 GiB.
        let low = elf_with_header(64, 0x1000, 0);
        assert!(matches!(
            layout(&low, &h, 64 << 20),
            Err(MultibootError::Placement(_))
        ));
        let high = elf_with_header(64, 0xffff_ff00, 0x1000);
        assert!(matches!(
            layout(&high, &h, 8 << 30),
            Err(MultibootError::Placement(_))
        ));
        // The entry outside every segment.
        let mut away = good.clone();
        away[24..28].copy_from_slice(&0x50_0000u32.to_le_bytes());
        assert!(layout(&away, &h, 64 << 20)
            .unwrap_err()
            .to_string()
            .contains("entry point"));
        // Program headers past the end of the file.
        let mut ph = good;
        ph[28..32].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert!(layout(&ph, &h, 64 << 20).is_err());
    }

    #[test]
    fn the_address_fields_place_a_flat_image_and_its_bss() {
        // The header 16 bytes into a flat image loaded at 1 MiB.
        let a = AoutAddrs {
            header_addr: 0x10_0010,
            load_addr: 0x10_0000,
            load_end_addr: 0,
            bss_end_addr: 0x10_3000,
            entry_addr: 0x10_0040,
        };
        let mut img = vec![0x90u8; 16];
        img.extend(header::encode(FLAG_AOUT_KLUDGE, Some(a)));
        img.resize(0x100, 0xf4);
        let h = header::parse(&img).unwrap();
        let l = layout(&img, &h, 64 << 20).unwrap();
        assert_eq!(
            l.segments,
            vec![Segment {
                addr: 0x10_0000,
                file: 0..0x100,
                mem_len: 0x3000
            }]
        );
        assert_eq!((l.entry, l.end), (0x10_0040, 0x10_3000));
        // load_addr before the file's start; load_end_addr past its end.
        let mut bad = a;
        bad.load_addr = 0x0f_0000;
        let mut img2 = vec![0x90u8; 16];
        img2.extend(header::encode(FLAG_AOUT_KLUDGE, Some(bad)));
        let h2 = header::parse(&img2).unwrap();
        assert!(layout(&img2, &h2, 64 << 20).is_err());
        let mut past = a;
        past.load_end_addr = 0x20_0000;
        let mut img3 = vec![0x90u8; 16];
        img3.extend(header::encode(FLAG_AOUT_KLUDGE, Some(past)));
        let h3 = header::parse(&img3).unwrap();
        assert!(matches!(
            layout(&img3, &h3, 64 << 20),
            Err(MultibootError::Truncated(_))
        ));
    }
}
