//! A plan file (`plans/*.toml`, what `ipivmm check PLAN.toml` reads): its
//! TOML, every experiment's name, expectations, requirements and recorded
//! results checked before anything runs. A `run = "FLAGS"` or
//! `sweep = "FLAGS"` line is the front end's (those are its command
//! lines): [`PlanFile::load`] hands each to the caller's parser, so a plan of
//! recorded results only ([`PlanFile::judge_recorded`]) needs no front end and no
//! KVM.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("ipivmm-doc-plan-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let plan = dir.join("p.toml");
//! std::fs::write(
//!     &plan,
//!     "name = \"mine\"\n[[experiment]]\nname = \"old\"\nresults = \"missing.json\"\nexpect = [\"operations > 0\"]\n",
//! )?;
//! // A recording that is not there fails its expectations, naming the file.
//! let (name, verdicts) = ipivmm_analysis::plan::file::PlanFile::judge_recorded(&plan, &dir)?;
//! assert_eq!(name, "mine");
//! assert_eq!(verdicts.counts(), (0, 1, 0));
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use super::{ExperimentOutcome, NotRun, PlanOutcome, Requirement};
use crate::expect::{Expectation, Verdicts};
use crate::results::Document;
use ipivmm_term::text::escape_controls;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// The suite's name (the TAP comment, the JUnit suite).
    pub name: String,
    /// What the suite checks.
    #[serde(default)]
    pub about: String,
    /// The experiments, in order.
    #[serde(rename = "experiment")]
    pub experiments: Vec<ExperimentFile>,
}

/// One experiment of a plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentFile {
    /// Its name (prefixes its test points).
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub about: String,
    /// `ipivmm run` flags.
    pub run: Option<String>,
    /// `ipivmm sweep` flags.
    pub sweep: Option<String>,
    /// Results recorded before, judged as they are: a results file, its
    /// name holding at most one `*` (every file that matches, one
    /// document), relative to the current directory.
    pub results: Option<String>,
    /// The Linux guest of the line's `linux:NAME` workloads: `--kernel`
    /// and `--initrd` of its run or sweep (paths as the command takes
    /// them, relative to the current directory).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Its initramfs (ipivmm's: `cargo xtask linux-initrd`).
    #[serde(default)]
    pub initrd: Option<String>,
    /// What the host must have ([`Requirement`]: apicv, ipiv, avic,
    /// x2avic, apicv-or-avic, hardware-kvm, two-sockets); without it every
    /// expectation is a skip with the reason.
    #[serde(default)]
    pub requires: Vec<String>,
    /// The expectations.
    pub expect: Vec<String>,
}

/// Which command a line's flags are of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "kebab-case")]
pub enum LineCommand {
    /// `run = "FLAGS"`: the flags of `ipivmm run`.
    Run,
    /// `sweep = "FLAGS"`: the flags of `ipivmm sweep`.
    Sweep,
}

/// What an experiment of the file does: its command line as the caller
/// parsed it (`J`), or results recorded before.
#[derive(Debug)]
pub enum Job<J> {
    /// A `run` or `sweep` line, parsed by the caller.
    Flags(J),
    /// `results = "FILE"`: the pattern, judged under a base directory.
    Recorded(String),
}

/// One experiment read and checked, before anything runs.
#[derive(Debug)]
pub struct Checked<J> {
    /// What it does.
    pub job: Job<J>,
    /// Its expectations, parsed.
    pub expect: Vec<Expectation>,
    /// What the host must have.
    pub requires: Vec<Requirement>,
}

