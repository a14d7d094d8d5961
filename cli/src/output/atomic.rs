//! Writing a file whole or not at all: a temporary file in the same
//! directory, synced, renamed over the destination; and the cleaning of
//! temporaries that a killed writer left behind, never a live writer's,
//! whichever PID namespace it runs in. Every results file, chart
//! included, is written this way (`dest` for JSON/CSV, `svg` for charts).
use std::io::Write;
use std::path::{Path, PathBuf};

/// A temporary that a live writer of another PID namespace (a container
/// sharing the directory) or machine may still own is only taken for stale
/// when it has not changed for this long: no write takes a day.
pub(super) const FOREIGN_STALE_AFTER: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);

/// Where this process's PIDs mean something, as 16 hex digits: a hash of
/// this boot of this machine (`boot_id`) and of its PID namespace. A PID in
/// a temporary's name can be checked only by a process of the same space.
pub(super) fn pid_space() -> &'static str {
    static SPACE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SPACE.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let ns = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
        // FNV-1a, 64 bits: stable across builds (std's hasher is not).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in boot
            .trim()
            .bytes()
            .chain(ns.as_os_str().as_encoded_bytes().iter().copied())
        {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    })
}

/// A temporary file of [`write_atomic`], read from its name.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Temporary {
    /// The writer's PID space ([`pid_space`]); None for the names of
    /// ipivmm versions before it (`.ipivmm-PID-N.tmp`).
    pub space: Option<String>,
    /// The writer's PID, in that space.
    pub pid: i32,
}

/// The temporaries of [`write_atomic`] are `.ipivmm-SPACE-PID-N.tmp`: the
/// writer's PID space and PID, if `name` is one (or one of the older
/// `.ipivmm-PID-N.tmp`).
pub(super) fn temporary_of(name: &str) -> Option<Temporary> {
    let rest = name.strip_prefix(".ipivmm-")?.strip_suffix(".tmp")?;
    let parts: Vec<&str> = rest.split('-').collect();
    let (space, pid, n) = match parts[..] {
        [space, pid, n] if space.len() == 16 && space.bytes().all(|b| b.is_ascii_hexdigit()) => {
            (Some(space.to_string()), pid, n)
        }
        [pid, n] => (None, pid, n),
        _ => return None,
    };
    n.parse::<u32>().ok()?;
    let pid = pid.parse::<i32>().ok().filter(|p| *p > 0)?;
    Some(Temporary { space, pid })
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

/// Whether the temporary `t` (whose file is `meta`) was left by a writer
/// that is gone: one of this PID space whose PID no longer exists, or, for
/// one whose PID cannot be checked here (another namespace or machine, an
/// older name), one untouched for [`FOREIGN_STALE_AFTER`].
fn is_stale(t: &Temporary, meta: &std::fs::Metadata) -> bool {
    if t.space.as_deref() == Some(pid_space()) {
        return !process_exists(t.pid);
    }
    meta.modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age > FOREIGN_STALE_AFTER)
}

/// Removes the temporaries in `dir` that a writer killed before its rename
/// left behind (SIGKILL, a power cut): `.ipivmm-SPACE-PID-N.tmp` regular
/// files whose writer is gone ([`is_stale`]). A live PID's file is kept (it
/// may be a concurrent write, or a reused PID: the safe side), and so is a
/// recent one whose PID means nothing here: a writer in another container
/// sharing the directory may be writing it now.
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(t) = name.to_str().and_then(temporary_of) else {
            continue;
        };
        let Ok(meta) = e.metadata() else {
            continue;
        };
        if meta.is_file() && is_stale(&t, &meta) {
            match std::fs::remove_file(e.path()) {
                Ok(()) => log::info!(
                    "removed {}, left by process {}, which is gone",
                    e.path().display(),
                    t.pid
                ),
                Err(err) => log::debug!("cannot remove stale {}: {err}", e.path().display()),
            }
        }
    }
}

/// A new, empty file next to the destination.
pub(super) fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    for attempt in 0..100u32 {
        let name = format!(
            ".ipivmm-{}-{}-{attempt}.tmp",
            pid_space(),
            std::process::id()
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ipivmm-atomic-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Issue 20, case 16: a writer killed between its temporary and the
    /// rename leaves its temporary; the next write into that directory
    /// removes it when the writer is gone, and keeps a live process's.
    /// Issue 39: a writer of another PID namespace (a container sharing the
    /// volume), whose PID means nothing here, keeps its temporary until it
    /// has not changed for a day.
    #[test]
    fn stale_temporaries_of_dead_writers_are_removed_and_no_live_one() {
        let dir = tmpdir("stale");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = pid_space();
        let stale = dir.join(format!(".ipivmm-{me}-{dead}-0.tmp"));
        let live = dir.join(format!(".ipivmm-{me}-{}-7.tmp", std::process::id()));
        let foreign = dir.join(format!(".ipivmm-00000000deadbeef-{dead}-0.tmp"));
        let foreign_old = dir.join(format!(".ipivmm-00000000deadbeef-{dead}-1.tmp"));
        let legacy = dir.join(format!(".ipivmm-{dead}-0.tmp"));
        let other = dir.join(format!(".ipivmm-{dead}-x.tmp"));
        for f in [&stale, &live, &foreign, &foreign_old, &legacy, &other] {
            std::fs::write(f, b"partial").unwrap();
        }
        let two_days = std::time::SystemTime::now() - 2 * FOREIGN_STALE_AFTER;
        std::fs::File::options()
            .write(true)
            .open(&foreign_old)
            .unwrap()
            .set_modified(two_days)
            .unwrap();
        write_atomic(&dir.join("r.json"), b"{}").unwrap();
        assert!(!stale.exists(), "a dead writer's temporary stays");
        assert!(live.exists(), "a live writer's temporary was removed");
        assert!(
            foreign.exists(),
            "another namespace's live writer lost its temporary"
        );
        assert!(
            legacy.exists(),
            "an older name's PID cannot be checked: kept while recent"
        );
        assert!(!foreign_old.exists(), "a day-old foreign temporary stays");
        assert!(
            other.exists(),
            "a file not named like a temporary was removed"
        );
        assert_eq!(std::fs::read(dir.join("r.json")).unwrap(), b"{}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn temporary_names_read_back() {
        let t = |space: Option<&str>, pid| {
            Some(Temporary {
                space: space.map(String::from),
                pid,
            })
        };
        assert_eq!(
            temporary_of(".ipivmm-0123456789abcdef-12-3.tmp"),
            t(Some("0123456789abcdef"), 12)
        );
        assert_eq!(temporary_of(".ipivmm-12-3.tmp"), t(None, 12));
        assert_eq!(temporary_of(".ipivmm-0-3.tmp"), None);
        assert_eq!(temporary_of(".ipivmm-0123-12-3.tmp"), None);
        assert_eq!(temporary_of("ipivmm-12-3.tmp"), None);
        // What this process writes is its own, in its own space.
        let (path, _f) = tempfile_in(&std::env::temp_dir()).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            temporary_of(&name),
            t(Some(pid_space()), std::process::id() as i32)
        );
    }
}
