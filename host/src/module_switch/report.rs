//! The lines that describe a switch, a restore, the verdicts after a
//! switch and a switch left pending: one wording for `ipivmm host --set`,
//! `--restore`, `ipivmm host` and `sweep --host-param`.
use super::{read_state, Applied, ModuleSetting, Restored, State, VmCheck};
use crate::facts::{ApicvSupport, ApicvVerdicts};
use std::path::Path;

/// `module.param: asked V, reads back W` per requested parameter, then the
/// mismatches, side effects, the partial VM check and the state file.
pub fn applied_lines(a: &Applied) -> Vec<String> {
    let mut out = Vec::new();
    out.push(if a.reloaded {
        format!(
            "{}: reloaded with {}",
            a.module,
            settings_text(&a.requested)
        )
    } else {
        format!(
            "{}: already {}; nothing reloaded",
            a.module,
            settings_text(&a.requested)
        )
    });
    for s in &a.requested {
        let back = a
            .read_back
            .get(&s.param)
            .map_or("(missing)", String::as_str);
        out.push(format!("  {s}: reads back {back}"));
    }
    out.extend(a.mismatches().iter().map(|m| format!("  mismatch: {m}")));
    for (p, (before, after)) in a.side_effects() {
        out.push(format!(
            "  also changed: {}.{p}: {before} -> {after}",
            a.module
        ));
    }
    for (p, (before, after)) in &a.kvm_changed {
        out.push(format!(
            "  also changed (kvm reloaded with it): kvm.{p}: {before} -> {after}"
        ));
    }
    if let VmCheck::Partial(why) = &a.vm_check {
        out.push(format!("  note: {why}"));
    }
    if let Some(path) = &a.state_file {
        out.push(format!("  original values kept in {}", path.display()));
    }
    out
}

/// What a restore did, or that there was nothing to do.
pub fn restored_lines(r: &Restored) -> Vec<String> {
    let Some(module) = &r.module else {
        return vec![format!(
            "nothing to restore: no switch recorded in {}",
            r.state_file.display()
        )];
    };
    let passed: Vec<String> = r.passed.iter().map(|(p, v)| format!("{p}={v}")).collect();
    let mut out = vec![format!("{module}: restored ({})", passed.join(" "))];
    for s in &r.skipped {
        out.push(format!(
            "  not passed: {}={:?}: {}",
            s.param, s.value, s.reason
        ));
    }
    out.extend(r.mismatches.iter().map(|m| format!("  mismatch: {m}")));
    out
}

fn settings_text(settings: &[ModuleSetting]) -> String {
    let s: Vec<String> = settings
        .iter()
        .map(|s| format!("{}={}", s.param, s.value))
        .collect();
    s.join(" ")
}

/// `APICv ..., IPIv ..., AVIC ...` in one line.
pub fn verdict_line(v: &ApicvVerdicts) -> String {
    let one = |name: &str, s: &ApicvSupport| {
        if s.is_available() {
            format!("{name} available")
        } else {
            format!("{name} unavailable")
        }
    };
    format!(
        "verdicts now: {}, {}, {}, {}",
        one("APICv", &v.apicv),
        one("IPIv", &v.ipiv),
        one("AVIC", &v.avic),
        one("x2AVIC", &v.x2avic)
    )
}

/// A switch recorded in `state_file` and not restored, in one line (None
/// when there is none): a warning when its process is gone, a note while
/// it runs.
pub fn pending_line(state_file: &Path) -> Option<String> {
    let state = match read_state(state_file) {
        Ok(s) => s?,
        Err(e) => return Some(format!("warning: {e}")),
    };
    let what = format!(
        "{} switched to {} by pid {}",
        state.module,
        settings_text(&state.settings),
        state.pid
    );
    Some(if state.owner_alive() {
        format!("note: {what} (still running; it restores when it ends)")
    } else {
        format!(
            "warning: {what}, which ended without restoring {}: run `ipivmm host --restore` ({})",
            originals_text(&state),
            state_file.display()
        )
    })
}

