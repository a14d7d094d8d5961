//! Register map of the local APIC: offsets, x2APIC MSR numbers, bit masks and
//! the 256-bit vector sets (ISR/TMR/IRR).
//!
//! Offsets are those of the xAPIC MMIO page (Intel SDM vol. 3, table 11-1);
//! the x2APIC MSR of a register is `0x800 + (offset >> 4)` (SDM table 11-6).

/// Default xAPIC MMIO base (IA32_APIC_BASE after reset): the ABI's one
/// constant, which the payload and the VMM share.
pub const XAPIC_DEFAULT_BASE: u64 = ipivmm_abi::XAPIC_BASE;
/// Size of the xAPIC MMIO page.
pub const XAPIC_MMIO_SIZE: u64 = 0x1000;
/// MSR number of IA32_APIC_BASE.
pub const MSR_IA32_APIC_BASE: u32 = 0x1B;
/// First x2APIC register MSR (offset 0x000).
pub const X2APIC_MSR_FIRST: u32 = 0x800;
/// Last MSR of the range the SDM reserves for the x2APIC (0x800..=0xBFF).
pub const X2APIC_MSR_LAST: u32 = 0xBFF;
/// x2APIC MSR of the 64-bit interrupt command register.
pub const X2APIC_MSR_ICR: u32 = 0x830;
/// x2APIC MSR of the SELF IPI register (write-only, x2APIC only).
pub const X2APIC_MSR_SELF_IPI: u32 = 0x83F;
/// x2APIC MSR of the EOI register.
pub const X2APIC_MSR_EOI: u32 = 0x80B;

/// Version register value: version 0x14, max LVT entry 5 (six LVTs), as KVM
/// reports when the guest has no CMCI.
pub const APIC_VERSION: u32 = 0x0005_0014;
/// Version register value when the CMCI LVT is modelled (max LVT entry 6).
pub const APIC_VERSION_WITH_CMCI: u32 = 0x0006_0014;

/// SVR bit 8: APIC software enable.
pub const SVR_APIC_ENABLED: u32 = 1 << 8;
/// SVR bits the model keeps (vector, enable, focus-check), as KVM does.
pub const SVR_WRITABLE: u32 = 0x3FF;
/// SVR value after reset.
pub const SVR_RESET: u32 = 0xFF;

/// DFR value of the flat model (and after reset).
pub const DFR_FLAT: u32 = 0xFFFF_FFFF;
/// DFR value of the cluster model.
pub const DFR_CLUSTER: u32 = 0x0FFF_FFFF;

/// ESR bit 5: the APIC tried to send an IPI with a vector in 0..=15.
pub const ESR_SEND_ILLEGAL_VECTOR: u32 = 1 << 5;
/// ESR bit 6: the APIC received an interrupt with a vector in 0..=15.
pub const ESR_RECEIVE_ILLEGAL_VECTOR: u32 = 1 << 6;
/// ESR bit 7: software accessed a reserved register (xAPIC mode).
pub const ESR_ILLEGAL_REGISTER: u32 = 1 << 7;

/// LVT vector field.
pub const LVT_VECTOR: u32 = 0xFF;
/// LVT delivery-mode field (not in the timer and error LVTs).
pub const LVT_DELIVERY_MODE: u32 = 0x7 << 8;
/// LVT delivery status (read-only; always 0 in this model).
pub const LVT_DELIVERY_STATUS: u32 = 1 << 12;
/// LVT input pin polarity (LINT0/1 only).
pub const LVT_POLARITY: u32 = 1 << 13;
/// LVT remote IRR (LINT0/1 only, read-only).
pub const LVT_REMOTE_IRR: u32 = 1 << 14;
/// LVT trigger mode (LINT0/1 only).
pub const LVT_TRIGGER: u32 = 1 << 15;
/// LVT mask bit.
pub const LVT_MASKED: u32 = 1 << 16;
/// Timer LVT mode field (one-shot, periodic, TSC-deadline).
pub const LVT_TIMER_MODE: u32 = 0x3 << 17;

/// Timer divide configuration bits (0, 1 and 3).
pub const TDCR_WRITABLE: u32 = 0xB;

/// ICR delivery-status bit (always reads 0: delivery is instantaneous).
pub const ICR_BUSY: u32 = 1 << 12;
/// ICR low bits a guest can set in xAPIC mode (vector, delivery mode,
/// destination mode, level, trigger, shorthand); the rest are ignored.
pub const XAPIC_ICR_LOW_WRITABLE: u32 = 0x000C_CFFF;
/// ICR high bits kept in xAPIC mode (destination, 31:24).
pub const XAPIC_ICR_HIGH_WRITABLE: u32 = 0xFF00_0000;
/// x2APIC ICR bits that must be zero (31:20, 17:16, 13: the ABI's
/// [`ipivmm_abi::ICR_RESERVED`]); a WRMSR that sets one faults, as in KVM.
pub const X2APIC_ICR_RESERVED: u64 = ipivmm_abi::ICR_RESERVED as u64;

