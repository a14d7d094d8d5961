//! Device dispatch by address range.
//!
//! A [`Bus`] holds two address spaces, port I/O ([`AddressSpace::Pio`]) and
//! MMIO ([`AddressSpace::Mmio`]). Each device is registered once for a range
//! `[base, base + len)` and is then reached by every vCPU thread through a
//! shared `Arc<Bus>`; the bus itself is immutable after setup, each device sits
//! behind its own [`Mutex`].
//!
//! A device sees the offset of the access inside its range and the index of
//! the vCPU that made it. A write may produce a [`DeviceEvent`] that the vCPU
//! run loop must act on (for example a decoded control-port message).
//!
//! Errors a guest can cause ([`BusError::is_guest_fault`]) never panic: the run
//! loop ignores such writes, completes such reads with all-ones bytes (the bus
//! already fills the buffer) and counts them.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::control_msg::{ControlError, ControlRequest};

/// Which address space an access targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressSpace {
    /// x86 port I/O (`in`/`out`), addresses `0..=0xffff`.
    Pio,
    /// Memory-mapped I/O (guest-physical addresses).
    Mmio,
}

impl AddressSpace {
    /// One past the highest address of the space.
    fn limit(self) -> u128 {
        match self {
            AddressSpace::Pio => 0x1_0000,
            AddressSpace::Mmio => 1u128 << 64,
        }
    }
}

impl fmt::Display for AddressSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressSpace::Pio => "PIO",
            AddressSpace::Mmio => "MMIO",
        })
    }
}

/// Something a device write asks the vCPU run loop to do.
///
/// New variants (an IPI request from the userspace LAPIC, ...) are added
/// here; the enum is deliberately not `#[non_exhaustive]` so that the run
/// loop's `match` stops compiling until it handles them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceEvent {
    /// The control port decoded (or rejected) a [`ipivmm_abi::ControlMsg`].
    /// The reply has already been written into guest memory where possible.
    Control(Result<ControlRequest, ControlError>),
    /// A write to the userspace LAPIC sent an interrupt: kick its targets.
    Lapic(crate::lapic::Delivery),
    /// The guest powered off (ACPI S5 through [`crate::power`]): the run
    /// ends, completed.
    PowerOff,
    /// The guest wrote this value to the isa-debug-exit port
    /// ([`crate::debug_exit`]): the run ends with it as the guest's status.
    DebugExit(u32),
    /// A console that watches its lines ([`crate::serial::SerialConsole::watch_lines`])
    /// completed this one (at most [`crate::serial::WATCHED_LINE_MAX`]
    /// bytes, `\r` dropped, control characters escaped): a multiboot test
    /// kernel's output, which may end a phase.
    ConsoleLine(String),
}

/// A guest-facing device on the [`Bus`].
pub trait BusDevice: Send {
    /// Handle a read of `data.len()` bytes at `offset` from the device's base
    /// by vCPU `vcpu`. The bus pre-fills `data` with `0xff`.
    fn read(&mut self, vcpu: usize, offset: u64, data: &mut [u8]);
    /// Handle a write of `data` at `offset` from the device's base by vCPU
    /// `vcpu`; return an event for the run loop, if any.
    fn write(&mut self, vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent>;
}

/// Errors of [`Bus`] registration and dispatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// `insert` with `len == 0`.
    #[error("{space} device at {base:#x}: zero-length range")]
    ZeroLengthRange {
        /// Address space.
        space: AddressSpace,
        /// Requested base.
        base: u64,
    },
    /// `insert` with a range that does not fit in the address space.
    #[error("{space} range {base:#x} + {len:#x} does not fit in the address space")]
    RangeOutOfSpace {
        /// Address space.
        space: AddressSpace,
        /// Requested base.
        base: u64,
        /// Requested length.
        len: u64,
    },
    /// `insert` with a range that overlaps an already registered device.
    #[error(
        "{space} range {base:#x} + {len:#x} overlaps the device at {existing_base:#x} + {existing_len:#x}"
    )]
    Overlap {
        /// Address space.
        space: AddressSpace,
        /// Requested base.
        base: u64,
        /// Requested length.
        len: u64,
        /// Base of the device already there.
        existing_base: u64,
        /// Length of the device already there.
        existing_len: u64,
    },
    /// No device covers the accessed address.
    #[error("{space} access at {addr:#x}: no device mapped")]
    Unmapped {
        /// Address space.
        space: AddressSpace,
        /// Accessed address.
        addr: u64,
    },
    /// The access starts inside a device but runs past its end.
    #[error(
        "{space} access at {addr:#x} ({size} bytes) crosses the end of the device at {base:#x} + {len:#x}"
    )]
    CrossesDeviceEnd {
        /// Address space.
        space: AddressSpace,
        /// Accessed address.
        addr: u64,
        /// Access size in bytes.
        size: usize,
        /// Base of the device.
        base: u64,
        /// Length of the device.
        len: u64,
    },
    /// An access of zero bytes.
    #[error("{space} access at {addr:#x}: zero-length access")]
    EmptyAccess {
        /// Address space.
        space: AddressSpace,
        /// Accessed address.
        addr: u64,
    },
    /// The device's mutex was poisoned by a panic in another thread.
    #[error("{space} device at {base:#x}: lock poisoned by a panic in another vCPU thread")]
    Poisoned {
        /// Address space.
        space: AddressSpace,
        /// Base of the device.
        base: u64,
    },
}

