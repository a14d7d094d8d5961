//! The ACPI tables a Linux guest finds its CPUs, interrupt controllers and
//! power-off in, built with rust-vmm's `acpi_tables`: RSDP → XSDT → FADT
//! (hardware-reduced, with the sleep control and status registers of
//! `ipivmm_devices::power`'s ports) → DSDT (`\_S5_` only), and the MADT (one
//! local APIC per vCPU, x2APIC entries for IDs above 254, the IOAPIC of
//! `--irqchip kernel`). Why ACPI rather than an MP table: 32-bit x2APIC IDs
//! and a clean power-off, which an MP table cannot describe.
use super::layout::{ACPI_END, ACPI_START, IOAPIC_BASE, LAPIC_BASE};
use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::gas::{AccessSize, AddressSpace, GAS};
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::{aml, Aml, AmlSink};
use zerocopy::{Immutable, IntoBytes};

const OEM_ID: [u8; 6] = *b"IPIVMM";
const OEM_TABLE: [u8; 8] = *b"IPIVMM  ";

/// The sleep control register (FADT `SLEEP_CONTROL_REG`): the guest writes
/// SLP_TYP (bits 4:2) and SLP_EN (bit 5) here to power off.
pub(crate) const SLEEP_CONTROL_PORT: u16 = power::PORT;
/// The sleep status register (FADT `SLEEP_STATUS_REG`), read as 0.
pub(crate) const SLEEP_STATUS_PORT: u16 = power::PORT + 1;
use ipivmm_devices::power::{self, S5_SLEEP_TYPE};

/// IAPC_BOOT_ARCH: no VGA (bit 2), no MSI (bit 3), no CMOS RTC (bit 5);
/// bit 1 (an 8042) clear, so Linux probes neither keyboard controller nor RTC.
const IAPC_BOOT_ARCH: u16 = (1 << 2) | (1 << 3) | (1 << 5);

/// The ACPI 6 MADT entry of a local x2APIC (type 9, 16 bytes), which the
/// crate does not have: an APIC ID above 254 needs it.
#[repr(C, packed)]
#[derive(Clone, Copy, IntoBytes, Immutable)]
struct LocalX2Apic {
    kind: u8,
    length: u8,
    reserved: u16,
    x2apic_id: u32,
    flags: u32,
    uid: u32,
}

impl Aml for LocalX2Apic {
    fn to_aml_bytes(&self, sink: &mut dyn AmlSink) {
        sink.vec(self.as_bytes());
    }
}

/// What the tables describe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// APIC ID of each vCPU, index = vCPU = ACPI processor UID.
    pub apic_ids: Vec<u32>,
    /// An IOAPIC at [`IOAPIC_BASE`] (the kernel irqchip's; the split
    /// irqchip has none).
    pub ioapic: bool,
}

/// One table at its guest-physical address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Where it goes.
    pub addr: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Why the tables do not fit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the ACPI tables of {vcpus} vCPUs take {bytes} bytes, more than the {room} bytes from {ACPI_START:#x} to {ACPI_END:#x}")]
pub struct TooLarge {
    /// vCPUs.
    pub vcpus: usize,
    /// Bytes needed.
    pub bytes: u64,
    /// Bytes there are.
    pub room: u64,
}

fn bytes_of(t: &dyn Aml) -> Vec<u8> {
    let mut v = Vec::new();
    t.to_aml_bytes(&mut v);
    v
}

fn madt(p: &Platform) -> Vec<u8> {
    let mut m = MADT::new(
        OEM_ID,
        OEM_TABLE,
        1,
        LocalInterruptController::Address(LAPIC_BASE),
    );
    for (uid, &id) in p.apic_ids.iter().enumerate() {
        match (u8::try_from(uid), u8::try_from(id)) {
            // 0xff is the xAPIC broadcast ID: never a CPU's in a LAPIC entry.
            (Ok(uid), Ok(id)) if id < 0xff => {
                m.add_structure(ProcessorLocalApic::new(uid, id, EnabledStatus::Enabled))
            }
            _ => m.add_structure(LocalX2Apic {
                kind: 9,
                length: 16,
                reserved: 0,
                x2apic_id: id,
                flags: EnabledStatus::Enabled as u32,
                uid: uid as u32,
            }),
        }
    }
    if p.ioapic {
        m.add_structure(IoApic::new(0, IOAPIC_BASE, 0));
    }
    bytes_of(&m)
}

fn dsdt() -> Vec<u8> {
    let mut d = Sdt::new(*b"DSDT", 36, 6, OEM_ID, OEM_TABLE, 1);
    let s5 = aml::Name::new("_S5_".into(), &aml::Package::new(vec![&S5_SLEEP_TYPE]));
    d.append_slice(&bytes_of(&s5));
    d.as_slice().to_vec()
}

fn fadt(dsdt_addr: u64) -> Vec<u8> {
    let io_byte = |port: u16| {
        GAS::new(
            AddressSpace::SystemIo,
            8,
            0,
            AccessSize::ByteAccess,
            port.into(),
        )
    };
    let mut b = FADTBuilder::new(OEM_ID, OEM_TABLE, 1)
        .dsdt_64(dsdt_addr)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton);
    b.sleep_control_reg = io_byte(SLEEP_CONTROL_PORT);
    b.sleep_status_reg = io_byte(SLEEP_STATUS_PORT);
    b.iapc_boot_arch = IAPC_BOOT_ARCH.into();
    bytes_of(&b.finalize())
}

