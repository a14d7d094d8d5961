//! Building a VM: the one place that talks to KVM for setup.
//!
//! KVM ordering rules that matter here (Documentation/virt/kvm/api.rst):
//! - KVM_CREATE_IRQCHIP / KVM_CAP_SPLIT_IRQCHIP "must be called before any
//!   vCPU is created" (the LAPIC is instantiated with the vCPU).
//! - KVM_SET_CPUID2 must precede the first KVM_RUN.
pub mod boot_info;
mod linux;
mod multiboot;
mod prepared;
pub mod x2apic_api;

use crate::arch::{cpuid, gdt, layout, paging, regs};
use crate::config::{PayloadSource, VmConfig};
use crate::error::RunError;
use crate::irqchip::{Chip, SharedChip};
use crate::levers;
use crate::mode::apicv::{self, InhibitLever};
use crate::mode::ApicMode;
use crate::payload::image::{self, ImageError, MAX_PAYLOAD_FILE};
use kvm_bindings::{
    kvm_enable_cap, kvm_msr_entry, kvm_pit_config, kvm_userspace_memory_region, Msrs,
    KVM_CAP_HYPERV_SYNIC2, KVM_MAX_CPUID_ENTRIES,
};
use kvm_ioctls::{VcpuFd, VmFd};
use linux_loader::loader::{elf::Elf, KernelLoader};
pub use prepared::Prepared;
use std::io::Cursor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

fn kvm_err(op: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> RunError {
    move |err| RunError::Kvm { op, err }
}

/// The payload's bytes from wherever the configuration says.
pub(crate) fn payload_bytes(source: &PayloadSource) -> Result<Vec<u8>, RunError> {
    match source {
        PayloadSource::Builtin => Ok(crate::payload::BUILTIN_PAYLOAD.to_vec()),
        PayloadSource::Bytes(b) => Ok(b.clone()),
        // A kernel is read and checked by `linux::load`, not as an ELF.
        PayloadSource::Linux(_) => Ok(Vec::new()),
        // Read and checked by `multiboot::load` at stage 0.
        PayloadSource::Multiboot(_) => Ok(Vec::new()),
        PayloadSource::File(path) => {
            // A regular file, opened without blocking (a FIFO is refused,
            // not waited on), never more than the payload limit in memory.
            crate::inputs::read_bytes(path, MAX_PAYLOAD_FILE).map_err(|problem| {
                match std::fs::metadata(path) {
                    Ok(m) if m.is_file() && m.len() > MAX_PAYLOAD_FILE => {
                        ImageError::TooLarge(m.len()).into()
                    }
                    _ => RunError::PayloadRead {
                        path: path.display().to_string(),
                        problem,
                    },
                }
            })
        }
    }
}

/// Read and check the payload the configuration names (no KVM needed).
pub(crate) fn load_payload(source: &PayloadSource) -> Result<Vec<u8>, RunError> {
    let bytes = payload_bytes(source)?;
    if source.linux().is_none() && source.multiboot().is_none() {
        image::check_loadable(&bytes)?;
    }
    Ok(bytes)
}

/// A VM ready to run: memory written, vCPUs in long mode at the entry point.
pub struct Vm {
    /// The VM fd.
    pub fd: VmFd,
    /// Guest RAM.
    pub memory: GuestMemoryMmap,
    /// vCPU fds, index = vCPU index.
    pub vcpus: Vec<VcpuFd>,
    /// APIC ID of each vCPU.
    pub apic_ids: Vec<u32>,
    /// TSC frequency (KVM_GET_TSC_KHZ), 0 if unknown.
    pub tsc_khz: u64,
    /// The irqchip (`--irqchip`), created with the VM; the bus and the vCPU
    /// threads share it.
    pub irqchip: SharedChip,
}

impl Vm {
    /// Stage 1 of a run: the VM of a prepared (checked) configuration,
    /// its payload loaded, APICv inhibited with the plan's lever.
    pub fn build(p: &Prepared) -> Result<Self, RunError> {
        if let Some(img) = &p.linux {
            return linux::build(p, img);
        }
        if let Some(img) = &p.multiboot {
            return multiboot::build(p, img);
        }
        let (kvm, config, image_bytes, lever) = (&p.kvm, &p.config, &p.image[..], p.plan.lever);
        let image = image::ImageInfo::check(image_bytes)?;
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
            setup_vcpu(vcpu, &supported, config, index, apic_id, image.entry, lever)?;
            // The LAPIC, the irqchip's; the APIC-ID lever programs its ID.
            let modified_id = (lever == InhibitLever::ApicIdModified).then_some(apic_id);
            Ok(irqchip.setup_vcpu(vcpu, modified_id)?)
        })?;
        let tsc_khz = vcpus
            .first()
            .and_then(|v| v.get_tsc_khz().ok())
            .map_or(0, u64::from);
        load_guest(&memory, config, &apic_ids, tsc_khz, image_bytes)?;
        Ok(Self {
            fd,
            memory,
            vcpus,
            apic_ids,
            tsc_khz,
            irqchip,
        })
    }
}

