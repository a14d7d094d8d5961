//! QEMU's firmware configuration device, the legacy port interface a
//! multiboot test kernel reads its machine from (kvm-unit-tests'
//! lib/x86/fwcfg.c: the CPU count, the RAM size): a 16-bit selector
//! written at port 0x510, then the item's bytes read one at a time at
//! 0x511 (QEMU docs/specs/fw_cfg.rst, "Selector Register" and "Data
//! Register"). Items ipivmm does not have read as zeros, as in QEMU.
use crate::bus::{BusDevice, DeviceEvent};
use std::collections::BTreeMap;

/// The selector port; the data port follows.
pub const PORT: u16 = 0x510;
/// Ports the device takes.
pub const LEN: u64 = 2;
/// "QEMU": the signature item.
pub const SIGNATURE: u16 = 0x00;
/// The interface revision and features (1: the traditional interface).
pub const ID: u16 = 0x01;
/// RAM bytes, u64.
pub const RAM_SIZE: u16 = 0x03;
/// vCPUs, u16.
pub const NB_CPUS: u16 = 0x05;
/// Most vCPUs, u16.
pub const MAX_CPUS: u16 = 0x0f;
/// The selector bits that name an item (bit 14 is the write channel,
/// bit 15 the architecture-local space).
const ENTRY_MASK: u16 = 0x3fff | 0x8000;

/// The device: a few items and a read cursor.
#[derive(Debug, Default)]
pub struct FwCfg {
    items: BTreeMap<u16, Vec<u8>>,
    selected: u16,
    cursor: usize,
}

impl FwCfg {
    /// The items of a machine of `vcpus` vCPUs and `ram_bytes` of RAM.
    pub fn new(vcpus: u16, ram_bytes: u64) -> Self {
        let mut items = BTreeMap::new();
        items.insert(SIGNATURE, b"QEMU".to_vec());
        items.insert(ID, 1u32.to_le_bytes().to_vec());
        items.insert(RAM_SIZE, ram_bytes.to_le_bytes().to_vec());
        items.insert(NB_CPUS, vcpus.to_le_bytes().to_vec());
        items.insert(MAX_CPUS, vcpus.to_le_bytes().to_vec());
        Self {
            items,
            selected: 0,
            cursor: 0,
        }
    }
}

impl BusDevice for FwCfg {
    fn read(&mut self, _vcpu: usize, offset: u64, data: &mut [u8]) {
        if offset != 1 {
            data.fill(0);
            return;
        }
        // The data register is byte-wide: a wider read gives one byte.
        data.fill(0);
        if let Some(first) = data.first_mut() {
            let item = self.items.get(&(self.selected & ENTRY_MASK));
            *first = item.and_then(|b| b.get(self.cursor)).copied().unwrap_or(0);
            self.cursor = self.cursor.saturating_add(1);
        }
    }

    fn write(&mut self, _vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent> {
        if offset == 0 {
            let lo = data.first().copied().unwrap_or(0);
            let hi = data.get(1).copied().unwrap_or(0);
            self.selected = u16::from_le_bytes([lo, hi]);
            self.cursor = 0;
        }
        // Writes to the data port (the old write channel) are ignored.
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_item(d: &mut FwCfg, key: u16, n: usize) -> u64 {
        assert_eq!(d.write(0, 0, &key.to_le_bytes()), None);
        (0..n).fold(0u64, |acc, i| {
            let mut b = [0xffu8];
            d.read(0, 1, &mut b);
            acc | (u64::from(b[0]) << (8 * i))
        })
    }

    #[test]
    fn items_read_as_kvm_unit_tests_reads_them() {
        let mut d = FwCfg::new(4, 256 << 20);
        assert_eq!(read_item(&mut d, NB_CPUS, 2), 4);
        assert_eq!(read_item(&mut d, MAX_CPUS, 2), 4);
        assert_eq!(read_item(&mut d, RAM_SIZE, 8), 256 << 20);
        assert_eq!(
            read_item(&mut d, SIGNATURE, 4),
            u64::from(u32::from_le_bytes(*b"QEMU"))
        );
        // kvm-unit-tests' own FW_CFG_MAX_RAM (0x11) and anything else: 0.
        assert_eq!(read_item(&mut d, 0x11, 8), 0);
        // Reading past an item gives zeros; a new selection rewinds.
        assert_eq!(read_item(&mut d, NB_CPUS, 8), 4);
        assert_eq!(read_item(&mut d, NB_CPUS, 1), 4);
        // The selector port reads as zero; a wide data read gives one byte.
        let mut sel = [0xff; 2];
        d.read(0, 0, &mut sel);
        assert_eq!(sel, [0, 0]);
        d.write(0, 0, &RAM_SIZE.to_le_bytes());
        let mut wide = [0xff; 4];
        d.read(0, 1, &mut wide);
        assert_eq!(wide, [0, 0, 0, 0], "low byte of 256 MiB, then zeros");
        // A byte-wide selector write, an empty write: no panic.
        d.write(0, 0, &[NB_CPUS as u8]);
        assert_eq!(read_item(&mut d, NB_CPUS, 2), 4);
        d.write(0, 0, &[]);
        d.write(0, 1, &[1, 2, 3]);
    }
}
