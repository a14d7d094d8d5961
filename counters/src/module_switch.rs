//! Host-wide APICv/AVIC/IPIv switches: reloading the KVM vendor module
//! (`kvm_intel` or `kvm_amd`) with other parameters, and putting it back.
//!
//! `enable_apicv`, `enable_ipiv`, `avic`, `force_avic` are read once, when
//! the vendor module initialises, so changing them means `modprobe -r` and
//! `modprobe` again. This module does that safely:
//!
//! 1. [`parse_settings`] turns `kvm_amd.avic=1,kvm_amd.force_avic=0` into
//!    [`ModuleSetting`]s (module and parameter names with `-` read as `_`,
//!    as the kernel does).
//! 2. [`ModuleTree::check`] refuses with the reason: not root, kvm_pvm or a
//!    non-vendor module, an unknown parameter (listing those that exist), a
//!    built-in module, a switch already recorded, or a module in use (open
//!    /dev/kvm, running VMs).
//! 3. [`ModuleTree::apply`] snapshots every parameter of the module, writes
//!    a state file (atomically) *before* touching anything, reloads the
//!    module with the requested settings and reads every parameter back.
//!    Values the kernel normalised (`avic=1` read back as `N` on a CPU
//!    without AVIC) are reported by [`Applied::mismatches`], not treated as
//!    errors.
//! 4. [`ModuleTree::restore`] reloads the module with the recorded original
//!    values, checks them and deletes the state file; [`pending_restore`]
//!    finds a state file left by a process that died. [`Switched`] restores
//!    on drop.
//!
//! Everything goes through a [`ModuleTree`] (sysfs root, debugfs directory,
//! state file, effective uid, [`ModprobeRunner`]), so all of it runs against
//! a fake tree ([`FakeModprobe`]) in tests.
//!
//! # Who holds a reference on the vendor module (what "in use" means)
//!
//! From `virt/kvm/kvm_main.c` (v6.x; e.g. CachyOS/linux at
//! 79f4411db5cb, `kvm_init` and `kvm_create_vm`):
//! - `kvm_init(vcpu_size, vcpu_align, module)` is called by `vmx_init` /
//!   `svm_init` with `THIS_MODULE`, and sets `kvm_chardev_ops.owner =
//!   module`: the *vendor* module owns the /dev/kvm file operations. Opening
//!   /dev/kvm goes through `misc_open`, whose `fops_get(c->fops)` is a
//!   `try_module_get(owner)`: every open /dev/kvm fd pins kvm_intel/kvm_amd.
//! - `kvm_create_vm` does `__module_get(kvm_chardev_ops.owner)` ("KVM is
//!   pinned via open("/dev/kvm"), the fd passed to this ioctl()") and
//!   `kvm_destroy_vm` the matching `module_put`; kernels before that change
//!   and after its 2023 revert instead set `kvm_vm_fops.owner` /
//!   `kvm_vcpu_fops.owner = module`, and `anon_inode_getfile` takes
//!   `try_module_get(fops->owner)` for each VM and vCPU fd. Either way every
//!   live VM holds a reference on the vendor module, even after its creator
//!   closed /dev/kvm.
//! - So `/sys/module/kvm_intel/refcnt` (or `kvm_amd`) is the count of open
//!   /dev/kvm fds, VMs, vCPU/device fds (plus modules depending on it): it
//!   is 0 exactly when the module can be unloaded, and the kernel's
//!   `delete_module` refuses (`modprobe -r`: "in use") otherwise. The check
//!   here is for a clear message before anything happens.
//! - `/sys/module/kvm/refcnt` is *not* a VM count: `kvm` is pinned by the
//!   vendor module depending on it (refcnt >= 1 whenever kvm_intel is
//!   loaded) and by `symbol_get` users, never by /dev/kvm or VM fds. It is
//!   therefore not used as a fallback; without debugfs the vendor refcnt is
//!   the whole check and [`VmCheck::Partial`] says so.
//! - `kvm_create_vm_debugfs` names each VM's directory
//!   `"%d-%s", task_pid_nr(current), fdname` (fdname = the VM fd number),
//!   so `/sys/kernel/debug/kvm/<pid>-<fd>/` lists VMs with their creator.
//!
//! `modprobe -r kvm_intel` also unloads `kvm` when nothing else uses it
//! (when kvm is a module), so `kvm` parameters changed at run time through
//! sysfs (e.g. `halt_poll_ns`) come back at their configured values;
//! [`Applied::kvm_changed`] lists them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::host::{parse_bool_param, parse_int_param, KvmBackend};

