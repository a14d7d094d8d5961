//! Running modprobe: the [`ModprobeRunner`] trait, the real [`Modprobe`] and
//! the [`FakeModprobe`] that acts on a fake sysfs tree for tests.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use super::settings::{parse_kernel_bool, parse_kernel_int};
use crate::facts::{parse_bool_param, parse_int_param};

/// A failed `modprobe` invocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` failed: {detail}")]
pub struct RunnerError {
    /// The command line, e.g. `modprobe -r kvm_amd`.
    pub command: String,
    /// Last line of its error output, or the exit status.
    pub detail: String,
}

/// Loads and unloads modules (`modprobe -r m`, `modprobe m p=v ...`).
pub trait ModprobeRunner: fmt::Debug + Send + Sync {
    /// `modprobe -r <module>`.
    fn remove(&self, module: &str) -> Result<(), RunnerError>;
    /// `modprobe <module> p=v ...`.
    fn load(&self, module: &str, params: &[(String, String)]) -> Result<(), RunnerError>;
}

/// The command line of a load, for messages and fakes.
pub fn load_command(module: &str, params: &[(String, String)]) -> String {
    let mut s = format!("modprobe {module}");
    for (p, v) in params {
        s.push_str(&format!(" {p}={v}"));
    }
    s
}

/// The real runner: runs `modprobe` (found in `PATH` unless `program` is a
/// path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modprobe {
    /// The program to run.
    pub program: PathBuf,
}

impl Default for Modprobe {
    fn default() -> Self {
        Self {
            program: PathBuf::from("modprobe"),
        }
    }
}

impl Modprobe {
    fn run(&self, shown: String, args: &[String]) -> Result<(), RunnerError> {
        let fail = |detail: String| RunnerError {
            command: shown.clone(),
            detail,
        };
        // Its own process group: a Ctrl-C at the terminal goes to ipivmm
        // (which finishes the reload, then restores) and not to a modprobe
        // halfway through unloading or loading the module.
        let out = Command::new(&self.program)
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                fail(format!(
                    "cannot run {}: {e} (install kmod)",
                    self.program.display()
                ))
            })?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        Err(fail(match last {
            Some(l) => l.trim().to_string(),
            None => out.status.to_string(),
        }))
    }
}

impl ModprobeRunner for Modprobe {
    fn remove(&self, module: &str) -> Result<(), RunnerError> {
        let args = ["-r".to_string(), module.to_string()];
        self.run(format!("modprobe -r {module}"), &args)
    }

    fn load(&self, module: &str, params: &[(String, String)]) -> Result<(), RunnerError> {
        let mut args = vec![module.to_string()];
        args.extend(params.iter().map(|(p, v)| format!("{p}={v}")));
        self.run(load_command(module, params), &args)
    }
}

