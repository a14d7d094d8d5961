//! The seed experiments as data: each preset is a question one of the
//! reports in `shared/seeds` asked, the sweep that re-creates it at this
//! host's scale, and, for every row, whether this host can answer it (and
//! why not: no AVIC, no IPIv, one socket, fewer CPUs than vCPUs). The CLI
//! (`sweep --preset`), `check` plans and the tests share it.
use super::topology::{self, CpuPlace};
use super::{PlannedRun, SweepSpec};
use ipivmm::analysis::mode::LinuxWorkload;
use ipivmm_analysis::mode::levers::{ExitControl, ExitControls};
use ipivmm_analysis::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, TargetWait, Workload};
use ipivmm_analysis::results::{PresetReport, PresetRow, SkippedMode};
use ipivmm_host::facts::{ApicvSupport, HostInfo};
use ipivmm_host::lab::Hardware;

/// A seed experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, strum::Display, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum Preset {
    /// AMD AVIC broadcast regression: all-but-self broadcast, xAPIC vs x2APIC, AVIC on vs inhibited, vCPUs 2..180 (the seed's count, or what KVM allows); with --kernel/--initrd the Linux guest's broadcast module and ebizzy-like allocation (linux:ipi-broadcast, linux:ebizzy).
    AvicBroadcast,
    /// Intel IPIv: 2-vCPU unicast ping-pong, spinning target, xAPIC and x2APIC, APICv on vs inhibited.
    IpivUnicast,
    /// Xen APICv topology: ping-pong with vCPUs close together vs spread apart, APICv on vs inhibited.
    ApicvTopology,
    /// Halt polling: x2APIC ping-pong to a halted target, --halt-poll-ns 0 vs the host's kvm.halt_poll_ns, with KVM's halt-polling counters per row.
    HaltPolling,
}

/// The workloads of `avic-broadcast` with a Linux guest: seed 000's
/// broadcast module and `ebizzy -M` (ipivmm's ebizzy-like allocation).
pub const AVIC_BROADCAST_LINUX: [LinuxWorkload; 2] =
    [LinuxWorkload::IpiBroadcast, LinuxWorkload::Ebizzy];

/// vCPUs of the seed's AVIC broadcast report.
pub const AVIC_BROADCAST_VCPUS: usize = 180;

/// What a preset needs to know of the host to plan and to judge its rows.
#[derive(Clone, Debug, Default)]
pub struct PresetHost {
    /// Host CPUs this process may run on.
    pub cpus: Vec<usize>,
    /// Where they sit (socket, core).
    pub places: Vec<CpuPlace>,
    /// KVM's vCPU limit.
    pub kvm_max_vcpus: usize,
    /// The exits KVM lets a VM turn off.
    pub exit_controls: ExitControls,
    /// The host facts (verdicts), when they could be read.
    pub facts: Option<HostInfo>,
}

impl PresetHost {
    /// This host, through `kvm_device`.
    pub fn probe(kvm_device: &std::path::Path, facts: Option<HostInfo>) -> Self {
        let cpus = ipivmm_analysis::mode::levers::allowed_cpus();
        let places = topology::read_places(std::path::Path::new("/sys/devices/system/cpu"), &cpus);
        let kvm = ipivmm::host::KvmInfo::open(kvm_device).ok();
        Self {
            kvm_max_vcpus: kvm.as_ref().map_or(2, |k| k.max_vcpus),
            exit_controls: kvm.map(|k| k.exit_controls).unwrap_or_default(),
            cpus,
            places,
            facts,
        }
    }

    fn verdict(
        &self,
        pick: impl Fn(&ipivmm_host::facts::ApicvVerdicts) -> &ApicvSupport,
    ) -> Result<(), String> {
        match self.facts.as_ref().map(|h| pick(&h.verdicts)) {
            Some(ApicvSupport::Available) => Ok(()),
            Some(ApicvSupport::Unavailable(why)) => Err(why.clone()),
            None => Err("the host facts could not be read".into()),
        }
    }