/// The KVM vendor modules whose parameters can be switched.
pub const VENDOR_MODULES: [&str; 2] = ["kvm_intel", "kvm_amd"];
/// The common KVM module (its parameters are reported, not switched).
pub const KVM_CORE_MODULE: &str = "kvm";
/// Default sysfs module root.
pub const DEFAULT_SYS_MODULE: &str = "/sys/module";
/// Default debugfs directory of KVM (one `<pid>-<fd>` directory per VM).
pub const DEFAULT_DEBUGFS_KVM: &str = "/sys/kernel/debug/kvm";
/// Default state file.
pub const DEFAULT_STATE_FILE: &str = "/run/ipivmm/module-switch.json";
/// `format` of the state file.
pub const STATE_FORMAT: &str = "ipivmm.module-switch/1";

/// Longest parameter value accepted from the command line.
const MAX_VALUE_LEN: usize = 256;

// ---------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------

/// One `module.param=value` setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleSetting {
    /// Module name, `-` normalised to `_` (e.g. `kvm_amd`).
    pub module: String,
    /// Parameter name, `-` normalised to `_` (e.g. `avic`).
    pub param: String,
    /// Value as given (e.g. `1`, `N`, `on`).
    pub value: String,
}

impl fmt::Display for ModuleSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}={}", self.module, self.param, self.value)
    }
}

/// Errors of parsing settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing given.
    #[error("no module settings given: pass e.g. kvm_amd.avic=1")]
    Empty,
    /// An empty item between commas.
    #[error("empty item {index} in {list:?}: separate settings with single commas, e.g. kvm_intel.enable_apicv=N,kvm_intel.enable_ipiv=0")]
    EmptyItem {
        /// 1-based position.
        index: usize,
        /// The whole list.
        list: String,
    },
    /// Not `module.param=value`.
    #[error("{item:?} is not module.param=value: write e.g. kvm_amd.avic=1")]
    Garbled {
        /// The item.
        item: String,
    },
    /// A module or parameter name with characters outside `[A-Za-z0-9_-]`.
    #[error("{item:?}: bad {what} name {name:?}: use letters, digits, '_' or '-' (e.g. kvm_intel.enable_ipiv=0)")]
    BadName {
        /// The item.
        item: String,
        /// `module` or `parameter`.
        what: &'static str,
        /// The offending name.
        name: String,
    },
    /// An empty, too long, or unquotable value.
    #[error("{item:?}: bad value {value:?}: give a plain value without spaces, quotes, commas or '=' (e.g. 0, 1, Y, N)")]
    BadValue {
        /// The item.
        item: String,
        /// The offending value.
        value: String,
    },
    /// The same parameter twice.
    #[error("{key} is given twice: keep one value per parameter")]
    Duplicate {
        /// `module.param`.
        key: String,
    },
}

/// Normalises a module or parameter name (`-` to `_`, as the kernel's
/// `parameq` and modprobe do) and checks its characters.
fn normalise_name(item: &str, what: &'static str, name: &str) -> Result<String, ParseError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok {
        return Err(ParseError::BadName {
            item: item.to_string(),
            what,
            name: name.to_string(),
        });
    }
    Ok(name.replace('-', "_"))
}

/// Checks a value: non-empty, short, and passable as one modprobe argument
/// (the kernel splits `init_module` arguments at spaces unless quoted).
fn check_value(item: &str, value: &str) -> Result<String, ParseError> {
    let bad = |c: char| c.is_whitespace() || c.is_control() || "\"'=,".contains(c);
    if value.is_empty() || value.len() > MAX_VALUE_LEN || value.chars().any(bad) {
        return Err(ParseError::BadValue {
            item: item.to_string(),
            value: value.to_string(),
        });
    }
    Ok(value.to_string())
}

impl FromStr for ModuleSetting {
    type Err = ParseError;

    /// Parses one `module.param=value` item (surrounding spaces ignored).
    fn from_str(item: &str) -> Result<Self, ParseError> {
        let item = item.trim();
        let garbled = || ParseError::Garbled {
            item: item.to_string(),
        };
        let (key, value) = item.split_once('=').ok_or_else(garbled)?;
        let (module, param) = key.trim().split_once('.').ok_or_else(garbled)?;
        Ok(ModuleSetting {
            module: normalise_name(item, "module", module)?,
            param: normalise_name(item, "parameter", param)?,
            value: check_value(item, value.trim())?,
        })
    }
}

