//! The host side's plumbing: the log line, a directory's files, running tools with errors that
//! name them, installing missing Debian packages, the work directory with
//! its lock and wall times.
use anyhow::{bail, Context, Result};
use std::fmt::Display;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The entries of `dir` named `prefix*suffix`, sorted (none when `dir`
/// cannot be read).
pub fn files(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with(prefix) && n.ends_with(suffix)
        })
        .collect();
    v.sort();
    v
}

/// One line on stderr, prefixed like every line of the lab.
pub fn log(msg: impl Display) {
    eprintln!("lab: {msg}");
}

/// A command as a person would type it (for errors).
fn shown(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to its end; an error names it and its exit status.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", shown(cmd)))?;
    if !status.success() {
        bail!("{} failed ({status})", shown(cmd));
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output (stderr passes through).
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {}", shown(cmd)))?;
    if !out.status.success() {
        bail!("{} failed ({})", shown(cmd), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `tool` is an executable on PATH.
pub fn have(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|d| {
        fs::metadata(d.join(tool)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Installs Debian packages (needs root), quietly; once more after an
/// `apt-get update` when the first try fails.
pub fn apt_install(pkgs: &[&str]) -> Result<()> {
    if pkgs.is_empty() {
        return Ok(());
    }
    let list = pkgs.join(" ");
    if !is_root() {
        bail!("need {list} installed (run as root, or: apt-get install {list})");
    }
    log(format!("installing {list}"));
    let install = |quiet_errors: bool| {
        let mut c = Command::new("apt-get");
        c.args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(pkgs)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null());
        if quiet_errors {
            c.stderr(Stdio::null());
        }
        c.status().is_ok_and(|s| s.success())
    };
    if install(true) {
        return Ok(());
    }
    let updated = Command::new("apt-get")
        .args(["update", "-qq"])
        .status()
        .is_ok_and(|s| s.success());
    if updated && install(false) {
        return Ok(());
    }
    bail!("apt-get install {list} failed")
}

/// The cargo that runs this task (cargo sets CARGO for `cargo run`).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Set when SIGINT, SIGTERM or SIGHUP arrives: the boot stops its emulator
/// and the lab ends instead of leaving it running.
pub fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .context("cannot install a signal handler")?;
    }
    Ok(flag)
}

/// Whether the lab was told to stop.
pub fn interrupted(flag: &AtomicBool) -> Result<()> {
    if flag.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

/// One lab's work directory (`target/lab`, `target/lab-bochs`), locked for
/// as long as the lab runs (one lab per checkout and emulator), with the
/// wall time of each stage (`timings.txt`) and the warnings the verdict
/// repeats.
pub struct Work {
    /// The directory.
    pub dir: PathBuf,
    /// Warnings so far, one line each.
    pub warnings: Vec<String>,
    timings: File,
    started: Instant,
    _lock: File,
}

impl Work {
    /// Creates and locks `dir`; fails when another lab holds it.
    pub fn open(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let lock_path = dir.join(".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("cannot open {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            bail!(
                "another lab is running in this checkout ({})",
                lock_path.display()
            );
        }
        let timings = File::create(dir.join("timings.txt"))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            warnings: Vec::new(),
            timings,
            started: Instant::now(),
            _lock: lock,
        })
    }

    /// Runs a stage and records its wall time under `name`.
    pub fn timed<T>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let out = f(self)?;
        writeln!(self.timings, "{name} {}", t.elapsed().as_secs())?;
        Ok(out)
    }

    /// Seconds since the lab started.
    pub fn total_s(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// Records a warning and says it now.
    pub fn warn(&mut self, w: String) {
        log(format!("warning: {w}"));
        self.warnings.push(w);
    }
}

/// The last line a build script printed: the path it built.
pub fn built(script: &str, cmd: &mut Command) -> Result<PathBuf> {
    let out = output(cmd)?;
    match out.lines().last() {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => bail!("{script} printed no path"),
    }
}
