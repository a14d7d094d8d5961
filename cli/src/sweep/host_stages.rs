//! A sweep with a host setting (`ipivmm sweep --host-param module.param=v1,v2`): the host setting as the
//! outermost dimension. Every value passes every guard before anything
//! runs ([`preflight`]); then, per value, the vendor module is switched, the
//! host re-probed and the whole rest of the plan run under it, and the
//! original parameters are put back before the next value.
//!
//! The original comes back at the end of each stage, on any error (the
//! [`Switched`] guard restores when dropped, unwinding included) and on
//! SIGINT/SIGTERM/SIGHUP: the signal only sets the cancel flag, the runs
//! stop, the stages left are skipped and the guard restores. modprobe runs
//! in its own process group, so a Ctrl-C at the terminal does not stop a
//! reload halfway. A second signal ends the process at once (see
//! `ipivmm_analysis::interrupt`) and a `kill -9` cannot be caught: the state file
//! then stays, and `ipivmm host --restore` puts the original back.
use super::execute::{run_all, SweepEvents, SweepOptions, SweepOutcome};
use super::{plan_stage, SweepSpec};
use ipivmm_analysis::results::SkippedMode;
use ipivmm_host::facts::{HostInfo, KvmBackend};
use ipivmm_host::module_switch::report::{applied_lines, restored_lines, verdict_line};
use ipivmm_host::module_switch::{read_state, ModuleSetting, ModuleTree, SwitchError};
use std::sync::atomic::Ordering;

/// A host-parameter sweep that passed its guards.
pub struct HostSweep {
    tree: ModuleTree,
    backend: KvmBackend,
}

/// Checks every value of `settings` against every guard (root, backend,
/// the parameter exists, no switch recorded, no VM or /dev/kvm user)
/// without changing anything. `Ok(None)` when there is no host parameter.
pub fn preflight(
    settings: &[ModuleSetting],
    host: Option<&HostInfo>,
) -> Result<Option<HostSweep>, String> {
    if settings.is_empty() {
        return Ok(None);
    }
    let Some(host) = host else {
        return Err("--host-param: cannot read the host's facts (/proc/cpuinfo, /sys/module): is /sys mounted?".into());
    };
    let tree = ModuleTree::system();
    for s in settings {
        tree.check(&host.backend, std::slice::from_ref(s))
            .map_err(|e| format!("--host-param {s}: {e}"))?;
    }
    Ok(Some(HostSweep {
        tree,
        backend: host.backend.clone(),
    }))
}

/// Runs the stages of `spec` in order, each under its host setting; once
/// `cancel` is set (the runs honour the same flag), the stages left are
/// skipped.
pub fn run_stages(
    spec: &SweepSpec,
    hs: &HostSweep,
    opts: &SweepOptions,
    events: &dyn SweepEvents,
) -> SweepOutcome {
    let mut out = SweepOutcome::default();
    for setting in &spec.host_params {
        let why_not = if opts.cancel.load(Ordering::SeqCst) {
            Some("not run: sweep cancelled")
        } else if !out.errors.is_empty() {
            Some("not run: an earlier host switch failed")
        } else {
            None
        };
        if let Some(reason) = why_not {
            not_run(spec, setting, reason, &mut out.skipped);
            continue;
        }
        if let Err(e) = run_stage(spec, hs, setting, opts, events, &mut out) {
            out.errors.push(format!("--host-param {setting}: {e}"));
        }
    }
    if let Ok(Some(state)) = read_state(&hs.tree.state_file) {
        out.errors.push(format!(
            "{} is not back at its original values (recorded in {}): run `ipivmm host --restore`",
            state.module,
            hs.tree.state_file.display()
        ));
    }
    out
}

/// One stage: switch, re-probe, plan and run under `setting`, restore.
fn run_stage(
    spec: &SweepSpec,
    hs: &HostSweep,
    setting: &ModuleSetting,
    opts: &SweepOptions,
    events: &dyn SweepEvents,
    out: &mut SweepOutcome,
) -> Result<(), SwitchError> {
    let mut guard = hs.tree.switch(&hs.backend, std::slice::from_ref(setting))?;
    let applied = guard.applied();
    say(&applied_lines(applied), events);
    for m in applied.mismatches() {
        events.host(&format!("ipivmm: warning: --host-param {setting}: {m}"));
    }
    // The verdicts and skip reasons as the reloaded module decides them.
    let host = ipivmm_host::facts::probe().ok();
    if let Some(h) = &host {
        say(&[format!("  {}", verdict_line(&h.verdicts))], events);
    }
    let (runs, skips) = plan_stage(spec, host.as_ref(), Some(setting));
    out.skipped.extend(skips);
    // The counting cost is measured once, on the sweep's first run.
    let pairs = match opts.journal.runs().is_empty() {
        true => opts.observer_pairs,
        false => 0,
    };
    run_all(&runs, &mut out.skipped, opts, pairs, events);
    let restored = guard.restore()?;
    if !restored.was_noop() {
        say(&restored_lines(&restored), events);
    }
    for m in &restored.mismatches {
        events.host(&format!("ipivmm: warning: restoring after {setting}: {m}"));
    }
    Ok(())
}

/// Records every combination of a stage that was not run: those the stage
/// would have run with `reason`, the others with their own skip reason.
fn not_run(
    spec: &SweepSpec,
    setting: &ModuleSetting,
    reason: &str,
    skipped: &mut Vec<SkippedMode>,
) {
    let (runs, skips) = plan_stage(spec, None, Some(setting));
    skipped.extend(skips);
    skipped.extend(runs.into_iter().map(|r| SkippedMode {
        id: Some(r.id()),
        mode: r.label,
        reason: reason.to_string(),
    }));
}

