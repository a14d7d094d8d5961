//! Stage 0 of a run: every check before a VM exists. The payload is read and
//! checked, /dev/kvm opened, the configuration validated against it, the host
//! fingerprinted once and the mode checked against it. What it returns is
//! what the later stages trust without checking again.
use crate::config::VmConfig;
use crate::error::RunError;
use crate::host::device;
use crate::levers;
use crate::vm::Prepared;
use crate::vm::{load_payload, x2apic_api};
use ipivmm_host::facts::KvmBackend;

impl VmConfig {
    /// Every check of a run of this configuration here, before any VM: the
    /// payload read and checked, the KVM device opened, the configuration
    /// validated against it, the mode against the host (what `run` and
    /// `--dry-run` do first). Err: why it cannot run, naming the fix
    /// ([`RunError::host_cannot_run`](crate::RunError::host_cannot_run)
    /// tells the host's reasons from the request's).
    pub fn prepare(&self) -> Result<Prepared, RunError> {
        prepare(self)
    }
}

/// Check `config` for a run here; nothing is created yet.
pub(crate) fn prepare(config: &VmConfig) -> Result<Prepared, RunError> {
    let linux = config
        .payload
        .linux()
        .map(|g| linux_image(g, config))
        .transpose()?;
    let multiboot = config
        .payload
        .multiboot()
        .map(|g| multiboot_image(g, config))
        .transpose()?;
    let image = load_payload(&config.payload)?;
    let kvm = device::open(&config.kvm_device)?;
    config.validate(kvm.get_max_vcpus())?;
    levers::check_pin(
        &config.levers.pin,
        config.vcpus,
        &crate::mode::levers::allowed_cpus(),
    )?;
    let host = ipivmm_host::facts::probe().ok();
    if let Some(g) = config.payload.linux() {
        let software = host
            .as_ref()
            .is_some_and(|h| h.backend == KvmBackend::KvmPvm);
        g.check_backend(software)?;
    }
    let plan = config.check_mode(host.as_ref())?;
    let max_id = plan.lever.apic_id(config.vcpus.saturating_sub(1));
    let x2apic_api = x2apic_api::decide(config, x2apic_api::supported(&kvm), max_id)?;
    Ok(Prepared {
        config: config.clone(),
        image,
        linux,
        multiboot,
        kvm,
        host,
        plan,
        x2apic_api,
    })
}

/// A multiboot kernel's mode checked and its file read and checked: it
/// starts its other vCPUs by INIT and start-up IPIs, which need KVM's LAPIC.
fn multiboot_image(
    g: &crate::multiboot::MultibootGuest,
    c: &VmConfig,
) -> Result<crate::multiboot::MultibootImage, RunError> {
    if c.irqchip == crate::mode::Irqchip::User {
        return Err(RunError::Multiboot(
            "--irqchip user with a multiboot --kernel: the kernel starts its other vCPUs by INIT and start-up IPIs, which ipivmm's LAPIC model does not deliver: use --irqchip kernel or split".into(),
        ));
    }
    crate::multiboot::load(g, c.memory_bytes).map_err(RunError::Multiboot)
}

/// A Linux guest's mode checked, its command line built and its files
/// read and checked (before /dev/kvm is opened: the user's mistakes first).
fn linux_image(
    g: &crate::linux::LinuxGuest,
    c: &VmConfig,
) -> Result<crate::linux::LinuxImage, crate::linux::LinuxError> {
    use crate::linux::{cmdline, load};
    g.check_mode(c.irqchip, c.vcpus)?;
    let init = cmdline::InitArgs {
        workload: g.workload,
        iterations: c.iterations,
        warmup: c.warmup,
        target: c.target_wait,
        params: c.params,
    };
    load(g, c.memory_bytes, cmdline::build(c.apic, &init, &g.cmdline))
}
