//! What to count on a vCPU thread: the default `kvm:*` counter specs for
//! attributing IPI cost, and their names.
//!
//! Filters are given as field comparisons with alternative field names and
//! resolved against each event's `format` when the set is opened
//! ([`crate::tracepoint::Filter::build`]).

use crate::exit_reasons::{exit_reasons, Isa};
use crate::tracepoint::{CounterSpec, FieldEq, Filter};

/// Which `kvm_exit` reasons get their own counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitReasonSelection {
    /// Only the unfiltered total.
    None,
    /// Every named reason of the ISA (65 VMX / 110 SVM counters).
    All,
    /// These codes only.
    Only(Vec<u32>),
}

/// Name of the `kvm_exit` counter for reason `name`.
pub fn exit_counter_name(reason: &str) -> String {
    format!("kvm_exit:{reason}")
}

/// Counter names of the ICR-write counters.
pub mod names {
    /// ICR writes handled by KVM's LAPIC, xAPIC and x2APIC alike (the x2APIC
    /// paths also trace `kvm_apic` with reg 0x300): `kvm_apic` with
    /// `rw == 1 && reg == 0x300`.
    pub const APIC_ICR_WRITE: &str = "kvm_apic:icr_write";
    /// x2APIC ICR WRMSRs that took KVM's generic MSR path (may miss the
    /// WRMSR fastpath): `kvm_msr` with `write == 1 && ecx == 0x830`.
    pub const MSR_ICR_WRITE: &str = "kvm_msr:icr_write";
    /// PV IPI hypercalls: `kvm_hypercall` with `nr == 10` (KVM_HC_SEND_IPI).
    pub const HYPERCALL_SEND_IPI: &str = "kvm_hypercall:send_ipi";
    /// AVIC incomplete-IPI exits whose ICR write KVM ran again (BUSY still
    /// set on an invalid target or type): those also traced `kvm_apic`
    /// (docs/kernel-paths.md, section 5).
    pub const AVIC_INCOMPLETE_BUSY: &str = "kvm_avic_incomplete_ipi:busy";
    /// Every AVIC incomplete-IPI exit (unfiltered `kvm_avic_incomplete_ipi`).
    pub const AVIC_INCOMPLETE: &str = "kvm_avic_incomplete_ipi";
    /// Wake-ups after the vCPU really slept (`waited == 1`).
    pub const WAKEUP_WAITED: &str = "kvm_vcpu_wakeup:waited";
    /// Wake-ups that halt polling caught (`waited == 0`).
    pub const WAKEUP_POLLED: &str = "kvm_vcpu_wakeup:polled";
}

/// The default `kvm:*` counters for attributing IPI cost.
///
/// `kvm_emulate_insn` is deliberately absent: it fires for every emulated
/// instruction (every kernel-mode guest instruction under kvm_pvm), and
/// counting it cost +14% cycles per IPI here; the KVM stat `insn_emulation`
/// gives the same count for free.
///
/// `isa` selects the exit reason table (`None`: only the `kvm_exit` total).
pub fn kvm_specs(isa: Option<Isa>, reasons: &ExitReasonSelection) -> Vec<CounterSpec> {
    let mut v = vec![CounterSpec::kvm("kvm_exit")];
    if let Some(isa) = isa {
        v.extend(exit_reason_specs(isa, reasons));
    }
    v.extend(filtered_specs());
    v.extend(CORE_UNFILTERED_EVENTS.iter().map(|e| CounterSpec::kvm(e)));
    v
}

/// One `kvm_exit` counter per selected reason of `isa`.
fn exit_reason_specs(isa: Isa, reasons: &ExitReasonSelection) -> Vec<CounterSpec> {
    exit_reasons(isa)
        .iter()
        .filter(|(code, _)| match reasons {
            ExitReasonSelection::None => false,
            ExitReasonSelection::All => true,
            ExitReasonSelection::Only(codes) => codes.contains(code),
        })
        .map(|&(code, name)| {
            CounterSpec::new(
                exit_counter_name(name),
                "kvm",
                "kvm_exit",
                Filter::Eq(vec![FieldEq::new(&["exit_reason"], u64::from(code))]),
            )
        })
        .collect()
}

