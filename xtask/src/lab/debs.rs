//! The guest's kernel and busybox: pinned Debian bookworm packages,
//! downloaded into the cache with `apt-get download` and unpacked with
//! `dpkg-deb`. A pin the registry no longer serves falls back to the newest
//! of the same series, with a warning the verdict repeats. `--kernel` gives
//! another kernel ([`GuestKernel`]): a Debian linux-image package, or a
//! bzImage with its modules.
use super::host::{files, log, output, run, Work};
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

/// The guest's kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestKernel {
    /// [`KERNEL`], downloaded.
    Pinned,
    /// A Debian linux-image package (boot/vmlinuz-*, its modules inside).
    Deb(PathBuf),
    /// A bzImage and its modules: `make modules_install
    /// INSTALL_MOD_PATH=DIR`'s DIR, or its lib/modules/RELEASE.
    Image { image: PathBuf, modules: PathBuf },
}

impl GuestKernel {
    /// `--kernel` and `--modules` as given: a `.deb` alone, or a bzImage
    /// with its modules.
    pub fn from_args(kernel: Option<&Path>, modules: Option<&Path>) -> Result<Self> {
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        match (kernel, modules) {
            (None, None) => Ok(Self::Pinned),
            (None, Some(_)) => bail!("--modules goes with --kernel BZIMAGE"),
            (Some(k), m) if k.extension().is_some_and(|x| x == "deb") => match m {
                None => Ok(Self::Deb(abs(k))),
                Some(_) => bail!("--kernel {}: a .deb has its modules inside; drop --modules", k.display()),
            },
            (Some(k), Some(m)) => Ok(Self::Image {
                image: abs(k),
                modules: abs(m),
            }),
            (Some(k), None) => bail!(
                "--kernel {}: a bzImage needs --modules DIR (make modules_install's INSTALL_MOD_PATH), or give a linux-image .deb",
                k.display()
            ),
        }
    }
}

/// The unpacked kernel and busybox.
pub struct Unpacked {
    /// What the kernel came from (versions.txt): the package's file name,
    /// or the bzImage's path.
    pub kernel_deb: String,
    /// The busybox package's file name.
    pub busybox_deb: String,
    /// The kernel image (the package's `boot/vmlinuz-*`, or the bzImage).
    pub vmlinuz: PathBuf,
    /// The kernel's lib/modules/RELEASE.
    pub modules: PathBuf,
    /// The static busybox binary.
    pub busybox: PathBuf,
}

/// Downloads (when not cached) and unpacks busybox and the kernel
/// (`kernel`: the pinned one downloaded, a package unpacked, or a bzImage
/// and its modules checked against each other).
pub fn fetch(work: &mut Work, cache: &Path, kernel: &GuestKernel) -> Result<Unpacked> {
    let debs = cache.join("debs");
    let _lock = lock(cache)?;
    let bdeb = fetch_deb(work, &debs, &BUSYBOX)?;
    let broot = unpack(cache, &bdeb)?;
    let (kernel_deb, vmlinuz, modules) = match kernel {
        GuestKernel::Pinned | GuestKernel::Deb(_) => {
            let kdeb = match kernel {
                GuestKernel::Deb(d) => d.clone(),
                _ => fetch_deb(work, &debs, &KERNEL)?,
            };
            let kroot = unpack(cache, &kdeb)?;
            let vmlinuz = files(&kroot.join("boot"), "vmlinuz-", "")
                .into_iter()
                .next()
                .with_context(|| format!("no boot/vmlinuz-* in {}", kdeb.display()))?;
            let release = file_name(&vmlinuz)
                .strip_prefix("vmlinuz-")
                .unwrap_or_default()
                .to_string();
            let modules = modules_dir(&kroot, &release)
                .with_context(|| format!("no lib/modules/{release} in {}", kdeb.display()))?;
            (file_name(&kdeb), vmlinuz, modules)
        }
        GuestKernel::Image { image, modules } => {
            let modules = release_dir(modules)?;
            let release = file_name(&modules);
            match bzimage_release(image)? {
                Some(r) if r == release => {}
                Some(r) => bail!(
                    "--kernel {} is {r}, --modules {} has {release}: give the modules of that build",
                    image.display(),
                    modules.display()
                ),
                None => bail!("--kernel {}: not a bzImage (no Linux boot header)", image.display()),
            }
            (
                format!("{} ({release})", image.display()),
                image.clone(),
                modules,
            )
        }
    };
    Ok(Unpacked {
        kernel_deb,
        busybox_deb: file_name(&bdeb),
        vmlinuz,
        modules,
        busybox: broot.join("bin/busybox"),
    })
}

