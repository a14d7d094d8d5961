//! Where KVM keeps a vCPU's exit reason, found in the kernel's BTF, so that
//! the raw `kvm_exit` program (`on_exit_raw`) reads it from the vCPU pointer
//! of the tracepoint's arguments instead of from a record built for it.
//!
//! `trace_kvm_exit(vcpu, isa)` is checked against its prototype
//! (`btf_trace_kvm_exit` in kvm's BTF), and the reason is read where the
//! vendor's `get_exit_info` reads it: `vcpu_vmx`'s `exit_reason` (kvm_intel;
//! under a member on newer kernels), `vcpu_svm`'s `vmcb` then the VMCB's
//! `control.exit_code` (kvm_amd). Every offset comes from BTF; without
//! module BTF, or with a layout not like these, the record-reading program
//! counts instead and the reason is given.

use std::path::Path;
use std::sync::OnceLock;

use btf_rs::{Backend, Btf, Struct, Type};

use crate::exit_reasons::Isa;

/// How `on_exit_raw` reaches the exit reason from the vCPU pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonAt {
    /// A u32 at `vcpu + exit_reason` (kvm_intel).
    Vmx {
        /// Byte offset of `exit_reason` in `struct vcpu_vmx`.
        exit_reason: u32,
    },
    /// A u32 at `*(vcpu + vmcb) + exit_code` (kvm_amd).
    Svm {
        /// Byte offset of the `vmcb` pointer in `struct vcpu_svm`.
        vmcb: u32,
        /// Byte offset of `control.exit_code` in `struct vmcb`.
        exit_code: u32,
    },
}

impl ReasonAt {
    /// (hops, first offset, second offset) as the CONFIG map holds them.
    pub fn hops(self) -> (u32, u32, u32) {
        match self {
            Self::Vmx { exit_reason } => (1, exit_reason, 0),
            Self::Svm { vmcb, exit_code } => (2, vmcb, exit_code),
        }
    }

    /// [`Self::find`] in `/sys/kernel/btf`, once per process and ISA: the
    /// kernel's BTF cannot change under a running process, and before Linux
    /// 6.15 (no mmap of sysfs BTF) finding it parses all of vmlinux's.
    pub fn find_in_kernel(isa: Isa) -> Result<Self, String> {
        static FOUND: [OnceLock<Result<ReasonAt, String>>; 2] = [OnceLock::new(), OnceLock::new()];
        let i = usize::from(isa == Isa::Svm);
        FOUND[i]
            .get_or_init(|| Self::find(Path::new("/sys/kernel/btf"), isa))
            .clone()
    }