    fn sockets(&self) -> usize {
        let mut p: Vec<i64> = self.places.iter().map(|c| c.package).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    }
}

/// The host's `kvm.halt_poll_ns`, when the facts have it.
fn host_halt_poll_ns(host: &PresetHost) -> Option<u64> {
    let v = host
        .facts
        .as_ref()?
        .params
        .get("kvm")?
        .get("halt_poll_ns")?;
    v.trim().parse().ok()
}

/// What this host can and cannot say of halt polling. KVM's generic halt
/// path (kvm_vcpu_halt) runs on every backend, so the counters always
/// say whether KVM polled; a software KVM's latencies are not hardware's,
/// and the lab answers the question under kvm_amd.
fn halt_polling_caveats(host: &PresetHost) -> Vec<String> {
    let mut out = Vec::new();
    let backend = host.facts.as_ref().map(|f| &f.backend);
    let pvm = backend == Some(&ipivmm_host::facts::KvmBackend::KvmPvm);
    if pvm {
        out.push(
            "kvm_pvm (a software KVM): the rows say whether KVM polled (halt_attempted_poll, \
             halt_successful_poll) and what polling did to this host's round trip, not what it saves on hardware \
             (this preset on a hardware host)"
                .into(),
        );
    }
    let no_polling = host_halt_poll_ns(host) == Some(0);
    match host_halt_poll_ns(host) {
        Some(0) => out.push(
            "the host's kvm.halt_poll_ns is 0: both rows run without polling, so the question has no answer here \
             (set kvm.halt_poll_ns, or the lab)"
                .into(),
        ),
        Some(ns) => out.push(format!(
            "KVM polls a halted vCPU only once a halt shorter than {} µs (the host's kvm.halt_poll_ns {ns}) \
             has grown its window: each row says how many polls it attempted, and a lever that had nothing \
             to act on is said beside the figures",
            (ns + 500) / 1000
        )),
        None => {}
    }
    if pvm || no_polling {
        out.push(Hardware::HaltPolling.where_answered());
    }
    out
}

/// The placements of the topology preset: `close` and `spread`.
fn placements(host: &PresetHost) -> [(String, Vec<usize>); 2] {
    [
        (
            "close".to_string(),
            topology::close_together(&host.places, 2),
        ),
        (
            "spread".to_string(),
            topology::spread_apart(&host.places, 2),
        ),
    ]
}

