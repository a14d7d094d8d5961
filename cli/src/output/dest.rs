//! Where results go, checked before anything runs and written so that
//! nothing is ever lost to a failure: every file is written whole to a
//! temporary file in the same directory and renamed over the destination
//! (an old results file survives any failure, a signal or a crash), each
//! output independently of the others, and before anything is printed.
//! The outputs are sinks ([`super::sink::Sink`], listed in
//! [`super::sinks::ALL`]): [`Outputs::plan_all`] checks them and
//! [`Outputs::write_from`] writes them, each the same way.
use super::atomic::tempfile_in;
use super::atomic::write_atomic_with;
use super::sink::{Docs, Kind, Sink};
use ipivmm_analysis::results::Document;
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

/// Where one planned output goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// A file (or stdout).
    Dest(Dest),
    /// A directory of files (created when they are written).
    Dir(PathBuf),
}

/// One output a command was asked for, before it is checked: the sink and
/// the path its flag named (`None` for a switch).
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The output format.
    pub sink: &'static Sink,
    /// What its flag named.
    pub path: Option<&'a Path>,
}

/// One output, checked.
#[derive(Clone, Debug)]
struct CheckedOutput {
    /// The output format.
    sink: &'static Sink,
    /// Where it goes.
    target: Target,
}

/// The outputs of a command, checked, in the order of
/// [`super::sinks::ALL`] (the order they are written in).
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    planned: Vec<CheckedOutput>,
}

/// Whether `file` would sit in `dir` under a name `claims` says the
/// directory's sink may write.
fn is_claimed_in(file: &Path, dir: &Path, claims: fn(&Path) -> bool) -> bool {
    let resolved_file = resolved(file);
    resolved_file.parent() == Some(resolved(dir).as_path()) && claims(&resolved_file)
}

/// The place of `sink` in the registry (the order of checks and writes).
fn rank(sink: &Sink) -> usize {
    super::sinks::ALL
        .iter()
        .position(|s| s.flag == sink.flag)
        .unwrap_or(usize::MAX)
}