impl PlanFile {
    /// The plan file at `path` read and every experiment checked, before
    /// anything runs; each `run`/`sweep` line handed to `flags` (an Err is
    /// the plan's error, named after its experiment). One-line errors.
    pub fn load<J>(
        path: &Path,
        mut flags: impl FnMut(LineCommand, &str) -> Result<J, String>,
    ) -> Result<(PlanFile, Vec<Checked<J>>), String> {
        let text = crate::inputs::read_text(path, 1 << 20)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let plan: PlanFile = toml::from_str(&text).map_err(|e| {
            let at = e.span().map_or(String::new(), |span| {
                let (line, column) = line_column(&text, span.start);
                format!("line {line}, column {column}: ")
            });
            format!("{}: {at}{}", path.display(), e.message().trim_end())
        })?;
        let mut checked = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for x in &plan.experiments {
            let at = |e: String| {
                format!(
                    "{}: experiment '{}': {e}",
                    path.display(),
                    escape_controls(&x.name)
                )
            };
            if x.name.trim().is_empty() {
                return Err(at("an empty name: give it one (its test points and --json-dir file are named after it)".into()));
            }
            if ExperimentFile::json_stem(&x.name).len() > crate::results::slug::MAX_REVERSIBLE {
                return Err(at(format!(
                    "a name this long cannot name its --json-dir file: at most {} bytes once escaped",
                    crate::results::slug::MAX_REVERSIBLE
                )));
            }
            if !names.insert(x.name.as_str()) {
                return Err(at(
                    "a second experiment of that name: names must differ".into()
                ));
            }
            let job = match (&x.run, &x.sweep, &x.results) {
                (Some(r), None, None) => {
                    with_guest(x, r).and_then(|r| flags(LineCommand::Run, &r).map(Job::Flags))
                }
                (None, Some(s), None) => {
                    with_guest(x, s).and_then(|s| flags(LineCommand::Sweep, &s).map(Job::Flags))
                }
                (None, None, Some(_)) if x.kernel.is_some() || x.initrd.is_some() => Err(
                    "kernel = / initrd = boot the Linux guest of a run or sweep line; recorded results = ran already".into(),
                ),
                (None, None, Some(f)) if f.matches('*').count() <= 1 && !f.is_empty() => {
                    Ok(Job::Recorded(f.clone()))
                }
                (None, None, Some(f)) => Err(format!(
                    "results = \"{f}\": a file name, with at most one '*'"
                )),
                _ => Err("give one of run = \"FLAGS\", sweep = \"FLAGS\" or results = \"FILE\"".into()),
            }
            .map_err(at)?;
            let expect = x
                .expect
                .iter()
                .map(|e| e.parse::<Expectation>().map_err(|e| at(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            if expect.is_empty() {
                return Err(at("no expectation: add expect = [\"...\"]".into()));
            }
            let requires = x
                .requires
                .iter()
                .map(|need| {
                    need.parse::<Requirement>().map_err(|_| {
                        let all: Vec<String> =
                            Requirement::ALL.iter().map(|r| r.to_string()).collect();
                        at(format!("requires '{need}': not one of {}", all.join(", ")))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            checked.push(Checked {
                job,
                expect,
                requires,
            });
        }
        if checked.is_empty() {
            return Err(format!("{}: no [[experiment]]", path.display()));
        }
        Ok((plan, checked))
    }
}

/// A run or sweep line with the experiment's `kernel =` / `initrd =` as
/// `--kernel` / `--initrd` flags (quoted as the line is split).
fn with_guest(x: &ExperimentFile, flags: &str) -> Result<String, String> {
    let mut line = flags.to_string();
    if x.initrd.is_some() && x.kernel.is_none() {
        return Err("initrd = needs kernel = (the Linux bzImage it boots with)".into());
    }
    for (flag, path) in [("--kernel", &x.kernel), ("--initrd", &x.initrd)] {
        if let Some(p) = path {
            let quoted =
                shlex::try_quote(p).map_err(|_| format!("{flag} '{p}': a path with a NUL byte"))?;
            line.push_str(&format!(" {flag} {quoted}"));
        }
    }
    Ok(line)
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl ExperimentFile {
    /// The `--json-dir` file stem of experiment `name`: unique per name and
    /// readable back (`a b` is `a%20b.json`, never `a-b.json` like `a-b`).
    pub fn json_stem(name: &str) -> String {
        crate::results::slug::reversible(name)
    }
}

impl Document {
    /// The results documents `pattern` names under `base` (its file name may
    /// hold one `*`), as one document; Err naming what is missing or
    /// unreadable, and whether it refuses the plan ([`Unrecorded`]).
    pub fn recorded(pattern: &str, base: &Path) -> Result<Document, Unrecorded> {
        let files = recorded_files(pattern, base);
        if files.is_empty() {
            return Err(Unrecorded::Point(format!(
                "no results file {}",
                base.join(pattern).display()
            )));
        }
        // The engine's one rule of what a recording is: a killed or empty
        // file is named (a failing point), the same run twice refused, the
        // bytes bounded (the plan cannot start: exit 2, as `compare`).
        crate::results::recordings::merge(&files, crate::results::recordings::MAX_RECORDINGS_BYTES)
            .map_err(|e| match e.refuses_inputs() {
                true => Unrecorded::Refused(e.to_string()),
                false => Unrecorded::Point(e.to_string()),
            })
    }
}

/// Why a plan's `results = GLOB` gave no document.
#[derive(Debug)]
pub enum Unrecorded {
    /// The inputs are refused as given (the same run twice, too many
    /// bytes, a file that does not load): the plan does not start.
    Refused(String),
    /// The experiment fails, naming why (a file not whole, none found).
    Point(String),
}

impl std::fmt::Display for Unrecorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unrecorded::Refused(why) | Unrecorded::Point(why) => f.write_str(why),
        }
    }
}

fn recorded_files(pattern: &str, base: &Path) -> Vec<PathBuf> {
    let path = base.join(pattern);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = path.parent().unwrap_or(base);
    let (head, tail) = name.split_once('*').unwrap_or((&name, ""));
    let exact = !name.contains('*');
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            match exact {
                true => *n == *name,
                false => {
                    n.len() >= head.len() + tail.len() && n.starts_with(head) && n.ends_with(tail)
                }
            }
        })
        .collect();
    files.sort();
    files
}

impl PlanFile {
    /// Refuses a `--json-dir` where an experiment that runs would write a file
    /// that an experiment reads as `results = "GLOB"` under `base`: the journal
    /// (from before the first VM) would replace the recording it judges.
    pub fn json_dir_reads_none(&self, json_dir: &Path, base: &Path) -> Result<(), String> {
        let same = |p: &Path| std::fs::canonicalize(p).ok();
        let Some(dir) = same(json_dir) else {
            return Ok(());
        };
        for r in &self.experiments {
            let Some(pattern) = &r.results else { continue };
            for read in recorded_files(pattern, base) {
                let Some(read_at) = same(&read) else { continue };
                let writer = self
                    .experiments
                    .iter()
                    .filter(|w| w.results.is_none())
                    .find(|w| {
                        dir.join(format!("{}.json", ExperimentFile::json_stem(&w.name))) == read_at
                    });
                if let Some(w) = writer {
                    return Err(format!(
                        "--json-dir {}: experiment '{}' would write {}, which experiment '{}' reads (results = \"{}\"): give --json-dir another directory",
                        json_dir.display(),
                        escape_controls(&w.name),
                        read.display(),
                        escape_controls(&r.name),
                        escape_controls(pattern)
                    ));
                }
            }
        }
        Ok(())
    }
}

impl PlanFile {
    /// Plan `plan`'s verdicts on results recorded under `base` (the lab's
    /// verdict over a results tree): every experiment `results = "FILE"`, so
    /// nothing runs. Its name, and its verdicts named `EXPERIMENT: EXPR`.
    pub fn judge_recorded(plan: &Path, base: &Path) -> Result<(String, Verdicts), String> {
        let (file, checked) = PlanFile::load(plan, |_, _| {
            Err::<(), _>("runs VMs: only results = \"FILE\" is judged here".to_string())
        })?;
        let mut verdicts = Vec::new();
        for (x, c) in file.experiments.iter().zip(&checked) {
            let Job::Recorded(pattern) = &c.job else {
                continue; // load refused every run or sweep line
            };
            let (doc, not_run) = match Document::recorded(pattern, base) {
                Ok(doc) => (Some(doc), None),
                Err(Unrecorded::Point(why)) => (None, Some(NotRun::Plan(why))),
                Err(Unrecorded::Refused(why)) => {
                    return Err(format!("experiment '{}': {why}", escape_controls(&x.name)))
                }
            };
            let out = ExperimentOutcome::settle(
                &x.name,
                &c.expect,
                &c.requires,
                not_run.as_ref(),
                doc.as_ref(),
                None,
                false,
            );
            verdicts.extend(
                PlanOutcome {
                    experiments: out.into_iter().collect(),
                }
                .verdicts()
                .0,
            );
        }
        Ok((file.name, Verdicts(verdicts)))
    }
}