impl BusError {
    /// True for errors the guest caused by accessing an address it should
    /// not (unmapped, crossing a device's end, zero-length): the run loop
    /// ignores the write / returns all-ones for the read, counts it and
    /// resumes. False for host-side failures (poisoned lock, registration
    /// errors) that should end the run.
    pub fn is_guest_fault(&self) -> bool {
        matches!(
            self,
            BusError::Unmapped { .. }
                | BusError::CrossesDeviceEnd { .. }
                | BusError::EmptyAccess { .. }
        )
    }
}

/// One registered device range.
struct Entry {
    len: u64,
    device: Arc<Mutex<dyn BusDevice>>,
}

/// Port-I/O and MMIO dispatch by address range. Build it with
/// [`Bus::insert`], then share it as `Arc<Bus>` between the vCPU threads.
#[derive(Default)]
pub struct Bus {
    pio: BTreeMap<u64, Entry>,
    mmio: BTreeMap<u64, Entry>,
}

impl fmt::Debug for Bus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ranges = |m: &BTreeMap<u64, Entry>| -> Vec<(u64, u64)> {
            m.iter().map(|(b, e)| (*b, e.len)).collect()
        };
        f.debug_struct("Bus")
            .field("pio", &ranges(&self.pio))
            .field("mmio", &ranges(&self.mmio))
            .finish()
    }
}

