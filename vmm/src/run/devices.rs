//! Stage 2 of a run: the devices the guest talks to, on one bus: the serial
//! console (COM1), the control port (the payload ABI), the irqchip's
//! devices (`Chip::wire`: with `--irqchip user`, ipivmm's LAPIC model at
//! the xAPIC page) and, for a Linux guest, its power-off registers.
use super::host;
use crate::error::RunError;
use crate::vm::Vm;
use ipivmm_abi::{CONTROL_PORT, SERIAL_PORT};
use ipivmm_devices::budget::GuestBudget;
use ipivmm_devices::bus::{AddressSpace, Bus};
use ipivmm_devices::control::ControlPort;
use ipivmm_devices::serial::{SerialConsole, SerialHandle, SerialSink};
use ipivmm_devices::{debug_exit, fw_cfg, power};
use std::sync::{Arc, Mutex};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

/// The wired devices of a VM.
pub struct Devices {
    /// Port and MMIO dispatch, shared by the vCPU threads.
    pub bus: Arc<Bus>,
    /// The console's output (tail for the report).
    pub serial: SerialHandle,
    /// The run's guest memory budget (samples and captured serial output
    /// are charged by the devices, phases and records by the vCPU threads).
    pub budget: Arc<GuestBudget>,
}

/// Put the devices of a run on a bus for `vm`, charging `budget`; `linux`
/// adds the power-off registers a Linux guest ends through, `multiboot`
/// fw_cfg and the isa-debug-exit port of a multiboot test kernel.
pub(crate) fn wire(
    vm: &Vm,
    budget: Arc<GuestBudget>,
    sink: SerialSink,
    linux: bool,
    multiboot: bool,
) -> Result<Devices, RunError> {
    let (mut console, serial) = SerialConsole::with_budget(sink, budget.clone());
    if multiboot {
        // A test kernel's lines end its phases (`vcpu::console_marks`).
        console.watch_lines();
    }
    let mut bus = Bus::new();
    bus.insert(
        AddressSpace::Pio,
        u64::from(SERIAL_PORT),
        8,
        Arc::new(Mutex::new(console)),
    )
    .map_err(host("serial on the bus"))?;
    let control = ControlPort::with_budget(vm.memory.clone(), budget.clone());
    bus.insert(
        AddressSpace::Pio,
        u64::from(CONTROL_PORT),
        4,
        Arc::new(Mutex::new(control)),
    )
    .map_err(host("control port on the bus"))?;
    vm.irqchip
        .wire(&mut bus)
        .map_err(host("LAPIC on the bus"))?;
    if multiboot {
        // What a kvm-unit-tests kernel reads (the CPU count, RAM) and
        // where it ends its run, at QEMU's ports.
        let cpus = u16::try_from(vm.vcpus.len()).unwrap_or(u16::MAX);
        let ram = vm.memory.iter().map(|r| r.len()).sum::<u64>();
        bus.insert(
            AddressSpace::Pio,
            u64::from(fw_cfg::PORT),
            fw_cfg::LEN,
            Arc::new(Mutex::new(fw_cfg::FwCfg::new(cpus, ram))),
        )
        .map_err(host("fw_cfg on the bus"))?;
        bus.insert(
            AddressSpace::Pio,
            u64::from(debug_exit::PORT),
            debug_exit::LEN,
            Arc::new(Mutex::new(debug_exit::DebugExit)),
        )
        .map_err(host("isa-debug-exit on the bus"))?;
    }
    if linux {
        // The ACPI sleep registers a Linux guest powers off through.
        bus.insert(
            AddressSpace::Pio,
            u64::from(power::PORT),
            power::LEN,
            Arc::new(Mutex::new(power::PowerDevice)),
        )
        .map_err(host("power-off registers on the bus"))?;
    }
    Ok(Devices {
        bus: Arc::new(bus),
        serial,
        budget,
    })
}
