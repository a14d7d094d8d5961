//! ipivmm's Linux guest initramfs (docs/linux-guest.md), `cargo xtask
//! linux-initrd`, and the Linux pass's probe archive that carries it into
//! the lab: busybox and rt-tests' hackbench from the lab's Debian cache
//! ([`debs`]), the IPI module built against the kernel's linux-headers, the
//! phase tool and the workloads (`gcc -static`), guest-linux/init; packed
//! by the lab's packer ([`initramfs::pack`]) and gzip'd.
use super::debs;
use super::host::{have, log, run, Work};
use super::initramfs;
use super::pass::Image;
use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel release the IPI module is built for unless `--release` says
/// otherwise: the lab's pinned kernel's.
pub fn pinned_release() -> &'static str {
    debs::KERNEL
        .package
        .strip_prefix("linux-image-")
        .unwrap_or(debs::KERNEL.package)
}

/// `cargo xtask linux-initrd`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The initramfs to write (a gzip'd newc cpio) [default:
    /// target/linux-guest/initrd.cpio.gz]
    pub out: Option<PathBuf>,
    /// The guest kernel's release the IPI module is built for (its
    /// linux-headers-RELEASE must be in the system's apt sources; the
    /// default is the lab's kernel)
    #[arg(long, default_value = pinned_release())]
    pub release: String,
}

/// `cargo xtask linux-initrd`: builds the initramfs, prints its path.
pub fn main(args: Args) -> Result<()> {
    let root = super::pass::checkout()?;
    let cache = debs::cache_dir()?;
    let mut work = Work::open(&root.join("target/linux-guest"))?;
    let _lock = debs::lock(&cache)?;
    let busybox = debs::fetch_deb(&mut work, &cache.join("debs"), &debs::BUSYBOX)?;
    let busybox = debs::unpack(&cache, &busybox)?.join("bin/busybox");
    let out = args
        .out
        .map(|o| std::path::absolute(&o).unwrap_or(o))
        .unwrap_or_else(|| root.join("target/linux-guest/initrd.cpio.gz"));
    build(&root, &cache, &busybox, &args.release, &out)?;
    println!("{}", out.display());
    Ok(())
}

/// The Linux pass's archive for the lab's guest, `out`:
/// scripts/lab/probe-linux.sh as /lab/extra.sh, the L2 kernel (the pinned
/// release: the lab's own when it boots that one) as /lab/linux/vmlinuz
/// and ipivmm's guest initramfs for it as /lab/linux/initrd.cpio.gz.
pub fn probe_archive(root: &Path, cache: &Path, image: &Image, out: &Path) -> Result<PathBuf> {
    let release = pinned_release();
    let _lock = debs::lock(cache)?;
    let initrd = root.join(format!("target/linux-guest/initrd-{release}.cpio.gz"));
    build(root, cache, &image.busybox, release, &initrd)?;
    let vmlinuz = if image.modules.file_name().is_some_and(|r| r == release) {
        image.kernel.clone()
    } else {
        let deb = debs::fetch_named(cache, debs::KERNEL.package)?;
        debs::unpack(cache, &deb)?.join(format!("boot/vmlinuz-{release}"))
    };
    let st = out.with_extension("d");
    let _ = fs::remove_dir_all(&st);
    fs::create_dir_all(st.join("lab/linux"))?;
    install(
        &root.join("scripts/lab/probe-linux.sh"),
        &st.join("lab/extra.sh"),
    )?;
    install(&vmlinuz, &st.join("lab/linux/vmlinuz"))?;
    install(&initrd, &st.join("lab/linux/initrd.cpio.gz"))?;
    initramfs::pack(&st, &image.busybox, out)?;
    fs::remove_dir_all(&st)?;
    Ok(out.to_path_buf())
}

