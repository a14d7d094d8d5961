//! Guest access paths of a [`Lapic`]: xAPIC MMIO (offsets of the 4 KiB page
//! at IA32_APIC_BASE) and x2APIC MSRs (0x800 + offset >> 4).
//!
//! xAPIC follows the MMIO rules of SDM 11.4.1 and KVM: writes must be 32-bit
//! and 16-byte aligned, reads may be 1, 2 or 4 bytes inside one register;
//! reserved bits are ignored, reserved registers set ESR bit 7. x2APIC
//! follows SDM 11.12.1: reserved MSRs, read-only/write-only violations and
//! reserved bits fault (#GP).

use super::error::ApicFault;
use super::group::IpiRequest;
use super::regs::{
    Lvt, Register, ESR_ILLEGAL_REGISTER, ICR_BUSY, LVT_MASKED, LVT_TIMER_MODE, MSR_IA32_APIC_BASE,
    SVR_WRITABLE, TDCR_WRITABLE, X2APIC_ICR_RESERVED, X2APIC_MSR_FIRST, X2APIC_MSR_LAST,
    XAPIC_ICR_HIGH_WRITABLE, XAPIC_ICR_LOW_WRITABLE, XAPIC_MMIO_SIZE,
};
use super::state::Lapic;
use ipivmm_abi::Icr;

impl Lapic {
    /// Guest read of `data.len()` bytes at `offset` in the xAPIC page.
    ///
    /// `data` is always fully written: register bytes for a valid access,
    /// zeros for an ignored one (bad size/alignment, reserved register), and
    /// all ones when the page is off (x2APIC mode or APIC disabled, like
    /// KVM's LAPIC_MMIO_HOLE quirk). Ignored accesses are counted.
    pub fn read_mmio(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if self.is_x2apic() || !self.is_hw_enabled() {
            data.fill(0xFF);
            self.counters.ignored_accesses += 1;
            return;
        }
        let len = data.len();
        let align = (offset & 0xF) as usize;
        if !matches!(len, 1 | 2 | 4) || offset >= XAPIC_MMIO_SIZE || align + len > 4 {
            self.counters.ignored_accesses += 1;
            return;
        }
        let Some(reg) =
            Register::from_offset((offset & 0xFF0) as u32).filter(|r| self.has_xapic(*r))
        else {
            self.record_error(ESR_ILLEGAL_REGISTER);
            self.counters.ignored_accesses += 1;
            return;
        };
        let bytes = self.read_register(reg).to_le_bytes();
        if let (Some(dst), Some(src)) = (data.get_mut(..len), bytes.get(align..align + len)) {
            dst.copy_from_slice(src);
        }
    }

    /// Guest write of `data` at `offset` in the xAPIC page. Returns the IPI
    /// to deliver when the write was to ICR low (0x300).
    pub fn write_mmio(&mut self, offset: u64, data: &[u8]) -> Option<IpiRequest> {
        if self.is_x2apic() || !self.is_hw_enabled() {
            self.counters.ignored_accesses += 1;
            return None;
        }
        let bytes: [u8; 4] = match data.try_into() {
            Ok(bytes) if offset & 0xF == 0 && offset < XAPIC_MMIO_SIZE => bytes,
            _ => {
                self.counters.ignored_accesses += 1;
                return None;
            }
        };
        let Some(reg) = Register::from_offset(offset as u32).filter(|r| self.has_xapic(*r)) else {
            self.record_error(ESR_ILLEGAL_REGISTER);
            self.counters.ignored_accesses += 1;
            return None;
        };
        let val = u32::from_le_bytes(bytes);
        match reg {
            Register::Id => self.xapic_id = (val >> 24) as u8,
            Register::Tpr => self.tpr = val as u8,
            Register::Eoi => {
                self.eoi();
            }
            Register::Ldr => self.ldr = val & 0xFF00_0000,
            Register::Dfr => self.dfr = val | 0x0FFF_FFFF,
            Register::Svr => self.set_svr(val & SVR_WRITABLE),
            Register::Esr => self.latch_esr(),
            Register::Lvt(lvt) => self.write_lvt(lvt, val),
            Register::IcrLow => {
                self.icr_low = val & XAPIC_ICR_LOW_WRITABLE;
                self.counters.icr_writes += 1;
                let icr = Icr::from_xapic(self.icr_low, self.icr_high);
                return Some(IpiRequest {
                    source: self.index,
                    icr,
                });
            }
            Register::IcrHigh => self.icr_high = val & XAPIC_ICR_HIGH_WRITABLE,
            Register::TimerInitial => self.timer_initial = val,
            Register::TimerDivide => self.timer_divide = val & TDCR_WRITABLE,
            // Read-only registers: the write is ignored.
            _ => self.counters.ignored_accesses += 1,
        }
        None
    }