fn cpu_list(v: &[usize]) -> String {
    v.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 4] = [
        Preset::AvicBroadcast,
        Preset::IpivUnicast,
        Preset::ApicvTopology,
        Preset::HaltPolling,
    ];

    /// The question the preset answers.
    pub fn question(self) -> &'static str {
        match self {
            Preset::AvicBroadcast => "does AVIC make all-but-self broadcast IPIs slower (xAPIC), and does x2APIC without AVIC match xAPIC without it?",
            Preset::IpivUnicast => "how much does IPI virtualization save per unicast IPI, in xAPIC and in x2APIC mode?",
            Preset::ApicvTopology => "does APICv make IPIs slower when the vCPUs are spread across sockets rather than close together?",
            Preset::HaltPolling => "how much of a wake-up IPI to a halted vCPU is KVM's halt polling, and did KVM poll at all?",
        }
    }

    /// What the question needs that a host may lack; where it is answered
    /// without it is [`Hardware::where_answered`].
    pub fn hardware(self) -> Hardware {
        match self {
            Preset::AvicBroadcast => Hardware::Avic,
            Preset::IpivUnicast => Hardware::Ipiv,
            Preset::ApicvTopology => Hardware::TwoSockets,
            Preset::HaltPolling => Hardware::HaltPolling,
        }
    }

    /// What the seed reported, with its direction.
    pub fn seed(self) -> &'static str {
        match self {
            Preset::AvicBroadcast => "seed 000 (AMD Rome, 180 vCPUs, kvm-hint-dedicated): all-but-self broadcasts took 19.1 s with AVIC vs 12.3 s without (xAPIC, +55%); x2APIC without AVIC 13.1 s",
            Preset::IpivUnicast => "seed 002 (Sapphire Rapids, kvm-unit-tests vmexit ipi, 2 vCPUs): IPIv cut cycles per IPI by 22% in xAPIC (6059 -> 4713) and 16% in x2APIC (4338 -> 3645)",
            Preset::ApicvTopology => "seed 003 (Xen, Xeon E7-4890 v2, 4 sockets): with APICv, 15 vCPUs spread over the sockets scored 2209 vs 989 close together; without APICv 1130 vs 978 (lower is better)",
            Preset::HaltPolling => "seed 002 (the IPIv series' review): adaptive halt polling moves kvm-unit-tests' vmexit ipi score, so its authors had the target idle-loop instead of hlt to take it out",
        }
    }

    /// Sets `spec` up for the preset at `host`'s scale; explicit flags are
    /// applied after it by the caller.
    pub fn apply(self, spec: &mut SweepSpec, host: &PresetHost) {
        spec.skip_duplicates = true;
        spec.irqchips = vec![Irqchip::Kernel];
        spec.ipis = vec![IpiPath::Icr];
        spec.apicv = vec![ApicvRequest::Host, ApicvRequest::Inhibit];
        match self {
            Preset::AvicBroadcast => {
                // Broadcast, xAPIC vs x2APIC, AVIC on vs off, dedicated
                // vCPUs (HLT exits off, realtime hint), one vCPU per host
                // CPU; the regression showed at 180 vCPUs: the N curve up
                // to there, or to what this KVM allows.
                // With a Linux guest (--kernel), the seed's own guest
                // workloads: its all-but-self broadcast module and the
                // ebizzy-like allocation (ipivmm's initramfs has both).
                spec.workloads = match spec.linux {
                    Some(_) => AVIC_BROADCAST_LINUX.map(Into::into).to_vec(),
                    None => vec![Workload::Broadcast.into()],
                };
                let top = AVIC_BROADCAST_VCPUS.min(host.kvm_max_vcpus).max(2);
                spec.vcpus = super::vcpus::range(2, top).unwrap_or_else(|_| vec![2]);
                spec.base.levers.realtime_hint = true;
                // HLT exits off, unless vCPUs outnumber host CPUs (a vCPU
                // halted in the guest would then hold its CPU).
                if top <= host.cpus.len() && host.exit_controls.contains(ExitControl::Hlt) {
                    spec.base.levers.disabled_exits = [ExitControl::Hlt].into_iter().collect();
                }
            }
            Preset::IpivUnicast => {
                spec.workloads = vec![Workload::Pingpong.into()];
                spec.vcpus = vec![2];
                spec.base.target_wait = TargetWait::Spin;
            }
            Preset::ApicvTopology => {
                spec.workloads = vec![Workload::Pingpong.into()];
                spec.apics = vec![ApicMode::X2apic];
                spec.vcpus = vec![2];
                spec.placements = placements(host).to_vec();
            }
            Preset::HaltPolling => {
                // Every IPI wakes a halted target; the host's polling
                // limit against none, the VM's own (KVM_CAP_HALT_POLL).
                spec.workloads = vec![Workload::Pingpong.into()];
                spec.apics = vec![ApicMode::X2apic];
                spec.apicv = vec![ApicvRequest::Host];
                spec.vcpus = vec![2];
                spec.base.target_wait = TargetWait::Halt;
                spec.halt_polls = vec![None, Some(0)];
            }
        }
    }

    /// Why this host cannot answer the question at all, if it cannot.
    fn host_caveats(self, host: &PresetHost) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Preset::AvicBroadcast => {
                if let Err(why) = host.verdict(|v| &v.avic) {
                    out.push(format!("no AVIC here ({why}): the AVIC-on rows cannot run, so the AVIC question has no answer on this host"));
                    out.push(self.hardware().where_answered());
                }
                let top = AVIC_BROADCAST_VCPUS.min(host.kvm_max_vcpus).max(2);
                if top > host.cpus.len() {
                    out.push(format!(
                        "{} host CPUs for up to {top} vCPUs: rows above {} vCPUs are oversubscribed, not the seed's dedicated vCPUs",
                        host.cpus.len(),
                        host.cpus.len()
                    ));
                }
            }
            Preset::IpivUnicast => {
                if let Err(why) = host.verdict(|v| &v.ipiv) {
                    out.push(format!(
                        "no IPI virtualization here ({why}): the rows measure IPIs without it only"
                    ));
                    out.push(self.hardware().where_answered());
                }
            }
            Preset::ApicvTopology => {
                let [(_, close), (_, spread)] = placements(host);
                if close == spread {
                    out.push(format!(
                        "close and spread are the same CPUs here ({}): {} CPU(s) on {} socket(s), so the two placements run the same VM",
                        cpu_list(&close),
                        host.cpus.len(),
                        host.sockets()
                    ));
                } else if host.sockets() < 2 {
                    out.push(format!(
                        "one socket: spread ({}) is across cores, not sockets as in the seed",
                        cpu_list(&spread)
                    ));
                }
                if host.sockets() < 2 {
                    out.push(self.hardware().where_answered());
                }
                if host.verdict(|v| &v.apicv).is_err() && host.verdict(|v| &v.avic).is_err() {
                    out.push(
                        "no APICv or AVIC here: only the without-APICv half of the question".into(),
                    );
                    out.push(Hardware::ApicvOrAvic.where_answered());
                }
            }
            Preset::HaltPolling => out.extend(halt_polling_caveats(host)),
        }
        out
    }

    /// Why the row of `run` cannot answer the question on `host` (None: it
    /// can).
    fn row_caveat(self, run: &PlannedRun, host: &PresetHost) -> Option<String> {
        let c = &run.config;
        match self {
            Preset::AvicBroadcast => {
                if c.vcpus > host.cpus.len() {
                    return Some(format!(
                        "{} vCPUs on {} host CPUs: oversubscribed",
                        c.vcpus,
                        host.cpus.len()
                    ));
                }
                if c.apicv == ApicvRequest::Host {
                    if let Err(why) = host.verdict(|v| &v.avic) {
                        return Some(format!("runs without AVIC: {why}"));
                    }
                }
                None
            }
            Preset::IpivUnicast => {
                if c.apicv == ApicvRequest::Host {
                    if let Err(why) = host.verdict(|v| &v.ipiv) {
                        return Some(format!("runs without IPIv: {why}"));
                    }
                }
                None
            }
            Preset::ApicvTopology => {
                let [(_, close), (_, spread)] = placements(host);
                if close == spread {
                    return Some(format!(
                        "close and spread are the same CPUs ({})",
                        cpu_list(&close)
                    ));
                }
                None
            }
            Preset::HaltPolling => match (c.levers.halt_poll_ns, host_halt_poll_ns(host)) {
                (None, Some(0)) => Some(
                    "the host's kvm.halt_poll_ns is 0: this row polls no more than poll:0".into(),
                ),
                _ => None,
            },
        }
    }

    /// What the preset answers on `host` for the planned `runs` and
    /// `skipped` rows: the question, the seed, the host's caveats and one
    /// line per row (runs first, then skips with their reasons).
    pub fn report(
        self,
        host: &PresetHost,
        runs: &[PlannedRun],
        skipped: &[SkippedMode],
    ) -> PresetReport {
        let mut rows: Vec<PresetRow> = runs
            .iter()
            .map(|r| PresetRow {
                row: r.label.clone(),
                runs: true,
                caveat: self.row_caveat(r, host),
            })
            .collect();
        rows.extend(skipped.iter().map(|s| PresetRow {
            row: s.mode.clone(),
            runs: false,
            caveat: Some(s.reason.clone()),
        }));
        PresetReport {
            preset: self.to_string(),
            question: self.question().to_string(),
            seed: self.seed().to_string(),
            host: self.host_caveats(host),
            rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_host::facts::KvmBackend;

    fn facts(backend: KvmBackend, apicv: bool) -> HostInfo {
        HostInfo::synthetic(backend, apicv)
    }

    fn two_cpus_one_socket(apicv: bool) -> PresetHost {
        PresetHost {
            cpus: vec![0, 1],
            places: vec![
                CpuPlace {
                    cpu: 0,
                    package: 0,
                    core: 0,
                },
                CpuPlace {
                    cpu: 1,
                    package: 0,
                    core: 1,
                },
            ],
            kvm_max_vcpus: 1024,
            exit_controls: ExitControls::NONE,
            facts: Some(facts(KvmBackend::KvmPvm, apicv)),
        }
    }

    /// Issue 21: on 2 CPUs of one socket, close and spread are the same
    /// CPUs, and the preset says so, up front and per row; the rows are
    /// labelled close and spread.
    #[test]
    fn topology_on_two_cpus_says_close_and_spread_are_the_same() {
        let host = two_cpus_one_socket(false);
        let mut spec = SweepSpec::default();
        Preset::ApicvTopology.apply(&mut spec, &host);
        let (runs, skipped) = super::super::plan(&spec, host.facts.as_ref());
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pingpong 2v kernel/x2apic/icr close",
                "pingpong 2v kernel/x2apic/icr spread"
            ]
        );
        assert_eq!(runs[0].placement.as_deref(), Some("close"));
        let report = Preset::ApicvTopology.report(&host, &runs, &skipped);
        assert!(
            report.host[0].starts_with("close and spread are the same CPUs here (0,1)"),
            "{:?}",
            report.host
        );
        assert!(report
            .rows
            .iter()
            .filter(|r| r.runs)
            .all(|r| r.caveat.as_deref() == Some("close and spread are the same CPUs (0,1)")));
        assert!(report.question.contains("spread across sockets"));
        for h in [Hardware::TwoSockets, Hardware::ApicvOrAvic] {
            assert!(
                report.host.contains(&h.where_answered()),
                "{:?}",
                report.host
            );
        }
    }

    /// Issue 50: on kvm_pvm (2 CPUs, one socket, no APICv/AVIC/IPIv) every
    /// preset's dry run says where its question is answered, in one line of
    /// its own that names the lab command.
    #[test]
    fn every_preset_names_where_its_question_is_answered() {
        let host = two_cpus_one_socket(false);
        for p in Preset::ALL {
            let r = p.report(&host, &[], &[]);
            let named: Vec<&String> = r
                .host
                .iter()
                .filter(|l| {
                    Hardware::ALL
                        .iter()
                        .any(|h| **l == h.where_answered() && h.lab_command().is_some())
                })
                .collect();
            assert!(!named.is_empty(), "{p}: {:?}", r.host);
            assert!(named.iter().all(|l| l.len() <= 105), "{named:?}");
        }
    }

    #[test]
    fn ipiv_without_ipiv_says_what_the_rows_measure() {
        let host = two_cpus_one_socket(false);
        let mut spec = SweepSpec::default();
        Preset::IpivUnicast.apply(&mut spec, &host);
        let (runs, skipped) = super::super::plan(&spec, host.facts.as_ref());
        let r = Preset::IpivUnicast.report(&host, &runs, &skipped);
        assert!(
            r.host[0].starts_with("no IPI virtualization here"),
            "{:?}",
            r.host
        );
        assert_eq!(r.host[1], Hardware::Ipiv.where_answered());
        assert!(r.rows.iter().filter(|x| x.runs).all(|x| x
            .caveat
            .as_deref()
            .is_some_and(|c| c.starts_with("runs without IPIv"))));
        assert!(
            r.rows.iter().any(|x| !x.runs),
            "the inhibit rows are skipped as duplicates"
        );
        // Where IPIv is available the host rows answer.
        let host = two_cpus_one_socket(true);
        let r = Preset::IpivUnicast.report(&host, &runs, &[]);
        assert!(
            r.host.is_empty() && r.rows.iter().all(|x| x.caveat.is_none()),
            "{r:?}"
        );
    }

    /// Issue 50: the halt-polling question as a preset: a halted target,
    /// the host's limit against none (two rows, labelled by the limit),
    /// and on this host (kvm_pvm) the dry run names the lab command that
    /// answers it under kvm_amd, and the window polling starts in.
    #[test]
    fn halt_polling_compares_the_hosts_limit_with_none_and_names_the_lab() {
        let mut host = two_cpus_one_socket(false);
        if let Some(f) = host.facts.as_mut() {
            f.params
                .entry("kvm".into())
                .or_default()
                .insert("halt_poll_ns".into(), "200000".into());
        }
        let mut spec = SweepSpec::default();
        Preset::HaltPolling.apply(&mut spec, &host);
        let (runs, skipped) = super::super::plan(&spec, host.facts.as_ref());
        let rows: Vec<(&str, Option<u32>, TargetWait)> = runs
            .iter()
            .map(|r| {
                (
                    r.label.as_str(),
                    r.config.levers.halt_poll_ns,
                    r.config.target_wait,
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                (
                    "pingpong 2v kernel/x2apic/icr poll:host",
                    None,
                    TargetWait::Halt
                ),
                (
                    "pingpong 2v kernel/x2apic/icr poll:0",
                    Some(0),
                    TargetWait::Halt
                ),
            ]
        );
        assert!(skipped.is_empty(), "{skipped:?}");
        let r = Preset::HaltPolling.report(&host, &runs, &skipped);
        assert!(
            r.host[0].starts_with("kvm_pvm (a software KVM)"),
            "{:?}",
            r.host
        );
        assert!(
            r.host[1].contains("only once a halt shorter than 200 µs"),
            "{:?}",
            r.host
        );
        assert_eq!(
            r.host[2],
            "halt polling in the lab (counts, not timings): cargo xtask lab avic --parts halt-polling"
        );
        assert!(r.rows.iter().all(|x| x.runs && x.caveat.is_none()), "{r:?}");
        // A host that polls never: both rows run without polling.
        if let Some(f) = host.facts.as_mut() {
            f.params
                .entry("kvm".into())
                .or_default()
                .insert("halt_poll_ns".into(), "0".into());
        }
        let r = Preset::HaltPolling.report(&host, &runs, &skipped);
        assert!(
            r.host[1].starts_with("the host's kvm.halt_poll_ns is 0"),
            "{:?}",
            r.host
        );
        assert_eq!(r.host[2], Hardware::HaltPolling.where_answered());
        assert_eq!(
            r.rows[0].caveat.as_deref(),
            Some("the host's kvm.halt_poll_ns is 0: this row polls no more than poll:0")
        );
        assert_eq!(r.rows[1].caveat, None);
    }

    #[test]
    fn avic_broadcast_scales_to_the_seed_or_what_kvm_allows() {
        let mut host = two_cpus_one_socket(false);
        host.kvm_max_vcpus = 64;
        let mut spec = SweepSpec::default();
        Preset::AvicBroadcast.apply(&mut spec, &host);
        assert_eq!(spec.vcpus, [2, 4, 8, 16, 32, 64]);
        assert!(
            spec.base.levers.disabled_exits.is_empty(),
            "64 vCPUs on 2 CPUs keep HLT exits"
        );
        let r = Preset::AvicBroadcast.report(&host, &[], &[]);
        assert_eq!(r.host.len(), 3, "{:?}", r.host);
        assert_eq!(r.host[1], Hardware::Avic.where_answered());
        assert!(r.host[2].contains("oversubscribed"));
    }
}