/// The counters with an in-kernel filter: ICR writes, PV IPIs, AVIC's busy
/// IPIs, wake-ups by kind.
fn filtered_specs() -> Vec<CounterSpec> {
    vec![
        CounterSpec::new(
            names::APIC_ICR_WRITE,
            "kvm",
            "kvm_apic",
            Filter::Eq(vec![
                FieldEq::new(&["rw", "write"], 1),
                FieldEq::new(&["reg"], 0x300),
            ]),
        ),
        CounterSpec::new(
            names::MSR_ICR_WRITE,
            "kvm",
            "kvm_msr",
            Filter::Eq(vec![
                FieldEq::new(&["write", "rw"], 1),
                FieldEq::new(&["ecx", "index"], 0x830),
            ]),
        ),
        CounterSpec::new(
            names::HYPERCALL_SEND_IPI,
            "kvm",
            "kvm_hypercall",
            Filter::Eq(vec![FieldEq::new(&["nr"], 10)]),
        ),
        CounterSpec::new(
            names::AVIC_INCOMPLETE_BUSY,
            "kvm",
            "kvm_avic_incomplete_ipi",
            Filter::Raw("(id == 0 || id == 2) && icrl & 0x1000".into()),
        ),
        CounterSpec::new(
            names::WAKEUP_WAITED,
            "kvm",
            "kvm_vcpu_wakeup",
            Filter::Eq(vec![FieldEq::new(&["waited"], 1)]),
        ),
        CounterSpec::new(
            names::WAKEUP_POLLED,
            "kvm",
            "kvm_vcpu_wakeup",
            Filter::Eq(vec![FieldEq::new(&["waited"], 0)]),
        ),
    ]
}

/// Events counted whole in every run: IPIs KVM's LAPIC sent, and AVIC's
/// incomplete-IPI exits (part of [`icr_write_exits`]).
const CORE_UNFILTERED_EVENTS: &[&str] = &["kvm_apic_ipi", "kvm_avic_incomplete_ipi"];

/// Events counted whole only on request ([`context_specs`], `--context-events`),
/// as context for attributing cost. Not by default: every per-thread event is
/// scheduled out and in at each context switch of its vCPU thread, which
/// measurably slows halted-target round trips (docs/counters.md, "The cost
/// of counting").
pub const CONTEXT_EVENTS: &[&str] = &[
    "kvm_entry",
    "kvm_apic",
    "kvm_msr",
    "kvm_mmio",
    "kvm_pio",
    "kvm_fast_mmio",
    "kvm_userspace_exit",
    "kvm_apic_accept_irq",
    "kvm_apicv_accept_irq",
    "kvm_inj_virq",
    "kvm_eoi",
    "kvm_pv_eoi",
    "kvm_hypercall",
    "kvm_vcpu_wakeup",
    "kvm_halt_poll_ns",
    "kvm_ple_window_update",
    "kvm_apicv_inhibit_changed",
    "kvm_avic_unaccelerated_access",
    "kvm_avic_kick_vcpu_slowpath",
    "kvm_avic_doorbell",
];

/// The context events ([`CONTEXT_EVENTS`]), each counted whole.
pub fn context_specs() -> Vec<CounterSpec> {
    CONTEXT_EVENTS.iter().map(|e| CounterSpec::kvm(e)).collect()
}

