//! Local APIC access, in the spirit of kvm-unit-tests' `apic_ops`: one trait,
//! an xAPIC (MMIO at 0xFEE00000) and an x2APIC (MSR 0x800+) implementation,
//! chosen at run time from `BootInfo::apic_mode`. The trait is raw register
//! access; `crate::ipi` builds the counted send operations on top of it.

use crate::{cpu, percpu};
use ipivmm_abi::{x2apic_logical_id, ApicMode, Icr, LogicalModel, SPURIOUS_VECTOR, XAPIC_BASE};

/// Register offsets (xAPIC MMIO offset; x2APIC MSR = 0x800 + offset / 16).
mod reg {
    pub const ID: u32 = 0x20;
    pub const EOI: u32 = 0xb0;
    pub const LDR: u32 = 0xd0;
    pub const DFR: u32 = 0xe0;
    pub const SVR: u32 = 0xf0;
    pub const ICR_LOW: u32 = 0x300;
    pub const ICR_HIGH: u32 = 0x310;
}

/// IA32_APIC_BASE bits.
const APIC_BASE_EXTD: u64 = 1 << 10;
const APIC_BASE_EN: u64 = 1 << 11;
/// SVR "APIC software enable".
const SVR_ENABLE: u32 = 1 << 8;

/// What a payload needs of its local APIC.
pub trait Apic {
    /// Enables the APIC (mode switch where needed, SVR = enable |
    /// [`SPURIOUS_VECTOR`]; TPR stays at its reset value 0).
    fn enable(&self);
    /// This APIC's ID.
    fn id(&self) -> u32;
    /// Signals end of interrupt.
    fn eoi(&self);
    /// Writes the ICR: `dest` = destination field (APIC ID, or logical
    /// destination), `low` = the low word (vector, modes, shorthand). Sends
    /// the IPI. Does not wait for delivery status: KVM never reports busy.
    fn write_icr(&self, dest: u32, low: u32);
    /// Writes `icr` as is: not checked, not counted (`crate::ipi::send`
    /// does both). For payloads that test what KVM does with odd commands.
    #[inline(always)]
    fn write_icr_raw(&self, icr: Icr) {
        self.write_icr(icr.dest(), icr.low())
    }
    /// Makes this APIC addressable in logical mode as vCPU `vcpu` and returns
    /// its logical ID, or None if it cannot be (xAPIC flat model: 8 vCPUs).
    /// The model is [`LogicalModel::default_for`] the APIC mode.
    fn setup_logical(&self, vcpu: usize) -> Option<u32>;
    /// As [`Apic::setup_logical`] in `model`: None if the APIC mode has no
    /// such model (x2APIC: cluster only) or it has no room for `vcpu`
    /// ([`LogicalModel::logical_id`]). Every vCPU of a VM should use the same
    /// model (KVM's fast path needs it; each APIC still matches by its own).
    fn setup_logical_model(&self, vcpu: usize, model: LogicalModel) -> Option<u32> {
        let _ = (vcpu, model);
        None
    }
}

/// Programs this vCPU's logical destination in `model` (the SDK's IDs:
/// [`LogicalModel::logical_id`]) and returns its logical ID; None if the
/// APIC mode has no such model or no room for this vCPU. Run it on every
/// target, then a barrier, before sending to logical destinations.
pub fn setup_logical(model: LogicalModel) -> Option<u32> {
    current().setup_logical_model(percpu::current().vcpu as usize, model)
}

/// xAPIC: MMIO registers, identity-mapped uncached by the host.
#[derive(Clone, Copy, Debug, Default)]
pub struct XApic;

impl XApic {
    fn read(&self, off: u32) -> u32 {
        // SAFETY: the host identity-maps the xAPIC page; aligned 32-bit reads
        // of defined registers.
        unsafe { core::ptr::read_volatile((XAPIC_BASE + off as u64) as *const u32) }
    }

    fn write(&self, off: u32, v: u32) {
        // SAFETY: as `read`; the write is the register access itself.
        unsafe { core::ptr::write_volatile((XAPIC_BASE + off as u64) as *mut u32, v) }
    }
}

impl Apic for XApic {
    fn enable(&self) {
        // SAFETY: IA32_APIC_BASE exists; only EN is set, base untouched.
        unsafe {
            let base = cpu::rdmsr(cpu::MSR_APIC_BASE);
            if base & APIC_BASE_EN == 0 {
                cpu::wrmsr(cpu::MSR_APIC_BASE, base | APIC_BASE_EN);
            }
        }
        self.write(reg::SVR, SVR_ENABLE | SPURIOUS_VECTOR as u32);
    }

    fn id(&self) -> u32 {
        self.read(reg::ID) >> 24
    }

    fn eoi(&self) {
        self.write(reg::EOI, 0);
    }

    fn write_icr(&self, dest: u32, low: u32) {
        // ICR high first: the low write sends.
        self.write(reg::ICR_HIGH, dest << 24);
        self.write(reg::ICR_LOW, low);
    }

    fn setup_logical(&self, vcpu: usize) -> Option<u32> {
        self.setup_logical_model(vcpu, LogicalModel::XapicFlat)
    }

