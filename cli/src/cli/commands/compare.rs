//! `ipivmm compare A.json B.json ...`: recorded runs side by side, lined
//! up by file, mode or vCPU count (`--by`), gated against a baseline; or
//! `ipivmm compare --run 'FLAGS' --run 'FLAGS'`: two configurations run
//! here, interleaved, until the gate decides or the budget is spent.
use super::{fail, init_log, say};
use crate::cli::args::CompareArgs;
use crate::output::compare::{self, Comparison, GateOptions};
use crate::output::dest::{print_text, Outputs};
use crate::output::fit::wrap;
use crate::output::journal::Journal;
use crate::output::sink::Files;
use crate::output::style::{color_stderr, color_stdout};
use ipivmm::experiment::interleaved::{Arm, InterleavedEvents, Spec, Stopped};
use ipivmm_analysis::gate::profile::NoiseProfile;
use ipivmm_analysis::gate::sequential::Look;
use ipivmm_analysis::gate::{Policy, Verdict};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::Document;
use ipivmm_analysis::results::RunReport;
use std::path::PathBuf;
use std::process::ExitCode;

/// The exit status of `compare --fail-on-regression` when nothing was
/// compared (docs/ci.md): an error, not a pass.
pub const NOTHING_COMPARED: u8 = Verdict::NothingCompared.exit_code();

fn policy(args: &CompareArgs) -> Policy {
    Policy {
        threshold: args.threshold,
        count_tolerance: args.count_tolerance,
        ..ipivmm_analysis::gate::Policy::DEFAULT
    }
}

/// The figures judged: `--gate` names the whole set, else the defaults.
fn gated(args: &CompareArgs) -> Vec<Metric> {
    if args.gate.is_empty() {
        return GateOptions::DEFAULT_GATED.to_vec();
    }
    let mut g = Vec::new();
    for m in &args.gate {
        if !g.contains(m) {
            g.push(*m);
        }
    }
    g
}

