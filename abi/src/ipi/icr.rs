//! The interrupt command register (ICR): its bit layout, a builder for every
//! delivery mode and destination, and the checks the SDM's table of valid
//! combinations asks for.
//!
//! Layout (SDM Vol. 3A 11.6.1, Figure 11-12; x2APIC: 11.12.9, Figure 11-28):
//!
//! | bits | field |
//! |---|---|
//! | 7:0 | vector (start-up: the page number; NMI, INIT: ignored, 0 here) |
//! | 10:8 | delivery mode: 000 fixed, 001 lowest priority, 010 SMI, 100 NMI, 101 INIT, 110 start-up (011, 111 reserved) |
//! | 11 | destination mode: 0 physical, 1 logical |
//! | 12 | delivery status (xAPIC, read-only; reserved in x2APIC) |
//! | 14 | level: 0 de-assert (INIT level de-assert only), 1 assert |
//! | 15 | trigger mode: 0 edge, 1 level (INIT only) |
//! | 19:18 | shorthand: 00 none, 01 self, 10 all including self, 11 all excluding self |
//! | 31:20, 17:16, 13 | reserved |
//! | 63:32 | destination: xAPIC bits 63:56 only (ICR high 31:24), x2APIC all 32 |
//!
//! An [`Icr`] holds the low word and the destination field; the write
//! itself (xAPIC: high then low; x2APIC: one 64-bit MSR) is the sender's.

use crate::ApicMode;
use core::fmt;

/// ICR vector field (bits 7:0).
pub const ICR_VECTOR_MASK: u32 = 0xff;
/// ICR delivery mode field (bits 10:8).
pub const ICR_DELIVERY_MODE_MASK: u32 = 0b111 << 8;
/// ICR delivery mode "fixed" (bits 10:8 = 000).
pub const ICR_DM_FIXED: u32 = 0b000 << 8;
/// ICR delivery mode "lowest priority" (001).
pub const ICR_DM_LOWEST_PRIORITY: u32 = 0b001 << 8;
/// ICR delivery mode "SMI" (010).
pub const ICR_DM_SMI: u32 = 0b010 << 8;
/// ICR delivery mode "NMI" (100).
pub const ICR_DM_NMI: u32 = 0b100 << 8;
/// ICR delivery mode "INIT" (101).
pub const ICR_DM_INIT: u32 = 0b101 << 8;
/// ICR delivery mode "start-up" (110).
pub const ICR_DM_STARTUP: u32 = 0b110 << 8;
/// ICR destination mode "logical" (bit 11); physical is 0.
pub const ICR_DEST_LOGICAL: u32 = 1 << 11;
/// ICR delivery status (bit 12): read-only in xAPIC, reserved in x2APIC.
pub const ICR_DELIVERY_STATUS: u32 = 1 << 12;
/// ICR level "assert" (bit 14).
pub const ICR_LEVEL_ASSERT: u32 = 1 << 14;
/// ICR trigger mode "level" (bit 15); edge is 0.
pub const ICR_TRIGGER_LEVEL: u32 = 1 << 15;
/// Destination shorthand field shift (bits 19:18).
pub const ICR_SHORTHAND_SHIFT: u32 = 18;
/// Destination shorthand field (bits 19:18).
pub const ICR_SHORTHAND_MASK: u32 = 0b11 << ICR_SHORTHAND_SHIFT;
/// Reserved bits of the low word (31:20, 17:16, 13): KVM's x2APIC ICR
/// write raises #GP when one is set.
pub const ICR_RESERVED: u32 = 0xfff0_0000 | 0b11 << 16 | 1 << 13;
/// The physical and logical broadcast destination in xAPIC mode.
pub const XAPIC_BROADCAST: u32 = 0xff;
/// The physical and logical broadcast destination in x2APIC mode.
pub const X2APIC_BROADCAST: u32 = 0xffff_ffff;

