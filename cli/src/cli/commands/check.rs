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
use ipivmm::experiment::rounds::{self, Planned};
use ipivmm::plan::{self as engine, Execution, Recorder};
use ipivmm_analysis::expect::Verdicts;
use ipivmm_analysis::plan::file::{Checked, ExperimentFile, Job as FileJob, LineCommand, PlanFile};
use ipivmm_analysis::plan::{ExperimentOutcome, NotRun};
use ipivmm_analysis::results::Document;
use ipivmm_analysis::results::SkippedMode;
use ipivmm_host::facts::HostInfo;
use ipivmm_term::text::escape_controls;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// An experiment's command line, parsed.
enum Job {
    Run(Box<RunArgs>),
    Sweep(Box<SweepArgs>),
}

/// Parses `flags` as the flags of `ipivmm <command>`.
fn parse_job(command: LineCommand, flags: &str) -> Result<Job, String> {
    let words = shlex::split(flags)
        .ok_or_else(|| format!("cannot split '{flags}' into words (unbalanced quotes?)"))?;
    let argv = ["ipivmm".to_string(), command.to_string()]
        .into_iter()
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

/// The plan file read and every experiment checked, before anything runs:
/// the engine's loader, each `run`/`sweep` line parsed as the flags of
/// this front end's command.
fn load(path: &Path) -> Result<(PlanFile, Vec<Checked<Job>>), String> {
    PlanFile::load(path, parse_job)
}

/// The guest memory budget of a whole `check` invocation: the largest of
/// its experiments' (`--guest-memory-budget` of their lines; the default
/// when none runs). One budget for all: every experiment's document is
/// held until the command ends.
fn invocation_budget(plan: &engine::Plan) -> u64 {
    plan.experiments
        .iter()
        .flat_map(|x| &x.runs)
        .map(|p| p.config.guest_memory_budget)
        .max()
        .unwrap_or(ipivmm_devices::budget::DEFAULT_BUDGET)
}

/// Experiment `x` of the file as the engine's, its command line planned
/// on `host`: the configurations to run (a sweep's skips beside them), or
/// why it cannot run (this host's reason, a skip; the plan's, a failure);
/// recorded results read under `base`.
fn experiment(
    x: &ExperimentFile,
    c: Checked<Job>,
    host: Option<&HostInfo>,
    base: &Path,
) -> Result<engine::Experiment, String> {
    let mut e = engine::Experiment::from_file(x, &c, base)?;
    let FileJob::Flags(job) = &c.job else {
        return Ok(e);
    };
    let not_run = |err: ipivmm::RunError| match err.host_cannot_run() {
        true => NotRun::Host(err.to_string()),
        false => NotRun::Plan(err.to_string()),
    };
    let planned = match job {
        Job::Run(args) => args.to_config().map_err(NotRun::Plan).and_then(|config| {
            // What `run` refuses before any VM is a plan error (or this
            // host's), and leaves an older file alone.
            config.prepare().map_err(not_run)?;
            Ok((vec![Planned::single(config)], Vec::new(), None))
        }),
        Job::Sweep(args) => plan_sweep(args)
            .map(|p| {
                let (runs, skipped) = crate::sweep::plan(p.spec(), p.host().or(host));
                (runs, skipped, p.preset().cloned())
            })
            .map_err(|e| match e {
                PlanError::NothingToRun(why) | PlanError::HostCannotRun(why) => NotRun::Host(why),
                e => NotRun::Plan(e.to_string()),
            }),
    };
    // `--repeat` in a plan's line as on the command line (default 5;
    // auto): independent VMs whose median the ratios judge, in the
    // engine's one repeat loop.
    let (repeat, budget, pairs) = match job {
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
    Ok(e)
}

/// How `check` follows the engine: a line per experiment on stderr, each
/// experiment's runs into a journal (on disk in `--json-dir` from before
/// its first VM), its document rewritten whole when it ends.
struct CheckEvents<'a> {
    json_dir: Option<&'a Path>,
    /// The one budget of the invocation ([`invocation_budget`]).
    budget: std::sync::Arc<ipivmm::SharedBudget>,
    quiet: bool,
    /// What could not be written.
    errors: RefCell<Vec<String>>,
}

impl CheckEvents<'_> {
    /// The `--json-dir` file of experiment `x`.
    fn json(&self, x: &engine::Experiment) -> Option<PathBuf> {
        let dir = self.json_dir?;
        match std::fs::create_dir_all(dir) {
            Ok(()) => Some(dir.join(format!("{}.json", ExperimentFile::json_stem(&x.name)))),
            Err(e) => {
                let e = format!("writing --json-dir {}: {e}", dir.display());
                self.errors.borrow_mut().push(e);
                None
            }
        }
    }
}

