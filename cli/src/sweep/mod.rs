//! A sweep: the cross product of modes, workloads and vCPU counts, as data.
//! Planning is pure (unit-tested); the `sweep` command runs the plan. What
//! can run is decided by [`mode::Mode::check`], the same check `run` applies.
//!
//! A host setting (`--host-param kvm_amd.avic=0,1`) is the outermost
//! dimension: each value is a stage ([`stages`]) that the command switches
//! the vendor module to, re-probes the host, and plans with [`plan_stage`]
//! against the host as it is then.
pub mod execute;
pub mod host_stages;
pub mod planned;
pub mod presets;
pub mod topology;
pub mod vcpus;

pub use crate::cli::linux_args::WorkloadArg;
use ipivmm::config::{PayloadSource, VmConfig};
use ipivmm::linux::LinuxGuest;
use ipivmm_analysis::mode::{self, ApicMode, ApicvRequest, IpiPath, Irqchip, Workload};
use ipivmm_analysis::results::SkippedMode;
use ipivmm_host::facts::HostInfo;
use ipivmm_host::module_switch::ModuleSetting;

use execute::{run_all, SweepEvents, SweepOptions, SweepOutcome};
use host_stages::{run_stages, HostSweep};

/// The dimensions a sweep crosses.
#[derive(Clone, Debug)]
pub struct SweepSpec {
    /// Interrupt controllers.
    pub irqchips: Vec<Irqchip>,
    /// APIC modes.
    pub apics: Vec<ApicMode>,
    /// IPI paths.
    pub ipis: Vec<IpiPath>,
    /// APICv requests.
    pub apicv: Vec<ApicvRequest>,
    /// Workloads: the built-in payload's, and `linux:NAME` rows, which
    /// boot [`SweepSpec::linux`] (none without it: `sweep` refuses them).
    pub workloads: Vec<WorkloadArg>,
    /// The Linux guest of the `linux:NAME` rows (kernel, initrd, command
    /// line; each row sets its workload), booted with
    /// [`ipivmm::linux::LinuxGuest::DEFAULT_MEMORY_BYTES`] of RAM.
    pub linux: Option<LinuxGuest>,
    /// vCPU counts.
    pub vcpus: Vec<usize>,
    /// vCPU placements: (label, CPU list); one empty entry = not pinned.
    pub placements: Vec<(String, Vec<usize>)>,
    /// Skip combinations that would run the same VM as another on this host
    /// ([`mode::Mode::duplicate_of`]), e.g. `apicv=inhibit` without APICv.
    pub skip_duplicates: bool,
    /// Halt-polling limits to sweep (`None`: the host's
    /// `kvm.halt_poll_ns`; `Some(ns)`: the VM's, KVM_CAP_HALT_POLL), each
    /// row labelled `poll:NS` or `poll:host`; empty = the base's one
    /// setting, unlabelled.
    pub halt_polls: Vec<Option<u32>>,
    /// Host settings to sweep, one value each of one vendor module
    /// parameter (`module_switch::parse_param_values`); empty = the host as
    /// it is.
    pub host_params: Vec<ModuleSetting>,
    /// Host CPUs the runs may use (0: unknown, nothing is checked): rows
    /// with more spinning vCPUs are skipped ([`capacity_reason`]).
    pub host_cpus: usize,
    /// Run rows this host cannot answer anyway (`--force`).
    pub force: bool,
    /// Everything else (iterations, levers...).
    pub base: VmConfig,
}

impl Default for SweepSpec {
    fn default() -> Self {
        Self {
            irqchips: Irqchip::ALL.to_vec(),
            apics: ApicMode::ALL.to_vec(),
            ipis: IpiPath::ALL.to_vec(),
            apicv: vec![ApicvRequest::Host],
            workloads: Workload::ALL
                .iter()
                .copied()
                .map(WorkloadArg::Payload)
                .collect(),
            linux: None,
            vcpus: vec![2],
            placements: vec![(String::new(), Vec::new())],
            halt_polls: Vec::new(),
            skip_duplicates: false,
            host_params: Vec::new(),
            host_cpus: 0,
            force: false,
            base: VmConfig {
                iterations: 100,
                warmup: 10,
                ..Default::default()
            },
        }
    }
}

/// One run of a sweep's plan: the engine's [`ipivmm::experiment::rounds::Planned`].
pub type PlannedRun = ipivmm::experiment::rounds::Planned;

