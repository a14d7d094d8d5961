//! What one VM exit means, as a free function that tests feed synthetic exits.
use crate::irqchip::MsrHandler;
use crate::results::ExitKind;
use ipivmm_devices::bus::{AddressSpace, Bus, DeviceEvent};
use kvm_ioctls::VcpuExit;

/// The kind of a KVM exit, as the results count it.
pub(crate) fn exit_kind(exit: &VcpuExit<'_>) -> ExitKind {
    match exit {
        VcpuExit::IoIn(..) => ExitKind::IoIn,
        VcpuExit::IoOut(..) => ExitKind::IoOut,
        VcpuExit::MmioRead(..) => ExitKind::MmioRead,
        VcpuExit::MmioWrite(..) => ExitKind::MmioWrite,
        VcpuExit::Hlt => ExitKind::Hlt,
        VcpuExit::IrqWindowOpen => ExitKind::IrqWindowOpen,
        VcpuExit::X86Rdmsr(_) => ExitKind::MsrRead,
        VcpuExit::X86Wrmsr(_) => ExitKind::MsrWrite,
        VcpuExit::Hypercall(_) => ExitKind::Hypercall,
        VcpuExit::Intr => ExitKind::Intr,
        VcpuExit::Shutdown => ExitKind::Shutdown,
        VcpuExit::InternalError => ExitKind::InternalError,
        VcpuExit::FailEntry(..) => ExitKind::FailEntry,
        VcpuExit::SystemEvent(..) => ExitKind::SystemEvent,
        VcpuExit::IoapicEoi(_) => ExitKind::IoapicEoi,
        _ => ExitKind::Other,
    }
}

/// What the run loop does after an exit.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Re-enter the guest.
    Resume,
    /// A device asked for something (control message).
    Event(DeviceEvent),
    /// The guest touched an address no device claims: counted, ignored.
    Unclaimed(String),
    /// The vCPU cannot go on.
    Fault(Fault),
    /// KVM_RUN was interrupted (kick): check the stop flag.
    Interrupted,
    /// KVM_EXIT_HLT (no in-kernel LAPIC): wait for an interrupt.
    Halted,
    /// An MSR access the handler refused: the guest gets #GP (why, for the log).
    MsrGp(String),
}

