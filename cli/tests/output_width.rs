//! Output that fits a terminal (issue 32): `ipivmm run` and `ipivmm sweep
//! --preset ipiv-unicast` print no line longer than 120 characters by
//! default, on stdout and stderr; `--wide` shows every column and every
//! vCPU; many vCPUs collapse to the first ones and the outliers; and with
//! stderr not a terminal a sweep says one line per finished run. Real runs
//! (they skip without /dev/kvm).
mod cli_kit;

use cli_kit::ipivmm;
use ipivmm_host::facts::ApicvSupport;
use ipivmm_host::lab::Hardware;
use ipivmm_testkit::kvm_available;
use std::process::Output;

/// The widest line a text report may print by default.
const WIDTH: usize = 120;

/// Lines of `text` longer than [`WIDTH`] characters (as a terminal counts
/// them: the box-drawing characters and `µ` are one each).
fn too_long(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.chars().count() > WIDTH)
        .map(String::from)
        .collect()
}

fn texts(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const QUICK: &[&str] = &["--iterations", "40", "--warmup", "4", "--serial", "none"];

#[test]
fn a_run_fits_120_columns_and_wide_shows_every_column() {
    if !kvm_available("a_run_fits_120_columns_and_wide_shows_every_column") {
        return;
    }
    let mut args = vec!["run"];
    args.extend_from_slice(QUICK);
    let o = ipivmm(&args);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("│ vCPU"), "{out}");
    assert_eq!(too_long(&out), Vec::<String>::new(), "{out}");
    assert_eq!(too_long(&err), Vec::<String>::new(), "{err}");
    // Issue 50: the repeats are not minutes of silence. With stderr not a
    // terminal, one line per finished repeat; the tables are the repeat
    // nearest the median p50, said.
    for i in 1..=5 {
        let line = format!("ipivmm: repeat {i}/5 done (pingpong ");
        assert!(err.contains(&line), "no {line:?}:\n{err}");
    }
    assert!(
        out.contains(" of 5, the one nearest the median p50"),
        "{out}"
    );
    // The columns left out are named, and --wide has them.
    assert!(
        out.contains("  (left out to fit 120 columns, --wide shows them: "),
        "{out}"
    );
    args.push("--wide");
    let o = ipivmm(&args);
    let (wide, err) = texts(&o);
    assert!(o.status.success(), "{wide}{err}");
    for column in ["APIC", "PV calls", "user exits", "p99 ns"] {
        assert!(wide.contains(column), "--wide lacks {column}:\n{wide}");
    }
    assert!(!wide.contains("left out to fit"), "{wide}");
    assert!(
        !too_long(&wide).is_empty(),
        "--wide is as wide as it needs:\n{wide}"
    );
}

#[test]
fn many_vcpus_collapse_to_the_first_and_the_outliers() {
    if !kvm_available("many_vcpus_collapse_to_the_first_and_the_outliers") {
        return;
    }
    // Ten vCPUs on a host of maybe two CPUs: halting targets, few
    // broadcasts, a watchdog that follows the host's load.
    let timeout = ipivmm_testkit::scaled_secs(120).to_string();
    let mut args = vec![
        "run",
        "--vcpus",
        "10",
        "--workload",
        "broadcast",
        "--target",
        "halt",
        "--iterations",
        "10",
        "--warmup",
        "2",
        "--serial",
        "none",
        "--timeout",
        &timeout,
    ];
    let o = ipivmm(&args);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}{err}");
    assert_eq!(too_long(&out), Vec::<String>::new(), "{out}");
    // vcpu0 (the sender) and vcpu1 always; of the other eight only outliers.
    assert!(
        out.contains("│ vcpu0 ") && out.contains("│ vcpu1 "),
        "{out}"
    );
    let rows = |t: &str| t.lines().filter(|l| l.starts_with("│ vcpu")).count();
    assert!(
        out.contains("more vCPUs, ") && out.contains("(--wide lists every row)"),
        "{out}"
    );
    // Every phase table lists all twelve with --wide.
    args.push("--wide");
    let o = ipivmm(&args);
    let (wide, _) = texts(&o);
    assert!(wide.contains("│ vcpu9 "), "{wide}");
    assert!(!wide.contains("more vCPUs, "), "{wide}");
    assert!(rows(&wide) > rows(&out), "{wide}");
}

