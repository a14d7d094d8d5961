//! The Multiboot information structure a kernel finds at EBX (3.3): the
//! memory sizes, the memory map, the command line (`--append`) and the boot
//! loader's name, in one block ipivmm places on the page after the kernel
//! (as QEMU does: kvm-unit-tests reads it before it allocates from there).
use super::MultibootError;

/// Flag bit 0: mem_lower and mem_upper are valid.
pub const HAS_MEMORY: u32 = 1 << 0;
/// Flag bit 2: cmdline is valid.
pub const HAS_CMDLINE: u32 = 1 << 2;
/// Flag bit 3: mods_count and mods_addr are valid (no modules: 0).
pub const HAS_MODS: u32 = 1 << 3;
/// Flag bit 6: mmap_length and mmap_addr are valid.
pub const HAS_MMAP: u32 = 1 << 6;
/// Flag bit 9: boot_loader_name is valid.
pub const HAS_LOADER_NAME: u32 = 1 << 9;
/// Longest command line accepted (without its NUL).
pub const MAX_CMDLINE: usize = 4095;
/// Conventional memory reported below the EBDA (KiB).
pub const MEM_LOWER_KIB: u32 = 640;
/// The name in boot_loader_name.
pub const LOADER_NAME: &str = "ipivmm";

const MMAP_AT: usize = 0x80;
const MMAP_ENTRY: usize = 24;
const AVAILABLE: u32 = 1;

/// The block to copy to guest address `at` (page-aligned, below 4 GiB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoBlock {
    /// Where it goes: EBX at entry.
    pub at: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Check a command line: printable ASCII, at most [`MAX_CMDLINE`] bytes.
pub fn check_cmdline(cmdline: &str) -> Result<(), MultibootError> {
    if cmdline.len() > MAX_CMDLINE {
        return Err(MultibootError::Cmdline(format!(
            "{} bytes, at most {MAX_CMDLINE}",
            cmdline.len()
        )));
    }
    if let Some(c) = cmdline.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(MultibootError::Cmdline(format!(
            "{c:?} is not printable ASCII"
        )));
    }
    Ok(())
}

/// The information block for a kernel whose image ends at `kernel_end`,
/// in `mem_bytes` of RAM, with `cmdline` (checked by [`check_cmdline`]).
pub fn build(kernel_end: u64, mem_bytes: u64, cmdline: &str) -> Result<InfoBlock, MultibootError> {
    check_cmdline(cmdline)?;
    let at = kernel_end.div_ceil(4096) * 4096;
    let ram = |lo: u64, hi: u64| (lo, hi.saturating_sub(lo));
    let regions = [
        ram(0, u64::from(MEM_LOWER_KIB) << 10),
        ram(super::image::MIN_LOAD, mem_bytes),
    ];
    let cmdline_at = MMAP_AT + regions.len() * MMAP_ENTRY;
    let name_at = cmdline_at + cmdline.len() + 1;
    let len = name_at + LOADER_NAME.len() + 1;
    let end = at + len as u64;
    if end > mem_bytes || end > 1 << 32 {
        return Err(MultibootError::DoesNotFit {
            end,
            mem_mib: mem_bytes >> 20,
        });
    }
    let mut b = vec![0u8; len];
    let mut put = |off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    let addr = |off: usize| (at + off as u64) as u32;
    let upper_kib = (mem_bytes.min(1 << 32) - super::image::MIN_LOAD) >> 10;
    put(
        0,
        HAS_MEMORY | HAS_CMDLINE | HAS_MODS | HAS_MMAP | HAS_LOADER_NAME,
    );
    put(4, MEM_LOWER_KIB);
    put(8, upper_kib as u32);
    put(16, addr(cmdline_at));
    put(20, 0); // mods_count
    put(24, 0); // mods_addr
    put(44, (regions.len() * MMAP_ENTRY) as u32);
    put(48, addr(MMAP_AT));
    put(64, addr(name_at));
    for (i, (base, length)) in regions.iter().enumerate() {
        let e = MMAP_AT + i * MMAP_ENTRY;
        // `size` counts the entry without itself: 20.
        b[e..e + 4].copy_from_slice(&((MMAP_ENTRY - 4) as u32).to_le_bytes());
        b[e + 4..e + 12].copy_from_slice(&base.to_le_bytes());
        b[e + 12..e + 20].copy_from_slice(&length.to_le_bytes());
        b[e + 20..e + 24].copy_from_slice(&AVAILABLE.to_le_bytes());
    }
    b[cmdline_at..cmdline_at + cmdline.len()].copy_from_slice(cmdline.as_bytes());
    b[name_at..name_at + LOADER_NAME.len()].copy_from_slice(LOADER_NAME.as_bytes());
    Ok(InfoBlock { at, bytes: b })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn cstr(b: &InfoBlock, addr: u32) -> &str {
        let off = (u64::from(addr) - b.at) as usize;
        let end = off + b.bytes[off..].iter().position(|&c| c == 0).unwrap();
        std::str::from_utf8(&b.bytes[off..end]).unwrap()
    }

    #[test]
    fn the_block_holds_memory_sizes_the_map_and_the_command_line() {
        let b = build(0x40_1040, 256 << 20, "ipi").unwrap();
        assert_eq!(b.at, 0x40_2000, "the page after the kernel");
        let f = u32_at(&b.bytes, 0);
        assert_eq!(
            f,
            HAS_MEMORY | HAS_CMDLINE | HAS_MODS | HAS_MMAP | HAS_LOADER_NAME
        );
        assert_eq!(u32_at(&b.bytes, 4), 640);
        assert_eq!(u32_at(&b.bytes, 8), 255 * 1024, "KiB above 1 MiB");
        assert_eq!(cstr(&b, u32_at(&b.bytes, 16)), "ipi");
        assert_eq!(cstr(&b, u32_at(&b.bytes, 64)), "ipivmm");
        assert_eq!(u32_at(&b.bytes, 20), 0, "no modules");
        // The map, walked as kvm-unit-tests walks it (size + 4 a step).
        let (len, mut at) = (u32_at(&b.bytes, 44), u32_at(&b.bytes, 48));
        let stop = at + len;
        let mut seen = Vec::new();
        while at < stop {
            let off = (u64::from(at) - b.at) as usize;
            let base = u64::from_le_bytes(b.bytes[off + 4..off + 12].try_into().unwrap());
            let length = u64::from_le_bytes(b.bytes[off + 12..off + 20].try_into().unwrap());
            seen.push((base, length, u32_at(&b.bytes, off + 20)));
            at += u32_at(&b.bytes, off) + 4;
        }
        assert_eq!(
            seen,
            vec![(0, 640 << 10, 1), (1 << 20, (256 << 20) - (1 << 20), 1)]
        );
    }

    #[test]
    fn command_lines_and_ram_are_bounded() {
        let e = build(0x40_0000, 256 << 20, &"x".repeat(5000))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--append") && e.contains("4095"), "{e}");
        let e = build(0x40_0000, 256 << 20, "a\nb").unwrap_err().to_string();
        assert!(e.contains("printable"), "{e}");
        // The kernel ends at the end of RAM: no room for the block.
        let e = build(64 << 20, 64 << 20, "").unwrap_err().to_string();
        assert!(e.contains("raise --memory"), "{e}");
        assert!(build(0x40_0000, 64 << 20, "").is_ok());
    }
}
