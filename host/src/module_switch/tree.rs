//! The module tree (sysfs, debugfs, state file, uid, modprobe) and the
//! guards every switch passes first ([`ModuleTree::check`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::error::SwitchError;
use super::runner::{Modprobe, ModprobeRunner};
use super::settings::{ModuleSetting, ParseError};
use super::state::read_state;
use super::{DEFAULT_DEBUGFS_KVM, DEFAULT_STATE_FILE, DEFAULT_SYS_MODULE, VENDOR_MODULES};
use crate::facts::KvmBackend;

/// How thoroughly running VMs were looked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum VmCheck {
    /// The module's refcnt and the per-VM debugfs directories (this path).
    Full(PathBuf),
    /// Only the module's refcnt, and why.
    Partial(String),
}

/// What [`ModuleTree::check`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preflight {
    /// The vendor module.
    pub module: String,
    /// Current values of the requested parameters.
    pub current: BTreeMap<String, String>,
    /// How VMs were looked for.
    pub vm_check: VmCheck,
}

/// The system as this module sees it; every path and the effective uid can
/// be injected for tests.
#[derive(Debug, Clone)]
pub struct ModuleTree {
    /// Sysfs module root (`/sys/module`).
    pub sys_module: PathBuf,
    /// KVM's debugfs directory (`/sys/kernel/debug/kvm`).
    pub debugfs_kvm: PathBuf,
    /// The state file (`/run/ipivmm/module-switch.json`).
    pub state_file: PathBuf,
    /// Effective uid of the caller.
    pub euid: u32,
    /// Runs modprobe.
    pub runner: Arc<dyn ModprobeRunner>,
}

/// The effective uid of this process.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

impl ModuleTree {
    /// This host: default paths, this process's effective uid, real modprobe.
    pub fn system() -> Self {
        ModuleTree {
            sys_module: PathBuf::from(DEFAULT_SYS_MODULE),
            debugfs_kvm: PathBuf::from(DEFAULT_DEBUGFS_KVM),
            state_file: PathBuf::from(DEFAULT_STATE_FILE),
            euid: effective_uid(),
            runner: Arc::new(Modprobe::default()),
        }
    }

    pub(super) fn module_dir(&self, module: &str) -> PathBuf {
        self.sys_module.join(module)
    }

    /// Whether `module` is loaded as a module (has `initstate`; built-in
    /// modules have only `parameters/`).
    pub fn is_loaded(&self, module: &str) -> bool {
        self.module_dir(module).join("initstate").is_file()
    }

    /// Every readable parameter of `module`: `name -> value` (trimmed).
    /// Unreadable (write-only) parameters are left out.
    pub fn read_params(&self, module: &str) -> Result<BTreeMap<String, String>, SwitchError> {
        let dir = self.module_dir(module).join("parameters");
        let sysfs = |source| SwitchError::Sysfs {
            path: dir.clone(),
            source,
        };
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).map_err(sysfs)? {
            let entry = entry.map_err(sysfs)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Ok(v) = std::fs::read_to_string(entry.path()) {
                out.insert(name, v.trim().to_string());
            }
        }
        Ok(out)
    }

    /// `/sys/module/<module>/refcnt` (`None` when there is no such file).
    pub fn refcnt(&self, module: &str) -> Result<Option<u64>, SwitchError> {
        let path = self.module_dir(module).join("refcnt");
        match std::fs::read_to_string(&path) {
            Ok(t) => t.trim().parse().map(Some).map_err(|e| SwitchError::Sysfs {
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SwitchError::Sysfs { path, source }),
        }
    }

    /// VMs in KVM's debugfs (`<pid>-<fd>` directories), described as
    /// `pid P (comm) fd F`; `None` when debugfs is not readable there.
    pub fn debugfs_vms(&self) -> Option<Vec<String>> {
        let entries = std::fs::read_dir(&self.debugfs_kvm).ok()?;
        let mut vms: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| vm_dir_name(&e.file_name().to_string_lossy()))
            .collect();
        vms.sort();
        Some(vms)
    }

    pub(super) fn check_root(&self) -> Result<(), SwitchError> {
        if self.euid == 0 {
            Ok(())
        } else {
            Err(SwitchError::NotRoot { euid: self.euid })
        }
    }

    fn check_loaded(&self, module: &str) -> Result<(), SwitchError> {
        let dir = self.module_dir(module);
        if !dir.is_dir() {
            return Err(SwitchError::NotLoaded {
                module: module.to_string(),
                path: dir,
            });
        }
        if !self.is_loaded(module) {
            return Err(SwitchError::BuiltIn {
                module: module.to_string(),
            });
        }
        Ok(())
    }

    /// Refuses when a switch is already recorded in the state file.
    fn check_no_state(&self) -> Result<(), SwitchError> {
        let Some(s) = read_state(&self.state_file)? else {
            return Ok(());
        };
        let (pid, module, path) = (s.pid, s.module.clone(), self.state_file.clone());
        Err(if s.owner_alive() {
            SwitchError::SwitchActive { pid, module, path }
        } else {
            SwitchError::PendingRestore { pid, module, path }
        })
    }

    /// Refuses when VMs run (debugfs) or the module is held (refcnt > 0);
    /// see the module docs for why the vendor refcnt covers every VM and
    /// open /dev/kvm.
    pub(super) fn check_in_use(&self, module: &str) -> Result<VmCheck, SwitchError> {
        let vm_check = match self.debugfs_vms() {
            Some(vms) if !vms.is_empty() => {
                return Err(SwitchError::VmsRunning {
                    vms: vms.join(", "),
                    dir: self.debugfs_kvm.clone(),
                })
            }
            Some(_) => VmCheck::Full(self.debugfs_kvm.clone()),
            None => VmCheck::Partial(format!(
                "debugfs not readable at {} (mount it with `mount -t debugfs none /sys/kernel/debug`): \
                 VMs were detected only through {module}'s refcnt, which every VM and open /dev/kvm holds",
                self.debugfs_kvm.display()
            )),
        };
        match self.refcnt(module)? {
            Some(n) if n > 0 => Err(SwitchError::InUse {
                module: module.to_string(),
                refcnt: n,
            }),
            _ => Ok(vm_check),
        }
    }

    /// Runs every guard for `settings` on a host with `backend`, without
    /// changing anything.
    pub fn check(
        &self,
        backend: &KvmBackend,
        settings: &[ModuleSetting],
    ) -> Result<Preflight, SwitchError> {
        let module = single_module(settings)?;
        check_backend(backend, &module)?;
        self.check_loaded(&module)?;
        let params = self.read_params(&module)?;
        check_params_exist(&module, settings, &params)?;
        self.check_root()?;
        self.check_no_state()?;
        let vm_check = self.check_in_use(&module)?;
        let current = settings
            .iter()
            .filter_map(|s| Some((s.param.clone(), params.get(&s.param)?.clone())))
            .collect();
        Ok(Preflight {
            module,
            current,
            vm_check,
        })
    }
}

