//! The kernel command line of a Linux guest: what the machine needs
//! (its console, no PCI, a panic that ends the run), what ipivmm's guest
//! init reads (`ipivmm.*`: the workload and its size), then the user's.
use super::LinuxWorkload;
use crate::mode::{ApicMode, TargetWait};

/// What the machine needs, whatever the guest: the console on COM1 (the
/// only UART), no PCI bus to probe, a panic that reboots at once (a triple
/// fault, which ends the run with the serial tail rather than waiting for
/// the watchdog), a TSC the kernel need not check against another clock
/// (there is no other: no HPET, no PIT), and no speculation mitigations
/// (their cost is not what is measured).
pub(crate) const MACHINE: &str = "console=ttyS0 8250.nr_uarts=1 panic=-1 reboot=t pci=off \
tsc=reliable no_timer_check mitigations=off nowatchdog audit=0 rdinit=/init";

/// What ipivmm's init reads: the run's workload and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitArgs {
    /// The workload.
    pub workload: Option<LinuxWorkload>,
    /// Operations in the measured phase.
    pub iterations: u64,
    /// Operations before it.
    pub warmup: u64,
    /// Whether the IPI targets spin (a busy thread per target CPU) or idle.
    pub target: TargetWait,
    /// `--param`s (the multicast's CPU set in the first), 0 when unset.
    pub params: [u64; 8],
}

/// The whole command line: [`MACHINE`], `nox2apic` in xAPIC mode (the
/// CPUID bit is clear already; this keeps a kernel that would enable
/// x2APIC from its own tables from doing so), the init's arguments, then
/// `extra` (the user's `--cmdline`, last, so it wins where Linux takes the
/// last value).
pub fn build(apic: ApicMode, init: &InitArgs, extra: &str) -> String {
    let mut c = String::from(MACHINE);
    if apic == ApicMode::Xapic {
        c.push_str(" nox2apic");
    }
    if let Some(w) = init.workload {
        c.push_str(&format!(
            " ipivmm.workload={} ipivmm.iterations={} ipivmm.warmup={} ipivmm.target={}",
            w.name(),
            init.iterations,
            init.warmup,
            if init.target == TargetWait::Spin {
                "spin"
            } else {
                "idle"
            },
        ));
        let params: Vec<String> = init.params.iter().map(|p| format!("{p:#x}")).collect();
        if init.params.iter().any(|p| *p != 0) {
            c.push_str(&format!(" ipivmm.params={}", params.join(",")));
        }
    }
    let extra = extra.trim();
    if !extra.is_empty() {
        c.push(' ');
        c.push_str(extra);
    }
    c
}

/// Why a command line cannot be passed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CmdlineError {
    /// Longer than the kernel takes.
    #[error("the kernel command line is {len} bytes, over this kernel's limit of {max} (its header's cmdline_size): shorten --cmdline")]
    TooLong {
        /// Bytes.
        len: usize,
        /// The kernel's limit.
        max: u32,
    },
    /// A NUL or another control character.
    #[error("--cmdline has a control character (U+{0:04X}) at byte {1}: pass plain text")]
    Control(u32, usize),
}

/// Check `c` against a kernel whose header allows `max` bytes.
pub fn check(c: &str, max: u32) -> Result<(), CmdlineError> {
    if let Some((i, ch)) = c.char_indices().find(|(_, ch)| ch.is_control()) {
        return Err(CmdlineError::Control(ch as u32, i));
    }
    // boot.rst: cmdline_size is the longest line without the NUL; a header
    // of protocol < 2.06 would say 0 (ipivmm needs 2.12 anyway).
    if c.len() > max as usize || c.len() as u64 >= super::layout::CMDLINE_MAX {
        return Err(CmdlineError::TooLong { len: c.len(), max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(w: Option<LinuxWorkload>) -> InitArgs {
        InitArgs {
            workload: w,
            iterations: 1000,
            warmup: 100,
            target: TargetWait::Spin,
            params: [0; 8],
        }
    }

    #[test]
    fn the_line_has_the_machine_the_init_arguments_and_the_user_last() {
        let c = build(
            ApicMode::Xapic,
            &args(Some(LinuxWorkload::IpiBroadcast)),
            " quiet ",
        );
        assert!(c.starts_with("console=ttyS0 "), "{c}");
        assert!(c.contains(" nox2apic "), "{c}");
        assert!(c.contains(" ipivmm.workload=ipi-broadcast ipivmm.iterations=1000 ipivmm.warmup=100 ipivmm.target=spin"), "{c}");
        assert!(!c.contains("ipivmm.params"), "{c}");
        assert!(c.ends_with(" quiet"), "{c}");
        let x2 = build(ApicMode::X2apic, &args(None), "");
        assert!(!x2.contains("nox2apic") && !x2.contains("ipivmm."), "{x2}");
        let mut m = args(Some(LinuxWorkload::IpiMulticast));
        m.params[0] = 0b1010;
        m.target = TargetWait::Halt;
        let c = build(ApicMode::X2apic, &m, "");
        assert!(
            c.contains("ipivmm.target=idle ipivmm.params=0xa,0x0"),
            "{c}"
        );
    }

    #[test]
    fn the_line_is_bounded_by_the_kernel_and_plain_text() {
        let c = build(ApicMode::X2apic, &args(Some(LinuxWorkload::Hackbench)), "");
        assert_eq!(check(&c, 2047), Ok(()));
        assert_eq!(
            check(&"a".repeat(2048), 2047),
            Err(CmdlineError::TooLong {
                len: 2048,
                max: 2047
            })
        );
        assert_eq!(check("a\nb", 2047), Err(CmdlineError::Control(10, 1)));
        assert!(check("a\0b", 2047).is_err());
        assert!(
            check(&"a".repeat(70_000), u32::MAX).is_err(),
            "ipivmm's own area bounds it too"
        );
    }
}