/// The tables for `p`, laid out from [`ACPI_START`] (the RSDP first, each
/// table 16-byte aligned), or why they do not fit below [`ACPI_END`].
pub fn tables(p: &Platform) -> Result<Vec<Table>, TooLarge> {
    let align = |a: u64| a.next_multiple_of(16);
    let rsdp_at = ACPI_START;
    let xsdt_at = align(rsdp_at + Rsdp::len() as u64);
    // The XSDT has two entries: FADT and MADT.
    let xsdt_len = 36 + 2 * 8;
    let dsdt_at = align(xsdt_at + xsdt_len);
    let dsdt = dsdt();
    let fadt_at = align(dsdt_at + dsdt.len() as u64);
    let fadt = fadt(dsdt_at);
    let madt_at = align(fadt_at + fadt.len() as u64);
    let madt = madt(p);
    let end = madt_at + madt.len() as u64;
    if end > ACPI_END {
        return Err(TooLarge {
            vcpus: p.apic_ids.len(),
            bytes: end - ACPI_START,
            room: ACPI_END - ACPI_START,
        });
    }
    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE, 1);
    xsdt.add_entry(fadt_at);
    xsdt.add_entry(madt_at);
    let xsdt = bytes_of(&xsdt);
    debug_assert_eq!(xsdt.len() as u64, xsdt_len);
    Ok(vec![
        Table {
            addr: rsdp_at,
            bytes: bytes_of(&Rsdp::new(OEM_ID, xsdt_at)),
        },
        Table {
            addr: xsdt_at,
            bytes: xsdt,
        },
        Table {
            addr: dsdt_at,
            bytes: dsdt,
        },
        Table {
            addr: fadt_at,
            bytes: fadt,
        },
        Table {
            addr: madt_at,
            bytes: madt,
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn platform(n: u32, ioapic: bool) -> Platform {
        Platform {
            apic_ids: (0..n).collect(),
            ioapic,
        }
    }

    fn find<'a>(t: &'a [Table], sig: &[u8]) -> &'a Table {
        t.iter().find(|t| t.bytes.starts_with(sig)).unwrap()
    }

    #[test]
    fn every_table_checksums_to_zero_and_says_its_length() {
        let t = tables(&platform(4, true)).unwrap();
        let rsdp = &t[0].bytes;
        assert_eq!(&rsdp[..8], b"RSD PTR ");
        assert_eq!(sum(&rsdp[..20]), 0, "ACPI 1.0 checksum");
        assert_eq!(sum(rsdp), 0, "extended checksum");
        assert_eq!(t[0].addr, ACPI_START);
        for table in &t[1..] {
            assert_eq!(sum(&table.bytes), 0, "{:?}", &table.bytes[..4]);
            assert_eq!(u32_at(&table.bytes, 4) as usize, table.bytes.len());
            assert_eq!(table.addr % 16, 0);
            assert!(table.addr + table.bytes.len() as u64 <= ACPI_END);
        }
        // No two tables overlap.
        for w in t.windows(2) {
            assert!(w[0].addr + w[0].bytes.len() as u64 <= w[1].addr);
        }
    }

    #[test]
    fn the_pointers_lead_from_the_rsdp_to_every_table() {
        let t = tables(&platform(2, false)).unwrap();
        let at = |a: u64| t.iter().find(|x| x.addr == a).unwrap();
        let xsdt = at(u64_at(&t[0].bytes, 24));
        assert_eq!(&xsdt.bytes[..4], b"XSDT");
        let fadt = at(u64_at(&xsdt.bytes, 36));
        assert_eq!(&fadt.bytes[..4], b"FACP");
        assert_eq!(&at(u64_at(&xsdt.bytes, 44)).bytes[..4], b"APIC");
        // X_DSDT at 140, flags at 112 (hardware-reduced: bit 20).
        assert_eq!(&at(u64_at(&fadt.bytes, 140)).bytes[..4], b"DSDT");
        assert_ne!(u32_at(&fadt.bytes, 112) & (1 << 20), 0);
        // SLEEP_CONTROL_REG at 244, SLEEP_STATUS_REG at 256: byte-wide
        // system I/O at the power device's ports.
        assert_eq!(fadt.bytes[244], 1, "system I/O");
        assert_eq!(fadt.bytes[245], 8, "8 bits");
        assert_eq!(u64_at(&fadt.bytes, 248), u64::from(SLEEP_CONTROL_PORT));
        assert_eq!(u64_at(&fadt.bytes, 260), u64::from(SLEEP_STATUS_PORT));
        assert_eq!(
            u16::from_le_bytes([fadt.bytes[109], fadt.bytes[110]]),
            IAPC_BOOT_ARCH
        );
    }

    #[test]
    fn the_dsdt_names_s5() {
        let t = tables(&platform(1, false)).unwrap();
        let d = &find(&t, b"DSDT").bytes;
        // NameOp "_S5_" PackageOp len 1-element BytePrefix 5
        let body = &d[36..];
        assert_eq!(&body[..5], b"\x08_S5_");
        assert_eq!(body[5], 0x12, "PackageOp");
        assert!(body.ends_with(&[0x0a, S5_SLEEP_TYPE]), "{body:x?}");
    }

    #[test]
    fn the_madt_lists_each_vcpu_and_the_ioapic_when_there_is_one() {
        let t = tables(&platform(3, true)).unwrap();
        let m = &find(&t, b"APIC").bytes;
        assert_eq!(u32_at(m, 36), LAPIC_BASE);
        let entries = &m[44..];
        // Three 8-byte local APICs (type 0: uid, id, enabled), one IOAPIC.
        for i in 0..3 {
            let e = &entries[i * 8..i * 8 + 8];
            assert_eq!((e[0], e[1], e[2], e[3]), (0, 8, i as u8, i as u8));
            assert_eq!(u32_at(e, 4), 1);
        }
        let io = &entries[24..36];
        assert_eq!((io[0], io[1]), (1, 12));
        assert_eq!(u32_at(io, 4), IOAPIC_BASE);
        assert_eq!(entries.len(), 36);
        let split = tables(&platform(3, false)).unwrap();
        assert_eq!(find(&split, b"APIC").bytes.len(), 44 + 24, "no IOAPIC");
    }

    #[test]
    fn ids_above_254_get_x2apic_entries_and_1024_vcpus_fit() {
        let p = Platform {
            apic_ids: vec![0, 254, 255, 300],
            ioapic: false,
        };
        let t = tables(&p).unwrap();
        let e = &find(&t, b"APIC").bytes[44..];
        assert_eq!((e[0], e[3]), (0, 0));
        assert_eq!((e[8], e[11]), (0, 254));
        let x = &e[16..32];
        assert_eq!((x[0], x[1]), (9, 16));
        assert_eq!((u32_at(x, 4), u32_at(x, 12)), (255, 2), "ID 255, UID 2");
        assert_eq!(u32_at(&e[32..48], 4), 300);
        let big = tables(&platform(1024, true)).unwrap();
        assert!(big.last().unwrap().addr + big.last().unwrap().bytes.len() as u64 <= ACPI_END);
    }
}