    fn setup_logical_model(&self, vcpu: usize, model: LogicalModel) -> Option<u32> {
        // DFR first, then the 8-bit logical ID in LDR bits 31:24 (0, which
        // matches nothing but the broadcast, when the model has no room).
        let dfr = model.dfr()?;
        let id = model.logical_id(vcpu, self.id()).unwrap_or(0);
        self.write(reg::DFR, dfr);
        self.write(reg::LDR, id << 24);
        percpu::set_logical(model, id);
        (id != 0).then_some(id)
    }
}

/// x2APIC: MSRs, after setting IA32_APIC_BASE.EXTD.
#[derive(Clone, Copy, Debug, Default)]
pub struct X2Apic;

impl X2Apic {
    fn msr(off: u32) -> u32 {
        0x800 + off / 16
    }
}

impl Apic for X2Apic {
    fn enable(&self) {
        // SAFETY: the runtime checked CPUID.1:ECX[21] (x2APIC) before
        // choosing this mode. xAPIC -> x2APIC is a legal transition; from
        // disabled, enable xAPIC first (KVM rejects disabled -> x2APIC).
        unsafe {
            let base = cpu::rdmsr(cpu::MSR_APIC_BASE);
            if base & APIC_BASE_EN == 0 {
                cpu::wrmsr(cpu::MSR_APIC_BASE, base | APIC_BASE_EN);
            }
            if base & APIC_BASE_EXTD == 0 {
                cpu::wrmsr(cpu::MSR_APIC_BASE, base | APIC_BASE_EN | APIC_BASE_EXTD);
            }
            cpu::wrmsr(
                Self::msr(reg::SVR),
                (SVR_ENABLE | SPURIOUS_VECTOR as u32) as u64,
            );
        }
    }

    fn id(&self) -> u32 {
        // SAFETY: x2APIC ID MSR, readable in x2APIC mode.
        unsafe { cpu::rdmsr(Self::msr(reg::ID)) as u32 }
    }

    fn eoi(&self) {
        // SAFETY: EOI MSR; writing 0 is the only valid value.
        unsafe { cpu::wrmsr(Self::msr(reg::EOI), 0) }
    }

    fn write_icr(&self, dest: u32, low: u32) {
        // WRMSR to an x2APIC register is not serializing (SDM 11.12.3): with
        // IPI virtualization (no exit) the IPI can reach its target before
        // this vCPU's earlier stores, e.g. the flag a woken target checks
        // before halting again. A fence first, as Linux's weak_wrmsr_fence.
        cpu::store_fence_before_wrmsr();
        // SAFETY: the 64-bit ICR MSR (0x830); sends the IPI.
        unsafe { cpu::wrmsr(Self::msr(reg::ICR_LOW), (dest as u64) << 32 | low as u64) }
    }

    fn setup_logical(&self, vcpu: usize) -> Option<u32> {
        self.setup_logical_model(vcpu, LogicalModel::X2apicCluster)
    }

    fn setup_logical_model(&self, _vcpu: usize, model: LogicalModel) -> Option<u32> {
        // The x2APIC LDR is read-only, derived from the ID (cluster mode).
        if model != LogicalModel::X2apicCluster {
            return None;
        }
        let id = x2apic_logical_id(self.id());
        percpu::set_logical(model, id);
        Some(id)
    }
}

/// The APIC of the mode the host chose, without dynamic dispatch.
#[derive(Clone, Copy, Debug)]
pub enum AnyApic {
    /// xAPIC.
    X(XApic),
    /// x2APIC.
    X2(X2Apic),
}

impl Apic for AnyApic {
    fn enable(&self) {
        match self {
            AnyApic::X(a) => a.enable(),
            AnyApic::X2(a) => a.enable(),
        }
    }
    fn id(&self) -> u32 {
        match self {
            AnyApic::X(a) => a.id(),
            AnyApic::X2(a) => a.id(),
        }
    }
    #[inline(always)]
    fn eoi(&self) {
        match self {
            AnyApic::X(a) => a.eoi(),
            AnyApic::X2(a) => a.eoi(),
        }
    }
    #[inline(always)]
    fn write_icr(&self, dest: u32, low: u32) {
        match self {
            AnyApic::X(a) => a.write_icr(dest, low),
            AnyApic::X2(a) => a.write_icr(dest, low),
        }
    }
    fn setup_logical(&self, vcpu: usize) -> Option<u32> {
        match self {
            AnyApic::X(a) => a.setup_logical(vcpu),
            AnyApic::X2(a) => a.setup_logical(vcpu),
        }
    }
    fn setup_logical_model(&self, vcpu: usize, model: LogicalModel) -> Option<u32> {
        match self {
            AnyApic::X(a) => a.setup_logical_model(vcpu, model),
            AnyApic::X2(a) => a.setup_logical_model(vcpu, model),
        }
    }
}

/// The APIC mode in use (every vCPU uses the same one; its home is
/// [`crate::settings`]).
pub use crate::settings::apic_mode as mode;

/// This vCPU's APIC, in the VM's mode.
#[inline(always)]
pub fn current() -> AnyApic {
    match mode() {
        ApicMode::Xapic => AnyApic::X(XApic),
        ApicMode::X2apic => AnyApic::X2(X2Apic),
    }
}