impl Outputs {
    /// [`Outputs::plan_all`] of `--json`, `--csv` and `--plot`.
    pub fn plan(
        json: Option<&Path>,
        csv: Option<&Path>,
        plot: Option<&Path>,
        inputs: &[&Path],
    ) -> Result<Self, String> {
        let requests: Vec<Request<'_>> = [
            (&super::json::SINK, json),
            (&super::csv::SINK, csv),
            (&super::svg::SINK, plot),
        ]
        .into_iter()
        .filter_map(|(sink, p)| {
            Some(Request {
                sink,
                path: Some(p?),
            })
        })
        .collect();
        Self::plan_all(&requests, inputs)
    }

    /// Checks the outputs a command was given, before it runs: files that
    /// can be replaced atomically, directories that can be written, no path
    /// named twice, none equal to an input (`inputs`, e.g. the payload), at
    /// most one output on stdout, no file where a directory's sink may
    /// write one.
    pub fn plan_all(requests: &[Request<'_>], inputs: &[&Path]) -> Result<Self, String> {
        let mut requests = requests.to_vec();
        requests.sort_by_key(|r| rank(r.sink));
        let mut planned = Vec::with_capacity(requests.len());
        for r in &requests {
            let flag = r.sink.long();
            let target = match (&r.sink.kind, r.path) {
                (Kind::VerdictsOnStdout(_), _) => Target::Dest(Dest::Stdout),
                (_, None) => return Err(format!("{flag} needs a path")),
                (Kind::Dir(_), Some(p)) => Target::Dir(p.to_path_buf()),
                (_, Some(p)) if p.as_os_str() == "-" => Target::Dest(Dest::Stdout),
                (_, Some(p)) => {
                    check_file(p, &flag)?;
                    Target::Dest(Dest::File(p.to_path_buf()))
                }
            };
            planned.push(CheckedOutput {
                sink: r.sink,
                target,
            });
        }
        // A switch onto stdout is named last ("--json - and --tap").
        let mut on_stdout: Vec<&CheckedOutput> = planned
            .iter()
            .filter(|p| p.target == Target::Dest(Dest::Stdout))
            .collect();
        on_stdout.sort_by_key(|p| matches!(p.sink.kind, Kind::VerdictsOnStdout(_)));
        if let [a, b, ..] = on_stdout[..] {
            let name = |p: &CheckedOutput| match p.sink.kind {
                Kind::VerdictsOnStdout(_) => p.sink.long(),
                _ => format!("{} -", p.sink.long()),
            };
            return Err(format!(
                "{} and {} cannot both write to stdout; send one to a file",
                name(a),
                name(b)
            ));
        }
        let named: Vec<(String, &Path)> = requests
            .iter()
            .filter_map(|r| Some((r.sink.long(), r.path?)))
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
        for d in &planned {
            let (Target::Dir(dir), Kind::Dir(owner)) = (&d.target, &d.sink.kind) else {
                continue;
            };
            let dir_flag = d.sink.long();
            prepare_dir(dir, &dir_flag)?;
            for f in &planned {
                if let Target::Dest(Dest::File(p)) = &f.target {
                    if is_claimed_in(p, dir, owner.claims) {
                        let what = owner.what;
                        return Err(format!(
                            "{} {} is in the {dir_flag} directory with {what}'s name ({}): {what} would overwrite it; name it .json/.csv or put it elsewhere",
                            f.sink.long(),
                            p.display(),
                            owner.names
                        ));
                    }
                }
            }
        }
        Ok(Self { planned })
    }

    /// Where the results go, one `--flag PATH` each (`-` for stdout), for
    /// a command that prints nothing else (`-q`); verdict outputs excluded.
    pub fn destinations(&self) -> Vec<String> {
        self.planned
            .iter()
            .filter(|p| matches!(p.sink.kind, Kind::Results(_) | Kind::Dir(_)))
            .map(|p| match &p.target {
                Target::Dest(Dest::Stdout) => format!("{} -", p.sink.long()),
                Target::Dest(Dest::File(f)) | Target::Dir(f) => {
                    format!("{} {}", p.sink.long(), f.display())
                }
            })
            .collect()
    }

    /// Whether an output goes to stdout (tables then go to stderr).
    pub fn uses_stdout(&self) -> bool {
        self.planned
            .iter()
            .any(|p| p.target == Target::Dest(Dest::Stdout))
    }

    /// Whether the verdicts go to stdout as a switch's output (`--tap`),
    /// which lists every failure: stderr need not repeat them.
    pub fn lists_verdicts_on_stdout(&self) -> bool {
        self.planned
            .iter()
            .any(|p| matches!(p.sink.kind, Kind::VerdictsOnStdout(_)))
    }

    /// The file the sink whose flag is `flag` writes, when it writes one
    /// (not stdout, not a directory).
    pub fn file_of(&self, flag: &str) -> Option<&Path> {
        self.planned
            .iter()
            .find_map(|p| match (&p.target, p.sink.flag == flag) {
                (Target::Dest(Dest::File(f)), true) => Some(f.as_path()),
                _ => None,
            })
    }

    /// Writes the verdicts of expectations to every verdict output (TAP,
    /// JUnit), named `suite`. Returns one line per failure.
    pub fn write_verdicts(
        &self,
        v: &ipivmm_analysis::expect::Verdicts,
        suite: &str,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for p in &self.planned {
            let (Kind::Verdicts(write) | Kind::VerdictsOnStdout(write), Target::Dest(d)) =
                (&p.sink.kind, &p.target)
            else {
                continue;
            };
            if let Err(e) = emit_with(d, |w| write(v, suite, w)) {
                errors.push(format!("writing {}: {e}", p.sink.long()));
            }
        }
        errors
    }

    /// Writes every results output of `doc`, each on its own: a failing one
    /// does not stop the others. Files a directory's sink wrote are logged
    /// (RUST_LOG=info). Returns one line per failure (empty: all written).
    pub fn write(&self, doc: &Document) -> Vec<String> {
        self.write_from(doc, &mut |f| log::info!("wrote {}", f.display()))
    }

    /// [`Outputs::write`] of the documents of `docs` (each output reads
    /// them in turn, one at a time), telling `wrote` each file a
    /// directory's sink wrote.
    pub fn write_from(&self, docs: &dyn Docs, wrote: &mut dyn FnMut(&Path)) -> Vec<String> {
        let mut errors = Vec::new();
        for p in &self.planned {
            let written = match (&p.sink.kind, &p.target) {
                (Kind::Results(write), Target::Dest(d)) => {
                    emit_with(d, |w| write(docs, w)).map_err(|e| e.to_string())
                }
                (Kind::Dir(s), Target::Dir(dir)) => (s.write)(docs, dir)
                    .map(|files| files.iter().for_each(|f| wrote(f)))
                    .map_err(|e| e.to_string()),
                _ => continue,
            };
            if let Err(e) = written {
                errors.push(format!("writing {}: {e}", p.sink.long()));
            }
        }
        errors
    }
}

