//! Switching and restoring: [`ModuleTree::apply`], [`ModuleTree::switch`]
//! (the [`Switched`] guard), [`ModuleTree::restore_from`], and what they
//! report ([`Applied`], [`Restored`], [`Mismatch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::SwitchError;
use super::runner::{load_command, RunnerError};
use super::settings::{param_values_equal, ModuleSetting};
use super::state::{read_state, remove_state, write_state, State};
use super::tree::{ModuleTree, VmCheck};
use super::KVM_CORE_MODULE;
use crate::facts::KvmBackend;

/// A parameter whose value read back differs from the one asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// `module.param`.
    pub key: String,
    /// The value asked for.
    pub wanted: String,
    /// The value sysfs shows (`None`: the parameter vanished).
    pub read_back: Option<String>,
    /// The likely reason.
    pub hint: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.read_back {
            Some(v) => write!(
                f,
                "{}: asked {}, kernel reports {} ({})",
                self.key, self.wanted, v, self.hint
            ),
            None => write!(
                f,
                "{}: asked {}, parameter missing after reload ({})",
                self.key, self.wanted, self.hint
            ),
        }
    }
}

/// Why the kernel may have refused a value.
fn mismatch_hint(param: &str) -> &'static str {
    match param {
        "avic" => "the CPU or kernel refused it, e.g. no AVIC under QEMU TCG or without the avic CPU flag (force_avic=1 overrides)",
        "force_avic" => "the kernel ignores force_avic without AVIC support or when avic=0",
        "enable_apicv" => "the CPU or kernel refused it: no APIC-register virtualization or posted interrupts",
        "enable_ipiv" => "the CPU or kernel refused it: IPIv needs APICv and a CPU with IPI virtualization (Intel Sapphire Rapids+, AMD AVIC)",
        _ => "the CPU or kernel refused it",
    }
}

fn mismatches_of(
    module: &str,
    wanted: impl Iterator<Item = (String, String)>,
    read_back: &BTreeMap<String, String>,
    hint: impl Fn(&str) -> String,
) -> Vec<Mismatch> {
    wanted
        .filter_map(|(param, value)| {
            let got = read_back.get(&param);
            if got.is_some_and(|g| param_values_equal(&value, g)) {
                return None;
            }
            Some(Mismatch {
                key: format!("{module}.{param}"),
                wanted: value,
                read_back: got.cloned(),
                hint: hint(&param),
            })
        })
        .collect()
}

/// Parameters whose value changed between two snapshots:
/// `param -> (before, after)` (`""` for a parameter that appeared or went).
fn changed(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> BTreeMap<String, (String, String)> {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (b, a) = (before.get(k), after.get(k));
            match (b, a) {
                (Some(b), Some(a)) if param_values_equal(b, a) => None,
                _ => Some((
                    k.clone(),
                    (
                        b.cloned().unwrap_or_default(),
                        a.cloned().unwrap_or_default(),
                    ),
                )),
            }
        })
        .collect()
}

/// The outcome of [`ModuleTree::apply`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// The vendor module.
    pub module: String,
    /// The settings asked for.
    pub requested: Vec<ModuleSetting>,
    /// Every parameter before the switch.
    pub original: BTreeMap<String, String>,
    /// Every parameter after the reload (the same as `original` when
    /// nothing had to change).
    pub read_back: BTreeMap<String, String>,
    /// Whether the module was reloaded (`false`: every requested value was
    /// already in effect, nothing was touched).
    pub reloaded: bool,
    /// The state file to restore from (`None` when nothing was reloaded).
    pub state_file: Option<PathBuf>,
    /// How VMs were looked for.
    pub vm_check: VmCheck,
    /// `kvm` parameters that changed across the reload: `(before, after)`.
    pub kvm_changed: BTreeMap<String, (String, String)>,
}

impl Applied {
    /// Requested parameters whose read-back value differs (the kernel or
    /// the CPU refused or normalised them), with a hint.
    pub fn mismatches(&self) -> Vec<Mismatch> {
        let wanted = self
            .requested
            .iter()
            .map(|s| (s.param.clone(), s.value.clone()));
        mismatches_of(&self.module, wanted, &self.read_back, |p| {
            mismatch_hint(p).to_string()
        })
    }

    /// Other parameters of the module that changed across the reload
    /// (e.g. a value loaded by hand before, now back at its default):
    /// `param -> (before, after)`.
    pub fn side_effects(&self) -> BTreeMap<String, (String, String)> {
        let mut c = changed(&self.original, &self.read_back);
        c.retain(|p, _| !self.requested.iter().any(|s| &s.param == p));
        c
    }
}

/// A parameter left out of a restore, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The parameter.
    pub param: String,
    /// Its recorded value.
    pub value: String,
    /// Why it was not passed to modprobe.
    pub reason: String,
}

