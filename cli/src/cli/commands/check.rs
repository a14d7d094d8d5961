//! `ipivmm check PLAN.toml`: a suite as data (like kvm-unit-tests'
//! `unittests.cfg`): named experiments, each a `run` or a `sweep` written as
//! its command line, with the expectations that must hold, and what the
//! host must have for them to mean anything. The TOML is parsed into the
//! engine's plan ([`ipivmm::plan::Plan`]), which the engine executes; this
//! command keeps each experiment's runs in a journal (`--json-dir`) and
//! renders the verdicts as TAP on stdout (and JUnit with `--junit`); the
//! exit code is kselftest's: 0 all hold, 1 one fails, 4 none could be
//! judged. docs/ci.md.
use super::sweep::{plan_sweep, PlanError};
use super::{fail, init_log};
use crate::cli::args::{repeat_choice, CheckArgs, Cli, Command, RunArgs, SweepArgs};
use crate::output::atomic::write_atomic_with;
use crate::output::dest::{emit, print_text, Dest};
use crate::output::journal::Journal;
use clap::Parser;
use ipivmm::expect::{Expectation, Verdicts};
use ipivmm::experiment::rounds::{self, Planned};
use ipivmm::host::HostInfo;
use ipivmm::plan::{self as engine, Execution, ExperimentOutcome, NotRun, Recorder, Requirement};
use ipivmm::results::SkippedMode;
use ipivmm::Document;
use ipivmm_term::text::escape_controls;
use serde::Deserialize;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    /// The suite's name (the TAP comment, the JUnit suite).
    name: String,
    /// What the suite checks.
    #[serde(default)]
    about: String,
    /// The experiments, in order.
    #[serde(rename = "experiment")]
    experiments: Vec<ExperimentFile>,
}

/// One experiment of a plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentFile {
    /// Its name (prefixes its test points).
    name: String,
    /// What it shows.
    #[serde(default)]
    about: String,
    /// `ipivmm run` flags.
    run: Option<String>,
    /// `ipivmm sweep` flags.
    sweep: Option<String>,
    /// What the host must have ([`Requirement`]: apicv, ipiv, avic,
    /// x2avic, apicv-or-avic, hardware-kvm, two-sockets); without it every
    /// expectation is a skip with the reason.
    #[serde(default)]
    requires: Vec<String>,
    /// The expectations.
    expect: Vec<String>,
}

/// An experiment's command line, parsed.
enum Job {
    Run(Box<RunArgs>),
    Sweep(Box<SweepArgs>),
}

/// Parses `flags` as the flags of `ipivmm <command>`.
fn parse_job(command: &str, flags: &str) -> Result<Job, String> {
    let words = shlex::split(flags)
        .ok_or_else(|| format!("cannot split '{flags}' into words (unbalanced quotes?)"))?;
    let argv = ["ipivmm", command]
        .into_iter()
        .map(String::from)
        .chain(words);
    let job = match Cli::try_parse_from(argv)
        .map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())?
        .command
    {
        Command::Run(a) => {
            refuse_unhonoured(&a.output, &a.gate)?;
            if a.dry_run {
                return Err(
                    "--dry-run is not for a plan line: `ipivmm run --dry-run FLAGS` checks a run"
                        .into(),
                );
            }
            // What `run` refuses of the request itself is a plan error here
            // too (the host's vCPU limit is the host's, checked when it runs).
            a.to_config()?
                .validate(usize::MAX)
                .map_err(|e| e.to_string())?;
            Job::Run(a)
        }
        Command::Sweep(a) => {
            refuse_unhonoured(&a.output, &a.gate)?;
            if a.dry_run {
                return Err("--dry-run is not for a plan line: `ipivmm sweep --dry-run FLAGS` shows a sweep's plan".into());
            }
            if a.host_param.is_some() {
                return Err("--host-param is not for a plan line (it reloads the vendor module between its stages): run `ipivmm sweep --host-param ... --expect ...`".into());
            }
            Job::Sweep(a)
        }
        _ => unreachable!("the command word is run or sweep"),
    };
    Ok(job)
}

