//! The lab's plans over results the guest's steps wrote outside a plan
//! (`ipivmm check` cannot make them: a `--host-param` sweep reloads the
//! vendor module, the exit flood and the overhead runs are single runs
//! with their own watchdogs, the Linux pass's runs are
//! scripts/lab/probe-linux.sh's): each plan's experiments name their
//! results files (`results = "runs/..."`), and the verdict judges them here
//! with ipivmm's own plan loader and expectation engine. What the runs
//! must satisfy is the plan's; this file only reports it.
use super::report::Report;
use ipivmm_analysis::expect::{Outcome, Verdicts};
use ipivmm_analysis::results::{metrics::Metric, Document};
use std::path::Path;

/// The plans/ of this tree.
pub const PLANS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../plans");

/// The plans judged over a pass's results, each once the step that writes
/// its files ran: plan, step.
pub const RECORDED: &[(&str, &str)] = &[
    ("lab-hostswitch.toml", "hostswitch"),
    ("lab-flood.toml", "flood-lost"),
    ("lab-overhead.toml", "overhead"),
];

/// Plan `plan` (in plans/) judged over the results tree `dir`: one check
/// ([`report`]). With `unmade_ok`, a scope that matched no run (a part of
/// the pass not run: `lab.probe=`) is listed, not failed.
pub fn judge(r: &mut Report, dir: &Path, plan: &str, unmade_ok: bool) {
    let name = format!("ipivmm check plans/{plan} (its results files)");
    match ipivmm_analysis::plan::file::PlanFile::judge_recorded(&Path::new(PLANS).join(plan), dir) {
        Ok((_, v)) => report(r, &name, plan, plan, &v, Vec::new(), unmade_ok),
        Err(e) => r.bad(name, vec![e]),
    }
}

/// Plan `plan`'s verdicts `v` as check `name`, with what was held, failed
/// and skipped. What fails it: `offences` (the TAP's, when it was read
/// back), a failure, a skip without a reason, nothing judged at all, and
/// in a lab plan (plans/lab-*.toml: every figure it states is measured in
/// the lab, so its only skips are of combinations a sweep skipped, which
/// the plan's `unexpected_skips` judges) a skip other than `not run here`.
/// Skips are listed after it as `  WHO skip: ...`; with `unmade_ok`, so is
/// a scope that matched no run.
pub fn report(
    r: &mut Report,
    name: &str,
    plan: &str,
    who: &str,
    v: &Verdicts,
    mut offences: Vec<String>,
    unmade_ok: bool,
) {
    let (mut held, mut failed, mut skipped, mut listed) = (0, 0, 0, Vec::new());
    for (n, v) in v.0.iter().enumerate().map(|(i, v)| (i + 1, v)) {
        match &v.outcome {
            Outcome::Pass(_) => held += 1,
            Outcome::Fail(why) if unmade_ok && why.starts_with("no run matches") => {
                skipped += 1;
                listed.push(format!("  {who} skip: {}: not made by this pass", v.name));
            }
            Outcome::Fail(why) => {
                failed += 1;
                offences.push(format!("not ok {n} - {}: {why}", v.name));
            }
            // A gate question its repeats could not decide: no pass.
            Outcome::Undecided(why) => {
                failed += 1;
                offences.push(format!("not ok {n} - {} # TODO undecided: {why}", v.name));
            }
            Outcome::Skip(why) => {
                skipped += 1;
                listed.push(format!("  {who} skip: {}: {why}", v.name));
                if why.is_empty() {
                    offences.push(format!("ok {n} - {}: skipped without a reason", v.name));
                } else if plan.starts_with("lab-") && !why.starts_with("not run here:") {
                    offences.push(format!(
                        "ok {n} - {} # SKIP {why}: not measured in the lab",
                        v.name
                    ));
                }
            }
        }
    }
    if held + failed == 0 && skipped > 0 && !unmade_ok {
        offences.push("every expectation skipped: nothing judged".into());
    }
    r.check(
        &format!("{name}: {held} held, {failed} failed, {skipped} skipped"),
        offences,
    );
    for l in listed {
        r.info(l);
    }
}

/// What counting cost in one overhead run, one line: mode, the engine's
/// line of its pairs (counted / detached p50, the runs that failed), exits
/// per operation (the counted run's measured phase) and the host ns each
/// exit gained.
pub fn overhead_summary(name: &str, doc: &Document) -> String {
    let Some(r) = doc.runs.first() else {
        return format!("{name}: no runs");
    };
    let mode = format!("{} {}", r.mode.apic.name(), r.mode.target.name());
    let Some(o) = &r.observer_effect else {
        return format!("{mode}: no observer effect (run {})", r.status.name());
    };
    let exits = Metric::ExitsPerOp.value(&r.summary()).unwrap_or(0.0);
    let gained_ns = (o.with_counters_p50 - o.without_counters_p50) * 1e6 / r.tsc_khz.max(1) as f64;
    let per_exit = if exits > 0.0 {
        format!("{}", (gained_ns / exits).round())
    } else {
        "-".into()
    };
    // The engine's own line for the pairs (p50s, ratio, failed runs).
    format!(
        "{mode}: {}; {} exits per {}, {per_exit} ns more per exit",
        o.text(),
        (exits * 100.0).round() / 100.0,
        r.mode.workload.operation(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overhead(how: &str) -> Document {
        let p = format!(
            "{}/fixtures/overhead/overhead-x2apic-halt-{how}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        Document::load(Path::new(&p)).unwrap()
    }

    #[test]
    fn the_cost_of_counting_and_its_failed_pairs() {
        // The engine's line of the pairs, then the exits and ns per exit
        // (checks.jq's figures for the same files).
        assert_eq!(
            overhead_summary("bpf", &overhead("bpf")),
            "x2apic halt: counting cost: p50 949474 cycles with the counters (exit reasons bpf) vs 564999 without, +68.0% (4 pairs of runs: beyond the noise, the pairs' ratio +16.6% to +114.0% at 88%); 3.45 exits per round trip, 53026 ns more per exit"
        );
        let line = overhead_summary("off", &overhead("off"));
        assert!(
            line.starts_with("x2apic halt: counting cost: p50 1091520 cycles with the counters (exit reasons off) vs 783120 without, +39.4% (3 pairs of runs: ")
                && line.contains("; 1 runs failed: pair 2, counted: failed: vcpu1: payload panic: ")
                && line.ends_with("; 3.25 exits per round trip, 45204 ns more per exit"),
            "{line}"
        );
        let mut none = overhead("bpf");
        none.runs[0].observer_effect = None;
        assert_eq!(
            overhead_summary("bpf", &none),
            "x2apic halt: no observer effect (run completed)"
        );
    }
}
