//! The xAPIC page of `--irqchip user` on the MMIO bus: each vCPU sees its
//! own LAPIC at the same address, so the bus passes the accessing vCPU.
use super::LapicGroup;
use crate::bus::{BusDevice, DeviceEvent};
use std::sync::{Arc, Mutex};

/// Length of the xAPIC MMIO page.
pub const XAPIC_PAGE_LEN: u64 = 0x1000;

/// Bus adapter for the shared [`LapicGroup`].
pub struct LapicMmio {
    group: Arc<Mutex<LapicGroup>>,
}

impl LapicMmio {
    /// Serve `group`'s LAPICs through MMIO.
    pub fn new(group: Arc<Mutex<LapicGroup>>) -> Self {
        Self { group }
    }
}

impl BusDevice for LapicMmio {
    fn read(&mut self, vcpu: usize, offset: u64, data: &mut [u8]) {
        // A poisoned group only means another vCPU thread panicked mid-access;
        // the register state is still consistent enough to read.
        let mut group = self.group.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lapic) = group.get_mut(vcpu) {
            lapic.read_mmio(offset, data);
        }
    }

    fn write(&mut self, vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent> {
        let mut group = self.group.lock().unwrap_or_else(|p| p.into_inner());
        group
            .handle_mmio_write(vcpu, offset, data)
            .map(DeviceEvent::Lapic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{AddressSpace, Bus};

    #[test]
    fn each_vcpu_reads_its_own_id_and_icr_writes_deliver() {
        let group = Arc::new(Mutex::new(LapicGroup::new(2)));
        let mut bus = Bus::new();
        bus.insert(
            AddressSpace::Mmio,
            ipivmm_abi::XAPIC_BASE,
            XAPIC_PAGE_LEN,
            Arc::new(Mutex::new(LapicMmio::new(group.clone()))),
        )
        .unwrap();
        let mut id = [0u8; 4];
        bus.read(AddressSpace::Mmio, 1, 0xfee0_0020, &mut id)
            .unwrap();
        assert_eq!(u32::from_le_bytes(id) >> 24, 1);
        // Software-enable vCPU 1 (SVR bit 8), then vCPU 0 sends vector 0x40 to APIC ID 1.
        bus.write(AddressSpace::Mmio, 1, 0xfee0_00f0, &0x1ffu32.to_le_bytes())
            .unwrap();
        bus.write(
            AddressSpace::Mmio,
            0,
            0xfee0_0310,
            &(1u32 << 24).to_le_bytes(),
        )
        .unwrap();
        let ev = bus
            .write(AddressSpace::Mmio, 0, 0xfee0_0300, &0x40u32.to_le_bytes())
            .unwrap();
        match ev {
            Some(DeviceEvent::Lapic(d)) => assert_eq!(d.kicks().collect::<Vec<_>>(), vec![1]),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            group.lock().unwrap().get(1).unwrap().pending_vector(),
            Some(0x40)
        );
    }
}
