//! Exit accounting for ipivmm.
//!
//! Small modules, one job each:
//! - [`kvm_stats`]: KVM binary stats (`KVM_GET_STATS_FD`) reader, snapshots and deltas.
//! - [`exit_reasons`]: VMX and SVM exit reason names (as the `kvm_exit` tracepoint prints them).
//! - [`tracefs`]: finding/mounting tracefs, event ids and `format` parsing.
//! - [`tracepoint`]: per-thread `perf_event_open` counters on `kvm:*` tracepoints.
//! - [`specs`]: the default `kvm:*` counters (exit reasons, ICR writes, IPIs, ...).
//! - [`apicv`]: decoding of `kvm:kvm_apicv_inhibit_changed`.
//! - [`bpf`]: exits by reason with host time counted in the kernel (an eBPF program on `kvm_exit`/`kvm_entry`), per vCPU thread, with a counting switch.
//! - [`sampler`]: per-thread perf ring buffers sampling `kvm_exit`/`kvm_entry` (exit reasons, host time) and APICv inhibit changes.
//!
//! Host facts and module switching are `ipivmm-host`'s. See
//! `docs/counters.md` for definitions and availability rules.

pub mod apicv_inhibits;
pub mod bpf;
pub mod exit_reasons;
#[cfg(feature = "kvm")]
pub mod kvm_stats;
pub mod sampler;
pub mod specs;
pub mod tracefs;
pub mod tracepoint;