/// ICR destination shorthand (bits 19:18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shorthand {
    /// Use the destination field.
    None = 0,
    /// The sending APIC only.
    SelfOnly = 1,
    /// Every APIC, the sender included.
    AllIncludingSelf = 2,
    /// Every APIC but the sender.
    AllButSelf = 3,
}

impl Shorthand {
    /// Decodes the 2-bit field.
    pub const fn from_bits(bits: u32) -> Shorthand {
        match bits & 0b11 {
            0 => Shorthand::None,
            1 => Shorthand::SelfOnly,
            2 => Shorthand::AllIncludingSelf,
            _ => Shorthand::AllButSelf,
        }
    }
}

/// ICR low word of a fixed, edge, "assert" IPI of `vector` (the built-in
/// payload's hot path; the same bits as [`Icr::fixed`]).
pub const fn icr_low(vector: u8, logical: bool, shorthand: Shorthand) -> u32 {
    let mut v = vector as u32 | ICR_DM_FIXED | ICR_LEVEL_ASSERT;
    if logical {
        v |= ICR_DEST_LOGICAL;
    }
    v | (shorthand as u32) << ICR_SHORTHAND_SHIFT
}

/// ICR delivery mode (bits 10:8).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryMode {
    /// 000: the vector, to every target.
    Fixed = 0b000,
    /// 001: the vector, to one target chosen among those addressed.
    LowestPriority = 0b001,
    /// 010: system management interrupt (no builder: nothing in an ipivmm
    /// VM handles SMM).
    Smi = 0b010,
    /// 100: non-maskable interrupt; the vector is ignored.
    Nmi = 0b100,
    /// 101: INIT (assert), or INIT level de-assert (level 0, trigger level).
    Init = 0b101,
    /// 110: start-up IPI; the vector is the start page.
    StartUp = 0b110,
}

impl DeliveryMode {
    /// Decodes the 3-bit field; `None` for the reserved 011 and 111.
    pub const fn from_bits(bits: u32) -> Option<DeliveryMode> {
        match bits & 0b111 {
            0b000 => Some(DeliveryMode::Fixed),
            0b001 => Some(DeliveryMode::LowestPriority),
            0b010 => Some(DeliveryMode::Smi),
            0b100 => Some(DeliveryMode::Nmi),
            0b101 => Some(DeliveryMode::Init),
            0b110 => Some(DeliveryMode::StartUp),
            _ => None,
        }
    }

    /// Lower-case name, as in messages.
    pub const fn name(self) -> &'static str {
        match self {
            DeliveryMode::Fixed => "fixed",
            DeliveryMode::LowestPriority => "lowest-priority",
            DeliveryMode::Smi => "SMI",
            DeliveryMode::Nmi => "NMI",
            DeliveryMode::Init => "INIT",
            DeliveryMode::StartUp => "start-up",
        }
    }
}

/// Whom an ICR addresses: its destination mode and field, or a shorthand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The APIC whose ID is this (the mode's broadcast ID: every APIC).
    Physical(u32),
    /// Every APIC whose logical ID matches this ([`crate::LogicalModel::matches`]).
    Logical(u32),
    /// Shorthand "self".
    SelfOnly,
    /// Shorthand "all including self".
    AllIncludingSelf,
    /// Shorthand "all excluding self".
    AllButSelf,
}

/// One interrupt command: the ICR low word and the destination field.
///
/// Start from the delivery mode, then say where it goes:
///
/// ```
/// use ipivmm_abi::{Destination, DeliveryMode, Icr};
///
/// let ipi = Icr::fixed(0x40).physical(3);
/// assert_eq!((ipi.low(), ipi.dest()), (0x4040, 3));
/// assert_eq!(ipi.x2apic_value(), 3 << 32 | 0x4040);
/// assert_eq!(ipi.xapic_high(), 3 << 24);
///
/// let nmi = Icr::nmi().all_but_self();
/// assert_eq!(nmi.delivery_mode(), Some(DeliveryMode::Nmi));
/// assert_eq!(nmi.destination(), Destination::AllButSelf);
///
/// let lp = Icr::lowest_priority(0x41).logical(0b0110);
/// assert_eq!(lp.low(), 0x4941); // mode 001, logical, assert
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icr {
    low: u32,
    dest: u32,
}

