//! What ipivmm knows and changes about the host, apart from counting:
//! - [`facts`]: host facts (CPU, KVM backend, module parameters, the
//!   APICv/AVIC/IPIv verdicts) read from /proc and /sys;
//! - [`module_switch`]: host-wide APICv/AVIC/IPIv switches (a vendor module
//!   reload, recorded in a state file so that the original comes back);
//! - [`lab`]: where what a host lacks is answered (the lab command, one
//!   table for every "no answer here").
//!
//! Counting (KVM stats, tracepoints, the exit sampler) is `ipivmm-counters`'s.

pub mod facts;
pub mod lab;
pub mod module_switch;
