//! The Intel lab's emulator: Bochs's emulated VMX CPU, on which the guest's
//! kernel loads the real kvm_intel (docs/lab-intel.md). Bochs 2.7 is
//! Debian bookworm's package (no posted interrupts: enable_apicv=N); 3.0 is
//! built once from Debian trixie's source package with our patches
//! (scripts/lab/build-bochs.sh). Bochs boots a GRUB ISO (no -kernel), its
//! disk is ATA (no virtio: the drivers go in an extra initramfs archive),
//! and it has no -no-reboot: the boot core stops it once the guest is done.
use super::boot::{BootSpec, Emulator};
use super::host::{apt_install, have, output};
use super::{initramfs, modules};
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The Bochs release the lab runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Version {
    /// Debian bookworm's bochs package: VMX without posted interrupts.
    #[value(name = "2.7")]
    V2_7,
    /// Debian trixie's source package, built with scripts/lab/bochs-3.0-*.patch: APICv emulated.
    #[default]
    #[value(name = "3.0")]
    V3_0,
}

impl Version {
    /// `2.7` or `3.0`.
    pub fn name(self) -> &'static str {
        match self {
            Version::V2_7 => "2.7",
            Version::V3_0 => "3.0",
        }
    }

    /// The CPU model unless `--cpu` names one.
    pub fn default_cpu(self) -> &'static str {
        match self {
            Version::V2_7 => "broadwell_ult",
            Version::V3_0 => "corei7_skylake_x",
        }
    }
}

/// 520 cylinders x 16 heads x 63 sectors: a geometry Bochs takes for a flat image.
const CYLINDERS: u64 = 520;
const HEADS: u64 = 16;
const SECTORS: u64 = 63;

/// Bochs and the machine it emulates.
pub struct Bochs {
    pub version: Version,
    pub binary: PathBuf,
    pub cpu: String,
    /// Instructions per emulated second.
    pub ips: u64,
    pub smp: u32,
    pub mem_mib: u32,
    /// Scratch directory of the boots (ISO, bochsrc, Bochs's own logs).
    pub run: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The ATA drivers' archive ([`Bochs::ata_archive`]).
    pub ata: PathBuf,
    /// Further newc archives appended to the initramfs (`--cpio`): the
    /// kernel unpacks concatenated archives, later files win.
    pub extra: Vec<PathBuf>,
}

impl Bochs {
    /// Installs what the Bochs lab needs and returns the Bochs binary
    /// (3.0: built once into the cache by scripts/lab/build-bochs.sh, which
    /// reads BOCHS_PATCHES and BOCHS_JOBS).
    pub fn tools(root: &Path, version: Version) -> Result<PathBuf> {
        let mut need = Vec::new();
        if !Path::new("/usr/lib/grub/i386-pc").is_dir() {
            need.push("grub-pc-bin");
        }
        for (tool, pkg) in [
            ("grub-mkrescue", "grub-common"),
            ("xorriso", "xorriso"),
            ("mformat", "mtools"),
        ] {
            if !have(tool) {
                need.push(pkg);
            }
        }
        // BIOS images for both versions (3.0's source package has them stripped).
        if !Path::new("/usr/share/bochs/BIOS-bochs-latest").exists() {
            need.push("bochsbios");
        }
        if !Path::new("/usr/share/vgabios/vgabios.bin").exists() {
            need.push("vgabios");
        }
        if version == Version::V2_7 && !have("bochs") {
            need.push("bochs");
        }
        apt_install(&need)?;
        match version {
            Version::V2_7 => Ok(PathBuf::from("bochs")),
            Version::V3_0 => {
                let out = output(&mut Command::new(root.join("scripts/lab/build-bochs.sh")))?;
                match out.lines().last() {
                    Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
                    _ => bail!("scripts/lab/build-bochs.sh printed no binary"),
                }
            }
        }
    }

    /// The ATA drivers and their dependencies (from `modules`, the guest
    /// kernel's lib/modules/RELEASE) as an archive that adds them to
    /// /lab/modules and names them in order.extra (init.sh loads both lists).
    pub fn ata_archive(modules: &Path, busybox: &Path, run: &Path) -> Result<PathBuf> {
        let st = run.join("ata");
        let _ = fs::remove_dir_all(&st);
        initramfs::add_modules(
            &st,
            &modules::load_order(modules, modules::ATA)?,
            "order.extra",
        )?;
        let out = run.join("ata.cpio");
        initramfs::pack(&st, busybox, &out)?;
        fs::remove_dir_all(&st)?;
        Ok(out)
    }