    /// Finds it for `isa`'s vendor module in the BTF under `root`
    /// (`/sys/kernel/btf`), or says why not.
    pub fn find(root: &Path, isa: Isa) -> Result<Self, String> {
        let base = kernel_btf(root)?;
        let module = |name: &str| -> Result<Option<Btf>, String> {
            let path = root.join(name);
            if !path.exists() {
                return Ok(None);
            }
            Btf::from_split_file(&path, &base)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        // kvm.ko's BTF, or the kernel's when KVM is built in.
        let kvm = module("kvm")?;
        check_prototype(kvm.as_ref().unwrap_or(&base))?;
        let (name, vendor) = match isa {
            Isa::Vmx => ("kvm_intel", module("kvm_intel")?),
            Isa::Svm => ("kvm_amd", module("kvm_amd")?),
        };
        let btf = vendor.as_ref().unwrap_or(&base);
        let found = match isa {
            Isa::Vmx => vmx(btf),
            Isa::Svm => svm(btf),
        };
        found.map_err(|why| match vendor {
            Some(_) => format!("{name}'s BTF: {why}"),
            None => format!("no BTF for {name} in {} ({why})", root.display()),
        })
    }
}

/// The kernel's BTF (`vmlinux` under `root`). Mmapped: its 5 MB are read
/// where needed, not parsed whole (sysfs maps BTF from Linux 6.15 on;
/// before, it is read and parsed).
fn kernel_btf(root: &Path) -> Result<Btf, String> {
    let vmlinux = root.join("vmlinux");
    Btf::from_file_with_backend(&vmlinux, Backend::Mmap)
        .or_else(|_| Btf::from_file(&vmlinux))
        .map_err(|e| format!("{}: {e}", vmlinux.display()))
}

/// The byte offset of `member` in the kernel's `struct name` (vmlinux
/// BTF under `btf_root`): for stand-ins of the vendor structs in tests and
/// the cost example, which attach the raw program to a syscall's
/// tracepoint (`pt_regs`' `orig_ax` is its number).
pub fn kernel_offset(btf_root: &Path, name: &str, field: &str) -> Result<u32, String> {
    let btf = kernel_btf(btf_root)?;
    let s = struct_named(&btf, name)?;
    member(&btf, &s, field, 0)
        .map(|m| m.0)
        .ok_or_else(|| format!("no member {name}.{field}"))
}

/// `trace_kvm_exit` passes (struct kvm_vcpu *, u32): what on_exit_raw reads.
fn check_prototype(btf: &Btf) -> Result<(), String> {
    let bad = |why: &str| Err(format!("btf_trace_kvm_exit: {why}"));
    let Some(Type::Typedef(t)) = btf
        .resolve_types_by_name("btf_trace_kvm_exit")
        .ok()
        .and_then(|v| v.into_iter().next())
    else {
        return bad("not in KVM's BTF");
    };
    let Ok(Type::Ptr(p)) = btf.resolve_chained_type(&t) else {
        return bad("not a function pointer");
    };
    let Ok(Type::FuncProto(f)) = btf.resolve_chained_type(&p) else {
        return bad("not a function pointer");
    };
    // The first parameter is the probe's data (void *).
    let [_, vcpu, isa] = f.parameters.as_slice() else {
        return bad("not (vcpu, isa)");
    };
    let vcpu_ok = match btf.resolve_chained_type(vcpu).map(|t| strip(btf, t)) {
        Ok(Type::Ptr(p)) => matches!(
            btf.resolve_chained_type(&p).map(|t| strip(btf, t)),
            Ok(Type::Struct(s)) if btf.resolve_name(&s).is_ok_and(|n| n == "kvm_vcpu")
        ),
        _ => false,
    };
    let isa_ok = matches!(
        btf.resolve_chained_type(isa).map(|t| strip(btf, t)),
        Ok(Type::Int(i)) if i.size() == 4
    );
    if vcpu_ok && isa_ok {
        Ok(())
    } else {
        bad("its arguments are not (struct kvm_vcpu *, u32)")
    }
}

/// The type under typedefs and qualifiers.
fn strip(btf: &Btf, mut t: Type) -> Type {
    for _ in 0..16 {
        let next = match &t {
            Type::Typedef(x) => btf.resolve_chained_type(x),
            Type::Const(x) => btf.resolve_chained_type(x),
            Type::Volatile(x) => btf.resolve_chained_type(x),
            Type::Restrict(x) => btf.resolve_chained_type(x),
            Type::TypeTag(x) => btf.resolve_chained_type(x),
            _ => return t,
        };
        match next {
            Ok(n) => t = n,
            Err(_) => return t,
        }
    }
    t
}

/// The struct `name` with its members (not a forward declaration).
fn struct_named(btf: &Btf, name: &str) -> Result<Struct, String> {
    btf.resolve_types_by_name(name)
        .unwrap_or_default()
        .into_iter()
        .find_map(|t| match t {
            Type::Struct(s) if !s.members.is_empty() => Some(s),
            _ => None,
        })
        .ok_or_else(|| format!("no struct {name}"))
}

/// Byte offset and type of member `name` of `s`, looking into unnamed and
/// named struct/union members down to `depth` levels (the member may have
/// moved into one: `vcpu_vmx.vt.exit_reason` on newer kernels). A bitfield
/// is not a place to read a u32 from.
pub(crate) fn member(btf: &Btf, s: &Struct, name: &str, depth: u32) -> Option<(u32, Type)> {
    for m in &s.members {
        if m.bitfield_size().is_some_and(|b| b != 0) || m.bit_offset() % 8 != 0 {
            continue;
        }
        let here = m.bit_offset() / 8;
        let Ok(t) = btf.resolve_chained_type(m).map(|t| strip(btf, t)) else {
            continue;
        };
        if btf.resolve_name(m).is_ok_and(|n| n == name) {
            return Some((here, t));
        }
        if depth > 0 {
            if let Type::Struct(inner) | Type::Union(inner) = &t {
                if let Some((off, t)) = member(btf, inner, name, depth - 1) {
                    return Some((here + off, t));
                }
            }
        }
    }
    None
}

/// A member that is a u32 (or a union/struct of 4 bytes: `union
/// vmx_exit_reason`).
fn u32_member(btf: &Btf, s: &Struct, name: &str, depth: u32) -> Result<u32, String> {
    match member(btf, s, name, depth) {
        Some((off, Type::Int(i))) if i.size() >= 4 => Ok(off),
        Some((off, Type::Struct(u) | Type::Union(u))) if u.size() == 4 => Ok(off),
        Some(_) => Err(format!("{name} is not a 32-bit field")),
        None => Err(format!("no member {name}")),
    }
}

fn vmx(btf: &Btf) -> Result<ReasonAt, String> {
    let vcpu = struct_named(btf, "vcpu_vmx")?;
    let exit_reason = u32_member(btf, &vcpu, "exit_reason", 2)?;
    Ok(ReasonAt::Vmx { exit_reason })
}

fn svm(btf: &Btf) -> Result<ReasonAt, String> {
    let vcpu = struct_named(btf, "vcpu_svm")?;
    let vmcb = match member(btf, &vcpu, "vmcb", 0) {
        Some((off, Type::Ptr(_))) => off,
        Some(_) => return Err("vcpu_svm.vmcb is not a pointer".into()),
        None => return Err("no member vcpu_svm.vmcb".into()),
    };
    let vmcb_struct = struct_named(btf, "vmcb")?;
    let control = match member(btf, &vmcb_struct, "control", 0) {
        Some((off, Type::Struct(c))) => (off, c),
        _ => return Err("no struct member vmcb.control".into()),
    };
    // exit_code is a u32 (and exit_code_hi) or a u64: its low half either way.
    let exit_code = match member(btf, &control.1, "exit_code", 0) {
        Some((off, Type::Int(i))) if i.size() >= 4 => control.0 + off,
        _ => return Err("no integer vmcb.control.exit_code".into()),
    };
    Ok(ReasonAt::Svm { vmcb, exit_code })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_btf() -> Option<Btf> {
        match kernel_btf(Path::new("/sys/kernel/btf")) {
            Ok(b) => Some(b),
            Err(e) => {
                ipivmm_testkit::skip(
                    "reason_at",
                    ipivmm_testkit::Need::Setup,
                    &format!("no kernel BTF: {e}"),
                );
                None
            }
        }
    }

    #[test]
    fn fixed_layouts_read_as_the_c_compiler_lays_them_out() {
        let Some(btf) = host_btf() else { return };
        let list = struct_named(&btf, "list_head").unwrap();
        assert_eq!(member(&btf, &list, "next", 0).map(|m| m.0), Some(0));
        assert_eq!(member(&btf, &list, "prev", 0).map(|m| m.0), Some(8));
        assert!(member(&btf, &list, "nothing", 2).is_none());
        let head = struct_named(&btf, "callback_head").unwrap();
        assert_eq!(member(&btf, &head, "func", 0).map(|m| m.0), Some(8));
    }

    #[test]
    fn the_kvm_exit_prototype_is_vcpu_and_isa_where_kvm_is_in_the_kernel() {
        let Some(btf) = host_btf() else { return };
        let in_kernel = btf
            .resolve_types_by_name("btf_trace_kvm_exit")
            .is_ok_and(|v| !v.is_empty());
        if !in_kernel {
            ipivmm_testkit::skip(
                "reason_at",
                ipivmm_testkit::Need::Setup,
                "KVM is a module here: its BTF is checked by ReasonAt::find",
            );
            return;
        }
        check_prototype(&btf).unwrap();
    }

    #[test]
    fn member_offsets_agree_with_bpftool() {
        // An independent reader of the same BTF: bpftool's raw dump.
        let Some(btf) = host_btf() else { return };
        let out = std::process::Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "raw",
            ])
            .output();
        let Some(out) = out.ok().filter(|o| o.status.success()) else {
            ipivmm_testkit::skip(
                "reason_at",
                ipivmm_testkit::Need::Setup,
                "bpftool not installed (apt-get install bpftool)",
            );
            return;
        };
        let dump = String::from_utf8_lossy(&out.stdout);
        // `[N] STRUCT 'task_struct' size=... vlen=...` then its members
        // `\t'pid' type_id=.. bits_offset=..`.
        let mut lines = dump
            .lines()
            .skip_while(|l| !l.contains("] STRUCT 'task_struct' "));
        lines.next().expect("task_struct in the dump");
        let mut checked = 0;
        for l in lines.take_while(|l| l.starts_with('\t')) {
            let Some(name) = l.split('\'').nth(1) else {
                continue;
            };
            let Some(bits) = l
                .split("bits_offset=")
                .nth(1)
                .and_then(|b| b.split_whitespace().next()?.parse::<u32>().ok())
            else {
                continue;
            };
            if name.is_empty() || bits % 8 != 0 || l.contains("bitfield_size=") {
                continue;
            }
            let task = struct_named(&btf, "task_struct").unwrap();
            assert_eq!(
                member(&btf, &task, name, 0).map(|m| m.0),
                Some(bits / 8),
                "task_struct.{name}"
            );
            checked += 1;
        }
        assert!(checked > 50, "only {checked} members compared");
    }

    #[test]
    fn a_host_without_the_vendor_module_says_why() {
        let dir = std::env::temp_dir().join(format!("ipivmm-btf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = ReasonAt::find(&dir, Isa::Svm).unwrap_err();
        assert!(err.contains("vmlinux"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        if Path::new("/sys/kernel/btf/vmlinux").exists()
            && !Path::new("/sys/kernel/btf/kvm_amd").exists()
        {
            let err = ReasonAt::find(Path::new("/sys/kernel/btf"), Isa::Svm).unwrap_err();
            assert!(
                err.contains("kvm_amd") || err.contains("btf_trace_kvm_exit"),
                "{err}"
            );
        }
    }
}
