//! Checks a payload ELF before it is loaded: x86-64, executable, every
//! loadable segment inside the payload range of guest RAM.
use ipivmm_abi::{PAYLOAD_END, PAYLOAD_START};

/// Largest payload file accepted (the payload range is 7 MiB).
pub(crate) const MAX_PAYLOAD_FILE: u64 = 64 << 20;

const PT_LOAD: u32 = 1;
const EM_X86_64: u16 = 62;
const ET_EXEC: u16 = 2;

/// Why a payload image cannot be loaded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImageError {
    /// Empty file.
    #[error("payload is empty (0 bytes): pass an x86-64 ELF executable")]
    Empty,
    /// Too large.
    #[error(
        "payload is {0} bytes, over the {MAX_PAYLOAD_FILE}-byte limit: strip it or link it smaller"
    )]
    TooLarge(u64),
    /// Not an ELF.
    #[error("payload is not an ELF file (bad magic): pass an x86-64 ELF executable")]
    NotElf,
    /// Not 64-bit little-endian x86-64.
    #[error(
        "payload is an ELF for {0}, not x86-64: build it for x86_64 (see docs/custom-payloads.md)"
    )]
    WrongArch(String),
    /// Not an executable.
    #[error("payload ELF type {0} is not ET_EXEC: link it statically with a fixed address")]
    NotExecutable(u16),
    /// Headers cut short.
    #[error("payload ELF is truncated: {0}")]
    Truncated(&'static str),
    /// A segment outside the payload range.
    #[error("payload segment {index} at {start:#x}..{end:#x} is outside guest range {PAYLOAD_START:#x}..{PAYLOAD_END:#x}: link it at {PAYLOAD_START:#x} and keep it under {} KiB", (PAYLOAD_END - PAYLOAD_START) >> 10)]
    SegmentOutOfRange {
        /// Program header index.
        index: usize,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// A segment whose file bytes are not in the file.
    #[error("payload segment {0} points past the end of the file")]
    SegmentPastFile(usize),
    /// Entry outside the loaded image.
    #[error("payload entry point {0:#x} is outside its loaded segments")]
    EntryOutside(u64),
    /// Nothing to load.
    #[error("payload has no loadable segment")]
    NoSegments,
    /// The ELF loader (linux-loader) refuses it for a reason the checks
    /// above do not cover (e.g. a program header size other than 56, a
    /// PT_NOTE past the end of the file).
    #[error("payload ELF is refused by the loader: {0}; relink it as a plain static x86-64 executable (see docs/custom-payloads.md)")]
    Loader(String),
}

/// Facts about a checked image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Entry point.
    pub entry: u64,
    /// Lowest loaded address.
    pub start: u64,
    /// One past the highest loaded address (p_memsz).
    pub end: u64,
}

