//! The run's settings, one home for the values the bring-up learns once and
//! every module reads: the measured IPI vector and the IPI path (from the
//! host's `BootInfo`), the CPU vendor (CPUID) and the APIC mode. The
//! runtime sets them before the payload's `main`; the IDT's handlers, the
//! IPI sends, the APIC access and the per-vCPU state read them here, so
//! none of them imports the runtime (nor each other) for them.
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use ipivmm_abi::{ApicMode, BootInfo, IpiPath};

static IS_AMD: AtomicBool = AtomicBool::new(false);
static IPI_VECTOR: AtomicU32 = AtomicU32::new(ipivmm_abi::DEFAULT_IPI_VECTOR as u32);
static IPI_PATH: AtomicU32 = AtomicU32::new(IpiPath::Icr as u32);
static APIC_MODE: AtomicU32 = AtomicU32::new(ApicMode::Xapic as u32);

/// Takes the IPI vector and path of a validated `boot`.
pub(crate) fn set_ipi(boot: &BootInfo) {
    IPI_VECTOR.store(boot.ipi_vector, Ordering::Relaxed);
    IPI_PATH.store(boot.ipi_path, Ordering::Relaxed);
}

/// Records the CPU vendor (CPUID leaf 0).
pub(crate) fn set_amd(amd: bool) {
    IS_AMD.store(amd, Ordering::Relaxed);
}

/// Records the APIC mode every vCPU uses.
pub(crate) fn set_apic_mode(mode: ApicMode) {
    APIC_MODE.store(mode as u32, Ordering::Relaxed);
}

/// True on AMD/Hygon CPUs (PV hypercalls use `vmmcall`).
pub fn is_amd() -> bool {
    IS_AMD.load(Ordering::Relaxed)
}

/// The measured IPI vector (`BootInfo::ipi_vector`).
#[inline(always)]
pub fn ipi_vector() -> u8 {
    IPI_VECTOR.load(Ordering::Relaxed) as u8
}

/// The IPI path (`BootInfo::ipi_path`).
pub fn ipi_path() -> IpiPath {
    IpiPath::from_raw(IPI_PATH.load(Ordering::Relaxed)).unwrap_or(IpiPath::Icr)
}

/// The APIC mode in use (every vCPU uses the same one).
pub fn apic_mode() -> ApicMode {
    ApicMode::from_raw(APIC_MODE.load(Ordering::Relaxed)).unwrap_or(ApicMode::Xapic)
}