/// Run the `compare` subcommand.
pub fn main(args: &CompareArgs) -> ExitCode {
    init_log("warn");
    if !args.run.is_empty() {
        return live(args);
    }
    if args.output.given.iter().any(|(s, _)| s.flag == "json") {
        return fail("--json writes the runs of a live comparison (--run); the files compared are already results files");
    }
    if let Some(Err(e)) = args
        .phase
        .as_deref()
        .map(ipivmm::VmConfig::check_phase_name)
    {
        return fail(e);
    }
    // Baseline files not among the inputs are read too, first.
    let mut files: Vec<PathBuf> = Vec::new();
    if args.by == compare::Dimension::File {
        for b in &args.baseline {
            let p = PathBuf::from(b);
            // Among the inputs as given or by another path to the same
            // file; never another file of the same name.
            let same = |f: &PathBuf| {
                f == &p
                    || matches!((std::fs::canonicalize(f), std::fs::canonicalize(&p)),
                        (Ok(a), Ok(b)) if a == b)
            };
            let listed = args.files.iter().any(same);
            if !listed && p.is_file() {
                files.push(p);
            }
        }
    }
    files.extend(args.files.iter().cloned());
    let inputs: Vec<&std::path::Path> = files.iter().map(|p| p.as_path()).collect();
    let outputs = match Outputs::plan_all(&args.output.requests(None), &inputs) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let drift = match &args.noise_profile {
        Some(p) => match NoiseProfile::load(p) {
            Ok(profile) => Some(profile),
            Err(e) => return fail(e),
        },
        None => None,
    };
    let mut recorded = Vec::with_capacity(files.len());
    let mut mismatches = Vec::new();
    let mut not_whole: Vec<String> = Vec::new();
    for f in &files {
        match Document::load(f) {
            Ok(mut d) => {
                if let Some(phase) = &args.phase {
                    d.read_phase(phase);
                }
                let name = f.display().to_string();
                // The engine's one rule of what a recording is: a file a
                // killed command wrote, or one with no run, fails a gate.
                if let Err(e) = d.check_whole(f) {
                    not_whole.push(e.to_string());
                }
                if let Some(p) = &drift {
                    mismatches.extend(p.matches(&[(name.as_str(), &d)]));
                }
                recorded.push((name, compare::Recorded::of(&d)))
            }
            Err(e) => return fail(e),
        }
    }
    // A profile given is used, or the command says why not: measured on
    // another host, kernel, configuration or version, it is refused by a
    // gate unless --noise-profile-any; with several baseline recordings
    // their own spread measures the drift.
    let drift = match drift {
        Some(p) if !mismatches.is_empty() => {
            for m in &mismatches {
                say(&format!("ipivmm: noise profile: {m}"));
            }
            match (args.fail_on_regression, args.noise_profile_any) {
                (true, false) => {
                    return fail(format!(
                        "the noise profile does not match the files ({} difference{}): record one for them (ipivmm calibrate), or --noise-profile-any to use it anyway",
                        mismatches.len(),
                        if mismatches.len() == 1 { "" } else { "s" }
                    ))
                }
                (_, true) => {
                    say("ipivmm: noise profile: used although it does not match (--noise-profile-any)");
                    Some(p)
                }
                (false, false) => {
                    say("ipivmm: noise profile: not used: it does not match (--noise-profile-any uses it anyway)");
                    None
                }
            }
        }
        Some(_) if args.baseline.len() > 1 => {
            say("ipivmm: noise profile: not used: the several --baseline recordings measure the drift between recordings themselves");
            None
        }
        d => d,
    };
    // A baseline that names no column is refused before anything is written.
    let comparison = match Comparison::of_recorded(&recorded, args.by, &args.baseline) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let gate = comparison.gate(&GateOptions {
        policy: policy(args),
        gated: gated(args),
        drift: drift.as_ref().map(|p| p.between_log_sd),
        keep_busy: args.keep_busy,
    });
    let errors = outputs.write_from(&Files(&files, args.phase.as_deref()), &mut |f| {
        if !args.quiet {
            eprintln!("wrote {}", f.display());
        }
    });
    if !args.quiet {
        let to_stderr = outputs.uses_stdout();
        let color = if to_stderr {
            color_stderr()
        } else {
            color_stdout()
        };
        let mut text = compare::render(&comparison, &gate, color, args.fail_on_regression);
        if let Some(p) = &drift {
            text.push_str(&wrap(&format!("{}\n", p.line())));
        }
        print_text(&text, to_stderr);
    }
    log::info!(
        "compare: {} files, {} runs, peak RSS {} KiB",
        recorded.len(),
        recorded.iter().map(|(_, r)| r.runs.len()).sum::<usize>(),
        ipivmm::run::peak_rss_kib().unwrap_or(0)
    );
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    if !args.fail_on_regression {
        return if errors.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    // Said even with -q: what the gate decided, and why where it is no pass.
    let verdict = gate.verdict();
    if verdict == Verdict::NothingCompared {
        let why = comparison.flags.join("; ");
        eprintln!(
            "{}",
            wrap(&format!(
                "ipivmm: error: nothing compared: no gated figure of the baseline has a column to compare with{}",
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({why})")
                }
            ))
            .trim_end()
        );
        return ExitCode::from(NOTHING_COMPARED);
    }
    for (line, _) in compare::decisions(&comparison, &gate) {
        eprint!("{}", wrap(&format!("ipivmm: {line}\n")));
    }
    for cav in &gate.caveats {
        eprint!("{}", wrap(&format!("ipivmm: caveat: {cav}\n")));
    }
    let counts = tally(gate.family.judged.iter().map(|j| &j.outcome));
    if !not_whole.is_empty() {
        // Never judged as if whole, never a pass: a failing point per file.
        for e in &not_whole {
            eprint!("{}", wrap(&format!("ipivmm: {e}\n")));
        }
        eprintln!(
            "ipivmm: gate: FAIL ({counts}; {} file{} not a whole recording)",
            not_whole.len(),
            if not_whole.len() == 1 { "" } else { "s" }
        );
        return ExitCode::from(1);
    }
    eprintln!("ipivmm: gate: {} ({counts})", verdict_word(verdict));
    if !errors.is_empty() {
        return ExitCode::from(1);
    }
    ExitCode::from(gate.exit_code())
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "FAIL",
        Verdict::Undecided => "undecided",
        Verdict::NothingCompared => "nothing compared",
    }
}