#[test]
fn the_ipiv_unicast_preset_fits_and_says_each_finished_run() {
    if !kvm_available("the_ipiv_unicast_preset_fits_and_says_each_finished_run") {
        return;
    }
    let o = ipivmm(&[
        "sweep",
        "--preset",
        "ipiv-unicast",
        "--iterations",
        "20",
        "--warmup",
        "2",
    ]);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("│ mode"), "{out}");
    assert_eq!(too_long(&out), Vec::<String>::new(), "{out}");
    assert_eq!(too_long(&err), Vec::<String>::new(), "{err}");
    // The preset's question is said once (before the runs, on stderr).
    let question = "preset ipiv-unicast: how much does IPI virtualization save";
    assert_eq!(
        format!("{out}{err}").matches(question).count(),
        1,
        "{out}{err}"
    );
    // stderr is a pipe here, not a terminal: no bar, one line per run.
    let runs = out
        .lines()
        .find_map(|l| l.strip_prefix("sweep (preset ipiv-unicast): "))
        .and_then(|l| l.split(' ').next()?.parse::<usize>().ok())
        .expect("the summary line");
    let done: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("ipivmm: run ") && l.contains(" done ("))
        .collect();
    assert_eq!(done.len(), runs, "{err}");
    assert!(
        done.last()
            .is_some_and(|l| l.starts_with(&format!("ipivmm: run {runs}/{runs} done"))),
        "{err}"
    );
}

/// Issue 50: `ipivmm host` printed 124-column lines (a capability's use):
/// its tables wrap long values inside their cells. No VM; without /dev/kvm
/// it says the capabilities were not read, within 120 columns too.
#[test]
fn host_fits_120_columns() {
    let o = ipivmm(&["host"]);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("KVM backend"), "{out}");
    assert_eq!(too_long(&out), Vec::<String>::new(), "{out}");
    assert_eq!(too_long(&err), Vec::<String>::new(), "{err}");
    // Issue 50: what the host lacks, it says where it is answered: a line
    // each naming the lab command.
    let mut lacking = 0;
    for (row, hw) in [
        ("│ APICv (Intel) ", Hardware::Apicv),
        ("│ IPIv ", Hardware::Ipiv),
        ("│ AVIC (AMD) ", Hardware::Avic),
        ("│ x2AVIC ", Hardware::X2avic),
    ] {
        let verdict = out.lines().find(|l| l.starts_with(row)).expect(row);
        if verdict.contains("unavailable") {
            lacking += 1;
            let line = format!("not here: {}", hw.where_answered());
            assert!(out.lines().any(|l| l == line), "no {line:?}:\n{out}");
        }
    }
    assert_eq!(out.matches("not here: ").count(), lacking, "{out}");
}

/// Issue 50: `run -q` says nothing while its repeats run.
#[test]
fn a_quiet_run_shows_no_progress() {
    if !kvm_available("a_quiet_run_shows_no_progress") {
        return;
    }
    let mut args = vec!["run", "-q", "--repeat", "2"];
    args.extend_from_slice(QUICK);
    let o = ipivmm(&args);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(!err.contains(" done ("), "{err}");
}