/// One of the local vector table entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lvt {
    /// Corrected machine-check interrupt (0x2F0), only when enabled.
    Cmci,
    /// APIC timer (0x320).
    Timer,
    /// Thermal sensor (0x330).
    Thermal,
    /// Performance-monitoring counters (0x340).
    Perf,
    /// LINT0 pin (0x350).
    Lint0,
    /// LINT1 pin (0x360).
    Lint1,
    /// APIC error (0x370).
    Error,
}

impl Lvt {
    /// All LVTs, in storage order.
    pub const ALL: [Lvt; 7] = [
        Lvt::Cmci,
        Lvt::Timer,
        Lvt::Thermal,
        Lvt::Perf,
        Lvt::Lint0,
        Lvt::Lint1,
        Lvt::Error,
    ];

    /// Index into the model's LVT array.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Register offset in the xAPIC page.
    pub fn offset(self) -> u32 {
        match self {
            Lvt::Cmci => 0x2F0,
            Lvt::Timer => 0x320,
            Lvt::Thermal => 0x330,
            Lvt::Perf => 0x340,
            Lvt::Lint0 => 0x350,
            Lvt::Lint1 => 0x360,
            Lvt::Error => 0x370,
        }
    }

    /// Bits software can write (stored as written).
    pub fn writable(self) -> u32 {
        match self {
            Lvt::Timer => LVT_VECTOR | LVT_MASKED | LVT_TIMER_MODE,
            Lvt::Thermal | Lvt::Perf | Lvt::Cmci => LVT_VECTOR | LVT_DELIVERY_MODE | LVT_MASKED,
            Lvt::Lint0 | Lvt::Lint1 => {
                LVT_VECTOR | LVT_DELIVERY_MODE | LVT_POLARITY | LVT_TRIGGER | LVT_MASKED
            }
            Lvt::Error => LVT_VECTOR | LVT_MASKED,
        }
    }

    /// Read-only bits: a write of 1 is ignored, not a reserved-bit fault.
    pub fn read_only(self) -> u32 {
        match self {
            Lvt::Lint0 | Lvt::Lint1 => LVT_DELIVERY_STATUS | LVT_REMOTE_IRR,
            _ => LVT_DELIVERY_STATUS,
        }
    }
}

/// A local APIC register, decoded from an MMIO offset or an x2APIC MSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Register {
    /// Local APIC ID (0x020).
    Id,
    /// Version (0x030), read-only.
    Version,
    /// Task priority (0x080).
    Tpr,
    /// Arbitration priority (0x090), xAPIC only; reads 0.
    Apr,
    /// Processor priority (0x0A0), read-only.
    Ppr,
    /// End of interrupt (0x0B0), write-only.
    Eoi,
    /// Remote read (0x0C0), xAPIC only; reads 0.
    Rrd,
    /// Logical destination (0x0D0); read-only in x2APIC mode.
    Ldr,
    /// Destination format (0x0E0), xAPIC only.
    Dfr,
    /// Spurious interrupt vector (0x0F0).
    Svr,
    /// In-service register word `n` (0x100 + 0x10 n), read-only.
    Isr(u8),
    /// Trigger-mode register word `n` (0x180 + 0x10 n), read-only.
    Tmr(u8),
    /// Interrupt request register word `n` (0x200 + 0x10 n), read-only.
    Irr(u8),
    /// Error status (0x280).
    Esr,
    /// A local vector table entry.
    Lvt(Lvt),
    /// Interrupt command, low half (0x300); the whole 64-bit ICR in x2APIC.
    IcrLow,
    /// Interrupt command, high half (0x310), xAPIC only.
    IcrHigh,
    /// Timer initial count (0x380).
    TimerInitial,
    /// Timer current count (0x390), read-only.
    TimerCurrent,
    /// Timer divide configuration (0x3E0).
    TimerDivide,
    /// SELF IPI (0x3F0), x2APIC only, write-only.
    SelfIpi,
}