/// `3 judged: 2 equivalent, 1 regressed`.
fn tally<'a>(outcomes: impl Iterator<Item = &'a ipivmm_analysis::gate::Decision>) -> String {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    let mut total = 0;
    for o in outcomes {
        total += 1;
        match counts.iter_mut().find(|(w, _)| *w == o.word()) {
            Some((_, n)) => *n += 1,
            None => counts.push((o.word(), 1)),
        }
    }
    let parts: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
    format!(
        "{total} figure{} judged: {}",
        if total == 1 { "" } else { "s" },
        parts.join(", ")
    )
}

/// Progress on stderr, and every run journaled to `--json` as it ends.
struct Progress<'a> {
    quiet: bool,
    journal: &'a Journal,
}

impl InterleavedEvents for Progress<'_> {
    fn run_finished(&self, round: usize, arm: usize, r: &RunReport) {
        self.journal.record(r.clone());
        if self.quiet {
            return;
        }
        let s = r.summary();
        let p50 = Metric::CyclesPerOpP50
            .value(&s)
            .map_or_else(|| "-".into(), |v| format!("{v:.0}"));
        let status = if r.succeeded() {
            String::new()
        } else {
            format!(" ({})", r.status.line())
        };
        eprintln!(
            "round {:>3} {}: p50 {p50} cycles{status}",
            round + 1,
            if arm == 0 { "A" } else { "B" },
        );
    }

    fn looked(&self, l: &Look, max_rounds: usize) {
        if self.quiet {
            return;
        }
        let first = l.judged.first();
        let line = first.map_or_else(String::new, compare::outcome_line);
        eprintln!(
            "{}",
            wrap(&format!(
                "look after {} of at most {max_rounds} rounds: {}: {line}",
                l.rounds,
                verdict_word(l.verdict)
            ))
            .trim_end()
        );
    }
}