/// `bytes` to `d`.
pub fn emit(d: &Dest, bytes: &[u8]) -> std::io::Result<()> {
    emit_with(d, |w| w.write_all(bytes))
}

/// Set when the process started with fd 1 closed
/// ([`record_stdout_closed_at_start`]).
static STDOUT_CLOSED_AT_START: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Records that this process started without a stdout. Rust's runtime
/// then opens /dev/null on fd 1 before `main`, so only code that runs
/// earlier (the `ipivmm` binary's `.init_array` hook) can see it.
pub fn record_stdout_closed_at_start() {
    STDOUT_CLOSED_AT_START.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Err when this process has no stdout (`>&-`): results or verdicts meant
/// for it would vanish (Rust reads a closed fd 1 as a sink that takes
/// everything, and its runtime puts /dev/null there at start).
pub fn stdout_is_open() -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let closed = || {
        std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "stdout is closed (was it started with >&-?): give it a file or a pipe",
        )
    };
    if STDOUT_CLOSED_AT_START.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(closed());
    }
    match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => Err(closed()),
        Err(e) => Err(e),
    }
}

/// What `fill` writes, to `d`.
pub fn emit_with(
    d: &Dest,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    match d {
        Dest::Stdout => {
            stdout_is_open()?;
            let mut out = std::io::stdout().lock();
            fill(&mut out).and_then(|_| out.flush())
        }
        Dest::File(p) => write_atomic_with(p, fill),
    }
}

/// Prints `text` to stdout (or stderr): a closed or full stream is not an
/// error worth losing results over, so failures are ignored (never a
/// panic). Stdout goes through [`ipivmm_term::stdout`] (after the guest's
/// serial output, in order), waiting only while stdout takes bytes: after
/// [`ipivmm_term::stdout::STALL`] without progress it gives up with a
/// line on stderr, so the exit never hangs on a pipe nobody reads.
pub fn print_text(text: &str, to_stderr: bool) {
    if to_stderr {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
        return;
    }
    // Through the stdout queue, after the guest's serial output, and never
    // waiting on a stdout that takes nothing (the exit stays bounded).
    let out = ipivmm_term::stdout::stdout();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.drain()) {
        eprintln!("ipivmm: the report was not printed in full: {e}; the results files have it all");
    }
}

#[cfg(test)]
mod tests {
    use super::super::atomic::write_atomic;
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
        let tap_and_json = [
            Request {
                sink: &crate::output::tap::SINK,
                path: None,
            },
            Request {
                sink: &crate::output::json::SINK,
                path: Some(Path::new("-")),
            },
        ];
        let e = Outputs::plan_all(&tap_and_json, &[]).unwrap_err();
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
