//! `ipivmm check PLAN.toml`: a suite as data (like kvm-unit-tests'
//! `unittests.cfg`): named experiments, each a `run` or a `sweep` written as
//! its command line, with the expectations that must hold, and what the
//! host must have for them to mean anything. The verdicts go out as TAP on
//! stdout (and JUnit with `--junit`); the exit code is kselftest's: 0 all
//! hold, 1 one fails, 4 none could be judged. docs/ci.md.
use super::sweep::{plan_sweep, PlanError};
use super::{fail, init_log};
use crate::cli::args::{repeat_choice, CheckArgs, Cli, Command, RunArgs, SweepArgs};
use crate::output::atomic::write_atomic_with;
use crate::output::dest::{emit, print_text, Dest};
use crate::output::journal::Journal;
use crate::sweep::execute::Quiet;
use clap::Parser;
use ipivmm::expect::{evaluate, Expectation, Outcome, Verdict, Verdicts};
use ipivmm::experiment::rounds::{run_rounds, Options, Planned};
use ipivmm::host::HostInfo;
use ipivmm::Document;
use ipivmm_term::text::escape_controls;
use serde::Deserialize;
use std::path::Path;
use std::process::ExitCode;

/// A plan file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    /// The suite's name (the TAP comment, the JUnit suite).
    name: String,
    /// What the suite checks.
    #[serde(default)]
    about: String,
    /// The experiments, in order.
    #[serde(rename = "experiment")]
    experiments: Vec<Experiment>,
}

/// One experiment of a plan.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Experiment {
    /// Its name (prefixes its test points).
    name: String,
    /// What it shows.
    #[serde(default)]
    about: String,
    /// `ipivmm run` flags.
    run: Option<String>,
    /// `ipivmm sweep` flags.
    sweep: Option<String>,
    /// What the host must have: apicv, ipiv, avic, x2avic, hardware-kvm,
    /// two-sockets; without it every expectation is a skip with the reason.
    #[serde(default)]
    requires: Vec<String>,
    /// The expectations.
    expect: Vec<String>,
}

/// An experiment checked: its command parsed, its expectations read.
enum Job {
    Run(Box<RunArgs>),
    Sweep(Box<SweepArgs>),
}

