//! Writing a file whole or not at all: a temporary file in the same
//! directory, synced, renamed over the destination; and the cleaning of
//! temporaries that a killed writer left behind. Every results file, chart
//! included, is written this way (`dest` for JSON/CSV, `svg` for charts).
use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary files of [`write_atomic`] are `.ipivmm-PID-N.tmp`: the PID of
/// the writer, if `name` is one.
pub(super) fn temporary_of(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(".ipivmm-")?.strip_suffix(".tmp")?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse::<i32>().ok().filter(|p| *p > 0)
}

/// Whether process `pid` exists (EPERM: it does, and is someone else's).
fn process_exists(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        Some(p) => !matches!(
            rustix::process::test_kill_process(p),
            Err(rustix::io::Errno::SRCH)
        ),
        None => false,
    }
}

/// Removes the temporaries in `dir` that a writer killed before its rename
/// left behind (SIGKILL, a power cut): `.ipivmm-PID-N.tmp` regular files
/// whose PID no longer exists. A live PID's file is kept (it may be a
/// concurrent write, or a reused PID: the safe side).
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(temporary_of) else {
            continue;
        };
        let regular = e.file_type().is_ok_and(|t| t.is_file());
        if regular && !process_exists(pid) {
            match std::fs::remove_file(e.path()) {
                Ok(()) => log::info!(
                    "removed {}, left by process {pid}, which is gone",
                    e.path().display()
                ),
                Err(err) => log::debug!("cannot remove stale {}: {err}", e.path().display()),
            }
        }
    }
}

/// A new, empty file next to the destination.
pub(super) fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    for attempt in 0..100u32 {
        let name = format!(".ipivmm-{}-{attempt}.tmp", std::process::id());
        let path = dir.join(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary file name"))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory, synced, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// [`write_atomic`] of what `fill` writes.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    remove_stale_temporaries(dir);
    let (tmp, mut f) = tempfile_in(dir)?;
    let written = fill(&mut f)
        .and_then(|_| f.sync_all())
        .and_then(|_| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