/// Flags of a plan line that `check` would otherwise drop without a word:
/// expectations belong in `expect = [...]`, verdicts and results are the
/// `check` command's own outputs.
fn refuse_unhonoured(
    output: &crate::cli::args::OutputArgs,
    gate: &crate::cli::args::GateArgs,
) -> Result<(), String> {
    if !gate.expect.is_empty() {
        return Err("--expect in a plan line is not checked: move it to expect = [\"...\"]".into());
    }
    let flags = |given: &[(
        &'static crate::output::sink::Sink,
        Option<std::path::PathBuf>,
    )]| {
        given
            .iter()
            .map(|(s, _)| format!("--{}", s.flag))
            .collect::<Vec<_>>()
    };
    let mut dropped = flags(&gate.verdicts.given);
    dropped.extend(flags(&output.given));
    if !dropped.is_empty() {
        return Err(format!(
            "{} in a plan line would be ignored: give `ipivmm check` its own --junit FILE / --json-dir DIR (TAP goes to stdout)",
            dropped.join(", ")
        ));
    }
    Ok(())
}

/// One experiment read and checked, before anything runs.
struct Checked {
    job: Job,
    expect: Vec<Expectation>,
    requires: Vec<Requirement>,
}

/// The plan file read and every experiment checked, before anything runs.
fn load(path: &Path) -> Result<(PlanFile, Vec<Checked>), String> {
    let text =
        ipivmm::inputs::read_text(path, 1 << 20).map_err(|e| format!("{}: {e}", path.display()))?;
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
        if json_stem(&x.name).len() > ipivmm::results::slug::MAX_REVERSIBLE {
            return Err(at(format!(
                "a name this long cannot name its --json-dir file: at most {} bytes once escaped",
                ipivmm::results::slug::MAX_REVERSIBLE
            )));
        }
        if !names.insert(x.name.as_str()) {
            return Err(at(
                "a second experiment of that name: names must differ".into()
            ));
        }
        let job = match (&x.run, &x.sweep) {
            (Some(r), None) => parse_job("run", r),
            (None, Some(s)) => parse_job("sweep", s),
            _ => Err("give one of run = \"FLAGS\" or sweep = \"FLAGS\"".into()),
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
                    let all: Vec<String> = Requirement::ALL.iter().map(|r| r.to_string()).collect();
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

/// The `--json-dir` file stem of experiment `name`: unique per name and
/// readable back (`a b` is `a%20b.json`, never `a-b.json` like `a-b`).
fn json_stem(name: &str) -> String {
    ipivmm::results::slug::reversible(name)
}

/// Experiment `x` of the file as the engine's, its command line planned
/// on `host`: the configurations to run (a sweep's skips beside them), or
/// why it cannot run (this host's reason, a skip; the plan's, a failure).
fn experiment(x: &ExperimentFile, c: Checked, host: Option<&HostInfo>) -> engine::Experiment {
    let mut e = engine::Experiment::new(
        x.name.clone(),
        Vec::new(),
        rounds::Repeats::Fixed(1),
        c.expect,
    );
    e.about = x.about.clone();
    e.requires = c.requires;
    let not_run = |err: ipivmm::RunError| match err.host_cannot_run() {
        true => NotRun::Host(err.to_string()),
        false => NotRun::Plan(err.to_string()),
    };
    let planned = match &c.job {
        Job::Run(args) => args.to_config().map_err(NotRun::Plan).and_then(|config| {
            // What `run` refuses before any VM is a plan error (or this
            // host's), and leaves an older file alone.
            ipivmm::run::prepare::prepare(&config).map_err(not_run)?;
            Ok((vec![Planned::single(config)], Vec::new(), None))
        }),
        Job::Sweep(args) => plan_sweep(args)
            .map(|p| {
                let (runs, skipped) = crate::sweep::plan(p.spec(), p.host().or(host));
                (runs, skipped, p.preset().cloned())
            })
            .map_err(|e| match e {
                PlanError::NothingToRun(why) => NotRun::Host(why),
                e => NotRun::Plan(e.to_string()),
            }),
    };
    // `--repeat` in a plan's line as on the command line (default 5;
    // auto): independent VMs whose median the ratios judge, in the
    // engine's one repeat loop.
    let (repeat, budget, pairs) = match &c.job {
        Job::Run(a) => (a.repeat, a.budget, a.observer_effect),
        Job::Sweep(a) => (a.repeat, a.budget, a.observer_effect),
    };
    e.repeats = repeat_choice(repeat).rounds(budget);
    e.observer_pairs = pairs;
    match planned {
        Ok((runs, skipped, preset)) => {
            e.runs = runs;
            e.skipped = skipped;
            e.preset = preset;
        }
        Err(why) => e.not_run = Some(why),
    }
    e
}

/// How `check` follows the engine: a line per experiment on stderr, each
/// experiment's runs into a journal (on disk in `--json-dir` from before
/// its first VM), its document rewritten whole when it ends.
struct CheckEvents<'a> {
    json_dir: Option<&'a Path>,
    quiet: bool,
    /// What could not be written.
    errors: RefCell<Vec<String>>,
}

impl CheckEvents<'_> {
    /// The `--json-dir` file of experiment `x`.
    fn json(&self, x: &engine::Experiment) -> Option<PathBuf> {
        let dir = self.json_dir?;
        match std::fs::create_dir_all(dir) {
            Ok(()) => Some(dir.join(format!("{}.json", json_stem(&x.name)))),
            Err(e) => {
                let e = format!("writing --json-dir {}: {e}", dir.display());
                self.errors.borrow_mut().push(e);
                None
            }
        }
    }
}

