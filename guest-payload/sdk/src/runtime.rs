//! Entry point and per-vCPU bring-up. The host starts every vCPU at `_start`
//! in 64-bit mode with interrupts off, `rdi` = BootInfo GPA, `rsi` = vCPU
//! index, `rsp` = its stack (16-byte aligned), TR with IST1 set
//! (`ipivmm_abi` entry convention). The runtime validates the BootInfo, sets
//! up per-vCPU state (GS base), loads the IDT, enables the APIC in the chosen
//! mode, enables interrupts, says Hello, runs the user's `main` (registered
//! with [`crate::entry!`]) and sends Done(0) when it returns.

use crate::{apic, apic::Apic, control, control::features, cpu, idt, percpu, println, settings};
use core::arch::global_asm;
use ipivmm_abi::{
    ApicMode, BootInfo, IpiPath, ABI_VERSION, BOOT_INFO_MAGIC, KVM_FEATURE_PV_SEND_IPI_BIT,
    MAX_VCPUS,
};

// Clear DF and the frame pointer, then call Rust; the host's rsp is 16-byte
// aligned, so after `call` the callee sees the ABI's rsp % 16 == 8.
global_asm!(
    ".section .text._start, \"ax\"",
    ".global _start",
    "_start:",
    "cld",
    "xor ebp, ebp",
    "call {start}",
    "2:",
    "cli",
    "hlt",
    "jmp 2b",
    start = sym rust_start,
);

extern "Rust" {
    /// Defined by [`crate::entry!`].
    fn __ipivmm_guest_main(boot: &'static BootInfo, vcpu: usize);
}

/// The run's settings, as the runtime has always offered them (their home
/// is [`crate::settings`]).
pub use crate::settings::{ipi_path, ipi_vector, is_amd};

/// Checks the host's BootInfo before anything trusts it.
fn validate(boot: &BootInfo, vcpu: u64) -> Result<(), &'static [u8]> {
    if boot.magic != BOOT_INFO_MAGIC {
        return Err(b"BootInfo: bad magic");
    }
    if boot.abi_version != ABI_VERSION {
        return Err(b"BootInfo: ABI version mismatch");
    }
    if boot.vcpu_count == 0
        || boot.vcpu_count as usize > MAX_VCPUS
        || vcpu >= boot.vcpu_count as u64
    {
        return Err(b"BootInfo: vcpu_count or vCPU index out of range");
    }
    if boot.scratch_stride < percpu::PERCPU_RESERVED || boot.scratch_base == 0 {
        return Err(b"BootInfo: scratch area missing or smaller than 4 KiB per vCPU");
    }
    if boot.ipi_vector < 32 || boot.ipi_vector > 0xfe {
        return Err(b"BootInfo: ipi_vector must be in 32..=254");
    }
    if ApicMode::from_raw(boot.apic_mode).is_none() {
        return Err(b"BootInfo: unknown apic_mode");
    }
    if IpiPath::from_raw(boot.ipi_path).is_none() {
        return Err(b"BootInfo: unknown ipi_path");
    }
    Ok(())
}

/// CPU feature bits for Hello, and the vendor.
fn detect() -> u64 {
    let mut f = 0;
    let v = cpu::cpuid(0, 0);
    // "AuthenticAMD" / "HygonGenuine": EBX starts "Auth" / "Hygo".
    let amd = v.ebx == u32::from_le_bytes(*b"Auth") || v.ebx == u32::from_le_bytes(*b"Hygo");
    settings::set_amd(amd);
    if amd {
        f |= features::AMD;
    }
    if cpu::cpuid(1, 0).ecx & (1 << 21) != 0 {
        f |= features::X2APIC;
    }
    let ext = cpu::cpuid(0x8000_0000, 0).eax;
    if ext >= 0x8000_0001 && cpu::cpuid(0x8000_0001, 0).edx & (1 << 27) != 0 {
        f |= features::RDTSCP;
    }
    if ext >= 0x8000_0007 && cpu::cpuid(0x8000_0007, 0).edx & (1 << 8) != 0 {
        f |= features::INVARIANT_TSC;
    }
    let hv = cpu::cpuid(0x4000_0000, 0);
    let kvm = [hv.ebx, hv.ecx, hv.edx] == [0x4b4d_564b, 0x564b_4d56, 0x0000_004d]; // "KVMKVMKVM\0\0\0"
    if kvm && hv.eax >= 0x4000_0001 {
        let leaf = cpu::cpuid(0x4000_0001, 0).eax;
        if leaf & (1 << KVM_FEATURE_PV_SEND_IPI_BIT) != 0 {
            f |= features::PV_SEND_IPI;
        }
        // The PV features the host's levers decide, read back so a run
        // shows what the guest was offered (the banner, Hello).
        for (bit, feature) in features::KVM_LEAF {
            if leaf & (1 << bit) != 0 {
                f |= feature;
            }
        }
    }
    f
}

extern "C" fn rust_start(boot: *const BootInfo, vcpu: u64) -> ! {
    // SAFETY: the entry convention puts the BootInfo GPA in rdi; the host
    // identity-maps it. Only read here, and validated before anything else.
    let boot: &'static BootInfo = unsafe { &*boot };
    if let Err(msg) = validate(boot, vcpu) {
        control::panic_as(vcpu as u32, msg);
    }
    let vcpu = vcpu as usize;
    percpu::set_boot_info(boot);
    // SAFETY: validated above: our own scratch block of >= 4 KiB, first call
    // on this vCPU, interrupts are still off.
    unsafe { percpu::init(boot, vcpu) };
    // From here on panics are reported normally.
    settings::set_ipi(boot);
    let features = detect();
    idt::init_and_load();

    let mode = ApicMode::from_raw(boot.apic_mode).unwrap_or(ApicMode::Xapic);
    if mode == ApicMode::X2apic && features & features::X2APIC == 0 {
        panic!("x2APIC mode requested but CPUID.1:ECX[21] (x2APIC) is clear");
    }
    if ipi_path().is_hypercall() && features & features::PV_SEND_IPI == 0 {
        panic!("PV IPI path requested but CPUID 0x40000001 lacks KVM_FEATURE_PV_SEND_IPI");
    }
    settings::set_apic_mode(mode);
    let apic = apic::current();
    apic.enable();
    let id = apic.id();
    if id != boot.apic_id(vcpu) {
        // IPIs are addressed by BootInfo.apic_ids: a mismatch would send them
        // to the wrong vCPU (or nowhere), so stop here with both values.
        panic!(
            "APIC ID register reads {id:#x} but BootInfo.apic_ids[{vcpu}] = {:#x} ({mode:?})",
            boot.apic_id(vcpu)
        );
    }
    cpu::enable_interrupts();
    if vcpu == 0 {
        println!(
            "ipivmm-guest: {} vCPUs, apic {:?}, path {:?}, vector {:#x}, features {:#x} ({})",
            boot.vcpu_count,
            mode,
            ipi_path(),
            boot.ipi_vector,
            features,
            features::Names(features)
        );
    }
    control::hello(features);
    // SAFETY: the symbol is defined by `entry!` with exactly this signature.
    unsafe { __ipivmm_guest_main(boot, vcpu) };
    control::done(0, "ok")
}