impl Bus {
    /// An empty bus.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self, space: AddressSpace) -> &BTreeMap<u64, Entry> {
        match space {
            AddressSpace::Pio => &self.pio,
            AddressSpace::Mmio => &self.mmio,
        }
    }

    /// Register `device` for `[base, base + len)` in `space`.
    ///
    /// Rejects zero-length ranges, ranges past the end of the space (PIO ends
    /// at 0xffff) and ranges overlapping a registered device.
    pub fn insert(
        &mut self,
        space: AddressSpace,
        base: u64,
        len: u64,
        device: Arc<Mutex<dyn BusDevice>>,
    ) -> Result<(), BusError> {
        if len == 0 {
            return Err(BusError::ZeroLengthRange { space, base });
        }
        if u128::from(base) + u128::from(len) > space.limit() {
            return Err(BusError::RangeOutOfSpace { space, base, len });
        }
        // `base + len` fits in u64 except for an MMIO range ending exactly at
        // 2^64; compare with `last` (inclusive) to stay in range.
        let last = base + (len - 1);
        let map = match space {
            AddressSpace::Pio => &mut self.pio,
            AddressSpace::Mmio => &mut self.mmio,
        };
        // The closest device starting at or below `last` is the only one that
        // can overlap: devices never overlap each other.
        if let Some((&ebase, e)) = map.range(..=last).next_back() {
            let elast = ebase + (e.len - 1);
            if elast >= base {
                return Err(BusError::Overlap {
                    space,
                    base,
                    len,
                    existing_base: ebase,
                    existing_len: e.len,
                });
            }
        }
        map.insert(base, Entry { len, device });
        Ok(())
    }

    /// Find the device covering `[addr, addr + size)`; returns its base and
    /// entry.
    fn resolve(
        &self,
        space: AddressSpace,
        addr: u64,
        size: usize,
    ) -> Result<(u64, &Entry), BusError> {
        let (&base, entry) = self
            .map(space)
            .range(..=addr)
            .next_back()
            .ok_or(BusError::Unmapped { space, addr })?;
        let offset = addr - base;
        if offset >= entry.len {
            return Err(BusError::Unmapped { space, addr });
        }
        if size == 0 {
            return Err(BusError::EmptyAccess { space, addr });
        }
        // usize -> u64 never truncates on supported targets; saturate anyway.
        let size64 = u64::try_from(size).unwrap_or(u64::MAX);
        if size64 > entry.len - offset {
            return Err(BusError::CrossesDeviceEnd {
                space,
                addr,
                size,
                base,
                len: entry.len,
            });
        }
        Ok((base, entry))
    }

    /// Read `data.len()` bytes at `addr` on behalf of vCPU `vcpu`.
    ///
    /// `data` is first filled with `0xff`, so on a [guest
    /// fault](BusError::is_guest_fault) it already holds what an unmapped
    /// read returns.
    pub fn read(
        &self,
        space: AddressSpace,
        vcpu: usize,
        addr: u64,
        data: &mut [u8],
    ) -> Result<(), BusError> {
        data.fill(0xff);
        let (base, entry) = self.resolve(space, addr, data.len())?;
        let mut dev = entry
            .device
            .lock()
            .map_err(|_| BusError::Poisoned { space, base })?;
        dev.read(vcpu, addr - base, data);
        Ok(())
    }

    /// Write `data` at `addr` on behalf of vCPU `vcpu`; returns the device's
    /// event for the run loop, if any.
    pub fn write(
        &self,
        space: AddressSpace,
        vcpu: usize,
        addr: u64,
        data: &[u8],
    ) -> Result<Option<DeviceEvent>, BusError> {
        let (base, entry) = self.resolve(space, addr, data.len())?;
        let mut dev = entry
            .device
            .lock()
            .map_err(|_| BusError::Poisoned { space, base })?;
        Ok(dev.write(vcpu, addr - base, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control_msg::ControlError;

    /// Records every access; reads return `offset as u8 + i`.
    #[derive(Default)]
    struct Recorder {
        accesses: Vec<(bool, usize, u64, Vec<u8>)>,
    }

    impl BusDevice for Recorder {
        fn read(&mut self, vcpu: usize, offset: u64, data: &mut [u8]) {
            for (i, b) in data.iter_mut().enumerate() {
                *b = (offset as u8).wrapping_add(i as u8);
            }
            self.accesses.push((false, vcpu, offset, data.to_vec()));
        }
        fn write(&mut self, vcpu: usize, offset: u64, data: &[u8]) -> Option<DeviceEvent> {
            self.accesses.push((true, vcpu, offset, data.to_vec()));
            (data == [0xee]).then_some(DeviceEvent::Control(Err(ControlError::BadAccessWidth(1))))
        }
    }

    fn recorder() -> Arc<Mutex<Recorder>> {
        Arc::new(Mutex::new(Recorder::default()))
    }

    #[test]
    fn rejects_overlaps_and_bad_ranges() {
        let mut bus = Bus::new();
        bus.insert(AddressSpace::Pio, 0x3f8, 8, recorder()).unwrap();
        for (base, len) in [
            (0x3f8, 8),
            (0x3f0, 9),
            (0x3ff, 1),
            (0x3fa, 2),
            (0x300, 0x200),
        ] {
            let err = bus
                .insert(AddressSpace::Pio, base, len, recorder())
                .unwrap_err();
            assert_eq!(
                err,
                BusError::Overlap {
                    space: AddressSpace::Pio,
                    base,
                    len,
                    existing_base: 0x3f8,
                    existing_len: 8
                }
            );
        }
        // Adjacent ranges on both sides are fine.
        bus.insert(AddressSpace::Pio, 0x3f0, 8, recorder()).unwrap();
        bus.insert(AddressSpace::Pio, 0x400, 4, recorder()).unwrap();
        // Same range in the other space is fine.
        bus.insert(AddressSpace::Mmio, 0x3f8, 8, recorder())
            .unwrap();
        assert_eq!(
            bus.insert(AddressSpace::Pio, 0x10, 0, recorder()),
            Err(BusError::ZeroLengthRange {
                space: AddressSpace::Pio,
                base: 0x10
            })
        );
        assert!(matches!(
            bus.insert(AddressSpace::Pio, 0xfffc, 8, recorder()),
            Err(BusError::RangeOutOfSpace { .. })
        ));
        bus.insert(AddressSpace::Pio, 0xfffc, 4, recorder())
            .unwrap();
        // An MMIO range ending exactly at 2^64 is accepted; one past is not.
        bus.insert(AddressSpace::Mmio, u64::MAX - 0xfff, 0x1000, recorder())
            .unwrap();
        assert!(matches!(
            bus.insert(AddressSpace::Mmio, u64::MAX, 2, recorder()),
            Err(BusError::RangeOutOfSpace { .. })
        ));
    }

    #[test]
    fn dispatches_by_range_with_offset_and_vcpu() {
        let a = recorder();
        let b = recorder();
        let mut bus = Bus::new();
        bus.insert(AddressSpace::Pio, 0x3f8, 8, a.clone()).unwrap();
        bus.insert(
            AddressSpace::Mmio,
            ipivmm_abi::XAPIC_BASE,
            0x1000,
            b.clone(),
        )
        .unwrap();
        let bus = Arc::new(bus);

        let mut buf = [0u8; 1];
        bus.read(AddressSpace::Pio, 3, 0x3fd, &mut buf).unwrap();
        assert_eq!(buf, [5]);
        assert_eq!(bus.write(AddressSpace::Pio, 1, 0x3f8, b"A").unwrap(), None);
        let mut buf4 = [0u8; 4];
        bus.read(AddressSpace::Mmio, 2, 0xfee0_0300, &mut buf4)
            .unwrap();
        assert_eq!(buf4, [0, 1, 2, 3]);
        let ev = bus
            .write(AddressSpace::Mmio, 0, 0xfee0_0fff, &[0xee])
            .unwrap();
        assert_eq!(
            ev,
            Some(DeviceEvent::Control(Err(ControlError::BadAccessWidth(1))))
        );

        let a = a.lock().unwrap();
        assert_eq!(
            a.accesses,
            vec![(false, 3, 5, vec![5]), (true, 1, 0, b"A".to_vec())]
        );
        let b = b.lock().unwrap();
        assert_eq!(
            b.accesses,
            vec![
                (false, 2, 0x300, vec![0, 1, 2, 3]),
                (true, 0, 0xfff, vec![0xee])
            ]
        );
    }

    #[test]
    fn unmapped_and_crossing_accesses_are_guest_faults() {
        let dev = recorder();
        let mut bus = Bus::new();
        bus.insert(AddressSpace::Pio, 0x3f8, 8, dev.clone())
            .unwrap();

        let mut buf = [0u8; 2];
        for addr in [0, 0x3f7, 0x400, 0xffff] {
            buf = [0; 2];
            let err = bus.read(AddressSpace::Pio, 0, addr, &mut buf).unwrap_err();
            assert_eq!(
                err,
                BusError::Unmapped {
                    space: AddressSpace::Pio,
                    addr
                }
            );
            assert!(err.is_guest_fault());
            assert_eq!(buf, [0xff, 0xff], "unmapped reads return all-ones");
            assert_eq!(
                bus.write(AddressSpace::Pio, 0, addr, &[1]),
                Err(BusError::Unmapped {
                    space: AddressSpace::Pio,
                    addr
                })
            );
        }
        // The PIO device is not visible in MMIO space.
        assert!(matches!(
            bus.write(AddressSpace::Mmio, 0, 0x3f8, &[1]),
            Err(BusError::Unmapped {
                space: AddressSpace::Mmio,
                ..
            })
        ));
        // Starts inside, ends outside.
        let err = bus.read(AddressSpace::Pio, 0, 0x3ff, &mut buf).unwrap_err();
        assert!(matches!(
            err,
            BusError::CrossesDeviceEnd {
                size: 2,
                base: 0x3f8,
                len: 8,
                ..
            }
        ));
        assert!(err.is_guest_fault());
        assert_eq!(buf, [0xff, 0xff]);
        // Nothing reached the device.
        assert!(dev.lock().unwrap().accesses.is_empty());
    }

    #[test]
    fn zero_length_access_is_rejected() {
        let dev = recorder();
        let mut bus = Bus::new();
        bus.insert(AddressSpace::Pio, 0x3f8, 8, dev.clone())
            .unwrap();
        let err = bus.read(AddressSpace::Pio, 0, 0x3f8, &mut []).unwrap_err();
        assert_eq!(
            err,
            BusError::EmptyAccess {
                space: AddressSpace::Pio,
                addr: 0x3f8
            }
        );
        assert!(err.is_guest_fault());
        assert_eq!(
            bus.write(AddressSpace::Pio, 0, 0x3f9, &[]),
            Err(BusError::EmptyAccess {
                space: AddressSpace::Pio,
                addr: 0x3f9
            })
        );
        assert!(dev.lock().unwrap().accesses.is_empty());
    }

    #[test]
    fn poisoned_device_returns_error_not_panic() {
        let dev = recorder();
        let mut bus = Bus::new();
        bus.insert(AddressSpace::Pio, 0x3f8, 8, dev.clone())
            .unwrap();
        let poisoner = dev.clone();
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock().unwrap();
            panic!("poison the device lock");
        })
        .join();
        let err = bus.write(AddressSpace::Pio, 0, 0x3f8, &[1]).unwrap_err();
        assert_eq!(
            err,
            BusError::Poisoned {
                space: AddressSpace::Pio,
                base: 0x3f8
            }
        );
        assert!(!err.is_guest_fault());
        let mut buf = [0u8; 1];
        assert!(matches!(
            bus.read(AddressSpace::Pio, 0, 0x3f9, &mut buf),
            Err(BusError::Poisoned { .. })
        ));
    }

    #[test]
    fn bus_is_shareable_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Bus>();
        assert_send_sync::<Arc<Bus>>();
    }
}
