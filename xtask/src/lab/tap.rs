//! The guest's `ipivmm check` steps as the lab reads them back: each runs
//! a plan of plans/ (scripts/lab/init.sh's `check_plan`): the lab's sweeps
//! with the invariants they must satisfy (plans/lab-*.toml) and the
//! counting invariants any KVM host must satisfy (plans/kvm-paths.toml,
//! issue 21). Its TAP version 13 on stdout, written by ipivmm's own
//! `output::tap` and read back by the same module's `parse` into the
//! engine's verdicts, is the check (judged as the lab judges any plan's
//! verdicts: [`recorded::report`]); the JUnit XML it wrote beside it
//! (`output::junit`) must tell the same story.
use super::recorded;
use super::report::Report;
use ipivmm_analysis::expect::Verdicts;
use std::fs;
use std::path::Path;

/// A guest step that runs `ipivmm check` on a plan: its TAP is
/// `<step>.tap`, its JUnit `<step>.junit.xml`, each experiment's results
/// `runs/<step>/<experiment>.json`.
#[derive(Debug)]
pub struct PlanStep {
    /// init.sh's step (steps.tsv's name).
    pub step: &'static str,
    /// The plan it runs in the quick pass (and under `--steps`).
    pub quick: &'static str,
    /// The plan it runs in the full pass.
    pub full: &'static str,
}

impl PlanStep {
    /// The plan file (in plans/) the step runs in the full pass (`full`)
    /// or another.
    pub fn plan(&self, full: bool) -> &'static str {
        if full {
            self.full
        } else {
            self.quick
        }
    }
}

/// The plan steps of the quick and full passes, in the order they run.
pub const PLAN_STEPS: &[PlanStep] = &[
    PlanStep {
        step: "sweep",
        quick: "lab-sweep.toml",
        full: "lab-full.toml",
    },
    PlanStep {
        step: "kvm-paths",
        quick: "kvm-paths.toml",
        full: "kvm-paths.toml",
    },
    PlanStep {
        step: "sweep-npt0",
        quick: "lab-npt0.toml",
        full: "lab-sweep.toml",
    },
];

/// The plan steps `(step, plan)` of a pass: in a `whole` pass or one that
/// `ran` the step, its TAP is wanted; where the tree the lab was built from
/// had no such plan (plans.txt lists what the initramfs carried), the
/// verdict says so with a skip.
pub fn plans<'a>(
    r: &mut Report,
    dir: &Path,
    steps: impl IntoIterator<Item = (&'a str, &'a str)>,
    whole: bool,
    ran: impl Fn(&str) -> bool,
) {
    let carried = fs::read_to_string(dir.join("plans.txt")).unwrap_or_default();
    for (step, plan) in steps {
        let carried = carried.lines().any(|l| l == plan);
        plan_step(r, dir, step, plan, (whole, ran(step), carried));
    }
}

/// [`plans`] of one step, which runs `plan`: in a whole pass or one it
/// `ran` in, its TAP is wanted; `carried` when the initramfs had the plan.
fn plan_step(
    r: &mut Report,
    dir: &Path,
    step: &str,
    plan: &str,
    (whole, ran, carried): (bool, bool, bool),
) {
    let name = format!("ipivmm check plans/{plan}");
    let file = format!("{step}.tap");
    match fs::read_to_string(dir.join(&file)) {
        Ok(text) => {
            let (v, problems) = Verdicts::from_tap(&text);
            recorded::report(r, &name, plan, step, &v, problems, false);
            let junit = format!("{step}.junit.xml");
            r.check(
                &format!("{name}: its JUnit ({junit}) says the same"),
                match fs::read_to_string(dir.join(&junit)) {
                    Ok(xml) => junit_offences(&xml, &v),
                    Err(e) => vec![format!("{junit}: {e}")],
                },
            );
        }
        Err(_) if carried && (whole || ran) => r.bad(
            name,
            vec![if ran {
                format!("step {step} wrote no {file}")
            } else {
                format!("step {step} did not run")
            }],
        ),
        Err(_) if whole || ran => r.skip(
            name,
            format!("the tree the lab was built from has no plans/{plan}"),
        ),
        Err(_) => {}
    }
}

