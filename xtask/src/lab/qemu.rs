//! The AMD lab's emulator: QEMU's TCG with an SVM CPU (`-cpu max`), on
//! which the guest's kernel loads the real kvm_amd (docs/lab.md). The
//! guest's results disk is virtio; a wedged guest's CPU state comes from
//! the QEMU monitor.
use super::boot::{BootSpec, Emulator};
use super::host::{built, output, run};
use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What builds the lab's QEMU (bookworm's 7.2 with scripts/lab/qemu-7.2.series).
const BUILD_SCRIPT: &str = "scripts/lab/build-qemu.sh";
/// The CPU model unless `--cpu` names one: every feature TCG has (SVM,
/// nested paging; with the AVIC series AVIC and x2AVIC).
pub const DEFAULT_CPU: &str = "max";

/// QEMU and the machine it emulates.
pub struct Qemu {
    /// The QEMU binary.
    pub binary: PathBuf,
    /// `-cpu`.
    pub cpu: String,
    /// Emulated CPUs.
    pub smp: u32,
    /// Sockets they sit in, each its own NUMA node with an equal share of
    /// the memory (`--sockets`; None: QEMU's default, one socket, no NUMA).
    pub sockets: Option<u32>,
    /// Guest memory, MiB.
    pub mem_mib: u32,
    /// Seconds without a heartbeat before a guest counts as wedged.
    pub wedge_s: u64,
    /// The kernel and initramfs to boot.
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// The monitor's socket (a wedged guest's registers are read there).
    pub monitor: PathBuf,
}

impl Qemu {
    /// The binary LAB_QEMU names, else the lab's QEMU: Debian bookworm's
    /// 7.2 with the series of scripts/lab/qemu-7.2.series, built once per
    /// patch set into the cache by scripts/lab/build-qemu.sh (QEMU_PATCHES
    /// and QEMU_JOBS pass through). Every pass uses it, not only AVIC's:
    /// the series also fixes TCG's SVM defects a plain kvm_amd meets (an
    /// injected interrupt delivered twice, the lost interrupt shadow), which
    /// stalled the stock QEMU's floods (docs/lab.md). `LAB_QEMU=qemu-system-x86_64`
    /// runs the system's QEMU instead.
    pub fn binary(root: &Path, cache: &Path) -> Result<PathBuf> {
        if let Some(b) = std::env::var_os("LAB_QEMU").filter(|b| !b.is_empty()) {
            return Ok(PathBuf::from(b));
        }
        built(
            BUILD_SCRIPT,
            Command::new(root.join(BUILD_SCRIPT)).env("IPIVMM_LAB_CACHE", cache),
        )
    }

    /// versions.txt's lines for `binary`: its version and the patches it
    /// was built with (build-qemu.sh's patches.txt beside its bin/).
    pub fn versions(binary: &Path) -> Result<Vec<String>> {
        let mut v = vec![format!("qemu {}", Self::version(binary)?)];
        let patches = binary
            .parent()
            .and_then(Path::parent)
            .map(|d| d.join("patches.txt"));
        if let Some(list) = patches.and_then(|p| std::fs::read_to_string(p).ok()) {
            v.push(format!(
                "qemu patches {}",
                list.split_whitespace().collect::<Vec<_>>().join(" ")
            ));
        }
        Ok(v)
    }

    /// `qemu ... --version`'s first line.
    pub fn version(binary: &std::path::Path) -> Result<String> {
        let v = output(Command::new(binary).arg("--version"))?;
        Ok(v.lines().next().unwrap_or_default().to_string())
    }

    fn machine(&self) -> Command {
        let mut c = Command::new(&self.binary);
        c.args(["-accel", "tcg,thread=multi", "-cpu", &self.cpu])
            .args(["-m", &self.mem_mib.to_string()])
            .args(topology(self.smp, self.sockets, self.mem_mib))
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(&self.initrd);
        c
    }

    fn disk(c: &mut Command, disk: &std::path::Path) {
        c.arg("-drive")
            .arg(format!("file={},format=raw,if=virtio", disk.display()))
            .args(["-display", "none", "-nodefaults", "-no-reboot"]);
    }

    /// The shell pass: the guest's console on this terminal.
    pub fn shell(&self, disk: &std::path::Path) -> Result<()> {
        std::fs::File::create(disk)?.set_len(1 << 30)?;
        let mut c = self.machine();
        c.arg("-append")
            .arg("console=ttyS0 panic=-1 lab.pass=shell lab.deadline=999999");
        Self::disk(&mut c, disk);
        run(c.args(["-serial", "stdio"]))
    }
}

/// The QEMU monitor (HMP) on its socket, asked one command at a time.
struct Monitor(UnixStream);

impl Monitor {
    fn connect(socket: &Path) -> Result<Self> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("cannot connect to the QEMU monitor {}", socket.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut m = Monitor(s);
        m.read_prompt();
        Ok(m)
    }

