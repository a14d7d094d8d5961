//! Expectation verdicts as TAP version 13 (what kselftest, Linaro's
//! test-definitions and most CI harnesses read): one test point per
//! verdict, `# SKIP` with the reason, a YAML block with the figure or the
//! failure, and an undecided gate question as `not ok N - NAME # TODO
//! undecided: WHY` (not a pass, not a failure either: a TAP harness counts
//! a TODO point as neither, the exit code 4 is what gates); and read back
//! ([`Verdicts::from_tap`]: the lab's verdict over the TAP `ipivmm check` wrote in its
//! guest).
use super::{Outcome, Verdict, Verdicts};
use std::fmt::Write;

/// A TAP description: one line, no `#` (which starts a directive).
fn description(s: &str) -> String {
    ipivmm_term::text::escape_controls(s).replace('#', "\\#")
}

/// YAML double-quoted scalar.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

impl Verdicts {
    /// The TAP document of these verdicts; `suite` names the plan in a leading comment.
    pub fn tap(&self, suite: &str) -> String {
        let mut out = format!(
            "TAP version 13\n# {}\n1..{}\n",
            description(suite),
            self.0.len()
        );
        for (i, verdict) in self.0.iter().enumerate() {
            let n = i + 1;
            let name = description(&verdict.name);
            let _ = match &verdict.outcome {
                Outcome::Pass(value) => {
                    writeln!(out, "ok {n} - {name}\n  ---\n  value: {value}\n  ...")
                }
                Outcome::Fail(why) => writeln!(
                    out,
                    "not ok {n} - {name}\n  ---\n  message: {}\n  severity: fail\n  ...",
                    quoted(why)
                ),
                Outcome::Skip(why) => writeln!(out, "ok {n} - {name} # SKIP {}", description(why)),
                Outcome::Undecided(why) => writeln!(
                    out,
                    "not ok {n} - {name} # TODO {UNDECIDED} {}",
                    description(why)
                ),
            };
        }
        let _ = writeln!(out, "# {}", self.summary());
        out
    }
}

/// What starts the TODO directive of an undecided point.
const UNDECIDED: &str = "undecided:";

/// A point's directive, read back.
enum Directive {
    /// `# SKIP why`.
    Skip(String),
    /// `# TODO undecided: why`.
    Undecided(String),
}

/// Splits a point's `name # SKIP why` (or `# TODO undecided: why`) at the
/// first unescaped ` # `: the name and the directive, each with `\#` back
/// to `#`.
fn directive(rest: &str) -> (String, Option<Directive>) {
    let unescape = |s: &str| s.replace("\\#", "#");
    let mut from = 0;
    while let Some(at) = rest[from..].find(" # ").map(|i| from + i) {
        if !rest[..at].ends_with('\\') {
            let d = rest[at + 3..].trim();
            let word = |w: &str| d.get(..w.len()).is_some_and(|x| x.eq_ignore_ascii_case(w));
            let found = if word("skip") {
                Some(Directive::Skip(unescape(d[4..].trim())))
            } else if word("todo") && d[4..].trim_start().starts_with(UNDECIDED) {
                let why = d[4..].trim_start()[UNDECIDED.len()..].trim();
                Some(Directive::Undecided(unescape(why)))
            } else {
                None
            };
            return (unescape(&rest[..at]), found);
        }
        from = at + 3;
    }
    (unescape(rest), None)
}

