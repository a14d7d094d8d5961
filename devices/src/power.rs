//! The power-off of a Linux guest: the ACPI sleep control and status
//! registers of a hardware-reduced platform (ACPI 6.5, 4.8.3.7 and 4.8.3.8),
//! two byte-wide ports the FADT names. Writing SLP_EN with the sleep type
//! of `\_S5_` is the guest's soft-off (`poweroff`: Linux's
//! `acpi_hw_extended_sleep`); the run loop then ends the run as completed.
use crate::bus::{BusDevice, DeviceEvent};

/// The first port: the sleep control register; the status register follows.
pub const PORT: u16 = 0x600;
/// Ports the device takes.
pub const LEN: u64 = 2;
/// The sleep type the DSDT's `\_S5_` package names.
pub const S5_SLEEP_TYPE: u8 = 5;
/// SLP_EN, bit 5 of the sleep control register.
const SLP_EN: u8 = 1 << 5;
/// SLP_TYP, bits 4:2.
const SLP_TYP_SHIFT: u8 = 2;

/// The sleep registers. Any sleep state other than S5 is ignored: the
/// guest has nothing to wake it, and only power-off ends a run.
#[derive(Debug, Default)]
pub struct PowerDevice;

impl BusDevice for PowerDevice {
    fn read(&mut self, _vcpu: usize, _offset: u64, data: &mut [u8]) {
        // Sleep status: no wake event (WAK_STS clear).
        data.fill(0);
    }

    fn write(&mut self, _vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent> {
        let value = *data.first()?;
        let sleep_type = (value >> SLP_TYP_SHIFT) & 0x7;
        (offset == 0 && value & SLP_EN != 0 && sleep_type == S5_SLEEP_TYPE)
            .then_some(DeviceEvent::PowerOff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_off_is_slp_en_with_the_s5_type() {
        let mut d = PowerDevice;
        // Linux writes (5 << 2) | SLP_EN = 0x34.
        assert_eq!(d.write(0, 0, &[0x34]), Some(DeviceEvent::PowerOff));
        // The type alone, another state, the status register, nothing: no.
        assert_eq!(d.write(0, 0, &[5 << 2]), None);
        assert_eq!(d.write(0, 0, &[(3 << 2) | SLP_EN]), None);
        assert_eq!(d.write(0, 1, &[0x34]), None);
        assert_eq!(d.write(0, 0, &[]), None);
        let mut status = [0xff];
        d.read(1, 1, &mut status);
        assert_eq!(status, [0]);
    }
}
