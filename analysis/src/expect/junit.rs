//! Expectation verdicts as JUnit XML (GitLab, Jenkins, GitHub test
//! reporters), through quick-junit: one test suite, one test case per
//! verdict, a failure or a skip with its message.
use super::{Outcome, Verdicts};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

/// User text as a JUnit name or message: control characters escaped as
/// the TAP does (XML 1.0 cannot hold most of them, and a name stripped of
/// them would differ from the same test point's TAP name).
fn text(s: &str) -> String {
    ipivmm_term::text::escape_controls(s)
}

impl Verdicts {
    /// The JUnit XML of these verdicts, as suite `suite`.
    pub fn junit(&self, suite: &str) -> Result<String, String> {
        let mut ts = TestSuite::new(text(suite));
        for verdict in &self.0 {
            let status = match &verdict.outcome {
                Outcome::Pass(_) => TestCaseStatus::success(),
                Outcome::Fail(why) => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(text(why)).set_type("expectation");
                    s
                }
                Outcome::Skip(why) => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(text(why));
                    s
                }
                // Skipped as JUnit has no other word for it; the message says
                // it was a question the repeats could not decide (exit 4).
                Outcome::Undecided(why) => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(text(&format!("undecided: {why}")));
                    s
                }
            };
            let mut case = TestCase::new(text(&verdict.name), status);
            case.set_classname("ipivmm");
            if let Outcome::Pass(value) = verdict.outcome {
                case.set_system_out(format!("value: {value}"));
            }
            ts.add_test_case(case);
        }
        let mut report = Report::new("ipivmm");
        report.add_test_suite(ts);
        report.to_string().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expect::Verdict;

    #[test]
    fn one_case_per_verdict_with_failures_and_skips() {
        let v = Verdicts(vec![
            Verdict {
                name: "a == 1".into(),
                outcome: Outcome::Pass(1.0),
            },
            Verdict {
                name: "b < 0.01".into(),
                outcome: Outcome::Fail("got 2.55".into()),
            },
            Verdict {
                name: "c".into(),
                outcome: Outcome::Skip("no root".into()),
            },
        ]);
        let xml = v.junit("ipivmm run").unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        assert_eq!(suite.attribute("tests"), Some("3"));
        assert_eq!(suite.attribute("failures"), Some("1"));
        assert_eq!(suite.attribute("skipped"), Some("1"));
        let failure = doc
            .descendants()
            .find(|n| n.has_tag_name("failure"))
            .unwrap();
        assert_eq!(failure.attribute("message"), Some("got 2.55"));
    }

    #[test]
    fn an_undecided_point_is_skipped_and_says_so() {
        let v = Verdicts(vec![Verdict {
            name: "ratio(cycles_per_operation_p50, a/b, c/d) < 1".into(),
            outcome: Outcome::Undecided("more repeats".into()),
        }]);
        let xml = v.junit("plan").unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let skipped = doc
            .descendants()
            .find(|n| n.has_tag_name("skipped"))
            .unwrap();
        assert_eq!(
            skipped.attribute("message"),
            Some("undecided: more repeats")
        );
    }

    #[test]
    fn control_characters_are_escaped_like_the_tap_not_dropped() {
        let v = Verdicts(vec![Verdict {
            name: "evil\x1b[2Kname: a == 1".into(),
            outcome: Outcome::Fail("why\x07".into()),
        }]);
        let xml = v.junit("plan\x1b]0;title\x07").unwrap();
        assert!(!xml.contains('\x1b') && !xml.contains('\x07'), "{xml}");
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let case = doc
            .descendants()
            .find(|n| n.has_tag_name("testcase"))
            .unwrap();
        assert_eq!(case.attribute("name"), Some("evil\\u{1b}[2Kname: a == 1"));
        let tap = v.tap("plan");
        assert!(tap.contains("evil\\u{1b}[2Kname: a == 1"), "{tap}");
    }
}
