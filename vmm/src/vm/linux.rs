//! Building a Linux guest's VM (`--kernel`): the payload's machine (RAM,
//! irqchip, vCPUs, levers) with the 64-bit boot protocol instead of the
//! payload ABI (Documentation/arch/x86/boot.rst, "64-bit Boot Protocol"):
//! the bzImage's protected-mode kernel at 1 MiB (linux-loader's loader),
//! the zero page in `rsi`, the command line, the initrd, the ACPI tables;
//! vCPU 0 in long mode at the 64-bit entry with an identity map, the other
//! vCPUs as KVM created them, waiting for the INIT and start-up IPIs their
//! kernel sends (KVM's LAPIC does that part).
use super::{
    create_memory, create_vcpus, kvm_err, set_cpuid, synic_lever, vm_wide_setup,
    write_system_tables, x2apic_api, Prepared, RunError, Vm,
};
use crate::arch::regs;
use crate::linux::{acpi, boot_params, layout, LinuxImage};
use crate::mode::apicv::InhibitLever;
use crate::mode::Irqchip;
use kvm_bindings::{
    kvm_fpu, kvm_mp_state, kvm_regs, KVM_MAX_CPUID_ENTRIES, KVM_MP_STATE_UNINITIALIZED,
};
use kvm_ioctls::{Cap, VcpuFd};
use linux_loader::loader::{bzimage::BzImage, KernelLoader};
use std::io::Cursor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// CPUID.1:ECX bit 24: the LAPIC timer's TSC-deadline mode. KVM emulates
/// it (KVM_CAP_TSC_DEADLINE_TIMER) but leaves it out of
/// KVM_GET_SUPPORTED_CPUID; with it, ARAT and kvmclock's TSC frequency
/// Linux needs no PIT to calibrate against (`apic_needs_pit`), so none is
/// created.
pub(crate) const TSC_DEADLINE_BIT: u32 = 1 << 24;

/// Stage 1 for a Linux guest (`Vm::build` hands it over).
pub fn build(p: &Prepared, img: &LinuxImage) -> Result<Vm, RunError> {
    let (kvm, config, lever) = (&p.kvm, &p.config, p.plan.lever);
    let fd = kvm.create_vm().map_err(kvm_err("KVM_CREATE_VM"))?;
    let memory = create_memory(&fd, config.memory_bytes)?;
    let apic_ids: Vec<u32> = (0..config.vcpus).map(|i| lever.apic_id(i)).collect();
    let irqchip = crate::irqchip::for_mode(config.irqchip, &apic_ids, config.apic);
    vm_wide_setup(&fd, config, irqchip.as_ref(), lever)?;
    if p.x2apic_api {
        x2apic_api::enable(&fd).map_err(kvm_err("KVM_ENABLE_CAP(KVM_CAP_X2APIC_API)"))?;
    }
    let mut supported = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(kvm_err("KVM_GET_SUPPORTED_CPUID"))?;
    if kvm.check_extension(Cap::TscDeadlineTimer) {
        for e in supported
            .as_mut_slice()
            .iter_mut()
            .filter(|e| e.function == 1)
        {
            e.ecx |= TSC_DEADLINE_BIT;
        }
    }
    let entry = layout::KERNEL_START + layout::ENTRY_64_OFFSET;
    let vcpus = create_vcpus(&fd, &apic_ids, |vcpu, index, apic_id| {
        set_cpuid(vcpu, &supported, config, apic_id)?;
        if index == 0 {
            boot_cpu_registers(vcpu, entry)?;
        }
        if lever == InhibitLever::HypervSynic && index == 0 {
            synic_lever(vcpu)?;
        }
        let modified_id = (lever == InhibitLever::ApicIdModified).then_some(apic_id);
        irqchip.setup_vcpu(vcpu, modified_id)?;
        if index > 0 {
            wait_for_init(vcpu)?;
        }
        Ok(())
    })?;
    let tsc_khz = vcpus
        .first()
        .and_then(|v| v.get_tsc_khz().ok())
        .map_or(0, u64::from);
    load(&memory, config.memory_bytes, config.irqchip, &apic_ids, img)?;
    Ok(Vm {
        fd,
        memory,
        vcpus,
        apic_ids,
        tsc_khz,
        irqchip,
    })
}

