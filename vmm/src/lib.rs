//! ipivmm: a small KVM virtual machine monitor that measures what
//! inter-processor interrupts cost a guest under each interrupt-virtualization
//! mode, and where the cost goes (VM exits by reason, per vCPU, per phase).
//!
//! The library builds a VM from a typed [`VmConfig`] (vCPUs, guest RAM, the
//! mode parts: irqchip, APIC mode, IPI path, APICv request; workload,
//! iterations, levers), loads the built-in payload or any x86-64 ELF
//! ([`PayloadSource`]), runs it with a watchdog ([`run()`]) and returns a
//! typed [`RunReport`](analysis::results::RunReport): per vCPU and per
//! measured phase the userspace exits, KVM stats, tracepoint counters, the
//! payload's own counters and records, and latency statistics. A failed run
//! still returns its report: the phases that finished, how each vCPU ended
//! (with a register dump on a fault) and the tail of the guest's serial
//! output.
//!
//! `ipivmm` is the one dependency a caller needs: the machine's face is
//! here ([`run()`], [`RunOptions`], [`VmConfig`], [`PayloadSource`],
//! [`SerialSink`] for the guest's console, the errors [`RunError`],
//! [`ConfigError`], and [`kvm_available`], which says whether a
//! VM can run here before you build one); the types a configuration is
//! made of and a report is read with (the mode parts, the results) are the
//! analysis crate's, re-exported as [`analysis`]. Errors name the
//! [`VmConfig`] field to change next to the command-line flag that sets it
//! (e.g. `--vcpus 0 (VmConfig::vcpus): must be between 1 and 8 ...`).
//! `examples/library-only/` is a crate that depends on `ipivmm` alone.
//!
//! This crate is the machine; what a run recorded and what is concluded
//! from it (the results model, statistics, the gate, compare,
//! expectations, plan files) is the analysis crate `ipivmm-analysis`,
//! which needs no KVM and is re-exported here as [`analysis`]:
//! `ipivmm::analysis::compare`, `ipivmm::analysis::expect`... The
//! machine's insides (VM setup, the vCPU loop, the irqchips, the run's
//! stages) are private; [`experiment`] repeats runs in rounds and
//! [`plan`] executes plans (its docs run a plan file from Rust).
//!
//! The `ipivmm` command (its flags, the text
//! report, CSV, SVG, TAP and JUnit writers, `compare` and sweeps) is the
//! `ipivmm-cli` crate (`cli/` in the repository), so a library user
//! compiles none of the command line's and output formats' crates; the
//! `clap` feature (off by default) derives clap's parser for the mode
//! parts, for a command line of your own.
//!
//! # Running a VM
//!
//! Running needs `/dev/kvm` (hence `no_run`); everything else compiles as is.
//!
//! ```no_run
//! use ipivmm::{run, PayloadSource, RunOptions, SerialSink, VmConfig};
//! use ipivmm::analysis::mode::{ApicMode, Irqchip, TargetWait, Workload};
//! use ipivmm::analysis::results::RunStatus;
//! use std::time::Duration;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Fails with the fix (load the module, join the kvm group...) where
//!     // no VM can run.
//!     let kvm = ipivmm::kvm_available()?;
//!     println!("{kvm}");
//!     let config = VmConfig {
//!         vcpus: 2,
//!         memory_bytes: 64 << 20,
//!         irqchip: Irqchip::Kernel,
//!         apic: ApicMode::X2apic,
//!         workload: Workload::Pingpong,
//!         target_wait: TargetWait::Halt,
//!         iterations: 1000,
//!         warmup: 100,
//!         timeout: Duration::from_secs(60),
//!         // The built-in IPI workloads; `PayloadSource::File(path)` runs your ELF.
//!         payload: PayloadSource::Builtin,
//!         // kvm:* tracepoint counters need root and tracefs.
//!         tracepoints: false,
//!         ..VmConfig::default()
//!     };
//!     // Checks the configuration and the payload, builds the VM, runs every
//!     // vCPU on its own thread until each sent Done (or the timeout).
//!     // The guest's console on our stdout, as it writes it.
//!     let opts = RunOptions {
//!         serial: SerialSink::Stdout,
//!         ..RunOptions::default()
//!     };
//!     let report = run(&config, opts)?;
//!     if let RunStatus::Failed { reason } = &report.status {
//!         eprintln!("run failed: {reason}\nguest said:\n{}", report.serial_tail);
//!     }
//!     for vcpu in &report.vcpus {
//!         for phase in &vcpu.phases {
//!             println!(
//!                 "vcpu{} phase {} '{}': {} userspace exits, {} IPIs sent, {} received",
//!                 vcpu.index,
//!                 phase.id,
//!                 phase.name,
//!                 phase.exits.total(),
//!                 phase.guest.ipis_sent,
//!                 phase.guest.ipis_received,
//!             );
//!             if let Some(lat) = &phase.latency {
//!                 println!(
//!                     "  {} samples: p50 {} cycles, p99 {} cycles, mean {:.0} cycles",
//!                     lat.count, lat.p50, lat.p99, lat.mean
//!                 );
//!                 if let Some(ns) = &lat.ns {
//!                     println!("  p50 {:.0} ns", ns.p50);
//!                 }
//!             }
//!             for (name, value) in &phase.records {
//!                 println!("  record {name} = {value}");
//!             }
//!         }
//!     }
//!     // Named access, e.g. the measured phase of the built-in workloads:
//!     let measure = report.vcpus[0].phase_named("measure");
//!     println!("vcpu0 'measure' finished: {}", measure.is_some());
//!     Ok(())
//! }
//! ```
//!
//! # A payload of your own
//!
//! Guest payloads are freestanding `no_std` ELFs written with the
//! `ipivmm-guest` SDK (`guest-payload/sdk`); `ipivmm new-payload NAME`
//! writes a crate to start from ([`payload::template`]) and
//! `examples/exit-roundtrip` is a complete one to read.
//! [`payload::build::PayloadBuild`] builds such a crate
//! from source the way ipivmm builds its own payload, and
//! [`PayloadSource::File`] runs the result:
//!
//! ```no_run
//! use ipivmm::payload::build::PayloadBuild;
//! use ipivmm::{run, PayloadSource, RunOptions, VmConfig};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let elf = PayloadBuild::new("examples/exit-roundtrip").build()?;
//!     let config = VmConfig {
//!         vcpus: 1,
//!         iterations: 500,
//!         warmup: 50,
//!         payload: PayloadSource::File(elf),
//!         tracepoints: false,
//!         ..VmConfig::default()
//!     };
//!     let report = run(&config, RunOptions::default())?;
//!     assert!(report.succeeded(), "{:?}", report.status);
//!     let cpuid = report.vcpus[0].phase_named("cpuid").and_then(|p| p.latency.as_ref());
//!     if let Some(lat) = cpuid {
//!         println!("CPUID round trip: p50 {} TSC cycles", lat.p50);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! See `docs/custom-payloads.md` for the ABI, the SDK, the build flags and
//! how to debug a payload.
#![warn(missing_docs)]