/// Why a vCPU cannot go on.
#[derive(Debug, PartialEq, Eq)]
// `TripleFault` is the architecture's name for the shutdown.
#[allow(clippy::enum_variant_names)]
pub enum Fault {
    /// KVM_EXIT_SHUTDOWN.
    TripleFault,
    /// KVM_EXIT_INTERNAL_ERROR (details read from kvm_run afterwards).
    InternalError,
    /// KVM_EXIT_FAIL_ENTRY.
    FailEntry {
        /// hardware_entry_failure_reason.
        reason: u64,
        /// Host CPU.
        cpu: u32,
    },
    /// KVM_EXIT_SYSTEM_EVENT (reset / shutdown / crash).
    SystemEvent(u32),
    /// A host-side device failure.
    Device(String),
    /// An exit ipivmm does not handle in this mode.
    Unexpected(&'static str),
}

/// Handle one exit of vCPU `vcpu`; MSR exits go to `msrs`.
pub(crate) fn handle_exit(
    exit: VcpuExit<'_>,
    bus: &Bus,
    msrs: Option<&dyn MsrHandler>,
    vcpu: usize,
) -> Step {
    match exit {
        VcpuExit::IoOut(port, data) => write(bus, AddressSpace::Pio, vcpu, u64::from(port), data),
        VcpuExit::IoIn(port, data) => read(bus, AddressSpace::Pio, vcpu, u64::from(port), data),
        VcpuExit::MmioWrite(addr, data) => write(bus, AddressSpace::Mmio, vcpu, addr, data),
        VcpuExit::MmioRead(addr, data) => read(bus, AddressSpace::Mmio, vcpu, addr, data),
        VcpuExit::Intr => Step::Interrupted,
        VcpuExit::Hlt => Step::Halted,
        // The interrupt window opened: the loop injects before re-entering.
        VcpuExit::IrqWindowOpen => Step::Resume,
        VcpuExit::X86Rdmsr(m) => {
            let Some(h) = msrs else {
                return Step::Fault(Fault::Unexpected("msr_read"));
            };
            match h.read_msr(vcpu, m.index) {
                Ok(v) => {
                    (*m.data, *m.error) = (v, 0);
                    Step::Resume
                }
                Err(why) => {
                    *m.error = 1;
                    Step::MsrGp(format!("rdmsr {:#x}: {why}", m.index))
                }
            }
        }
        VcpuExit::X86Wrmsr(m) => {
            let Some(h) = msrs else {
                return Step::Fault(Fault::Unexpected("msr_write"));
            };
            match h.write_msr(vcpu, m.index, m.data) {
                Ok(delivery) => {
                    *m.error = 0;
                    delivery.map_or(Step::Resume, |d| Step::Event(DeviceEvent::Lapic(d)))
                }
                Err(why) => {
                    *m.error = 1;
                    Step::MsrGp(format!("wrmsr {:#x}: {why}", m.index))
                }
            }
        }
        VcpuExit::Shutdown => Step::Fault(Fault::TripleFault),
        VcpuExit::InternalError => Step::Fault(Fault::InternalError),
        VcpuExit::FailEntry(reason, cpu) => Step::Fault(Fault::FailEntry { reason, cpu }),
        VcpuExit::SystemEvent(kind, _) => Step::Fault(Fault::SystemEvent(kind)),
        other => Step::Fault(Fault::Unexpected(exit_kind(&other).name())),
    }
}

fn write(bus: &Bus, space: AddressSpace, vcpu: usize, addr: u64, data: &[u8]) -> Step {
    match bus.write(space, vcpu, addr, data) {
        Ok(Some(ev)) => Step::Event(ev),
        Ok(None) => Step::Resume,
        Err(e) if e.is_guest_fault() => Step::Unclaimed(format!("write {e}")),
        Err(e) => Step::Fault(Fault::Device(e.to_string())),
    }
}

fn read(bus: &Bus, space: AddressSpace, vcpu: usize, addr: u64, data: &mut [u8]) -> Step {
    match bus.read(space, vcpu, addr, data) {
        Ok(()) => Step::Resume,
        Err(e) if e.is_guest_fault() => Step::Unclaimed(format!("read {e}")),
        Err(e) => Step::Fault(Fault::Device(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_devices::bus::BusDevice;
    use ipivmm_devices::lapic::Delivery;
    use std::sync::{Arc, Mutex};

    struct Echo(Vec<u8>);
    impl BusDevice for Echo {
        fn read(&mut self, _: usize, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, _: usize, _: u64, data: &[u8]) -> Option<DeviceEvent> {
            self.0.extend_from_slice(data);
            None
        }
    }

    fn bus() -> (Bus, Arc<Mutex<Echo>>) {
        let dev = Arc::new(Mutex::new(Echo(Vec::new())));
        let mut bus = Bus::new();
        bus.insert(AddressSpace::Pio, 0x100, 8, dev.clone())
            .unwrap();
        (bus, dev)
    }

    #[test]
    fn port_io_reaches_the_device() {
        let (bus, dev) = bus();
        assert_eq!(
            handle_exit(VcpuExit::IoOut(0x101, &[7, 8]), &bus, None, 0),
            Step::Resume
        );
        assert_eq!(dev.lock().unwrap().0, vec![7, 8]);
        let mut buf = [0u8; 1];
        assert_eq!(
            handle_exit(VcpuExit::IoIn(0x103, &mut buf), &bus, None, 0),
            Step::Resume
        );
        assert_eq!(buf, [3]);
    }

    #[test]
    fn unclaimed_access_is_ignored_and_reads_all_ones() {
        let (bus, _) = bus();
        let mut buf = [0u8; 2];
        assert!(matches!(
            handle_exit(VcpuExit::IoIn(0x80, &mut buf), &bus, None, 0),
            Step::Unclaimed(_)
        ));
        assert_eq!(buf, [0xff, 0xff]);
        assert!(matches!(
            handle_exit(VcpuExit::MmioWrite(0xd000_0000, &[1]), &bus, None, 0),
            Step::Unclaimed(_)
        ));
    }

    #[test]
    fn fatal_exits_become_faults() {
        let (bus, _) = bus();
        assert_eq!(
            handle_exit(VcpuExit::Shutdown, &bus, None, 1),
            Step::Fault(Fault::TripleFault)
        );
        assert_eq!(
            handle_exit(VcpuExit::InternalError, &bus, None, 1),
            Step::Fault(Fault::InternalError)
        );
        assert_eq!(
            handle_exit(VcpuExit::FailEntry(0x21, 3), &bus, None, 1),
            Step::Fault(Fault::FailEntry {
                reason: 0x21,
                cpu: 3
            })
        );
        assert_eq!(handle_exit(VcpuExit::Hlt, &bus, None, 0), Step::Halted);
        assert_eq!(
            handle_exit(VcpuExit::IrqWindowOpen, &bus, None, 0),
            Step::Resume
        );
        assert_eq!(
            handle_exit(
                VcpuExit::Hypercall(kvm_ioctls::HypercallExit {
                    nr: 10,
                    args: [0; 6],
                    ret: &mut 0,
                    longmode: 1
                }),
                &bus,
                None,
                0
            ),
            Step::Fault(Fault::Unexpected("hypercall"))
        );
        assert_eq!(
            handle_exit(VcpuExit::Intr, &bus, None, 0),
            Step::Interrupted
        );
    }

    /// An MSR model that owns 0x830 and refuses 0x831.
    struct Msrs;
    impl MsrHandler for Msrs {
        fn read_msr(&self, _: usize, msr: u32) -> Result<u64, String> {
            (msr == 0x830)
                .then_some(0x42)
                .ok_or_else(|| "not emulated".into())
        }
        fn write_msr(&self, _: usize, msr: u32, _: u64) -> Result<Option<Delivery>, String> {
            (msr == 0x830)
                .then_some(None)
                .ok_or_else(|| "not emulated".into())
        }
    }

    #[test]
    fn msr_exits_are_answered_through_the_exit_or_get_gp() {
        use kvm_ioctls::{MsrExitReason, ReadMsrExit, WriteMsrExit};
        let (bus, _) = bus();
        let reason = MsrExitReason::Unknown;
        let (mut error, mut data) = (7u8, 0u64);
        let exit = VcpuExit::X86Rdmsr(ReadMsrExit {
            error: &mut error,
            reason,
            index: 0x830,
            data: &mut data,
        });
        assert_eq!(handle_exit(exit, &bus, Some(&Msrs), 0), Step::Resume);
        assert_eq!((error, data), (0, 0x42));
        let exit = VcpuExit::X86Rdmsr(ReadMsrExit {
            error: &mut error,
            reason,
            index: 0x831,
            data: &mut data,
        });
        assert!(matches!(
            handle_exit(exit, &bus, Some(&Msrs), 0),
            Step::MsrGp(_)
        ));
        assert_eq!(error, 1, "#GP");
        error = 0;
        let exit = VcpuExit::X86Wrmsr(WriteMsrExit {
            error: &mut error,
            reason,
            index: 0x831,
            data: 5,
        });
        assert!(matches!(
            handle_exit(exit, &bus, Some(&Msrs), 0),
            Step::MsrGp(_)
        ));
        assert_eq!(error, 1, "#GP");
        let exit = VcpuExit::X86Rdmsr(ReadMsrExit {
            error: &mut error,
            reason,
            index: 0x830,
            data: &mut data,
        });
        assert_eq!(
            handle_exit(exit, &bus, None, 0),
            Step::Fault(Fault::Unexpected("msr_read"))
        );
    }
}
