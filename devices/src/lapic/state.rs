//! One vCPU's local APIC: state, mode switching, priorities and the
//! acceptance/injection side. Register access paths live in `access.rs`.

use super::base::{self, ApicBaseState, APIC_BASE_BSP, DEFAULT_PHYS_ADDR_BITS};
use super::counters::LapicCounters;
use super::error::ApicFault;
use super::regs::{
    Lvt, VectorSet, APIC_VERSION, APIC_VERSION_WITH_CMCI, DFR_FLAT, LVT_MASKED, SVR_APIC_ENABLED,
    SVR_RESET,
};

/// Local APIC model of one vCPU (no KVM involved).
///
/// Created enabled in xAPIC mode at 0xFEE00000, as after RESET. The x2APIC
/// ID is `apic_id` (read-only); the xAPIC ID starts as its low 8 bits.
#[derive(Debug, Clone)]
pub struct Lapic {
    pub(super) index: usize,
    pub(super) initial_id: u32,
    pub(super) x2apic_supported: bool,
    pub(super) cmci: bool,
    pub(super) phys_addr_bits: u8,
    pub(super) apic_base: u64,
    pub(super) xapic_id: u8,
    pub(super) tpr: u8,
    pub(super) ldr: u32,
    pub(super) dfr: u32,
    pub(super) svr: u32,
    pub(super) isr: VectorSet,
    pub(super) tmr: VectorSet,
    pub(super) irr: VectorSet,
    pub(super) esr: u32,
    pub(super) esr_pending: u32,
    pub(super) lvt: [u32; 7],
    pub(super) icr_low: u32,
    pub(super) icr_high: u32,
    pub(super) timer_initial: u32,
    pub(super) timer_divide: u32,
    pub(super) nmi_pending: bool,
    pub(super) init_pending: bool,
    pub(super) sipi_pending: Option<u8>,
    pub(super) counters: LapicCounters,
}

impl Lapic {
    /// The local APIC of vCPU `index` with x2APIC ID `apic_id`; vCPU 0 is
    /// the BSP. x2APIC support is on, the CMCI LVT off (version 0x50014).
    pub fn new(index: usize, apic_id: u32) -> Lapic {
        let mut lapic = Lapic {
            index,
            initial_id: apic_id,
            x2apic_supported: true,
            cmci: false,
            phys_addr_bits: DEFAULT_PHYS_ADDR_BITS,
            apic_base: base::reset_apic_base(index == 0),
            xapic_id: apic_id as u8,
            tpr: 0,
            ldr: 0,
            dfr: DFR_FLAT,
            svr: SVR_RESET,
            isr: VectorSet::default(),
            tmr: VectorSet::default(),
            irr: VectorSet::default(),
            esr: 0,
            esr_pending: 0,
            lvt: [LVT_MASKED; 7],
            icr_low: 0,
            icr_high: 0,
            timer_initial: 0,
            timer_divide: 0,
            nmi_pending: false,
            init_pending: false,
            sipi_pending: None,
            counters: LapicCounters::default(),
        };
        lapic.reset_registers();
        lapic
    }

    /// Whether EXTD may be set (`CPUID.1:ECX[21]` as the guest sees it).
    pub fn with_x2apic_support(mut self, supported: bool) -> Lapic {
        self.x2apic_supported = supported;
        self
    }

    /// Models the CMCI LVT (0x2F0 / MSR 0x82F); the version register then
    /// reports max LVT 6 (0x60014).
    pub fn with_cmci(mut self, cmci: bool) -> Lapic {
        self.cmci = cmci;
        self
    }

    /// The guest's MAXPHYADDR, which bounds the IA32_APIC_BASE address.
    pub fn with_phys_addr_bits(mut self, bits: u8) -> Lapic {
        self.phys_addr_bits = bits;
        self
    }

    /// Index of the vCPU this APIC belongs to.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The state IA32_APIC_BASE puts it in now.
    pub fn base_state(&self) -> ApicBaseState {
        ApicBaseState::from_apic_base(self.apic_base).unwrap_or(ApicBaseState::Disabled)
    }

    /// Whether the APIC is in x2APIC mode.
    pub fn is_x2apic(&self) -> bool {
        self.base_state() == ApicBaseState::X2Apic
    }

    /// Whether IA32_APIC_BASE.EN is set.
    pub fn is_hw_enabled(&self) -> bool {
        self.base_state() != ApicBaseState::Disabled
    }

    /// Whether SVR bit 8 (APIC software enable) is set.
    pub fn is_sw_enabled(&self) -> bool {
        self.svr & SVR_APIC_ENABLED != 0
    }

    /// IA32_APIC_BASE.
    pub fn apic_base(&self) -> u64 {
        self.apic_base
    }

