//! Why a switch or a restore was refused or failed: one-line errors naming
//! the fix.

use std::path::PathBuf;

use super::runner::RunnerError;
use super::settings::ParseError;

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