    /// Guest RDMSR. Handles IA32_APIC_BASE (0x1B) and the x2APIC registers;
    /// the ICR (0x830) reads as one 64-bit value.
    pub fn read_msr(&mut self, msr: u32) -> Result<u64, ApicFault> {
        let result = self.read_msr_inner(msr);
        if result.is_err() {
            self.counters.faults += 1;
        }
        result
    }

    /// Guest WRMSR. Handles IA32_APIC_BASE (0x1B, see
    /// [`Lapic::set_apic_base`]) and the x2APIC registers. Returns the IPI to
    /// deliver for ICR (0x830) and SELF IPI (0x83F) writes.
    pub fn write_msr(&mut self, msr: u32, value: u64) -> Result<Option<IpiRequest>, ApicFault> {
        let result = self.write_msr_inner(msr, value);
        if result.is_err() {
            self.counters.faults += 1;
        }
        result
    }

    fn read_msr_inner(&mut self, msr: u32) -> Result<u64, ApicFault> {
        if msr == MSR_IA32_APIC_BASE {
            return Ok(self.apic_base);
        }
        let reg = self.x2apic_register(msr)?;
        match reg {
            Register::Eoi | Register::SelfIpi => Err(ApicFault::WriteOnly(msr)),
            Register::IcrLow => Ok(u64::from(self.icr_high) << 32 | u64::from(self.icr_low)),
            _ => Ok(u64::from(self.read_register(reg))),
        }
    }

    fn write_msr_inner(&mut self, msr: u32, value: u64) -> Result<Option<IpiRequest>, ApicFault> {
        if msr == MSR_IA32_APIC_BASE {
            return self.set_apic_base(value).map(|()| None);
        }
        let reg = self.x2apic_register(msr)?;
        let reserved = ApicFault::ReservedBits { msr, value };
        if reg == Register::IcrLow {
            if value & X2APIC_ICR_RESERVED != 0 {
                return Err(reserved);
            }
            self.icr_low = value as u32 & !ICR_BUSY;
            self.icr_high = (value >> 32) as u32;
            self.counters.icr_writes += 1;
            return Ok(Some(IpiRequest {
                source: self.index,
                icr: Icr::from_raw(self.icr_low, self.icr_high),
            }));
        }
        let val = u32::try_from(value).map_err(|_| reserved)?;
        let check = |allowed: u32| {
            if val & !allowed == 0 {
                Ok(())
            } else {
                Err(reserved)
            }
        };
        match reg {
            Register::Tpr => {
                check(0xFF)?;
                self.tpr = val as u8;
            }
            Register::Eoi => {
                if val != 0 {
                    return Err(ApicFault::NonZeroEoi(value));
                }
                self.eoi();
            }
            Register::Svr => {
                check(SVR_WRITABLE)?;
                self.set_svr(val);
            }
            Register::Esr => {
                check(0)?;
                self.latch_esr();
            }
            Register::Lvt(lvt) => {
                check(lvt.writable() | lvt.read_only())?;
                if lvt == Lvt::Timer && val & LVT_TIMER_MODE == LVT_TIMER_MODE {
                    return Err(reserved);
                }
                self.write_lvt(lvt, val);
            }
            Register::TimerInitial => self.timer_initial = val,
            Register::TimerDivide => {
                check(TDCR_WRITABLE)?;
                self.timer_divide = val;
            }
            Register::SelfIpi => {
                check(0xFF)?;
                self.counters.self_ipi_writes += 1;
                return Ok(Some(IpiRequest {
                    source: self.index,
                    icr: Icr::fixed(val as u8).self_only(),
                }));
            }
            _ => return Err(ApicFault::ReadOnly(msr)),
        }
        Ok(None)
    }