impl Icr {
    /// An edge-triggered, asserted command of `mode` with `vector`, to
    /// physical destination 0 until a destination is chosen.
    const fn edge(mode: u32, vector: u8) -> Icr {
        Icr {
            low: vector as u32 | mode | ICR_LEVEL_ASSERT,
            dest: 0,
        }
    }

    /// Fixed delivery of `vector` to every target.
    pub const fn fixed(vector: u8) -> Icr {
        Icr::edge(ICR_DM_FIXED, vector)
    }

    /// Lowest-priority delivery of `vector`: to one of the addressed APICs.
    /// Model-specific on hardware (SDM 11.6.1 note 1; reserved in Intel's
    /// x2APIC ICR); KVM's APIC delivers it to one vCPU, chosen by vector
    /// hashing (`kvm.vector_hashing`, on by default) or arbitration priority.
    pub const fn lowest_priority(vector: u8) -> Icr {
        Icr::edge(ICR_DM_LOWEST_PRIORITY, vector)
    }

    /// A non-maskable interrupt (vector field 0, ignored).
    pub const fn nmi() -> Icr {
        Icr::edge(ICR_DM_NMI, 0)
    }

    /// INIT, level-triggered assert (as Linux's `wakeup_secondary_cpu_via_init`
    /// sends it). On KVM the target resets to the INIT state (real mode,
    /// `CS:IP = F000:FFF0`) and waits for a start-up IPI.
    pub const fn init() -> Icr {
        Icr {
            low: ICR_DM_INIT | ICR_LEVEL_ASSERT | ICR_TRIGGER_LEVEL,
            dest: 0,
        }
    }

    /// INIT level de-assert (level 0, trigger level): the P6-era
    /// arbitration-ID resync, ignored by the Pentium 4 and later and by KVM.
    pub const fn init_deassert() -> Icr {
        Icr {
            low: ICR_DM_INIT | ICR_TRIGGER_LEVEL,
            dest: 0,
        }
    }

    /// Start-up IPI: a target waiting for SIPI (after an INIT) starts in
    /// real mode at `CS:IP = (page << 8):0`, i.e. physical `page << 12`.
    pub const fn startup(page: u8) -> Icr {
        Icr::edge(ICR_DM_STARTUP, page)
    }

    /// A command from its raw low word and destination field (not checked:
    /// see [`Icr::check`]).
    pub const fn from_raw(low: u32, dest: u32) -> Icr {
        Icr { low, dest }
    }

    /// The command an x2APIC ICR value (MSR 0x830) holds: the inverse of
    /// [`Icr::x2apic_value`], destination in bits 63:32.
    pub const fn from_x2apic(value: u64) -> Icr {
        Icr::from_raw(value as u32, (value >> 32) as u32)
    }

    /// The command an xAPIC ICR pair holds (low at 0x300, high at 0x310):
    /// the inverse of [`Icr::low`] and [`Icr::xapic_high`], destination in
    /// the high word's bits 31:24 (the rest of it is reserved).
    pub const fn from_xapic(low: u32, high: u32) -> Icr {
        Icr::from_raw(low, high >> 24)
    }

    /// To the APIC with ID `apic_id` (physical mode, no shorthand).
    pub const fn physical(self, apic_id: u32) -> Icr {
        Icr {
            low: self.low & !(ICR_DEST_LOGICAL | ICR_SHORTHAND_MASK),
            dest: apic_id,
        }
    }

    /// To the APICs whose logical ID matches `dest` (logical mode, no
    /// shorthand).
    pub const fn logical(self, dest: u32) -> Icr {
        Icr {
            low: (self.low & !ICR_SHORTHAND_MASK) | ICR_DEST_LOGICAL,
            dest,
        }
    }

