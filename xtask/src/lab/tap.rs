//! The guest's `ipivmm check` steps as the lab reads them back: each runs
//! a plan of plans/ (scripts/lab/init.sh's `check_plan`): the lab's sweeps
//! with the invariants they must satisfy (plans/lab-*.toml) and the
//! counting invariants any KVM host must satisfy (plans/kvm-paths.toml,
//! issue 21). Its TAP version 13 on stdout, written by ipivmm's own
//! `output::tap`, one test point per expectation (`ok N - name`,
//! `not ok N - name` with a YAML `message:`, `ok N - name # SKIP why`),
//! and the JUnit XML it wrote beside it (`output::junit`), which must tell
//! the same story.
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

/// One test point.
#[derive(Debug, PartialEq, Eq)]
pub struct Point {
    /// Held (or skipped).
    pub ok: bool,
    /// Its number.
    pub number: usize,
    /// Its description (the experiment and the expectation).
    pub name: String,
    /// `# SKIP` and its reason.
    pub skip: Option<String>,
    /// What a failed point's YAML block says (`message: ...`).
    pub message: Option<String>,
}

/// A TAP document as read.
#[derive(Debug, Default)]
pub struct Tap {
    /// `TAP version 13` came first.
    pub versioned: bool,
    /// The plan line's count (`1..N`).
    pub planned: Option<usize>,
    /// The test points, in order.
    pub points: Vec<Point>,
    /// A `Bail out!` line's reason.
    pub bailed: Option<String>,
}

/// A description with TAP's escaped `#` back to `#`.
fn unescape(s: &str) -> String {
    s.replace("\\#", "#")
}

/// Splits `name # SKIP why` at the first unescaped ` # `.
fn directive(rest: &str) -> (String, Option<String>) {
    let mut from = 0;
    while let Some(i) = rest[from..].find(" # ") {
        let at = from + i;
        if !rest[..at].ends_with('\\') {
            let d = rest[at + 3..].trim();
            let skip = d
                .get(..4)
                .filter(|w| w.eq_ignore_ascii_case("skip"))
                .map(|_| unescape(d[4..].trim()));
            return (unescape(&rest[..at]), skip);
        }
        from = at + 3;
    }
    (unescape(rest), None)
}

