//! An output format is a [`Sink`]: one `const` in the format's own file
//! that says its flag, its help text for each command that takes it, what
//! the flag names (a file or `-`, a directory, or nothing: a switch onto
//! stdout) and how it is written. [`super::sinks::ALL`] lists every sink;
//! from it come the flags of `run`, `sweep` and `compare`
//! ([`super::sinks::add_args`], each [`Sink::arg`]), the checks of their
//! destinations and their writing ([`super::dest::Outputs`]). Results sinks read documents one at a time
//! ([`Docs`]): the one of a run or sweep, in memory, or the files `compare`
//! reads, each loaded in its turn and dropped after.
use super::error::OutputError;
use ipivmm_analysis::expect::Verdicts;
use ipivmm_analysis::results::Document;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The commands that write outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `ipivmm run`.
    Run,
    /// `ipivmm sweep`.
    Sweep,
    /// `ipivmm compare`.
    Compare,
}

impl Command {
    /// The subcommand of that name.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "run" => Some(Command::Run),
            "sweep" => Some(Command::Sweep),
            "compare" => Some(Command::Compare),
            _ => None,
        }
    }
}

/// The documents a results sink is written from, one at a time.
pub trait Docs {
    /// Calls `f` with each document and its origin (the file it was read
    /// from; `None` for a document in memory), in order, stopping at the
    /// first error.
    fn each(
        &self,
        f: &mut dyn FnMut(Option<&str>, &Document) -> std::io::Result<()>,
    ) -> std::io::Result<()>;
}

impl Docs for Document {
    fn each(
        &self,
        f: &mut dyn FnMut(Option<&str>, &Document) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        f(None, self)
    }
}

/// Recorded results files (`compare`), each read when its turn comes and
/// dropped before the next: memory is that of the largest file. With a
/// phase (`compare --phase`), every run reads that phase.
pub struct Files<'a>(pub &'a [PathBuf], pub Option<&'a str>);

impl Docs for Files<'_> {
    fn each(
        &self,
        f: &mut dyn FnMut(Option<&str>, &Document) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        for path in self.0 {
            let mut doc = Document::load(path).map_err(std::io::Error::other)?;
            if let Some(phase) = self.1 {
                doc.read_phase(phase);
            }
            f(Some(&path.display().to_string()), &doc)?;
        }
        Ok(())
    }
}

/// Writes the results of `docs` to one file (or stdout).
pub type ResultsFn = fn(&dyn Docs, &mut dyn Write) -> std::io::Result<()>;

/// Writes the expectations' verdicts, as suite `suite`.
pub type VerdictsFn = fn(&Verdicts, &str, &mut dyn Write) -> std::io::Result<()>;

/// A sink that writes files into a directory (`--plot DIR`).
#[derive(Debug)]
pub struct DirSink {
    /// Writes the results of `docs` into the directory (created if
    /// missing); returns the files written.
    pub write: fn(&dyn Docs, &Path) -> Result<Vec<PathBuf>, OutputError>,
    /// The names it may write, for people (`*.svg`).
    pub names: &'static str,
    /// One file it writes, for people (`a chart`).
    pub what: &'static str,
    /// Whether it may write a file of this name: another output with such
    /// a name in the directory is refused before the run.
    pub claims: fn(&Path) -> bool,
}

/// What a sink's flag names and what the sink writes.
#[derive(Debug)]
pub enum Kind {
    /// `--flag FILE` (`-`: stdout): the results, as one file replaced
    /// atomically.
    Results(ResultsFn),
    /// `--flag DIR`: the results, as files in DIR.
    Dir(DirSink),
    /// `--flag FILE` (`-`: stdout): the expectations' verdicts; the flag
    /// needs `--expect`.
    Verdicts(VerdictsFn),
    /// `--flag` (a switch): the expectations' verdicts on stdout, failures
    /// included (stderr then does not repeat them); needs `--expect`.
    VerdictsOnStdout(VerdictsFn),
}

/// One output format.
#[derive(Debug)]
pub struct Sink {
    /// The flag's name: `csv` is `--csv`.
    pub flag: &'static str,
    /// The commands that take the flag, with its help text in each (clap's
    /// style: one line, no final full stop).
    pub help: &'static [(&'static [Command], &'static str)],
    /// What the flag names and what the sink writes.
    pub kind: Kind,
}

impl Sink {
    /// `--flag`.
    pub fn long(&self) -> String {
        format!("--{}", self.flag)
    }

    /// The flag's help in `command`, if `command` takes it.
    pub fn help_in(&self, command: Command) -> Option<&'static str> {
        self.help
            .iter()
            .find(|(cmds, _)| cmds.contains(&command))
            .map(|(_, h)| *h)
    }

    /// Whether the sink writes the expectations' verdicts (its flag goes
    /// with `--expect`) rather than the results.
    pub fn is_verdicts(&self) -> bool {
        matches!(self.kind, Kind::Verdicts(_) | Kind::VerdictsOnStdout(_))
    }

    /// The value its flag takes (`FILE`, `DIR`), none for a switch.
    pub fn value_name(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Results(_) | Kind::Verdicts(_) => Some("FILE"),
            Kind::Dir(_) => Some("DIR"),
            Kind::VerdictsOnStdout(_) => None,
        }
    }

    /// The clap flag, with `help`.
    pub fn arg(&self, help: &'static str) -> clap::Arg {
        let arg = clap::Arg::new(self.flag).long(self.flag).help(help);
        let arg = match self.value_name() {
            Some(v) => arg
                .value_name(v)
                .value_parser(clap::value_parser!(PathBuf))
                .action(clap::ArgAction::Set),
            None => arg.action(clap::ArgAction::SetTrue),
        };
        if self.is_verdicts() {
            arg.requires("expect")
        } else {
            arg
        }
    }
}

/// `io::Error` of a results error, keeping an I/O error as it is.
pub fn io_error(e: OutputError) -> std::io::Error {
    match e {
        OutputError::Io(e) => e,
        e => std::io::Error::other(e),
    }
}