impl Register {
    /// Decodes a 16-byte-aligned offset of the APIC page; `None` for
    /// reserved offsets, unaligned offsets and offsets past 0x3F0.
    pub fn from_offset(offset: u32) -> Option<Register> {
        if offset & 0xF != 0 {
            return None;
        }
        let reg = match offset {
            0x020 => Register::Id,
            0x030 => Register::Version,
            0x080 => Register::Tpr,
            0x090 => Register::Apr,
            0x0A0 => Register::Ppr,
            0x0B0 => Register::Eoi,
            0x0C0 => Register::Rrd,
            0x0D0 => Register::Ldr,
            0x0E0 => Register::Dfr,
            0x0F0 => Register::Svr,
            0x100..=0x170 => Register::Isr(word(offset, 0x100)),
            0x180..=0x1F0 => Register::Tmr(word(offset, 0x180)),
            0x200..=0x270 => Register::Irr(word(offset, 0x200)),
            0x280 => Register::Esr,
            0x2F0 => Register::Lvt(Lvt::Cmci),
            0x300 => Register::IcrLow,
            0x310 => Register::IcrHigh,
            0x320 => Register::Lvt(Lvt::Timer),
            0x330 => Register::Lvt(Lvt::Thermal),
            0x340 => Register::Lvt(Lvt::Perf),
            0x350 => Register::Lvt(Lvt::Lint0),
            0x360 => Register::Lvt(Lvt::Lint1),
            0x370 => Register::Lvt(Lvt::Error),
            0x380 => Register::TimerInitial,
            0x390 => Register::TimerCurrent,
            0x3E0 => Register::TimerDivide,
            0x3F0 => Register::SelfIpi,
            _ => return None,
        };
        Some(reg)
    }

    /// Decodes an x2APIC MSR number (`0x800 + offset >> 4`); `None` outside
    /// the register map. Mode-specific absence (DFR, ICR high...) is decided
    /// by the access path, not here.
    pub fn from_msr(msr: u32) -> Option<Register> {
        let index = msr.checked_sub(X2APIC_MSR_FIRST)?;
        if index > 0x3F {
            return None;
        }
        Register::from_offset(index << 4)
    }

    /// Offset of the register in the xAPIC page.
    pub fn offset(self) -> u32 {
        match self {
            Register::Id => 0x020,
            Register::Version => 0x030,
            Register::Tpr => 0x080,
            Register::Apr => 0x090,
            Register::Ppr => 0x0A0,
            Register::Eoi => 0x0B0,
            Register::Rrd => 0x0C0,
            Register::Ldr => 0x0D0,
            Register::Dfr => 0x0E0,
            Register::Svr => 0x0F0,
            Register::Isr(n) => 0x100 + 0x10 * u32::from(n),
            Register::Tmr(n) => 0x180 + 0x10 * u32::from(n),
            Register::Irr(n) => 0x200 + 0x10 * u32::from(n),
            Register::Esr => 0x280,
            Register::Lvt(lvt) => lvt.offset(),
            Register::IcrLow => 0x300,
            Register::IcrHigh => 0x310,
            Register::TimerInitial => 0x380,
            Register::TimerCurrent => 0x390,
            Register::TimerDivide => 0x3E0,
            Register::SelfIpi => 0x3F0,
        }
    }

    /// x2APIC MSR number of the register.
    pub fn msr(self) -> u32 {
        X2APIC_MSR_FIRST + (self.offset() >> 4)
    }
}

fn word(offset: u32, base: u32) -> u8 {
    // offset - base is at most 0x70 here, so the result fits 0..=7.
    ((offset - base) >> 4) as u8
}

/// A set of the 256 interrupt vectors, laid out like ISR/TMR/IRR: eight
/// 32-bit words, word `n` holding vectors `32n..32n+31`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VectorSet([u32; 8]);

impl VectorSet {
    /// Adds `vector`; returns whether it was already present.
    pub fn insert(&mut self, vector: u8) -> bool {
        let (w, bit) = split(vector);
        let was = self.0[w] & bit != 0;
        self.0[w] |= bit;
        was
    }

    /// Removes `vector`; returns whether it was present.
    pub fn remove(&mut self, vector: u8) -> bool {
        let (w, bit) = split(vector);
        let was = self.0[w] & bit != 0;
        self.0[w] &= !bit;
        was
    }

    /// Whether `vector` is present.
    pub fn contains(&self, vector: u8) -> bool {
        let (w, bit) = split(vector);
        self.0[w] & bit != 0
    }

    /// The highest vector present.
    pub fn highest(&self) -> Option<u8> {
        self.0.iter().enumerate().rev().find_map(|(w, &bits)| {
            // w < 8 and the bit index < 32, so the vector fits in a u8.
            (bits != 0).then(|| (w as u32 * 32 + 31 - bits.leading_zeros()) as u8)
        })
    }

    /// Register word `n` (0..=7); 0 for any other `n`.
    pub fn word(&self, n: usize) -> u32 {
        self.0.get(n).copied().unwrap_or(0)
    }

    /// Whether no vector is present.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Number of vectors present.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

fn split(vector: u8) -> (usize, u32) {
    (usize::from(vector >> 5), 1u32 << (vector & 31))
}
