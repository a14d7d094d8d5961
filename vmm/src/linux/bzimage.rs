//! What a bzImage must be for ipivmm to boot it, checked before a VM
//! exists: the setup header's fields the 64-bit boot protocol reads
//! (Documentation/arch/x86/boot.rst), read from the bytes without trusting
//! them. Loading itself is linux-loader's (`vm::linux`).
use std::fmt;

/// Largest kernel image accepted (a distribution's bzImage is 8–15 MiB).
pub(crate) const MAX_KERNEL_FILE: u64 = 128 << 20;
/// "HdrS" at 0x202.
const HDRS_MAGIC: u32 = 0x5372_6448;
/// 0xAA55 at 0x1FE.
const BOOT_FLAG: u16 = 0xaa55;
/// Boot protocol 2.12: `xloadflags` (the 64-bit entry is announced there).
pub(crate) const MIN_PROTOCOL: u16 = 0x020c;
/// `loadflags` bit 0: the protected-mode code is loaded at 0x100000.
const LOADED_HIGH: u8 = 1;
/// `xloadflags` bit 0: the kernel has the 64-bit entry at +0x200.
const XLF_KERNEL_64: u16 = 1;
/// `loadflags` bit 0 and `xloadflags` bit 0 have no meaning before these.
const HEADER_END: usize = 0x268;

/// The setup-header fields ipivmm uses, as the image states them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelHeader {
    /// Boot protocol version, e.g. 0x020f.
    pub protocol: u16,
    /// 512-byte setup sectors after the boot sector (0 means 4).
    pub setup_sects: u8,
    /// Bytes the kernel needs from its load address while it decompresses
    /// and sets itself up (`init_size`).
    pub init_size: u32,
    /// Highest address the initrd may end at, inclusive (`initrd_addr_max`).
    pub initrd_addr_max: u32,
    /// Longest command line, bytes without the NUL (`cmdline_size`).
    pub cmdline_size: u32,
    /// The kernel's release as its header names it (e.g. `6.1.0-50-amd64`),
    /// when it has one.
    pub release: Option<String>,
}

impl KernelHeader {
    /// Bytes before the protected-mode kernel: the boot sector and the
    /// setup sectors.
    pub fn setup_bytes(&self) -> usize {
        let sects = if self.setup_sects == 0 {
            4
        } else {
            usize::from(self.setup_sects)
        };
        (sects + 1) * 512
    }
}

/// Why a file is not a kernel ipivmm can boot. Each message names the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BzImageError {
    /// Shorter than a setup header.
    #[error("is {0} bytes, too short for a bzImage (a Linux kernel is megabytes): pass arch/x86/boot/bzImage or /boot/vmlinuz-*")]
    TooShort(usize),
    /// Larger than any kernel.
    #[error("is {0} bytes, over the {MAX_KERNEL_FILE}-byte limit for a kernel image: pass the bzImage, not a vmlinux with debug information")]
    TooLarge(u64),
    /// No "HdrS" or boot flag: not a bzImage (a vmlinux ELF, a gzip...).
    #[error("is not a bzImage (no \"HdrS\" setup header at 0x202{elf}): pass arch/x86/boot/bzImage or /boot/vmlinuz-*")]
    NotBzImage {
        /// ", it is an ELF (a vmlinux?)" when it is one.
        elf: &'static str,
    },
    /// Too old for the 64-bit entry.
    #[error("has setup_header.version = {0}, older than boot protocol 2.12 (Linux 3.8): its 64-bit entry is not announced; boot a newer kernel")]
    OldProtocol(Protocol),
    /// A 32-bit kernel.
    #[error("has setup_header.xloadflags bit 0 (XLF_KERNEL_64) clear: no 64-bit entry, a 32-bit kernel; boot an x86-64 one")]
    Not64Bit,
    /// Not loaded high: a zImage.
    #[error("has setup_header.loadflags bit 0 (LOADED_HIGH) clear: a zImage; boot a bzImage")]
    NotLoadedHigh,
    /// The setup sectors run past the end of the file.
    #[error("has setup_header.setup_sects = {sects} ({bytes} setup bytes) but the file ends before its kernel: a truncated or corrupt image; copy it again or rebuild it")]
    Truncated {
        /// The field as read.
        sects: u8,
        /// The setup bytes it makes.
        bytes: usize,
    },
    /// A field no kernel of this protocol has: a corrupt image.
    #[error("has setup_header.{field} = {value}, which no {protocol} kernel has: a corrupt image; copy it again or rebuild it")]
    Corrupt {
        /// The field.
        field: &'static str,
        /// Its value as read.
        value: u32,
        /// The boot protocol the header states.
        protocol: Protocol,
    },
    /// No initrd can be placed: `initrd_addr_max` ends below the kernel.
    #[error("has setup_header.initrd_addr_max = {max:#x}, below the end of its own kernel ({kernel_end:#x}): no initrd can be placed; a kernel built without initrd support or a corrupt image: boot it without --initrd, or rebuild it (CONFIG_BLK_DEV_INITRD=y)")]
    InitrdAddrMax {
        /// The field as read.
        max: u32,
        /// Where the kernel ends (load address plus `init_size`).
        kernel_end: u64,
    },
}