    /// Guest-physical address of the xAPIC MMIO page.
    pub fn base_address(&self) -> u64 {
        self.apic_base & !0xFFF & ((1u64 << self.phys_addr_bits.clamp(12, 63)) - 1)
    }

    /// The APIC ID as the current mode defines it: the 32-bit x2APIC ID in
    /// x2APIC mode, the (writable) 8-bit xAPIC ID otherwise.
    pub fn apic_id(&self) -> u32 {
        if self.is_x2apic() {
            self.initial_id
        } else {
            u32::from(self.xapic_id)
        }
    }

    /// The x2APIC ID fixed at creation.
    pub fn initial_apic_id(&self) -> u32 {
        self.initial_id
    }

    /// Version register value.
    pub fn version(&self) -> u32 {
        if self.cmci {
            APIC_VERSION_WITH_CMCI
        } else {
            APIC_VERSION
        }
    }

    /// Task priority (TPR bits 7:0).
    pub fn tpr(&self) -> u8 {
        self.tpr
    }

    /// Processor priority: TPR if its class is at least that of the highest
    /// in-service vector, else that vector's class (SDM 11.8.3.1).
    pub fn ppr(&self) -> u8 {
        let isrv = self.isr.highest().unwrap_or(0);
        if self.tpr & 0xF0 >= isrv & 0xF0 {
            self.tpr
        } else {
            isrv & 0xF0
        }
    }

    /// Logical destination register (derived from the ID in x2APIC mode:
    /// cluster `id >> 4` in 31:16, bit `id & 0xf` in 15:0).
    pub fn ldr(&self) -> u32 {
        if self.is_x2apic() {
            x2apic_ldr(self.initial_id)
        } else {
            self.ldr
        }
    }

    /// Destination format register (xAPIC).
    pub fn dfr(&self) -> u32 {
        self.dfr
    }

    /// Spurious interrupt vector register.
    pub fn svr(&self) -> u32 {
        self.svr
    }

    /// Value of an LVT register.
    pub fn lvt(&self, lvt: Lvt) -> u32 {
        self.lvt.get(lvt.index()).copied().unwrap_or(LVT_MASKED)
    }

    /// Interrupt request register.
    pub fn irr(&self) -> &VectorSet {
        &self.irr
    }

    /// In-service register.
    pub fn isr(&self) -> &VectorSet {
        &self.isr
    }

    /// Trigger-mode register.
    pub fn tmr(&self) -> &VectorSet {
        &self.tmr
    }

    /// Error status register as last latched by an ESR write.
    pub fn esr(&self) -> u32 {
        self.esr
    }

    /// Counters of this vCPU.
    pub fn counters(&self) -> LapicCounters {
        self.counters
    }

    /// CR8 as the guest sees it: TPR bits 7:4 (sync it with `kvm_run.cr8`
    /// around KVM_RUN when there is no in-kernel APIC).
    pub fn cr8(&self) -> u64 {
        u64::from(self.tpr >> 4)
    }

    /// Sets TPR from CR8 bits 3:0 (higher bits ignored).
    pub fn set_cr8(&mut self, cr8: u64) {
        self.tpr = ((cr8 & 0xF) as u8) << 4;
    }

    /// Handles a write of IA32_APIC_BASE (MSR 0x1B), validated as in
    /// [`base::check_transition`]. Going to x2APIC sets the 32-bit ID and
    /// derives the LDR; re-enabling from disabled restores the xAPIC ID;
    /// disabling returns the APIC to its power-up register state (SDM 11.4.3)
    /// and drops pending INIT/SIPI/NMI.
    pub fn set_apic_base(&mut self, value: u64) -> Result<(), ApicFault> {
        let old_mode = self.base_state();
        let new_mode = base::check_transition(
            self.apic_base,
            value,
            self.x2apic_supported,
            self.phys_addr_bits,
        )?;
        self.apic_base = value;
        match (old_mode, new_mode) {
            (ApicBaseState::Disabled, ApicBaseState::Disabled) => {}
            (_, ApicBaseState::Disabled) => {
                self.reset_registers();
                self.nmi_pending = false;
                self.init_pending = false;
                self.sipi_pending = None;
            }
            (ApicBaseState::Disabled, ApicBaseState::XApic) => {
                self.xapic_id = self.initial_id as u8
            }
            (ApicBaseState::XApic, ApicBaseState::X2Apic) => {
                // x2APIC keeps one 64-bit ICR; start it from the xAPIC halves.
                self.icr_high = 0;
            }
            _ => {}
        }
        Ok(())
    }

