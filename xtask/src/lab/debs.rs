//! The guest's kernel and busybox: pinned Debian bookworm packages,
//! downloaded into the cache with `apt-get download` and unpacked with
//! `dpkg-deb`. A pin the registry no longer serves falls back to the newest
//! of the same series, with a warning the verdict repeats.
use super::host::{log, run, Work};
use anyhow::{bail, Context, Result};
use std::cmp::Ordering;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A pinned package: name, version, and the `apt-cache search` pattern of
/// its series (None: no fallback).
pub struct Pin {
    pub package: &'static str,
    pub version: &'static str,
    pub series: Option<&'static str>,
}

/// The guest kernel (its modules: kvm, kvm-amd, kvm-intel, virtio, libata).
pub const KERNEL: Pin = Pin {
    package: "linux-image-6.1.0-50-amd64",
    version: "6.1.176-1",
    series: Some(r"^linux-image-6\.1\.0-[0-9]+-amd64$"),
};

/// The guest's shell and tools (and the initramfs's cpio).
pub const BUSYBOX: Pin = Pin {
    package: "busybox-static",
    version: "1:1.35.0-4+deb12u1+b1",
    series: None,
};

/// The unpacked kernel and busybox.
pub struct Unpacked {
    /// The kernel package's file name (versions.txt).
    pub kernel_deb: String,
    /// The busybox package's file name.
    pub busybox_deb: String,
    /// `boot/vmlinuz-*` of the kernel package.
    pub vmlinuz: PathBuf,
    /// The kernel release (`6.1.0-50-amd64`).
    pub release: String,
    /// The root of the unpacked kernel package.
    pub kernel_root: PathBuf,
    /// The static busybox binary.
    pub busybox: PathBuf,
}

/// Downloads (when not cached) and unpacks the kernel and busybox.
pub fn fetch(work: &mut Work, cache: &Path) -> Result<Unpacked> {
    let debs = cache.join("debs");
    fs::create_dir_all(&debs)?;
    let kdeb = fetch_deb(work, &debs, &KERNEL)?;
    let bdeb = fetch_deb(work, &debs, &BUSYBOX)?;
    let kroot = unpack(cache, &kdeb)?;
    let broot = unpack(cache, &bdeb)?;
    let vmlinuz = first_with_prefix(&kroot.join("boot"), "vmlinuz-", "")?
        .with_context(|| format!("no boot/vmlinuz-* in {}", kdeb.display()))?;
    let release = file_name(&vmlinuz)
        .strip_prefix("vmlinuz-")
        .unwrap_or_default()
        .to_string();
    Ok(Unpacked {
        kernel_deb: file_name(&kdeb),
        busybox_deb: file_name(&bdeb),
        vmlinuz,
        release,
        kernel_root: kroot,
        busybox: broot.join("bin/busybox"),
    })
}

/// The busybox of an earlier fetch (the Bochs lab given `--initrd` packs
/// its extra archive with it).
pub fn cached_busybox(cache: &Path) -> Result<PathBuf> {
    let root = cache.join("root");
    let dir = first_with_prefix(&root, "busybox-static_", "")?;
    match dir.map(|d| d.join("bin/busybox")) {
        Some(b) if b.is_file() => Ok(b),
        _ => bail!(
            "no busybox in {} (`cargo xtask lab initrd` fetches it)",
            cache.display()
        ),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The first entry of `dir` (sorted) named `prefix*suffix`.
fn first_with_prefix(dir: &Path, prefix: &str, suffix: &str) -> Result<Option<PathBuf>> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut names: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let n = file_name(p);
            n.starts_with(prefix) && n.ends_with(suffix)
        })
        .collect();
    names.sort();
    Ok(names.into_iter().next())
}

fn cached_deb(debs: &Path, package: &str) -> Result<Option<PathBuf>> {
    first_with_prefix(debs, &format!("{package}_"), ".deb")
}

/// `apt-get download` into `debs`, quietly; whether it worked.
fn download(debs: &Path, what: &str) -> bool {
    Command::new("apt-get")
        .args(["download", "-qq", what])
        .current_dir(debs)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The cached package of `pin`, downloaded first when missing.
fn fetch_deb(work: &mut Work, debs: &Path, pin: &Pin) -> Result<PathBuf> {
    if let Some(p) = cached_deb(debs, pin.package)? {
        return Ok(p);
    }
    let exact = format!("{}={}", pin.package, pin.version);
    if !download(debs, &exact) {
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        download(debs, &exact);
    }
    if let Some(p) = cached_deb(debs, pin.package)? {
        return Ok(p);
    }
    let Some(series) = pin.series else {
        bail!("cannot download {exact}");
    };
    let found = Command::new("apt-cache")
        .args(["search", "--names-only", series])
        .output()
        .context("cannot run apt-cache")?;
    let mut names: Vec<String> = String::from_utf8_lossy(&found.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort_by(|a, b| version_order(a, b));
    let Some(alt) = names.pop() else {
        bail!("no package matches {series} in the Debian index");
    };
    work.warn(format!(
        "pinned {exact} is gone from the registry; used {alt}"
    ));
    if !download(debs, &alt) {
        bail!("apt-get download {alt} failed");
    }
    cached_deb(debs, &alt)?.with_context(|| format!("apt-get download {alt} left no .deb"))
}

/// Unpacks a package once into `cache/root/<its file name>`.
fn unpack(cache: &Path, deb: &Path) -> Result<PathBuf> {
    let stem = file_name(deb).trim_end_matches(".deb").to_string();
    let root = cache.join("root").join(stem);
    if !root.join(".done").exists() {
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)?;
        log(format!("unpacking {}", file_name(deb)));
        run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
        fs::write(root.join(".done"), "")?;
    }
    Ok(root)
}

/// `sort -V` of package names: runs of digits compare as numbers.
pub fn version_order(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, _) => return Ordering::Less,
            (_, None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let n = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (n(a), n(b));
                let trim = |s: &[u8]| -> Vec<u8> {
                    let t: Vec<u8> = s.iter().copied().skip_while(|&c| c == b'0').collect();
                    t
                };
                let (da, db) = (trim(&a[..na]), trim(&b[..nb]));
                let o = da.len().cmp(&db.len()).then_with(|| da.cmp(&db));
                if o != Ordering::Equal {
                    return o;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_kernel_of_the_series_sorts_last() {
        let mut v = [
            "linux-image-6.1.0-9-amd64",
            "linux-image-6.1.0-50-amd64",
            "linux-image-6.1.0-10-amd64",
        ];
        v.sort_by(|a, b| version_order(a, b));
        assert_eq!(v.last(), Some(&"linux-image-6.1.0-50-amd64"));
        assert_eq!(version_order("a-01", "a-1"), Ordering::Equal);
    }
}