/// Label of one combination: the workload, the vCPU count, the mode's label
/// and the placement's name.
pub fn label(c: &VmConfig, place: &str) -> String {
    stage_label(c, place, None)
}

/// [`label`] followed by the host setting of the stage, if any, e.g.
/// `pingpong 2v kernel/x2apic/icr kvm_amd.avic=1`.
pub fn stage_label(c: &VmConfig, place: &str, setting: Option<&ModuleSetting>) -> String {
    let mut l = format!("{} {}v {}", workload_label(c), c.vcpus, c.mode().label());
    for extra in [
        place.to_string(),
        setting.map(|s| s.to_string()).unwrap_or_default(),
    ] {
        if !extra.is_empty() {
            l.push(' ');
            l.push_str(&extra);
        }
    }
    l
}

/// What a row runs: the built-in workload's name, or `linux:NAME`.
pub fn workload_label(c: &VmConfig) -> String {
    c.payload
        .linux()
        .map_or_else(|| c.workload.to_string(), LinuxGuest::label)
}

/// The stages of `spec`: one per host setting, in order, or a single
/// `None` (the host as it is) when it sweeps no host parameter.
pub fn stages(spec: &SweepSpec) -> Vec<Option<ModuleSetting>> {
    if spec.host_params.is_empty() {
        vec![None]
    } else {
        spec.host_params.iter().cloned().map(Some).collect()
    }
}

/// Why a combination is not run on `host`, if it is not: it cannot run
/// ([`mode::Mode::check`]), or it duplicates another (when asked to skip those).
pub fn skip_reason(c: &VmConfig, host: Option<&HostInfo>, skip_duplicates: bool) -> Option<String> {
    if let Err(e) = c.xapic_limit() {
        return Some(e.to_string());
    }
    if let Some(g) = c.payload.linux() {
        // As `run` refuses it: a mode Linux cannot boot in, or a host
        // whose KVM boots no Linux (kvm_pvm: the reason names the lab).
        let software = host.is_some_and(|h| h.backend == ipivmm_host::facts::KvmBackend::KvmPvm);
        let refused = g
            .check_mode(c.irqchip, c.vcpus)
            .and_then(|()| g.check_backend(software));
        if let Err(e) = refused {
            return Some(e.to_string());
        }
    }
    match c.check_mode(host) {
        Err(e) => Some(e.to_string()),
        Ok(plan) if skip_duplicates || !c.irqchip.lapic_in_kernel() => c.mode().duplicate_of(&plan),
        Ok(_) => None,
    }
}

/// Why a row cannot give an answer on `host_cpus` host CPUs (0: unknown),
/// if it cannot: more spinning vCPUs than CPUs. Every vCPU of a spinning
/// target's run busy-waits (the sender for acks, the targets for IPIs), so
/// each IPI waits for its target's next time slice and the run ends at its
/// watchdog rather than with a measurement (this 2-CPU host: every
/// broadcast row from 4 spinning vCPUs up timed out at 60 s).
pub fn capacity_reason(c: &VmConfig, host_cpus: usize) -> Option<String> {
    (host_cpus > 0 && c.target_wait == mode::TargetWait::Spin && c.vcpus > host_cpus).then(|| {
        format!(
            "{} spinning vCPUs on {host_cpus} host CPUs: each IPI waits for its target's time slice, so the run would time out, not measure (use --target halt, at most {host_cpus} vCPUs, or --force to run it)",
            c.vcpus
        )
    })
}

/// The label of a swept halt-polling limit: `poll:0`, `poll:host`.
pub fn poll_label(limit: Option<u32>) -> String {
    match limit {
        Some(ns) => format!("poll:{ns}"),
        None => "poll:host".into(),
    }
}

