//! `cargo xtask lab crossboot`: a kernel CI's gate across boots, proved in
//! the lab (docs/lab.md, "Kernels compared across boots"; docs/ci.md's
//! recipe). Two sides, the baseline and a KVM module setting that changes
//! the ICR-write exits per IPI, booted alternately (A B A B A); each boot
//! records the same run with scripts/ci/kernel-gate.sh (`record`, the
//! guest's step `extra` through scripts/lab/probe-crossboot.sh); then, on
//! this host, the same script's `judge` (`ipivmm compare
//! --fail-on-regression` over the recorded files) twice: the baseline
//! against itself (a later boot against the earlier ones) must pass or stay
//! undecided, never exit 1; the changed side against the baseline must exit
//! 1 on the counts.
use super::cli::Args;
use super::host::{files, log};
use super::initramfs;
use super::pass::{self, Image, LabOutcome, Settings};
use super::report::{Expect, Report, Side};
use anyhow::{Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

impl Side {
    /// The guest's `lab.kvm=`: kvm_amd's parameters at load.
    fn kvm(self) -> &'static str {
        match self {
            Side::Base => "lab.kvm=avic=1",
            Side::Changed => "lab.kvm=avic=0",
        }
    }
}

/// The boots, in order: the sides alternated, the baseline first and last
/// (its last boot is the new side of the A/A comparison).
pub const BOOTS: &[Side] = &[
    Side::Base,
    Side::Changed,
    Side::Base,
    Side::Changed,
    Side::Base,
];

/// Iterations per run unless `--iterations` says otherwise.
pub const ITERATIONS: u32 = 100;
/// Each boot's limit unless `--timeout` says otherwise, s.
pub const TIMEOUT_S: u64 = 1800;

/// The recipe both ends run (docs/ci.md shows it whole).
pub const RECIPE: &str = "scripts/ci/kernel-gate.sh";

/// The pass's work directory.
pub fn work_dir(root: &Path) -> PathBuf {
    root.join("target/lab-crossboot")
}

/// The results directory of boot `n` (1-based) of side `side`.
fn boot_dir(n: usize, side: Side) -> String {
    format!("boot-{n}-{}", side.name())
}

/// probe-crossboot.sh as /lab/extra.sh and the recipe as
/// /lab/kernel-gate.sh, an archive to append to the initramfs.
fn probe_archive(s: &Settings, image: &Image, work: &Path) -> Result<PathBuf> {
    let st = work.join("probe");
    let _ = fs::remove_dir_all(&st);
    fs::create_dir_all(st.join("lab"))?;
    for (from, to) in [
        ("scripts/lab/probe-crossboot.sh", "lab/extra.sh"),
        (RECIPE, "lab/kernel-gate.sh"),
    ] {
        fs::copy(s.root.join(from), st.join(to)).with_context(|| format!("cannot copy {from}"))?;
        fs::set_permissions(st.join(to), fs::Permissions::from_mode(0o755))?;
    }
    let out = work.join("probe.cpio");
    initramfs::pack(&st, &image.busybox, &out)?;
    fs::remove_dir_all(&st)?;
    Ok(out)
}

/// The pass: the boots of [`BOOTS`], each checked, then the two judgements.
pub fn pass(s: &Settings, args: &Args) -> Result<LabOutcome> {
    let boots = BOOTS
        .iter()
        .enumerate()
        .map(|(i, side)| {
            let mut extra = s.kernel_args.clone();
            extra.push(side.kvm().into());
            (Expect::Crossboot(*side), extra, boot_dir(i + 1, *side))
        })
        .collect();
    let (mut verdict, results) = pass::probe_pass(
        s,
        args,
        (work_dir(&s.root), false, (ITERATIONS, TIMEOUT_S)),
        ("probe", |image, dir| probe_archive(s, image, dir)),
        boots,
    )?;
    let ipivmm = s.root.join("target/release/ipivmm");
    let report = judge(&s.root.join(RECIPE), &ipivmm, &results)?;
    if let LabOutcome::Failed = pass::print(&report) {
        verdict = LabOutcome::Failed;
    }
    Ok(verdict)
}