/// Copies `from` to `to`, executable.
fn install(from: &Path, to: &Path) -> Result<()> {
    if let Some(d) = to.parent() {
        fs::create_dir_all(d)?;
    }
    fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Refuses to build with tools missing, naming the packages to install.
fn check_tools() -> Result<()> {
    let missing: Vec<&str> = ["gcc", "make", "dpkg-deb", "apt-get", "gzip", "ldd"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        bail!(
            "needs {} (apt-get install gcc make dpkg libc-bin gzip)",
            missing.join(", ")
        );
    }
    if !Path::new("/usr/lib/x86_64-linux-gnu/libc.a").exists() {
        bail!("needs a static libc (apt-get install libc6-dev)");
    }
    Ok(())
}

/// Refuses to build the phase tool on a stale guest-linux/ipivmm-abi.h.
fn check_header(root: &Path) -> Result<()> {
    let path = root.join(ipivmm::abi::c_header::PATH);
    let committed =
        fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut fresh = String::new();
    ipivmm::abi::c_header::write(&mut fresh)?;
    if committed != fresh {
        bail!(
            "{} is not what abi/src generates: run `cargo xtask abi-header`",
            path.display()
        );
    }
    Ok(())
}

/// The guest kernel's headers, unpacked once (linux-headers-RELEASE, its
/// -common and linux-kbuild packages in one tree, its Makefile's absolute
/// include made local); returns the build tree.
fn headers(cache: &Path, release: &str) -> Result<PathBuf> {
    let headers = debs::fetch_named(cache, &format!("linux-headers-{release}"))?;
    let deps = debs::depends(&headers)?;
    let dep = |what: &str, pick: fn(&str) -> bool| {
        deps.iter()
            .find(|d| pick(d))
            .with_context(|| format!("linux-headers-{release} names no {what} package"))
            .and_then(|d| debs::fetch_named(cache, d))
    };
    let common = dep("-common", |d| {
        d.starts_with("linux-headers-") && d.contains("-common")
    })?;
    let kbuild = dep("linux-kbuild", |d| d.starts_with("linux-kbuild-"))?;
    let tree = cache.join("root").join(format!("headers-{release}"));
    debs::unpack_into(&tree, &[&headers, &common, &kbuild])?;
    let kdir = tree.join(format!("usr/src/linux-headers-{release}"));
    let makefile = kdir.join("Makefile");
    let text = fs::read_to_string(&makefile)
        .with_context(|| format!("cannot read {}", makefile.display()))?;
    let local = text.replace(
        "include /usr/src/",
        &format!("include {}/usr/src/", tree.display()),
    );
    if local != text {
        fs::write(&makefile, local)?;
    }
    Ok(kdir)
}

/// Builds the initramfs `out` for kernel `release` (the caller holds
/// [`debs::lock`]); its work tree is target/linux-guest/build.
pub fn build(root: &Path, cache: &Path, busybox: &Path, release: &str, out: &Path) -> Result<()> {
    check_tools()?;
    check_header(root)?;
    let rt_tests = debs::unpack(cache, &debs::fetch_named(cache, "rt-tests")?)?;
    let kdir = headers(cache, release)?;

    let work = root.join("target/linux-guest/build");
    let _ = fs::remove_dir_all(&work);
    let r = work.join("root");
    for d in [
        "bin", "lib", "lib64", "usr/bin", "proc", "sys", "dev", "tmp",
    ] {
        fs::create_dir_all(r.join(d))?;
    }
    let guest = root.join("guest-linux");

    log(format!("IPI module for {release}"));
    let module = work.join("module");
    fs::create_dir_all(&module)?;
    for f in ["ipivmm_ipi.c", "Makefile"] {
        fs::copy(guest.join("ipi-module").join(f), module.join(f))?;
    }
    let made = Command::new("make")
        .args(["-s", "-C"])
        .arg(&kdir)
        .arg(format!("M={}", module.display()))
        .arg("modules")
        .output()
        .context("cannot run make")?;
    if !made.status.success() {
        bail!(
            "the IPI module did not build against linux-headers-{release}:\n{}{}",
            String::from_utf8_lossy(&made.stdout),
            String::from_utf8_lossy(&made.stderr)
        );
    }
    install(&module.join("ipivmm_ipi.ko"), &r.join("lib/ipivmm_ipi.ko"))?;

    log("phase tool and workloads (gcc -static)");
    for (bin, threads) in [
        ("ipivmm-guest", false),
        ("tlb-shootdown", true),
        ("ebizzy-lite", true),
    ] {
        let mut gcc = Command::new("gcc");
        gcc.args(["-O2", "-Wall", "-Wextra", "-Werror", "-static"]);
        if threads {
            gcc.arg("-pthread");
        }
        run(gcc
            .arg("-o")
            .arg(r.join("bin").join(bin))
            .arg(guest.join(format!("{bin}.c"))))?;
    }
    install(&guest.join("hackbench-run"), &r.join("bin/hackbench-run"))?;
    install(&guest.join("init"), &r.join("init"))?;

    log("busybox, hackbench");
    install(busybox, &r.join("bin/busybox"))?;
    let hackbench = r.join("usr/bin/hackbench");
    install(&rt_tests.join("usr/bin/hackbench"), &hackbench)?;
    // The libraries hackbench links, from this (Debian) system.
    for lib in initramfs::libraries(&[&hackbench])? {
        install(&lib, &r.join(lib.strip_prefix("/")?))?;
    }

    log("packing");
    if let Some(d) = out.parent() {
        fs::create_dir_all(d)?;
    }
    let cpio = work.join("initrd.cpio");
    initramfs::pack(&r, busybox, &cpio)?;
    run(Command::new("gzip").args(["-9", "-f"]).arg(&cpio))?;
    fs::copy(work.join("initrd.cpio.gz"), out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    log(format!(
        "{} for {release}: ipivmm-guest, ipivmm_ipi.ko, hackbench, tlb-shootdown, ebizzy-lite",
        out.display()
    ));
    Ok(())
}

/// `cargo xtask abi-header`: writes guest-linux/ipivmm-abi.h from abi/.
pub fn write_header() -> Result<()> {
    let path = super::pass::checkout()?.join(ipivmm::abi::c_header::PATH);
    let mut text = String::new();
    ipivmm::abi::c_header::write(&mut text)?;
    fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_documented_default_release_is_the_pinned_kernels() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/linux-guest.md"
        ))
        .unwrap();
        let default = format!("(default `{}`, the lab's kernel)", super::pinned_release());
        assert!(doc.contains(&default), "docs/linux-guest.md: {default}");
    }
}
