//! The flags of `run` for a Linux guest (`--kernel`, `--initrd`,
//! `--cmdline`) and `--workload`, which names a built-in payload workload
//! or, with `--kernel`, one of ipivmm's guest initramfs (`linux:NAME`).
//! A `--kernel` file with a multiboot header (kvm-unit-tests' x86 `.flat`
//! tests) boots as a multiboot kernel, its command line `--append`
//! (docs/kvm-unit-tests.md).
use clap::Args;
use ipivmm::analysis::mode::LinuxWorkload;
use ipivmm::linux::LinuxGuest;
use ipivmm::multiboot::MultibootGuest;
use ipivmm::{PayloadSource, VmConfig};
use ipivmm_analysis::mode::Workload;
use std::path::PathBuf;

/// What `--workload` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadArg {
    /// A workload of the built-in payload.
    Payload(Workload),
    /// A workload of ipivmm's Linux guest (`linux:NAME`).
    Linux(LinuxWorkload),
}

impl From<Workload> for WorkloadArg {
    fn from(w: Workload) -> Self {
        WorkloadArg::Payload(w)
    }
}

impl From<LinuxWorkload> for WorkloadArg {
    fn from(w: LinuxWorkload) -> Self {
        WorkloadArg::Linux(w)
    }
}

/// `--workload NAME`: a built-in workload, or `linux:NAME`.
pub fn parse_workload(s: &str) -> Result<WorkloadArg, String> {
    let names = |all: Vec<String>| all.join(", ");
    if s.starts_with(LinuxWorkload::PREFIX) {
        return LinuxWorkload::parse(s)
            .map(WorkloadArg::Linux)
            .ok_or_else(|| {
                format!(
                    "'{s}' is no Linux workload; one of {}",
                    names(LinuxWorkload::ALL.iter().map(|w| w.label()).collect())
                )
            });
    }
    s.parse().map(WorkloadArg::Payload).map_err(|_| {
        format!(
            "'{s}' is no workload; one of {} (the built-in payload's), or with --kernel {}",
            names(Workload::ALL.iter().map(|w| w.name().to_string()).collect()),
            names(LinuxWorkload::ALL.iter().map(|w| w.label()).collect())
        )
    })
}

/// The error of a Linux workload given without `--kernel`: one line naming the flag.
pub fn needs_kernel(w: LinuxWorkload) -> String {
    format!(
        "--workload {}: a Linux guest's workload needs --kernel BZIMAGE (and ipivmm's --initrd: docs/linux-guest.md)",
        w.label()
    )
}

/// Flags of `run` (and `sweep`) for a Linux guest.
#[derive(Args, Debug, Default)]
pub struct LinuxArgs {
    /// Boot this Linux bzImage instead of a payload (its 64-bit entry; ACPI tables, e820, COM1, power-off by ACPI S5): docs/linux-guest.md. Needs KVM's LAPIC (--irqchip kernel or split) and a hardware KVM (not kvm_pvm). A file with a multiboot header (a kvm-unit-tests x86 .flat test) boots as a multiboot kernel instead, with fw_cfg and the isa-debug-exit port: docs/kvm-unit-tests.md.
    #[arg(long, value_name = "BZIMAGE")]
    pub kernel: Option<PathBuf>,
    /// The initramfs of the --kernel guest (ipivmm's: `cargo xtask linux-initrd`).
    #[arg(long, value_name = "FILE", requires = "kernel")]
    pub initrd: Option<PathBuf>,
    /// Kernel command-line text after ipivmm's own (console, ACPI, the workload's ipivmm.* arguments).
    #[arg(
        long,
        value_name = "TEXT",
        requires = "kernel",
        allow_hyphen_values = true
    )]
    pub cmdline: Option<String>,
    /// The command line of a multiboot --kernel (kvm-unit-tests' test arguments: `--append ipi`).
    #[arg(
        long,
        value_name = "TEXT",
        requires = "kernel",
        allow_hyphen_values = true
    )]
    pub append: Option<String>,
}

impl LinuxArgs {
    /// The paths the run reads (outputs must not overwrite them).
    pub fn inputs(&self) -> impl Iterator<Item = &std::path::Path> {
        self.kernel.iter().chain(&self.initrd).map(|p| p.as_path())
    }

