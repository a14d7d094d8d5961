//! Where results go, checked before anything runs and written so that
//! nothing is ever lost to a failure: every file is written whole to a
//! temporary file in the same directory and renamed over the destination
//! (an old results file survives any failure, a signal or a crash), each
//! output independently of the others, and before anything is printed.
use crate::results::{Document, RunReport};
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// One output's destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// `-`: this process's stdout.
    Stdout,
    /// A file, replaced atomically.
    File(PathBuf),
}

/// The outputs of a command, checked.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// `--json`.
    pub json: Option<Dest>,
    /// `--csv`.
    pub csv: Option<Dest>,
    /// `--plot` directory (created when the charts are written).
    pub plot: Option<PathBuf>,
    /// `--junit`: the expectations' verdicts as JUnit XML.
    pub junit: Option<Dest>,
    /// `--tap`: the expectations' verdicts as TAP on stdout.
    pub tap: bool,
}

/// The outputs a command was asked for, before they are checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requested<'a> {
    /// `--json`.
    pub json: Option<&'a Path>,
    /// `--csv`.
    pub csv: Option<&'a Path>,
    /// `--plot`.
    pub plot: Option<&'a Path>,
    /// `--junit`.
    pub junit: Option<&'a Path>,
    /// `--tap`.
    pub tap: bool,
}

/// The path as the file system would resolve it, for comparing names of
/// files that may not exist yet.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = parent
        .canonicalize()
        .unwrap_or_else(|_| parent.to_path_buf());
    parent.join(path.file_name().unwrap_or_default())
}

/// Checks that `path` can be replaced atomically: an existing regular file
/// or nothing, in an existing directory where a file can be created.
pub fn check_file(path: &Path, flag: &str) -> Result<(), String> {
    let fail = |why: String| format!("cannot write {flag} {}: {why}", path.display());
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let t = meta.file_type();
        // A link is replaced by the rename, never written through; a link
        // to a directory reads as one to the user: refuse it as one.
        let link_to_dir = t.is_symlink() && path.is_dir();
        let what = if t.is_dir() || link_to_dir {
            Some(if link_to_dir {
                "a symbolic link to a directory"
            } else {
                "a directory"
            })
        } else if t.is_char_device() || t.is_block_device() {
            Some("a device")
        } else if t.is_fifo() || t.is_socket() {
            Some("a FIFO or socket")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(fail(format!(
                "it is {what}, which cannot be replaced atomically; name a regular file (or - for stdout)"
            )));
        }
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let probe = tempfile_in(dir).map_err(|e| fail(why_not_writable(dir, &e)))?;
    let _ = std::fs::remove_file(probe.0);
    Ok(())
}

/// Why no file can be created in `dir`, with the fix. A directory that
/// exists but answers "no such file" when a file is created in it is a
/// pseudo file system (/proc, /sys): say so rather than ENOENT.
fn why_not_writable(dir: &Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() {
        format!(
            "{} does not accept new files (a pseudo file system such as /proc or /sys?); pick a writable directory",
            dir.display()
        )
    } else {
        format!("{e}; pick a writable directory")
    }
}

