//! A Linux guest (`ipivmm run --kernel BZIMAGE`): what it needs besides
//! the payload's machine, all KVM-free here: the bzImage's header
//! (`bzimage`), where things go and the e820 map (`layout`), the zero
//! page (`boot_params`), the ACPI tables (`acpi`) and the command line
//! (`cmdline`). The VM itself is built by `vm::linux`; the guest side
//! (init, the phase tool, the workloads) is `guest-linux/` (docs/linux-guest.md).
//!
//! A Linux guest runs where KVM's LAPIC is (`--irqchip kernel` or `split`),
//! in xAPIC or x2APIC mode, with APICv/AVIC as the host has it or
//! inhibited, PV IPIs advertised or not; not with ipivmm's own LAPIC model,
//! and not on kvm_pvm, where no kernel boots in useful time ([`LinuxGuest::check_mode`]).
pub(crate) mod acpi;
pub(crate) mod boot_params;
pub(crate) mod bzimage;
pub(crate) mod cmdline;
pub(crate) mod layout;

use crate::mode::Irqchip;
use std::path::{Path, PathBuf};

use crate::mode::LinuxWorkload;

/// A Linux guest to boot (the [`crate::config::PayloadSource::Linux`] payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinuxGuest {
    /// The bzImage.
    pub kernel: PathBuf,
    /// The initramfs (ipivmm's, `cargo xtask linux-initrd`, or yours).
    pub initrd: Option<PathBuf>,
    /// Kernel command-line text appended to ipivmm's (`cmdline::build`).
    pub cmdline: String,
    /// The workload ipivmm's init runs; None: whatever the initramfs does.
    pub workload: Option<LinuxWorkload>,
    /// Boot even where Linux is known not to boot (kvm_pvm): for a stub
    /// kernel in tests; a real kernel would run into the timeout there.
    pub allow_software_kvm: bool,
}

impl LinuxGuest {
    /// RAM a Linux guest gets when none is asked for.
    pub const DEFAULT_MEMORY_BYTES: u64 = layout::DEFAULT_LINUX_MEM;
    /// Smallest RAM a Linux guest gets (the kernel's own `init_size` and
    /// the initrd are checked on top).
    pub const MIN_MEMORY_BYTES: u64 = layout::MIN_LINUX_MEM;

    /// A guest of `kernel`, nothing else.
    pub fn new(kernel: impl Into<PathBuf>) -> Self {
        Self {
            kernel: kernel.into(),
            initrd: None,
            cmdline: String::new(),
            workload: None,
            allow_software_kvm: false,
        }
    }

    /// What the results call the guest: `linux:WORKLOAD`, or `linux:` and
    /// the kernel's file name.
    pub fn label(&self) -> String {
        match self.workload {
            Some(w) => w.label(),
            None => format!(
                "{}{}",
                LinuxWorkload::PREFIX,
                self.kernel.file_name().map_or_else(
                    || self.kernel.display().to_string(),
                    |n| n.to_string_lossy().into_owned()
                )
            ),
        }
    }

    /// Whether a Linux guest can run in this mode: the refusals that need
    /// neither a file nor the host.
    pub fn check_mode(&self, irqchip: Irqchip, vcpus: usize) -> Result<(), LinuxError> {
        if irqchip == Irqchip::User {
            return Err(LinuxError::Mode(
                "--irqchip user with --kernel: Linux needs KVM's LAPIC (its timer, INIT and start-up IPIs, the IOAPIC); ipivmm's LAPIC model has none of them: use --irqchip kernel or split".into(),
            ));
        }
        if let Some(w) = self.workload {
            if vcpus < w.min_vcpus() {
                return Err(LinuxError::Mode(format!(
                    "--workload {} needs at least {} vCPUs (--vcpus {vcpus}): an IPI needs a target",
                    w.label(),
                    w.min_vcpus()
                )));
            }
        }
        Ok(())
    }

    /// Whether this host boots Linux: not kvm_pvm (`software_kvm`), unless
    /// the guest is a stub that asks for it.
    pub fn check_backend(&self, software_kvm: bool) -> Result<(), LinuxError> {
        if software_kvm && !self.allow_software_kvm {
            return Err(LinuxError::SoftwareKvm);
        }
        Ok(())
    }