/// How a JUnit report written by `ipivmm check --junit` disagrees with the
/// TAP of the same run, or what in it is a failure: not XML, a test case
/// that failed or errored, a skip without a message, other counts than the
/// TAP's.
fn junit_offences(xml: &str, tap: &Verdicts) -> Vec<String> {
    let doc = match roxmltree::Document::parse(xml) {
        Ok(d) => d,
        Err(e) => return vec![format!("not XML: {e}")],
    };
    let mut out = Vec::new();
    let (mut cases, mut skipped) = (0, 0);
    for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        cases += 1;
        let name = case.attribute("name").unwrap_or("?");
        for n in case.children().filter(|n| n.is_element()) {
            match n.tag_name().name() {
                "failure" | "error" => out.push(format!(
                    "{name}: {} {}",
                    n.tag_name().name(),
                    n.attribute("message").unwrap_or("")
                )),
                "skipped" => {
                    skipped += 1;
                    if n.attribute("message").is_none_or(|m| m.trim().is_empty()) {
                        out.push(format!("{name}: skipped without a message"));
                    }
                }
                _ => {}
            }
        }
    }
    // JUnit has a skip for what the TAP says is undecided too.
    let tap_skipped = tap.counts().2 + tap.undecided();
    if (cases, skipped) != (tap.0.len(), tap_skipped) {
        out.push(format!(
            "{cases} test cases ({skipped} skipped), the TAP {} points ({tap_skipped} skipped)",
            tap.0.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ipivmm check plans/kvm-paths.toml --junit` on this machine's kvm_pvm.
    const CHECK_TAP: &str = include_str!("../../fixtures/tap/check-kvm-paths.tap");
    const CHECK_JUNIT: &str = include_str!("../../fixtures/tap/check-kvm-paths.junit.xml");

    /// The JUnit `ipivmm check --junit` wrote with the TAP of
    /// fixtures/tap/check-kvm-paths.tap (this machine, kvm_pvm).
    #[test]
    fn the_junit_tells_the_taps_story() {
        let (tap, problems) = Verdicts::from_tap(CHECK_TAP);
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(junit_offences(CHECK_JUNIT, &tap), Vec::<String>::new());
        let (held, failed, skipped) = tap.counts();
        assert!(held > 0 && skipped > 0 && failed == 0, "{tap:?}");
        // One case fewer than the TAP has points.
        let cut = CHECK_JUNIT.replacen("<testcase ", "<dropped ", 1);
        let cut = cut.replacen("</testcase>", "</dropped>", 1);
        assert_eq!(junit_offences(&cut, &tap).len(), 1, "{cut}");
        // A failure.
        let failed = CHECK_JUNIT.replacen(
            "classname=\"ipivmm\">",
            "classname=\"ipivmm\"><failure message=\"got 2\"/>",
            1,
        );
        assert_eq!(
            junit_offences(&failed, &tap),
            ["unicast: ipis_per_operation == fan_out [pingpong 2v kernel/xapic/icr]: failure got 2"]
        );
        assert_eq!(junit_offences("<testsuites", &tap).len(), 1);
    }

    /// The plans the host reads back are the plans of plans/ that init.sh
    /// runs as those steps.
    #[test]
    fn the_plan_steps_are_what_init_sh_runs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap();
        let init = std::fs::read_to_string(root.join("scripts/lab/init.sh")).unwrap();
        for p in PLAN_STEPS {
            for plan in [p.quick, p.full] {
                assert!(root.join("plans").join(plan).is_file(), "no plans/{plan}");
                let line = format!("step {} ", p.step);
                assert!(
                    init.lines().any(|l| l.trim_start().starts_with(&line)
                        && l.contains(&format!(" check_plan {} {plan}", p.step))),
                    "init.sh runs no `check_plan {} {plan}` as step {}",
                    p.step,
                    p.step
                );
            }
            assert_eq!(p.plan(false), p.quick);
            assert_eq!(p.plan(true), p.full);
        }
    }
}