/// ICR-write exits of a window from its tracepoint counters, the same on
/// every vendor path (docs/kernel-paths.md, section 5): every ICR write KVM
/// handled traces `kvm_apic` (reg 0x300, write), and AVIC's incomplete-IPI
/// exits add the writes that never reached it, minus those KVM ran again
/// (which traced `kvm_apic` too). None when `kvm_apic` was not counted.
///
/// ```
/// use ipivmm_counters::specs::{icr_write_exits, names};
/// use std::collections::BTreeMap;
///
/// // AMD with AVIC: 40 writes to running targets accelerated, 10 to halted
/// // ones exited as incomplete IPIs, none re-run by KVM.
/// let c = BTreeMap::from([(names::APIC_ICR_WRITE.to_string(), 0), (names::AVIC_INCOMPLETE.to_string(), 10)]);
/// assert_eq!(icr_write_exits(&c), Some(10));
/// ```
pub fn icr_write_exits(counters: &std::collections::BTreeMap<String, u64>) -> Option<u64> {
    let handled = *counters.get(names::APIC_ICR_WRITE)?;
    let incomplete = counters.get(names::AVIC_INCOMPLETE).copied().unwrap_or(0);
    let rerun = counters
        .get(names::AVIC_INCOMPLETE_BUSY)
        .copied()
        .unwrap_or(0);
    Some(handled + incomplete.saturating_sub(rerun))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracefs::parse_format;

    const KVM_APIC: &str = include_str!("../testdata/kvm_apic.format");
    const KVM_MSR: &str = include_str!("../testdata/kvm_msr.format");

    #[test]
    fn filters_built_from_formats() {
        let apic = parse_format(KVM_APIC).unwrap();
        let msr = parse_format(KVM_MSR).unwrap();
        let specs = kvm_specs(None, &ExitReasonSelection::None);
        let get = |n: &str| specs.iter().find(|s| s.name == n).unwrap();
        assert_eq!(
            get(names::APIC_ICR_WRITE)
                .filter
                .build("kvm:kvm_apic", Some(&apic)),
            Ok(Some("rw == 1 && reg == 0x300".to_string()))
        );
        assert_eq!(
            get(names::MSR_ICR_WRITE)
                .filter
                .build("kvm:kvm_msr", Some(&msr)),
            Ok(Some("write == 1 && ecx == 0x830".to_string()))
        );
        // A field missing on this kernel is a reason, not a panic.
        let err = get(names::MSR_ICR_WRITE)
            .filter
            .build("kvm:kvm_apic", Some(&apic))
            .unwrap_err();
        assert!(err.contains("no field ecx or index"), "{err}");
        assert_eq!(Filter::None.build("x", None), Ok(None));
        assert!(get(names::MSR_ICR_WRITE).filter.build("x", None).is_err());
    }

    #[test]
    fn spec_lists_per_isa() {
        let none = kvm_specs(None, &ExitReasonSelection::All);
        assert_eq!(none.iter().filter(|s| s.event == "kvm_exit").count(), 1);
        let vmx = kvm_specs(Some(Isa::Vmx), &ExitReasonSelection::All);
        assert_eq!(vmx.iter().filter(|s| s.event == "kvm_exit").count(), 66);
        let hlt = vmx
            .iter()
            .find(|s| s.name == "kvm_exit:APIC_WRITE")
            .unwrap();
        assert_eq!(
            hlt.filter,
            Filter::Eq(vec![FieldEq::new(&["exit_reason"], 56)])
        );
        let svm = kvm_specs(
            Some(Isa::Svm),
            &ExitReasonSelection::Only(vec![0x401, 0x402, 0x999]),
        );
        let exits: Vec<_> = svm
            .iter()
            .filter(|s| s.event == "kvm_exit")
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            exits,
            [
                "kvm_exit",
                "kvm_exit:avic_incomplete_ipi",
                "kvm_exit:avic_unaccelerated_access"
            ]
        );
        let mut names: Vec<_> = vmx.iter().map(|s| &s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), vmx.len(), "counter names must be unique");
    }

    /// Counter values each vendor path of docs/kernel-paths.md leaves for 50
    /// ICR writes (the recorded shapes), and what must come out.
    #[test]
    fn icr_write_exits_on_every_path() {
        let c = |a: u64, b: u64, busy: u64| {
            std::collections::BTreeMap::from([
                (names::APIC_ICR_WRITE.to_string(), a),
                (names::AVIC_INCOMPLETE.to_string(), b),
                (names::AVIC_INCOMPLETE_BUSY.to_string(), busy),
            ])
        };
        // Intel or AMD without AVIC, xAPIC or x2APIC: every write traces kvm_apic.
        assert_eq!(icr_write_exits(&c(50, 0, 0)), Some(50));
        // IPIv: 45 unicasts virtualized, 5 shorthand writes exited (APIC_WRITE).
        assert_eq!(icr_write_exits(&c(5, 0, 0)), Some(5));
        // AVIC: 30 accelerated, 20 incomplete (target not running), of which
        // 4 had BUSY set and were re-run by KVM (those traced kvm_apic).
        assert_eq!(icr_write_exits(&c(4, 20, 4)), Some(20));
        // PV IPIs write no ICR.
        assert_eq!(icr_write_exits(&c(0, 0, 0)), Some(0));
        // Without kvm_apic counted there is no figure.
        assert_eq!(icr_write_exits(&Default::default()), None);
    }
}