/// The temporary files of this module are `.ipivmm-PID-N.tmp`: the PID of
/// the writer, if `name` is one.
fn temporary_of(name: &str) -> Option<i32> {
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
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
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

/// Checks that `dir` is a directory a file can be written in, or that it
/// can be created: its nearest existing ancestor is a writable directory.
/// Creates nothing (the writer does, after the run), so a refused or failed
/// command leaves no empty directory behind.
pub fn prepare_dir(dir: &Path, flag: &str) -> Result<(), String> {
    let fail = |at: &Path, e: std::io::Error| {
        format!(
            "cannot write {flag} {}: {}",
            dir.display(),
            why_not_writable(at, &e)
        )
    };
    let mut existing = dir;
    while std::fs::symlink_metadata(existing).is_err() {
        match existing.parent() {
            Some(p) if !p.as_os_str().is_empty() => existing = p,
            _ => {
                existing = Path::new(".");
                break;
            }
        }
    }
    if !existing.is_dir() {
        let what = if existing == dir {
            "it is not a directory".to_string()
        } else {
            format!("{} is not a directory", existing.display())
        };
        return Err(format!("cannot write {flag} {}: {what}", dir.display()));
    }
    let probe = tempfile_in(existing).map_err(|e| fail(existing, e))?;
    let _ = std::fs::remove_file(probe.0);
    Ok(())
}

/// Whether `file` would sit in `dir` under a name a chart may take (every
/// chart is `*.svg`, its name derived from the results).
fn is_chart_name_in(file: &Path, dir: &Path) -> bool {
    let resolved_file = resolved(file);
    resolved_file.parent() == Some(resolved(dir).as_path())
        && resolved_file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
}

impl Outputs {
    /// Checks the outputs a command was given, before it runs: files that
    /// can be replaced atomically, no path named twice, none equal to an
    /// input (`inputs`, e.g. the payload), at most one output on stdout.
    pub fn plan(
        json: Option<&Path>,
        csv: Option<&Path>,
        plot: Option<&Path>,
        inputs: &[&Path],
    ) -> Result<Self, String> {
        Self::plan_all(
            Requested {
                json,
                csv,
                plot,
                ..Requested::default()
            },
            inputs,
        )
    }

    /// [`Outputs::plan`] of every output a command may have, the
    /// expectations' TAP and JUnit included.
    pub fn plan_all(r: Requested<'_>, inputs: &[&Path]) -> Result<Self, String> {
        let Requested {
            json,
            csv,
            plot,
            junit,
            tap,
        } = r;
        let dest = |p: Option<&Path>, flag: &str| -> Result<Option<Dest>, String> {
            match p {
                None => Ok(None),
                Some(p) if p.as_os_str() == "-" => Ok(Some(Dest::Stdout)),
                Some(p) => check_file(p, flag).map(|_| Some(Dest::File(p.to_path_buf()))),
            }
        };
        let out = Self {
            json: dest(json, "--json")?,
            csv: dest(csv, "--csv")?,
            plot: plot.map(Path::to_path_buf),
            junit: dest(junit, "--junit")?,
            tap,
        };
        let on_stdout: Vec<&str> = [
            ("--json -", out.json == Some(Dest::Stdout)),
            ("--csv -", out.csv == Some(Dest::Stdout)),
            ("--junit -", out.junit == Some(Dest::Stdout)),
            ("--tap", tap),
        ]
        .into_iter()
        .filter_map(|(f, on)| on.then_some(f))
        .collect();
        if let [a, b, ..] = on_stdout[..] {
            return Err(format!(
                "{a} and {b} cannot both write to stdout; send one to a file"
            ));
        }
        let named: Vec<(&str, &Path)> = [
            ("--json", json),
            ("--csv", csv),
            ("--plot", plot),
            ("--junit", junit),
        ]
        .into_iter()
        .filter_map(|(f, p)| Some((f, p?)))
        .filter(|(_, p)| p.as_os_str() != "-")
        .collect();
        for (i, (flag, p)) in named.iter().enumerate() {
            if let Some((other, _)) = named[..i].iter().find(|(_, q)| resolved(q) == resolved(p)) {
                return Err(format!(
                    "{other} and {flag} both name {}: give each output its own path",
                    p.display()
                ));
            }
            if let Some(input) = inputs.iter().find(|q| resolved(q) == resolved(p)) {
                return Err(format!("{flag} {} is an input of this run ({}): results would overwrite it; pick another path", p.display(), input.display()));
            }
        }
        if let Some(dir) = &out.plot {
            prepare_dir(dir, "--plot")?;
            for (flag, d) in [
                ("--json", &out.json),
                ("--csv", &out.csv),
                ("--junit", &out.junit),
            ] {
                if let Some(Dest::File(p)) = d {
                    if is_chart_name_in(p, dir) {
                        return Err(format!(
                            "{flag} {} is in the --plot directory with a chart's name (*.svg): a chart would overwrite it; name it .json/.csv or put it elsewhere",
                            p.display()
                        ));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether JSON, CSV, JUnit or TAP go to stdout (tables then go to
    /// stderr).
    pub fn uses_stdout(&self) -> bool {
        self.tap || [&self.json, &self.csv, &self.junit].contains(&&Some(Dest::Stdout))
    }

    /// Writes the verdicts of expectations: TAP on stdout (`--tap`) and
    /// JUnit (`--junit`); named `suite`. Returns one line per failure.
    pub fn write_verdicts(&self, v: &crate::expect::Verdicts, suite: &str) -> Vec<String> {
        let mut errors = Vec::new();
        if self.tap {
            if let Err(e) = emit(&Dest::Stdout, super::tap::render(v, suite).as_bytes()) {
                errors.push(format!("writing --tap: {e}"));
            }
        }
        if let Some(d) = &self.junit {
            let written = super::junit::render(v, suite)
                .and_then(|xml| emit(d, xml.as_bytes()).map_err(|e| e.to_string()));
            if let Err(e) = written {
                errors.push(format!("writing --junit: {e}"));
            }
        }
        errors
    }

    /// Writes every output of `doc`, each on its own: a failing one does not
    /// stop the others. Returns one line per failure (empty: all written).
    pub fn write(&self, doc: &Document) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(d) = &self.json {
            // Streamed: a large document is not held twice (model and text).
            let json = |w: &mut dyn Write| {
                let mut w = std::io::BufWriter::new(w);
                serde_json::to_writer_pretty(&mut w, doc)?;
                w.write_all(b"\n")?;
                w.flush()
            };
            if let Err(e) = emit_with(d, json) {
                errors.push(format!("writing --json: {e}"));
            }
        }
        if let Some(d) = &self.csv {
            let refs: Vec<&RunReport> = doc.runs.iter().collect();
            let mut bytes = Vec::new();
            let written = super::csv::write_runs(&refs, &mut bytes)
                .map_err(|e| e.to_string())
                .and_then(|_| emit(d, &bytes).map_err(|e| e.to_string()));
            if let Err(e) = written {
                errors.push(format!("writing --csv: {e}"));
            }
        }
        if let Some(dir) = &self.plot {
            let refs: Vec<&RunReport> = doc.runs.iter().collect();
            match super::svg::plot_runs(&refs, dir) {
                Ok(files) => files
                    .iter()
                    .for_each(|f| log::info!("wrote {}", f.display())),
                Err(e) => errors.push(format!("writing --plot: {e}")),
            }
        }
        errors
    }
}

/// `bytes` to `d`.
pub fn emit(d: &Dest, bytes: &[u8]) -> std::io::Result<()> {
    emit_with(d, |w| w.write_all(bytes))
}

/// What `fill` writes, to `d`.
pub fn emit_with(
    d: &Dest,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    match d {
        Dest::Stdout => {
            let mut out = std::io::stdout().lock();
            fill(&mut out).and_then(|_| out.flush())
        }
        Dest::File(p) => write_atomic_with(p, fill),
    }
}

/// Prints `text` to stdout (or stderr): a closed or full stream is not an
/// error worth losing results over, so failures are ignored (never a
/// panic). Stdout goes through [`ipivmm_devices::stdout`] (after the guest's
/// serial output, in order), waiting only while stdout takes bytes: after
/// [`ipivmm_devices::stdout::STALL`] without progress it gives up with a
/// line on stderr, so the exit never hangs on a pipe nobody reads.
pub fn print_text(text: &str, to_stderr: bool) {
    if to_stderr {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
        return;
    }
    // Through the stdout queue, after the guest's serial output, and never
    // waiting on a stdout that takes nothing (the exit stays bounded).
    let out = ipivmm_devices::stdout::stdout();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.drain()) {
        eprintln!("ipivmm: the report was not printed in full: {e}; the results files have it all");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ipivmm-dest-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn bad_destinations_are_one_line_errors() {
        let e = check_file(Path::new("/nonexistent/dir/x.csv"), "--csv").unwrap_err();
        assert!(
            e.starts_with("cannot write --csv /nonexistent/dir/x.csv") && !e.contains('\n'),
            "{e}"
        );
        let e = check_file(Path::new("/dev/full"), "--json").unwrap_err();
        assert!(e.contains("a device") && e.contains("atomically"), "{e}");
        let e = prepare_dir(Path::new("/proc/self/ipivmm-plots"), "--plot").unwrap_err();
        assert!(e.starts_with("cannot write --plot"), "{e}");
        // /proc is no missing directory: it is one that takes no new files.
        let e = prepare_dir(Path::new("/proc"), "--plot").unwrap_err();
        assert!(
            e.contains("does not accept new files") && !e.contains("os error 2"),
            "{e}"
        );
        let e = check_file(Path::new("/proc/version"), "--json").unwrap_err();
        assert!(e.contains("does not accept new files"), "{e}");
        let dir = tmpdir("plot");
        // Checked, not created (issue 20, case 15): the writer creates it.
        prepare_dir(&dir.join("a/b"), "--plot").unwrap();
        assert!(!dir.join("a").exists());
        std::fs::write(dir.join("file"), b"x").unwrap();
        let e = prepare_dir(&dir.join("file/sub"), "--plot").unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_same_path_twice_or_an_input_is_refused() {
        let dir = tmpdir("twice");
        let f = dir.join("r.json");
        let e = Outputs::plan(Some(&f), Some(&dir.join("./r.json")), None, &[]).unwrap_err();
        assert!(e.contains("--json and --csv both name"), "{e}");
        let payload = dir.join("p.elf");
        std::fs::write(&payload, b"x").unwrap();
        let e = Outputs::plan(Some(&payload), None, None, &[&payload]).unwrap_err();
        assert!(e.contains("is an input of this run"), "{e}");
        let e = Outputs::plan(Some(Path::new("-")), Some(Path::new("-")), None, &[]).unwrap_err();
        assert!(e.contains("cannot both write to stdout"), "{e}");
        let tap_and_json = Requested {
            json: Some(Path::new("-")),
            tap: true,
            ..Requested::default()
        };
        let e = Outputs::plan_all(tap_and_json, &[]).unwrap_err();
        assert_eq!(
            e,
            "--json - and --tap cannot both write to stdout; send one to a file"
        );
        assert!(Outputs::plan(Some(&f), Some(&dir.join("r.csv")), None, &[&payload]).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failing_output_does_not_stop_the_others() {
        let dir = tmpdir("independent");
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let out =
            Outputs::plan(Some(&a.join("r.json")), Some(&b.join("r.csv")), None, &[]).unwrap();
        // The JSON's directory goes away after the checks: only it fails.
        std::fs::remove_dir_all(&a).unwrap();
        let errors = out.write(&Document::new(Vec::new(), Vec::new()));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("writing --json"), "{errors:?}");
        assert!(std::fs::read_to_string(b.join("r.csv")).is_ok_and(|c| !c.is_empty()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 20, case 16: a writer killed between its temporary and the
    /// rename leaves `.ipivmm-PID-N.tmp`; the next write into that directory
    /// removes it when PID is gone, and keeps a live process's.
    #[test]
    fn stale_temporaries_of_dead_writers_are_removed() {
        let dir = tmpdir("stale");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir.join(format!(".ipivmm-{dead}-0.tmp"));
        let live = dir.join(format!(".ipivmm-{}-7.tmp", std::process::id()));
        let other = dir.join(format!(".ipivmm-{dead}-x.tmp"));
        for f in [&stale, &live, &other] {
            std::fs::write(f, b"partial").unwrap();
        }
        write_atomic(&dir.join("r.json"), b"{}").unwrap();
        assert!(!stale.exists(), "a dead writer's temporary stays");
        assert!(live.exists(), "a live writer's temporary was removed");
        assert!(
            other.exists(),
            "a file not named like a temporary was removed"
        );
        assert_eq!(temporary_of(".ipivmm-12-3.tmp"), Some(12));
        assert_eq!(temporary_of(".ipivmm-0-3.tmp"), None);
        assert_eq!(temporary_of("ipivmm-12-3.tmp"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 20, case 18: a link to a directory is refused like one; a link
    /// to a file is replaced, its target left alone.
    #[test]
    fn links_to_directories_are_refused_and_links_are_never_written_through() {
        let dir = tmpdir("links");
        let target_dir = dir.join("d");
        std::fs::create_dir_all(&target_dir).unwrap();
        let to_dir = dir.join("to-dir.json");
        std::os::unix::fs::symlink(&target_dir, &to_dir).unwrap();
        let e = check_file(&to_dir, "--json").unwrap_err();
        assert!(e.contains("a symbolic link to a directory"), "{e}");
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let to_file = dir.join("to-file.json");
        std::os::unix::fs::symlink(&victim, &to_file).unwrap();
        check_file(&to_file, "--json").unwrap();
        write_atomic(&to_file, b"results").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        assert!(!std::fs::symlink_metadata(&to_file)
            .unwrap()
            .file_type()
            .is_symlink());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 20, case 13: --json/--csv in the --plot directory with a name a
    /// chart can take is refused before the run.
    #[test]
    fn results_named_like_a_chart_in_the_plot_directory_are_refused() {
        let dir = tmpdir("chartname");
        let plots = dir.join("plots");
        std::fs::create_dir_all(&plots).unwrap();
        let json = plots.join("pingpong-2vcpu-spin-latency.svg");
        let e = Outputs::plan(Some(&json), None, Some(&plots), &[]).unwrap_err();
        assert!(e.contains("a chart would overwrite it"), "{e}");
        let csv = plots.join("x.SVG");
        assert!(Outputs::plan(None, Some(&csv), Some(&plots), &[]).is_err());
        assert!(Outputs::plan(Some(&plots.join("r.json")), None, Some(&plots), &[]).is_ok());
        assert!(Outputs::plan(Some(&dir.join("a.svg")), None, Some(&plots), &[]).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temporaries() {
        let dir = tmpdir("atomic");
        let f = dir.join("r.json");
        std::fs::write(&f, b"old results").unwrap();
        write_atomic(&f, b"new").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        // A write that cannot complete leaves the old file alone.
        assert!(write_atomic(&dir.join("missing/r.json"), b"x").is_err());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary left"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
