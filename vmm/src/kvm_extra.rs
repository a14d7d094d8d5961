//! KVM ioctls that kvm-ioctls does not wrap, each wrapped once here.
use kvm_bindings::{kvm_interrupt, KVMIO};
use kvm_ioctls::VcpuFd;
use vmm_sys_util::ioctl::ioctl_with_ref;

mod nr {
    use super::{kvm_interrupt, KVMIO};
    use vmm_sys_util::ioctl_iow_nr;
    // KVM_INTERRUPT = _IOW(KVMIO, 0x86, struct kvm_interrupt).
    ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);
}
use nr::KVM_INTERRUPT;

/// KVM_INTERRUPT: queue external interrupt `vector` on a vCPU of a VM
/// without an in-kernel irqchip (api.rst: only valid then).
pub fn interrupt(vcpu: &VcpuFd, vector: u8) -> std::io::Result<()> {
    let irq = kvm_interrupt {
        irq: u32::from(vector),
    };
    // SAFETY: `vcpu` is a valid vCPU fd and `irq` is a valid kvm_interrupt
    // that outlives the call; the kernel only reads it.
    let ret = unsafe { ioctl_with_ref(vcpu, KVM_INTERRUPT(), &irq) };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A KVM ioctl that failed, and which one (the build turns it into
/// `RunError::Kvm`).
#[derive(Debug)]
pub struct KvmCall {
    /// Which operation.
    pub op: &'static str,
    /// The errno.
    pub err: kvm_ioctls::Error,
}

impl KvmCall {
    /// `map_err(KvmCall::named("KVM_..."))`.
    pub fn named(op: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> Self {
        move |err| Self { op, err }
    }
}
