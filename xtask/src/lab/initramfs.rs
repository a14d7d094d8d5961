//! The guest's initramfs: busybox, the kernel modules in load order,
//! ipivmm and the KVM test binaries at their host paths (with the libraries
//! `ldd` names), the held VM (scripts/lab/hold-vm.c), the plans of
//! `plans/` (`ipivmm check`) in `/lab/plans`, and scripts/lab/init.sh as
//! `/init` — the guest side of the lab.
use super::binaries::{test_name, Binaries};
use super::debs::Unpacked;
use super::host::run;
use super::modules::{self, Module};
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Tests that need host tools or the source tree, which the guest lacks
/// (objdump, cargo, examples/), run on the host. Open in the lab
/// (docs/lab.md, "Open"): the 300-vCPU scale tests (on 2 emulated CPUs an
/// IPI acknowledgement can take longer than the payload's 60 s), and the
/// xAPIC cluster test of the SDK, whose user-irqchip runs ended in guest
/// triple faults twice in a row in one lab pass (first attempt and retry;
/// it passed in the pass before): the family of the emulator's spurious
/// #PF under nested paging, kvm_pvm runs it in every test run.
const SKIPPED_TESTS: &[&str] = &[
    "builds_as_a_static",
    "payload_has_no_sse",
    "payloads_have_no_sse",
    "library_only_example",
    "at_300_vcpus",
    "xapic_cluster_destinations_take_one_icr_per_cluster",
];

/// `path` (absolute) inside the staging tree `st`.
fn inside(st: &Path, path: &Path) -> PathBuf {
    st.join(path.strip_prefix("/").unwrap_or(path))
}

/// Copies `from` to `to`, creating the directories on the way.
fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(d) = to.parent() {
        fs::create_dir_all(d)?;
    }
    fs::copy(from, to)
        .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// The shared libraries `ldd` names for `bins` (the dynamic loader included).
pub fn libraries(bins: &[&Path]) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .args(bins)
        .stderr(Stdio::null())
        .output()
        .context("cannot run ldd")?;
    let mut libs: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.iter().position(|w| *w == "=>") {
                Some(i) => f.get(i + 1).copied(),
                None if l.contains("ld-linux") => f.first().copied(),
                None => None,
            }
        })
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// Packs the tree `st` as a newc archive `out` (busybox's cpio).
pub fn pack(st: &Path, busybox: &Path, out: &Path) -> Result<()> {
    let mut names = String::new();
    for e in walkdir::WalkDir::new(st).sort_by_file_name() {
        let e = e?;
        let rel = e.path().strip_prefix(st)?;
        names.push_str(&if rel.as_os_str().is_empty() {
            ".".into()
        } else {
            format!("./{}", rel.display())
        });
        names.push('\n');
    }
    let mut child = Command::new(busybox)
        .args(["cpio", "-o", "-H", "newc"])
        .current_dir(st)
        .stdin(Stdio::piped())
        .stdout(fs::File::create(out)?)
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {} cpio", busybox.display()))?;
    child
        .stdin
        .take()
        .context("cpio's stdin")?
        .write_all(names.as_bytes())?;
    let status = child.wait()?;
    if !status.success() {
        bail!("busybox cpio failed ({status})");
    }
    Ok(())
}

/// Writes `modules` into `st/lab/modules` as NAME.ko (decompressed: the
/// guest's busybox insmod takes plain objects) and their names, in order,
/// to `list`.
pub fn add_modules(st: &Path, modules: &[Module], list: &str) -> Result<()> {
    let dir = st.join("lab/modules");
    fs::create_dir_all(&dir)?;
    let mut names = String::new();
    for m in modules {
        fs::write(dir.join(format!("{}.ko", m.name)), m.read()?)?;
        names.push_str(&m.name);
        names.push('\n');
    }
    fs::write(dir.join(list), names)?;
    Ok(())
}

/// The plans (`plans/*.toml`) of the tree at `root`, sorted; none when it
/// has no `plans/`.
fn plans(root: &Path) -> Result<Vec<PathBuf>> {
    let dir = root.join("plans");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut v = Vec::new();
    for e in fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            v.push(p);
        }
    }
    v.sort();
    Ok(v)
}

/// Builds `work/initrd.cpio`; returns its path and the names of the plans
/// it carries (in `/lab/plans`).
pub fn build(
    root: &Path,
    work: &Path,
    debs: &Unpacked,
    bins: &Binaries,
) -> Result<(PathBuf, Vec<String>)> {
    let lab = root.join("scripts/lab");
    let st = work.join("initramfs");
    let _ = fs::remove_dir_all(&st);
    for d in [
        "bin",
        "lab/bin",
        "lab/tests",
        "lab/modules",
        "lab/plans",
        "proc",
        "sys",
        "dev",
        "tmp",
        "root",
        "out",
    ] {
        fs::create_dir_all(st.join(d))?;
    }
    copy(&debs.busybox, &st.join("bin/busybox"))?;
    copy(&lab.join("init.sh"), &st.join("init"))?;
    fs::set_permissions(st.join("init"), fs::Permissions::from_mode(0o755))?;
    add_modules(
        &st,
        &modules::load_order(&debs.modules, modules::GUEST)?,
        "order",
    )?;
    // The binaries at their host paths too: CARGO_BIN_EXE_* and the example
    // payload's path are compiled into the tests.
    let mut all: Vec<&Path> = vec![&bins.ipivmm];
    all.extend(bins.tests.iter().map(PathBuf::as_path));
    all.push(&bins.example);
    for f in &all {
        copy(f, &inside(&st, f))?;
    }
    symlink(&bins.ipivmm, st.join("lab/bin/ipivmm"))?;
    // The VM the guest holds for the whole pass (why: scripts/lab/hold-vm.c).
    run(Command::new("cc")
        .args(["-O2", "-static", "-o"])
        .arg(st.join("lab/bin/hold-vm"))
        .arg(lab.join("hold-vm.c")))
    .context("cc: cannot build scripts/lab/hold-vm.c")?;
    for t in &bins.tests {
        symlink(t, st.join("lab/tests").join(test_name(t)))?;
    }
    fs::write(
        st.join("lab/example-payload"),
        format!("{}\n", bins.example.display()),
    )?;
    let mut plan_names = Vec::new();
    for p in plans(root)? {
        let name = p.file_name().context("plan file name")?;
        copy(&p, &st.join("lab/plans").join(name))?;
        plan_names.push(name.to_string_lossy().into_owned());
    }
    let skip: Vec<String> = SKIPPED_TESTS
        .iter()
        .map(|t| format!("--skip {t}"))
        .collect();
    fs::write(st.join("lab/tests.skip"), skip.join(" ") + "\n")?;
    let mut dynamic = vec![bins.ipivmm.as_path()];
    dynamic.extend(bins.tests.iter().map(PathBuf::as_path));
    for lib in libraries(&dynamic)? {
        copy(&lib, &inside(&st, &lib))?;
    }
    let out = work.join("initrd.cpio");
    pack(&st, &debs.busybox, &out)?;
    fs::remove_dir_all(&st)?;
    Ok((out, plan_names))
}