impl Verdicts {
    /// A TAP document read back (what [`Verdicts::tap`] writes; unknown lines are
    /// ignored, as TAP says): its verdicts, a `not ok` without a `message:`
    /// failing with "no message", and what makes it no whole document (not
    /// version 13, no plan line or another count, a bail-out).
    pub fn from_tap(text: &str) -> (Verdicts, Vec<String>) {
        let (mut v, mut planned, mut problems) = (Vec::new(), None::<usize>, Vec::new());
        if text.lines().next().map(str::trim) != Some("TAP version 13") {
            problems.push("not TAP version 13 (no first line 'TAP version 13')".to_string());
        }
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("1..") {
                planned = n.split_whitespace().next().and_then(|n| n.parse().ok());
            } else if let Some(why) = line.strip_prefix("Bail out!") {
                problems.push(format!("bailed out: {}", why.trim()));
            } else if let Some(m) = line.trim_start().strip_prefix("message: ") {
                if let Some(Verdict {
                    outcome: Outcome::Fail(why),
                    ..
                }) = v.last_mut()
                {
                    *why = serde_json::from_str(m).unwrap_or_else(|_| m.to_string());
                }
            } else if let Some(value) = line.trim_start().strip_prefix("value: ") {
                if let Some(Verdict {
                    outcome: Outcome::Pass(x),
                    ..
                }) = v.last_mut()
                {
                    *x = value.parse().unwrap_or(f64::NAN);
                }
            } else {
                let (ok, rest) = match (line.strip_prefix("ok "), line.strip_prefix("not ok ")) {
                    (Some(r), _) => (true, r),
                    (_, Some(r)) => (false, r),
                    _ => continue,
                };
                let (number, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                if number.parse::<usize>().is_err() {
                    continue;
                }
                let (name, directive) = directive(rest.strip_prefix("- ").unwrap_or(rest));
                let outcome = match (directive, ok) {
                    (Some(Directive::Skip(why)), _) => Outcome::Skip(why),
                    (Some(Directive::Undecided(why)), _) => Outcome::Undecided(why),
                    (None, true) => Outcome::Pass(f64::NAN),
                    (None, false) => Outcome::Fail("no message".into()),
                };
                v.push(Verdict { name, outcome });
            }
        }
        match planned {
            None => problems.push("no plan line (1..N): the check did not finish".into()),
            Some(n) if n != v.len() => {
                problems.push(format!("{n} test points planned, {} reported", v.len()))
            }
            Some(_) => {}
        }
        (Verdicts(v), problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_skips_and_failures() {
        let v = Verdicts(vec![
            Verdict {
                name: "icr_write_exits_per_ipi == 1".into(),
                outcome: Outcome::Pass(1.0),
            },
            Verdict {
                name: "exits_per_ipi < 0.01".into(),
                outcome: Outcome::Fail("got 2.55".into()),
            },
            Verdict {
                name: "a # b".into(),
                outcome: Outcome::Skip("not measured\n(no root)".into()),
            },
        ]);
        let t = v.tap("ipivmm run");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(&lines[..3], ["TAP version 13", "# ipivmm run", "1..3"]);
        assert!(t.contains("\nok 1 - icr_write_exits_per_ipi == 1\n"), "{t}");
        assert!(
            t.contains("\nnot ok 2 - exits_per_ipi < 0.01\n  ---\n  message: \"got 2.55\""),
            "{t}"
        );
        assert!(
            t.contains("\nok 3 - a \\# b # SKIP not measured\\n(no root)\n"),
            "{t}"
        );
        assert!(t.ends_with("# 1 passed, 1 failed, 1 skipped\n"), "{t}");
    }

    /// An undecided gate question is no pass: `not ok` with a TODO
    /// directive that says so, and counted apart.
    #[test]
    fn an_undecided_point_is_not_ok_todo() {
        let v = Verdicts(vec![
            Verdict {
                name: "a == 1".into(),
                outcome: Outcome::Pass(1.0),
            },
            Verdict {
                name: "ratio(cycles_per_operation_p50, apic=x2apic, apic=xapic) < 1".into(),
                outcome: Outcome::Undecided("×1.02 [×0.95, ×1.09]: more repeats".into()),
            },
        ]);
        let t = v.tap("plan");
        assert!(
            t.contains("\nnot ok 2 - ratio(cycles_per_operation_p50, apic=x2apic, apic=xapic) < 1 # TODO undecided: ×1.02 [×0.95, ×1.09]: more repeats\n"),
            "{t}"
        );
        assert!(
            t.ends_with("# 1 passed, 0 failed, 0 skipped, 1 undecided\n"),
            "{t}"
        );
        assert_eq!(v.exit_code(), 4);
    }

    /// What [`Verdicts::tap`] writes reads back as the same verdicts.
    #[test]
    fn what_is_written_reads_back() {
        let v = Verdicts(vec![
            Verdict {
                name: "a # b: x == 1.25".into(),
                outcome: Outcome::Pass(1.25),
            },
            Verdict {
                name: "y < 0.01".into(),
                outcome: Outcome::Fail("got \"2.55\"\nwant less".into()),
            },
            Verdict {
                name: "z".into(),
                outcome: Outcome::Skip("not run here: no PV".into()),
            },
            Verdict {
                name: "ratio(p50, a, b) < 1 # x".into(),
                outcome: Outcome::Undecided("ratio ×1.01 [×0.9, ×1.1]: more repeats".into()),
            },
        ]);
        assert_eq!(Verdicts::from_tap(&v.tap("plan")), (v, Vec::new()));
        // `ipivmm sweep ... --tap`'s own (kvm_pvm: a failure, a PV skip).
        let (v, problems) =
            Verdicts::from_tap(include_str!("../../../xtask/fixtures/tap/sweep-expect.tap"));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(v.counts(), (2, 1, 1));
        assert_eq!(
            v.0[1].outcome,
            Outcome::Fail("got 6.8500, want < 0.0100".into())
        );
        let (v, _) =
            Verdicts::from_tap("TAP version 13\n1..2\nok 1 - x # skip one socket\nnot ok 2 - y\n");
        assert_eq!(v.0[0].outcome, Outcome::Skip("one socket".into()));
        assert_eq!(v.0[1].outcome, Outcome::Fail("no message".into()));
    }

    /// A document cut short, not TAP, or bailed out is said to be.
    #[test]
    fn what_is_no_whole_document() {
        let (_, p) = Verdicts::from_tap("TAP version 13\n1..2\nok 1 - x\n");
        assert_eq!(p, ["2 test points planned, 1 reported"]);
        assert_eq!(Verdicts::from_tap("no tap here\n").1.len(), 2);
        let (_, p) = Verdicts::from_tap("TAP version 13\n1..1\nBail out! no /dev/kvm\n");
        assert_eq!(
            p,
            [
                "bailed out: no /dev/kvm",
                "1 test points planned, 0 reported"
            ]
        );
    }
}