/// Create and set up one vCPU per entry of `apic_ids`, on as many threads
/// as the host has CPUs: KVM_CREATE_VCPU and the setup ioctls cost
/// 50–300 µs each (KVM_CREATE_VCPU grows with the vCPUs already created),
/// most of a large VM's setup. Worker `w` takes the indices `w`, `w + W`, …
/// so the costly late creations are shared; the first error is returned.
fn create_vcpus(
    fd: &VmFd,
    apic_ids: &[u32],
    setup: impl Fn(&VcpuFd, usize, u32) -> Result<(), RunError> + Sync,
) -> Result<Vec<VcpuFd>, RunError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, apic_ids.len().max(1));
    let one = |index: usize| -> Result<VcpuFd, RunError> {
        let vcpu = fd.create_vcpu(index as u64).map_err(|err| {
            if err.errno() != libc::EMFILE {
                return kvm_err("KVM_CREATE_VCPU")(err);
            }
            // The fds open before the VM existed are a few; count 16.
            let fds = crate::host::fds::FdLimit {
                limit: rustix::process::getrlimit(rustix::process::Resource::Nofile)
                    .current
                    .unwrap_or(u64::MAX),
                open: 16,
                vcpus: apic_ids.len(),
            };
            RunError::FdLimit {
                index,
                vcpus: apic_ids.len(),
                limit: fds.limit,
                want: fds.needed(12),
            }
        })?;
        setup(&vcpu, index, apic_ids[index])?;
        Ok(vcpu)
    };
    let chunk = |w: usize| -> Result<Vec<(usize, VcpuFd)>, RunError> {
        (w..apic_ids.len())
            .step_by(workers)
            .map(|i| one(i).map(|v| (i, v)))
            .collect()
    };
    let parts: Vec<Result<Vec<(usize, VcpuFd)>, RunError>> = if workers == 1 {
        vec![chunk(0)]
    } else {
        std::thread::scope(|s| {
            // A worker that cannot be started leaves its share to this thread.
            let others: Vec<_> = (1..workers)
                .map(|w| {
                    std::thread::Builder::new()
                        .name(format!("vcpu-setup{w}"))
                        .spawn_scoped(s, move || chunk(w))
                        .map_err(|_| w)
                })
                .collect();
            let mut parts = vec![chunk(0)];
            for h in others {
                parts.push(match h {
                    Ok(h) => h
                        .join()
                        .unwrap_or_else(|_| Err(RunError::Thread("it panicked".into()))),
                    Err(w) => chunk(w),
                });
            }
            parts
        })
    };
    let mut slots: Vec<Option<VcpuFd>> = (0..apic_ids.len()).map(|_| None).collect();
    for part in parts {
        for (i, vcpu) in part? {
            slots[i] = Some(vcpu);
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// What must exist before any vCPU (api.rst): the irqchip, the exit
/// controls; then the per-VM levers.
fn vm_wide_setup(
    fd: &VmFd,
    config: &VmConfig,
    irqchip: &dyn Chip,
    lever: InhibitLever,
) -> Result<(), RunError> {
    irqchip.create(fd)?;
    levers::disable_exits(fd, config.levers.disabled_exits)?;
    if let Some(ns) = config.levers.halt_poll_ns {
        levers::set_halt_poll_ns(fd, ns)?;
    }
    if lever == InhibitLever::PitReinject {
        // Reinjection is the default PIT policy; AVIC is inhibited while it is on.
        fd.create_pit2(kvm_pit_config::default())
            .map_err(kvm_err("KVM_CREATE_PIT2"))?;
    }
    Ok(())
}

/// CPUID, registers and the per-vCPU APICv lever of vCPU `index` (its
/// LAPIC is the irqchip's: `Chip::setup_vcpu`).
fn setup_vcpu(
    vcpu: &VcpuFd,
    supported: &kvm_bindings::CpuId,
    config: &VmConfig,
    index: usize,
    apic_id: u32,
    entry: u64,
    lever: InhibitLever,
) -> Result<(), RunError> {
    set_cpuid(vcpu, supported, config, apic_id)?;
    setup_vcpu_registers(vcpu, index, entry)?;
    // Only with KVM's LAPIC (the plan gives the user irqchip `NoIrqchip`).
    if lever == InhibitLever::HypervSynic && index == 0 {
        // One vCPU's AutoEOI SINT inhibits APICv for the whole VM.
        synic_lever(vcpu)?;
    }
    Ok(())
}

/// Gives vCPU `vcpu` (APIC ID `apic_id`) the CPUID of `config`: `supported`
/// (KVM_GET_SUPPORTED_CPUID, as the VM kind adjusted it) shaped by the mode
/// and its levers. The one place a `VmConfig` becomes CPUID, for payload and
/// Linux VMs alike.
pub(super) fn set_cpuid(
    vcpu: &VcpuFd,
    supported: &kvm_bindings::CpuId,
    config: &VmConfig,
    apic_id: u32,
) -> Result<(), RunError> {
    let mut entries = supported.clone();
    let shape = cpuid::CpuidShape {
        apic_id,
        vcpu_count: config.vcpus as u32,
        x2apic: config.apic == ApicMode::X2apic,
        pv_send_ipi: config.ipi.is_hypercall(),
        levers: config.levers.kvm_cpuid_bits(),
    };
    cpuid::shape(entries.as_mut_slice(), &shape)?;
    vcpu.set_cpuid2(&entries).map_err(kvm_err("KVM_SET_CPUID2"))
}

/// The SynIC lever (`apicv::InhibitLever::HypervSynic`): vCPU 0's SynIC
/// activated (KVM_CAP_HYPERV_SYNIC2: KVM leaves the guest's SynIC pages
/// alone) and SINT0 written from the host as `apicv::InhibitLever::synic_sint()`; KVM sets
/// APICV_INHIBIT_REASON_HYPERV for the VM in that write (hyperv.c:
/// synic_set_sint -> synic_update_vector).
fn synic_lever(vcpu: &VcpuFd) -> Result<(), RunError> {
    let cap = kvm_enable_cap {
        cap: KVM_CAP_HYPERV_SYNIC2,
        ..Default::default()
    };
    vcpu.enable_cap(&cap).map_err(|e| RunError::SynicLever {
        op: "KVM_ENABLE_CAP(KVM_CAP_HYPERV_SYNIC2) on vCPU 0",
        problem: e.to_string(),
    })?;
    let entries = [kvm_msr_entry {
        index: apicv::InhibitLever::HV_X64_MSR_SINT0,
        data: apicv::InhibitLever::synic_sint(),
        ..Default::default()
    }];
    let msrs = Msrs::from_entries(&entries).map_err(|e| RunError::SynicLever {
        op: "KVM_SET_MSRS(HV_X64_MSR_SINT0)",
        problem: format!("{e:?}"),
    })?;
    match vcpu.set_msrs(&msrs) {
        Ok(1) => Ok(()),
        Ok(n) => Err(RunError::SynicLever {
            op: "KVM_SET_MSRS(HV_X64_MSR_SINT0)",
            problem: format!("KVM set {n} of 1 MSRs (it refused the SINT)"),
        }),
        Err(e) => Err(RunError::SynicLever {
            op: "KVM_SET_MSRS(HV_X64_MSR_SINT0)",
            problem: e.to_string(),
        }),
    }
}

/// vCPUs per host CPU above which the guest's barriers halt instead of
/// spinning (spinning waiters would take the time slices the last arrivals
/// need: a 128-vCPU broadcast on 2 CPUs took 31.8 s spinning, 2.0 s halting).
const HALTING_BARRIERS_ABOVE: usize = 4;

/// Whether the guest's barriers halt (`BOOT_FLAG_HALTING_BARRIERS`): only
/// when heavily oversubscribed, because their wake-up IPIs (vector 0xFE),
/// which the guest does not count, are counted by the host's counters.
fn halting_barriers(vcpus: usize) -> bool {
    let cpus = crate::mode::levers::allowed_cpus().len();
    cpus > 0 && vcpus > cpus * HALTING_BARRIERS_ABOVE
}

/// Page tables, GDTs, the boot info and the payload into guest memory.
fn load_guest(
    memory: &GuestMemoryMmap,
    config: &VmConfig,
    apic_ids: &[u32],
    tsc_khz: u64,
    image_bytes: &[u8],
) -> Result<(), RunError> {
    write_system_tables(memory, config.vcpus)?;
    let flags = if halting_barriers(config.vcpus) {
        ipivmm_abi::BOOT_FLAG_HALTING_BARRIERS
    } else {
        0
    };
    let info = boot_info::build(config, apic_ids, tsc_khz, flags);
    memory
        .write_slice(&boot_info::encode(&info), GuestAddress(layout::BOOT_INFO))
        .map_err(|e| RunError::Memory(e.to_string()))?;
    Elf::load(
        memory,
        None,
        &mut Cursor::new(image_bytes),
        Some(GuestAddress(ipivmm_abi::PAYLOAD_START)),
    )
    .map(|_| ())
    .map_err(|e| RunError::Load(e.to_string()))
}

fn create_memory(fd: &VmFd, bytes: u64) -> Result<GuestMemoryMmap, RunError> {
    let memory = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), bytes as usize)])
        .map_err(|e| RunError::Memory(e.to_string()))?;
    for (slot, region) in memory.iter().enumerate() {
        let host = memory
            .get_host_address(region.start_addr())
            .map_err(|e| RunError::Memory(e.to_string()))?;
        let mr = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // SAFETY: the region is a live mmap owned by `memory`, which the Vm
        // keeps for as long as the VM fd exists; KVM only accesses it while
        // the VM lives.
        unsafe { fd.set_user_memory_region(mr) }.map_err(kvm_err("KVM_SET_USER_MEMORY_REGION"))?;
    }
    Ok(memory)
}