/// A [`ModprobeRunner`] that acts on a fake sysfs tree, for tests: loading
/// creates `<root>/<module>/{initstate,refcnt,parameters/<p>}` from the
/// module's defaults and the given parameters (bool defaults `Y`/`N` make
/// the parameter boolean, integer defaults integer; unknown parameters are
/// ignored, as the kernel does; a bad value fails the load); removing
/// deletes the directory unless `refcnt` > 0. A module declared with
/// [`FakeModprobe::with_dependency`] is loaded before its user and removed
/// after it, as modprobe does with `kvm`. Every call is recorded as a
/// command line.
#[derive(Debug)]
pub struct FakeModprobe {
    root: PathBuf,
    defaults: BTreeMap<String, BTreeMap<String, String>>,
    clamps: BTreeMap<(String, String), String>,
    deps: BTreeMap<String, String>,
    calls: Mutex<Vec<String>>,
    failing_loads: Mutex<u32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FakeModprobe {
    /// A fake over the sysfs module root `root` (created on first install).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FakeModprobe {
            root: root.into(),
            defaults: BTreeMap::new(),
            clamps: BTreeMap::new(),
            deps: BTreeMap::new(),
            calls: Mutex::new(Vec::new()),
            failing_loads: Mutex::new(0),
        }
    }

    /// Declares `module` with its default parameters and installs it
    /// (loaded, refcnt 0).
    pub fn with_module(mut self, module: &str, params: &[(&str, &str)]) -> std::io::Result<Self> {
        let map: BTreeMap<String, String> = params
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect();
        self.install(module, &map, 0)?;
        self.defaults.insert(module.to_string(), map);
        Ok(self)
    }

    /// Declares that `module` depends on `dep` (both declared with
    /// [`FakeModprobe::with_module`]); `dep`'s refcnt becomes 1.
    pub fn with_dependency(mut self, module: &str, dep: &str) -> std::io::Result<Self> {
        self.deps.insert(module.to_string(), dep.to_string());
        self.set_refcnt(dep, 1)?;
        Ok(self)
    }

    /// Makes the "kernel" force `module.param` to `value` on every load
    /// (as kvm_amd turns avic off on a CPU without AVIC).
    pub fn with_clamp(mut self, module: &str, param: &str, value: &str) -> Self {
        self.clamps
            .insert((module.to_string(), param.to_string()), value.to_string());
        self
    }

    /// Makes the next `n` loads fail.
    pub fn fail_next_loads(&self, n: u32) {
        *lock(&self.failing_loads) = n;
    }

    /// The command lines run so far.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    /// Sets `<module>/refcnt`.
    pub fn set_refcnt(&self, module: &str, n: u64) -> std::io::Result<()> {
        std::fs::write(self.root.join(module).join("refcnt"), format!("{n}\n"))
    }

    fn install(
        &self,
        module: &str,
        params: &BTreeMap<String, String>,
        refcnt: u64,
    ) -> std::io::Result<()> {
        let dir = self.root.join(module);
        std::fs::create_dir_all(dir.join("parameters"))?;
        for (p, v) in params {
            std::fs::write(dir.join("parameters").join(p), format!("{v}\n"))?;
        }
        std::fs::write(dir.join("initstate"), "live\n")?;
        self.set_refcnt(module, refcnt)
    }

    fn refcnt_of(&self, module: &str) -> i64 {
        let text = std::fs::read_to_string(self.root.join(module).join("refcnt"));
        text.ok().and_then(|t| parse_int_param(&t)).unwrap_or(0)
    }

    /// The value a parameter with default `default` stores for `given`.
    fn kernel_value(default: &str, given: &str) -> Option<String> {
        if parse_bool_param(default).is_some() && parse_int_param(default).is_none() {
            return parse_kernel_bool(given).map(|b| if b { "Y" } else { "N" }.to_string());
        }
        if parse_int_param(default).is_some() {
            return parse_kernel_int(given).map(|i| i.to_string());
        }
        Some(given.to_string())
    }

    fn loaded_values(
        &self,
        module: &str,
        params: &[(String, String)],
    ) -> Result<BTreeMap<String, String>, String> {
        let mut values = self
            .defaults
            .get(module)
            .cloned()
            .ok_or_else(|| format!("FATAL: Module {module} not found"))?;
        for (p, v) in params {
            if let Some(slot) = values.get_mut(p) {
                *slot = Self::kernel_value(slot, v).ok_or_else(|| {
                    format!("ERROR: could not insert '{module}': Invalid argument ({p}={v})")
                })?;
            }
        }
        for ((m, p), v) in &self.clamps {
            if m == module && values.contains_key(p) {
                values.insert(p.clone(), v.clone());
            }
        }
        Ok(values)
    }

    /// Loads `module`'s dependency if it is missing.
    fn load_dependency(&self, module: &str) -> Result<(), String> {
        let Some(dep) = self.deps.get(module) else {
            return Ok(());
        };
        if self.root.join(dep).is_dir() {
            return Ok(());
        }
        let values = self.loaded_values(dep, &[])?;
        self.install(dep, &values, 1).map_err(|e| e.to_string())
    }
}

impl ModprobeRunner for FakeModprobe {
    fn remove(&self, module: &str) -> Result<(), RunnerError> {
        let command = format!("modprobe -r {module}");
        lock(&self.calls).push(command.clone());
        let fail = |detail: String| RunnerError {
            command: command.clone(),
            detail,
        };
        let dir = self.root.join(module);
        if !dir.is_dir() {
            return Err(fail(format!("FATAL: Module {module} is not in kernel.")));
        }
        if self.refcnt_of(module) > 0 {
            return Err(fail(format!("FATAL: Module {module} is in use.")));
        }
        std::fs::remove_dir_all(&dir).map_err(|e| fail(e.to_string()))?;
        match self.deps.get(module) {
            // modprobe -r also removes dependencies nothing else uses.
            Some(dep) if self.refcnt_of(dep) <= 1 => {
                let _ = std::fs::remove_dir_all(self.root.join(dep));
            }
            _ => {}
        }
        Ok(())
    }

    fn load(&self, module: &str, params: &[(String, String)]) -> Result<(), RunnerError> {
        let command = load_command(module, params);
        lock(&self.calls).push(command.clone());
        let fail = |detail: String| RunnerError {
            command: command.clone(),
            detail,
        };
        {
            let mut n = lock(&self.failing_loads);
            if *n > 0 {
                *n -= 1;
                return Err(fail("ERROR: could not insert (injected failure)".into()));
            }
        }
        if self.root.join(module).is_dir() {
            return Ok(()); // modprobe of a loaded module does nothing
        }
        let values = self.loaded_values(module, params).map_err(&fail)?;
        self.load_dependency(module).map_err(&fail)?;
        self.install(module, &values, 0)
            .map_err(|e| fail(e.to_string()))
    }
}

#[cfg(test)]
mod process_group_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// modprobe runs in a process group of its own, so a Ctrl-C at the
    /// terminal reaches ipivmm (which finishes, then restores) and not a
    /// half-done module reload.
    #[test]
    fn modprobe_runs_in_its_own_process_group() {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let script = dir.as_path().join("modprobe");
        // Field 5 of /proc/self/stat is the process group: ours only if it
        // is the script's own pid.
        std::fs::write(
            &script,
            "#!/bin/sh\nset -- $(cat /proc/$$/stat)\n[ \"$5\" = \"$$\" ] || { echo \"pgrp $5, pid $$\" >&2; exit 1; }\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let m = Modprobe { program: script };
        m.remove("kvm_amd").unwrap();
        m.load("kvm_amd", &[("avic".into(), "1".into())]).unwrap();
    }
}
