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

mod error;
pub mod report;
mod runner;
mod settings;
mod state;
mod switch;
mod tree;

pub use error::SwitchError;
pub use runner::{load_command, FakeModprobe, Modprobe, ModprobeRunner, RunnerError};
pub use settings::{
    param_values_equal, parse_kernel_bool, parse_kernel_int, parse_param_values, parse_settings,
    ModuleSetting, ParseError,
};
pub use state::{pending_restore, read_state, write_state, State};
pub use switch::{Applied, Mismatch, Restored, Skipped, Switched};
pub use tree::{effective_uid, ModuleTree, Preflight, VmCheck};

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

#[cfg(test)]
use {
    crate::facts::KvmBackend,
    settings::MAX_VALUE_LEN,
    std::collections::BTreeMap,
    std::path::{Path, PathBuf},
    std::process::Command,
    std::sync::Arc,
    switch::{restorable, restore_params},
    tree::vm_dir_name,
};

#[cfg(test)]
mod tests;