/// The lab's cache: `IPIVMM_LAB_CACHE`, else ~/.cache/ipivmm-lab (or under
/// `XDG_CACHE_HOME`).
pub fn cache_dir() -> Result<PathBuf> {
    Ok(
        match std::env::var_os("IPIVMM_LAB_CACHE").filter(|c| !c.is_empty()) {
            Some(c) => PathBuf::from(c),
            None => std::env::var_os("XDG_CACHE_HOME")
                .filter(|c| !c.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .context("no HOME for the cache (set IPIVMM_LAB_CACHE)")?
                .join("ipivmm-lab"),
        },
    )
}

/// The cache's packages, created, locked while the returned file is open:
/// two passes may share the cache at once (CI runs the Bochs smoke beside
/// the QEMU passes), one downloads and unpacks, the other waits for it.
pub fn lock(cache: &Path) -> Result<fs::File> {
    fs::create_dir_all(cache.join("debs"))?;
    let lock_path = cache.join(".fetch.lock");
    let lock = fs::File::create(&lock_path)?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", lock_path.display()))?;
    Ok(lock)
}

/// A kernel's lib/modules/RELEASE under the root `root` of its package
/// (Debian's since trixie are under usr/lib/modules).
pub fn modules_dir(root: &Path, release: &str) -> Option<PathBuf> {
    ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(release))
        .find(|d| d.is_dir())
}

/// `--modules DIR`'s lib/modules/RELEASE: DIR itself when it holds
/// `kernel/` or `modules.builtin`, else the one release under DIR's
/// lib/modules or usr/lib/modules.
fn release_dir(dir: &Path) -> Result<PathBuf> {
    if dir.join("kernel").is_dir() || dir.join("modules.builtin").is_file() {
        return Ok(dir.to_path_buf());
    }
    let mut found = Vec::new();
    for d in ["lib/modules", "usr/lib/modules"] {
        if let Ok(rd) = fs::read_dir(dir.join(d)) {
            found.extend(
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.is_dir()),
            );
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!(
            "--modules {}: no lib/modules/RELEASE there (give make modules_install's INSTALL_MOD_PATH or its lib/modules/RELEASE)",
            dir.display()
        ),
        more => bail!(
            "--modules {}: {} releases under lib/modules; name one (--modules {})",
            dir.display(),
            more.len(),
            more[0].display()
        ),
    }
}

/// The release a bzImage names in its boot header (the setup header's
/// `kernel_version` string, Documentation/arch/x86/boot.rst), e.g.
/// `6.12.117+deb13-amd64`; None when the file is no bzImage.
pub fn bzimage_release(image: &Path) -> Result<Option<String>> {
    let data = fs::read(image).with_context(|| format!("cannot read {}", image.display()))?;
    Ok(release_in_header(&data))
}

fn release_in_header(data: &[u8]) -> Option<String> {
    // "HdrS" at 0x202; kernel_version (u16) at 0x20e, an offset from 0x200.
    if data.get(0x202..0x206)? != b"HdrS" {
        return None;
    }
    let at = u16::from_le_bytes([*data.get(0x20e)?, *data.get(0x20f)?]) as usize + 0x200;
    let text = data.get(at..)?;
    let end = text.iter().position(|&b| b == 0 || b == b' ')?;
    let release = std::str::from_utf8(&text[..end]).ok()?;
    (!release.is_empty()).then(|| release.to_string())
}