    /// With destination shorthand `s` (`Shorthand::None` leaves the
    /// destination field in charge). A shorthand clears the destination
    /// field and the destination mode, which the APIC ignores.
    pub const fn shorthand(self, s: Shorthand) -> Icr {
        let low = self.low & !ICR_SHORTHAND_MASK;
        match s {
            Shorthand::None => Icr {
                low,
                dest: self.dest,
            },
            _ => Icr {
                low: (low & !ICR_DEST_LOGICAL) | (s as u32) << ICR_SHORTHAND_SHIFT,
                dest: 0,
            },
        }
    }

    /// Shorthand "self".
    pub const fn self_only(self) -> Icr {
        self.shorthand(Shorthand::SelfOnly)
    }

    /// Shorthand "all including self".
    pub const fn all_including_self(self) -> Icr {
        self.shorthand(Shorthand::AllIncludingSelf)
    }

    /// Shorthand "all excluding self".
    pub const fn all_but_self(self) -> Icr {
        self.shorthand(Shorthand::AllButSelf)
    }

    /// To `d`.
    pub const fn to(self, d: Destination) -> Icr {
        match d {
            Destination::Physical(id) => self.physical(id),
            Destination::Logical(dest) => self.logical(dest),
            Destination::SelfOnly => self.self_only(),
            Destination::AllIncludingSelf => self.all_including_self(),
            Destination::AllButSelf => self.all_but_self(),
        }
    }

    /// The low word (xAPIC offset 0x300; x2APIC MSR 0x830 bits 31:0).
    pub const fn low(self) -> u32 {
        self.low
    }

    /// The destination field, unshifted: an APIC ID or logical destination.
    pub const fn dest(self) -> u32 {
        self.dest
    }

    /// The xAPIC ICR high word (offset 0x310): destination in bits 31:24.
    pub const fn xapic_high(self) -> u32 {
        self.dest << 24
    }

    /// The x2APIC ICR (MSR 0x830): destination in bits 63:32.
    pub const fn x2apic_value(self) -> u64 {
        (self.dest as u64) << 32 | self.low as u64
    }

    /// The vector field.
    pub const fn vector(self) -> u8 {
        (self.low & ICR_VECTOR_MASK) as u8
    }

    /// The delivery mode; `None` if reserved.
    pub const fn delivery_mode(self) -> Option<DeliveryMode> {
        DeliveryMode::from_bits(self.low >> 8)
    }

    /// The shorthand field.
    pub const fn shorthand_field(self) -> Shorthand {
        Shorthand::from_bits(self.low >> ICR_SHORTHAND_SHIFT)
    }

    /// Whom it addresses.
    pub const fn destination(self) -> Destination {
        match self.shorthand_field() {
            Shorthand::SelfOnly => Destination::SelfOnly,
            Shorthand::AllIncludingSelf => Destination::AllIncludingSelf,
            Shorthand::AllButSelf => Destination::AllButSelf,
            Shorthand::None if self.low & ICR_DEST_LOGICAL != 0 => Destination::Logical(self.dest),
            Shorthand::None => Destination::Physical(self.dest),
        }
    }

    /// Level bit set (assert).
    pub const fn is_assert(self) -> bool {
        self.low & ICR_LEVEL_ASSERT != 0
    }

    /// Trigger mode bit set (level).
    pub const fn is_level_triggered(self) -> bool {
        self.low & ICR_TRIGGER_LEVEL != 0
    }

    /// INIT level de-assert (delivered nowhere on KVM): INIT with the level
    /// bit clear *and* the trigger mode level (SDM 11.6.1); an edge INIT
    /// with the level bit clear is an INIT to KVM (`__apic_accept_irq`
    /// delivers unless both), and [`Icr::check`] refuses it.
    pub const fn is_init_deassert(self) -> bool {
        matches!(self.delivery_mode(), Some(DeliveryMode::Init))
            && !self.is_assert()
            && self.is_level_triggered()
    }