/// Issue 39: every `--help` fits 120 columns (clap wraps only with its
/// terminal-width feature: the top-level list ran to 160 columns, `run
/// --help` had 18 lines over 120), each flag's text wrapped under itself.
#[test]
fn every_help_fits_120_columns() {
    let commands = [
        "",
        "run",
        "sweep",
        "compare",
        "check",
        "host",
        "calibrate",
        "new-payload",
    ];
    for c in commands {
        for flag in ["--help", "-h"] {
            let args: Vec<&str> = [c, flag].into_iter().filter(|a| !a.is_empty()).collect();
            let o = ipivmm(&args);
            let (out, err) = texts(&o);
            assert!(o.status.success(), "ipivmm {args:?}: {err}");
            assert!(out.contains("Usage: ipivmm"), "{out}");
            assert_eq!(too_long(&out), Vec::<String>::new(), "{args:?}:\n{out}");
        }
    }
    // A flag's text goes on under itself, not at the margin.
    let out = texts(&ipivmm(&["run", "--help"])).0;
    let at = out.find("--guest-memory-budget").expect("the flag");
    let next = out[at..].lines().nth(1).unwrap();
    assert!(next.starts_with("          "), "{next:?}");
}

/// Issue 39: `check`'s line per experiment (its name and what it is
/// about) fits 120 columns: plans/seeds.toml's ran to 152. Every seed needs
/// what kvm_pvm lacks, so here each is a skip, no VM.
#[test]
fn check_says_its_experiments_within_120_columns() {
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/seeds.toml");
    let o = ipivmm(&["check", plan]);
    let (out, err) = texts(&o);
    assert!(err.contains("ipivmm: check: "), "{out}{err}");
    assert_eq!(too_long(&err), Vec::<String>::new(), "{err}");
    // Issue 50: every skip says where its question is answered (the lab
    // command, or that no lab has two sockets).
    let skips: Vec<&str> = out.lines().filter(|l| l.contains("# SKIP ")).collect();
    for l in &skips {
        assert!(
            Hardware::ALL
                .iter()
                .any(|h| l.contains(&h.where_answered())),
            "{l}"
        );
    }
    if ipivmm_host::facts::probe().is_ok_and(|h| h.verdicts.ipiv != ApicvSupport::Available) {
        assert!(
            skips
                .iter()
                .any(|l| l.ends_with(&Hardware::Ipiv.where_answered())),
            "{out}"
        );
    }
}

/// Issue 39: the presets' dry runs (the plan, the skips, the estimate)
/// fit 120 columns: their plan lines ran to 203. A calibration VM each.
#[test]
fn the_presets_dry_runs_fit_120_columns() {
    if !kvm_available("the_presets_dry_runs_fit_120_columns") {
        return;
    }
    // Issue 50: where this host cannot answer a preset's question, its
    // dry run names the lab command that does, in a line of its own.
    let host = ipivmm_host::facts::probe().expect("host facts");
    let lacks = |s: &ApicvSupport| *s != ApicvSupport::Available;
    let v = &host.verdicts;
    for (preset, lab) in [
        ("avic-broadcast", lacks(&v.avic).then_some(Hardware::Avic)),
        ("ipiv-unicast", lacks(&v.ipiv).then_some(Hardware::Ipiv)),
        (
            "apicv-topology",
            (lacks(&v.apicv) && lacks(&v.avic)).then_some(Hardware::ApicvOrAvic),
        ),
        (
            "halt-polling",
            (host.backend == ipivmm_host::facts::KvmBackend::KvmPvm)
                .then_some(Hardware::HaltPolling),
        ),
    ] {
        let o = ipivmm(&["sweep", "--preset", preset, "--dry-run"]);
        let (out, err) = texts(&o);
        assert!(o.status.success(), "{preset}: {out}{err}");
        assert!(out.contains("estimated time"), "{preset}: {out}");
        assert_eq!(too_long(&out), Vec::<String>::new(), "{preset}:\n{out}");
        assert_eq!(too_long(&err), Vec::<String>::new(), "{preset}:\n{err}");
        if let Some(hw) = lab {
            // (The preset's lines are on stderr, the plan on stdout.)
            let line = format!("  this host: {}", hw.where_answered());
            assert!(
                err.lines().any(|l| l == line),
                "{preset}: no {line:?}:\n{err}"
            );
        }
    }
}