/// Parses a comma-separated settings list such as
/// `kvm_intel.enable_apicv=N,kvm_intel.enable_ipiv=0,kvm_amd.avic=1`.
///
/// Refuses an empty list, empty items, items that are not
/// `module.param=value`, bad names or values, and a parameter given twice.
pub fn parse_settings(list: &str) -> Result<Vec<ModuleSetting>, ParseError> {
    if list.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let mut out: Vec<ModuleSetting> = Vec::new();
    for (i, item) in list.split(',').enumerate() {
        if item.trim().is_empty() {
            return Err(ParseError::EmptyItem {
                index: i + 1,
                list: list.to_string(),
            });
        }
        let s: ModuleSetting = item.parse()?;
        if out
            .iter()
            .any(|o| o.module == s.module && o.param == s.param)
        {
            return Err(ParseError::Duplicate {
                key: format!("{}.{}", s.module, s.param),
            });
        }
        out.push(s);
    }
    Ok(out)
}

/// Parses a sweep dimension `module.param=v1,v2,...` (e.g.
/// `kvm_amd.avic=0,1`) into one setting per value, in order.
///
/// Refuses empty values and two values that mean the same (`1,Y`).
pub fn parse_param_values(spec: &str) -> Result<Vec<ModuleSetting>, ParseError> {
    if spec.trim().is_empty() {
        return Err(ParseError::Empty);
    }
    let (key, values) = spec.split_once('=').ok_or_else(|| ParseError::Garbled {
        item: spec.trim().to_string(),
    })?;
    let mut out: Vec<ModuleSetting> = Vec::new();
    for (i, v) in values.split(',').enumerate() {
        if v.trim().is_empty() {
            return Err(ParseError::EmptyItem {
                index: i + 1,
                list: spec.to_string(),
            });
        }
        let s: ModuleSetting = format!("{}={}", key.trim(), v.trim()).parse()?;
        if out.iter().any(|o| param_values_equal(&o.value, &s.value)) {
            return Err(ParseError::Duplicate { key: s.to_string() });
        }
        out.push(s);
    }
    Ok(out)
}