/// A boot protocol version, shown as `2.12`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocol(pub u16);

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.0 >> 8, self.0 & 0xff)
    }
}

fn u8_at(b: &[u8], at: usize) -> u8 {
    b[at]
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Check `image` as a 64-bit bzImage and read its header.
pub fn check(image: &[u8]) -> Result<KernelHeader, BzImageError> {
    if image.len() as u64 > MAX_KERNEL_FILE {
        return Err(BzImageError::TooLarge(image.len() as u64));
    }
    if image.len() < HEADER_END {
        return Err(BzImageError::TooShort(image.len()));
    }
    if u32_at(image, 0x202) != HDRS_MAGIC || u16_at(image, 0x1fe) != BOOT_FLAG {
        let elf = if image.starts_with(b"\x7fELF") {
            ", it is an ELF (a vmlinux?)"
        } else {
            ""
        };
        return Err(BzImageError::NotBzImage { elf });
    }
    let protocol = u16_at(image, 0x206);
    if protocol < MIN_PROTOCOL {
        return Err(BzImageError::OldProtocol(Protocol(protocol)));
    }
    if u8_at(image, 0x211) & LOADED_HIGH == 0 {
        return Err(BzImageError::NotLoadedHigh);
    }
    if u16_at(image, 0x236) & XLF_KERNEL_64 == 0 {
        return Err(BzImageError::Not64Bit);
    }
    let header = KernelHeader {
        protocol,
        setup_sects: u8_at(image, 0x1f1),
        init_size: u32_at(image, 0x260),
        initrd_addr_max: u32_at(image, 0x22c),
        cmdline_size: u32_at(image, 0x238),
        release: release(image),
    };
    if header.setup_bytes() >= image.len() {
        return Err(BzImageError::Truncated {
            sects: header.setup_sects,
            bytes: header.setup_bytes(),
        });
    }
    // Protocol 2.06+ states cmdline_size, 2.10+ init_size: never 0.
    for (field, value) in [
        ("init_size", header.init_size),
        ("cmdline_size", header.cmdline_size),
    ] {
        if value == 0 {
            return Err(BzImageError::Corrupt {
                field,
                value,
                protocol: Protocol(protocol),
            });
        }
    }
    Ok(header)
}

/// The release the header's `kernel_version` string names: its first
/// word, `6.1.0-50-amd64` of "6.1.0-50-amd64 (debian-kernel@...) #1 SMP ...".
/// The pointer is 0x200 less than the string's offset in the file.
fn release(image: &[u8]) -> Option<String> {
    let at = usize::from(u16_at(image, 0x20e)).checked_add(0x200)?;
    let rest = image.get(at..)?;
    let end = rest.iter().take(256).position(|&b| b == 0 || b == b' ')?;
    let word = std::str::from_utf8(&rest[..end]).ok()?;
    (!word.is_empty() && word.chars().all(|c| c.is_ascii_graphic())).then(|| word.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_image_reads_back() {
        let img = ipivmm_testkit::images::bzimage(&[0xf4; 100], "6.1.0-50-amd64");
        let h = check(&img).unwrap();
        assert_eq!(h.protocol, 0x020f);
        assert_eq!(h.setup_bytes(), 5 * 512);
        assert_eq!(h.cmdline_size, 2047);
        assert_eq!(h.init_size, 0x1000);
        assert_eq!(h.initrd_addr_max, 0x7fff_ffff);
        assert_eq!(h.release.as_deref(), Some("6.1.0-50-amd64"));
    }

    #[test]
    fn what_is_not_a_64_bit_bzimage_is_named() {
        let good = ipivmm_testkit::images::bzimage(&[0xf4; 100], "6.1.0");
        assert_eq!(check(&good[..0x200]), Err(BzImageError::TooShort(0x200)));
        let mut elf = good.clone();
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[0x202] = 0;
        let e = check(&elf).unwrap_err();
        assert!(e.to_string().contains("it is an ELF (a vmlinux?)"), "{e}");
        let mut old = good.clone();
        old[0x206..0x208].copy_from_slice(&0x020bu16.to_le_bytes());
        assert_eq!(
            check(&old),
            Err(BzImageError::OldProtocol(Protocol(0x020b)))
        );
        assert!(check(&old).unwrap_err().to_string().contains("2.11"));
        let mut k32 = good.clone();
        k32[0x236] = 0;
        assert_eq!(check(&k32), Err(BzImageError::Not64Bit));
        let mut low = good.clone();
        low[0x211] = 0;
        assert_eq!(check(&low), Err(BzImageError::NotLoadedHigh));
        let mut cut = good.clone();
        cut[0x1f1] = 200;
        assert_eq!(
            check(&cut),
            Err(BzImageError::Truncated {
                sects: 200,
                bytes: 201 * 512
            })
        );
    }

    /// Issue 47 (6.5): each header check names the field at fault and
    /// the fix that fits it (a corrupt image, not "raise --memory").
    #[test]
    fn each_header_error_names_its_field() {
        let good = ipivmm_testkit::images::bzimage(&[0xf4; 100], "6.1.0");
        let field = |at: usize, bytes: &[u8]| {
            let mut img = good.clone();
            img[at..at + bytes.len()].copy_from_slice(bytes);
            check(&img).unwrap_err().to_string()
        };
        let e = field(0x260, &[0; 4]);
        assert!(
            e.contains("setup_header.init_size = 0") && e.contains("corrupt image"),
            "{e}"
        );
        assert!(!e.contains("--memory"), "{e}");
        let e = field(0x238, &[0; 4]);
        assert!(e.contains("setup_header.cmdline_size = 0"), "{e}");
        let e = field(0x206, &0x020bu16.to_le_bytes());
        assert!(e.contains("setup_header.version = 2.11"), "{e}");
        let e = field(0x236, &[0, 0]);
        assert!(e.contains("setup_header.xloadflags bit 0"), "{e}");
        let e = field(0x211, &[0]);
        assert!(e.contains("setup_header.loadflags bit 0"), "{e}");
        let e = field(0x1f1, &[200]);
        assert!(e.contains("setup_header.setup_sects = 200"), "{e}");
        let e = BzImageError::InitrdAddrMax {
            max: 0,
            kernel_end: 0x20_0000,
        }
        .to_string();
        assert!(e.contains("setup_header.initrd_addr_max = 0x0"), "{e}");
        assert!(e.contains("without initrd support"), "{e}");
        assert!(!e.contains("raise --memory"), "{e}");
    }

    #[test]
    fn the_release_is_read_without_trusting_the_pointer() {
        let mut img = ipivmm_testkit::images::bzimage(&[0xf4; 100], "6.12.117+deb13-amd64");
        assert_eq!(
            check(&img).unwrap().release.as_deref(),
            Some("6.12.117+deb13-amd64")
        );
        // A pointer past the end, or a string of control bytes: no release.
        img[0x20e..0x210].copy_from_slice(&0xfff0u16.to_le_bytes());
        assert_eq!(check(&img).unwrap().release, None);
        img[0x20e..0x210].copy_from_slice(&0x200u16.to_le_bytes());
        img[0x400] = 0x1b;
        assert_eq!(check(&img).unwrap().release, None);
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        let img = ipivmm_testkit::images::bzimage(&[0xf4; 100], "6.1.0");
        for n in 0..img.len() {
            let _ = check(&img[..n]);
        }
    }
}
