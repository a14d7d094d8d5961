//! Kernel modules in load order: the closure of the modules the guest
//! needs under each `.ko`'s `depends=` (its `.modinfo` section), every
//! dependency before the module that needs it.
use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The modules the QEMU guest loads (the vendor module is picked in the
/// guest from /proc/cpuinfo).
pub const GUEST: &[&str] = &["kvm-amd", "kvm-intel", "virtio_blk", "virtio_pci"];
/// The ATA disk's drivers (Bochs has no virtio; Debian builds libata as modules).
pub const ATA: &[&str] = &["ata_piix", "sd_mod"];

/// A module's name as the kernel compares it (`kvm-amd` is `kvm_amd`).
fn canonical(name: &str) -> String {
    name.replace('-', "_")
}

/// Every `.ko` under `dir` by canonical name (the first in path order).
fn index(dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "ko"))
        .collect();
    if paths.is_empty() {
        bail!("no kernel modules under {}", dir.display());
    }
    paths.sort();
    let mut by_name = BTreeMap::new();
    for p in paths {
        if let Some(stem) = p.file_stem() {
            by_name
                .entry(canonical(&stem.to_string_lossy()))
                .or_insert(p);
        }
    }
    Ok(by_name)
}

/// The `depends=` of a module file.
pub fn depends(ko: &Path) -> Result<Vec<String>> {
    let data = fs::read(ko).with_context(|| format!("cannot read {}", ko.display()))?;
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

/// The module files of `wanted` and their dependencies under `dir`, each
/// after everything it depends on.
pub fn load_order(dir: &Path, wanted: &[&str]) -> Result<Vec<PathBuf>> {
    let by_name = index(dir)?;
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    fn visit(
        name: &str,
        dir: &Path,
        by_name: &BTreeMap<String, PathBuf>,
        seen: &mut HashSet<String>,
        order: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let key = canonical(name);
        if !seen.insert(key.clone()) {
            return Ok(());
        }
        let Some(path) = by_name.get(&key) else {
            bail!("module {name} not found under {}", dir.display());
        };
        for d in depends(path)? {
            visit(&d, dir, by_name, seen, order)?;
        }
        order.push(path.clone());
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
}
