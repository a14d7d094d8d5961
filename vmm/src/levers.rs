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
use serde::Serialize;

/// Exit controls by name, as `--disable-exits` takes them.
pub const EXIT_CONTROLS: [(&str, u32); 4] = [
    ("mwait", KVM_X86_DISABLE_EXITS_MWAIT),
    ("hlt", KVM_X86_DISABLE_EXITS_HLT),
    ("pause", KVM_X86_DISABLE_EXITS_PAUSE),
    ("cstate", KVM_X86_DISABLE_EXITS_CSTATE),
];

/// Names of the exit-control bits set in `bits`.
pub fn exit_control_names(bits: u32) -> Vec<&'static str> {
    EXIT_CONTROLS
        .iter()
        .filter(|(_, b)| bits & b != 0)
        .map(|(n, _)| *n)
        .collect()
}

/// Parse `hlt,pause,...` into KVM_X86_DISABLE_EXITS_* bits.
pub fn parse_disable_exits(s: &str) -> Result<u32, String> {
    let mut bits = 0;
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let bit = EXIT_CONTROLS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| {
                format!("unknown exit '{name}': expected a list of mwait, hlt, pause, cstate")
            })?;
        bits |= bit;
    }
    Ok(bits)
}

/// Whether the APICv/AVIC of this VM should be left alone or inhibited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApicvRequest {
    /// Whatever the host's module parameters give.
    Host,
    /// Inhibited for this VM with a lever the vendor honours.
    Inhibit,
}

/// Errors enabling a lever. Each names what the host allows.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeverError {
    /// Exit controls KVM does not allow.
    #[error("--disable-exits {asked}: this KVM allows only [{allowed}] (KVM_CAP_X86_DISABLE_EXITS); drop the others")]
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
    #[error("--halt-poll-ns needs KVM_CAP_HALT_POLL (Linux 5.15+), which this KVM lacks; use the kvm.halt_poll_ns module parameter instead")]
    NoHaltPoll,
    /// A pinning CPU that does not exist or is not allowed.
    #[error(
        "--pin: host CPU {cpu} is not online or not allowed for this process (allowed: {allowed})"
    )]
    NoSuchCpu {
        /// The CPU.
        cpu: usize,
        /// Allowed CPUs.
        allowed: String,
    },
    /// Fewer CPUs than vCPUs.
    #[error("--pin lists {cpus} CPUs for {vcpus} vCPUs: give one host CPU per vCPU")]
    PinCount {
        /// CPUs listed.
        cpus: usize,
        /// vCPUs.
        vcpus: usize,
    },
}

/// Check `requested` exit-control bits against `allowed` (KVM_CHECK_EXTENSION).
pub fn check_disable_exits(requested: u32, allowed: u32) -> Result<(), LeverError> {
    if requested & !allowed == 0 {
        return Ok(());
    }
    Err(LeverError::ExitsNotAllowed {
        asked: exit_control_names(requested).join(","),
        allowed: exit_control_names(allowed).join(","),
    })
}

/// Turn off the requested exits for the VM (before any vCPU exists).
pub fn disable_exits(vm: &VmFd, requested: u32) -> Result<(), LeverError> {
    if requested == 0 {
        return Ok(());
    }
    let allowed = vm
        .check_extension_raw(libc::c_ulong::from(KVM_CAP_X86_DISABLE_EXITS))
        .max(0) as u32;
    check_disable_exits(requested, allowed)?;
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_X86_DISABLE_EXITS,
        ..Default::default()
    };
    cap.args[0] = u64::from(requested);
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
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET only reads the initialized set for indices below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
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
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked against the allowed set, so it is < CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 = this thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_lists_parse_to_kvm_bits() {
        assert_eq!(parse_disable_exits("hlt,pause").unwrap(), 2 | 4);
        assert_eq!(parse_disable_exits("mwait, cstate").unwrap(), 1 | 8);
        assert_eq!(parse_disable_exits("").unwrap(), 0);
        let e = parse_disable_exits("hlt,nope").unwrap_err();
        assert!(
            e.contains("'nope'") && e.contains("mwait, hlt, pause, cstate"),
            "{e}"
        );
    }

    #[test]
    fn disallowed_exits_name_the_allowed_set() {
        assert!(check_disable_exits(2, 2 | 4).is_ok());
        let e = check_disable_exits(1 | 2, 2 | 4).unwrap_err().to_string();
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
