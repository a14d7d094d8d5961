//! Stage 0 of a run: every check before a VM exists. The payload is read and
//! checked, /dev/kvm opened, the configuration validated against it, the host
//! fingerprinted once and the mode checked against it. What it returns is
//! what the later stages trust without checking again.
use super::RunError;
use crate::config::VmConfig;
use crate::host::device;
use crate::mode::levers;
use crate::vm::Prepared;
use crate::vm::{load_payload, max_vcpus, x2apic_api};

/// Check `config` for a run here; nothing is created yet.
pub fn prepare(config: &VmConfig) -> Result<Prepared, RunError> {
    let image = load_payload(&config.payload)?;
    let kvm = device::open(&config.kvm_device).map_err(crate::vm::VmError::from)?;
    config
        .validate(max_vcpus(&kvm))
        .map_err(crate::vm::VmError::from)?;
    levers::check_pin(&config.pin, config.vcpus, &levers::allowed_cpus())
        .map_err(crate::vm::VmError::from)?;
    let host = ipivmm_host::facts::probe().ok();
    let plan = config.check_mode(host.as_ref())?;
    let max_id = crate::mode::apicv::apic_id(plan.lever, config.vcpus.saturating_sub(1));
    let x2apic_api = x2apic_api::decide(config, x2apic_api::supported(&kvm), max_id)
        .map_err(crate::vm::VmError::from)?;
    Ok(Prepared {
        config: config.clone(),
        image,
        kvm,
        host,
        plan,
        x2apic_api,
    })
}