/// vCPU 0 at the 64-bit entry: long mode with the identity map and a
/// flat GDT (the payload's: the kernel loads its own at once), `rsi` the
/// zero page, interrupts off.
fn boot_cpu_registers(vcpu: &VcpuFd, entry: u64) -> Result<(), RunError> {
    let sregs = vcpu.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    vcpu.set_sregs(&regs::boot_sregs(sregs, 0))
        .map_err(kvm_err("KVM_SET_SREGS"))?;
    let r = kvm_regs {
        rip: entry,
        rsp: layout::BOOT_STACK_TOP,
        rsi: layout::ZERO_PAGE,
        rflags: 0x2,
        ..Default::default()
    };
    vcpu.set_regs(&r).map_err(kvm_err("KVM_SET_REGS"))?;
    let fpu = kvm_fpu {
        fcw: 0x37f,
        ..Default::default()
    };
    vcpu.set_fpu(&fpu).map_err(kvm_err("KVM_SET_FPU"))
}

/// An application processor waits for its INIT and start-up IPI, as KVM
/// creates it (`Chip::setup_vcpu` makes every vCPU runnable for the
/// payload, which enters them all at once).
pub(super) fn wait_for_init(vcpu: &VcpuFd) -> Result<(), RunError> {
    vcpu.set_mp_state(kvm_mp_state {
        mp_state: KVM_MP_STATE_UNINITIALIZED,
    })
    .map_err(kvm_err("KVM_SET_MP_STATE"))
}

/// The kernel, initrd, command line, ACPI tables, zero page and boot page
/// tables into guest RAM.
fn load(
    memory: &GuestMemoryMmap,
    mem_bytes: u64,
    irqchip: Irqchip,
    apic_ids: &[u32],
    img: &LinuxImage,
) -> Result<(), RunError> {
    let mem = |e: vm_memory::GuestMemoryError| RunError::Memory(e.to_string());
    // The page tables and vCPU 0's GDT and TSS of the payload's machine.
    write_system_tables(memory, 1)?;
    let loaded = BzImage::load(
        memory,
        Some(GuestAddress(layout::KERNEL_START)),
        &mut Cursor::new(&img.kernel[..]),
        Some(GuestAddress(layout::KERNEL_START)),
    )
    .map_err(|e| RunError::Load(format!("bzImage: {e}")))?;
    let hdr = loaded
        .setup_header
        .ok_or_else(|| RunError::Load("bzImage: no setup header".into()))?;
    let initrd = match &img.initrd {
        Some((bytes, at)) => {
            memory.write_slice(bytes, GuestAddress(*at)).map_err(mem)?;
            Some(boot_params::Initrd {
                addr: *at,
                len: bytes.len() as u64,
            })
        }
        None => None,
    };
    let mut line = img.cmdline.as_bytes().to_vec();
    line.push(0);
    memory
        .write_slice(&line, GuestAddress(layout::CMDLINE))
        .map_err(mem)?;
    let platform = acpi::Platform {
        apic_ids: apic_ids.to_vec(),
        ioapic: irqchip == Irqchip::Kernel,
    };
    let tables = acpi::tables(&platform).map_err(|e| RunError::Load(e.to_string()))?;
    for t in &tables {
        memory
            .write_slice(&t.bytes, GuestAddress(t.addr))
            .map_err(mem)?;
    }
    let params = boot_params::build(hdr, initrd, &layout::e820(mem_bytes), layout::ACPI_START);
    memory
        .write_obj(params, GuestAddress(layout::ZERO_PAGE))
        .map_err(mem)?;
    Ok(())
}
