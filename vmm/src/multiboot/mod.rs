//! A Multiboot (v1) kernel (`ipivmm run --kernel FILE` when FILE has a
//! multiboot header; docs/kvm-unit-tests.md): kvm-unit-tests' x86 `.flat`
//! tests, or any kernel of that format. All KVM-free here: the header
//! (`header`), where the image goes (`image`), the information
//! structure at EBX (`info`) and the entry state (`entry`: 32-bit
//! protected mode, paging off) and the console lines that end its tests
//! (`test_lines`). The VM is built by `vm::multiboot`; the machine the
//! tests read (fw_cfg, the exit port) is in `ipivmm_devices`.
pub(crate) mod entry;
pub(crate) mod header;
pub(crate) mod image;
pub(crate) mod info;
pub(crate) mod test_lines;

use std::path::PathBuf;

/// Largest kernel file read.
pub(crate) const MAX_KERNEL_FILE: u64 = 64 << 20;

/// Why a multiboot kernel cannot be booted. Each message names the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MultibootError {
    /// No magic with a valid checksum in the first 8 KiB.
    #[error("has no multiboot header (magic 0x1BADB002 with its checksum, 4-byte aligned in the first 8 KiB)")]
    NoHeader,
    /// A flag bit 0-15 ipivmm does not implement.
    #[error("asks for multiboot header flags {0:#x}, which ipivmm does not implement (it knows bits 0, 1 and 16)")]
    UnknownFlags(u32),
    /// Flag bit 2.
    #[error("asks for a video mode (multiboot flag bit 2); ipivmm has no display: build the kernel without it")]
    VideoMode,
    /// A field points past the file.
    #[error("is cut short: {0} lie past the end of the file")]
    Truncated(&'static str),
    /// Not an ELF32 image, and no address fields.
    #[error("is not a loadable ELF32 i386 image: {0}")]
    NotElf32(String),
    /// An address is unusable.
    #[error("cannot be placed: {0}")]
    Placement(String),
    /// The kernel (or its info block) does not fit in RAM.
    #[error("needs RAM up to {end:#x} (its bss and the multiboot info after it) and --memory is {mem_mib} MiB: raise --memory")]
    DoesNotFit {
        /// One past the highest byte needed.
        end: u64,
        /// RAM, MiB.
        mem_mib: u64,
    },
    /// The command line.
    #[error("--append: {0}")]
    Cmdline(String),
}

/// A multiboot kernel to boot (the [`crate::config::PayloadSource::Multiboot`] payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultibootGuest {
    /// The kernel file.
    pub kernel: PathBuf,
    /// Its arguments (`--append`): kvm-unit-tests' test names.
    pub cmdline: String,
}

impl MultibootGuest {
    /// Whether the file at `path` starts like a multiboot kernel (its first
    /// 8 KiB hold a header); false when it cannot be read (the loader that
    /// reads it then says why).
    pub fn is_multiboot(path: &std::path::Path) -> bool {
        use std::io::Read;
        let Ok(f) = std::fs::File::open(path) else {
            return false;
        };
        let mut head = Vec::with_capacity(header::SEARCH);
        f.take(header::SEARCH as u64)
            .read_to_end(&mut head)
            .is_ok_and(|_| header::is_multiboot(&head))
    }

    /// The command line the kernel gets: its file name, then `--append`,
    /// as QEMU (`-kernel F -append A` gives "F A") and GRUB pass it;
    /// kvm-unit-tests takes the first word as the program's name and the
    /// rest as its arguments. A byte of the name that is not printable
    /// ASCII becomes `?`.
    pub fn full_cmdline(&self) -> String {
        let name: String = self
            .kernel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if (' '..='~').contains(&c) && c != ' ' {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        if self.cmdline.is_empty() {
            name
        } else {
            format!("{name} {}", self.cmdline)
        }
    }

    /// What the results call it: `multiboot:` and the file name.
    pub fn label(&self) -> String {
        format!(
            "multiboot:{}",
            self.kernel.file_name().map_or_else(
                || self.kernel.display().to_string(),
                |n| n.to_string_lossy().into_owned()
            )
        )
    }
}

/// A read and checked multiboot kernel, ready to be copied into RAM.
#[derive(Clone, Debug)]
pub(crate) struct MultibootImage {
    /// The file.
    pub bytes: Vec<u8>,
    /// Where its pieces go.
    pub layout: image::Layout,
    /// The information block.
    pub info: info::InfoBlock,
}

/// Check `bytes` (the kernel file) for a VM of `mem_bytes` with `cmdline`.
pub(crate) fn check(
    bytes: Vec<u8>,
    mem_bytes: u64,
    cmdline: &str,
) -> Result<MultibootImage, MultibootError> {
    let h = header::parse(&bytes)?;
    let layout = image::layout(&bytes, &h, mem_bytes)?;
    let info = info::build(layout.end, mem_bytes, cmdline)?;
    Ok(MultibootImage {
        bytes,
        layout,
        info,
    })
}

/// Read `guest`'s kernel and check it (one line naming the file on error).
pub(crate) fn load(guest: &MultibootGuest, mem_bytes: u64) -> Result<MultibootImage, String> {
    let path = guest.kernel.display();
    let bytes = crate::inputs::read_bytes(&guest.kernel, MAX_KERNEL_FILE)
        .map_err(|e| format!("--kernel {path}: {e}"))?;
    check(bytes, mem_bytes, &guest.full_cmdline()).map_err(|e| match e {
        MultibootError::Cmdline(_) => e.to_string(),
        e => format!("--kernel {path} {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lays_out_the_kernel_and_puts_the_info_after_it() {
        let elf = ipivmm_testkit::images::multiboot_elf32(&[0xf4; 244], 0x20_0000, 0x3000);
        let img = check(elf.clone(), 32 << 20, "hello world").unwrap();
        assert_eq!(img.layout.entry, 0x20_0000);
        assert_eq!(img.info.at, 0x20_4000);
        let e = check(elf, 0x20_0800, "").unwrap_err().to_string();
        assert!(e.contains("raise --memory"), "{e}");
        let e = check(vec![0u8; 100], 32 << 20, "").unwrap_err().to_string();
        assert!(e.contains("no multiboot header"), "{e}");
    }

    #[test]
    fn files_are_told_apart_by_their_first_8k() {
        let dir = std::env::temp_dir().join(format!("ipivmm-mb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mb = dir.join("k.flat");
        std::fs::write(
            &mb,
            ipivmm_testkit::images::multiboot_elf32(&[0xf4; 52], 0x20_0000, 0),
        )
        .unwrap();
        assert!(MultibootGuest::is_multiboot(&mb));
        let bz = dir.join("bz");
        std::fs::write(&bz, ipivmm_testkit::images::bzimage(&[0xf4; 64], "6.1")).unwrap();
        assert!(!MultibootGuest::is_multiboot(&bz));
        assert!(!MultibootGuest::is_multiboot(&dir.join("missing")));
        let g = MultibootGuest {
            kernel: mb,
            cmdline: "ipi".into(),
        };
        assert_eq!(g.label(), "multiboot:k.flat");
        assert_eq!(
            g.full_cmdline(),
            "k.flat ipi",
            "argv[0] first, as QEMU passes it"
        );
        assert_eq!(load(&g, 32 << 20).unwrap().layout.entry, 0x20_0000);
        let e = load(
            &MultibootGuest {
                kernel: dir.join("missing"),
                cmdline: String::new(),
            },
            32 << 20,
        )
        .unwrap_err();
        assert!(e.starts_with("--kernel ") && e.contains("missing"), "{e}");
    }
}