impl Tap {
    /// Reads a TAP document (unknown lines are ignored, as TAP says).
    pub fn parse(text: &str) -> Self {
        let mut t = Tap::default();
        for (i, line) in text.lines().enumerate() {
            if i == 0 && line.trim() == "TAP version 13" {
                t.versioned = true;
            } else if let Some(n) = line.strip_prefix("1..") {
                t.planned = n.split_whitespace().next().and_then(|n| n.parse().ok());
            } else if let Some(why) = line.strip_prefix("Bail out!") {
                t.bailed = Some(why.trim().to_string());
            } else if let Some(m) = line.trim_start().strip_prefix("message: ") {
                if let Some(p) = t.points.last_mut() {
                    p.message = Some(serde_json::from_str(m).unwrap_or_else(|_| m.to_string()));
                }
            } else {
                let (ok, rest) = match line.strip_prefix("not ok ") {
                    Some(r) => (false, r),
                    None => match line.strip_prefix("ok ") {
                        Some(r) => (true, r),
                        None => continue,
                    },
                };
                let (number, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                let Ok(number) = number.parse() else { continue };
                let (name, skip) = directive(rest.strip_prefix("- ").unwrap_or(rest));
                t.points.push(Point {
                    ok,
                    number,
                    name,
                    skip,
                    message: None,
                });
            }
        }
        t
    }

    /// (held, failed, skipped).
    pub fn counts(&self) -> (usize, usize, usize) {
        self.points.iter().fold((0, 0, 0), |(h, f, s), p| match p {
            Point { skip: Some(_), .. } => (h, f, s + 1),
            Point { ok: true, .. } => (h + 1, f, s),
            Point { ok: false, .. } => (h, f + 1, s),
        })
    }

    /// What makes the verdict a failure: a point not ok (with its
    /// message), a skip that gives no reason, a malformed or truncated document, a bail-out, nothing
    /// judged at all.
    pub fn offences(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.versioned {
            out.push("not TAP version 13 (no first line 'TAP version 13')".into());
        }
        match self.planned {
            None => out.push("no plan line (1..N): the check did not finish".into()),
            Some(n) if n != self.points.len() => out.push(format!(
                "{n} test points planned, {} reported",
                self.points.len()
            )),
            Some(_) => {}
        }
        if let Some(why) = &self.bailed {
            out.push(format!("bailed out: {why}"));
        }
        for p in self.points.iter().filter(|p| !p.ok && p.skip.is_none()) {
            out.push(match &p.message {
                Some(m) => format!("not ok {} - {}: {m}", p.number, p.name),
                None => format!("not ok {} - {}", p.number, p.name),
            });
        }
        for p in self.points.iter().filter(|p| p.skip.as_deref() == Some("")) {
            out.push(format!(
                "ok {} - {}: skipped without a reason",
                p.number, p.name
            ));
        }
        let (held, failed, _) = self.counts();
        if !self.points.is_empty() && held + failed == 0 {
            out.push("every expectation skipped: nothing judged".into());
        }
        out
    }

    /// The skipped points, `name: why`.
    pub fn skips(&self) -> Vec<String> {
        self.points
            .iter()
            .filter_map(|p| Some(format!("{}: {}", p.name, p.skip.as_ref()?)))
            .collect()
    }
}

/// How a JUnit report written by `ipivmm check --junit` disagrees with the
/// TAP of the same run, or what in it is a failure: not XML, a test case
/// that failed or errored, a skip without a message, other counts than the
/// TAP's.
pub fn junit_offences(xml: &str, tap: &Tap) -> Vec<String> {
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
    let (_, _, tap_skipped) = tap.counts();
    if (cases, skipped) != (tap.points.len(), tap_skipped) {
        out.push(format!(
            "{cases} test cases ({skipped} skipped), the TAP {} points ({tap_skipped} skipped)",
            tap.points.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ipivmm sweep --irqchip kernel --apic x2apic --ipi icr,pv
    /// --workload pingpong --iterations 40 --warmup 4 --expect
    /// 'icr_write_exits_per_ipi == 1 ± 0.01' --expect 'kernel/x2apic/icr:
    /// exits_per_ipi < 0.01' --expect 'ipis_delivered == ipis_sent' --expect
    /// 'kernel/x2apic/pv: icr_write_exits_per_operation == 0' --tap` printed
    /// on this machine's kvm_pvm (ipivmm's own TAP writer, `output::tap`):
    /// one point fails, the PV one is a skip (hypercalls hang here).
    const REAL: &str = include_str!("../../fixtures/tap/sweep-expect.tap");

    /// `ipivmm check plans/kvm-paths.toml --junit` on this machine's kvm_pvm.
    const CHECK_TAP: &str = include_str!("../../fixtures/tap/check-kvm-paths.tap");
    const CHECK_JUNIT: &str = include_str!("../../fixtures/tap/check-kvm-paths.junit.xml");

    #[test]
    fn ipivmms_tap_is_read_back() {
        let t = Tap::parse(REAL);
        assert!(t.versioned);
        assert_eq!(t.planned, Some(4));
        assert_eq!(t.counts(), (2, 1, 1), "{t:?}");
        assert_eq!(t.points[0].name, "icr_write_exits_per_ipi == 1 ± 0.01");
        assert!(t.points[0].ok && t.points[0].skip.is_none());
        assert_eq!(
            t.points[3].name,
            "kernel/x2apic/pv: icr_write_exits_per_operation == 0"
        );
        assert!(
            t.points[3].skip.as_deref().is_some_and(
                |s| s.starts_with("not run here: --ipi pv cannot run on the kvm_pvm backend")
            ),
            "{:?}",
            t.points[3]
        );
        assert_eq!(
            t.offences(),
            ["not ok 2 - kernel/x2apic/icr: exits_per_ipi < 0.01: got 6.8500, want < 0.0100"]
        );
        assert_eq!(t.skips().len(), 1);
        // An escaped '#' in a description is not a directive.
        let t = Tap::parse("TAP version 13\n1..1\nok 1 - a \\# b # SKIP why\n");
        assert_eq!(
            (t.points[0].name.as_str(), t.points[0].skip.as_deref()),
            ("a # b", Some("why"))
        );
    }

    /// The JUnit `ipivmm check --junit` wrote with the TAP of
    /// fixtures/tap/check-kvm-paths.tap (this machine, kvm_pvm).
    #[test]
    fn the_junit_tells_the_taps_story() {
        let tap = Tap::parse(CHECK_TAP);
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

    #[test]
    fn a_truncated_or_empty_verdict_fails() {
        let head: String = REAL.lines().take(6).map(|l| format!("{l}\n")).collect();
        let t = Tap::parse(&head);
        assert!(
            t.offences().iter().any(|o| o.contains("planned")),
            "{:?}",
            t.offences()
        );
        let t = Tap::parse("no tap here\n");
        assert_eq!(t.offences().len(), 2, "{:?}", t.offences());
        let t = Tap::parse("TAP version 13\n1..1\nBail out! no /dev/kvm\n");
        assert!(t.offences().iter().any(|o| o == "bailed out: no /dev/kvm"));
        let t = Tap::parse("TAP version 13\n1..1\nok 1 - x # SKIP no AVIC\n");
        assert_eq!(t.offences(), ["every expectation skipped: nothing judged"]);
        let t = Tap::parse("TAP version 13\n1..2\nok 1 - x\nok 2 - y # skip one socket\n");
        assert!(t.offences().is_empty());
        assert_eq!(t.counts(), (1, 0, 1));
        // A skip must say why.
        let t = Tap::parse("TAP version 13\n1..2\nok 1 - x\nok 2 - y # SKIP\n");
        assert_eq!(t.offences(), ["ok 2 - y: skipped without a reason"]);
    }
}