    /// Checks the command against the SDM's ICR rules for an APIC in
    /// `mode`: no reserved bit or delivery mode; a legal vector (16..=255)
    /// for fixed and lowest-priority delivery; the level bit set except for
    /// INIT level de-assert; an 8-bit destination in xAPIC mode; the
    /// shorthand/delivery-mode pairs of SDM Table 11-3 (Pentium 4 and later:
    /// "self" and "all including self" carry fixed delivery only); and no
    /// lowest-priority delivery to the broadcast ID (KVM turns an xAPIC
    /// physical one into fixed delivery to every vCPU).
    pub fn check(self, mode: ApicMode) -> Result<(), IcrError> {
        let reserved = self.low & ICR_RESERVED;
        if reserved != 0 {
            return Err(IcrError::ReservedBits(reserved));
        }
        let Some(dm) = self.delivery_mode() else {
            return Err(IcrError::ReservedDeliveryMode((self.low >> 8) & 0b111));
        };
        let vector = self.vector();
        if matches!(dm, DeliveryMode::Fixed | DeliveryMode::LowestPriority) && vector < 16 {
            return Err(IcrError::IllegalVector(vector));
        }
        if !self.is_assert() && !self.is_init_deassert() {
            return Err(IcrError::Deasserted(dm));
        }
        let sh = self.shorthand_field();
        let allowed = match sh {
            Shorthand::None | Shorthand::AllButSelf => true,
            Shorthand::SelfOnly | Shorthand::AllIncludingSelf => dm as u32 == 0,
        };
        if !allowed {
            return Err(IcrError::Shorthand {
                mode: dm,
                shorthand: sh,
            });
        }
        let broadcast = match mode {
            ApicMode::Xapic => XAPIC_BROADCAST,
            ApicMode::X2apic => X2APIC_BROADCAST,
        };
        if sh == Shorthand::None {
            if mode == ApicMode::Xapic && self.dest > XAPIC_BROADCAST {
                return Err(IcrError::DestinationTooWide(self.dest));
            }
            if dm == DeliveryMode::LowestPriority && self.dest == broadcast {
                return Err(IcrError::LowestPriorityBroadcast);
            }
        }
        Ok(())
    }
}

/// What [`Icr::check`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcrError {
    /// Reserved bits of the low word are set (these bits).
    ReservedBits(u32),
    /// Delivery mode 011 or 111.
    ReservedDeliveryMode(u32),
    /// A fixed or lowest-priority vector below 16 (the APIC's "send illegal
    /// vector" error).
    IllegalVector(u8),
    /// Level de-assert on a delivery mode other than INIT.
    Deasserted(DeliveryMode),
    /// A shorthand the SDM does not allow with this delivery mode.
    Shorthand {
        /// Delivery mode.
        mode: DeliveryMode,
        /// Shorthand.
        shorthand: Shorthand,
    },
    /// An xAPIC destination wider than 8 bits.
    DestinationTooWide(u32),
    /// Lowest-priority delivery to the broadcast ID.
    LowestPriorityBroadcast,
}