    /// A GRUB ISO that boots the kernel with `append`.
    fn iso(&self, append: &str) -> Result<PathBuf> {
        let d = self.run.join("iso");
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("boot/grub"))?;
        fs::copy(&self.kernel, d.join("boot/vmlinuz"))?;
        fs::copy(&self.initrd, d.join("boot/initrd.cpio"))?;
        fs::copy(&self.ata, d.join("boot/ata.cpio"))?;
        let mut archives = String::from("/boot/initrd.cpio /boot/ata.cpio");
        for (i, f) in self.extra.iter().enumerate() {
            fs::copy(f, d.join(format!("boot/extra{i}.cpio")))
                .with_context(|| format!("cannot copy {}", f.display()))?;
            archives.push_str(&format!(" /boot/extra{i}.cpio"));
        }
        fs::write(
            d.join("boot/grub/grub.cfg"),
            format!(
                "set timeout=0\nset default=0\nmenuentry \"ipivmm lab\" {{\n    linux /boot/vmlinuz {append}\n    initrd {archives}\n}}\n"
            ),
        )?;
        let iso = self.run.join("lab.iso");
        let logf = self.run.join("grub-mkrescue.log");
        let logfile = fs::File::create(&logf)?;
        let ok = Command::new("grub-mkrescue")
            .arg("-o")
            .arg(&iso)
            .arg(&d)
            .stdout(logfile.try_clone()?)
            .stderr(logfile)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprint!("{}", fs::read_to_string(&logf).unwrap_or_default());
            bail!("grub-mkrescue failed");
        }
        fs::remove_dir_all(&d)?;
        Ok(iso)
    }

    /// The bochsrc of a boot.
    fn bochsrc(&self, spec: &BootSpec, iso: &Path) -> String {
        // Debian's 2.7 has no nogui: its VNC server, told not to wait for a
        // client. It also aborts ("buffer overflow detected") when ALSA finds
        // no sound card, unless its sound drivers are the dummies.
        let display = match self.version {
            Version::V2_7 => "display_library: rfb, options=\"timeout=0\"\nsound: waveoutdrv=dummy, waveindrv=dummy, midioutdrv=dummy\nspeaker: enabled=0",
            Version::V3_0 => "display_library: nogui",
        };
        format!(
            r#"# Written by cargo xtask lab --emulator bochs (Bochs {ver})
config_interface: textconfig
{display}
memory: guest={mem}, host={mem}
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/vgabios/vgabios.bin
cpu: model={cpu}, count={smp}, ips={ips}, reset_on_triple_fault=1, ignore_bad_msrs=1
clock: sync=none, time0=local
pci: enabled=1, chipset=i440fx
ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
ata0-master: type=disk, path="{disk}", mode=flat, cylinders={CYLINDERS}, heads={HEADS}, spt={SECTORS}
ata1: enabled=1, ioaddr1=0x170, ioaddr2=0x370, irq=15
ata1-master: type=cdrom, path="{iso}", status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev="{console}"
mouse: enabled=0
log: "{log}"
panic: action=fatal
error: action=report
# info: ignore keeps Bochs's own IPS alarm handler (2.7) from ever writing
# to the log (it deadlocks when it interrupts another log write).
info: action=ignore
debug: action=ignore
"#,
            ver = self.version.name(),
            mem = self.mem_mib,
            cpu = self.cpu,
            smp = self.smp,
            ips = self.ips,
            disk = spec.disk.display(),
            iso = iso.display(),
            console = spec.console.display(),
            log = self.run.join("bochs.log").display(),
        )
    }

    /// What goes into versions.txt (with the patches of the build, when
    /// build-bochs.sh lists them in patches.txt beside its bin/).
    pub fn versions(&self, kargs: &[String]) -> Vec<String> {
        let patches = self
            .binary
            .parent()
            .and_then(Path::parent)
            .and_then(|d| fs::read_to_string(d.join("patches.txt")).ok())
            .map(|p| {
                format!(
                    "patches {}",
                    p.split_whitespace().collect::<Vec<_>>().join(" ")
                )
            });
        let mut v = vec![format!(
            "bochs {} {} ({}, ips {})",
            self.version.name(),
            self.binary.display(),
            self.cpu,
            self.ips
        )];
        v.extend(patches);
        v.extend([
            format!(
                "kernel {}",
                self.kernel
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            format!("args {}", kargs.join(" ")),
        ]);
        v
    }
}