/// The outcome of a restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Restored {
    /// The module reloaded (`None`: there was nothing to restore).
    pub module: Option<String>,
    /// Parameters passed to modprobe.
    pub passed: BTreeMap<String, String>,
    /// Parameters left out.
    pub skipped: Vec<Skipped>,
    /// Passed parameters that read back differently.
    pub mismatches: Vec<Mismatch>,
    /// The state file (deleted on success).
    pub state_file: PathBuf,
}

impl Restored {
    fn nothing(state_file: &Path) -> Self {
        Restored {
            module: None,
            passed: BTreeMap::new(),
            skipped: Vec::new(),
            mismatches: Vec::new(),
            state_file: state_file.to_path_buf(),
        }
    }

    /// Whether there was nothing to restore.
    pub fn was_noop(&self) -> bool {
        self.module.is_none()
    }
}

/// Values accepted by `kvm_intel.vmentry_l1d_flush` on load.
const L1D_FLUSH_VALUES: [&str; 4] = ["auto", "never", "cond", "always"];

/// Whether an original value can be passed back on the modprobe command
/// line. Every parameter visible in sysfs can be given at load time; the
/// exceptions are values that are not in the form the setter parses:
/// `kvm_intel.vmentry_l1d_flush` reads back the computed L1TF mitigation,
/// which may be `not required` or `EPT disabled` (rejected on load; the
/// kernel recomputes it anyway), and any value with spaces or quotes
/// (the kernel splits load arguments at spaces).
pub(super) fn restorable(param: &str, value: &str) -> Result<(), String> {
    if param == "vmentry_l1d_flush" && !L1D_FLUSH_VALUES.contains(&value) {
        return Err(format!(
            "reads back the computed L1TF mitigation ({value:?}), which modprobe rejects; the kernel recomputes it"
        ));
    }
    if value.is_empty() {
        return Err("empty value (nothing to pass)".into());
    }
    if value.chars().any(|c| c.is_whitespace() || c == '"') {
        return Err(format!(
            "value {value:?} has spaces or quotes and cannot be passed to modprobe"
        ));
    }
    Ok(())
}

/// Splits recorded originals into what a restore passes and what it skips.
pub(super) fn restore_params(
    original: &BTreeMap<String, String>,
) -> (Vec<(String, String)>, Vec<Skipped>) {
    let mut pass = Vec::new();
    let mut skipped = Vec::new();
    for (p, v) in original {
        match restorable(p, v) {
            Ok(()) => pass.push((p.clone(), v.clone())),
            Err(reason) => skipped.push(Skipped {
                param: p.clone(),
                value: v.clone(),
                reason,
            }),
        }
    }
    (pass, skipped)
}

/// Errors of a reload, by stage.
enum ReloadError {
    Unload(RunnerError),
    StillLoaded,
    Load(RunnerError),
}

impl ModuleTree {
    /// Unloads and loads `module` with `params`, checking that it really
    /// went away (modprobe of a loaded module is a silent no-op).
    fn reload(&self, module: &str, params: &[(String, String)]) -> Result<(), ReloadError> {
        if let Err(e) = self.runner.remove(module) {
            if self.module_dir(module).exists() {
                return Err(ReloadError::Unload(e));
            }
            // The module went; what failed was a dependency (e.g. kvm).
            log::warn!("{e} (but {module} was unloaded)");
        }
        if self.module_dir(module).exists() {
            return Err(ReloadError::StillLoaded);
        }
        self.load_checked(module, params).map_err(ReloadError::Load)
    }

    /// Loads `module` and checks that it appeared.
    fn load_checked(&self, module: &str, params: &[(String, String)]) -> Result<(), RunnerError> {
        self.runner.load(module, params)?;
        if self.is_loaded(module) {
            Ok(())
        } else {
            Err(RunnerError {
                command: load_command(module, params),
                detail: format!("{module} did not appear in {}", self.sys_module.display()),
            })
        }
    }

    /// Turns a failed reload during [`ModuleTree::apply`] into an error,
    /// rolling back to the original values where the module is gone.
    fn failed_apply(&self, state: &State, err: ReloadError) -> SwitchError {
        let module = state.module.clone();
        let source = match err {
            ReloadError::Unload(source) => {
                let _ = std::fs::remove_file(&self.state_file);
                return SwitchError::Unload { source };
            }
            ReloadError::StillLoaded => {
                let _ = std::fs::remove_file(&self.state_file);
                return SwitchError::StillLoaded { module };
            }
            ReloadError::Load(source) => source,
        };
        let (pass, _) = restore_params(&state.original);
        let outcome = match self.load_checked(&module, &pass) {
            Ok(()) => {
                let _ = std::fs::remove_file(&self.state_file);
                format!("{module} was reloaded with its original parameters: nothing changed")
            }
            Err(e) => format!(
                "reloading the original parameters failed too ({}): {module} is NOT loaded; run `ipivmm host --restore` (state in {})",
                e.detail,
                self.state_file.display()
            ),
        };
        SwitchError::Load { source, outcome }
    }