    /// Reads until the prompt (or 3 s of silence).
    fn read_prompt(&mut self) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while !out.ends_with(b"(qemu) ") {
            match self.0.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// `cmd`'s reply, headed by the command: the monitor's echo of it (one
    /// redrawn line per keystroke) and its next prompt left out.
    fn ask(&mut self, cmd: &str) -> Result<String> {
        self.0.write_all(format!("{cmd}\n").as_bytes())?;
        let raw = self.read_prompt();
        let reply = raw.split_once('\n').map_or("", |(_, r)| r);
        let reply = reply.strip_suffix("(qemu) ").unwrap_or(reply);
        let reply = reply.replace('\r', "");
        Ok(format!("(qemu) {cmd}\n{}\n", reply.trim_end_matches('\n')))
    }
}

/// Every CPU's state, asked of the monitor `m`.
fn cpu_state(m: &mut Monitor) -> Result<String> {
    let mut text = String::new();
    for cmd in ["info cpus", "info registers -a"] {
        text.push_str(&m.ask(cmd)?);
    }
    Ok(text)
}

/// Every CPU's state from the QEMU monitor at `socket`.
fn monitor_dump(socket: &Path) -> Result<String> {
    cpu_state(&mut Monitor::connect(socket)?)
}

/// A kernel stack's size and alignment (x86-64 without KASAN: 16 KiB), so
/// its end, where the kernel keeps STACK_END_MAGIC, is RSP rounded down.
const KERNEL_STACK: u64 = 16 << 10;

/// Each CPU's RSP where it points into the kernel's half, from the
/// monitor's `info registers -a`.
fn kernel_rsps(registers: &str) -> Vec<(u32, u64)> {
    let mut cpu = None;
    let mut out = Vec::new();
    for line in registers.lines() {
        if let Some(n) = line.trim().strip_prefix("CPU#") {
            cpu = n.split_whitespace().next().and_then(|n| n.parse().ok());
        }
        let rsp = line
            .split_whitespace()
            .find_map(|t| t.strip_prefix("RSP="))
            .and_then(|v| u64::from_str_radix(v, 16).ok());
        if let (Some(c), Some(r)) = (cpu, rsp) {
            // The kernel's half: the top bit set (4- or 5-level paging:
            // -cpu max has LA57, whose stacks sit at 0xffa0...).
            if r >> 63 == 1 {
                out.push((c, r));
            }
        }
    }
    out
}

/// A panicked guest's registers, then the first 512 bytes of the kernel
/// stack each CPU is on (the word at its start is STACK_END_MAGIC,
/// 0x57ac6e9d, unless something overwrote it).
fn monitor_panic_dump(socket: &Path) -> Result<String> {
    let mut m = Monitor::connect(socket)?;
    let mut text = cpu_state(&mut m)?;
    for (cpu, rsp) in kernel_rsps(&text) {
        let end = rsp & !(KERNEL_STACK - 1);
        text.push_str(&format!(
            "=== CPU {cpu}: RSP {rsp:#x}, its stack's end {end:#x}\n"
        ));
        m.ask(&format!("cpu {cpu}"))?;
        text.push_str(&m.ask(&format!("x /64gx {end:#x}"))?);
    }
    Ok(text)
}

/// QEMU's `-smp` for `smp` CPUs in `sockets` sockets (cores, one thread
/// each), each socket a NUMA node with its share of `mem_mib` (the
/// memory-backend objects `-numa node,memdev=` takes: `mem=` is refused by
/// the machine types since 5.1). [`check_topology`] has checked the shares.
fn topology(smp: u32, sockets: Option<u32>, mem_mib: u32) -> Vec<String> {
    let Some(s) = sockets.filter(|&s| s > 1) else {
        return vec!["-smp".into(), smp.to_string()];
    };
    let cores = smp / s;
    let mut a = vec![
        "-smp".into(),
        format!("{smp},sockets={s},cores={cores},threads=1"),
    ];
    for n in 0..s {
        let (first, last) = (n * cores, n * cores + cores - 1);
        a.push("-object".into());
        a.push(format!(
            "memory-backend-ram,id=node{n},size={}M",
            mem_mib / s
        ));
        a.push("-numa".into());
        a.push(format!(
            "node,nodeid={n},cpus={first}-{last},memdev=node{n}"
        ));
    }
    a
}

/// Whether `smp` CPUs and `mem_mib` MiB split evenly into `sockets`; the
/// error names the fix.
pub fn check_topology(smp: u32, sockets: Option<u32>, mem_mib: u32) -> Result<()> {
    let Some(s) = sockets else { return Ok(()) };
    if s == 0 || !smp.is_multiple_of(s) || !mem_mib.is_multiple_of(s) {
        anyhow::bail!(
            "--sockets {s}: the {smp} CPUs (--smp) and {mem_mib} MiB (LAB_MEM) must split evenly into {s} sockets (e.g. --sockets 2 --smp 4)"
        );
    }
    Ok(())
}

impl Emulator for Qemu {
    fn name(&self) -> String {
        let sockets = match self.sockets {
            Some(s) if s > 1 => format!(" in {s} sockets (NUMA nodes)"),
            _ => String::new(),
        };
        format!(
            "QEMU TCG (-cpu {}, {} vCPUs{sockets}, {} MiB)",
            self.cpu, self.smp, self.mem_mib
        )
    }