/// The busybox of an earlier fetch (the Bochs lab given `--initrd` packs
/// its extra archive with it).
pub fn cached_busybox(cache: &Path) -> Result<PathBuf> {
    let root = cache.join("root");
    let dir = files(&root, "busybox-static_", "").into_iter().next();
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

fn cached_deb(debs: &Path, package: &str) -> Option<PathBuf> {
    files(debs, &format!("{package}_"), ".deb")
        .into_iter()
        .next()
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

/// [`download`], once more after an `apt-get update` when the first try fails.
fn download_updating(debs: &Path, what: &str) -> bool {
    log(format!("downloading {what}"));
    download(debs, what) || {
        let _ = Command::new("apt-get")
            .args(["update", "-qq"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        download(debs, what)
    }
}

/// The cached package `package` of `cache` (any version), downloaded first
/// when missing (the version the system's apt sources serve). The caller
/// holds [`lock`].
pub fn fetch_named(cache: &Path, package: &str) -> Result<PathBuf> {
    let debs = cache.join("debs");
    if cached_deb(&debs, package).is_none() && !download_updating(&debs, package) {
        bail!("apt-get download {package} failed (is it in the system's apt sources?)");
    }
    cached_deb(&debs, package).with_context(|| format!("apt-get download {package} left no .deb"))
}

/// The cached package of `pin`, downloaded first when missing.
pub fn fetch_deb(work: &mut Work, debs: &Path, pin: &Pin) -> Result<PathBuf> {
    if let Some(p) = cached_deb(debs, pin.package) {
        return Ok(p);
    }
    let exact = format!("{}={}", pin.package, pin.version);
    download_updating(debs, &exact);
    if let Some(p) = cached_deb(debs, pin.package) {
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
    cached_deb(debs, &alt).with_context(|| format!("apt-get download {alt} left no .deb"))
}

/// Unpacks a package once into `cache/root/<its file name>`.
pub fn unpack(cache: &Path, deb: &Path) -> Result<PathBuf> {
    let stem = file_name(deb).trim_end_matches(".deb").to_string();
    let root = cache.join("root").join(stem);
    unpack_into(&root, &[deb])?;
    Ok(root)
}

/// Unpacks `debs` once into one tree `root` (its `.done` says it is whole).
pub fn unpack_into(root: &Path, debs: &[&Path]) -> Result<()> {
    if !root.join(".done").exists() {
        let _ = fs::remove_dir_all(root);
        fs::create_dir_all(root)?;
        for deb in debs {
            log(format!("unpacking {}", file_name(deb)));
            run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root))?;
        }
        fs::write(root.join(".done"), "")?;
    }
    Ok(())
}

/// The package names `deb`'s `Depends:` field lists (versions dropped,
/// each alternative a name).
pub fn depends(deb: &Path) -> Result<Vec<String>> {
    let field = output(Command::new("dpkg-deb").arg("-f").arg(deb).arg("Depends"))?;
    Ok(depends_field(&field))
}

fn depends_field(field: &str) -> Vec<String> {
    field
        .split([',', '|'])
        .filter_map(|d| d.split_whitespace().next())
        .map(str::to_string)
        .collect()
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
    fn a_bzimage_names_its_release() {
        let mut img = vec![0u8; 0x400];
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x20e..0x210].copy_from_slice(&0x100u16.to_le_bytes());
        let v = b"6.12.117+deb13-amd64 (debian-kernel@lists.debian.org) #1 SMP\0";
        img[0x300..0x300 + v.len()].copy_from_slice(v);
        assert_eq!(
            release_in_header(&img).as_deref(),
            Some("6.12.117+deb13-amd64")
        );
        img[0x202] = b'X';
        assert_eq!(release_in_header(&img), None);
        assert_eq!(release_in_header(b"short"), None);
    }

    #[test]
    fn kernel_options_pick_a_package_or_an_image_with_modules() {
        let k = |a: Option<&str>, m: Option<&str>| {
            GuestKernel::from_args(a.map(Path::new), m.map(Path::new))
        };
        assert_eq!(k(None, None).unwrap(), GuestKernel::Pinned);
        assert!(matches!(
            k(Some("/x/linux-image-6.12_amd64.deb"), None).unwrap(),
            GuestKernel::Deb(_)
        ));
        assert!(matches!(
            k(Some("/x/bzImage"), Some("/m")).unwrap(),
            GuestKernel::Image { .. }
        ));
        for (a, m, why) in [
            (Some("/x/bzImage"), None, "needs --modules"),
            (Some("/x/k.deb"), Some("/m"), "drop --modules"),
            (None, Some("/m"), "--modules goes with --kernel"),
        ] {
            let e = k(a, m).err().unwrap().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn depends_are_package_names() {
        // linux-headers-6.1.0-50-amd64_6.1.176-1's field.
        let field =
            "linux-headers-6.1.0-50-common (= 6.1.176-1), linux-kbuild-6.1 (>= 6.1.176-1), \
                     linux-compiler-gcc-12-x86 (>= 6.1.176-1) | gcc-12\n";
        assert_eq!(
            depends_field(field),
            [
                "linux-headers-6.1.0-50-common",
                "linux-kbuild-6.1",
                "linux-compiler-gcc-12-x86",
                "gcc-12"
            ]
        );
    }

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
