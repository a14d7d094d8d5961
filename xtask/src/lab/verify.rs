//! The verdict over a lab pass's results tree (what the guest left on its
//! disk, unpacked by the boot core): one PASS/FAIL line per check, the
//! warnings and wall times, and a summary. Exit status 0 only if all passed.
use super::avic_verdict;
use super::crossboot_verdict;
use super::host::files;
use super::recorded;
use super::report::{host_fact, Expect, Report};
use super::tap;
use std::fs;
use std::path::Path;

/// The guest's kernel release as `ipivmm host` read it there.
fn guest_kernel(dir: &Path) -> Option<String> {
    ["host.json", "host-avic.json"]
        .iter()
        .find_map(|f| Some(host_fact(dir, f, "/kernel_release")?.as_str()?.to_string()))
}

/// The last `n` lines of a file (none when it is missing).
fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

/// steps.tsv: (name, exit status or `deadline`, seconds), in the order run.
fn steps(dir: &Path) -> Vec<(String, String, String)> {
    fs::read_to_string(dir.join("steps.tsv"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f = l.split('\t').map(str::to_string);
            let mut next = || f.next().unwrap_or_default();
            (next(), next(), next())
        })
        .collect()
}

/// Whether a test output's failure lines (`test ... FAILED`, `---- `,
/// a panic, a skip) belong in the verdict.
fn failure_line(l: &str) -> bool {
    (l.starts_with("test ") && l[4..].contains(" FAILED"))
        || l.starts_with("---- ")
        || (l.starts_with("thread ") && l.contains(" panicked"))
        || l.starts_with("SKIP")
}

