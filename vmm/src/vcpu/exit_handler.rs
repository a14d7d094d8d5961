//! What one VM exit means, as a free function that tests feed synthetic exits.
use crate::results::exits::ExitKind;
use ipivmm_devices::bus::{AddressSpace, Bus, DeviceEvent};
use kvm_ioctls::VcpuExit;

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
    /// KVM_EXIT_X86_RDMSR of this MSR: answer through kvm_run.
    MsrRead(u32),
    /// KVM_EXIT_X86_WRMSR of this MSR and value.
    MsrWrite(u32, u64),
}

/// Why a vCPU cannot go on.
#[derive(Debug, PartialEq, Eq)]
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

/// Handle one exit of vCPU `vcpu`.
pub fn handle_exit(exit: VcpuExit<'_>, bus: &Bus, vcpu: usize) -> Step {
    match exit {
        VcpuExit::IoOut(port, data) => write(bus, AddressSpace::Pio, vcpu, u64::from(port), data),
        VcpuExit::IoIn(port, data) => read(bus, AddressSpace::Pio, vcpu, u64::from(port), data),
        VcpuExit::MmioWrite(addr, data) => write(bus, AddressSpace::Mmio, vcpu, addr, data),
        VcpuExit::MmioRead(addr, data) => read(bus, AddressSpace::Mmio, vcpu, addr, data),
        VcpuExit::Intr => Step::Interrupted,
        VcpuExit::Hlt => Step::Halted,
        // The interrupt window opened: the loop injects before re-entering.
        VcpuExit::IrqWindowOpen => Step::Resume,
        VcpuExit::X86Rdmsr(m) => Step::MsrRead(m.index),
        VcpuExit::X86Wrmsr(m) => Step::MsrWrite(m.index, m.data),
        VcpuExit::Shutdown => Step::Fault(Fault::TripleFault),
        VcpuExit::InternalError => Step::Fault(Fault::InternalError),
        VcpuExit::FailEntry(reason, cpu) => Step::Fault(Fault::FailEntry { reason, cpu }),
        VcpuExit::SystemEvent(kind, _) => Step::Fault(Fault::SystemEvent(kind)),
        other => Step::Fault(Fault::Unexpected(ExitKind::of(&other).name())),
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
            handle_exit(VcpuExit::IoOut(0x101, &[7, 8]), &bus, 0),
            Step::Resume
        );
        assert_eq!(dev.lock().unwrap().0, vec![7, 8]);
        let mut buf = [0u8; 1];
        assert_eq!(
            handle_exit(VcpuExit::IoIn(0x103, &mut buf), &bus, 0),
            Step::Resume
        );
        assert_eq!(buf, [3]);
    }

    #[test]
    fn unclaimed_access_is_ignored_and_reads_all_ones() {
        let (bus, _) = bus();
        let mut buf = [0u8; 2];
        assert!(matches!(
            handle_exit(VcpuExit::IoIn(0x80, &mut buf), &bus, 0),
            Step::Unclaimed(_)
        ));
        assert_eq!(buf, [0xff, 0xff]);
        assert!(matches!(
            handle_exit(VcpuExit::MmioWrite(0xd000_0000, &[1]), &bus, 0),
            Step::Unclaimed(_)
        ));
    }

    #[test]
    fn fatal_exits_become_faults() {
        let (bus, _) = bus();
        assert_eq!(
            handle_exit(VcpuExit::Shutdown, &bus, 1),
            Step::Fault(Fault::TripleFault)
        );
        assert_eq!(
            handle_exit(VcpuExit::InternalError, &bus, 1),
            Step::Fault(Fault::InternalError)
        );
        assert_eq!(
            handle_exit(VcpuExit::FailEntry(0x21, 3), &bus, 1),
            Step::Fault(Fault::FailEntry {
                reason: 0x21,
                cpu: 3
            })
        );
        assert_eq!(handle_exit(VcpuExit::Hlt, &bus, 0), Step::Halted);
        assert_eq!(handle_exit(VcpuExit::IrqWindowOpen, &bus, 0), Step::Resume);
        assert_eq!(
            handle_exit(
                VcpuExit::Hypercall(kvm_ioctls::HypercallExit {
                    nr: 10,
                    args: [0; 6],
                    ret: &mut 0,
                    longmode: 1
                }),
                &bus,
                0
            ),
            Step::Fault(Fault::Unexpected("hypercall"))
        );
        assert_eq!(handle_exit(VcpuExit::Intr, &bus, 0), Step::Interrupted);
    }
}
