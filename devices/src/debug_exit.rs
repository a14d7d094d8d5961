//! QEMU's isa-debug-exit device (`-device isa-debug-exit,iobase=0xf4,
//! iosize=4`), how a kvm-unit-tests kernel ends its run: the value `v` it
//! writes becomes QEMU's exit status `(v << 1) | 1` (so 1 is a pass).
//! Here the write ends the run ([`DeviceEvent::DebugExit`]) with `v`.
use crate::bus::{BusDevice, DeviceEvent};

/// The port kvm-unit-tests writes.
pub const PORT: u16 = 0xf4;
/// Ports the device takes (iosize=4: kvm-unit-tests writes 32 bits).
pub const LEN: u64 = 4;

/// QEMU's exit status for a written value: `(v << 1) | 1`, as the shell
/// sees it (the low 8 bits).
pub fn exit_status(value: u32) -> u8 {
    ((value << 1) | 1) as u8
}

/// The device.
#[derive(Debug, Default)]
pub struct DebugExit;

impl BusDevice for DebugExit {
    fn read(&mut self, _vcpu: usize, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&mut self, _vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent> {
        if offset != 0 || data.is_empty() {
            return None;
        }
        let mut v = [0u8; 4];
        let n = data.len().min(4);
        v[..n].copy_from_slice(&data[..n]);
        Some(DeviceEvent::DebugExit(u32::from_le_bytes(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_ends_the_run_with_the_value_as_qemu_would() {
        let mut d = DebugExit;
        assert_eq!(
            d.write(0, 0, &0u32.to_le_bytes()),
            Some(DeviceEvent::DebugExit(0))
        );
        assert_eq!(d.write(1, 0, &[3]), Some(DeviceEvent::DebugExit(3)));
        assert_eq!(d.write(0, 0, &[]), None);
        assert_eq!(d.write(0, 2, &[1]), None);
        assert_eq!(exit_status(0), 1, "kvm-unit-tests' pass");
        assert_eq!(exit_status(38), 77, "its skip");
        let mut r = [0xff; 4];
        d.read(0, 0, &mut r);
        assert_eq!(r, [0; 4]);
    }
}
