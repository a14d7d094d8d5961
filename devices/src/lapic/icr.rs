//! Decoding of the interrupt command register (SDM vol. 3, 11.6.1).
//!
//! xAPIC: ICR low at 0x300 (writing it sends the IPI), ICR high at 0x310 with
//! the 8-bit destination in bits 31:24. x2APIC: one 64-bit MSR 0x830 with the
//! 32-bit destination in bits 63:32.

/// How the IPI is delivered (ICR bits 10:8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryMode {
    /// 000: the vector, to every target.
    Fixed,
    /// 001: the vector, to one target chosen among the matches.
    LowestPriority,
    /// 010: system management interrupt (not modelled).
    Smi,
    /// 011: reserved (was remote read).
    Reserved,
    /// 100: non-maskable interrupt; the vector is ignored.
    Nmi,
    /// 101: INIT (or INIT level de-assert).
    Init,
    /// 110: start-up IPI; the vector gives the start page.
    StartUp,
    /// 111: ExtINT (not valid in an ICR; not modelled).
    ExtInt,
}

impl DeliveryMode {
    /// Decodes the 3-bit field.
    pub fn from_bits(bits: u32) -> DeliveryMode {
        match bits & 0x7 {
            0 => DeliveryMode::Fixed,
            1 => DeliveryMode::LowestPriority,
            2 => DeliveryMode::Smi,
            3 => DeliveryMode::Reserved,
            4 => DeliveryMode::Nmi,
            5 => DeliveryMode::Init,
            6 => DeliveryMode::StartUp,
            _ => DeliveryMode::ExtInt,
        }
    }

    /// The 3-bit encoding.
    pub fn bits(self) -> u32 {
        self as u32
    }
}

/// How the destination field is interpreted (ICR bit 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DestMode {
    /// Destination is an APIC ID.
    Physical,
    /// Destination is matched against each target's LDR (and DFR in xAPIC).
    Logical,
}

/// Level flag (ICR bit 14): de-assert only matters for INIT level de-assert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// 0.
    Deassert,
    /// 1.
    Assert,
}

/// Trigger mode (ICR bit 15): only INIT level de-assert uses it (SDM 11.6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// 0.
    Edge,
    /// 1.
    Level,
}

/// Destination shorthand (ICR bits 19:18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shorthand {
    /// 00: use the destination field.
    None,
    /// 01: the sender only.
    SelfOnly,
    /// 10: every APIC, the sender included.
    AllIncludingSelf,
    /// 11: every APIC but the sender.
    AllExcludingSelf,
}

impl Shorthand {
    /// Decodes the 2-bit field.
    pub fn from_bits(bits: u32) -> Shorthand {
        match bits & 0x3 {
            0 => Shorthand::None,
            1 => Shorthand::SelfOnly,
            2 => Shorthand::AllIncludingSelf,
            _ => Shorthand::AllExcludingSelf,
        }
    }
}

/// Which register layout the ICR came from; decides the destination width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrFormat {
    /// 8-bit destination in bits 63:56 (ICR high 31:24).
    XApic,
    /// 32-bit destination in bits 63:32.
    X2Apic,
}

/// A decoded interrupt command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Icr {
    /// Vector (bits 7:0).
    pub vector: u8,
    /// Delivery mode (bits 10:8).
    pub delivery_mode: DeliveryMode,
    /// Destination mode (bit 11).
    pub dest_mode: DestMode,
    /// Level (bit 14).
    pub level: Level,
    /// Trigger mode (bit 15).
    pub trigger: Trigger,
    /// Destination shorthand (bits 19:18).
    pub shorthand: Shorthand,
    /// Destination: 8-bit xAPIC or 32-bit x2APIC value, per `format`.
    pub destination: u32,
    /// Layout the destination was decoded from.
    pub format: IcrFormat,
}

impl Icr {
    /// Decodes a 64-bit x2APIC ICR (MSR 0x830): destination in bits 63:32.
    pub fn from_raw(raw: u64) -> Icr {
        Icr::decode(raw as u32, (raw >> 32) as u32, IcrFormat::X2Apic)
    }

    /// Decodes an xAPIC ICR from its low (0x300) and high (0x310) halves:
    /// destination in high bits 31:24.
    pub fn from_xapic(low: u32, high: u32) -> Icr {
        Icr::decode(low, high >> 24, IcrFormat::XApic)
    }

    fn decode(low: u32, destination: u32, format: IcrFormat) -> Icr {
        Icr {
            vector: (low & 0xFF) as u8,
            delivery_mode: DeliveryMode::from_bits(low >> 8),
            dest_mode: if low & (1 << 11) != 0 {
                DestMode::Logical
            } else {
                DestMode::Physical
            },
            level: if low & (1 << 14) != 0 {
                Level::Assert
            } else {
                Level::Deassert
            },
            trigger: if low & (1 << 15) != 0 {
                Trigger::Level
            } else {
                Trigger::Edge
            },
            shorthand: Shorthand::from_bits(low >> 18),
            destination,
            format,
        }
    }

    /// The ICR low word (bits 31:0) this command encodes.
    pub fn low(&self) -> u32 {
        u32::from(self.vector)
            | self.delivery_mode.bits() << 8
            | u32::from(self.dest_mode == DestMode::Logical) << 11
            | u32::from(self.level == Level::Assert) << 14
            | u32::from(self.trigger == Trigger::Level) << 15
            | (self.shorthand as u32) << 18
    }

    /// The 64-bit register value in this command's format.
    pub fn to_raw(&self) -> u64 {
        let high = match self.format {
            IcrFormat::XApic => (self.destination & 0xFF) << 24,
            IcrFormat::X2Apic => self.destination,
        };
        u64::from(self.low()) | u64::from(high) << 32
    }

    /// Whether this is the INIT level de-assert message (INIT, level 0,
    /// level-triggered), which only synchronises arbitration IDs.
    pub fn is_init_deassert(&self) -> bool {
        self.delivery_mode == DeliveryMode::Init
            && self.level == Level::Deassert
            && self.trigger == Trigger::Level
    }

    /// A fixed, edge, self-shorthand command: what a SELF IPI MSR write sends.
    pub fn self_ipi(vector: u8) -> Icr {
        Icr::decode(u32::from(vector) | 1 << 14 | 1 << 18, 0, IcrFormat::X2Apic)
    }
}

/// An IPI a vCPU asked for by writing its ICR (or SELF IPI MSR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpiRequest {
    /// Index of the sending vCPU.
    pub source: usize,
    /// The command.
    pub icr: Icr,
}