    fn console_args(&self) -> &'static str {
        // nokaslr: a wedged guest's RIPs (wedge-N.txt) are named from the
        // kallsyms it saved at boot. panic=0: a panicked kernel stays up
        // (the boot core stops it) so its stacks can be read (panic-N.txt).
        "console=ttyS0 panic=0 nokaslr"
    }

    fn deadline_margin_s(&self) -> u64 {
        60
    }

    fn wedge_after_s(&self) -> Option<u64> {
        Some(self.wedge_s)
    }

    fn disk_bytes(&self) -> u64 {
        1 << 30
    }

    fn spawn(&mut self, spec: &BootSpec) -> Result<Child> {
        let _ = std::fs::remove_file(&self.monitor);
        let mut c = self.machine();
        c.arg("-append").arg(&spec.append);
        Self::disk(&mut c, &spec.disk);
        c.arg("-serial")
            .arg(format!("file:{}", spec.console.display()))
            .arg("-monitor")
            .arg(format!(
                "unix:{},server=on,wait=off",
                self.monitor.display()
            ))
            .stdin(Stdio::null());
        c.spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))
    }

    fn dump_state(&mut self) -> String {
        monitor_dump(&self.monitor).unwrap_or_else(|e| format!("{e:#}\n"))
    }

    fn dump_panic(&mut self) -> String {
        monitor_panic_dump(&self.monitor).unwrap_or_else(|e| format!("{e:#}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sockets_are_two_numa_nodes_with_half_the_cpus_and_memory_each() {
        assert_eq!(topology(2, None, 2048), ["-smp", "2"]);
        assert_eq!(topology(2, Some(1), 2048), ["-smp", "2"]);
        assert_eq!(
            topology(4, Some(2), 2048).join(" "),
            "-smp 4,sockets=2,cores=2,threads=1 \
             -object memory-backend-ram,id=node0,size=1024M -numa node,nodeid=0,cpus=0-1,memdev=node0 \
             -object memory-backend-ram,id=node1,size=1024M -numa node,nodeid=1,cpus=2-3,memdev=node1"
        );
        assert!(check_topology(4, Some(2), 2048).is_ok());
        assert!(check_topology(2, None, 2048).is_ok());
        let e = check_topology(3, Some(2), 2048).unwrap_err().to_string();
        assert!(e.contains("--sockets 2 --smp 4"), "{e}");
        assert!(check_topology(2, Some(0), 2048).is_err());
    }

    #[test]
    fn a_monitor_reply_comes_without_its_echo_and_prompt() {
        let (ours, mut qemu) = UnixStream::pair().unwrap();
        let mut m = Monitor(ours);
        qemu.write_all(b"xx /x /64gx 0x10\x1b[K\x1b[D\r\nffa0: 0x0000000057ac6e9d 0x0\r\nffb0: 0x0 0x0\r\n(qemu) ")
            .unwrap();
        assert_eq!(
            m.ask("x /64gx 0x10").unwrap(),
            "(qemu) x /64gx 0x10\nffa0: 0x0000000057ac6e9d 0x0\nffb0: 0x0 0x0\n"
        );
        let mut typed = [0u8; 13];
        qemu.read_exact(&mut typed).unwrap();
        assert_eq!(&typed, b"x /64gx 0x10\n");
    }

    #[test]
    fn each_cpus_kernel_rsp_is_read_from_the_monitor() {
        let regs = "CPU#0\nRAX=0000000000000000 RBX=ffffffff82613940\nRSI=0 RDI=0 RBP=ffffc90000d47e10 RSP=ffffc90000d47d88\nCPU#1 (halted)\nRSI=0 RDI=0 RBP=0 RSP=00007ffe12345678\nCPU#2\nRSP=ffff888100003f00\nCPU#3\nRSP=ffa0000000013a98\n";
        assert_eq!(
            kernel_rsps(regs),
            [
                (0, 0xffffc90000d47d88),
                (2, 0xffff888100003f00),
                (3, 0xffa0000000013a98)
            ]
        );
        assert_eq!(0xffffc90000d47d88 & !(KERNEL_STACK - 1), 0xffffc90000d44000);
    }
}