/// One judgement: `new` against `base` (boot directories of `results`),
/// the recipe's `judge` run into `results/NAME.*`; its exit status.
fn judge_one(
    recipe: &Path,
    ipivmm: &Path,
    results: &Path,
    name: &str,
    (base, new): (&[String], &[String]),
) -> Result<i32> {
    let side_dir = |side: &str, boots: &[String]| -> Result<PathBuf> {
        let d = results.join(format!("{name}-{side}"));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d)?;
        for b in boots {
            for f in files(&results.join(b).join("recordings"), "", ".json") {
                let file = f.file_name().unwrap_or_default().to_string_lossy();
                fs::copy(&f, d.join(format!("{b}-{file}")))?;
            }
        }
        Ok(d)
    };
    let (b, n) = (side_dir("base", base)?, side_dir("new", new)?);
    let out = results.join(name);
    let status = Command::new("sh")
        .arg(recipe)
        .args([
            "judge".as_ref(),
            b.as_os_str(),
            n.as_os_str(),
            out.as_os_str(),
        ])
        .env("IPIVMM", ipivmm)
        .status()
        .with_context(|| format!("cannot run {}", recipe.display()))?;
    let rc = status.code().unwrap_or(-1);
    fs::write(results.join(format!("{name}.rc")), format!("{rc}\n"))?;
    log(format!("{name}: {} judge: exit {rc}", recipe.display()));
    Ok(rc)
}

/// The boot directories of `results` of one side, in boot order.
fn boots_of(side: Side, which: impl Fn(usize) -> bool) -> Vec<String> {
    BOOTS
        .iter()
        .enumerate()
        .filter(|(i, s)| **s == side && which(*i))
        .map(|(i, s)| boot_dir(i + 1, *s))
        .collect()
}

/// The two judgements over the boots' recordings and their checks: the
/// baseline's earlier boots against its last (A/A: exit 0 or 4), the
/// changed side against the baseline's earlier boots (exit 1, a count
/// regressed).
pub fn judge(recipe: &Path, ipivmm: &Path, results: &Path) -> Result<Report> {
    let last = BOOTS.len() - 1;
    let base = boots_of(Side::Base, |i| i != last);
    let again = boots_of(Side::Base, |i| i == last);
    let changed = boots_of(Side::Changed, |_| true);
    let aa = judge_one(recipe, ipivmm, results, "aa", (&base, &again))?;
    let ab = judge_one(recipe, ipivmm, results, "ab", (&base, &changed))?;
    Ok(checks(results, (&base, &again, &changed), aa, ab))
}

/// The verdict of the judgements' exit statuses `aa` and `ab` and their
/// decisions (`results/{aa,ab}.gate.txt`).
fn checks(
    results: &Path,
    (base, again, changed): (&[String], &[String], &[String]),
    aa: i32,
    ab: i32,
) -> Report {
    let mut r = Report::default();
    r.info(format!("lab crossboot judgement: {}", results.display()));
    let gate = |name: &str| {
        decisions(&fs::read_to_string(results.join(format!("{name}.gate.txt"))).unwrap_or_default())
    };
    let (aa_lines, ab_lines) = (gate("aa"), gate("ab"));
    let aa_name = format!(
        "A/A: {} against {}: exit 0 or 4, never 1 (exit {aa})",
        again.join(","),
        base.join(",")
    );
    if aa == 0 || aa == 4 {
        r.ok(aa_name);
    } else {
        r.bad(aa_name, aa_lines.clone());
    }
    // A count regressed (exits or ICR-write exits per IPI), not only latency.
    let count_regressed = ab_lines
        .iter()
        .any(|d| d.contains("exits/IPI") && d.ends_with(": regressed"));
    let ab_name = format!(
        "A/B: {} against {}: exit 1, a count regressed (exit {ab})",
        changed.join(","),
        base.join(",")
    );
    if ab == 1 && count_regressed {
        r.ok(ab_name);
    } else {
        r.bad(ab_name, ab_lines.clone());
    }
    for (name, lines) in [("A/A", &aa_lines), ("A/B", &ab_lines)] {
        for l in lines {
            r.info(format!("  {name}: {l}"));
        }
    }
    r
}