impl fmt::Display for IcrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IcrError::ReservedBits(b) => write!(f, "reserved ICR bits {b:#x} set"),
            IcrError::ReservedDeliveryMode(m) => write!(f, "reserved delivery mode {m:#05b}"),
            IcrError::IllegalVector(v) => {
                write!(
                    f,
                    "vector {v} is illegal for fixed/lowest-priority delivery (16..=255)"
                )
            }
            IcrError::Deasserted(DeliveryMode::Init) => write!(
                f,
                "an INIT with the level bit clear is a de-assert only with the trigger mode level (bit 15)"
            ),
            IcrError::Deasserted(m) => {
                write!(f, "level de-assert is for INIT only, not {}", m.name())
            }
            IcrError::Shorthand { mode, shorthand } => write!(
                f,
                "shorthand {shorthand:?} carries fixed delivery only, not {} (SDM Table 11-3)",
                mode.name()
            ),
            IcrError::DestinationTooWide(d) => {
                write!(f, "destination {d:#x} does not fit the xAPIC's 8 bits")
            }
            IcrError::LowestPriorityBroadcast => {
                write!(f, "lowest-priority delivery to the broadcast ID")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::ToString;

    #[test]
    fn icr_low_encodes_fields() {
        assert_eq!(icr_low(0x40, false, Shorthand::None), 0x4040);
        assert_eq!(icr_low(0x40, false, Shorthand::AllButSelf), 0xc4040);
        assert_eq!(icr_low(0x41, false, Shorthand::SelfOnly), 0x44041);
        assert_eq!(icr_low(0x40, true, Shorthand::None), 0x4840);
        assert_eq!(icr_low(0xff, false, Shorthand::AllIncludingSelf), 0x840ff);
    }

    /// The low words, written out bit by bit from the SDM's figure.
    #[test]
    fn builders_set_the_sdm_bits() {
        const ASSERT: u32 = 1 << 14;
        const LEVEL: u32 = 1 << 15;
        const LOGICAL: u32 = 1 << 11;
        let cases = [
            (Icr::fixed(0x40), 0x40 | ASSERT),
            (Icr::lowest_priority(0x41), 0x41 | 0b001 << 8 | ASSERT),
            (Icr::nmi(), 0b100 << 8 | ASSERT),
            (Icr::init(), 0b101 << 8 | ASSERT | LEVEL),
            (Icr::init_deassert(), 0b101 << 8 | LEVEL),
            (Icr::startup(0x9a), 0x9a | 0b110 << 8 | ASSERT),
        ];
        for (icr, low) in cases {
            assert_eq!(icr.low(), low, "{icr:?}");
            assert_eq!(icr.physical(7).low(), low, "{icr:?}");
            assert_eq!(icr.physical(7).dest(), 7);
            assert_eq!(icr.logical(0x30).low(), low | LOGICAL, "{icr:?}");
            assert_eq!(icr.logical(0x30).dest(), 0x30);
            for (sh, bits) in [
                (Shorthand::SelfOnly, 0b01),
                (Shorthand::AllIncludingSelf, 0b10),
                (Shorthand::AllButSelf, 0b11),
            ] {
                let s = icr.logical(0x30).shorthand(sh);
                assert_eq!(s.low(), low | bits << 18, "{icr:?} {sh:?}");
                assert_eq!(s.dest(), 0, "a shorthand clears the destination");
            }
        }
        assert_eq!(
            Icr::fixed(0x40).all_but_self().low(),
            icr_low(0x40, false, Shorthand::AllButSelf)
        );
        assert_eq!(
            Icr::fixed(0x40).logical(1).low(),
            icr_low(0x40, true, Shorthand::None)
        );
    }

    #[test]
    fn destinations_switch_mode_and_shorthand() {
        let lp = Icr::lowest_priority(0x50);
        let back = lp.all_but_self().logical(0xff).physical(0x1234);
        assert_eq!(back.destination(), Destination::Physical(0x1234));
        assert_eq!(back.low(), lp.low());
        for d in [
            Destination::Physical(5),
            Destination::Logical(0x0003_0001),
            Destination::SelfOnly,
            Destination::AllIncludingSelf,
            Destination::AllButSelf,
        ] {
            assert_eq!(Icr::nmi().to(d).destination(), d);
        }
        assert_eq!(
            Icr::fixed(0x40)
                .logical(9)
                .shorthand(Shorthand::None)
                .dest(),
            9
        );
    }

    /// The register images read back as the SDM's figures lay them out:
    /// a value written out field by field decodes to those fields.
    #[test]
    fn register_images_decode_field_by_field() {
        // Vector 0x41, NMI (100), logical, assert, level, all-but-self, and
        // a destination in the x2APIC value's 63:32 / the xAPIC high's 31:24.
        let low = 0x41 | 0b100 << 8 | 1 << 11 | 1 << 14 | 1 << 15 | 0b11 << 18;
        let x2 = Icr::from_x2apic(0x1234_5678 << 32 | low as u64);
        assert_eq!(x2.low(), low);
        assert_eq!(x2.dest(), 0x1234_5678);
        assert_eq!(x2.vector(), 0x41);
        assert_eq!(x2.delivery_mode(), Some(DeliveryMode::Nmi));
        assert!(x2.is_assert() && x2.is_level_triggered());
        assert_eq!(x2.destination(), Destination::AllButSelf);
        // xAPIC: only the high word's 31:24 is the destination.
        let x = Icr::from_xapic(0x40 | 1 << 11 | 1 << 14, 0xa5 << 24 | 0x00ff_ffff);
        assert_eq!(x.destination(), Destination::Logical(0xa5));
        assert_eq!(x.xapic_high(), 0xa500_0000);
        let p = Icr::from_x2apic(0xdead_beef_0000_40fd);
        assert_eq!(p.destination(), Destination::Physical(0xdead_beef));
        assert_eq!(p.delivery_mode(), Some(DeliveryMode::Fixed));
        // Reserved delivery modes decode to none.
        assert_eq!(Icr::from_x2apic(0b011 << 8).delivery_mode(), None);
        assert_eq!(Icr::from_x2apic(0b111 << 8).delivery_mode(), None);
        assert_eq!(
            Icr::from_x2apic(0b010 << 8).delivery_mode(),
            Some(DeliveryMode::Smi)
        );
        // Every shorthand, whatever the destination mode and field.
        for (bits, d) in [
            (0b01, Destination::SelfOnly),
            (0b10, Destination::AllIncludingSelf),
            (0b11, Destination::AllButSelf),
        ] {
            let v = 7u64 << 32 | 1 << 11 | bits << 18 | 0x40;
            assert_eq!(Icr::from_x2apic(v).destination(), d, "{bits:#b}");
        }
    }

    #[test]
    fn register_images_round_trip() {
        for icr in [
            Icr::fixed(0xec).physical(0xfe),
            Icr::nmi().logical(0x0002_8000),
            Icr::init().all_but_self(),
            Icr::startup(0x9a).physical(3),
        ] {
            assert_eq!(Icr::from_x2apic(icr.x2apic_value()), icr);
        }
        let icr = Icr::lowest_priority(0x41).logical(0x0c);
        assert_eq!(Icr::from_xapic(icr.low(), icr.xapic_high()), icr);
    }

    #[test]
    fn register_images_place_the_destination() {
        let icr = Icr::fixed(0xec).physical(0xfe);
        assert_eq!(icr.xapic_high(), 0xfe00_0000);
        assert_eq!(icr.x2apic_value(), 0x0000_00fe_0000_40ec);
        let wide = Icr::nmi().logical(0x0002_8000);
        assert_eq!(wide.x2apic_value(), 0x0002_8000_0000_4c00);
    }

    #[test]
    fn decoding_round_trips() {
        for bits in 0..8 {
            let dm = DeliveryMode::from_bits(bits);
            assert_eq!(dm.is_none(), bits == 0b011 || bits == 0b111, "{bits:#b}");
            if let Some(dm) = dm {
                assert_eq!(dm as u32, bits);
                assert_eq!(Icr::from_raw(bits << 8, 0).delivery_mode(), Some(dm));
            }
        }
        assert_eq!(Icr::startup(0x12).vector(), 0x12);
        assert!(Icr::init_deassert().is_init_deassert());
        assert!(!Icr::init().is_init_deassert());
        assert!(Icr::init().is_level_triggered() && Icr::init().is_assert());
        // Level bit clear with an edge trigger is no de-assert: KVM sends
        // an INIT, and the check refuses it (a property test once found
        // the LAPIC model's own decoder and this one apart on it).
        let edge = Icr::from_raw(0b101 << 8, 1);
        assert!(!edge.is_init_deassert());
        assert_eq!(
            edge.check(ApicMode::X2apic),
            Err(IcrError::Deasserted(DeliveryMode::Init))
        );
    }

    #[test]
    fn check_accepts_the_builders() {
        for mode in [ApicMode::Xapic, ApicMode::X2apic] {
            for icr in [
                Icr::fixed(0x40).physical(1),
                Icr::fixed(0x40).logical(0x0e),
                Icr::fixed(0x40).self_only(),
                Icr::fixed(0x40).all_including_self(),
                Icr::fixed(0x40).all_but_self(),
                Icr::fixed(0x40).physical(0xff),
                Icr::lowest_priority(0x40).physical(2),
                Icr::lowest_priority(0x40).logical(0x06),
                Icr::lowest_priority(0x40).all_but_self(),
                Icr::nmi().physical(1),
                Icr::nmi().logical(0x02),
                Icr::nmi().all_but_self(),
                Icr::init().physical(1),
                Icr::init_deassert().physical(1),
                Icr::init().all_but_self(),
                Icr::startup(0x60).physical(1),
                Icr::startup(0x60).all_but_self(),
            ] {
                assert_eq!(icr.check(mode), Ok(()), "{mode:?} {icr:?}");
            }
        }
        assert_eq!(
            Icr::fixed(0x40).physical(0x1_0000).check(ApicMode::X2apic),
            Ok(())
        );
    }

    #[test]
    fn check_refuses_what_the_sdm_does() {
        let x = ApicMode::Xapic;
        let x2 = ApicMode::X2apic;
        let cases = [
            (
                Icr::from_raw(0x40 | 1 << 13, 0),
                x2,
                IcrError::ReservedBits(1 << 13),
            ),
            (
                Icr::from_raw(0x40 | 1 << 20, 0),
                x,
                IcrError::ReservedBits(1 << 20),
            ),
            (
                Icr::from_raw(0b011 << 8 | ASSERT, 0),
                x,
                IcrError::ReservedDeliveryMode(0b011),
            ),
            (
                Icr::from_raw(0b111 << 8 | ASSERT, 0),
                x2,
                IcrError::ReservedDeliveryMode(0b111),
            ),
            (Icr::fixed(15), x, IcrError::IllegalVector(15)),
            (Icr::lowest_priority(0), x2, IcrError::IllegalVector(0)),
            (
                Icr::from_raw(0x40, 1),
                x,
                IcrError::Deasserted(DeliveryMode::Fixed),
            ),
            (
                Icr::fixed(0x40).physical(0x100),
                x,
                IcrError::DestinationTooWide(0x100),
            ),
            (
                Icr::nmi().logical(0x1ff),
                x,
                IcrError::DestinationTooWide(0x1ff),
            ),
            (
                Icr::lowest_priority(0x40).physical(0xff),
                x,
                IcrError::LowestPriorityBroadcast,
            ),
            (
                Icr::lowest_priority(0x40).logical(X2APIC_BROADCAST),
                x2,
                IcrError::LowestPriorityBroadcast,
            ),
        ];
        for (icr, mode, want) in cases {
            assert_eq!(icr.check(mode), Err(want), "{mode:?} {icr:?}");
        }
        // "self" and "all including self" carry fixed delivery only.
        for icr in [
            Icr::lowest_priority(0x40),
            Icr::nmi(),
            Icr::init(),
            Icr::startup(0x60),
        ] {
            for sh in [Shorthand::SelfOnly, Shorthand::AllIncludingSelf] {
                let e = icr.shorthand(sh).check(x2).unwrap_err();
                assert!(matches!(e, IcrError::Shorthand { shorthand, .. } if shorthand == sh));
            }
        }
    }

    const ASSERT: u32 = ICR_LEVEL_ASSERT;

    #[test]
    fn errors_read_as_sentences() {
        let e = Icr::nmi().self_only().check(ApicMode::Xapic).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shorthand SelfOnly carries fixed delivery only, not NMI (SDM Table 11-3)"
        );
    }
}