    /// Switches one vendor module: guards, snapshot, state file, reload
    /// with `settings`, read-back. Nothing is reloaded when every requested
    /// value is already in effect.
    pub fn apply(
        &self,
        backend: &KvmBackend,
        settings: &[ModuleSetting],
    ) -> Result<Applied, SwitchError> {
        let pre = self.check(backend, settings)?;
        let module = pre.module;
        let original = self.read_params(&module)?;
        let kvm_before = self.read_params(KVM_CORE_MODULE).unwrap_or_default();
        let mut applied = Applied {
            module: module.clone(),
            requested: settings.to_vec(),
            original: original.clone(),
            read_back: original.clone(),
            reloaded: false,
            state_file: None,
            vm_check: pre.vm_check,
            kvm_changed: BTreeMap::new(),
        };
        if applied.mismatches().is_empty() {
            return Ok(applied);
        }
        let state = State::new(&module, original, settings, kvm_before.clone());
        write_state(&self.state_file, &state)?;
        let params: Vec<(String, String)> = settings
            .iter()
            .map(|s| (s.param.clone(), s.value.clone()))
            .collect();
        self.reload(&module, &params)
            .map_err(|e| self.failed_apply(&state, e))?;
        applied.read_back = self.read_params(&module)?;
        applied.reloaded = true;
        applied.state_file = Some(self.state_file.clone());
        let kvm_after = self.read_params(KVM_CORE_MODULE).unwrap_or_default();
        applied.kvm_changed = changed(&kvm_before, &kvm_after);
        Ok(applied)
    }

    /// [`ModuleTree::apply`], returning a guard that restores on drop.
    pub fn switch(
        &self,
        backend: &KvmBackend,
        settings: &[ModuleSetting],
    ) -> Result<Switched, SwitchError> {
        let applied = self.apply(backend, settings)?;
        Ok(Switched {
            tree: self.clone(),
            done: !applied.reloaded,
            applied,
        })
    }

    /// Restores from this tree's state file; see [`ModuleTree::restore_from`].
    pub fn restore(&self) -> Result<Restored, SwitchError> {
        self.restore_from(&self.state_file)
    }

    /// Reloads the module recorded in `state_file` with its original
    /// parameter values, checks them and deletes the state file. With no
    /// state file there is nothing to do (`Ok`, [`Restored::was_noop`]), so
    /// calling it twice is safe. Refuses while another live process owns
    /// the switch, and while the module is in use.
    pub fn restore_from(&self, state_file: &Path) -> Result<Restored, SwitchError> {
        let Some(state) = read_state(state_file)? else {
            return Ok(Restored::nothing(state_file));
        };
        self.check_root()?;
        if state.owner_alive() && !state.is_ours() {
            return Err(SwitchError::SwitchActive {
                pid: state.pid,
                module: state.module.clone(),
                path: state_file.to_path_buf(),
            });
        }
        let module = state.module.clone();
        let failed = |detail: String| SwitchError::RestoreFailed {
            module: module.clone(),
            detail,
            path: state_file.to_path_buf(),
        };
        let (pass, skipped) = restore_params(&state.original);
        if self.module_dir(&module).exists() {
            self.check_in_use(&module)?;
            self.reload(&module, &pass)
                .map_err(|e| failed(reload_detail(e)))?;
        } else {
            self.load_checked(&module, &pass)
                .map_err(|e| failed(e.to_string()))?;
        }
        let read_back = self.read_params(&module)?;
        let mismatches = mismatches_of(&module, pass.iter().cloned(), &read_back, |_| {
            "restored value reads back differently".to_string()
        });
        remove_state(state_file)?;
        Ok(Restored {
            module: Some(module),
            passed: pass.into_iter().collect(),
            skipped,
            mismatches,
            state_file: state_file.to_path_buf(),
        })
    }
}

fn reload_detail(e: ReloadError) -> String {
    match e {
        ReloadError::Unload(r) | ReloadError::Load(r) => r.to_string(),
        ReloadError::StillLoaded => "`modprobe -r` returned but the module is still loaded".into(),
    }
}

/// A switch in effect; restores the original parameters when dropped
/// (errors are logged). Call [`Switched::restore`] to see them instead.
#[derive(Debug)]
pub struct Switched {
    tree: ModuleTree,
    applied: Applied,
    done: bool,
}

impl Switched {
    /// What was applied.
    pub fn applied(&self) -> &Applied {
        &self.applied
    }

    /// Whether the original parameters are back (or nothing was changed).
    pub fn is_restored(&self) -> bool {
        self.done
    }

    /// Restores now. Idempotent: once restored, further calls (and the
    /// drop) do nothing.
    pub fn restore(&mut self) -> Result<Restored, SwitchError> {
        if self.done {
            return Ok(Restored::nothing(&self.tree.state_file));
        }
        let r = self.tree.restore()?;
        self.done = true;
        Ok(r)
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        match self.restore() {
            Ok(r) => {
                for m in &r.mismatches {
                    log::warn!("restore: {m}");
                }
            }
            Err(e) => log::error!("restoring {} on exit: {e}", self.applied.module),
        }
    }
}