/// The last `n` bytes of `from` into `to` (nothing when `from` is missing).
fn tail(from: &Path, n: u64, to: &Path) {
    let Ok(mut f) = fs::File::open(from) else {
        return;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(n))).is_ok() && f.read_to_end(&mut buf).is_ok() {
        let _ = fs::write(to, buf);
    }
}

impl Drop for Bochs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.run);
    }
}

impl Emulator for Bochs {
    fn name(&self) -> String {
        format!(
            "Bochs {} ({}, {} CPUs, {} MiB)",
            self.version.name(),
            self.cpu,
            self.smp,
            self.mem_mib
        )
    }

    fn console_args(&self) -> &'static str {
        "console=ttyS0,115200 panic=-1 mitigations=off"
    }

    fn deadline_margin_s(&self) -> u64 {
        // Guest time: under Bochs it runs far slower than the wall clock.
        120
    }

    fn wedge_after_s(&self) -> Option<u64> {
        // The guest clock runs ~25 times slower than the wall clock (the
        // first 20 s heartbeat came 12 minutes after boot): no watchdog.
        None
    }

    fn disk_bytes(&self) -> u64 {
        CYLINDERS * HEADS * SECTORS * 512
    }

    /// The bochsrc, the end of Bochs's log and of its output.
    fn collect(&self, into: &Path) -> Result<()> {
        let _ = fs::copy(self.run.join("bochsrc"), into.join("bochsrc"));
        tail(
            &self.run.join("bochs.log"),
            4 << 20,
            &into.join("bochs.log"),
        );
        tail(
            &self.run.join("bochs.out"),
            64 << 10,
            &into.join("bochs.out"),
        );
        Ok(())
    }

    fn spawn(&mut self, spec: &BootSpec) -> Result<Child> {
        fs::create_dir_all(&self.run)?;
        let iso = self.iso(&spec.append)?;
        let rc = self.run.join("bochsrc");
        fs::write(&rc, self.bochsrc(spec, &iso))?;
        let mut c = Command::new(&self.binary);
        c.arg("-q").arg("-f").arg(&rc);
        // Debian's 2.7 has its debugger compiled in: tell it to continue.
        let help = Command::new(&self.binary)
            .arg("--help")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default();
        if help.contains("-rc filename") {
            let dbg = self.run.join("debugger.rc");
            fs::write(&dbg, "c\n")?;
            c.arg("-rc").arg(dbg);
        }
        let out = fs::File::create(self.run.join("bochs.out"))?;
        c.current_dir(&self.run)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bochsrc_names_the_boots_files_and_the_machine() {
        let b = Bochs {
            version: Version::V2_7,
            binary: "bochs".into(),
            cpu: Version::V2_7.default_cpu().into(),
            ips: 60_000_000,
            smp: 2,
            mem_mib: 2048,
            run: std::env::temp_dir().join(format!("xtask-bochs-{}", std::process::id())),
            kernel: "/k/boot/vmlinuz-6.1.0-50-amd64".into(),
            initrd: "/w/initrd.cpio".into(),
            ata: "/w/run/ata.cpio".into(),
            extra: Vec::new(),
        };
        let spec = BootSpec {
            append: String::new(),
            disk: "/w/out-1.img".into(),
            console: "/w/console-1.log".into(),
        };
        let rc = b.bochsrc(&spec, Path::new("/w/run/lab.iso"));
        for line in [
            "display_library: rfb, options=\"timeout=0\"",
            "memory: guest=2048, host=2048",
            "cpu: model=broadwell_ult, count=2, ips=60000000, reset_on_triple_fault=1, ignore_bad_msrs=1",
            "ata0-master: type=disk, path=\"/w/out-1.img\", mode=flat, cylinders=520, heads=16, spt=63",
            "ata1-master: type=cdrom, path=\"/w/run/lab.iso\", status=inserted",
            "com1: enabled=1, mode=file, dev=\"/w/console-1.log\"",
        ] {
            assert!(rc.lines().any(|l| l == line), "{line} not in\n{rc}");
        }
        assert_eq!(b.disk_bytes(), 520 * 16 * 63 * 512);
        assert_eq!(
            b.versions(&["lab.matrix=10".into()]),
            [
                "bochs 2.7 bochs (broadwell_ult, ips 60000000)",
                "kernel vmlinuz-6.1.0-50-amd64",
                "args lab.matrix=10"
            ]
        );
        assert!(rc.contains(&format!("log: \"{}\"", b.run.join("bochs.log").display())));
    }
}