impl ImageInfo {
    /// Check `image` and return its entry point and extent.
    ///
    /// [`crate::run::run`] does this before it opens `/dev/kvm`; call it to
    /// vet a payload file early:
    ///
    /// ```
    /// use ipivmm::abi::PAYLOAD_START;
    /// use ipivmm::payload::image::{ImageError, ImageInfo};
    ///
    /// // `jmp .` at the payload base (a fixture of ipivmm's test kit).
    /// let elf = ipivmm_testkit::images::elf64(PAYLOAD_START, &[0xeb, 0xfe]);
    /// let info = ImageInfo::check(&elf).unwrap();
    /// assert_eq!(info.entry, PAYLOAD_START);
    /// assert_eq!(ImageInfo::check(b"#!/bin/sh\n"), Err(ImageError::NotElf));
    /// ```
    pub fn check(image: &[u8]) -> Result<ImageInfo, ImageError> {
        if image.is_empty() {
            return Err(ImageError::Empty);
        }
        if image.len() as u64 > MAX_PAYLOAD_FILE {
            return Err(ImageError::TooLarge(image.len() as u64));
        }
        if image.len() < 4 || &image[0..4] != b"\x7fELF" {
            return Err(ImageError::NotElf);
        }
        if image.len() < 64 {
            return Err(ImageError::Truncated("ELF header"));
        }
        let (class, data) = (image[4], image[5]);
        let machine = u16_at(image, 18)?;
        if class != 2 || data != 1 || machine != EM_X86_64 {
            return Err(ImageError::WrongArch(arch_name(class, data, machine)));
        }
        let etype = u16_at(image, 16)?;
        if etype != ET_EXEC {
            return Err(ImageError::NotExecutable(etype));
        }
        let trunc = ImageError::Truncated("program headers");
        let entry = u64_at(image, 24).ok_or(ImageError::Truncated("ELF header"))?;
        let phoff = u64_at(image, 32).ok_or(ImageError::Truncated("ELF header"))?;
        let phentsize = u16_at(image, 54)? as u64;
        let phnum = u16_at(image, 56)? as u64;
        if phentsize < 56 {
            return Err(trunc);
        }
        let (mut start, mut end, mut entry_ok) = (u64::MAX, 0u64, false);
        for i in 0..phnum {
            let off = phoff
                .checked_add(i * phentsize)
                .and_then(|o| usize::try_from(o).ok())
                .ok_or(ImageError::Truncated("program headers"))?;
            let field =
                |o: usize| u64_at(image, off + o).ok_or(ImageError::Truncated("program headers"));
            let ptype = u32_at(image, off).ok_or(ImageError::Truncated("program headers"))?;
            let (p_offset, p_paddr, p_filesz, p_memsz) =
                (field(8)?, field(24)?, field(32)?, field(40)?);
            if ptype != PT_LOAD || p_filesz == 0 {
                continue;
            }
            let index = i as usize;
            let seg_end = p_paddr.checked_add(p_memsz.max(p_filesz));
            match seg_end {
                Some(e) if p_paddr >= PAYLOAD_START && e <= PAYLOAD_END => {}
                _ => {
                    return Err(ImageError::SegmentOutOfRange {
                        index,
                        start: p_paddr,
                        end: seg_end.unwrap_or(u64::MAX),
                    })
                }
            }
            let file_end = p_offset.checked_add(p_filesz);
            if file_end.is_none_or(|e| e > image.len() as u64) {
                return Err(ImageError::SegmentPastFile(index));
            }
            let e = seg_end.unwrap_or(u64::MAX);
            start = start.min(p_paddr);
            end = end.max(e);
            entry_ok |= (p_paddr..e).contains(&entry);
        }
        if end == 0 {
            return Err(ImageError::NoSegments);
        }
        if !entry_ok {
            return Err(ImageError::EntryOutside(entry));
        }
        Ok(ImageInfo { entry, start, end })
    }
}