/// `compare --run A --run B`.
fn live(args: &CompareArgs) -> ExitCode {
    if args.run.len() != 2 {
        return fail(format!(
            "--run given {} time{}: give it twice, the baseline's flags then the new side's (e.g. --run '--apic x2apic' --run '--apic x2apic --inject-delay-cycles 100000')",
            args.run.len(),
            if args.run.len() == 1 { "" } else { "s" }
        ));
    }
    if !args.baseline.is_empty() {
        return fail("--run compares live: --baseline is for recorded files (the first --run is the baseline)");
    }
    let outputs = match Outputs::plan_all(&args.output.requests(None), &[]) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let configs = match (
        super::run_flags(&args.run[0]),
        super::run_flags(&args.run[1]),
    ) {
        (Ok(a), Ok(b)) => [a, b],
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let [a, b] = configs;
    let budget = a.guest_memory_budget.max(b.guest_memory_budget);
    let mut spec = Spec {
        arms: [
            Arm {
                name: args.run[0].clone(),
                config: a,
            },
            Arm {
                name: args.run[1].clone(),
                config: b,
            },
        ],
        policy: policy(args),
        gated: gated(args),
        budget: args.budget,
        seed: args.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        }),
    };
    if let Err(e) = spec.check() {
        return fail(e);
    }
    // What `run` checks before a VM, for both sides: a host that cannot
    // run them is "could not run here" (4 for a gate, as `run --expect`,
    // `sweep --expect` and `check` say it), a bad request an error.
    for (i, arm) in spec.arms.iter().enumerate() {
        if let Err(e) = arm.config.prepare() {
            let side = format!("--run '{}'", args.run[i]);
            return match (e.host_cannot_run(), args.fail_on_regression) {
                (true, true) => super::not_run_here("ipivmm compare", &format!("{side}: {e}")),
                _ => fail(format!("{side}: {e}")),
            };
        }
    }
    if let Some(line) = spec.mount_tracefs() {
        if !args.quiet {
            super::say(&format!("ipivmm: {line}"));
        }
    }
    if !args.quiet {
        eprintln!(
            "{}",
            wrap(&format!(
                "compare live: A = [{}], B = [{}]; rounds of one run each in alternating order (AB BA AB ...), \
                 looks from round {}, until the gate decides or the budget ({}) is spent",
                args.run[0],
                args.run[1],
                ipivmm_analysis::gate::sequential::Sequential::MIN_ROUNDS,
                args.budget
            ))
            .trim_end()
        );
    }
    let cancel = ipivmm_analysis::interrupt::cancel_flag();
    // Every run of both sides, journaled like `run --repeat`: a file that
    // `compare` reads afterwards, marked incomplete until the end.
    let journal = Journal::start(outputs.file_of("json"), "compare", budget);
    let events = Progress {
        quiet: args.quiet,
        journal: &journal,
    };
    let finding = match spec.run(cancel, &events) {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let (doc, journal_error) = journal.finish(Vec::new());
    let mut errors = outputs.write(&doc);
    errors.extend(journal_error);
    let why = match &finding.stopped {
        Stopped::Decided => "decided".to_string(),
        Stopped::Budget => format!("budget spent ({})", args.budget),
        Stopped::Cancelled => "cancelled".to_string(),
        Stopped::RunFailed { arm, status } => format!(
            "a run of {} did not complete: {status}",
            if *arm == 0 { "A (the baseline)" } else { "B" }
        ),
        Stopped::Unmeasurable(missing) => format!(
            "no round can decide: {}",
            missing
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Stopped::BudgetTooSmall { fits, per_round } => format!(
            "the budget ({}) fits {fits} round{} at {:.1} s a round, and the gate's first look needs {}: give --budget {}s or more",
            args.budget,
            if *fits == 1 { "" } else { "s" },
            per_round.as_secs_f64(),
            ipivmm_analysis::gate::sequential::Sequential::MIN_ROUNDS,
            (per_round.as_secs_f64() * (ipivmm_analysis::gate::sequential::Sequential::MIN_ROUNDS as f64 + 1.0)).ceil()
        ),
    };
    let mut out = format!(
        "stopped after {} round{} ({} VMs, {:.0} s): {why}\n",
        finding.rounds,
        if finding.rounds == 1 { "" } else { "s" },
        finding.vms,
        finding.elapsed.as_secs_f64()
    );
    if let Some(l) = &finding.look {
        for (m, j) in finding.gated.iter().zip(&l.judged) {
            out.push_str(&format!(
                "{}, B against A: {}\n",
                m.name("op"),
                compare::outcome_line(j)
            ));
        }
    }
    // A lever that had nothing to act on here (halt polling that never
    // polled) is said beside the verdict.
    for n in compare::live_lever_notes(&finding.runs) {
        out.push_str(&format!("{n}\n"));
    }
    let verdict = finding.verdict();
    out.push_str(&format!(
        "ipivmm: gate: {} (order seed {}: --seed {} replays it)\n",
        verdict_word(verdict),
        finding.seed,
        finding.seed
    ));
    eprint!("{}", wrap(&out));
    for e in &errors {
        eprintln!("ipivmm: error: {e}");
    }
    if let Some(code) = super::cancelled() {
        return code;
    }
    if !errors.is_empty() {
        return ExitCode::from(1);
    }
    if !args.fail_on_regression {
        return ExitCode::SUCCESS;
    }
    ExitCode::from(finding.exit_code())
}
