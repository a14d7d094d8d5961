//! Guest-facing devices of ipivmm.
//!
//! - [`budget`]: the one memory budget of a run for guest-driven data.
//! - [`bus`]: port-I/O and MMIO dispatch by address range.
//! - [`serial`]: the 16550 console (vm-superio) whose output reaches the user.
//! - [`control`]: the control port: decodes the payload's [`ipivmm_abi::ControlMsg`].
//! - [`lapic`]: ipivmm's own local APIC model for `--irqchip user`.
//! - [`power`]: the ACPI sleep registers a Linux guest powers off through.
//! - [`fw_cfg`], [`debug_exit`]: the machine a multiboot test kernel reads
//!   (the CPU count, RAM) and the port it ends its run through.
pub mod budget;
pub mod bus;
pub mod control;
pub mod control_msg;
pub mod debug_exit;
pub mod fw_cfg;
pub mod lapic;
pub mod power;
pub mod serial;
