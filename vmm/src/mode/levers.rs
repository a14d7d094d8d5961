//! The per-VM levers of the mode matrix that are KVM capabilities: exit
//! controls, halt polling, the APICv inhibit lever, and vCPU placement.
//!
//! KVM_CAP_X86_DISABLE_EXITS must be enabled before any vCPU is created
//! (api.rst: "should be called before vCPUs are created"); the allowed bits
//! are what KVM_CHECK_EXTENSION returns for it.
use kvm_bindings::{
    kvm_enable_cap, KVM_CAP_HALT_POLL, KVM_CAP_X86_DISABLE_EXITS, KVM_X86_DISABLE_EXITS_CSTATE,
    KVM_X86_DISABLE_EXITS_HLT, KVM_X86_DISABLE_EXITS_MWAIT, KVM_X86_DISABLE_EXITS_PAUSE,
};
use kvm_ioctls::VmFd;
use serde::{Deserialize, Serialize};

crate::mode::mode_part! {
    /// One VM exit KVM_CAP_X86_DISABLE_EXITS can turn off.
    pub enum ExitControl {
        /// MWAIT/MONITOR run in the guest.
        Mwait,
        /// HLT runs in the guest (the vCPU thread spins in the guest instead of sleeping).
        Hlt,
        /// PAUSE runs in the guest (no pause-loop exits).
        Pause,
        /// C-states (MWAIT/HLT/PAUSE together).
        Cstate,
    }
}

impl ExitControl {
    /// The KVM_X86_DISABLE_EXITS_* bit.
    pub fn bit(self) -> u32 {
        match self {
            ExitControl::Mwait => KVM_X86_DISABLE_EXITS_MWAIT,
            ExitControl::Hlt => KVM_X86_DISABLE_EXITS_HLT,
            ExitControl::Pause => KVM_X86_DISABLE_EXITS_PAUSE,
            ExitControl::Cstate => KVM_X86_DISABLE_EXITS_CSTATE,
        }
    }
}

/// A set of exits to turn off, as KVM_CAP_X86_DISABLE_EXITS takes it.
/// Serialized as the list of names (`["hlt", "pause"]`).
///
/// ```
/// use ipivmm::mode::levers::{ExitControl, ExitControls};
///
/// let c: ExitControls = [ExitControl::Hlt, ExitControl::Pause].into_iter().collect();
/// assert_eq!(c.names(), ["hlt", "pause"]);
/// assert!(c.contains(ExitControl::Hlt) && !c.contains(ExitControl::Mwait));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExitControls(u32);

impl ExitControls {
    /// No exit turned off.
    pub const NONE: ExitControls = ExitControls(0);

    /// The KVM bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The controls set in KVM `bits` (unknown bits dropped).
    pub fn from_bits(bits: u32) -> Self {
        ExitControl::ALL
            .iter()
            .filter(|c| bits & c.bit() != 0)
            .copied()
            .collect()
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: ExitControl) -> bool {
        self.0 & c.bit() != 0
    }

    /// True if nothing is turned off.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the controls in the set.
    pub fn names(self) -> Vec<&'static str> {
        ExitControl::ALL
            .iter()
            .filter(|c| self.contains(**c))
            .map(|c| c.name())
            .collect()
    }
}

impl FromIterator<ExitControl> for ExitControls {
    fn from_iter<I: IntoIterator<Item = ExitControl>>(iter: I) -> Self {
        ExitControls(iter.into_iter().fold(0, |bits, c| bits | c.bit()))
    }
}

impl Serialize for ExitControls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names())
    }
}

impl<'de> Deserialize<'de> for ExitControls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<ExitControl>::deserialize(d)?;
        Ok(names.into_iter().collect())
    }
}

/// Errors enabling a lever. Each names what the host allows.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeverError {
    /// Exit controls KVM does not allow.
    #[error("--disable-exits {asked} (VmConfig::disable_exits): this KVM allows only [{allowed}] (KVM_CAP_X86_DISABLE_EXITS); drop the others")]
    ExitsNotAllowed {
        /// Requested names.
        asked: String,
        /// Allowed names.
        allowed: String,
    },
    /// KVM refused to enable a capability.
    #[error("enabling {cap} failed: {err}")]
    Enable {
        /// Capability.
        cap: &'static str,
        /// errno text.
        err: String,
    },
    /// KVM_CAP_HALT_POLL missing.
    #[error("--halt-poll-ns (VmConfig::halt_poll_ns) needs KVM_CAP_HALT_POLL (Linux 5.15+), which this KVM lacks; leave it unset (None) and use the kvm.halt_poll_ns module parameter instead")]
    NoHaltPoll,
    /// A pinning CPU that does not exist or is not allowed.
    #[error(
        "--pin (VmConfig::pin): host CPU {cpu} is not online or not allowed for this process (allowed: {allowed})"
    )]
    NoSuchCpu {
        /// The CPU.
        cpu: usize,
        /// Allowed CPUs.
        allowed: String,
    },
    /// Fewer CPUs than vCPUs.
    #[error(
        "--pin (VmConfig::pin) lists {cpus} CPUs for {vcpus} vCPUs: give one host CPU per vCPU"
    )]
    PinCount {
        /// CPUs listed.
        cpus: usize,
        /// vCPUs.
        vcpus: usize,
    },
}

/// Check `requested` exit controls against what KVM allows (KVM_CHECK_EXTENSION).
pub fn check_disable_exits(
    requested: ExitControls,
    allowed: ExitControls,
) -> Result<(), LeverError> {
    if requested.bits() & !allowed.bits() == 0 {
        return Ok(());
    }
    Err(LeverError::ExitsNotAllowed {
        asked: requested.names().join(","),
        allowed: allowed.names().join(","),
    })
}