    /// Apply the flags and `workload` to `c`: the Linux guest and its RAM
    /// (`DEFAULT_LINUX_MEM` unless `--memory` was given), or the payload's
    /// workload. A Linux workload without `--kernel` is an error.
    pub fn apply(
        &self,
        c: &mut VmConfig,
        workload: Option<WorkloadArg>,
        memory_given: bool,
    ) -> Result<(), String> {
        let Some(kernel) = &self.kernel else {
            return match workload {
                Some(WorkloadArg::Linux(w)) => Err(needs_kernel(w)),
                Some(WorkloadArg::Payload(w)) => {
                    c.workload = w;
                    Ok(())
                }
                None => Ok(()),
            };
        };
        if MultibootGuest::is_multiboot(kernel) {
            return self.apply_multiboot(c, kernel, workload);
        }
        let linux_workload = match workload {
            Some(WorkloadArg::Linux(w)) => Some(w),
            Some(WorkloadArg::Payload(w)) => {
                return Err(format!(
                    "--workload {w} is the built-in payload's; a --kernel guest runs linux:NAME (e.g. linux:ipi-broadcast) or its own initramfs's"
                ))
            }
            None => None,
        };
        if self.append.is_some() {
            return Err(format!(
                "--append is a multiboot kernel's command line and {} has no multiboot header; a Linux kernel's text goes in --cmdline",
                kernel.display()
            ));
        }
        if !memory_given {
            c.memory_bytes = ipivmm::linux::LinuxGuest::DEFAULT_MEMORY_BYTES;
        }
        c.payload = PayloadSource::Linux(LinuxGuest {
            initrd: self.initrd.clone(),
            cmdline: self.cmdline.clone().unwrap_or_default(),
            workload: linux_workload,
            ..LinuxGuest::new(kernel)
        });
        Ok(())
    }
}

impl LinuxArgs {
    /// The Linux guest of a sweep's `linux:NAME` rows (its workload set per
    /// row), None without `--kernel`. A sweep boots bzImages only: a
    /// multiboot kernel (and `--append`, its command line) runs with `run`.
    pub fn sweep_guest(&self) -> Result<Option<LinuxGuest>, String> {
        let Some(kernel) = &self.kernel else {
            return Ok(None);
        };
        if self.append.is_some() || MultibootGuest::is_multiboot(kernel) {
            return Err(format!(
                "--kernel {}: a sweep boots a Linux bzImage for its linux:NAME workloads; a multiboot kernel (--append) runs with `ipivmm run --kernel FILE --append ARGS` (docs/kvm-unit-tests.md)",
                kernel.display()
            ));
        }
        Ok(Some(LinuxGuest {
            initrd: self.initrd.clone(),
            cmdline: self.cmdline.clone().unwrap_or_default(),
            ..LinuxGuest::new(kernel)
        }))
    }

