//! The Linux pass's checks (`cargo xtask lab linux`) over the runs
//! scripts/lab/probe-linux.sh writes (`runs/linux-*.json`, one run each):
//! a Linux guest booted nested under the lab's kvm_amd, its workload
//! windowed by ipivmm-guest's phase markers (docs/linux-guest.md). The
//! guest's own IPI counts (`/proc/interrupts` CAL per CPU, records
//! `linux_cal`) are checked against the IPIs its workload sent (the
//! module's operations), within what the kernel sends on its own (the
//! idle phase, scaled to the measured phase's length); with AVIC off every
//! broadcast is an ICR-write exit KVM handled (`kvm_apic_ipi`), with AVIC
//! on in x2APIC mode some writes are accelerated (guest writes minus
//! exits > 0). Each check gives one line per offence; none means it passed.
use super::checks::RunsFile;
use ipivmm::mode::apicv::ApicvState;
use ipivmm::results::{PhaseResult, RunReport};
use ipivmm::ApicMode;

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

/// The run's Linux workload (`linux:NAME` of `mode.payload`).
pub fn workload(run: &RunReport) -> Option<&str> {
    run.mode.payload.as_deref()?.strip_prefix("linux:")
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

/// The IPIs target `t` (1-based vCPU) of a run of `workload` gets per
/// operation: one for a broadcast, the unicast's target (vCPU 1) one,
/// the multicast's set (`params[0]`) one each; None for the workloads
/// whose IPIs are not one per operation.
pub fn ipis_per_op(run: &RunReport, t: usize) -> Option<u64> {
    match workload(run)? {
        "ipi-broadcast" => Some(1),
        "ipi-unicast" => Some(u64::from(t == 1)),
        "ipi-multicast" => Some((run.mode.params[0] >> t) & 1),
        _ => None,
    }
}

/// Slack of the guest cross-check beyond the kernel's own IPIs: a few for
/// the markers' own migrations, and 10% of the operations.
fn slack(ops: u64) -> f64 {
    10.0 + 0.1 * ops as f64
}

/// The run completed, with an idle and a measured phase on every vCPU
/// (the idle phase alone for `linux:idle`).
pub fn completed(rf: &RunsFile) -> Vec<String> {
    let mut o = Vec::new();
    for r in &rf.doc.runs {
        if !r.succeeded() {
            o.push(format!("{}: {}", r.label(), r.status.text()));
            continue;
        }
        let names: &[&str] = match workload(r) {
            Some("idle") => &["idle"],
            _ => &["idle", "measure"],
        };
        for v in 0..r.vcpus.len() {
            for n in names {
                if phase(r, v, n).is_none() {
                    o.push(format!(
                        "{}: vcpu{v} has no finished phase '{n}'",
                        r.label()
                    ));
                }
            }
        }
    }
    o
}

/// Guest cross-check: on every target, the measured phase's CAL is at
/// least the IPIs the workload sent it and at most those plus what the
/// kernel sends on its own (the idle phase's rate) and a slack.
pub fn guest_cal(rf: &RunsFile) -> Vec<String> {
    let mut o = Vec::new();
    for r in rf.doc.runs.iter().filter(|r| r.succeeded()) {
        let Some(f) = figures(r) else { continue };
        if ipis_per_op(r, 1).is_none() {
            continue;
        }
        for (i, (cal, own)) in f.targets.iter().enumerate() {
            let t = i + 1;
            let want = f.ops * ipis_per_op(r, t).unwrap_or(0);
            let most = want as f64 + own + slack(f.ops);
            if *cal < want || *cal as f64 > most {
                o.push(format!(
                    "{}: vcpu{t}: CAL {cal} for {want} IPIs sent (the kernel's own about {own:.1}): outside {want}..{most:.0}",
                    r.label()
                ));
            }
        }
    }
    o
}

/// With AVIC off (an in-kernel LAPIC without APICv), every operation's ICR
/// write exited and KVM's LAPIC sent it: ICR-write exits and `kvm_apic_ipi`
/// of the sender at least the operations.
pub fn avic_off_exits(rf: &RunsFile) -> Vec<String> {
    let mut o = Vec::new();
    for r in rf.doc.runs.iter().filter(|r| r.succeeded() && !avic_on(r)) {
        let (Some(f), Some(_)) = (figures(r), ipis_per_op(r, 1)) else {
            continue;
        };
        let (exits, ipi) = (f.icr_exits.unwrap_or(0), f.apic_ipi.unwrap_or(0));
        if exits < f.ops || ipi < f.ops {
            o.push(format!(
                "{}: {} operations, {exits} ICR-write exits, {ipi} kvm_apic_ipi on vcpu0",
                r.label(),
                f.ops
            ));
        }
    }
    o
}

/// With AVIC on and x2APIC (x2AVIC), some of the sender's ICR writes were
/// accelerated: the writes it made (the module's, one per operation) minus
/// its ICR-write exits is above 0. Only where every target can be running
/// (no more vCPUs than host CPUs, docs/kernel-paths.md A7): a target not
/// running makes the write an AVIC_INCOMPLETE_IPI exit (A8).
pub fn x2avic_accelerated(rf: &RunsFile) -> Vec<String> {
    let mut o = Vec::new();
    for r in rf
        .doc
        .runs
        .iter()
        .filter(|r| r.succeeded() && x2avic_ipi_runs(r))
    {
        let Some(f) = figures(r) else { continue };
        let exits = f.icr_exits.unwrap_or(u64::MAX);
        if f.icr_writes <= exits {
            o.push(format!(
                "{}: {} ICR writes, {exits} ICR-write exits: none accelerated",
                r.label(),
                f.icr_writes
            ));
        }
    }
    o
}

/// Host against guest, per vCPU, for every workload: with AVIC off and 2
/// vCPUs each IPI has one target, the other vCPU, and KVM's LAPIC sends
/// it on the sender's thread; so the IPIs each vCPU's kernel counted in
/// the measured phase (CAL + RES) are the `kvm_apic_ipi` events of the
/// other vCPU, within 3 and 2% (the guest reads /proc/interrupts just
/// outside the markers).
pub fn host_sent_guest_received(rf: &RunsFile) -> Vec<String> {
    let mut o = Vec::new();
    for r in rf
        .doc
        .runs
        .iter()
        .filter(|r| r.succeeded() && two_vcpus_avic_off(r))
    {
        for v in 0..2 {
            let (Some(me), Some(other)) = (phase(r, v, "measure"), phase(r, 1 - v, "measure"))
            else {
                continue;
            };
            let got = rec(me, "linux_cal") + rec(me, "linux_res");
            let Some(&sent) = other.tracepoints.get("kvm_apic_ipi") else {
                o.push(format!(
                    "{}: vcpu{} has no kvm_apic_ipi count",
                    r.label(),
                    1 - v
                ));
                continue;
            };
            let slack = 3.0 + 0.02 * sent as f64;
            if (got as f64 - sent as f64).abs() > slack {
                o.push(format!(
                    "{}: vcpu{v}'s kernel counted {got} IPIs (CAL + RES), KVM sent it {sent} (kvm_apic_ipi on vcpu{})",
                    r.label(),
                    1 - v
                ));
            }
        }
    }
    o
}

/// Scope: 2-vCPU runs with AVIC off.
pub fn two_vcpus_avic_off(r: &RunReport) -> bool {
    r.mode.vcpus == 2 && !avic_on(r) && workload(r).is_some_and(|w| w != "idle")
}

/// Scope: runs whose workload sends a known number of IPIs per operation.
pub fn ipi_runs(r: &RunReport) -> bool {
    ipis_per_op(r, 1).is_some()
}

/// Scope: AVIC-off IPI runs.
pub fn avic_off_ipi_runs(r: &RunReport) -> bool {
    ipi_runs(r) && !avic_on(r)
}

/// Scope: AVIC-on x2APIC IPI runs whose targets can all be running.
pub fn x2avic_ipi_runs(r: &RunReport) -> bool {
    ipi_runs(r) && avic_on(r) && r.mode.apic == ApicMode::X2apic && !r.mode.oversubscribed()
}

/// Scope: AVIC-on IPI runs.
pub fn avic_on_ipi_runs(r: &RunReport) -> bool {
    ipi_runs(r) && avic_on(r)
}

/// With AVIC on, every ICR-write exit of the sender is an
/// AVIC_INCOMPLETE_IPI (a target not running), none an emulated write
/// (`kvm_apic_ipi`): the hardware (x2AVIC too) handled every write itself.
pub fn avic_on_exits(rf: &RunsFile) -> Vec<String> {
    let mut o = Vec::new();
    for r in rf
        .doc
        .runs
        .iter()
        .filter(|r| r.succeeded() && avic_on_ipi_runs(r))
    {
        let Some(f) = figures(r) else { continue };
        let (exits, inc, ipi) = (
            f.icr_exits.unwrap_or(0),
            f.incomplete.unwrap_or(0),
            f.apic_ipi.unwrap_or(0),
        );
        if exits != inc || ipi != 0 {
            o.push(format!(
                "{}: {exits} ICR-write exits, {inc} avic_incomplete_ipi, {ipi} kvm_apic_ipi on vcpu0",
                r.label()
            ));
        }
    }
    o
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
    use serde_json::Value;
    use std::path::Path;

    /// A real run of the Linux pass (xtask/fixtures/linux, the serial tail
    /// and the inhibit log cut), edited by `edit` (its JSON).
    fn fixture(name: &str, edit: impl FnOnce(&mut Value)) -> RunsFile {
        let path = format!(
            "{}/fixtures/linux/linux-{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        edit(&mut v);
        RunsFile::from_json(Path::new("edited.json"), &v.to_string()).unwrap()
    }

    fn all_pass(f: &RunsFile) -> Vec<String> {
        [
            completed,
            guest_cal,
            avic_off_exits,
            avic_on_exits,
            x2avic_accelerated,
        ]
        .iter()
        .flat_map(|c| c(f))
        .collect()
    }

    #[test]
    fn the_real_runs_pass_every_check() {
        for n in [
            "broadcast-x2apic-2-host",
            "broadcast-x2apic-4-host",
            "broadcast-xapic-2-inhibit",
            "hackbench-x2apic-2-inhibit",
        ] {
            let f = fixture(n, |_| {});
            assert_eq!(all_pass(&f), Vec::<String>::new(), "{n}");
        }
        let on = fixture("broadcast-x2apic-2-host", |_| {});
        let r = &on.doc.runs[0];
        assert!(avic_on(r) && x2avic_ipi_runs(r));
        let f = figures(r).unwrap();
        assert_eq!((f.ops, f.icr_writes, f.icr_exits), (50, 50, Some(0)));
        // 4 vCPUs on 2 CPUs: out of the accelerated check's scope (A8).
        assert!(!x2avic_ipi_runs(
            &fixture("broadcast-x2apic-4-host", |_| {}).doc.runs[0]
        ));
        assert!(summary(r).contains("accelerated 50"), "{}", summary(r));
    }

    fn vcpu_phase<'a>(v: &'a mut Value, vcpu: usize, name: &str) -> &'a mut Value {
        let phases = v["runs"][0]["vcpus"][vcpu]["phases"]
            .as_array_mut()
            .unwrap();
        phases.iter_mut().find(|p| p["name"] == name).unwrap()
    }

    #[test]
    fn a_target_that_missed_ipis_or_got_too_many_fails_the_cross_check() {
        let few = fixture("broadcast-x2apic-2-host", |v| {
            vcpu_phase(v, 1, "measure")["records"]["linux_cal"] = 49.into();
        });
        let o = guest_cal(&few);
        assert!(
            o.len() == 1 && o[0].contains("vcpu1: CAL 49 for 50 IPIs sent"),
            "{o:?}"
        );
        let many = fixture("broadcast-x2apic-2-host", |v| {
            vcpu_phase(v, 1, "measure")["records"]["linux_cal"] = 80.into();
        });
        assert_eq!(guest_cal(&many).len(), 1);
        // The kernel's own IPIs (the idle phase) widen the bound.
        let busy = fixture("broadcast-x2apic-2-host", |v| {
            vcpu_phase(v, 1, "measure")["records"]["linux_cal"] = 80.into();
            vcpu_phase(v, 1, "idle")["records"]["linux_cal"] = 1000.into();
        });
        assert_eq!(guest_cal(&busy), Vec::<String>::new());
    }

    #[test]
    fn exits_that_contradict_the_avic_state_fail() {
        // AVIC off: a broadcast that did not exit.
        let off = fixture("broadcast-xapic-2-inhibit", |v| {
            vcpu_phase(v, 0, "measure")["icr_write_exits"]["exits"] = 10.into();
        });
        assert_eq!(avic_off_exits(&off).len(), 1);
        // AVIC on: an emulated write, and no write accelerated.
        let on = fixture("broadcast-x2apic-2-host", |v| {
            vcpu_phase(v, 0, "measure")["tracepoints"]["kvm_apic_ipi"] = 3.into();
        });
        assert_eq!(avic_on_exits(&on).len(), 1);
        let none = fixture("broadcast-x2apic-2-host", |v| {
            vcpu_phase(v, 0, "measure")["icr_write_exits"]["exits"] = 50.into();
        });
        assert_eq!(x2avic_accelerated(&none).len(), 1);
        // Hackbench's reschedule IPIs: KVM sent vcpu1 fewer than its kernel counted.
        let lost = fixture("hackbench-x2apic-2-inhibit", |v| {
            vcpu_phase(v, 0, "measure")["tracepoints"]["kvm_apic_ipi"] = 200.into();
        });
        let o = host_sent_guest_received(&lost);
        assert!(
            o.len() == 1 && o[0].contains("vcpu1's kernel counted 296"),
            "{o:?}"
        );
        assert!(two_vcpus_avic_off(&lost.doc.runs[0]));
        // A run that did not complete, a vCPU without its measured phase.
        let failed = fixture("broadcast-x2apic-2-host", |v| {
            v["runs"][0]["vcpus"][1]["phases"]
                .as_array_mut()
                .unwrap()
                .retain(|p| p["name"] != "measure");
        });
        assert!(completed(&failed)[0].contains("vcpu1 has no finished phase 'measure'"));
    }
}