/// The verdict over the results tree `dir` of a pass: the lab's own checks,
/// with the probe passes' own (an AVIC part's [`avic_verdict::verdict`], the Linux
/// pass's plans/lab-linux.toml over its runs) after the results files' and
/// before the test binaries'.
pub fn verify(expect: Expect, dir: &Path) -> Report {
    let mut r = Report::default();
    r.info(format!("lab {} pass: {}", expect.name(), dir.display()));
    r.kernel = guest_kernel(dir);
    let steps = steps(dir);
    if steps.is_empty() {
        r.bad(
            "the guest ran its steps",
            tail(&dir.join("console.log"), 30),
        );
    } else {
        for s in expect.steps() {
            if !steps.iter().any(|(n, _, _)| n == s) {
                r.bad(
                    format!("step {s} ran"),
                    vec!["missing from steps.tsv".into()],
                );
            }
        }
        for (name, rc, secs) in steps.iter().filter(|(n, _, _)| !n.starts_with("test-")) {
            if rc == "0" {
                r.ok(format!("step {name} ({secs}s)"));
            } else {
                r.bad(
                    format!("step {name}: exit {rc} ({secs}s)"),
                    tail(&dir.join(format!("{name}.log")), 8),
                );
            }
        }
    }

    if !expect.steps().is_empty() || dir.join("host.json").exists() {
        let backend = host_fact(dir, "host.json", "/backend")
            .and_then(|b| serde_json::from_value::<ipivmm::host::KvmBackend>(b).ok());
        match backend {
            Some(b @ (ipivmm::host::KvmBackend::KvmAmd | ipivmm::host::KvmBackend::KvmIntel)) => {
                r.ok(format!("hardware KVM backend in the guest: {b}"))
            }
            other => r.bad(
                "hardware KVM backend in the guest",
                vec![format!(
                    "ipivmm host says '{}'",
                    other.map_or_else(|| "nothing".into(), |b| b.to_string())
                )],
            ),
        }
    }

    // What the steps wrote outside a plan, judged by the lab's plans.
    for (plan, step) in recorded::RECORDED {
        if steps.iter().any(|(n, _, _)| n == step) {
            recorded::judge(&mut r, dir, plan, false);
        }
    }
    for f in files(&dir.join("runs"), "overhead-", ".json") {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        match ipivmm_analysis::results::Document::load(&f) {
            Ok(doc) => r.info(format!(
                "  overhead {}",
                recorded::overhead_summary(&name, &doc)
            )),
            Err(e) => r.info(format!("  overhead {e}")),
        }
    }
    match expect {
        Expect::Avic(part) => avic_verdict::verdict(&mut r, part, dir),
        // A line about runs the pass's parts did not make is listed, not failed.
        Expect::Linux => {
            recorded::judge(&mut r, dir, "lab-linux.toml", true);
            // The part `pv`'s runs have their own plan: what KVM did with each lever.
            if !files(&dir.join("runs"), "linux-pv-", ".json").is_empty() {
                recorded::judge(&mut r, dir, "lab-pv-features.toml", true);
            }
        }
        Expect::Crossboot(side) => crossboot_verdict::verdict(&mut r, side, dir),
        _ => {}
    }
    // The guest's `ipivmm check` steps: each one's TAP is the check.
    let ran = |step: &str| steps.iter().any(|(n, _, _)| n == step);
    let full = expect == Expect::Full;
    let plans = tap::PLAN_STEPS.iter().map(|p| (p.step, p.plan(full)));
    tap::plans(&mut r, dir, plans, expect.whole(), ran);
    tests(&mut r, expect, dir, &steps);

    let listing = |file: &str| -> Vec<String> {
        fs::read_to_string(dir.join(file))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let retried = listing("retried.txt");
    if !retried.is_empty() {
        r.info("test binaries and steps that failed once and ran again (a binary's first attempt in tests/NAME.first-attempt.log):");
        for l in retried {
            r.info(format!("  {l}"));
        }
    }
    let superseded = listing(super::boot::SUPERSEDED);
    if !superseded.is_empty() {
        r.info("results a resumed boot wrote again (the earlier boot's kept beside them; its results documents checked too):");
        for l in superseded {
            r.info(format!("  {l}"));
        }
    }
    let warnings = listing("warnings.txt");
    if !warnings.is_empty() {
        r.info("warnings:");
        for l in warnings {
            r.info(format!("  {l}"));
        }
    }
    let timings = listing("timings.txt");
    if !timings.is_empty() {
        r.info(format!("wall times (s): {}", timings.join(" ")));
    }
    r
}

/// The KVM test binaries' outputs: each passed, and (where the pass ran
/// them and the host recorded which there were) every one ran.
fn tests(r: &mut Report, expect: Expect, dir: &Path, steps: &[(String, String, String)]) {
    let expected = expect.whole() || steps.iter().any(|(n, _, _)| n.starts_with("test-"));
    let tdir = dir.join("tests");
    let outputs = files(&tdir, "", ".txt");
    if outputs.is_empty() && expected {
        r.bad(
            "KVM test binaries ran",
            vec![format!("no output in {}", tdir.display())],
        );
    }
    for t in &outputs {
        let n = t.file_stem().unwrap_or_default().to_string_lossy();
        let text = fs::read_to_string(t).unwrap_or_default();
        let summary = text.lines().rfind(|l| l.starts_with("test result:"));
        match summary.and_then(|s| s.strip_prefix("test result: ok. ")) {
            Some(rest) => r.ok(format!("tests {n}: {rest}")),
            None => r.bad(
                format!(
                    "tests {n}: {}",
                    summary.unwrap_or("no result (crashed or timed out)")
                ),
                text.lines()
                    .filter(|l| failure_line(l))
                    .take(10)
                    .map(str::to_string)
                    .collect(),
            ),
        }
    }
    // The binaries the host built (collect writes their names): a binary
    // whose step never started (past the pass's deadline) leaves no output.
    let listed = fs::read_to_string(dir.join("test-binaries.txt")).unwrap_or_default();
    let names: Vec<&str> = listed.lines().filter(|l| !l.is_empty()).collect();
    if expected && !names.is_empty() {
        let missing: Vec<String> = names
            .iter()
            .flat_map(|n| expect.test_rounds().iter().map(move |s| format!("{n}{s}")))
            .filter(|n| !tdir.join(format!("{n}.txt")).exists())
            .map(|n| format!("{n}: no output"))
            .collect();
        let name = format!("every KVM test binary ran ({} binaries)", names.len());
        r.check(&name, missing);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::path::PathBuf;

    const TREE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/lab-quick");

    /// A copy of the fixture results tree of a real quick pass (a few runs
    /// and test outputs of it), for editing: its path, and the directory
    /// that removes it when dropped.
    pub struct Tree(pub PathBuf, tempfile::TempDir);

    impl Tree {
        pub fn new(name: &str) -> Self {
            let tmp = tempfile::Builder::new().prefix(name).tempdir().unwrap();
            let dir = tmp.path().to_path_buf();
            for e in walkdir::WalkDir::new(TREE) {
                let e = e.unwrap();
                let to = dir.join(e.path().strip_prefix(TREE).unwrap());
                if e.file_type().is_dir() {
                    fs::create_dir_all(&to).unwrap();
                } else {
                    fs::copy(e.path(), &to).unwrap();
                }
            }
            Tree(dir, tmp)
        }

        pub fn edit(&self, file: &str, f: impl FnOnce(String) -> String) -> &Self {
            let p = self.1.path().join(file);
            fs::write(&p, f(fs::read_to_string(&p).unwrap_or_default())).unwrap();
            self
        }

        pub fn report(&self, expect: Expect) -> Report {
            verify(expect, &self.0)
        }

        pub fn failures(&self, expect: Expect) -> Vec<String> {
            self.report(expect)
                .failures()
                .into_iter()
                .map(str::to_string)
                .collect()
        }
    }

    #[test]
    fn a_real_quick_pass_passes() {
        let r = verify(Expect::Quick, Path::new(TREE));
        assert_eq!(r.counts(), (10, 0), "{}", r.text());
        let text = r.text();
        assert!(text.starts_with("lab quick pass: "), "{text}");
        assert!(text.contains("\n  PASS  step sweep (26s)\n"), "{text}");
        assert!(text.contains("\n  PASS  tests pingpong: 6 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9.44s\n"));
        // A pass from a tree without plans/ (it predates them): its sweeps
        // were `ipivmm sweep` lines (runs/sweep.json): the plans are skips, the
        // inhibit events and the host-parameter sweep are checked all the same.
        for plan in ["lab-sweep", "kvm-paths", "lab-npt0"] {
            assert!(text.contains(&format!("\n  SKIP  ipivmm check plans/{plan}.toml: the tree the lab was built from has no plans/{plan}.toml\n")), "{text}");
        }
        assert!(text.ends_with("\nwall times (s): fetch 11 build 257 initramfs 1 boot 211 total 491\nlab: 10/10 checks passed, 3 skipped; guest kernel 6.1.0-50-amd64\n"), "{text}");
    }

    /// The fixture pass as a tree of today's layout: the sweeps run by the
    /// plans (their TAP and JUnit from a real quick pass, fixtures/tap/),
    /// their results in runs/<step>/, the plans listed in plans.txt.
    fn with_plans(name: &str) -> Tree {
        let t = Tree::new(name);
        fs::create_dir_all(t.0.join("runs/sweep")).unwrap();
        fs::rename(
            t.0.join("runs/sweep.json"),
            t.0.join("runs/sweep/sweep.json"),
        )
        .unwrap();
        fs::write(
            t.0.join("plans.txt"),
            "kvm-paths.toml\nlab-full.toml\nlab-npt0.toml\nlab-sweep.toml\nseeds.toml\n",
        )
        .unwrap();
        t.edit("steps.tsv", |s| s + "kvm-paths\t0\t140\n");
        let fixture = |f: &str| format!("{}/fixtures/tap/{f}", env!("CARGO_MANIFEST_DIR"));
        for (step, from) in [
            ("sweep", "lab-sweep"),
            ("sweep-npt0", "lab-npt0"),
            ("kvm-paths", "check-kvm-paths"),
        ] {
            for ext in ["tap", "junit.xml"] {
                fs::copy(
                    fixture(&format!("{from}.{ext}")),
                    t.0.join(format!("{step}.{ext}")),
                )
                .unwrap();
            }
        }
        t
    }

    /// The TAP of each `ipivmm check` step is a check, its JUnit another.
    #[test]
    fn the_lab_plans_taps_are_checks() {
        let t = with_plans("lab-plans");
        let r = verify(Expect::Quick, &t.0);
        assert_eq!(r.failures(), Vec::<&str>::new(), "{}", r.text());
        let text = r.text();
        // Real verdicts (a quick pass on kvm_amd, 2026-12-02): every
        // expectation held.
        assert!(
            text.contains("\n  PASS  ipivmm check plans/lab-sweep.toml: 172 held, 0 failed, 0 skipped\n  PASS  ipivmm check plans/lab-sweep.toml: its JUnit (sweep.junit.xml) says the same\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\n  PASS  ipivmm check plans/lab-npt0.toml: 18 held, 0 failed, 0 skipped\n"
            ),
            "{text}"
        );
        // kvm-paths.toml is no lab plan: its skips (this fixture's, of
        // kvm_pvm) are listed, not failed.
        assert!(
            text.contains("\n  PASS  ipivmm check plans/kvm-paths.toml: 56 held, 0 failed, 6 skipped\n  kvm-paths skip: "),
            "{text}"
        );
        // The full pass names its own plan for the same step.
        assert!(verify(Expect::Full, &t.0)
            .text()
            .contains("  PASS  ipivmm check plans/lab-full.toml: "));

        // A lab plan's skip with its reason is listed, and counted as a
        // skip, not held; its JUnit, which has no such skip, no longer agrees.
        let point = "ok 3 - sweep: ipis_delivered == ipis_sent [pingpong 2v kernel/xapic/pv]";
        t.edit("sweep.tap", |s| {
            s.replacen(
                &format!("{point}\n"),
                &format!("{point} # SKIP not run here: no PV\n"),
                1,
            )
        });
        let text = verify(Expect::Quick, &t.0).text();
        assert!(text.contains("\n  PASS  ipivmm check plans/lab-sweep.toml: 171 held, 0 failed, 1 skipped\n  sweep skip: sweep: ipis_delivered == ipis_sent [pingpong 2v kernel/xapic/pv]: not run here: no PV\n  FAIL  ipivmm check plans/lab-sweep.toml: its JUnit (sweep.junit.xml) says the same\n        172 test cases (0 skipped), the TAP 172 points (1 skipped)\n"), "{text}");
        // A skip must say why.
        t.edit("sweep.tap", |s| {
            s.replace(" # SKIP not run here: no PV\n", " # SKIP\n")
        });
        assert!(
            verify(Expect::Quick, &t.0)
                .text()
                .contains(&format!("\n        {point}: skipped without a reason\n")),
            "{text}"
        );

        // A `not ok` fails the pass, with the plan's message.
        let t = with_plans("lab-plans-not-ok");
        t.edit("kvm-paths.tap", |s| {
            s.replacen("ok 2 - unicast: ipis_per_operation == fan_out [pingpong 2v kernel/xapic/icr apicv-inhibit]\n  ---\n  value: 1\n", "not ok 2 - unicast: ipis_per_operation == fan_out [pingpong 2v kernel/xapic/icr apicv-inhibit]\n  ---\n  message: \"got 2, want == 1\"\n  severity: fail\n", 1)
        });
        let r = verify(Expect::Quick, &t.0);
        assert_eq!(
            r.failures(),
            ["ipivmm check plans/kvm-paths.toml: 55 held, 1 failed, 6 skipped"]
        );
        assert!(r.text().contains("\n        not ok 2 - unicast: ipis_per_operation == fan_out [pingpong 2v kernel/xapic/icr apicv-inhibit]: got 2, want == 1\n"), "{}", r.text());

        // A missing TAP fails, whether the step ran or not; so does one cut
        // short (its JUnit then disagrees too), and a missing JUnit.
        let t = with_plans("lab-plans-missing");
        fs::remove_file(t.0.join("sweep-npt0.tap")).unwrap();
        t.edit("steps.tsv", |s| s.replace("kvm-paths\t0\t140\n", ""));
        fs::remove_file(t.0.join("kvm-paths.tap")).unwrap();
        t.edit("sweep.tap", |s| {
            s.lines().take(6).map(|l| format!("{l}\n")).collect()
        });
        fs::remove_file(t.0.join("sweep.junit.xml")).unwrap();
        let r = verify(Expect::Quick, &t.0);
        assert_eq!(
            r.failures(),
            [
                "ipivmm check plans/lab-sweep.toml: 1 held, 0 failed, 0 skipped",
                "ipivmm check plans/lab-sweep.toml: its JUnit (sweep.junit.xml) says the same",
                "ipivmm check plans/kvm-paths.toml",
                "ipivmm check plans/lab-npt0.toml"
            ],
            "{}",
            r.text()
        );
        let text = r.text();
        for line in [
            "172 test points planned, 1 reported",
            "sweep.junit.xml: No such file or directory (os error 2)",
            "step kvm-paths did not run",
            "step sweep-npt0 wrote no sweep-npt0.tap",
        ] {
            assert!(
                text.contains(&format!("\n        {line}\n")),
                "{line}: {text}"
            );
        }

        // Every point skipped judges nothing and fails.
        let t = with_plans("lab-plans-skips");
        t.edit("sweep-npt0.tap", |s| {
            s.lines()
                .map(|l| match l.strip_prefix("ok ") {
                    Some(rest) => format!("ok {rest} # SKIP not run here: no PV\n"),
                    None => format!("{l}\n"),
                })
                .collect()
        });
        let text = verify(Expect::Quick, &t.0).text();
        assert!(
            text.contains("  FAIL  ipivmm check plans/lab-npt0.toml: 0 held, 0 failed, 18 skipped\n        every expectation skipped: nothing judged\n"),
            "{text}"
        );
    }

    #[test]
    fn what_a_pass_lacks_fails_it() {
        let t = Tree::new("steps");
        t.edit("steps.tsv", |s| {
            s.replace("sweep\t0\t", "sweep\t1\t")
                .replace("hostswitch\t0\t31\n", "")
        });
        fs::write(t.0.join("sweep.log"), "error: the last line\n").unwrap();
        let r = verify(Expect::Quick, &t.0);
        assert_eq!(
            r.failures(),
            ["step hostswitch ran", "step sweep: exit 1 (26s)"],
            "no hostswitch step: no host-param check either"
        );
        assert!(r
            .text()
            .contains("  FAIL  step sweep: exit 1 (26s)\n        error: the last line\n"));

        let t = Tree::new("nothing");
        fs::remove_file(t.0.join("steps.tsv")).unwrap();
        fs::remove_dir_all(t.0.join("runs")).unwrap();
        fs::write(
            t.0.join("console.log"),
            "lab: no /dev/kvm after loading kvm-amd\n",
        )
        .unwrap();
        assert_eq!(t.failures(Expect::Quick), ["the guest ran its steps"]);
        // --steps host: only what ran is checked.
        let t = Tree::new("custom");
        t.edit("steps.tsv", |_| "host\t0\t2\n".into());
        fs::remove_dir_all(t.0.join("runs")).unwrap();
        fs::remove_dir_all(t.0.join("tests")).unwrap();
        assert_eq!(t.failures(Expect::Custom), Vec::<String>::new());
        assert_eq!(verify(Expect::Custom, &t.0).counts(), (2, 0));
    }

    #[test]
    fn the_guests_backend_must_be_a_hardware_kvm() {
        let t = Tree::new("backend");
        t.edit("host.json", |s| s.replace("\"kvm_amd\"", "\"kvm_pvm\""));
        assert_eq!(
            t.failures(Expect::Quick),
            ["hardware KVM backend in the guest"]
        );
        fs::remove_file(t.0.join("host.json")).unwrap();
        assert_eq!(
            t.failures(Expect::Quick),
            ["hardware KVM backend in the guest"]
        );
    }

    #[test]
    fn results_files_are_judged_by_the_lab_plans() {
        // The host-parameter sweep's file, judged by plans/lab-hostswitch.toml
        // (the plans' own tampered-file tests: cli's check tests).
        let hostswitch = "ipivmm check plans/lab-hostswitch.toml (its results files)";
        let text = verify(Expect::Quick, Path::new(TREE)).text();
        assert!(
            text.contains(&format!(
                "\n  PASS  {hostswitch}: 4 held, 0 failed, 0 skipped\n"
            )),
            "{text}"
        );
        let t = Tree::new("hostparam");
        t.edit("runs/sweep-hostparam.json", |s| {
            s.replace("\"kvm_amd.npt=0\"", "\"kvm_amd.npt=1\"")
        });
        let r = verify(Expect::Quick, &t.0);
        assert_eq!(
            r.failures(),
            [format!("{hostswitch}: 3 held, 2 failed, 0 skipped")],
            "{}",
            r.text()
        );
        assert!(r.text().contains("        not ok 3 - sweep-hostparam: host-param=kvm_amd.npt=0: operations > 0: no run matches"), "{}", r.text());
        // A file that cannot be read fails its plan; a missing one too.
        t.edit("runs/sweep-hostparam.json", |_| {
            "{\"schema\": \"ipivmm.results/1\"".into()
        });
        assert_eq!(t.failures(Expect::Quick).len(), 1);
        fs::remove_file(t.0.join("runs/sweep-hostparam.json")).unwrap();
        let r = verify(Expect::Quick, &t.0);
        assert!(r.text().contains("no results file"), "{}", r.text());
        // An --apicv inhibit run that did not complete: `ipivmm run` exits
        // non-zero, and so does its step.
        let t = Tree::new("inhibit");
        t.edit("steps.tsv", |s| {
            s.replace("inhibit-repeats\t0\t", "inhibit-repeats\t1\t")
        });
        assert_eq!(
            t.failures(Expect::Quick),
            ["step inhibit-repeats: exit 1 (7s)"]
        );
    }

    #[test]
    fn overhead_runs_and_their_pairs_are_checked() {
        let t = Tree::new("overhead");
        for how in ["bpf", "off"] {
            let name = format!("overhead-x2apic-halt-{how}.json");
            fs::copy(
                format!("{}/fixtures/overhead/{name}", env!("CARGO_MANIFEST_DIR")),
                t.0.join("runs").join(&name),
            )
            .unwrap();
        }
        t.edit("steps.tsv", |s| s + "overhead\t0\t600\n");
        let r = verify(Expect::Quick, &t.0);
        // The `off` file's second counted pair failed (the STI-shadow panic).
        assert_eq!(
            r.failures(),
            ["ipivmm check plans/lab-overhead.toml (its results files): 3 held, 1 failed, 0 skipped"]
        );
        let text = r.text();
        assert!(text.contains("\n  overhead x2apic halt: counting cost: p50 949474 cycles with the counters (exit reasons bpf) vs 564999 without, +68.0% (4 pairs of runs: beyond the noise, the pairs' ratio +16.6% to +114.0% at 88%); 3.45 exits per round trip, 53026 ns more per exit\n"), "{text}");
        assert!(
            text.contains("        not ok 4 - overhead: run.observer_pairs_failed == 0 [pingpong 2v kernel/x2apic/icr]: got 1, want == 0"),
            "{text}"
        );
    }

    #[test]
    fn every_test_binary_must_pass_and_run() {
        let t = Tree::new("tests");
        t.edit("tests/pingpong.txt", |s| {
            s.replace(
                "test result: ok. 6 passed; 0 failed",
                "test result: FAILED. 5 passed; 1 failed",
            )
            .replace(
                "test pingpong_counts ... ok",
                "test pingpong_counts ... FAILED",
            ) + "---- pingpong_counts stdout ----\nSKIP: no KVM\n"
        });
        fs::remove_file(t.0.join("tests/modes.txt")).unwrap();
        let r = verify(Expect::Quick, &t.0);
        assert_eq!(
            r.failures(),
            [
                "tests pingpong: test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9.44s",
                "every KVM test binary ran (2 binaries)",
            ]
        );
        let text = r.text();
        assert!(
            text.contains("        ---- pingpong_counts stdout ----\n        SKIP: no KVM\n"),
            "{text}"
        );
        assert!(text.contains("        modes: no output\n"), "{text}");
        // A crashed binary leaves no summary; the full pass runs each twice.
        t.edit("tests/pingpong.txt", |_| "running 6 tests\n".into());
        let f = t.failures(Expect::Full);
        assert!(
            f.contains(&"tests pingpong: no result (crashed or timed out)".to_string()),
            "{f:?}"
        );
    }

    #[test]
    fn retries_and_warnings_are_listed() {
        let t = Tree::new("warnings");
        fs::write(t.0.join("retried.txt"), "lifecycle\n").unwrap();
        t.edit("warnings.txt", |_| {
            "boot 1: guest wedged during step sweep\n".into()
        });
        let text = verify(Expect::Quick, &t.0).text();
        assert!(text.contains("test binaries and steps that failed once and ran again (a binary's first attempt in tests/NAME.first-attempt.log):\n  lifecycle\nwarnings:\n  boot 1: guest wedged during step sweep\n"), "{text}");
        assert!(
            text.ends_with("lab: 10/10 checks passed, 3 skipped; guest kernel 6.1.0-50-amd64\n")
        );
    }

    /// The Linux pass judges plans/lab-pv-features.toml once the part `pv`
    /// made a run, and not before: here one run of a pass from before the
    /// PV levers (its guest saw PV EOI in the supported CPUID and used it:
    /// 146 `kvm_pv_eoi`) stands as `pv-eoi-off`, which the plan fails.
    #[test]
    fn the_pv_part_runs_are_judged_by_their_plan() {
        let t = Tree::new("pv");
        let pv = "ipivmm check plans/lab-pv-features.toml (its results files)";
        let names = |r: &Report| r.text().lines().map(str::to_string).collect::<Vec<_>>();
        assert!(!names(&t.report(Expect::Linux))
            .iter()
            .any(|l| l.contains(pv)));
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/linux/linux-broadcast-xapic-2-inhibit.json"
        );
        fs::copy(fixture, t.0.join("runs/linux-pv-eoi-off.json")).unwrap();
        let r = t.report(Expect::Linux);
        assert!(
            r.failures()
                .contains(&format!("{pv}: 1 held, 9 failed, 0 skipped").as_str()),
            "{}",
            r.text()
        );
        let text = r.text();
        assert!(
            text.contains(
                "pv-eoi-off: pv-eoi=no: vcpus.tracepoints.kvm_pv_eoi == 0: got 146, want == 0"
            ),
            "{text}"
        );
    }
}