/// Every configuration of `spec`, workloads outermost so each workload's
/// modes run side by side, then vCPU counts, then the mode parts, then the
/// halt-polling limits; each with its placement's name and the label of
/// its swept limit (None: not swept).
fn configs(spec: &SweepSpec) -> Vec<(String, VmConfig, Option<String>)> {
    let polls: Vec<(Option<u32>, Option<String>)> = match spec.halt_polls.is_empty() {
        true => vec![(spec.base.levers.halt_poll_ns, None)],
        false => spec
            .halt_polls
            .iter()
            .map(|&p| (p, Some(poll_label(p))))
            .collect(),
    };
    let mut out = Vec::new();
    for &w in &spec.workloads {
        // A Linux row boots the sweep's guest with its workload, in the
        // Linux guest's RAM; without a guest it has no row (`sweep`
        // refuses a linux:NAME workload without --kernel).
        let (workload, payload, memory) = match (w, &spec.linux) {
            (WorkloadArg::Payload(w), _) => (w, spec.base.payload.clone(), 0),
            (WorkloadArg::Linux(lw), Some(g)) => (
                spec.base.workload,
                PayloadSource::Linux(LinuxGuest {
                    workload: Some(lw),
                    ..g.clone()
                }),
                ipivmm::linux::LinuxGuest::DEFAULT_MEMORY_BYTES,
            ),
            (WorkloadArg::Linux(_), None) => continue,
        };
        for &vcpus in &spec.vcpus {
            for &irqchip in &spec.irqchips {
                for &apic in &spec.apics {
                    for &ipi in &spec.ipis {
                        for &apicv in &spec.apicv {
                            for (place, pin) in &spec.placements {
                                for (halt_poll_ns, poll) in &polls {
                                    let config = VmConfig {
                                        irqchip,
                                        apic,
                                        ipi,
                                        apicv,
                                        workload,
                                        vcpus,
                                        levers: ipivmm_analysis::mode::Levers {
                                            pin: pin.clone(),
                                            halt_poll_ns: *halt_poll_ns,
                                            ..spec.base.levers.clone()
                                        },
                                        memory_bytes: spec
                                            .base
                                            .memory_bytes
                                            .max(ipivmm::VmConfig::default_memory_bytes(vcpus))
                                            .max(memory),
                                        payload: payload.clone(),
                                        ..spec.base.clone()
                                    };
                                    out.push((place.clone(), config, poll.clone()));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Expand `spec` into runs and skips on `host` (the host as it is: no
/// host setting in the labels).
pub fn plan(spec: &SweepSpec, host: Option<&HostInfo>) -> (Vec<PlannedRun>, Vec<SkippedMode>) {
    plan_stage(spec, host, None)
}

/// Expand `spec` into the runs and skips of one stage: under `setting`
/// (labelled with it), on `host` as probed after the switch.
pub fn plan_stage(
    spec: &SweepSpec,
    host: Option<&HostInfo>,
    setting: Option<&ModuleSetting>,
) -> (Vec<PlannedRun>, Vec<SkippedMode>) {
    let (mut runs, mut skips) = (Vec::new(), Vec::new());
    let host_param = setting.map(|s| s.to_string());
    for (place, config, poll) in configs(spec) {
        let mut label = stage_label(&config, &place, setting);
        if let Some(p) = poll {
            label.push(' ');
            label.push_str(&p);
        }
        let capacity = || match spec.force {
            true => None,
            false => capacity_reason(&config, spec.host_cpus),
        };
        match skip_reason(&config, host, spec.skip_duplicates).or_else(capacity) {
            Some(reason) => skips.push(SkippedMode {
                id: Some(config.config_id(
                    (!place.is_empty()).then(|| place.clone()),
                    host_param.clone(),
                )),
                mode: label,
                reason,
            }),
            None => runs.push(PlannedRun {
                label,
                config,
                host_param: host_param.clone(),
                placement: (!place.is_empty()).then(|| place.clone()),
            }),
        }
    }
    (runs, skips)
}

/// Plans `spec` on `host` and runs it: under each host setting in turn
/// when `host_sweep` (from [`host_stages::preflight`]) is given.
pub fn execute(
    spec: &SweepSpec,
    host: Option<&HostInfo>,
    host_sweep: Option<&HostSweep>,
    opts: &SweepOptions,
    events: &dyn SweepEvents,
) -> SweepOutcome {
    match host_sweep {
        Some(hs) => run_stages(spec, hs, opts, events),
        None => {
            let (runs, mut skipped) = plan(spec, host);
            run_all(&runs, &mut skipped, opts, opts.observer_pairs, events);
            SweepOutcome {
                skipped,
                errors: Vec::new(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm_host::facts::KvmBackend;

    /// The shared fixture: a host of `backend` without APICv/AVIC/IPIv.
    fn host(backend: KvmBackend) -> HostInfo {
        HostInfo::synthetic(backend, false)
    }

    #[test]
    fn default_sweep_skips_pv_here_with_reasons() {
        let (runs, skips) = plan(&SweepSpec::default(), Some(&host(KvmBackend::KvmPvm)));
        // 7 workloads x 3 irqchips x 2 APIC modes run with ICR writes...
        assert_eq!(runs.len(), 7 * 3 * 2);
        assert!(runs.iter().all(|r| r.config.ipi == IpiPath::Icr));
        // ...and every PV combination is skipped, for the right reason.
        assert_eq!(skips.len(), 7 * 3 * 2);
        for s in &skips {
            let user = s.mode.contains("user/");
            let why = if user { "LAPIC in KVM" } else { "kvm_pvm" };
            assert!(s.reason.contains(why), "{s:?}");
        }
        // Workloads stay together.
        assert!(runs[..6]
            .iter()
            .all(|r| r.config.workload == Workload::Pingpong));
        assert_eq!(runs[0].label, "pingpong 2v kernel/xapic/icr");
    }

    #[test]
    fn too_few_vcpus_and_duplicates_are_skipped() {
        let spec = SweepSpec {
            irqchips: vec![Irqchip::User, Irqchip::Kernel],
            apics: vec![ApicMode::X2apic],
            ipis: vec![IpiPath::Icr],
            apicv: vec![ApicvRequest::Host, ApicvRequest::Inhibit],
            workloads: vec![Workload::SelfIpi.into(), Workload::Broadcast.into()],
            vcpus: vec![1],
            ..Default::default()
        };
        let amd = host(KvmBackend::KvmAmd);
        let (runs, skips) = plan(&spec, Some(&amd));
        // self-ipi: user/host, kernel/host and kernel/inhibit (the lever is
        // pulled even without AVIC); user/inhibit duplicates user/host.
        assert_eq!(runs.len(), 3, "{runs:?}");
        assert!(skips.iter().any(|s| s.reason.contains("already inhibited")));
        assert!(skips
            .iter()
            .any(|s| s.reason.contains("broadcast needs at least 2 vCPUs")));
        // Presets also drop rows this host cannot tell apart.
        let dedup = SweepSpec {
            skip_duplicates: true,
            ..spec
        };
        let (runs, skips) = plan(&dedup, Some(&amd));
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(skips.iter().any(|s| s
            .reason
            .contains("identical to the apicv=host row on this host")));
    }

    #[test]
    fn more_spinning_vcpus_than_cpus_are_skipped_unless_forced() {
        let spec = SweepSpec {
            irqchips: vec![Irqchip::Kernel],
            apics: vec![ApicMode::X2apic],
            ipis: vec![IpiPath::Icr],
            workloads: vec![Workload::Broadcast.into()],
            vcpus: vec![2, 4, 8],
            host_cpus: 2,
            ..Default::default()
        };
        assert_eq!(spec.base.target_wait, mode::TargetWait::Spin);
        let (runs, skips) = plan(&spec, None);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].config.vcpus, 2);
        let skipped: Vec<&str> = skips.iter().map(|s| s.mode.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "broadcast 4v kernel/x2apic/icr",
                "broadcast 8v kernel/x2apic/icr"
            ]
        );
        assert!(
            skips[0]
                .reason
                .starts_with("4 spinning vCPUs on 2 host CPUs")
                && skips[0].reason.contains("--force"),
            "{}",
            skips[0].reason
        );
        // Halted targets do not spin; --force runs every row.
        let mut halted = spec.clone();
        halted.base.target_wait = mode::TargetWait::Halt;
        assert_eq!(plan(&halted, None).0.len(), 3);
        let forced = SweepSpec {
            force: true,
            ..spec.clone()
        };
        assert_eq!(plan(&forced, None).0.len(), 3);
        // Unknown host CPUs: nothing to check.
        let unknown = SweepSpec {
            host_cpus: 0,
            ..spec
        };
        assert_eq!(plan(&unknown, None).0.len(), 3);
    }

    /// Issue 49: a Linux workload is a row like a payload's: it boots the
    /// sweep's guest with its workload in the Linux guest's RAM, labelled
    /// `linux:NAME`; where Linux cannot run (kvm_pvm, ipivmm's own LAPIC)
    /// it is a skip naming why (and for kvm_pvm, the lab command).
    #[test]
    fn linux_workloads_are_rows_that_boot_the_sweeps_guest() {
        use ipivmm::analysis::mode::LinuxWorkload;
        let guest = LinuxGuest {
            initrd: Some("/tmp/initrd".into()),
            ..LinuxGuest::new("/boot/vmlinuz")
        };
        let spec = SweepSpec {
            irqchips: vec![Irqchip::Kernel, Irqchip::User],
            apics: vec![ApicMode::Xapic, ApicMode::X2apic],
            ipis: vec![IpiPath::Icr],
            workloads: vec![LinuxWorkload::IpiBroadcast.into()],
            linux: Some(guest.clone()),
            ..Default::default()
        };
        let (runs, skips) = plan(&spec, Some(&host(KvmBackend::KvmAmd)));
        let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "linux:ipi-broadcast 2v kernel/xapic/icr",
                "linux:ipi-broadcast 2v kernel/x2apic/icr"
            ]
        );
        for r in &runs {
            let g = r.config.payload.linux().expect("a Linux row");
            assert_eq!(g.workload, Some(LinuxWorkload::IpiBroadcast));
            assert_eq!(
                (g.kernel.as_path(), g.initrd.as_ref()),
                (guest.kernel.as_path(), guest.initrd.as_ref())
            );
            assert_eq!(
                r.config.memory_bytes,
                ipivmm::linux::LinuxGuest::DEFAULT_MEMORY_BYTES
            );
        }
        assert_eq!(skips.len(), 2, "{skips:?}");
        assert!(
            skips
                .iter()
                .all(|s| s.reason.contains("use --irqchip kernel or split")),
            "{skips:?}"
        );
        // kvm_pvm boots no Linux: every row a skip naming the lab.
        let (runs, skips) = plan(&spec, Some(&host(KvmBackend::KvmPvm)));
        assert!(runs.is_empty(), "{runs:?}");
        assert!(skips
            .iter()
            .filter(|s| s.mode.contains("kernel/"))
            .all(|s| s.reason.contains("kvm_pvm") && s.reason.contains("cargo xtask lab linux")));
        // Without a guest a Linux workload has no row (`sweep` refuses it).
        let none = SweepSpec {
            linux: None,
            ..spec
        };
        assert_eq!(plan(&none, None).0.len(), 0);
    }

    #[test]
    fn vcpu_counts_are_a_dimension() {
        let spec = SweepSpec {
            irqchips: vec![Irqchip::Kernel],
            apics: vec![ApicMode::X2apic],
            ipis: vec![IpiPath::Icr],
            workloads: vec![Workload::Broadcast.into()],
            vcpus: vec![2, 4, 8],
            ..Default::default()
        };
        let (runs, _) = plan(&spec, None);
        let counts: Vec<usize> = runs.iter().map(|r| r.config.vcpus).collect();
        assert_eq!(counts, [2, 4, 8]);
        assert_eq!(runs[2].label, "broadcast 8v kernel/x2apic/icr");
    }

    #[test]
    fn host_params_are_the_outermost_dimension() {
        let spec = SweepSpec {
            irqchips: vec![Irqchip::Kernel],
            apics: vec![ApicMode::X2apic],
            ipis: vec![IpiPath::Icr, IpiPath::Pv],
            workloads: vec![Workload::Pingpong.into()],
            host_params: ipivmm_host::module_switch::parse_param_values("kvm_amd.avic=0,1")
                .unwrap(),
            ..Default::default()
        };
        let all = stages(&spec);
        let names: Vec<String> = all.iter().flatten().map(|s| s.to_string()).collect();
        assert_eq!(names, ["kvm_amd.avic=0", "kvm_amd.avic=1"]);
        let pvm = host(KvmBackend::KvmPvm);
        let (runs, skips) = plan_stage(&spec, Some(&pvm), all[1].as_ref());
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(
            runs[0].label,
            "pingpong 2v kernel/x2apic/icr kvm_amd.avic=1"
        );
        assert_eq!(runs[0].host_param.as_deref(), Some("kvm_amd.avic=1"));
        assert_eq!(skips[0].mode, "pingpong 2v kernel/x2apic/pv kvm_amd.avic=1");
        // Without host parameters: one stage, the host as it is.
        let plain = SweepSpec {
            host_params: Vec::new(),
            ..spec
        };
        assert_eq!(stages(&plain), [None]);
        let (runs, _) = plan(&plain, Some(&pvm));
        assert_eq!(runs[0].label, "pingpong 2v kernel/x2apic/icr");
        assert_eq!(runs[0].host_param, None);
    }
}