/// The recorded original values of the switched parameters.
fn originals_text(state: &State) -> String {
    let v: Vec<String> = state
        .settings
        .iter()
        .map(|s| {
            let orig = state.original.get(&s.param).map_or("?", String::as_str);
            format!("{}={orig}", s.param)
        })
        .collect();
    v.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module_switch::{parse_settings, write_state, Skipped};
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn applied(reloaded: bool) -> Applied {
        let original = BTreeMap::from([("avic".into(), "N".into()), ("npt".into(), "Y".into())]);
        Applied {
            module: "kvm_amd".into(),
            requested: parse_settings("kvm_amd.avic=1,kvm_amd.npt=0").unwrap(),
            read_back: BTreeMap::from([("avic".into(), "N".into()), ("npt".into(), "N".into())]),
            original,
            reloaded,
            state_file: reloaded.then(|| PathBuf::from("/run/ipivmm/module-switch.json")),
            vm_check: VmCheck::Partial("debugfs not readable".into()),
            kvm_changed: BTreeMap::from([("halt_poll_ns".into(), ("0".into(), "200000".into()))]),
        }
    }

    #[test]
    fn a_switch_says_what_reads_back_and_where_the_originals_are() {
        let text = applied_lines(&applied(true)).join("\n");
        for want in [
            "kvm_amd: reloaded with avic=1 npt=0",
            "kvm_amd.avic=1: reads back N",
            "kvm_amd.npt=0: reads back N",
            "mismatch: kvm_amd.avic: asked 1, kernel reports N (",
            "kvm.halt_poll_ns: 0 -> 200000",
            "note: debugfs not readable",
            "original values kept in /run/ipivmm/module-switch.json",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert!(
            !text.contains("npt: asked"),
            "npt read back as asked:\n{text}"
        );
        let text = applied_lines(&applied(false)).join("\n");
        assert!(
            text.contains("nothing reloaded") && !text.contains("kept in"),
            "{text}"
        );
    }

    #[test]
    fn a_pending_switch_is_a_warning_once_its_process_is_gone() {
        let dir = std::env::temp_dir().join(format!("ipivmm-pending-{}", std::process::id()));
        let path = dir.join("module-switch.json");
        assert_eq!(pending_line(&path), None);
        let a = applied(true);
        let mut state = State {
            format: crate::module_switch::STATE_FORMAT.into(),
            module: "kvm_amd".into(),
            original: a.original,
            settings: a.requested,
            kvm_original: BTreeMap::new(),
            pid: std::process::id(),
            pid_start: None,
            timestamp: 0,
        };
        write_state(&path, &state).unwrap();
        let note = pending_line(&path).unwrap();
        assert!(
            note.starts_with("note: kvm_amd switched to avic=1 npt=0"),
            "{note}"
        );
        state.pid = 0x7fff_fff0; // no such process
        write_state(&path, &state).unwrap();
        let warn = pending_line(&path).unwrap();
        assert!(
            warn.starts_with("warning:")
                && warn.contains("without restoring avic=N npt=Y: run `ipivmm host --restore`"),
            "{warn}"
        );
        std::fs::write(&path, "{").unwrap();
        assert!(pending_line(&path)
            .unwrap()
            .starts_with("warning: state file"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_restore_lists_what_it_passed_and_skipped() {
        let r = Restored {
            module: Some("kvm_intel".into()),
            passed: BTreeMap::from([("enable_apicv".into(), "Y".into())]),
            skipped: vec![Skipped {
                param: "vmentry_l1d_flush".into(),
                value: "not required".into(),
                reason: "computed".into(),
            }],
            mismatches: Vec::new(),
            state_file: PathBuf::from("/s.json"),
        };
        let text = restored_lines(&r).join("\n");
        assert!(
            text.contains("kvm_intel: restored (enable_apicv=Y)"),
            "{text}"
        );
        assert!(
            text.contains("not passed: vmentry_l1d_flush=\"not required\""),
            "{text}"
        );
        let none = Restored {
            module: None,
            passed: BTreeMap::new(),
            skipped: Vec::new(),
            mismatches: Vec::new(),
            state_file: PathBuf::from("/s.json"),
        };
        assert_eq!(
            restored_lines(&none),
            ["nothing to restore: no switch recorded in /s.json"]
        );
    }
}
