//! The AVIC pass's parts and what its verdict prints of their runs. What
//! those runs must satisfy (kvm_amd with `avic=1` on QEMU's emulated AVIC
//! against docs/kernel-paths.md's AVIC rows A5, A7, A8, and ipivmm's
//! ICR-write accounting) is stated by plans/lab-avic-{on,off,preset}.toml,
//! which scripts/lab/probe-avic.sh runs with `ipivmm check` and
//! [`super::avic`] reads back from their TAP.
use super::recorded::label;
use ipivmm::mode::apicv::ApicvState;
use ipivmm::results::{Document, PhaseResult, RunReport};
use ipivmm::ApicMode;

/// One boot of the AVIC pass (probe-avic.sh's `lab.probe=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The KVM selftests (the peer's check of the emulation) with AVIC on, its exits traced, then
    /// with avic=0
    Selftests,
    /// ipivmm's AVIC matrix with AVIC on and with avic=0 (runs/avic-{on,off}*.json)
    Matrix,
    /// sweep --preset avic-broadcast at 2, 4 and 8 vCPUs (runs/avic-preset.json)
    Preset,
}

impl Part {
    /// Every part, in the order the pass boots them.
    pub const ALL: &[Part] = &[Part::Selftests, Part::Matrix, Part::Preset];

    /// Its name (`lab.probe=`, the results directory).
    pub fn name(self) -> &'static str {
        match self {
            Part::Selftests => "selftests",
            Part::Matrix => "matrix",
            Part::Preset => "preset",
        }
    }

    /// The part named `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// A tracepoint's count in a phase (0 when the run did not trace it).
fn tp(p: &PhaseResult, name: &str) -> u64 {
    p.tracepoints.get(name).copied().unwrap_or(0)
}

/// The phase's exits of one reason (`kvm_exit`'s SVM name).
fn reason(p: &PhaseResult, name: &str) -> u64 {
    p.exits_by_reason().get(name).copied().unwrap_or(0)
}

/// A run with AVIC active on the ICR path.
fn avic_icr(r: &RunReport) -> bool {
    r.apicv.effective == ApicvState::Active && r.mode.ipi.writes_icr()
}

/// The host of the run had x2AVIC (`ipivmm host`'s verdict it recorded):
/// kvm_amd runs an x2APIC guest's APIC through the backing page.
fn x2avic(r: &RunReport) -> bool {
    r.host_settings
        .as_ref()
        .is_some_and(|h| h.verdicts.x2avic.is_available())
}

/// The measured phases of vCPU 0, the sender.
fn sender(r: &RunReport) -> impl Iterator<Item = &PhaseResult> {
    r.vcpus
        .iter()
        .take(1)
        .flat_map(|v| v.phases.iter().filter(|p| p.name == "measure"))
}