/// The guest ABI crate (`ipivmm-abi`): the `BootInfo` / control-message
/// layout shared with payloads, and the numeric form of the mode parts.
pub use ipivmm_abi as abi;

/// The analysis crate (`ipivmm-analysis`): results, statistics, the gate,
/// compare, expectations and plan files, none of which needs KVM.
pub use ipivmm_analysis as analysis;
// The analysis modules under the paths the machine's code uses.
use ipivmm_analysis::{gate, inputs, mode, results, stats};

pub(crate) mod arch;
pub mod config;
pub(crate) mod error;
pub mod experiment;
pub mod host;
pub(crate) mod irqchip;
pub(crate) mod kick;
pub(crate) mod kvm_extra;
pub(crate) mod levers;
pub mod linux;
pub mod multiboot;
pub mod payload;
pub mod plan;
pub mod run;
pub(crate) mod vcpu;
pub(crate) mod vm;

pub use config::{ConfigError, PayloadSource, VmConfig};
pub use host::KvmInfo;
pub use run::{run, RunError, RunOptions};

/// Where the guest's serial console (COM1) goes: [`SerialSink::Stdout`]
/// (this process's stdout, as the guest writes it), [`SerialSink::Log`]
/// (`log::info!` per line), [`SerialSink::Capture`] (the default of
/// [`RunOptions`]: kept in memory) or [`SerialSink::Discard`]. The last
/// 16 KiB are always in [`RunReport::serial_tail`](analysis::results::RunReport::serial_tail).
///
/// ```no_run
/// use ipivmm::{run, RunOptions, SerialSink, VmConfig};
///
/// let opts = RunOptions {
///     serial: SerialSink::Stdout,
///     ..RunOptions::default()
/// };
/// let report = run(&VmConfig::default(), opts)?;
/// assert!(report.serial_tail.contains("ipivmm-guest:"));
/// # Ok::<(), ipivmm::RunError>(())
/// ```
pub use ipivmm_devices::serial::SerialSink;

/// One guest memory budget for several runs ([`RunOptions::budget`]).
pub use ipivmm_devices::budget::SharedBudget;

/// Whether KVM is usable here: opens `/dev/kvm`, checks its API version
/// and reads its vCPU limits and backend ([`KvmInfo::open`] for another
/// device node). The error says what to do (load the module, join the
/// `kvm` group, ...).
///
/// ```
/// match ipivmm::kvm_available() {
///     Ok(kvm) => println!("{kvm}"), // "/dev/kvm: KVM API 12, backend kvm_intel, up to 1024 vCPUs per VM ..."
///     Err(e) => println!("no VM can run here: {e}"),
/// }
/// ```
pub fn kvm_available() -> Result<KvmInfo, host::DeviceError> {
    KvmInfo::open(std::path::Path::new("/dev/kvm"))
}