/// The exit controls this KVM allows turning off.
pub fn allowed_exit_controls(kvm_or_vm: impl Fn(libc::c_ulong) -> i32) -> ExitControls {
    ExitControls::from_bits(kvm_or_vm(libc::c_ulong::from(KVM_CAP_X86_DISABLE_EXITS)).max(0) as u32)
}

/// Turn off the requested exits for the VM (before any vCPU exists).
pub fn disable_exits(vm: &VmFd, requested: ExitControls) -> Result<(), LeverError> {
    if requested.is_empty() {
        return Ok(());
    }
    check_disable_exits(
        requested,
        allowed_exit_controls(|c| vm.check_extension_raw(c)),
    )?;
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_DISABLE_EXITS,
        ..Default::default()
    };
    cap.args[0] = u64::from(requested.bits());
    vm.enable_cap(&cap).map_err(|e| LeverError::Enable {
        cap: "KVM_CAP_X86_DISABLE_EXITS",
        err: e.to_string(),
    })
}

/// Set this VM's maximum halt-polling time.
pub fn set_halt_poll_ns(vm: &VmFd, ns: u32) -> Result<(), LeverError> {
    if vm.check_extension_raw(libc::c_ulong::from(KVM_CAP_HALT_POLL)) <= 0 {
        return Err(LeverError::NoHaltPoll);
    }
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_HALT_POLL,
        ..Default::default()
    };
    cap.args[0] = u64::from(ns);
    vm.enable_cap(&cap).map_err(|e| LeverError::Enable {
        cap: "KVM_CAP_HALT_POLL",
        err: e.to_string(),
    })
}

/// Parse `0,2,5-7` into a CPU list.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{t}' in --pin is not a CPU number (use e.g. 0,2,4-7)"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > 4096 {
                    return Err(format!("bad CPU range '{part}' in --pin"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    if cpus.is_empty() {
        return Err("--pin needs at least one CPU".into());
    }
    Ok(cpus)
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Whether `vcpus` vCPUs outnumber the host CPUs this process may run on
/// (oversubscribed: vCPU threads wait for each other's time slices).
pub fn oversubscribed(vcpus: usize) -> bool {
    let cpus = allowed_cpus().len();
    cpus > 0 && vcpus > cpus
}

/// vCPUs per host CPU above which the guest's barriers halt instead of
/// spinning (spinning waiters would take the time slices the last arrivals
/// need: a 128-vCPU broadcast on 2 CPUs took 31.8 s spinning, 2.0 s halting).
pub const HALTING_BARRIERS_ABOVE: usize = 4;

/// Whether the guest's barriers halt (`BOOT_FLAG_HALTING_BARRIERS`): only
/// when heavily oversubscribed, because their wake-up IPIs (vector 0xFE),
/// which the guest does not count, are counted by the host's counters.
pub fn halting_barriers(vcpus: usize) -> bool {
    let cpus = allowed_cpus().len();
    cpus > 0 && vcpus > cpus * HALTING_BARRIERS_ABOVE
}

/// Check a pinning list against the vCPU count and the allowed CPUs.
pub fn check_pin(pin: &[usize], vcpus: usize, allowed: &[usize]) -> Result<(), LeverError> {
    if pin.is_empty() {
        return Ok(());
    }
    if pin.len() < vcpus {
        return Err(LeverError::PinCount {
            cpus: pin.len(),
            vcpus,
        });
    }
    match pin.iter().find(|c| !allowed.contains(c)) {
        Some(&cpu) => Err(LeverError::NoSuchCpu {
            cpu,
            allowed: allowed
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(","),
        }),
        None => Ok(()),
    }
}

/// Pin the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_controls_are_kvm_bits_and_names() {
        use std::str::FromStr;
        let c: ExitControls = ["hlt", "pause"]
            .iter()
            .map(|n| ExitControl::from_str(n).unwrap())
            .collect();
        assert_eq!(c.bits(), 2 | 4);
        assert_eq!(
            ExitControls::from_bits(1 | 8 | 0x100).names(),
            ["mwait", "cstate"]
        );
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"["hlt","pause"]"#);
        let back: ExitControls = serde_json::from_str(r#"["hlt","pause"]"#).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn disallowed_exits_name_the_allowed_set() {
        let b = ExitControls::from_bits;
        assert!(check_disable_exits(b(2), b(2 | 4)).is_ok());
        let e = check_disable_exits(b(1 | 2), b(2 | 4))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--disable-exits mwait,hlt") && e.contains("[hlt,pause]"),
            "{e}"
        );
    }

    #[test]
    fn cpu_lists_and_pinning_checks() {
        assert_eq!(parse_cpu_list("0,2,4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("5-3").is_err());
        assert!(parse_cpu_list("").is_err());
        assert!(check_pin(&[0, 1], 2, &[0, 1]).is_ok());
        assert!(check_pin(&[], 4, &[0]).is_ok());
        assert_eq!(
            check_pin(&[0], 2, &[0, 1]),
            Err(LeverError::PinCount { cpus: 1, vcpus: 2 })
        );
        assert!(matches!(
            check_pin(&[0, 9], 2, &[0, 1]),
            Err(LeverError::NoSuchCpu { cpu: 9, .. })
        ));
    }

    #[test]
    fn this_process_may_run_somewhere() {
        assert!(!allowed_cpus().is_empty());
    }
}