impl rounds::Events for CheckEvents<'_> {}

impl Recorder for Journal {
    fn finish(self: Box<Self>, skipped: Vec<SkippedMode>) -> (Document, Option<String>) {
        Journal::finish(*self, skipped)
    }
}

impl engine::Events for CheckEvents<'_> {
    fn experiment(&self, x: &engine::Experiment) {
        if !self.quiet {
            let about = match x.about.is_empty() {
                true => String::new(),
                false => format!(": {}", escape_controls(&x.about)),
            };
            super::say(&format!(
                "ipivmm: check: {}{about}",
                escape_controls(&x.name)
            ));
        }
    }

    fn recorder(&self, x: &engine::Experiment) -> Box<dyn Recorder> {
        let budget = x
            .runs
            .first()
            .map_or(ipivmm_devices::budget::DEFAULT_BUDGET, |p| {
                p.config.guest_memory_budget
            });
        Box::new(Journal::start(self.json(x).as_deref(), "check", budget))
    }

    fn finished(&self, x: &engine::Experiment, out: &ExperimentOutcome) {
        let mut errors = self.errors.borrow_mut();
        errors.extend(out.error.clone());
        // The document whole (the preset's report with it), once it ran.
        let (Some(doc), Some(dir)) = (&out.doc, self.json_dir) else {
            return;
        };
        let file = dir.join(format!("{}.json", json_stem(&x.name)));
        let written = write_atomic_with(&file, |w| {
            let mut w = std::io::BufWriter::new(w);
            serde_json::to_writer_pretty(&mut w, doc)?;
            std::io::Write::write_all(&mut w, b"\n")?;
            std::io::Write::flush(&mut w)
        });
        if let Err(e) = written {
            errors.push(format!("writing --json-dir {}: {e}", file.display()));
        }
    }
}