    /// Power-up state of the registers (SDM 11.4.7.1), keeping the APIC
    /// base, mode and counters: IRR/ISR/TMR, TPR, LDR, ESR, ICR and timer
    /// cleared, DFR all ones, SVR 0xFF (software-disabled), LVTs masked.
    pub fn reset_registers(&mut self) {
        self.xapic_id = self.initial_id as u8;
        self.tpr = 0;
        self.ldr = 0;
        self.dfr = DFR_FLAT;
        self.svr = SVR_RESET;
        self.isr = VectorSet::default();
        self.tmr = VectorSet::default();
        self.irr = VectorSet::default();
        self.esr = 0;
        self.esr_pending = 0;
        self.lvt = [LVT_MASKED; 7];
        self.icr_low = 0;
        self.icr_high = 0;
        self.timer_initial = 0;
        self.timer_divide = 0;
    }

    /// Highest pending vector the APIC would deliver now: the highest IRR
    /// bit whose priority class (bits 7:4) is above the PPR's class. `None`
    /// when nothing is deliverable or the APIC is globally disabled. An APIC
    /// that is only software-disabled still delivers what its IRR holds
    /// (SDM 11.4.7.2: pending interrupts are held and must be handled).
    pub fn pending_vector(&self) -> Option<u8> {
        if !self.is_hw_enabled() {
            return None;
        }
        let vector = self.irr.highest()?;
        (vector >> 4 > self.ppr() >> 4).then_some(vector)
    }

    /// The interrupt `vector` was injected (KVM_INTERRUPT): moves it from
    /// IRR to ISR, which raises the PPR. Returns `false` (and changes
    /// nothing) if the vector was not pending.
    pub fn ack(&mut self, vector: u8) -> bool {
        if !self.irr.remove(vector) {
            return false;
        }
        self.isr.insert(vector);
        true
    }

    /// EOI: clears the highest in-service vector and returns it (`None` if
    /// nothing was in service). Counts the EOI either way.
    pub fn eoi(&mut self) -> Option<u8> {
        self.counters.eois += 1;
        let vector = self.isr.highest()?;
        self.isr.remove(vector);
        Some(vector)
    }

    /// Takes the pending NMI, if any (inject it with KVM_NMI).
    pub fn take_nmi(&mut self) -> bool {
        std::mem::take(&mut self.nmi_pending)
    }

    /// Takes the pending INIT, if any. The APIC itself goes to its INIT
    /// state (power-up registers, ID and APIC base kept, SDM 11.4.7.3); the
    /// VMM resets the vCPU's registers and waits for a SIPI.
    pub fn take_init(&mut self) -> bool {
        if !std::mem::take(&mut self.init_pending) {
            return false;
        }
        let xapic_id = self.xapic_id;
        self.reset_registers();
        self.xapic_id = xapic_id;
        true
    }

    /// Takes the vector of the pending start-up IPI, if any. The VMM honours
    /// it only while the vCPU waits for SIPI (after INIT).
    pub fn take_sipi(&mut self) -> Option<u8> {
        self.sipi_pending.take()
    }

    /// Drops a start-up IPI that arrived while the vCPU runs or halts (it is
    /// ignored outside wait-for-SIPI), unless an INIT is pending ahead of
    /// it: INIT then SIPI sent to a halted vCPU must both be taken, in that
    /// order, when it next runs (KVM's `kvm_apic_accept_events`).
    pub fn drop_stray_sipi(&mut self) {
        if !self.init_pending {
            self.sipi_pending = None;
        }
    }

    /// Whether an NMI, INIT or SIPI is waiting to be taken.
    pub fn has_pending_event(&self) -> bool {
        self.nmi_pending || self.init_pending || self.sipi_pending.is_some()
    }

    /// Whether something pending ends a `hlt` of this vCPU (SDM vol. 2,
    /// HLT: an NMI, an INIT or an enabled interrupt resumes the processor):
    /// a pending NMI or INIT always, a deliverable vector only when the
    /// vCPU's RFLAGS.IF (`if_flag`) is set. A start-up IPI does not: it is
    /// ignored outside wait-for-SIPI (take and drop it).
    pub fn wakes_from_halt(&self, if_flag: bool) -> bool {
        self.nmi_pending || self.init_pending || (if_flag && self.pending_vector().is_some())
    }

    /// Whether something pending ends a wait for SIPI: the SIPI, or another
    /// INIT (which resets the vCPU again). An NMI waits until the vCPU runs.
    pub fn ends_wait_for_sipi(&self) -> bool {
        self.init_pending || self.sipi_pending.is_some()
    }

    /// Whether IA32_APIC_BASE.BSP is set (vCPU 0 after reset).
    pub fn is_bsp(&self) -> bool {
        self.apic_base & APIC_BASE_BSP != 0
    }
}

/// x2APIC logical ID derived from the x2APIC ID (SDM 11.12.10.2): the
/// ABI's rule, which the payload's IPI counting uses too.
pub fn x2apic_ldr(id: u32) -> u32 {
    ipivmm_abi::x2apic_logical_id(id)
}