/// Parses a boolean the way the kernel's `param_set_bool` (`kstrtobool`)
/// accepts it: `Y`/`N`/`1`/`0` (any case) and `on`/`off`, `yes`/`no`,
/// `true`/`false`.
pub fn parse_kernel_bool(s: &str) -> Option<bool> {
    if let Some(b) = parse_bool_param(s) {
        return Some(b);
    }
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "yes" | "true" => Some(true),
        "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// Parses an integer the way the kernel's `param_set_int`/`uint`/`ulong`
/// (`kstrto*(s, 0, ...)`) does: decimal, `0x` hexadecimal, leading-`0`
/// octal, optional sign. Sysfs prints integers in decimal.
pub fn parse_kernel_int(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body.is_empty() || body.starts_with(['+', '-']) {
        return None;
    }
    let (digits, radix) = match body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if body.len() > 1 && body.starts_with('0') => (&body[1..], 8),
        None => (body, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::from_str_radix(digits, radix).ok()?;
    Some(if neg { -v } else { v })
}

/// Whether a requested value and a value read back from sysfs mean the
/// same: equal strings, equal integers (`0x10` vs `16`), or equal booleans
/// (`1` vs `Y`, `off` vs `N`).
pub fn param_values_equal(requested: &str, read_back: &str) -> bool {
    let (a, b) = (requested.trim(), read_back.trim());
    if a == b {
        return true;
    }
    if let (Some(x), Some(y)) = (parse_kernel_int(a), parse_kernel_int(b)) {
        return x == y;
    }
    matches!(
        (parse_kernel_bool(a), parse_kernel_bool(b)),
        (Some(x), Some(y)) if x == y
    )
}

// ---------------------------------------------------------------------------
// Running modprobe
// ---------------------------------------------------------------------------

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
        let out = Command::new(&self.program)
            .args(args)
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

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a switch or a restore was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    /// Bad settings.
    #[error(transparent)]
    Settings(#[from] ParseError),
    /// Settings for more than one module.
    #[error("settings name several modules ({modules}): switch one vendor module at a time")]
    MixedModules {
        /// The modules, comma-separated.
        modules: String,
    },
    /// Not running as root.
    #[error("switching KVM module parameters needs root (effective uid {euid}): run it as root, e.g. with sudo")]
    NotRoot {
        /// The effective uid.
        euid: u32,
    },
    /// The software KVM backend.
    #[error("the kvm_pvm backend has no APICv/AVIC/IPIv and no vendor module to reload: use a host with kvm_intel or kvm_amd")]
    PvmBackend,
    /// Not kvm_intel / kvm_amd.
    #[error("`{module}` is not a KVM vendor module: only kvm_intel.* and kvm_amd.* parameters can be switched")]
    NotVendorModule {
        /// The module given.
        module: String,
    },
    /// A vendor module other than the one this host uses.
    #[error("this host's KVM backend is {backend}, not {module}: use {backend}.<parameter>")]
    WrongVendor {
        /// The module given.
        module: String,
        /// The host's vendor module.
        backend: String,
    },
    /// No hardware KVM backend.
    #[error(
        "no kvm_intel/kvm_amd backend on this host ({backend}): load kvm_intel or kvm_amd first"
    )]
    NoVendorBackend {
        /// The detected backend.
        backend: String,
    },
    /// The module is not loaded.
    #[error("{module} is not loaded ({path} missing): load it first with `modprobe {module}`")]
    NotLoaded {
        /// The module.
        module: String,
        /// Its sysfs directory.
        path: PathBuf,
    },
    /// Built into the kernel: cannot be reloaded.
    #[error("{module} is built into the kernel and cannot be reloaded: set {module}.<param>=<value> on the kernel command line and reboot")]
    BuiltIn {
        /// The module.
        module: String,
    },
    /// The parameter does not exist.
    #[error("{module} has no parameter `{param}` (this kernel has: {available}): check the spelling and the kernel version")]
    UnknownParam {
        /// The module.
        module: String,
        /// The parameter asked for.
        param: String,
        /// The parameters that exist, comma-separated.
        available: String,
    },
    /// Open /dev/kvm or VMs hold the module.
    #[error("{module} is in use (refcnt {refcnt}: open /dev/kvm, VMs or dependent modules): stop every VM and /dev/kvm user (qemu, libvirtd, ipivmm run) and retry")]
    InUse {
        /// The module.
        module: String,
        /// `/sys/module/<module>/refcnt`.
        refcnt: u64,
    },
    /// VMs listed in debugfs.
    #[error("VMs are running ({vms}, from {dir}): stop them and retry")]
    VmsRunning {
        /// `pid N (comm) fd M`, comma-separated.
        vms: String,
        /// The debugfs directory.
        dir: PathBuf,
    },
    /// A switch recorded by a process that is still running.
    #[error("pid {pid} has a switch of {module} in progress ({path}): wait for it to finish, or stop it (it restores on exit)")]
    SwitchActive {
        /// Its pid.
        pid: u32,
        /// Its module.
        module: String,
        /// The state file.
        path: PathBuf,
    },
    /// A switch whose process died without restoring.
    #[error("a switch of {module} by pid {pid} (no longer running) was never restored ({path}): run `ipivmm host --restore` first")]
    PendingRestore {
        /// Its pid.
        pid: u32,
        /// Its module.
        module: String,
        /// The state file.
        path: PathBuf,
    },
    /// Reading or writing the state file failed.
    #[error("state file {path}: {source}: check that its directory exists and is writable by root (/run mounted)")]
    StateIo {
        /// The state file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The state file is not ours or is damaged.
    #[error("state file {path} is not valid ({detail}): inspect it, reload the module with the parameters it lists by hand and delete it")]
    StateInvalid {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Reading sysfs failed.
    #[error("reading {path}: {source}: is sysfs mounted?")]
    Sysfs {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `modprobe -r` failed: nothing changed.
    #[error("{source}: nothing was changed; stop every VM and /dev/kvm user and retry")]
    Unload {
        /// The failed command.
        source: RunnerError,
    },
    /// `modprobe -r` returned but the module is still there.
    #[error("`modprobe -r {module}` returned but {module} is still loaded: nothing was changed; retry when no VM is starting")]
    StillLoaded {
        /// The module.
        module: String,
    },
    /// Loading with the new settings failed.
    #[error("{source}; {outcome}")]
    Load {
        /// The failed command.
        source: RunnerError,
        /// What state the host was left in and what to do.
        outcome: String,
    },
    /// A restore could not reload the module: the state file is kept.
    #[error("restoring {module} failed ({detail}): the original values are kept in {path}; fix the cause and run `ipivmm host --restore` again")]
    RestoreFailed {
        /// The module.
        module: String,
        /// Why.
        detail: String,
        /// The state file.
        path: PathBuf,
    },
}

// ---------------------------------------------------------------------------
// The state file
// ---------------------------------------------------------------------------

/// What a switch changed, written before the module is unloaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Always [`STATE_FORMAT`].
    pub format: String,
    /// The vendor module.
    pub module: String,
    /// Every readable parameter of the module before the switch (raw
    /// strings as sysfs printed them).
    pub original: BTreeMap<String, String>,
    /// The settings applied.
    pub settings: Vec<ModuleSetting>,
    /// `kvm` module parameters before the switch (for the report; `kvm`
    /// may be unloaded and reloaded with the vendor module).
    #[serde(default)]
    pub kvm_original: BTreeMap<String, String>,
    /// The process that switched.
    pub pid: u32,
    /// Its start time (`/proc/<pid>/stat` field 22), against pid reuse.
    pub pid_start: Option<u64>,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat`
/// field 22), if the process exists.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and ')': skip past the
    // last ')'; the rest starts at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl State {
    fn new(
        module: &str,
        original: BTreeMap<String, String>,
        settings: &[ModuleSetting],
        kvm_original: BTreeMap<String, String>,
    ) -> Self {
        let pid = std::process::id();
        State {
            format: STATE_FORMAT.to_string(),
            module: module.to_string(),
            original,
            settings: settings.to_vec(),
            kvm_original,
            pid,
            pid_start: process_start(pid),
            timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }

    /// Whether the process that wrote this state is still running (same pid
    /// and, when recorded, same start time).
    pub fn owner_alive(&self) -> bool {
        match (process_start(self.pid), self.pid_start) {
            (None, _) => false,
            (Some(now), Some(then)) => now == then,
            (Some(_), None) => true,
        }
    }

    /// Whether this process wrote it.
    pub fn is_ours(&self) -> bool {
        self.pid == std::process::id() && self.owner_alive()
    }
}

/// Writes `state` to `path` atomically: a temporary file in the same
/// directory, fsync, then rename. On any error the temporary file is
/// removed and `path` is left as it was.
pub fn write_state(path: &Path, state: &State) -> Result<(), SwitchError> {
    let io = |source| SwitchError::StateIo {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.unwrap_or_else(|| "state".into()),
        std::process::id()
    ));
    let json = serde_json::to_vec_pretty(state)
        .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let result = write_and_rename(&tmp, path, &json);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

fn write_and_rename(tmp: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, path)
}

/// Reads a state file; `Ok(None)` when there is none.
pub fn read_state(path: &Path) -> Result<Option<State>, SwitchError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SwitchError::StateIo {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let invalid = |detail: String| SwitchError::StateInvalid {
        path: path.to_path_buf(),
        detail,
    };
    let state: State = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if state.format != STATE_FORMAT {
        return Err(invalid(format!(
            "format {:?}, expected {STATE_FORMAT:?}",
            state.format
        )));
    }
    if !VENDOR_MODULES.contains(&state.module.as_str()) {
        return Err(invalid(format!("module {:?}", state.module)));
    }
    Ok(Some(state))
}

/// Crash recovery: the state file at `path` when the process that wrote it
/// is gone (a switch that was never restored); `Ok(None)` when there is no
/// state file or its owner is still running.
pub fn pending_restore(path: &Path) -> Result<Option<State>, SwitchError> {
    Ok(read_state(path)?.filter(|s| !s.owner_alive()))
}

// ---------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------

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
fn restorable(param: &str, value: &str) -> Result<(), String> {
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
fn restore_params(original: &BTreeMap<String, String>) -> (Vec<(String, String)>, Vec<Skipped>) {
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

// ---------------------------------------------------------------------------
// The module tree
// ---------------------------------------------------------------------------

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
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory
    // of ours.
    unsafe { libc::geteuid() }
}

/// Errors of a reload, by stage.
enum ReloadError {
    Unload(RunnerError),
    StillLoaded,
    Load(RunnerError),
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

    fn module_dir(&self, module: &str) -> PathBuf {
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

    fn check_root(&self) -> Result<(), SwitchError> {
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
    fn check_in_use(&self, module: &str) -> Result<VmCheck, SwitchError> {
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

fn remove_state(path: &Path) -> Result<(), SwitchError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SwitchError::StateIo {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn reload_detail(e: ReloadError) -> String {
    match e {
        ReloadError::Unload(r) | ReloadError::Load(r) => r.to_string(),
        ReloadError::StillLoaded => "`modprobe -r` returned but the module is still loaded".into(),
    }
}

/// `"<pid>-<fd>"` to `pid P (comm) fd F`; `None` for other names.
fn vm_dir_name(name: &str) -> Option<String> {
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

// ---------------------------------------------------------------------------
// The RAII guard
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// A fake module tree
// ---------------------------------------------------------------------------

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
mod tests;