fn say(lines: &[String], events: &dyn SweepEvents) {
    for l in lines {
        events.host(&format!("ipivmm: host: {l}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::journal::Journal;
    use crate::sweep::execute::Quiet;
    use ipivmm_analysis::mode::{ApicMode, IpiPath, Irqchip, Workload};
    use ipivmm_host::module_switch::{parse_param_values, FakeModprobe};
    use std::path::Path;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use vmm_sys_util::tempdir::TempDir;

    /// A kvm_amd host whose "CPU" turns avic off (as under QEMU TCG).
    fn fake_amd(dir: &Path) -> (Arc<FakeModprobe>, HostSweep) {
        let sys = dir.join("sys/module");
        let fake = FakeModprobe::new(&sys)
            .with_module("kvm", &[("halt_poll_ns", "200000")])
            .unwrap()
            .with_module("kvm_amd", &[("avic", "N"), ("npt", "Y")])
            .unwrap()
            .with_dependency("kvm_amd", "kvm")
            .unwrap()
            .with_clamp("kvm_amd", "avic", "N");
        let fake = Arc::new(fake);
        std::fs::create_dir_all(dir.join("debug/kvm")).unwrap();
        let tree = ModuleTree {
            sys_module: sys,
            debugfs_kvm: dir.join("debug/kvm"),
            state_file: dir.join("run/module-switch.json"),
            euid: 0,
            runner: fake.clone(),
        };
        let hs = HostSweep {
            tree,
            backend: KvmBackend::KvmAmd,
        };
        (fake, hs)
    }

    fn opts(cancelled: bool) -> SweepOptions<'static> {
        let journal = Box::leak(Box::new(Journal::start(None, "sweep", 1 << 30)));
        SweepOptions {
            observer_pairs: 0,
            cancel: Arc::new(AtomicBool::new(cancelled)),
            repeats: ipivmm::experiment::rounds::Repeats::Fixed(1),
            journal,
        }
    }

    /// A plan every host skips (broadcast needs 2 vCPUs): no VM runs.
    fn spec(values: &str) -> SweepSpec {
        SweepSpec {
            irqchips: vec![Irqchip::Kernel],
            apics: vec![ApicMode::X2apic],
            ipis: vec![IpiPath::Icr],
            workloads: vec![Workload::Broadcast.into()],
            vcpus: vec![1],
            host_params: parse_param_values(values).unwrap(),
            ..Default::default()
        }
    }

    /// A plan that would run a VM on any KVM (only for stages that never
    /// start).
    fn runnable(values: &str) -> SweepSpec {
        SweepSpec {
            workloads: vec![Workload::Pingpong.into()],
            vcpus: vec![2],
            ..spec(values)
        }
    }

    #[test]
    fn each_value_is_switched_then_restored() {
        let dir = TempDir::new().unwrap();
        let (fake, hs) = fake_amd(dir.as_path());
        let out = run_stages(&spec("kvm_amd.npt=0,1"), &hs, &opts(false), &Quiet);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        assert_eq!(
            fake.calls(),
            [
                "modprobe -r kvm_amd",
                "modprobe kvm_amd npt=0",
                "modprobe -r kvm_amd",
                "modprobe kvm_amd avic=N npt=Y",
            ],
            "npt=1 is the original: nothing reloaded for it"
        );
        let modes: Vec<&str> = out.skipped.iter().map(|s| s.mode.as_str()).collect();
        assert_eq!(
            modes,
            [
                "broadcast 1v kernel/x2apic/icr kvm_amd.npt=0",
                "broadcast 1v kernel/x2apic/icr kvm_amd.npt=1"
            ]
        );
        assert!(!hs.tree.state_file.exists());
    }

    #[test]
    fn a_cancelled_sweep_switches_nothing() {
        let dir = TempDir::new().unwrap();
        let (fake, hs) = fake_amd(dir.as_path());
        let out = run_stages(&runnable("kvm_amd.avic=1,0"), &hs, &opts(true), &Quiet);
        assert!(fake.calls().is_empty() && out.errors.is_empty());
        assert_eq!(out.skipped.len(), 2);
        assert!(out
            .skipped
            .iter()
            .all(|s| s.reason == "not run: sweep cancelled"));
    }

    #[test]
    fn a_failed_switch_stops_the_stages_and_names_the_restore() {
        let dir = TempDir::new().unwrap();
        let (fake, hs) = fake_amd(dir.as_path());
        fake.fail_next_loads(2); // the switch and its rollback
        let out = run_stages(&runnable("kvm_amd.npt=0,1"), &hs, &opts(false), &Quiet);
        assert_eq!(out.errors.len(), 2, "{:?}", out.errors);
        assert!(
            out.errors[0].starts_with("--host-param kvm_amd.npt=0: "),
            "{:?}",
            out.errors
        );
        assert!(
            out.errors[1].contains("run `ipivmm host --restore`"),
            "{:?}",
            out.errors
        );
        let modes: Vec<&str> = out.skipped.iter().map(|s| s.mode.as_str()).collect();
        assert_eq!(modes, ["pingpong 2v kernel/x2apic/icr kvm_amd.npt=1"]);
        assert_eq!(
            out.skipped[0].reason,
            "not run: an earlier host switch failed"
        );
        // The state file kept the originals: the restore puts them back.
        hs.tree.restore().unwrap();
        assert_eq!(
            fake.calls().last().unwrap(),
            "modprobe kvm_amd avic=N npt=Y"
        );
    }

    #[test]
    fn preflight_refuses_before_anything_runs() {
        assert!(matches!(preflight(&[], None), Ok(None)));
        let s = parse_param_values("kvm_amd.avic=0,1").unwrap();
        let e = preflight(&s, None).err().unwrap();
        assert!(e.starts_with("--host-param: cannot read"), "{e}");
    }
}
