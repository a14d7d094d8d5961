//! Kernel modules in load order: the closure of the modules the guest
//! needs under each `.ko`'s `depends=` (its `.modinfo` section), every
//! dependency before the module that needs it. Modules may be compressed
//! (`.ko.xz`, `.ko.zst`, `.ko.gz`: Debian's since 6.x) and some built in
//! (`modules.builtin`: a developer's kernel often has virtio built in).
use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules the QEMU guest loads (the vendor module is picked in the
/// guest from /proc/cpuinfo).
pub const GUEST: &[&str] = &["kvm-amd", "kvm-intel", "virtio_blk", "virtio_pci"];
/// The ATA disk's drivers (Bochs has no virtio; Debian builds libata as modules).
pub const ATA: &[&str] = &["ata_piix", "sd_mod"];

/// A module's name as the kernel compares it (`kvm-amd` is `kvm_amd`).
fn canonical(name: &str) -> String {
    name.replace('-', "_")
}

/// A module file's suffixes and the command that decompresses them.
const SUFFIXES: &[(&str, Option<&str>)] = &[
    (".ko", None),
    (".ko.xz", Some("xz")),
    (".ko.zst", Some("zstd")),
    (".ko.gz", Some("gzip")),
];

/// A module file's name without its suffix (`kvm-amd` of `kvm-amd.ko.xz`)
/// and its decompressor; None when it is no module.
fn module_name(path: &Path) -> Option<(String, Option<&'static str>)> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    SUFFIXES.iter().find_map(|(suffix, tool)| {
        name.strip_suffix(suffix)
            .filter(|n| !n.is_empty())
            .map(|n| (n.to_string(), *tool))
    })
}

/// A module as the guest loads it.
pub struct Module {
    /// Its file name without the suffix (`kvm-amd`): the guest's
    /// /lab/modules/NAME.ko.
    pub name: String,
    /// Its file, maybe compressed.
    pub path: PathBuf,
}

impl Module {
    /// The module's ELF object, decompressed.
    pub fn read(&self) -> Result<Vec<u8>> {
        read_ko(&self.path)
    }
}

/// A module file's ELF object, decompressed with xz, zstd or gzip when its
/// name says so.
fn read_ko(ko: &Path) -> Result<Vec<u8>> {
    match module_name(ko).and_then(|(_, tool)| tool) {
        None => fs::read(ko).with_context(|| format!("cannot read {}", ko.display())),
        Some(tool) => {
            let out = Command::new(tool)
                .arg("-dc")
                .arg(ko)
                .output()
                .with_context(|| format!("cannot run {tool} for {} (install it)", ko.display()))?;
            if !out.status.success() {
                bail!("{tool} -dc {} failed", ko.display());
            }
            Ok(out.stdout)
        }
    }
}

/// Every module under `dir` by canonical name (the first in path order).
fn index(dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.into_path())
        .filter(|p| p.is_file() && module_name(p).is_some())
        .collect();
    if paths.is_empty() {
        bail!("no kernel modules under {}", dir.display());
    }
    paths.sort();
    let mut by_name = BTreeMap::new();
    for p in paths {
        if let Some((name, _)) = module_name(&p) {
            by_name.entry(canonical(&name)).or_insert(p);
        }
    }
    Ok(by_name)
}

/// The canonical names of the modules `modules.builtin` in `dir` lists
/// (none when it has none).
fn builtin(dir: &Path) -> HashSet<String> {
    fs::read_to_string(dir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| module_name(Path::new(l)))
        .map(|(n, _)| canonical(&n))
        .collect()
}

/// The `depends=` of a module file.
pub fn depends(ko: &Path) -> Result<Vec<String>> {
    let data = read_ko(ko)?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{}: not an ELF object", ko.display()))?;
    let Some(section) = file.section_by_name(".modinfo") else {
        bail!("{}: no .modinfo section", ko.display());
    };
    let info = section
        .data()
        .with_context(|| format!("{}: unreadable .modinfo", ko.display()))?;
    Ok(modinfo_depends(info))
}

/// The `depends=` entries of a `.modinfo` (NUL-separated `key=value`).
fn modinfo_depends(info: &[u8]) -> Vec<String> {
    info.split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(b"depends="))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The modules of `wanted` and their dependencies under `dir` (a kernel's
/// lib/modules/RELEASE), each after everything it depends on; those the
/// kernel has built in (its `modules.builtin`) are left out.
pub fn load_order(dir: &Path, wanted: &[&str]) -> Result<Vec<Module>> {
    let by_name = index(dir)?;
    let mut seen = builtin(dir);
    let mut order = Vec::new();
    fn visit(
        name: &str,
        dir: &Path,
        by_name: &BTreeMap<String, PathBuf>,
        seen: &mut HashSet<String>,
        order: &mut Vec<Module>,
    ) -> Result<()> {
        let key = canonical(name);
        if !seen.insert(key.clone()) {
            return Ok(());
        }
        let Some(path) = by_name.get(&key) else {
            bail!(
                "module {name} not found under {} (nor built in)",
                dir.display()
            );
        };
        for d in depends(path)? {
            visit(&d, dir, by_name, seen, order)?;
        }
        let (name, _) = module_name(path).context("a module's name")?;
        order.push(Module {
            name,
            path: path.clone(),
        });
        Ok(())
    }
    for m in wanted {
        visit(m, dir, &by_name, &mut seen, &mut order)?;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_of_a_modinfo() {
        let info = b"license=GPL\0depends=kvm,ccp\0retpoline=Y\0name=kvm_amd\0";
        assert_eq!(modinfo_depends(info), ["kvm", "ccp"]);
        assert!(modinfo_depends(b"depends=\0name=kvm\0").is_empty());
        assert_eq!(canonical("kvm-amd"), "kvm_amd");
    }

    #[test]
    fn compressed_modules_are_named_without_their_suffix() {
        let n = |p: &str| module_name(Path::new(p));
        assert_eq!(n("a/kvm-amd.ko"), Some(("kvm-amd".into(), None)));
        assert_eq!(n("a/kvm-amd.ko.xz"), Some(("kvm-amd".into(), Some("xz"))));
        assert_eq!(n("kvm.ko.zst"), Some(("kvm".into(), Some("zstd"))));
        assert_eq!(n("a/modules.order"), None);
        assert_eq!(n("a/.ko"), None);
    }

    /// A Debian 6.12-like tree: compressed modules, virtio_pci built in.
    #[test]
    fn builtin_modules_are_left_out_and_compressed_ones_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fs::create_dir_all(dir.join("kernel")).unwrap();
        fs::write(
            dir.join("modules.builtin"),
            "kernel/drivers/virtio/virtio_pci.ko\n",
        )
        .unwrap();
        let ko = dir.join("kernel/virtio_blk.ko");
        fs::write(&ko, b"not an ELF object").unwrap();
        assert!(load_order(dir, &["virtio_pci"]).unwrap().is_empty());
        let e = format!("{:#}", load_order(dir, &["nosuch"]).err().unwrap());
        assert!(
            e.contains("module nosuch not found under") && e.contains("(nor built in)"),
            "{e}"
        );
        // Compressed as Debian ships them: read back decompressed.
        let status = Command::new("xz").arg("-k").arg(&ko).status().unwrap();
        assert!(status.success());
        assert_eq!(
            read_ko(&dir.join("kernel/virtio_blk.ko.xz")).unwrap(),
            b"not an ELF object"
        );
    }
}