    /// Decodes an x2APIC MSR that exists in x2APIC mode.
    fn x2apic_register(&self, msr: u32) -> Result<Register, ApicFault> {
        if !(X2APIC_MSR_FIRST..=X2APIC_MSR_LAST).contains(&msr) {
            return Err(ApicFault::NotApicMsr(msr));
        }
        if !self.is_x2apic() {
            return Err(ApicFault::NotX2ApicMode(msr));
        }
        Register::from_msr(msr)
            .filter(|r| self.has_x2apic(*r))
            .ok_or(ApicFault::ReservedMsr(msr))
    }

    /// Whether `reg` exists in xAPIC mode.
    fn has_xapic(&self, reg: Register) -> bool {
        match reg {
            Register::SelfIpi => false,
            Register::Lvt(Lvt::Cmci) => self.cmci,
            _ => true,
        }
    }

    /// Whether `reg` exists in x2APIC mode.
    fn has_x2apic(&self, reg: Register) -> bool {
        match reg {
            Register::Apr | Register::Rrd | Register::Dfr | Register::IcrHigh => false,
            Register::Lvt(Lvt::Cmci) => self.cmci,
            _ => true,
        }
    }

    /// Current 32-bit value of a register, in the current mode's layout.
    fn read_register(&self, reg: Register) -> u32 {
        match reg {
            Register::Id if self.is_x2apic() => self.initial_id,
            Register::Id => u32::from(self.xapic_id) << 24,
            Register::Version => self.version(),
            Register::Tpr => u32::from(self.tpr),
            Register::Ppr => u32::from(self.ppr()),
            Register::Ldr => self.ldr(),
            Register::Dfr => self.dfr,
            Register::Svr => self.svr,
            Register::Isr(n) => self.isr.word(usize::from(n)),
            Register::Tmr(n) => self.tmr.word(usize::from(n)),
            Register::Irr(n) => self.irr.word(usize::from(n)),
            Register::Esr => self.esr,
            Register::Lvt(lvt) => self.lvt(lvt),
            Register::IcrLow => self.icr_low,
            Register::IcrHigh => self.icr_high,
            Register::TimerInitial => self.timer_initial,
            Register::TimerDivide => self.timer_divide,
            // APR and RRD read 0, the timer never counts, EOI and SELF IPI
            // are write-only.
            Register::Apr
            | Register::Rrd
            | Register::TimerCurrent
            | Register::Eoi
            | Register::SelfIpi => 0,
        }
    }

    /// SVR write; clearing the software enable masks every LVT (SDM 11.4.7.2).
    fn set_svr(&mut self, val: u32) {
        self.svr = val;
        if !self.is_sw_enabled() {
            for lvt in &mut self.lvt {
                *lvt |= LVT_MASKED;
            }
        }
    }

    /// LVT write: writable bits kept; the mask cannot be cleared while the
    /// APIC is software-disabled.
    fn write_lvt(&mut self, lvt: Lvt, val: u32) {
        let mut val = val & lvt.writable();
        if !self.is_sw_enabled() {
            val |= LVT_MASKED;
        }
        if let Some(slot) = self.lvt.get_mut(lvt.index()) {
            *slot = val;
        }
    }

    /// ESR write: the ESR shows the errors logged since the previous write.
    fn latch_esr(&mut self) {
        self.esr = std::mem::take(&mut self.esr_pending);
    }
}
