//! The levers' effects on KVM and the host: exit controls and halt polling
//! enabled on the VM (KVM capabilities), vCPU threads pinned. The levers as
//! data (which exits, which CPUs) are `ipivmm_analysis::mode::levers`.
//!
//! KVM_CAP_X86_DISABLE_EXITS must be enabled before any vCPU is created
//! (api.rst: "should be called before vCPUs are created"); the allowed bits
//! are what KVM_CHECK_EXTENSION returns for it.
use crate::error::RunError;
use ipivmm_analysis::mode::levers::ExitControls;
use kvm_bindings::{kvm_enable_cap, KVM_CAP_HALT_POLL, KVM_CAP_X86_DISABLE_EXITS};
use kvm_ioctls::VmFd;

/// Check `requested` exit controls against what KVM allows (KVM_CHECK_EXTENSION).
pub(crate) fn check_disable_exits(
    requested: ExitControls,
    allowed: ExitControls,
) -> Result<(), RunError> {
    if requested.bits() & !allowed.bits() == 0 {
        return Ok(());
    }
    Err(RunError::ExitsNotAllowed {
        asked: requested.names().join(","),
        allowed: allowed.names().join(","),
    })
}

/// The exit controls this KVM allows turning off.
pub(crate) fn allowed_exit_controls(kvm_or_vm: impl Fn(libc::c_ulong) -> i32) -> ExitControls {
    ExitControls::from_bits(kvm_or_vm(libc::c_ulong::from(KVM_CAP_X86_DISABLE_EXITS)).max(0) as u32)
}

/// Turn off the requested exits for the VM (before any vCPU exists).
pub(crate) fn disable_exits(vm: &VmFd, requested: ExitControls) -> Result<(), RunError> {
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
    vm.enable_cap(&cap).map_err(|e| RunError::Enable {
        cap: "KVM_CAP_X86_DISABLE_EXITS",
        err: e.to_string(),
    })
}

/// Set this VM's maximum halt-polling time.
pub(crate) fn set_halt_poll_ns(vm: &VmFd, ns: u32) -> Result<(), RunError> {
    if vm.check_extension_raw(libc::c_ulong::from(KVM_CAP_HALT_POLL)) <= 0 {
        return Err(RunError::NoHaltPoll);
    }
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_HALT_POLL,
        ..Default::default()
    };
    cap.args[0] = u64::from(ns);
    vm.enable_cap(&cap).map_err(|e| RunError::Enable {
        cap: "KVM_CAP_HALT_POLL",
        err: e.to_string(),
    })
}

/// Check a pinning list against the vCPU count and the allowed CPUs.
pub(crate) fn check_pin(pin: &[usize], vcpus: usize, allowed: &[usize]) -> Result<(), RunError> {
    if pin.is_empty() {
        return Ok(());
    }
    if pin.len() < vcpus {
        return Err(RunError::PinCount {
            cpus: pin.len(),
            vcpus,
        });
    }
    match pin.iter().find(|c| !allowed.contains(c)) {
        Some(&cpu) => Err(RunError::NoSuchCpu {
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
pub(crate) fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
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
    use ipivmm_analysis::mode::levers::ExitControl;

    #[test]
    fn exit_controls_are_kvms_bits() {
        use kvm_bindings::{
            KVM_X86_DISABLE_EXITS_CSTATE, KVM_X86_DISABLE_EXITS_HLT, KVM_X86_DISABLE_EXITS_MWAIT,
            KVM_X86_DISABLE_EXITS_PAUSE,
        };
        assert_eq!(ExitControl::Mwait.bit(), KVM_X86_DISABLE_EXITS_MWAIT);
        assert_eq!(ExitControl::Hlt.bit(), KVM_X86_DISABLE_EXITS_HLT);
        assert_eq!(ExitControl::Pause.bit(), KVM_X86_DISABLE_EXITS_PAUSE);
        assert_eq!(ExitControl::Cstate.bit(), KVM_X86_DISABLE_EXITS_CSTATE);
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
    fn pinning_checks() {
        assert!(check_pin(&[0, 1], 2, &[0, 1]).is_ok());
        assert!(check_pin(&[], 4, &[0]).is_ok());
        assert!(matches!(
            check_pin(&[0], 2, &[0, 1]),
            Err(RunError::PinCount { cpus: 1, vcpus: 2 })
        ));
        assert!(matches!(
            check_pin(&[0, 9], 2, &[0, 1]),
            Err(RunError::NoSuchCpu { cpu: 9, .. })
        ));
    }
}