/// What the host lacks of `need`, if anything.
fn unmet(need: &str, host: Option<&HostInfo>) -> Result<Option<String>, String> {
    let verdict = |pick: fn(&ipivmm::host::ApicvVerdicts) -> &ipivmm::host::ApicvSupport| match host
        .map(|h| pick(&h.verdicts))
    {
        Some(ipivmm::host::ApicvSupport::Available) => None,
        Some(ipivmm::host::ApicvSupport::Unavailable(why)) => Some(format!("needs {need}: {why}")),
        None => Some(format!("needs {need}: the host facts could not be read")),
    };
    Ok(match need {
        "apicv" => verdict(|v| &v.apicv),
        "ipiv" => verdict(|v| &v.ipiv),
        "avic" => verdict(|v| &v.avic),
        "x2avic" => verdict(|v| &v.x2avic),
        "apicv-or-avic" => verdict(|v| &v.apicv).and(verdict(|v| &v.avic)),
        "hardware-kvm" => match host.map(|h| &h.backend) {
            Some(ipivmm::host::KvmBackend::KvmIntel | ipivmm::host::KvmBackend::KvmAmd) => None,
            Some(b) => Some(format!("needs a hardware KVM (kvm_intel or kvm_amd); this is {b}")),
            None => Some("needs a hardware KVM: the host facts could not be read".into()),
        },
        "two-sockets" => {
            let cpus = ipivmm::mode::levers::allowed_cpus();
            let places = crate::sweep::topology::read_places(Path::new("/sys/devices/system/cpu"), &cpus);
            let mut sockets: Vec<i64> = places.iter().map(|p| p.package).collect();
            sockets.sort_unstable();
            sockets.dedup();
            (sockets.len() < 2).then(|| format!("needs two sockets; this host has {}", sockets.len()))
        }
        other => {
            return Err(format!(
                "requires '{other}': not one of apicv, ipiv, avic, x2avic, apicv-or-avic, hardware-kvm, two-sockets"
            ))
        }
    })
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

/// The plan read and every experiment checked, before anything runs.
/// A job of the plan with its parsed expectations.
type Checked = (Job, Vec<Expectation>);

fn load(path: &Path) -> Result<(Plan, Vec<Checked>), String> {
    let text =
        ipivmm::inputs::read_text(path, 1 << 20).map_err(|e| format!("{}: {e}", path.display()))?;
    let plan: Plan = toml::from_str(&text).map_err(|e| {
        let at = e.span().map_or(String::new(), |span| {
            let (line, column) = line_column(&text, span.start);
            format!("line {line}, column {column}: ")
        });
        format!("{}: {at}{}", path.display(), e.message().trim_end())
    })?;
    let mut jobs = Vec::new();
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
        let expectations = x
            .expect
            .iter()
            .map(|e| e.parse::<Expectation>().map_err(|e| at(e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        if expectations.is_empty() {
            return Err(at("no expectation: add expect = [\"...\"]".into()));
        }
        for need in &x.requires {
            unmet(need, None).map_err(at)?;
        }
        jobs.push((job, expectations));
    }
    if jobs.is_empty() {
        return Err(format!("{}: no [[experiment]]", path.display()));
    }
    Ok((plan, jobs))
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

/// Every expectation of an experiment with one `outcome`: a skip where it
/// could not be judged here, a failure where the plan itself was wrong.
fn all_with(name: &str, expectations: &[Expectation], outcome: Outcome) -> Vec<Verdict> {
    expectations
        .iter()
        .map(|e| Verdict {
            name: format!("{name}: {}", e.text),
            outcome: outcome.clone(),
        })
        .collect()
}

/// Every expectation of an experiment that could not be judged, as a skip.
fn all_skipped(name: &str, expectations: &[Expectation], why: &str) -> Vec<Verdict> {
    all_with(name, expectations, Outcome::Skip(why.to_string()))
}

/// Why an experiment left no document.
#[derive(Debug, PartialEq)]
enum NotRun {
    /// This host cannot run it (no /dev/kvm, a mode it lacks): a skip.
    Host(String),
    /// The plan asked for something `run`/`sweep` refuse: a failure.
    Plan(String),
}

/// Runs one experiment: its document, or why it could not run. Each
/// finished run goes into a journal, on disk at `json` (`--json-dir`) from
/// before the first VM; what the journal could not write is in `errors`.
fn execute(
    job: &Job,
    cancel: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    json: Option<&Path>,
    errors: &mut Vec<String>,
) -> Result<Document, NotRun> {
    let not_run = |e: ipivmm::RunError| match e.host_cannot_run() {
        true => NotRun::Host(e.to_string()),
        false => NotRun::Plan(e.to_string()),
    };
    let (doc, journal_error) = match job {
        Job::Run(args) => {
            let config = args.to_config().map_err(NotRun::Plan)?;
            // What `run` refuses before any VM is a plan error (or this
            // host's), and leaves an older file alone.
            ipivmm::run::prepare::prepare(&config).map_err(not_run)?;
            // `--repeat` in a plan's line as on the command line (default
            // 5; auto): independent VMs whose median the ratios judge, in
            // the engine's one repeat loop (a signal stops it before the
            // next VM; a busy repeat is run again).
            let choice = repeat_choice(args.repeat);
            let journal = Journal::start(
                json,
                "check",
                choice.planned() as usize,
                config.guest_memory_budget,
            );
            let mut opts = Options::new(choice.rounds(args.budget), cancel.clone());
            opts.observer_pairs = args.observer_effect;
            let mut skipped = Vec::new();
            run_rounds(
                &[Planned::single(config)],
                &mut skipped,
                &opts,
                &journal,
                &Quiet,
            );
            journal.finish(Vec::new())
        }
        Job::Sweep(args) => {
            let planned = plan_sweep(args).map_err(|e| match e {
                PlanError::NothingToRun(why) => NotRun::Host(why),
                e => NotRun::Plan(e.to_string()),
            })?;
            let choice = repeat_choice(args.repeat);
            let journal = Journal::start(json, "check", 0, planned.spec().base.guest_memory_budget);
            let swept = planned.run(
                args.observer_effect,
                choice.rounds(args.budget),
                cancel,
                &Quiet,
                journal,
            );
            errors.extend(swept.errors);
            (swept.doc, None)
        }
    };
    errors.extend(journal_error);
    Ok(doc)
}

/// Every expectation of an experiment that could not run because of the
/// plan, as a failure: an error in a plan never reads as a skip.
fn all_failed(name: &str, expectations: &[Expectation], why: &str) -> Vec<Verdict> {
    all_with(name, expectations, Outcome::Fail(why.to_string()))
}

/// Run the `check` subcommand.
pub fn main(args: &CheckArgs) -> ExitCode {
    init_log("warn");
    let (plan, jobs) = match load(&args.plan) {
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
    let cancel = ipivmm::interrupt::cancel_flag();
    let host = ipivmm::host::probe().ok();
    let mut verdicts = Vec::new();
    let mut errors = Vec::new();
    for (x, (job, expectations)) in plan.experiments.iter().zip(&jobs) {
        if !args.quiet {
            eprintln!(
                "ipivmm: check: {}{}",
                escape_controls(&x.name),
                if x.about.is_empty() {
                    String::new()
                } else {
                    format!(": {}", escape_controls(&x.about))
                }
            );
        }
        let missing: Vec<String> = x
            .requires
            .iter()
            .filter_map(|need| unmet(need, host.as_ref()).ok().flatten())
            .collect();
        if !missing.is_empty() {
            verdicts.extend(all_skipped(&x.name, expectations, &missing.join("; ")));
            continue;
        }
        if cancel.load(std::sync::atomic::Ordering::SeqCst) {
            verdicts.extend(all_skipped(&x.name, expectations, "not run: cancelled"));
            continue;
        }
        // The experiment's file, from before its first VM (its journal).
        let json = args.json_dir.as_ref().and_then(|dir| {
            let file = dir.join(format!("{}.json", json_stem(&x.name)));
            match std::fs::create_dir_all(dir) {
                Ok(()) => Some(file),
                Err(e) => {
                    errors.push(format!("writing --json-dir {}: {e}", dir.display()));
                    None
                }
            }
        });
        let doc = match execute(job, &cancel, json.as_deref(), &mut errors) {
            Ok(d) => d,
            Err(NotRun::Host(why)) => {
                verdicts.extend(all_skipped(
                    &x.name,
                    expectations,
                    &format!("could not run here: {why}"),
                ));
                continue;
            }
            Err(NotRun::Plan(why)) => {
                verdicts.extend(all_failed(
                    &x.name,
                    expectations,
                    &format!("plan error, not run: {why}"),
                ));
                continue;
            }
        };
        if let Some(file) = &json {
            let written = write_atomic_with(file, |w| {
                let mut w = std::io::BufWriter::new(w);
                serde_json::to_writer_pretty(&mut w, &doc)?;
                std::io::Write::write_all(&mut w, b"\n")?;
                std::io::Write::flush(&mut w)
            });
            if let Err(e) = written {
                errors.push(format!("writing --json-dir {}: {e}", file.display()));
            }
        }
        for mut v in evaluate(&doc, expectations).0 {
            v.name = format!("{}: {}", x.name, v.name);
            verdicts.push(v);
        }
    }

    let verdicts = Verdicts(verdicts);
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
                let (plan, jobs) = load(&p).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(plan.experiments.len(), jobs.len());
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
}
