//! The Linux pass's summary (`cargo xtask lab linux`) of the runs
//! scripts/lab/probe-linux.sh writes (`runs/linux-*.json`, one run each):
//! a Linux guest booted nested under the lab's kvm_amd, its workload
//! windowed by ipivmm-guest's phase markers (docs/linux-guest.md). What
//! they must satisfy is plans/lab-linux.toml's ([`super::recorded`]); this
//! prints, per run, what its measured phase counted per operation.
use ipivmm::mode::apicv::ApicvState;
use ipivmm::results::{PhaseResult, RunReport};

/// The phase named `name` of vCPU `v` of `run`.
pub fn phase<'a>(run: &'a RunReport, v: usize, name: &str) -> Option<&'a PhaseResult> {
    run.vcpus
        .get(v)?
        .phases
        .iter()
        .find(|p| p.name == name && !p.unfinished)
}

/// The record `key` of `p` (0 when absent).
fn rec(p: &PhaseResult, key: &str) -> u64 {
    p.records.get(key).copied().unwrap_or(0)
}

/// Whether the run's VM had AVIC in effect.
pub fn avic_on(run: &RunReport) -> bool {
    run.apicv.effective == ApicvState::Active
}

/// A run's figures of the measured phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// The workload's operations (the sender's record `operations`).
    pub ops: u64,
    /// The sender's (vCPU 0's) ICR writes the guest counted (the module's calls).
    pub icr_writes: u64,
    /// The sender's ICR-write exits.
    pub icr_exits: Option<u64>,
    /// The sender's `kvm_apic_ipi` events (IPIs KVM's LAPIC sent for it).
    pub apic_ipi: Option<u64>,
    /// The sender's `kvm_avic_incomplete_ipi` exits.
    pub incomplete: Option<u64>,
    /// Per target vCPU: CAL in the measured phase, and the idle phase's CAL
    /// scaled to the measured phase's length.
    pub targets: Vec<(u64, f64)>,
}

/// The measured phase's figures of `run` (None without the phases).
pub fn figures(run: &RunReport) -> Option<Figures> {
    let m0 = phase(run, 0, "measure")?;
    let i0 = phase(run, 0, "idle")?;
    let scale = rec(m0, "guest_ns") as f64 / rec(i0, "guest_ns").max(1) as f64;
    let targets = (1..run.vcpus.len())
        .map(|v| {
            let m = phase(run, v, "measure").map_or(0, |p| rec(p, "linux_cal"));
            let i = phase(run, v, "idle").map_or(0, |p| rec(p, "linux_cal"));
            (m, i as f64 * scale)
        })
        .collect();
    Some(Figures {
        ops: rec(m0, "operations"),
        icr_writes: m0.guest.icr_writes,
        icr_exits: m0.icr_write_exits.as_ref().map(|i| i.exits),
        apic_ipi: m0.tracepoints.get("kvm_apic_ipi").copied(),
        incomplete: m0.tracepoints.get("kvm_avic_incomplete_ipi").copied(),
        targets,
    })
}

/// One line of the verdict's table for `run`.
pub fn summary(r: &RunReport) -> String {
    let boot = r
        .timings
        .first_message_ns
        .map_or("?".into(), |ns| format!("{:.0} s", ns as f64 / 1e9));
    let Some(f) = figures(r) else {
        return format!("{}: boot {boot}, no measured phase", r.label());
    };
    let per = |x: Option<u64>| match x {
        Some(x) if f.ops > 0 => format!("{:.2}", x as f64 / f.ops as f64),
        _ => "-".into(),
    };
    let cal: Vec<String> = f
        .targets
        .iter()
        .map(|(c, own)| format!("{c} (own {own:.0})"))
        .collect();
    format!(
        "{} {}: boot {boot}, {} ops, AVIC {}, per op: ICR-write exits {}, avic_incomplete_ipi {}, kvm_apic_ipi {}; accelerated {}; targets' CAL {}",
        r.mode.payload.as_deref().unwrap_or("?"),
        r.label(),
        f.ops,
        if avic_on(r) { "on" } else { "off" },
        per(f.icr_exits),
        per(f.incomplete),
        per(f.apic_ipi),
        f.icr_writes.saturating_sub(f.icr_exits.unwrap_or(0)),
        cal.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_runs_summary_counts_its_measured_phase() {
        let path = format!(
            "{}/fixtures/linux/linux-broadcast-x2apic-2-host.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let doc = ipivmm::Document::load(Path::new(&path)).unwrap();
        let r = &doc.runs[0];
        let f = figures(r).unwrap();
        assert_eq!((f.ops, f.icr_writes, f.icr_exits), (50, 50, Some(0)));
        let line = summary(r);
        assert!(
            line.contains("50 ops, AVIC on, per op: ICR-write exits 0.00")
                && line.contains("accelerated 50"),
            "{line}"
        );
    }
}
