//! Exit accounting for ipivmm.
//!
//! Small modules, one job each:
//! - [`kvm_stats`]: KVM binary stats (`KVM_GET_STATS_FD`) reader, snapshots and deltas.
//! - [`exit_reasons`]: VMX and SVM exit reason names (as the `kvm_exit` tracepoint prints them).
//! - [`tracefs`]: finding/mounting tracefs, event ids and `format` parsing.
//! - [`tracepoint`]: per-thread `perf_event_open` counters on `kvm:*` tracepoints.
//! - [`specs`]: the default `kvm:*` counters (exit reasons, ICR writes, IPIs, ...).
//! - [`host`]: host facts (CPU, KVM backend, module parameters, APICv/AVIC/IPIv verdicts).
//! - [`apicv`]: decoding of `kvm:kvm_apicv_inhibit_changed`.
//! - [`module_switch`]: host-wide APICv/AVIC/IPIv switches (vendor module reload with a state file).
//! - [`bpf`]: exits by reason with host time counted in the kernel (an eBPF program on `kvm_exit`/`kvm_entry`), per vCPU thread, with a counting switch.
//! - [`sampler`]: per-thread perf ring buffers sampling `kvm_exit`/`kvm_entry` (exit reasons, host time) and APICv inhibit changes.
//!
//! See `docs/counters.md` for definitions and availability rules.

pub mod apicv;
pub mod bpf;
pub mod exit_reasons;
pub mod host;
pub mod kvm_stats;
pub mod module_switch;
pub mod sampler;
pub mod specs;
pub mod tracefs;
pub mod tracepoint;
