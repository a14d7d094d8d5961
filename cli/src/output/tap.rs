//! Expectation verdicts as TAP version 13 (what kselftest, Linaro's
//! test-definitions and most CI harnesses read): one test point per
//! verdict, `# SKIP` with the reason, a YAML block with the figure or the
//! failure.
use super::sink::{Command, Kind, Sink};
use ipivmm::expect::{Outcome, Verdicts};
use std::fmt::Write;

/// The `--tap` switch of `run` and `sweep`.
pub static SINK: Sink = Sink {
    flag: "tap",
    help: &[(
        &[Command::Run, Command::Sweep],
        "Print the expectations' verdicts as TAP version 13 on stdout (tables go to stderr)",
    )],
    kind: Kind::VerdictsOnStdout(|v, suite, out| out.write_all(render(v, suite).as_bytes())),
};

/// A TAP description: one line, no `#` (which starts a directive).
fn description(s: &str) -> String {
    ipivmm_term::text::escape_controls(s).replace('#', "\\#")
}

/// YAML double-quoted scalar.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The TAP document of `v`; `suite` names the plan in a leading comment.
pub fn render(v: &Verdicts, suite: &str) -> String {
    let mut out = format!(
        "TAP version 13\n# {}\n1..{}\n",
        description(suite),
        v.0.len()
    );
    for (i, verdict) in v.0.iter().enumerate() {
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
        };
    }
    let (passed, failed, skipped) = v.counts();
    let _ = writeln!(out, "# {passed} passed, {failed} failed, {skipped} skipped");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipivmm::expect::Verdict;

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
        let t = render(&v, "ipivmm run");
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
}