fn u16_at(b: &[u8], off: usize) -> Result<u16, ImageError> {
    b.get(
        off..off
            .checked_add(2)
            .ok_or(ImageError::Truncated("ELF header"))?,
    )
    .map(|s| u16::from_le_bytes([s[0], s[1]]))
    .ok_or(ImageError::Truncated("ELF header"))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn arch_name(class: u8, data: u8, machine: u16) -> String {
    let m = match machine {
        3 => "i386",
        40 => "ARM",
        62 => "x86-64",
        183 => "AArch64",
        243 => "RISC-V",
        _ => "machine",
    };
    let bits = if class == 1 { "32-bit" } else { "64-bit" };
    let endian = if data == 2 { " big-endian" } else { "" };
    format!("{bits}{endian} {m} ({machine})")
}

/// [`check`], then the load itself into a scratch copy of the payload
/// range: every check linux-loader makes when the VM is built (program
/// header size, notes, reads past the end of the file) fails here, before
/// `/dev/kvm` is opened, with the same answer. The scratch memory is an
/// anonymous mapping of the payload range (lazily backed: only the pages
/// written cost memory).
pub(crate) fn check_loadable(image: &[u8]) -> Result<ImageInfo, ImageError> {
    use linux_loader::loader::{elf::Elf, KernelLoader};
    use vm_memory::{GuestAddress, GuestMemoryMmap};
    let info = ImageInfo::check(image)?;
    let len = usize::try_from(PAYLOAD_END - PAYLOAD_START).expect("7 MiB fits usize");
    let scratch = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(PAYLOAD_START), len)])
        .map_err(|e| ImageError::Loader(format!("no scratch memory for the trial load: {e}")))?;
    Elf::load(
        &scratch,
        None,
        &mut std::io::Cursor::new(image),
        Some(GuestAddress(PAYLOAD_START)),
    )
    .map_err(|e| ImageError::Loader(e.to_string()))?;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    use ipivmm_testkit::images::elf64 as minimal_elf;

    #[test]
    fn accepts_a_well_formed_image() {
        let info = ImageInfo::check(&minimal_elf(PAYLOAD_START, &[0xf4])).unwrap();
        assert_eq!(info.entry, PAYLOAD_START);
        assert_eq!(info.end, PAYLOAD_START + 1);
    }

    #[test]
    fn rejects_bad_images_with_a_reason() {
        assert_eq!(ImageInfo::check(&[]), Err(ImageError::Empty));
        assert_eq!(ImageInfo::check(b"#!/bin/sh\n"), Err(ImageError::NotElf));
        let good = minimal_elf(PAYLOAD_START, &[0xf4]);
        assert!(matches!(
            ImageInfo::check(&good[..40]),
            Err(ImageError::Truncated(_))
        ));
        let mut arm = good.clone();
        arm[18..20].copy_from_slice(&183u16.to_le_bytes());
        assert!(
            matches!(ImageInfo::check(&arm), Err(ImageError::WrongArch(s)) if s.contains("AArch64"))
        );
        let mut i386 = good.clone();
        i386[4] = 1;
        assert!(matches!(
            ImageInfo::check(&i386),
            Err(ImageError::WrongArch(_))
        ));
        let mut dyn_ = good.clone();
        dyn_[16] = 3;
        assert_eq!(ImageInfo::check(&dyn_), Err(ImageError::NotExecutable(3)));
    }

    #[test]
    fn rejects_segments_outside_the_payload_range() {
        for addr in [0u64, 0x1000, PAYLOAD_END, 0xffff_ffff_ffff_fff0] {
            assert!(
                matches!(
                    ImageInfo::check(&minimal_elf(addr, &[0xf4; 32])),
                    Err(ImageError::SegmentOutOfRange { .. })
                ),
                "{addr:#x}"
            );
        }
        assert!(matches!(
            ImageInfo::check(&minimal_elf(PAYLOAD_END - 4, &[0xf4; 8])),
            Err(ImageError::SegmentOutOfRange { .. })
        ));
    }

    /// Issue 20, case 8: what only the loader refused (a program header
    /// size of 64, a PT_NOTE past the end of the file) is refused by the
    /// check, before /dev/kvm.
    #[test]
    fn what_the_loader_refuses_is_refused_before_the_vm() {
        let good = minimal_elf(PAYLOAD_START, &[0xf4]);
        check_loadable(&good).unwrap();
        // e_phentsize 64, the header padded so the fields check reads exist.
        let mut wide = good.clone();
        wide[54..56].copy_from_slice(&64u16.to_le_bytes());
        wide.splice(120..120, [0u8; 8]);
        wide[64 + 8..64 + 16].copy_from_slice(&128u64.to_le_bytes());
        assert!(
            ImageInfo::check(&wide).is_ok(),
            "the field checks alone accept it"
        );
        assert!(
            matches!(check_loadable(&wide), Err(ImageError::Loader(e)) if e.contains("program header size")),
            "{:?}",
            check_loadable(&wide)
        );
        // A second program header: PT_NOTE whose bytes lie past the end.
        let mut note = good.clone();
        note[56..58].copy_from_slice(&2u16.to_le_bytes());
        let mut ph = vec![0u8; 56];
        ph[0..4].copy_from_slice(&4u32.to_le_bytes());
        ph[8..16].copy_from_slice(&0x10_0000u64.to_le_bytes());
        ph[32..40].copy_from_slice(&64u64.to_le_bytes());
        note.splice(120..120, ph);
        note[64 + 8..64 + 16].copy_from_slice(&176u64.to_le_bytes());
        assert!(
            ImageInfo::check(&note).is_ok(),
            "the field checks alone accept it"
        );
        assert!(
            matches!(check_loadable(&note), Err(ImageError::Loader(_))),
            "{:?}",
            check_loadable(&note)
        );
    }

    #[test]
    fn rejects_segment_past_file_and_entry_outside() {
        let mut e = minimal_elf(PAYLOAD_START, &[0xf4]);
        e[64 + 32..64 + 40].copy_from_slice(&4096u64.to_le_bytes());
        assert_eq!(ImageInfo::check(&e), Err(ImageError::SegmentPastFile(0)));
        let mut e = minimal_elf(PAYLOAD_START, &[0xf4]);
        e[24..32].copy_from_slice(&0x20_0000u64.to_le_bytes());
        assert_eq!(
            ImageInfo::check(&e),
            Err(ImageError::EntryOutside(0x20_0000))
        );
    }
}