/// `"<pid>-<fd>"` to `pid P (comm) fd F`; `None` for other names.
pub(super) fn vm_dir_name(name: &str) -> Option<String> {
    let (pid, fd) = name.split_once('-')?;
    let pid: u32 = pid.parse().ok()?;
    let fd: u32 = fd.parse().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| format!(" ({})", c.trim()))
        .unwrap_or_default();
    Some(format!("pid {pid}{comm} fd {fd}"))
}

/// The one module all settings name.
fn single_module(settings: &[ModuleSetting]) -> Result<String, SwitchError> {
    let first = settings.first().ok_or(ParseError::Empty)?;
    let modules: BTreeSet<&str> = settings.iter().map(|s| s.module.as_str()).collect();
    if modules.len() > 1 {
        return Err(SwitchError::MixedModules {
            modules: modules.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    let mut seen = BTreeSet::new();
    for s in settings {
        if !seen.insert(&s.param) {
            return Err(ParseError::Duplicate {
                key: format!("{}.{}", s.module, s.param),
            }
            .into());
        }
    }
    Ok(first.module.clone())
}

/// Only kvm_intel on a kvm_intel host, kvm_amd on a kvm_amd host.
fn check_backend(backend: &KvmBackend, module: &str) -> Result<(), SwitchError> {
    if *backend == KvmBackend::KvmPvm {
        return Err(SwitchError::PvmBackend);
    }
    if !VENDOR_MODULES.contains(&module) {
        return Err(SwitchError::NotVendorModule {
            module: module.to_string(),
        });
    }
    let host = match backend {
        KvmBackend::KvmIntel => "kvm_intel",
        KvmBackend::KvmAmd => "kvm_amd",
        other => {
            return Err(SwitchError::NoVendorBackend {
                backend: format!("{other:?}"),
            })
        }
    };
    if host != module {
        return Err(SwitchError::WrongVendor {
            module: module.to_string(),
            backend: host.to_string(),
        });
    }
    Ok(())
}

fn check_params_exist(
    module: &str,
    settings: &[ModuleSetting],
    params: &BTreeMap<String, String>,
) -> Result<(), SwitchError> {
    match settings.iter().find(|s| !params.contains_key(&s.param)) {
        None => Ok(()),
        Some(s) => Err(SwitchError::UnknownParam {
            module: module.to_string(),
            param: s.param.clone(),
            available: if params.is_empty() {
                "none".to_string()
            } else {
                params.keys().cloned().collect::<Vec<_>>().join(", ")
            },
        }),
    }
}