    /// A multiboot `--kernel`: its command line is `--append`; it has no
    /// initrd, Linux command line or workload of ipivmm's.
    fn apply_multiboot(
        &self,
        c: &mut VmConfig,
        kernel: &std::path::Path,
        workload: Option<WorkloadArg>,
    ) -> Result<(), String> {
        let k = kernel.display();
        if self.initrd.is_some() || self.cmdline.is_some() {
            return Err(format!(
                "{k} is a multiboot kernel: it takes no --initrd or --cmdline; its arguments go in --append (kvm-unit-tests: --append ipi)"
            ));
        }
        if let Some(w) = workload {
            let name = match w {
                WorkloadArg::Payload(w) => w.to_string(),
                WorkloadArg::Linux(w) => w.label(),
            };
            return Err(format!(
                "--workload {name}: {k} is a multiboot kernel, which runs what its --append names"
            ));
        }
        c.payload = PayloadSource::Multiboot(MultibootGuest {
            kernel: kernel.to_path_buf(),
            cmdline: self.append.clone().unwrap_or_default(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse_as_payload_or_linux_and_name_the_choices() {
        assert_eq!(
            parse_workload("broadcast"),
            Ok(WorkloadArg::Payload(Workload::Broadcast))
        );
        assert_eq!(
            parse_workload("linux:hackbench"),
            Ok(WorkloadArg::Linux(LinuxWorkload::Hackbench))
        );
        let e = parse_workload("linux:nope").unwrap_err();
        assert!(
            e.contains("linux:ipi-broadcast") && e.contains("linux:tlb-shootdown"),
            "{e}"
        );
        let e = parse_workload("nope").unwrap_err();
        assert!(e.contains("pingpong") && e.contains("linux:ebizzy"), "{e}");
    }

    #[test]
    fn a_linux_workload_needs_a_kernel_and_a_kernel_a_linux_workload() {
        let mut c = VmConfig::default();
        let none = LinuxArgs::default();
        let e = none
            .apply(
                &mut c,
                Some(WorkloadArg::Linux(LinuxWorkload::IpiBroadcast)),
                false,
            )
            .unwrap_err();
        assert!(e.contains("needs --kernel"), "{e}");
        none.apply(&mut c, Some(WorkloadArg::Payload(Workload::Flood)), false)
            .unwrap();
        assert_eq!(c.workload, Workload::Flood);
        let k = LinuxArgs {
            kernel: Some("/boot/vmlinuz".into()),
            initrd: Some("/tmp/initrd".into()),
            cmdline: Some("quiet".into()),
            append: None,
        };
        let e = k
            .apply(&mut c, Some(WorkloadArg::Payload(Workload::Flood)), false)
            .unwrap_err();
        assert!(e.contains("linux:NAME"), "{e}");
        k.apply(
            &mut c,
            Some(WorkloadArg::Linux(LinuxWorkload::IpiUnicast)),
            false,
        )
        .unwrap();
        assert_eq!(
            c.memory_bytes,
            ipivmm::linux::LinuxGuest::DEFAULT_MEMORY_BYTES
        );
        let g = c.payload.linux().unwrap();
        assert_eq!(g.workload, Some(LinuxWorkload::IpiUnicast));
        assert_eq!(
            (g.cmdline.as_str(), g.initrd.as_deref()),
            ("quiet", Some(std::path::Path::new("/tmp/initrd")))
        );
        let mut given = VmConfig {
            memory_bytes: 512 << 20,
            ..VmConfig::default()
        };
        k.apply(&mut given, None, true).unwrap();
        assert_eq!(given.memory_bytes, 512 << 20, "--memory wins");
        assert_eq!(given.payload.linux().unwrap().workload, None);
    }

    #[test]
    fn a_multiboot_kernel_is_told_from_a_bzimage_by_its_header() {
        let dir = std::env::temp_dir().join(format!("ipivmm-cli-mb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let flat = dir.join("vmexit.flat");
        std::fs::write(
            &flat,
            ipivmm_testkit::images::multiboot_elf32(&[0xf4; 52], 0x40_0000, 0),
        )
        .unwrap();
        let mut c = VmConfig::default();
        let a = LinuxArgs {
            kernel: Some(flat.clone()),
            append: Some("ipi".into()),
            ..LinuxArgs::default()
        };
        a.apply(&mut c, None, false).unwrap();
        let g = c.payload.multiboot().expect("a multiboot payload");
        assert_eq!(
            (g.kernel.as_path(), g.cmdline.as_str()),
            (flat.as_path(), "ipi")
        );
        assert_eq!(
            c.memory_bytes,
            VmConfig::default().memory_bytes,
            "not the Linux default"
        );
        // Linux-only flags and workloads are refused with the reason.
        let e = LinuxArgs {
            cmdline: Some("quiet".into()),
            ..LinuxArgs {
                kernel: Some(flat.clone()),
                ..LinuxArgs::default()
            }
        }
        .apply(&mut c, None, false)
        .unwrap_err();
        assert!(e.contains("--append"), "{e}");
        let e = a
            .apply(&mut c, Some(WorkloadArg::Payload(Workload::Flood)), false)
            .unwrap_err();
        assert!(e.contains("multiboot kernel"), "{e}");
        // --append with a bzImage points to --cmdline.
        let bz = dir.join("bzImage");
        std::fs::write(&bz, ipivmm_testkit::images::bzimage(&[0xf4; 64], "6.1")).unwrap();
        let e = LinuxArgs {
            kernel: Some(bz),
            append: Some("x".into()),
            ..LinuxArgs::default()
        }
        .apply(&mut c, None, false)
        .unwrap_err();
        assert!(e.contains("--cmdline"), "{e}");
    }
}