/// Run the `check` subcommand.
pub fn main(args: &CheckArgs) -> ExitCode {
    init_log("warn");
    let (file, checked) = match load(&args.plan) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // `-` is stdout, as everywhere; the TAP then goes to stderr.
    let junit = match &args.junit {
        Some(p) if p.as_os_str() == "-" => Some(Dest::Stdout),
        Some(p) => match crate::output::dest::check_file(p, "--junit") {
            Ok(()) => Some(Dest::File(p.clone())),
            Err(e) => return fail(e),
        },
        None => None,
    };
    if let Some(dir) = &args.json_dir {
        if let Err(e) = crate::output::dest::prepare_dir(dir, "--json-dir") {
            return fail(e);
        }
    }
    let how = Execution {
        cancel: ipivmm::interrupt::cancel_flag(),
    };
    let host = ipivmm::host::probe().ok();
    let plan = engine::Plan {
        name: file.name.clone(),
        about: file.about.clone(),
        experiments: file
            .experiments
            .iter()
            .zip(checked)
            .map(|(x, c)| experiment(x, c, host.as_ref()))
            .collect(),
    };
    let events = CheckEvents {
        json_dir: args.json_dir.as_deref(),
        quiet: args.quiet,
        errors: RefCell::new(Vec::new()),
    };
    let verdicts: Verdicts = engine::execute_with(&plan, host.as_ref(), &how, &events).verdicts();
    let mut errors = events.errors.into_inner();

    let suite = if plan.about.is_empty() {
        plan.name.clone()
    } else {
        format!("{}: {}", plan.name, plan.about)
    };
    let tap = crate::output::tap::render(&verdicts, &suite);
    if junit == Some(Dest::Stdout) {
        print_text(&tap, true);
    } else if let Err(e) = emit(&Dest::Stdout, tap.as_bytes()) {
        errors.push(format!("writing TAP: {e}"));
    }
    if let Some(d) = junit {
        let written = crate::output::junit::render(&verdicts, &plan.name)
            .and_then(|xml| emit(&d, xml.as_bytes()).map_err(|e| e.to_string()));
        if let Err(e) = written {
            errors.push(format!("writing --junit: {e}"));
        }
    }
    let (passed, failed, skipped) = verdicts.counts();
    eprintln!(
        "ipivmm: check {}: {passed} passed, {failed} failed, {skipped} skipped",
        escape_controls(&plan.name)
    );
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    // Verdicts and results were written all the same (experiments not run
    // are skips); a cancelled suite exits 128 + the signal.
    if let Some(cancelled) = super::cancelled() {
        cancelled
    } else if errors.is_empty() {
        ExitCode::from(verdicts.exit_code())
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let p =
            std::env::temp_dir().join(format!("ipivmm-plan-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn the_shipped_plans_load() {
        // Every plan of plans/ (the lab's included: cargo xtask lab runs them).
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plans");
        let mut names = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let (plan, checked) = load(&p).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(plan.experiments.len(), checked.len());
                names.push(plan.name);
            }
        }
        names.sort();
        assert_eq!(
            names,
            [
                "kvm-paths",
                "lab-avic-off",
                "lab-avic-on",
                "lab-avic-preset",
                "lab-full",
                "lab-npt0",
                "lab-sweep",
                "seeds"
            ]
        );
    }

    #[test]
    fn bad_plans_are_one_line_errors_naming_the_experiment() {
        for (text, needle) in [
            ("name = \"x\"\n", "missing field `experiment`"),
            ("name = \"x\"\n[[experiment]]\nname = \"a\"\nexpect = [\"exits_per_ipi < 1\"]\n", "give one of run"),
            ("name = \"x\"\n[[experiment]]\nname = \"a\"\nrun = \"--vcpus two\"\nexpect = [\"exits_per_ipi < 1\"]\n", "experiment 'a'"),
            ("name = \"x\"\n[[experiment]]\nname = \"a\"\nrun = \"\"\nexpect = [\"exits_per_ip < 1\"]\n", "no metric 'exits_per_ip'"),
            ("name = \"x\"\n[[experiment]]\nname = \"a\"\nrun = \"\"\nrequires = [\"avx\"]\nexpect = [\"exits_per_ipi < 1\"]\n", "requires 'avx'"),
            ("name = \"x\"\n[[experiment]]\nname = \"a\"\nrun = \"\"\nexpect = []\n", "no expectation"),
            ("name = \"x\"\nbogus = 1\n", "unknown field"),
        ] {
            let e = load(&write("bad", text)).err().unwrap_or_else(|| panic!("accepted: {text}"));
            assert!(e.contains(needle) && !e.contains('\n'), "{text}: {e}");
        }
    }

    /// The lab's checks are its plans' expectations: plans/lab-sweep.toml
    /// holds on the results of a real quick pass (kvm_amd under QEMU TCG,
    /// xtask/fixtures/lab-quick) and fails on a copy whose counters were
    /// edited (one IPI received less: the recorded figures no longer agree,
    /// one IPI is lost), as the lab's Rust checks did before they moved.
    #[test]
    fn the_lab_sweep_plan_judges_a_real_pass_and_a_tampered_one() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (_, checked) = load(&root.join("plans/lab-sweep.toml")).unwrap();
        let expect = &checked[0].expect;
        let judge = |file: &str| {
            let doc = Document::load(&root.join(file)).unwrap();
            ipivmm::expect::evaluate(&doc, expect)
        };
        let real = judge("xtask/fixtures/lab-quick/runs/sweep.json");
        let (passed, failed, _) = real.counts();
        assert!(passed > 0 && failed == 0, "{real:?}");
        let tampered = judge("xtask/fixtures/tampered-sweep.json");
        let failed: Vec<String> = tampered
            .0
            .iter()
            .filter(|v| matches!(v.outcome, ipivmm::expect::Outcome::Fail(_)))
            .map(|v| v.name.clone())
            .collect();
        for needle in ["recorded.* == *", "ipis_delivered == ipis_sent ["] {
            assert!(
                failed.iter().any(|n| n.starts_with(needle)),
                "{needle}: {failed:?}"
            );
        }
    }
}