/// A figure, `-` where the phase lacks it.
fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// One line per AVIC-active run on the ICR path: how the sender's ICR
/// writes went.
pub fn avic_summary(doc: &Document) -> Vec<String> {
    let mut out = Vec::new();
    for r in doc.runs.iter().filter(|r| avic_icr(r)) {
        for p in sender(r) {
            let icr = p.icr_write_exits.as_ref();
            out.push(format!(
                "{} {}v {}{}: {} ICR writes, {} exits, {} accelerated; avic_incomplete_ipi {}, msr {}, avic_unaccelerated_access {}, doorbells {}, kvm_apicv_accept_irq {}",
                label(r),
                r.mode.vcpus,
                r.mode.target.name(),
                match (r.mode.apic, x2avic(r)) {
                    (ApicMode::X2apic, true) => " x2AVIC",
                    (ApicMode::X2apic, false) => " hybrid",
                    _ => "",
                },
                p.guest.all_icr_writes(),
                opt(icr.map(|e| e.exits)),
                opt(icr.map(|e| e.accelerated)),
                reason(p, "avic_incomplete_ipi"),
                reason(p, "msr"),
                reason(p, "avic_unaccelerated_access"),
                tp(p, "kvm_avic_doorbell"),
                tp(p, "kvm_apicv_accept_irq")
            ));
        }
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    /// The phase field (and counter source) of exits by reason.
    const EXIT_REASONS: &str = ipivmm::results::source::Source::ExitReasons.key();
    use super::*;
    use serde_json::{json, Value};

    const SWEEP: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/lab-quick/runs/sweep.json"
    );

    /// The quick pass fixture's sweep: real runs of kvm_amd with avic=N
    /// under QEMU TCG (ping-pong kernel/x2apic/icr `--apicv host` and
    /// `inhibit`, a PV ping-pong, a user-irqchip broadcast), each counted
    /// by the exit sampler and the tracepoints. It is what the AVIC pass's
    /// avic=0 sweeps record.
    pub fn avic_off() -> Value {
        serde_json::from_str(&std::fs::read_to_string(SWEEP).unwrap()).unwrap()
    }

    /// runs[run].vcpus[vcpu]'s measure phase.
    pub fn measure(v: &mut Value, run: usize, vcpu: usize) -> &mut Value {
        v["runs"][run]["vcpus"][vcpu]["phases"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["name"] == "measure")
            .unwrap()
    }

    /// A run as kvm_amd records it with AVIC active: the plan says so and
    /// every phase of every vCPU ran with no inhibit.
    fn active(r: &mut Value) {
        r["apicv"]["effective"] = "active".into();
        r["apicv"]["detail"] = "AVIC active".into();
        for v in r["vcpus"].as_array_mut().unwrap() {
            for p in v["phases"].as_array_mut().unwrap() {
                p["apicv"] = json!({"active": true, "inhibits": []});
            }
        }
    }

    /// An exit reason of a phase, `n` exits.
    fn set_reason(p: &mut Value, name: &str, n: u64) {
        let by = p[EXIT_REASONS]["by_reason"].as_object_mut().unwrap();
        if n == 0 {
            by.remove(name);
        } else {
            by.insert(
                name.into(),
                json!({"count": n, "timed": n, "host_ns": 1000 * n}),
            );
        }
    }

    /// The AVIC matrix's `--apicv host` and `inhibit` runs as kvm_amd with
    /// avic=1 records them on QEMU's emulated AVIC, made from the real
    /// avic=N runs of [`avic_off`] (30 ICR writes each) with the figures
    /// docs/kernel-paths.md gives and docs/lab.md's AVIC boots showed:
    /// 0. xAPIC ping-pong to a spinning target: every ICR write and EOI
    ///    accelerated, no exit (A7), a doorbell each;
    /// 1. the same to a halted target: every ICR write an
    ///    AVIC_INCOMPLETE_IPI exit after delivery, no ICR emulation (A8);
    /// 2. x2APIC (hybrid AVIC, A5): the ICR WRMSR exits, every IPI through
    ///    `kvm_apicv_accept_irq` (`--context-events`);
    /// 3. x2APIC `--apicv inhibit`: inhibited by the PIT's reinjection;
    /// 4. x2APIC ping-pong to a spinning target on a host with x2AVIC: every
    ///    ICR WRMSR accelerated, no `msr` exit (A7).
    pub fn avic_on() -> Value {
        let mut v = avic_off();
        let (host, inhibit) = (v["runs"][0].clone(), v["runs"][3].clone());
        v["runs"] = json!([host.clone(), host.clone(), host.clone(), inhibit, host]);
        v["skipped"] = json!([]);
        for run in [0, 1, 2, 4] {
            active(&mut v["runs"][run]);
        }
        for run in 0..2 {
            v["runs"][run]["mode"]["apic"] = "xapic".into();
            for vcpu in 0..2 {
                let p = measure(&mut v, run, vcpu);
                set_reason(p, "msr", 0);
                p["tracepoints"]["kvm_msr:icr_write"] = 0.into();
                p["tracepoints"]["kvm_apic:icr_write"] = 0.into();
                p["tracepoints"]["kvm_apic_ipi"] = 0.into();
            }
        }
        let a7 = measure(&mut v, 0, 0);
        a7["icr_write_exits"]["exits"] = 0.into();
        a7["icr_write_exits"]["accelerated"] = 30.into();
        a7["tracepoints"]["kvm_avic_doorbell"] = 30.into();
        v["runs"][1]["mode"]["target"] = "halt".into();
        measure(&mut v, 1, 1)["kvm_stats"]["halt_wakeup"] = 30.into();
        let a8 = measure(&mut v, 1, 0);
        set_reason(a8, "avic_incomplete_ipi", 30);
        a8["tracepoints"]["kvm_avic_incomplete_ipi"] = 30.into();
        measure(&mut v, 2, 0)["tracepoints"]["kvm_apicv_accept_irq"] = 30.into();
        let r = &mut v["runs"][3];
        r["apicv"]["effective"] = "inhibited".into();
        for vcpu in r["vcpus"].as_array_mut().unwrap() {
            for p in vcpu["phases"].as_array_mut().unwrap() {
                p["apicv"] = json!({"active": false, "inhibits": ["PIT_REINJ"]});
            }
        }
        v["runs"][4]["host_settings"]["verdicts"]["x2avic"] = json!({"state": "available"});
        for vcpu in 0..2 {
            let p = measure(&mut v, 4, vcpu);
            set_reason(p, "msr", 0);
            p["tracepoints"]["kvm_msr:icr_write"] = 0.into();
            p["tracepoints"]["kvm_apic:icr_write"] = 0.into();
            p["tracepoints"]["kvm_apic_ipi"] = 0.into();
        }
        let a7 = measure(&mut v, 4, 0);
        a7["icr_write_exits"]["exits"] = 0.into();
        a7["icr_write_exits"]["accelerated"] = 30.into();
        // Made, not recorded: the figures a file would record are derived
        // when it is written (`recorded.*` judges them as it reads back).
        for r in v["runs"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("metrics");
        }
        v
    }

    #[test]
    fn the_summary_says_how_each_senders_icr_writes_went() {
        let doc = Document::from_json(&avic_on().to_string(), "avic-on.json").unwrap();
        assert_eq!(
            avic_summary(&doc),
            [
                "pingpong kernel/xapic/icr apicv=host 2v spin: 30 ICR writes, 0 exits, 30 accelerated; avic_incomplete_ipi 0, msr 0, avic_unaccelerated_access 0, doorbells 30, kvm_apicv_accept_irq 0",
                "pingpong kernel/xapic/icr apicv=host 2v halt: 30 ICR writes, 30 exits, 0 accelerated; avic_incomplete_ipi 30, msr 0, avic_unaccelerated_access 0, doorbells 0, kvm_apicv_accept_irq 0",
                "pingpong kernel/x2apic/icr apicv=host 2v spin hybrid: 30 ICR writes, 30 exits, 0 accelerated; avic_incomplete_ipi 0, msr 30, avic_unaccelerated_access 0, doorbells 0, kvm_apicv_accept_irq 30",
                "pingpong kernel/x2apic/icr apicv=host 2v spin x2AVIC: 30 ICR writes, 0 exits, 30 accelerated; avic_incomplete_ipi 0, msr 0, avic_unaccelerated_access 0, doorbells 0, kvm_apicv_accept_irq 0",
            ]
        );
    }
}