impl rounds::RoundEvents for CheckEvents<'_> {}

impl Recorder for Journal {
    fn finish(self: Box<Self>, skipped: Vec<SkippedMode>) -> (Document, Option<String>) {
        Journal::finish(*self, skipped)
    }
}

impl engine::PlanEvents for CheckEvents<'_> {
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
        Box::new(Journal::start_shared(
            self.json(x).as_deref(),
            "check",
            self.budget.clone(),
        ))
    }

    fn finished(&self, x: &engine::Experiment, out: &ExperimentOutcome) {
        let mut errors = self.errors.borrow_mut();
        errors.extend(out.error.clone());
        // The document whole (the preset's report with it), once it ran.
        let (Some(doc), Some(dir)) = (&out.doc, self.json_dir) else {
            return;
        };
        let file = dir.join(format!("{}.json", ExperimentFile::json_stem(&x.name)));
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
        if let Err(e) = file.json_dir_reads_none(dir, Path::new(".")) {
            return fail(e);
        }
    }
    let how = Execution {
        cancel: ipivmm_analysis::interrupt::cancel_flag(),
    };
    let host = ipivmm_host::facts::probe().ok();
    let experiments = file
        .experiments
        .iter()
        .zip(checked)
        .map(|(x, c)| experiment(x, c, host.as_ref(), Path::new(".")))
        .collect::<Result<_, _>>();
    let plan = match experiments {
        Ok(experiments) => engine::Plan {
            name: file.name.clone(),
            about: file.about.clone(),
            experiments,
        },
        Err(e) => return fail(e),
    };
    let events = CheckEvents {
        json_dir: args.json_dir.as_deref(),
        budget: std::sync::Arc::new(ipivmm::SharedBudget::new(invocation_budget(&plan))),
        quiet: args.quiet,
        errors: RefCell::new(Vec::new()),
    };
    let verdicts: Verdicts = plan.execute_with(host.as_ref(), &how, &events).verdicts();
    let mut errors = events.errors.into_inner();

    let suite = if plan.about.is_empty() {
        plan.name.clone()
    } else {
        format!("{}: {}", plan.name, plan.about)
    };
    let tap = verdicts.tap(&suite);
    if junit == Some(Dest::Stdout) {
        print_text(&tap, true);
    } else if let Err(e) = emit(&Dest::Stdout, tap.as_bytes()) {
        errors.push(format!("writing TAP: {e}"));
    }
    if let Some(d) = junit {
        let written = verdicts
            .junit(&plan.name)
            .and_then(|xml| emit(&d, xml.as_bytes()).map_err(|e| e.to_string()));
        if let Err(e) = written {
            errors.push(format!("writing --junit: {e}"));
        }
    }
    eprintln!(
        "ipivmm: check {}: {}",
        escape_controls(&plan.name),
        verdicts.summary()
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
                "lab-apicv-topology",
                "lab-avic-off",
                "lab-avic-on",
                "lab-avic-preset",
                "lab-flood",
                "lab-full",
                "lab-halt-polling",
                "lab-hostswitch",
                "lab-linux",
                "lab-npt0",
                "lab-overhead",
                "lab-pv-features",
                "lab-sweep",
                "seeds"
            ]
        );
    }

    /// A plan over recorded files (`results = GLOB`) never judges what is
    /// not a whole recording: a journal killed before its first run, a copy
    /// of a file the glob also matches, a link to it, each named.
    #[test]
    fn recorded_globs_name_killed_files_copies_and_links() {
        let dir =
            std::env::temp_dir().join(format!("ipivmm-check-recorded-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("runs")).unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let fixture = root.join("xtask/fixtures/lab-quick/runs/sweep.json");
        std::fs::copy(&fixture, dir.join("runs/a.json")).unwrap();
        let doc = Document::recorded("runs/*.json", &dir).expect("one whole file");
        assert!(!doc.runs.is_empty() && doc.incomplete.is_none());
        let mut killed = Document::new(Vec::new(), Vec::new());
        killed.incomplete = Some("check in progress (or killed): no run planned yet".into());
        std::fs::write(
            dir.join("runs/b.json"),
            serde_json::to_string(&killed).unwrap(),
        )
        .unwrap();
        let e = Document::recorded("runs/*.json", &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("b.json: not a whole recording"), "{e}");
        std::fs::remove_file(dir.join("runs/b.json")).unwrap();
        std::fs::copy(&fixture, dir.join("runs/c.json")).unwrap();
        let e = Document::recorded("runs/*.json", &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("same run"), "{e}");
        std::fs::remove_file(dir.join("runs/c.json")).unwrap();
        std::os::unix::fs::symlink(dir.join("runs/a.json"), dir.join("runs/link.json")).unwrap();
        let e = Document::recorded("runs/*.json", &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("same run"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 47 (6.3): `--json-dir` where an experiment would write the
    /// file another reads as `results = GLOB` is refused before any VM,
    /// naming both (the journal used to replace the recording at once).
    #[test]
    fn a_json_dir_that_would_overwrite_a_recording_is_refused() {
        let dir = std::env::temp_dir().join(format!("ipivmm-check-jsondir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::write(dir.join("out/fresh.json"), "{}").unwrap();
        let plan = "name = \"x\"\n\
            [[experiment]]\nname = \"fresh\"\nrun = \"\"\nexpect = [\"exits_per_ipi < 1\"]\n\
            [[experiment]]\nname = \"old\"\nresults = \"out/*.json\"\nexpect = [\"exits_per_ipi < 1\"]\n";
        let (file, _) = load(&write("jsondir", plan)).unwrap();
        let e = file
            .json_dir_reads_none(&dir.join("out"), &dir)
            .unwrap_err();
        assert!(
            e.contains("experiment 'fresh' would write")
                && e.contains("out/fresh.json")
                && e.contains("experiment 'old' reads (results = \"out/*.json\")"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        // Another directory, or a recording no experiment writes: fine.
        std::fs::create_dir_all(dir.join("new")).unwrap();
        assert!(file.json_dir_reads_none(&dir.join("new"), &dir).is_ok());
        assert!(file.json_dir_reads_none(&dir.join("missing"), &dir).is_ok());
        std::fs::rename(dir.join("out/fresh.json"), dir.join("out/older.json")).unwrap();
        assert!(file.json_dir_reads_none(&dir.join("out"), &dir).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 47 (6.2): every experiment of one `check` draws on one
    /// budget, the largest experiment's (each had its own: 4 floods at
    /// 32 MiB each held 140 MiB at the peak).
    #[test]
    fn one_guest_memory_budget_for_the_whole_invocation() {
        let experiment = |name: &str, mib: u64| {
            let config = ipivmm::VmConfig {
                guest_memory_budget: mib << 20,
                ..Default::default()
            };
            engine::Experiment::new(
                name,
                vec![Planned::single(config)],
                rounds::Repeats::Fixed(1),
                Vec::new(),
            )
        };
        let plan = engine::Plan {
            name: "p".into(),
            about: String::new(),
            experiments: vec![
                experiment("a", 32),
                experiment("b", 64),
                experiment("c", 16),
            ],
        };
        assert_eq!(invocation_budget(&plan), 64 << 20);
        let events = CheckEvents {
            json_dir: None,
            budget: std::sync::Arc::new(ipivmm::SharedBudget::new(invocation_budget(&plan))),
            quiet: true,
            errors: RefCell::new(Vec::new()),
        };
        let first = engine::PlanEvents::recorder(&events, &plan.experiments[0]);
        first.budget().keep(30 << 20);
        let (_, _) = first.finish(Vec::new());
        // The first experiment's document is still held (the outcome keeps
        // it): the second experiment's runs start with it counted.
        let second = engine::PlanEvents::recorder(&events, &plan.experiments[1]);
        assert_eq!(second.budget().held(), 30 << 20);
        assert_eq!(second.budget().limit(), 64 << 20);
        assert_eq!(second.budget().for_run().earlier(), 30 << 20);
    }

    /// Issue 49: `kernel =` and `initrd =` boot the Linux guest of a run or
    /// sweep line (its linux:NAME workloads); not of recorded results, and
    /// an initrd without its kernel is refused, each naming the experiment.
    #[test]
    fn kernel_and_initrd_boot_a_lines_linux_guest() {
        let plan = write(
            "linux.toml",
            r#"name = "l"
[[experiment]]
name = "sweep"
sweep = "--workload linux:ipi-broadcast --apic xapic,x2apic"
kernel = "/boot/vmlinuz with space"
initrd = "/tmp/initrd"
expect = ["operations > 0"]
[[experiment]]
name = "run"
run = "--workload linux:ipi-unicast"
kernel = "/boot/vmlinuz"
expect = ["operations > 0"]
"#,
        );
        let (_, checked) = load(&plan).unwrap();
        let FileJob::Flags(Job::Sweep(s)) = &checked[0].job else {
            panic!("a sweep")
        };
        assert_eq!(
            (s.linux.kernel.as_deref(), s.linux.initrd.as_deref()),
            (
                Some(Path::new("/boot/vmlinuz with space")),
                Some(Path::new("/tmp/initrd"))
            )
        );
        let FileJob::Flags(Job::Run(r)) = &checked[1].job else {
            panic!("a run")
        };
        let c = r.to_config().unwrap();
        assert_eq!(
            c.payload.linux().and_then(|g| g.workload),
            Some(ipivmm::analysis::mode::LinuxWorkload::IpiUnicast)
        );
        for (body, why) in [
            (
                "run = \"--workload linux:idle\"\ninitrd = \"/i\"",
                "initrd = needs kernel =",
            ),
            (
                "results = \"runs/*.json\"\nkernel = \"/k\"",
                "kernel = / initrd = boot the Linux guest of a run or sweep line",
            ),
            (
                "run = \"--workload linux:idle\"",
                "--workload linux:idle: a Linux guest's workload needs --kernel",
            ),
        ] {
            let plan = write(
                "linux-bad.toml",
                &format!("name = \"l\"\n[[experiment]]\nname = \"x\"\n{body}\nexpect = [\"operations > 0\"]\n"),
            );
            let e = load(&plan).map(|_| ()).unwrap_err();
            assert!(e.contains("experiment 'x': ") && e.contains(why), "{e}");
        }
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

    /// Issue 47: a `check` plan whose only gate question (a `ratio()`)
    /// is undecided exited 0 beside passes (undecided was a TAP SKIP); it
    /// exits 4, its TAP point `not ok ... # TODO undecided: ...`. The plan
    /// judges recorded repeats of the lab's x2APIC ping-pong and its
    /// `--apicv inhibit` twin whose p50s overlap.
    #[test]
    fn a_plan_whose_only_ratio_is_undecided_exits_4() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text =
            std::fs::read_to_string(root.join("xtask/fixtures/lab-quick/runs/sweep.json")).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let runs = v["runs"].as_array().unwrap().clone();
        let mut out = Vec::new();
        for (run, p50s) in [(0, [1_000u64, 2_000]), (3, [1_500, 1_600])] {
            for (i, p50) in p50s.into_iter().enumerate() {
                let mut r = runs[run].clone();
                r["repeat"] = i.into();
                for p in r["vcpus"][0]["phases"].as_array_mut().unwrap() {
                    if p["name"] == "measure" {
                        p["latency"]["p50"] = p50.into();
                    }
                }
                r.as_object_mut().unwrap().remove("metrics");
                out.push(r);
            }
        }
        v["runs"] = serde_json::Value::Array(out);
        let dir = std::env::temp_dir().join(format!("ipivmm-undecided-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("d.json"), v.to_string()).unwrap();
        let plan = write(
            "undecided",
            "name = \"u\"\n[[experiment]]\nname = \"x\"\nresults = \"d.json\"\nexpect = [\n  \"operations > 0\",\n  \"ratio(cycles_per_operation_p50, kernel/x2apic/icr, kernel/x2apic/icr apicv-inhibit) < 1\",\n]\n",
        );
        let (_, verdicts) = PlanFile::judge_recorded(&plan, &dir).unwrap_or_else(|e| panic!("{e}"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(verdicts.counts().0, 4, "{verdicts:?}");
        assert_eq!(verdicts.undecided(), 1, "{verdicts:?}");
        assert_eq!(verdicts.exit_code(), 4);
        let tap = verdicts.tap("u");
        assert!(
            tap.contains("not ok 5 - x: ratio(cycles_per_operation_p50, kernel/x2apic/icr, kernel/x2apic/icr apicv-inhibit) < 1 # TODO undecided: "),
            "{tap}"
        );
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
            Verdicts::of(&doc, expect)
        };
        let real = judge("xtask/fixtures/lab-quick/runs/sweep.json");
        let (passed, failed, _) = real.counts();
        assert!(passed > 0 && failed == 0, "{real:?}");
        let tampered = judge("xtask/fixtures/tampered-sweep.json");
        let failed: Vec<String> = tampered
            .0
            .iter()
            .filter(|v| matches!(v.outcome, ipivmm_analysis::expect::Outcome::Fail(_)))
            .map(|v| v.name.clone())
            .collect();
        for needle in ["recorded.* == *", "ipis_delivered == ipis_sent ["] {
            assert!(
                failed.iter().any(|n| n.starts_with(needle)),
                "{needle}: {failed:?}"
            );
        }
    }

    /// The failures of plan `plan`'s expectations (every experiment's) on
    /// the xtask fixture `file` edited by `edit` (its JSON): the lab's
    /// checks that moved into plans must still fail what they failed.
    fn tampered(plan: &str, file: &str, edit: impl FnOnce(&mut serde_json::Value)) -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (_, checked) = load(&root.join("plans").join(plan)).unwrap();
        let text = std::fs::read_to_string(root.join("xtask/fixtures").join(file)).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        edit(&mut v);
        let doc = Document::from_json(&v.to_string(), file).unwrap();
        checked
            .iter()
            .flat_map(|c| Verdicts::of(&doc, &c.expect).0)
            .filter(|v| match &v.outcome {
                ipivmm_analysis::expect::Outcome::Pass(_) => false,
                // As the lab lists them for the Linux pass: a part not run.
                ipivmm_analysis::expect::Outcome::Fail(why) => {
                    plan != "lab-linux.toml" || !why.starts_with("no run matches")
                }
                ipivmm_analysis::expect::Outcome::Skip(_)
                | ipivmm_analysis::expect::Outcome::Undecided(_) => true,
            })
            .map(|v| v.name)
            .collect()
    }

    /// runs[run].vcpus[vcpu]'s phase `name`.
    fn phase<'a>(
        v: &'a mut serde_json::Value,
        run: usize,
        vcpu: usize,
        name: &str,
    ) -> &'a mut serde_json::Value {
        v["runs"][run]["vcpus"][vcpu]["phases"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["name"] == name)
            .unwrap()
    }

    /// Asserts that plan `plan` on the fixture `file` edited by `edit`
    /// fails a line that starts with `line` (see [`tampered`]).
    #[track_caller]
    fn assert_tampered_fails(
        plan: &str,
        file: &str,
        edit: impl FnOnce(&mut serde_json::Value),
        line: &str,
    ) {
        let failed = tampered(plan, file, edit);
        assert!(
            fails(&failed, line),
            "{plan} on {file}: nothing failed as {line:?}: {failed:?}"
        );
    }

    fn fails(failed: &[String], line: &str) -> bool {
        failed.iter().any(|n| n.starts_with(line))
    }

    /// The kernel's APICv inhibit events against the host verdict, once a
    /// Rust check of the lab's (xtask's checks.rs), now lines of its sweep plans.
    #[test]
    fn the_lab_plans_judge_the_kernels_inhibit_events() {
        const SWEEP: &str = "lab-quick/runs/sweep.json";
        for plan in ["lab-sweep.toml", "lab-npt0.toml", "lab-full.toml"] {
            let real = tampered(plan, SWEEP, |_| {});
            assert!(!fails(&real, "run.apicv"), "{plan}: {real:?}");
        }
        assert_tampered_fails(
            "lab-sweep.toml",
            SWEEP,
            |v| {
                v["runs"][2]
                    .as_object_mut()
                    .unwrap()
                    .remove("apicv_observed");
            },
            "run.apicv_sampled == 1 [broadcast 2v user/xapic/icr]",
        );
        assert_tampered_fails(
            "lab-sweep.toml",
            SWEEP,
            |v| v["runs"][3]["apicv_observed"]["inhibits_at_end"] = serde_json::json!(["ABSENT"]),
            "apicv=unavailable: run.apicv_at_end:DISABLED == 1 [",
        );
        assert_tampered_fails(
            "lab-sweep.toml",
            SWEEP,
            |v| phase(v, 0, 1, "measure")["apicv"]["active"] = true.into(),
            "apicv=unavailable: vcpu*.phase.apicv_active == 0 [",
        );
        assert_tampered_fails(
            "lab-sweep.toml",
            SWEEP,
            |v| phase(v, 0, 0, "warmup")["apicv"]["active"] = true.into(),
            "apicv=unavailable @warmup: vcpu*.phase.apicv_active == 0 [",
        );
        assert_tampered_fails(
            "lab-sweep.toml",
            SWEEP,
            |v| {
                v["runs"][1]["apicv_observed"]["lever"] =
                    serde_json::json!({"reason": "PIT_REINJ", "observed": false})
            },
            "run.apicv_lever_missed == 0 [",
        );
    }

    /// The host-parameter sweep, the exit flood and the overhead runs: what
    /// the guest's steps record outside a plan, judged by the lab's plans.
    #[test]
    fn the_lab_plans_judge_what_the_guest_recorded_outside_a_plan() {
        const HP: &str = "lab-quick/runs/sweep-hostparam.json";
        assert_eq!(
            tampered("lab-hostswitch.toml", HP, |_| {}),
            Vec::<String>::new()
        );
        let flipped = tampered("lab-hostswitch.toml", HP, |v| {
            v["runs"][1]["host_settings"]["params"]["kvm_amd"]["npt"] = "Y".into()
        });
        assert_eq!(
            flipped,
            ["run.host_param_as_asked == 1 [pingpong 2v kernel/x2apic/icr kvm_amd.npt=0]"]
        );
        assert_tampered_fails(
            "lab-hostswitch.toml",
            HP,
            |v| v["runs"][1]["host_param"] = "kvm_amd.npt=1".into(),
            "host-param=kvm_amd.npt=0: operations > 0",
        );
        assert_tampered_fails(
            "lab-hostswitch.toml",
            HP,
            |v| {
                v["runs"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("host_settings");
            },
            "run.host_param_as_asked == 1 [",
        );

        // A flood: what the sampler lost is reported, sampled + missing = KVM's.
        const FLOOD: &str = "lab-quick/runs/sweep.json";
        assert_eq!(
            tampered("lab-flood.toml", FLOOD, |_| {}),
            Vec::<String>::new()
        );
        assert_tampered_fails(
            "lab-flood.toml",
            FLOOD,
            |v| phase(v, 0, 0, "measure")["exit_reasons"]["lost"] = 3.into(),
            "vcpu*.phase.exit_reasons_complete * vcpu*.exit_reasons.lost == 0 [",
        );
        assert_tampered_fails(
            "lab-flood.toml",
            FLOOD,
            |v| phase(v, 0, 0, "measure")["exit_reasons"]["missing"] = 1.into(),
            "vcpu*.kvm_stats.exits == vcpu*.phase.exits_sampled + vcpu*.exit_reasons.missing [",
        );

        // Overhead: a run of a pair that failed, the measured run failing.
        const BPF: &str = "overhead/overhead-x2apic-halt-bpf.json";
        assert_eq!(
            tampered("lab-overhead.toml", BPF, |_| {}),
            Vec::<String>::new()
        );
        assert_eq!(
            tampered(
                "lab-overhead.toml",
                "overhead/overhead-x2apic-halt-off.json",
                |_| {}
            ),
            ["run.observer_pairs_failed == 0"]
        );
        assert_tampered_fails(
            "lab-overhead.toml",
            BPF,
            |v| {
                v["runs"][0]["status"] =
                    serde_json::json!({"state": "failed", "reason": "vcpu1: fault"})
            },
            "operations > 0",
        );
    }

    /// The Linux pass's checks, once xtask's linux_checks.rs, as
    /// plans/lab-linux.toml's lines on real runs (xtask/fixtures/linux).
    #[test]
    fn the_linux_plan_judges_real_runs_and_tampered_ones() {
        let linux = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| {
            tampered("lab-linux.toml", &format!("linux/linux-{name}.json"), |v| {
                edit(v)
            })
        };
        for n in [
            "broadcast-x2apic-2-host",
            "broadcast-x2apic-4-host",
            "broadcast-xapic-2-inhibit",
            "hackbench-x2apic-2-inhibit",
        ] {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let (_, checked) = load(&root.join("plans/lab-linux.toml")).unwrap();
            let doc =
                Document::load(&root.join(format!("xtask/fixtures/linux/linux-{n}.json"))).unwrap();
            let v = Verdicts::of(&doc, &checked[0].expect);
            let bad: Vec<_> =
                v.0.iter()
                    .filter(|v| match &v.outcome {
                        ipivmm_analysis::expect::Outcome::Pass(_) => false,
                        ipivmm_analysis::expect::Outcome::Fail(why) => {
                            !why.starts_with("no run matches")
                        }
                        ipivmm_analysis::expect::Outcome::Skip(_)
                        | ipivmm_analysis::expect::Outcome::Undecided(_) => true,
                    })
                    .collect();
            assert!(bad.is_empty(), "{n}: {bad:?}");
        }
        const B2: &str = "broadcast-x2apic-2-host";
        let set = |vcpu: usize, name: &'static str, path: &'static [&'static str], x: u64| {
            move |v: &mut serde_json::Value| {
                let mut p = phase(v, 0, vcpu, name);
                for k in path {
                    p = &mut p[*k];
                }
                *p = x.into();
            }
        };
        // A target that missed IPIs, or got more than the kernel's own explain.
        let few = linux(B2, &set(1, "measure", &["records", "linux_cal"], 49));
        assert!(fails(&few, "workload=linux:ipi-broadcast|linux:ipi-unicast|linux:ipi-multicast: vcpu1.records.linux_cal >= "), "{few:?}");
        let many = linux(B2, &set(1, "measure", &["records", "linux_cal"], 80));
        assert!(fails(&many, "workload=linux:ipi-broadcast|linux:ipi-unicast|linux:ipi-multicast: vcpu1.records.linux_cal <= "), "{many:?}");
        let busy = linux(B2, &|v| {
            set(1, "measure", &["records", "linux_cal"], 80)(v);
            set(1, "idle", &["records", "linux_cal"], 1000)(v);
        });
        assert_eq!(busy, Vec::<String>::new());
        // AVIC off: a broadcast that did not exit.
        let off = linux(
            "broadcast-xapic-2-inhibit",
            &set(0, "measure", &["icr_write_exits", "exits"], 10),
        );
        assert!(fails(&off, "workload=linux:ipi-broadcast|linux:ipi-unicast|linux:ipi-multicast apicv!=active: vcpu0.phase.icr_write_exits >= "), "{off:?}");
        // AVIC on: an emulated write; no write accelerated.
        let on = linux(B2, &set(0, "measure", &["tracepoints", "kvm_apic_ipi"], 3));
        assert!(fails(&on, "workload=linux:ipi-broadcast|linux:ipi-unicast|linux:ipi-multicast apicv=active: vcpu0.tracepoints.kvm_apic_ipi == 0"), "{on:?}");
        let none = linux(B2, &set(0, "measure", &["icr_write_exits", "exits"], 50));
        assert!(fails(&none, "workload=linux:ipi-broadcast|linux:ipi-unicast|linux:ipi-multicast apicv=active apic=x2apic vcpus=2: vcpu0.guest.icr_writes > "), "{none:?}");
        // Hackbench's reschedule IPIs: KVM sent vcpu1 fewer than its kernel counted.
        let lost = linux(
            "hackbench-x2apic-2-inhibit",
            &set(0, "measure", &["tracepoints", "kvm_apic_ipi"], 200),
        );
        assert!(fails(&lost, "workload!=linux:idle vcpus=2 apicv!=active: vcpu1.records.linux_cal + vcpu1.records.linux_res <= "), "{lost:?}");
        // A vCPU without its measured phase.
        let gone = linux(B2, &|v| {
            v["runs"][0]["vcpus"][1]["phases"]
                .as_array_mut()
                .unwrap()
                .retain(|p| p["name"] != "measure")
        });
        assert!(
            fails(&gone, "workload!=linux:idle: vcpu*.records.linux_cal >= 0"),
            "{gone:?}"
        );
    }
}