fn setup_vcpu_registers(vcpu: &VcpuFd, index: usize, entry: u64) -> Result<(), RunError> {
    let sregs = vcpu.get_sregs().map_err(kvm_err("KVM_GET_SREGS"))?;
    vcpu.set_sregs(&regs::boot_sregs(sregs, index))
        .map_err(kvm_err("KVM_SET_SREGS"))?;
    vcpu.set_regs(&regs::boot_regs(entry, index))
        .map_err(kvm_err("KVM_SET_REGS"))?;
    let fpu = kvm_bindings::kvm_fpu {
        fcw: 0x37f,
        ..Default::default()
    };
    vcpu.set_fpu(&fpu).map_err(kvm_err("KVM_SET_FPU"))
}

fn write_system_tables(memory: &GuestMemoryMmap, vcpus: usize) -> Result<(), RunError> {
    let w = |bytes: &[u8], at: u64| {
        memory
            .write_slice(bytes, GuestAddress(at))
            .map_err(|e| RunError::Memory(e.to_string()))
    };
    w(&paging::identity_map_tables(), layout::PML4)?;
    for i in 0..vcpus {
        w(&gdt::gdt_bytes(layout::tss_addr(i)), layout::gdt_addr(i))?;
        w(&gdt::tss_bytes(layout::ist_top(i)), layout::tss_addr(i))?;
    }
    Ok(())
}