/// compare's decisions on stderr, each whole (a decision wraps onto
/// indented lines; its notes are left out), and its last line (`ipivmm:
/// gate: ...`).
fn decisions(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut in_note = false;
    for l in text.lines() {
        if let Some(d) = l.strip_prefix("ipivmm: ") {
            out.push(d.to_string());
            in_note = false;
        } else if l.trim_start().starts_with("note:") {
            in_note = true;
        } else if l.starts_with("    ") && !in_note {
            if let Some(d) = out.last_mut() {
                d.push(' ');
                d.push_str(l.trim());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::crossboot_verdict::RECORDINGS;
    use super::*;

    /// compare's stderr as it wraps a decision and its notes (a real
    /// one's shape: `ipivmm compare ... --fail-on-regression` here).
    const AB: &str = "\
ipivmm: pingpong, target spin, 2 vCPUs / kernel/x2apic/icr: cycles/round trip p50, [3] against [1]+[2]: undecided (no
    usable repeat in [3]; no number of repeats is sure to decide it)
    note: 6 of 6 repeats left out: run on a busy host (other processes used 88% of the host's CPU time during a run: a
        quieter host, --pin)
ipivmm: pingpong, target spin, 2 vCPUs / kernel/x2apic/icr: ICR-write exits/IPI, [3] against [1]+[2]: +1.000 [+1.000,
    +1.000] (100.000000%), exact counts, p(slower) 0.000, 6 vs 3 repeats: regressed
    note: [3]: 3 of 3 repeats ran on a busy host, kept: load cannot change a count
ipivmm: gate: FAIL (3 figures judged: 1 undecided, 1 regressed, 1 equivalent)
";

    #[test]
    fn the_sides_alternate_and_the_baseline_comes_first_and_last() {
        let names: Vec<&str> = BOOTS.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["base", "changed", "base", "changed", "base"]);
        let last = BOOTS.len() - 1;
        assert_eq!(
            boots_of(Side::Base, |i| i != last),
            ["boot-1-base", "boot-3-base"]
        );
        assert_eq!(boots_of(Side::Base, |i| i == last), ["boot-5-base"]);
        assert_eq!(
            boots_of(Side::Changed, |_| true),
            ["boot-2-changed", "boot-4-changed"]
        );
        for side in [Side::Base, Side::Changed] {
            let e = Expect::Crossboot(side);
            assert_eq!(Expect::named(e.name()), Some(e));
        }
    }

    #[test]
    fn a_decision_is_read_whole_without_its_notes() {
        let d = decisions(AB);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(
            d[1].ends_with("exact counts, p(slower) 0.000, 6 vs 3 repeats: regressed"),
            "{d:?}"
        );
        assert!(d[1].contains("ICR-write exits/IPI, [3] against [1]+[2]: +1.000 [+1.000, +1.000]"));
        assert!(!d[0].contains("note:"), "{d:?}");
        assert!(d[2].starts_with("gate: FAIL"));
    }

    /// A/A must not exit 1; A/B must exit 1 with a count regressed, not
    /// only a latency figure.
    #[test]
    fn the_judgements_pass_only_as_a_kernel_ci_needs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let latency_only = AB
            .replace("6 vs 3 repeats: regressed", "6 vs 3 repeats: equivalent")
            .replace("undecided (no", "regressed (no");
        let boots = (
            &["boot-1-base".to_string()][..],
            &["boot-5-base".to_string()][..],
            &["boot-2-changed".to_string()][..],
        );
        let verdict = |aa: i32, aa_text: &str, ab: i32, ab_text: &str| {
            fs::write(dir.join("aa.gate.txt"), aa_text).unwrap();
            fs::write(dir.join("ab.gate.txt"), ab_text).unwrap();
            checks(dir, boots, aa, ab)
        };
        let r = verdict(4, "ipivmm: gate: undecided (3 figures judged)\n", 1, AB);
        assert!(r.passed(), "{}", r.text());
        assert!(
            r.text().contains(
                "  PASS  A/A: boot-5-base against boot-1-base: exit 0 or 4, never 1 (exit 4)\n"
            ),
            "{}",
            r.text()
        );
        assert!(r.text().contains(
            "  PASS  A/B: boot-2-changed against boot-1-base: exit 1, a count regressed (exit 1)\n"
        ));
        assert!(verdict(0, "", 1, AB).passed());
        // The baseline against itself failed the gate: the proof fails.
        let r = verdict(1, AB, 1, AB);
        assert_eq!(r.failures().len(), 1);
        assert!(r.failures()[0].starts_with("A/A: "));
        // The changed side passed, or failed on latency alone.
        assert!(verdict(0, "", 0, "")
            .failures()
            .iter()
            .any(|f| f.starts_with("A/B: ")));
        assert!(verdict(0, "", 1, &latency_only)
            .failures()
            .iter()
            .any(|f| f.starts_with("A/B: ")));
    }

    /// The judge runs the recipe over the boots' recordings: the A/A's
    /// baseline is the first two base boots', its new side the last's; the
    /// A/B's new side both changed boots'. `ipivmm` here is a stand-in that
    /// prints its arguments and exits as compare would on such files.
    #[test]
    fn the_judge_hands_the_recipe_each_sides_recordings() {
        let tmp = tempfile::tempdir().unwrap();
        let results = tmp.path().join("results");
        for (i, side) in BOOTS.iter().enumerate() {
            let d = results.join(boot_dir(i + 1, *side)).join("recordings");
            fs::create_dir_all(&d).unwrap();
            for k in 1..=RECORDINGS {
                fs::write(d.join(format!("id{i}-{k}.json")), "{}").unwrap();
            }
        }
        let stub = tmp.path().join("ipivmm");
        fs::write(
            &stub,
            "#!/bin/sh\necho \"$@\"\ncase \"$*\" in *changed*) echo 'ipivmm: row: ICR-write exits/IPI, [7] against [1]+[2]: +1.000 [+1.000,' >&2; echo '    +1.000] (100%), exact counts: regressed' >&2; echo 'ipivmm: gate: FAIL' >&2; exit 1 ;; esac\necho 'ipivmm: gate: undecided' >&2\nexit 4\n",
        )
        .unwrap();
        fs::set_permissions(&stub, fs::Permissions::from_mode(0o755)).unwrap();
        let recipe = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(RECIPE);
        let r = judge(&recipe, &stub, &results).unwrap();
        assert!(r.passed(), "{}", r.text());
        let aa = fs::read_to_string(results.join("aa.txt")).unwrap();
        assert_eq!(aa.matches("--baseline").count(), 2 * RECORDINGS, "{aa}");
        assert!(aa.contains("aa-new/boot-5-base-id4-1.json"), "{aa}");
        assert!(
            aa.contains("--baseline") && aa.contains("aa-base/boot-3-base-id2-3.json"),
            "{aa}"
        );
        assert!(aa.contains("--fail-on-regression"), "{aa}");
        let ab = fs::read_to_string(results.join("ab.txt")).unwrap();
        assert!(
            ab.contains("ab-new/boot-2-changed-id1-1.json")
                && ab.contains("ab-new/boot-4-changed-id3-3.json"),
            "{ab}"
        );
        assert_eq!(fs::read_to_string(results.join("aa.rc")).unwrap(), "4\n");
        assert_eq!(fs::read_to_string(results.join("ab.rc")).unwrap(), "1\n");
    }

    /// docs/ci.md shows the recipe the lab runs, whole.
    #[test]
    fn the_documented_recipe_is_the_one_the_lab_runs() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let script = fs::read_to_string(root.join(RECIPE)).unwrap();
        let doc = fs::read_to_string(root.join("docs/ci.md")).unwrap();
        assert!(
            doc.contains(&format!("```text\n{script}```\n")),
            "docs/ci.md lacks {RECIPE} as a text block, whole"
        );
    }
}
