//! Building a multiboot kernel's VM (`--kernel` of a file with a
//! multiboot header: kvm-unit-tests' x86 tests): the payload's machine
//! (RAM, irqchip, vCPUs, levers, CPUID) with the kernel's pieces copied
//! where its ELF32 program headers or header address fields say, the
//! multiboot information after it, vCPU 0 in 32-bit protected mode at the
//! entry (`multiboot::entry`), the other vCPUs waiting for the INIT and
//! start-up IPIs the kernel sends (KVM's LAPIC delivers them).
use super::{
    create_memory, create_vcpus, kvm_err, set_cpuid, synic_lever, vm_wide_setup, x2apic_api,
};
use super::{Prepared, Vm};
use crate::error::RunError;
use crate::mode::apicv::InhibitLever;
use crate::multiboot::{entry, MultibootImage};
use kvm_bindings::{kvm_fpu, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Stage 1 for a multiboot kernel (`Vm::build` hands it over).
pub fn build(p: &Prepared, img: &MultibootImage) -> Result<Vm, RunError> {
    let (kvm, config, lever) = (&p.kvm, &p.config, p.plan.lever);
    let fd = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
    let memory = create_memory(&fd, config.memory_bytes)?;
    let apic_ids: Vec<u32> = (0..config.vcpus).map(|i| lever.apic_id(i)).collect();
    let irqchip = crate::irqchip::for_mode(config.irqchip, &apic_ids, config.apic);
    vm_wide_setup(&fd, config, irqchip.as_ref(), lever)?;
    if p.x2apic_api {
        x2apic_api::enable(&fd).map_err(kvm_err("KVM_ENABLE_CAP(KVM_CAP_X2APIC_API)"))?;
    }
    let supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    let vcpus = create_vcpus(&fd, &apic_ids, |vcpu, index, apic_id| {
        set_cpuid(vcpu, &supported, config, apic_id)?;
        if index == 0 {
            boot_cpu_registers(vcpu, img)?;
        }
        if lever == InhibitLever::HypervSynic && index == 0 {
            synic_lever(vcpu)?;
        }
        let modified_id = (lever == InhibitLever::ApicIdModified).then_some(apic_id);
        irqchip.setup_vcpu(vcpu, modified_id)?;
        if index > 0 {
            super::linux::wait_for_init(vcpu)?;
        }
        Ok(())
    })?;
    let tsc_khz = vcpus
        .first()
        .and_then(|v| v.get_tsc_khz().ok())
        .map_or(0, u64::from);
    load(&memory, img)?;
    Ok(Vm {
        fd,
        memory,
        vcpus,
        apic_ids,
        tsc_khz,
        irqchip,
    })
}

/// vCPU 0 at the multiboot entry: 32-bit protected mode, paging off.
fn boot_cpu_registers(vcpu: &VcpuFd, img: &MultibootImage) -> Result<(), RunError> {
    let sregs = vcpu.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    vcpu.set_sregs(&entry::sregs(sregs))
        .map_err(kvm_err("KVM_SET_SREGS"))?;
    vcpu.set_regs(&entry::regs(img.layout.entry, img.info.at))
        .map_err(kvm_err("KVM_SET_REGS"))?;
    let fpu = kvm_fpu {
        fcw: 0x37f,
        ..Default::default()
    };
    vcpu.set_fpu(&fpu).map_err(kvm_err("KVM_SET_FPU"))
}

/// The kernel's pieces (bss zeroed: fresh RAM is zero), the GDT and the
/// information block into guest RAM. Every address was checked against
/// RAM by `multiboot::check`.
fn load(memory: &GuestMemoryMmap, img: &MultibootImage) -> Result<(), RunError> {
    let mem = |e: vm_memory::GuestMemoryError| RunError::Memory(e.to_string());
    for s in &img.layout.segments {
        let bytes = img
            .bytes
            .get(s.file.clone())
            .ok_or_else(|| RunError::Load("multiboot: a segment past the file".into()))?;
        memory
            .write_slice(bytes, GuestAddress(s.addr))
            .map_err(mem)?;
    }
    memory
        .write_slice(&entry::gdt_bytes(), GuestAddress(entry::GDT_ADDR))
        .map_err(mem)?;
    memory
        .write_slice(&img.info.bytes, GuestAddress(img.info.at))
        .map_err(mem)
}