    /// Reads and checks the guest's files (kernel, initrd) as a run does,
    /// at the default RAM: the user's mistakes before any VM.
    pub fn check_files(&self) -> Result<(), LinuxError> {
        load(self, Self::DEFAULT_MEMORY_BYTES, String::new()).map(drop)
    }
}

/// Largest initrd accepted (it must also fit in guest RAM).
pub(crate) const MAX_INITRD_FILE: u64 = 1 << 30;

/// Why a Linux guest cannot run. Each message names the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LinuxError {
    /// The kernel file cannot be read.
    #[error("--kernel {path}: {problem}")]
    KernelRead {
        /// The path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// Not a kernel ipivmm can boot.
    #[error("--kernel {path} {problem}")]
    Kernel {
        /// The path.
        path: String,
        /// What is wrong with it.
        problem: bzimage::BzImageError,
    },
    /// The initrd cannot be read.
    #[error("--initrd {path}: {problem}")]
    InitrdRead {
        /// The path.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The kernel and initrd do not fit in RAM.
    #[error("--memory {mem_mib} MiB (VmConfig::memory_bytes) cannot hold the kernel ({kernel_mib} MiB while it unpacks) and the initrd ({initrd_mib} MiB): raise --memory{or_smaller}")]
    DoesNotFit {
        /// RAM, MiB.
        mem_mib: u64,
        /// The kernel's init_size, MiB (rounded up).
        kernel_mib: u64,
        /// The initrd, MiB (rounded up).
        initrd_mib: u64,
        /// " or pass a smaller --initrd" when there is one.
        or_smaller: &'static str,
    },
    /// The initrd does not fit below the kernel's `initrd_addr_max`
    /// (more RAM would not help).
    #[error("--initrd {path} ({initrd_mib} MiB) does not fit between the kernel's end ({kernel_end:#x}) and its setup_header.initrd_addr_max ({max:#x}); more --memory does not help: pass a smaller --initrd")]
    InitrdOverMax {
        /// The path.
        path: String,
        /// The initrd, MiB (rounded up).
        initrd_mib: u64,
        /// Where the kernel ends.
        kernel_end: u64,
        /// The header's `initrd_addr_max`.
        max: u32,
    },
    /// The command line is too long or not text.
    #[error(transparent)]
    Cmdline(#[from] cmdline::CmdlineError),
    /// The mode cannot boot Linux.
    #[error("{0}")]
    Mode(String),
    /// This host's KVM does not boot Linux.
    #[error("--kernel: this host's KVM is kvm_pvm (software KVM), where a Linux kernel does not boot in useful time (measured: no output in 600 s); boot it in the lab, on a real kvm_amd or kvm_intel: cargo xtask lab linux (docs/linux-guest.md)")]
    SoftwareKvm,
    /// The ACPI tables do not fit.
    #[error(transparent)]
    Acpi(#[from] acpi::TooLarge),
}

/// A checked Linux guest: the kernel and initrd bytes, the
/// command line, read once (stage 0) and trusted by the build.
#[derive(Clone, Debug)]
pub(crate) struct LinuxImage {
    /// The bzImage.
    pub kernel: Vec<u8>,
    /// The initrd and where it goes.
    pub initrd: Option<(Vec<u8>, u64)>,
    /// The whole command line.
    pub cmdline: String,
}

fn read(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    crate::inputs::read_bytes(path, max)
}

/// Read and check the guest's files for a VM of `mem_bytes` of RAM, with
/// `cmdline` as the command line ipivmm built (`cmdline::build`).
pub(crate) fn load(
    guest: &LinuxGuest,
    mem_bytes: u64,
    cmdline: String,
) -> Result<LinuxImage, LinuxError> {
    let kpath = guest.kernel.display().to_string();
    let kernel = read(&guest.kernel, bzimage::MAX_KERNEL_FILE).map_err(|problem| {
        LinuxError::KernelRead {
            path: kpath.clone(),
            problem,
        }
    })?;
    let header = bzimage::check(&kernel).map_err(|problem| LinuxError::Kernel {
        path: kpath.clone(),
        problem,
    })?;
    cmdline::check(&cmdline, header.cmdline_size)?;
    let kernel_end = layout::KERNEL_START + u64::from(header.init_size);
    let mib = |b: u64| b.div_ceil(1 << 20);
    let does_not_fit = |initrd: u64| LinuxError::DoesNotFit {
        mem_mib: mem_bytes >> 20,
        kernel_mib: mib(u64::from(header.init_size)),
        initrd_mib: mib(initrd),
        or_smaller: if guest.initrd.is_some() {
            " or pass a smaller --initrd"
        } else {
            ""
        },
    };
    if kernel_end > mem_bytes {
        return Err(does_not_fit(0));
    }
    let initrd = match &guest.initrd {
        None => None,
        Some(p) => {
            let path = p.display().to_string();
            let max = header.initrd_addr_max;
            if u64::from(max) < kernel_end.next_multiple_of(0x1000) {
                return Err(LinuxError::Kernel {
                    path: kpath,
                    problem: bzimage::BzImageError::InitrdAddrMax { max, kernel_end },
                });
            }
            // Where `len` bytes go, or why they do not fit: RAM or the
            // kernel's own limit, whichever binds.
            let place = |len: u64| {
                layout::initrd_addr(mem_bytes, max, kernel_end, len).ok_or_else(|| {
                    if u64::from(max) < mem_bytes {
                        LinuxError::InitrdOverMax {
                            path: path.clone(),
                            initrd_mib: mib(len),
                            kernel_end,
                            max,
                        }
                    } else {
                        does_not_fit(len)
                    }
                })
            };
            // Its size first: an initrd that cannot fit is not read (a
            // 1000 MB one used to be, whole, before any refusal).
            if let Ok(meta) = std::fs::metadata(p) {
                if meta.is_file() {
                    place(meta.len())?;
                }
            }
            let bytes = read(p, MAX_INITRD_FILE).map_err(|problem| LinuxError::InitrdRead {
                path: path.clone(),
                problem,
            })?;
            let at = place(bytes.len() as u64)?;
            Some((bytes, at))
        }
    };
    Ok(LinuxImage {
        kernel,
        initrd,
        cmdline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_workloads_are_named_with_their_prefix() {
        assert_eq!(
            LinuxWorkload::parse("linux:ipi-broadcast"),
            Some(LinuxWorkload::IpiBroadcast)
        );
        assert_eq!(LinuxWorkload::parse("ipi-broadcast"), None);
        assert_eq!(LinuxWorkload::parse("linux:nope"), None);
        for w in LinuxWorkload::ALL {
            assert_eq!(LinuxWorkload::parse(&w.label()), Some(*w));
        }
        let mut g = LinuxGuest::new("/boot/vmlinuz-6.1.0-50-amd64");
        assert_eq!(g.label(), "linux:vmlinuz-6.1.0-50-amd64");
        g.workload = Some(LinuxWorkload::TlbShootdown);
        assert_eq!(g.label(), "linux:tlb-shootdown");
    }

    #[test]
    fn impossible_modes_are_refused_with_the_reason() {
        let g = LinuxGuest::new("k");
        let e = g.check_mode(Irqchip::User, 2).unwrap_err().to_string();
        assert!(e.contains("use --irqchip kernel or split"), "{e}");
        let e = g.check_backend(true).unwrap_err().to_string();
        assert!(
            e.contains("kvm_pvm") && e.contains("cargo xtask lab linux"),
            "{e}"
        );
        assert!(g.check_mode(Irqchip::Split, 2).is_ok());
        assert!(g.check_backend(false).is_ok());
        let stub = LinuxGuest {
            allow_software_kvm: true,
            ..g.clone()
        };
        assert!(stub.check_backend(true).is_ok());
        let one = LinuxGuest {
            workload: Some(LinuxWorkload::IpiUnicast),
            ..g
        };
        let e = one.check_mode(Irqchip::Kernel, 1).unwrap_err().to_string();
        assert!(e.contains("at least 2 vCPUs"), "{e}");
    }

    fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ipivmm-linux-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn load_reads_checks_and_places_the_initrd() {
        let k = tmp(
            "bz",
            &ipivmm_testkit::images::bzimage(&[0xf4; 64], "6.1.0-test"),
        );
        let i = tmp("initrd", &[7u8; 10_000]);
        let mut g = LinuxGuest::new(&k);
        g.initrd = Some(i);
        let img = load(&g, 64 << 20, "console=ttyS0".into()).unwrap();
        let (bytes, at) = img.initrd.unwrap();
        assert_eq!(bytes.len(), 10_000);
        assert_eq!(at % 4096, 0);
        assert!(at + 10_000 <= 64 << 20);
        assert_eq!(
            bzimage::check(&img.kernel).unwrap().release.as_deref(),
            Some("6.1.0-test")
        );
        // Missing, malformed, too long a command line: one line each.
        let e = load(
            &LinuxGuest::new("/nonexistent/bzImage"),
            64 << 20,
            String::new(),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("--kernel /nonexistent/bzImage: "),
            "{e}"
        );
        let junk = tmp("junk", &[0u8; 4096]);
        let e = load(&LinuxGuest::new(&junk), 64 << 20, String::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a bzImage") && !e.contains('\n'), "{e}");
        let e = load(&g, 64 << 20, "x".repeat(3000))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2047"), "{e}");
        let mut big = g.clone();
        big.initrd = Some(tmp("big", &vec![0u8; 3 << 20]));
        let e = load(&big, 2 << 20, String::new()).unwrap_err().to_string();
        assert!(e.contains("raise --memory"), "{e}");
    }

    /// Issue 47 (6.4): a 1000 MB initrd against 256 MiB of RAM is refused
    /// from its size, before it is read (it used to be read whole first);
    /// the error names both fixes. A sparse file: no disk used.
    #[test]
    fn an_initrd_larger_than_memory_is_refused_before_it_is_read() {
        let k = tmp(
            "bz-big",
            &ipivmm_testkit::images::bzimage(&[0xf4; 64], "6.1.0-test"),
        );
        let i = tmp("initrd-1000m", &[]);
        std::fs::File::options()
            .write(true)
            .open(&i)
            .unwrap()
            .set_len(1000 << 20)
            .unwrap();
        let mut g = LinuxGuest::new(&k);
        g.initrd = Some(i.clone());
        let t = std::time::Instant::now();
        let e = load(&g, 256 << 20, String::new()).unwrap_err().to_string();
        let took = t.elapsed();
        let _ = std::fs::remove_file(&i);
        assert!(
            e.contains("raise --memory or pass a smaller --initrd") && e.contains("1000 MiB"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        // Reading 1000 MB takes far longer than a stat.
        assert!(took < std::time::Duration::from_millis(200), "{took:?}");
    }

    /// Issue 47 (6.5): initrd_addr_max 0 is the kernel's field at fault,
    /// not the guest's memory.
    #[test]
    fn an_initrd_addr_max_below_the_kernel_names_the_field() {
        let mut img = ipivmm_testkit::images::bzimage(&[0xf4; 64], "6.1.0-test");
        img[0x22c..0x230].copy_from_slice(&0u32.to_le_bytes());
        let k = tmp("bz-nomax", &img);
        let mut g = LinuxGuest::new(&k);
        g.initrd = Some(tmp("initrd-small", &[7u8; 4096]));
        let e = load(&g, 256 << 20, String::new()).unwrap_err().to_string();
        assert!(e.contains("setup_header.initrd_addr_max = 0x0"), "{e}");
        assert!(!e.contains("raise --memory"), "{e}");
        // Without --initrd the field does not matter.
        g.initrd = None;
        assert!(load(&g, 256 << 20, String::new()).is_ok());
        // A limit below RAM that the initrd overflows: not "raise --memory".
        img[0x22c..0x230].copy_from_slice(&((16u32 << 20) - 1).to_le_bytes());
        let k = tmp("bz-lowmax", &img);
        let mut g = LinuxGuest::new(&k);
        g.initrd = Some(tmp("initrd-20m", &vec![0u8; 20 << 20]));
        let e = load(&g, 256 << 20, String::new()).unwrap_err().to_string();
        assert!(
            e.contains("initrd_addr_max") && e.contains("smaller --initrd"),
            "{e}"
        );
        assert!(!e.contains("raise --memory"), "{e}");
    }
}
