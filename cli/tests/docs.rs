//! The docs say what the code does: every command of README.md and docs/*.md
//! that can run here runs, and prints what the docs show.
//!
//! - `ipivmm run --help` names every `run` flag the README lists;
//! - the README's two commands, in their dry forms: `cargo run --release --
//!   run` is `ipivmm run --dry-run` (and cargo finds exactly one binary to
//!   run), `scripts/test.sh` (`cargo test --workspace --release
//!   --no-fail-fast`) is the same with `--no-run`, and its summary line
//!   counts what libtest and the skips printed;
//! - the README's sample header is the real one (a real run with its flags
//!   where /dev/kvm is usable, else the header the report code writes);
//! - every `$ jq ...` of a ```console block prints the output shown under it
//!   (and the README's table is what `readme-table.jq` prints), every
//!   `$ ipivmm ...` there succeeds;
//! - every ```sh block either runs (some need /dev/kvm or cargo: they skip
//!   visibly without) or is listed in [`SH_BLOCKS`] with why it cannot run
//!   in a test; a new block fails this test until it is listed;
//! - the recorded examples are what the code writes now ([`examples`]);
//! - the file and module paths and the crate lists the docs give are the
//!   tree's ([`paths`]).
#[path = "docs/examples.rs"]
mod examples;
#[path = "docs/paths.rs"]
mod paths;

use ipivmm::VmConfig;
use ipivmm_analysis::results::RunConfig;
use ipivmm_cli::output::text;
use ipivmm_testkit::{kvm_available, skip, Need};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::str::FromStr;

/// Every test of this binary shares the host ([`shared_host`]) but the one
/// that counts a fresh run's exits, which has it alone ([`host_alone`]):
/// host preemption only adds exits on kvm_pvm (a nested cargo build or
/// another test's VMs beside it added a quarter to the sender's), so the
/// sample's counts are compared on a host this binary is not loading.
static HOST: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A shared hold of [`HOST`], whatever a panicking holder left.
fn shared_host() -> std::sync::RwLockReadGuard<'static, ()> {
    HOST.read().unwrap_or_else(|e| e.into_inner())
}

/// The host alone ([`HOST`]).
fn host_alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    HOST.write().unwrap_or_else(|e| e.into_inner())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md and every docs/*.md, as (path relative to the repo, text).
fn markdown() -> Vec<(String, String)> {
    let mut files = vec![("README.md".to_string(), read("README.md"))];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for p in docs {
        let rel = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
        files.push((rel.clone(), read(&rel)));
    }
    files
}

/// A fenced code block.
struct Block {
    file: String,
    line: usize,
    lang: String,
    lines: Vec<String>,
}

fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, l) in text.lines().enumerate() {
        match (&mut open, l.trim_start().strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some(Block {
                    file: file.to_string(),
                    line: i + 1,
                    lang: lang.trim().to_string(),
                    lines: Vec::new(),
                })
            }
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(b), None) => b.lines.push(l.to_string()),
            (None, None) => {}
        }
    }
    out
}

/// The commands of a ```sh block: continuation lines joined, comments and
/// blank lines dropped.
fn sh_commands(b: &Block) -> Vec<String> {
    let mut cmds = Vec::new();
    let mut cur = String::new();
    for l in &b.lines {
        let l = strip_comment(l);
        let (part, more) = match l.trim_end().strip_suffix('\\') {
            Some(p) => (p.to_string(), true),
            None => (l.trim_end().to_string(), false),
        };
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(part.trim());
        if !more {
            if !cur.trim().is_empty() {
                cmds.push(cur.trim().to_string());
            }
            cur.clear();
        }
    }
    cmds
}

/// `l` without a `#` comment (a `#` after whitespace, outside quotes).
fn strip_comment(l: &str) -> String {
    let (mut single, mut double, mut prev_space) = (false, false, true);
    for (i, c) in l.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return l[..i].to_string(),
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    l.to_string()
}

fn ipivmm_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_ipivmm"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// bash running `script` in `cwd`, with this build's `ipivmm` first on PATH
/// and without the cargo settings of this test process.
fn bash(script: &str, cwd: &Path) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(script).current_dir(cwd);
    ipivmm::payload::scrub::scrub_env(&mut cmd);
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", ipivmm_dir().display()));
    cmd.output().expect("bash runs")
}

fn text_of(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The workspace's target directory (this test runs from target/release/deps).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn run_help_lists_every_flag_the_readme_names() {
    let _host = shared_host();
    let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    let readme = read("README.md");
    let start = readme
        .find("Useful `run` flags:")
        .expect("the README's flag list");
    let end = start + readme[start..].find("\n\n").unwrap();
    let flags: Vec<&str> = readme[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|t| t.split_whitespace().next())
        .filter(|t| t.starts_with("--"))
        .collect();
    assert!(flags.len() > 15, "{flags:?}");
    for f in flags {
        assert!(
            help.contains(f),
            "the README lists {f}; `ipivmm run --help` does not"
        );
    }
}

#[test]
fn readme_commands_in_their_dry_forms() {
    let _host = shared_host();
    let readme = read("README.md");
    let first = blocks("README.md", &readme)
        .into_iter()
        .find(|b| b.lang == "sh")
        .expect("the README's first sh block");
    let cmds = sh_commands(&first);
    assert_eq!(cmds, ["cargo run --release -- run", "scripts/test.sh"]);
    // The test command runs every test binary of the workspace.
    let script = read("scripts/test.sh");
    assert!(
        script.contains("\ncargo test --workspace --release --no-fail-fast \"$@\""),
        "{script}"
    );
    // `cargo run -- run`: the dry form of the run, and one binary for cargo.
    let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(["run", "--dry-run"])
        .output()
        .unwrap();
    let t = text_of(&o);
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
    {
        assert!(o.status.success(), "{t}");
        assert!(t.starts_with("ipivmm: mode kernel/xapic/icr, workload pingpong (target spin), 2 vCPUs, 1000 iterations + 100 warm-up\n"), "{t}");
        assert!(
            t.contains(
                "dry run: configuration, payload, outputs, /dev/kvm and host checked; no VM built"
            ),
            "{t}"
        );
    } else {
        // Without KVM the dry run fails the way the run would: one line, the fix.
        assert_eq!(o.status.code(), Some(2), "{t}");
        assert!(t.starts_with("ipivmm: error: cannot open /dev/kvm"), "{t}");
    }
    if !has("cargo") {
        skip(
            "readme_commands_in_their_dry_forms (cargo part)",
            Need::Setup,
            "cargo cannot be run here",
        );
        return;
    }
    let o = bash(
        "cargo metadata --no-deps --offline --format-version 1",
        &repo(),
    );
    assert!(o.status.success(), "{}", text_of(&o));
    let meta: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // What `cargo run` at the root sees: the workspace's default members
    // (xtask, run as `cargo xtask`, is not one).
    let default = meta["workspace_default_members"].as_array().unwrap();
    let bins: Vec<&str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| default.contains(&p["id"]))
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(bins, ["ipivmm"], "`cargo run` must find one binary");
    // `scripts/test.sh` (`cargo test --workspace --release --no-fail-fast`):
    // everything it would run builds.
    let o = bash(
        &format!(
            "cargo test --workspace --release --no-run --offline --quiet --target-dir {}",
            target_dir().display()
        ),
        &repo(),
    );
    assert!(o.status.success(), "{}", text_of(&o));
}

/// `scripts/test.sh` with a stand-in `cargo` that prints what cargo and
/// libtest print (two binaries, one failing, a skip, a binary that never
/// finished) and exits 101: every line comes through, then one summary.
#[test]
fn the_test_script_ends_with_one_summary_line() {
    let _host = shared_host();
    let dir = std::env::temp_dir().join(format!("ipivmm-test-sh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("cargo");
    std::fs::write(
        &fake,
        r#"#!/bin/sh
echo "args: $*"
echo "     Running tests/a.rs (target/release/deps/a-0123)"
echo "SKIP a::x: need /dev/kvm (IPIVMM_REQUIRE_KVM=1 makes this a failure)" >&2
echo "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s"
echo "SKIPPED 1 test of a (counted as passed above): 1 need /dev/kvm (IPIVMM_REQUIRE_KVM=1 fails them)" >&2
echo "     Running tests/b.rs (target/release/deps/b-4567)"
echo "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s"
echo "     Running tests/c.rs (target/release/deps/c-89ab)"
echo "   Doc-tests ipivmm"
echo "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s"
exit 101
"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new("bash")
        .arg(repo().join("scripts/test.sh"))
        .args(["-p", "x"])
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(101), "{out}");
    assert!(
        out.starts_with("args: test --workspace --release --no-fail-fast -p x\n"),
        "{out}"
    );
    assert!(
        out.contains("test result: FAILED. 2 passed; 1 failed;"),
        "{out}"
    );
    let last: Vec<&str> = out.lines().rev().take(2).collect();
    assert_eq!(
        last,
        [
            "tests: 9 passed, 1 failed, 1 skipped",
            "tests: 4 binaries (1 did not finish), 1 ignored; exit 101"
        ],
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The configuration of `ipivmm run` with the flags the README's sample uses.
fn config_of(flags: &[&str]) -> VmConfig {
    let mut c = VmConfig::default();
    for pair in flags.chunks(2) {
        match pair {
            ["--apic", v] => c.apic = FromStr::from_str(v).unwrap(),
            ["--irqchip", v] => c.irqchip = FromStr::from_str(v).unwrap(),
            ["--target", v] => c.target_wait = FromStr::from_str(v).unwrap(),
            ["--workload", v] => c.workload = FromStr::from_str(v).unwrap(),
            other => panic!("the README's sample uses {other:?}: teach docs.rs's config_of"),
        }
    }
    c
}

/// The cells of a table row `│ a   b c   d │` (cells are 2+ spaces apart).
fn cells(row: &str) -> Vec<String> {
    row.trim()
        .trim_matches('│')
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect()
}

/// The counts a report shows: KVM exits per (phase, vCPU) of its phase
/// tables, and the headline's exits/IPI. Parsed the same way from a sample
/// (with its `...` elisions) and from a fresh run.
#[derive(Debug, Default)]
struct Counts {
    /// ("phase 2 'measure'", "vcpu0") -> KVM exits.
    exits: Vec<((String, String), f64)>,
    exits_per_ipi: Option<f64>,
}

fn counts_of(lines: &[String]) -> Counts {
    let mut c = Counts::default();
    let (mut phase, mut column): (Option<String>, Option<usize>) = (None, None);
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("phase ") {
            phase = l.split(" (").next().map(String::from);
        } else if l.starts_with("latency ") || l.starts_with("headline ") {
            phase = None;
        }
        if l.starts_with("│ vCPU") {
            column = cells(l).iter().position(|h| h == "KVM exits");
        } else if let (Some(p), Some(col), true) = (&phase, column, l.starts_with("│ vcpu")) {
            let row = cells(l);
            let exits = row[col]
                .parse()
                .unwrap_or_else(|_| panic!("KVM exits of {l:?}"));
            c.exits.push(((p.clone(), row[0].clone()), exits));
        }
        if l.starts_with("headline ") {
            // The headline wraps: its continuation lines are indented.
            let mut joined = l.clone();
            for more in lines[i + 1..].iter().take_while(|m| m.starts_with(' ')) {
                joined.push(' ');
                joined.push_str(more.trim());
            }
            c.exits_per_ipi = joined
                .split(", ")
                .find_map(|part| part.strip_prefix("exits/IPI "))
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("exits/IPI of {joined:?}"))
                });
        }
    }
    c
}

/// How far a fresh run's count may be from the sample's before the sample
/// is out of date. On kvm_pvm (6 fresh runs of the sample's command, 2.6 GHz
/// 2-CPU host under other jobs) the receiver's exits stayed within 2%, the
/// sender's ranged 1054-1515 and exits/IPI 2.07-2.52: host preemption only
/// adds exits, so a run's count is its floor plus noise, and the lowest of a
/// few runs is compared.
const COUNT_TOLERANCE: f64 = 0.25;
/// Fresh runs at most, stopping at the first where every count is within.
const COUNT_RUNS: usize = 5;

/// The sample's counts against the lowest of each count over `runs` (fresh
/// runs' lines, in order): (what, sample, fresh) of every count more than
/// [`COUNT_TOLERANCE`] apart, and the counts the runs lack.
fn counts_apart(sample: &Counts, runs: &[Vec<String>]) -> Vec<String> {
    let fresh: Vec<Counts> = runs.iter().map(|r| counts_of(r)).collect();
    let lowest = |pick: &dyn Fn(&Counts) -> Option<f64>| -> Option<f64> {
        fresh.iter().filter_map(pick).reduce(f64::min)
    };
    let mut wanted: Vec<(String, f64, Option<f64>)> = sample
        .exits
        .iter()
        .map(|((phase, vcpu), v)| {
            let got = lowest(&|c: &Counts| {
                c.exits
                    .iter()
                    .find(|(k, _)| k.0 == *phase && k.1 == *vcpu)
                    .map(|(_, v)| *v)
            });
            (format!("{phase} {vcpu} KVM exits"), *v, got)
        })
        .collect();
    if let Some(v) = sample.exits_per_ipi {
        wanted.push(("headline exits/IPI".into(), v, lowest(&|c| c.exits_per_ipi)));
    }
    wanted
        .into_iter()
        .filter_map(|(what, want, got)| match got {
            None => Some(format!(
                "{what}: {want} in the sample, not in the fresh runs"
            )),
            Some(g) if (g - want).abs() > COUNT_TOLERANCE * want => Some(format!(
                "{what}: {want} in the sample, {g} in a fresh run (the lowest of {})",
                runs.len()
            )),
            Some(_) => None,
        })
        .collect()
}

#[test]
fn counts_are_read_from_a_sample_with_elisions() {
    let _host = shared_host();
    let sample: Vec<String> = [
        "phase 2 'measure-uncounted' (uncounted part)",
        "│ vCPU    ICR writes   KVM exits   exits/IPI       wall │",
        "│ vcpu0         1001        1085        1.08   600.1 ms │",
        "phase 2 'measure' (counted part)",
        "...",
        "│ vcpu1            0        1016        1.01   628.0 ms │",
        "latency per round trip (what one sample times), cycles and ns",
        "│ vCPU    phase               count      min │",
        "│ vcpu0   measure-uncounted    1000   217068 │",
        "headline (latency from 'measure-uncounted', exits from 'measure'; exits and IPIs summed over",
        "    all vCPUs): cycles/round trip p50 221418, exits/IPI 2.09,",
        "    ICR-write exits/IPI 1.00",
    ]
    .map(String::from)
    .to_vec();
    let c = counts_of(&sample);
    let key = |p: &str, v: &str| (p.to_string(), v.to_string());
    assert_eq!(
        c.exits,
        [
            (key("phase 2 'measure-uncounted'", "vcpu0"), 1085.0),
            (key("phase 2 'measure'", "vcpu1"), 1016.0)
        ]
    );
    assert_eq!(c.exits_per_ipi, Some(2.09));
    // A run within 25% agrees; the lowest of the runs is what counts.
    let edit = |from: &str, to: &str| -> Vec<String> {
        sample.iter().map(|l| l.replace(from, to)).collect()
    };
    assert!(counts_apart(&c, std::slice::from_ref(&sample)).is_empty());
    let noisy = edit("1085", "1500");
    assert_eq!(counts_apart(&c, std::slice::from_ref(&noisy)).len(), 1);
    assert!(counts_apart(&c, &[noisy, edit("1085", "1100")]).is_empty());
    // A headline ×6 is out of date, however many runs agree with each other.
    let six = edit("exits/IPI 2.09", "exits/IPI 12.54");
    assert_eq!(
        counts_apart(&counts_of(&six), &[sample.clone(), sample.clone()]),
        ["headline exits/IPI: 12.54 in the sample, 2.09 in a fresh run (the lowest of 2)"]
    );
}

/// The README's sample output is today's: its header lines and table header
/// are a real run's (or, without KVM, the report code's), and its counts
/// (KVM exits per phase and vCPU, the headline's exits/IPI) within
/// [`COUNT_TOLERANCE`] of fresh runs of its command.
#[test]
fn readme_sample_header_is_the_real_one() {
    let _host = host_alone();
    let readme = read("README.md");
    let sample = blocks("README.md", &readme)
        .into_iter()
        .find(|b| b.lang == "text" && b.lines[0].starts_with("$ cargo run --release -- run"))
        .expect("the README's sample output");
    let flags: Vec<&str> = sample.lines[0]
        .trim_start_matches("$ cargo run --release -- run")
        .split_whitespace()
        .collect();
    let line = |prefix: &str, lines: &[String]| -> Option<String> {
        lines.iter().find(|l| l.starts_with(prefix)).cloned()
    };
    let readme_header = line("ipivmm: mode ", &sample.lines).expect("a header line");
    let readme_cells = cells(&line("│ vCPU", &sample.lines).expect("a phase table header"));

    if kvm_available("readme_sample_header_is_the_real_one (real run)") {
        // The sample's 1000 halted round trips, measured twice (uncounted
        // and counted), took 48 s of the default 60 s timeout on this
        // 2-CPU host under other jobs' load: room, not a speed target.
        let mut args = vec![
            "run",
            "--repeat",
            "1",
            "--serial",
            "none",
            "--timeout",
            "300",
        ];
        args.extend(&flags);
        let fresh_run = || -> Vec<String> {
            let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
                .args(&args)
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                o.status.success(),
                "{out}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            out.lines().map(String::from).collect()
        };
        let lines = fresh_run();
        let out = lines.join("\n");
        assert_eq!(line("ipivmm: mode ", &lines), Some(readme_header.clone()));
        assert_eq!(cells(&line("│ vCPU", &lines).unwrap()), readme_cells);
        for prefix in [
            "APICv: ",
            "exit counting: ",
            "status: completed; total ",
            "phase 2 'measure'",
        ] {
            assert!(
                line(prefix, &sample.lines).is_some(),
                "README lacks {prefix:?}"
            );
            assert!(
                line(prefix, &lines).is_some(),
                "output lacks {prefix:?}:\n{out}"
            );
        }
        let want = counts_of(&sample.lines);
        assert!(
            want.exits.len() >= 2 && want.exits_per_ipi.is_some(),
            "README.md:{}: the sample shows no phase table rows or no headline exits/IPI: {want:?}",
            sample.line
        );
        let mut runs = vec![lines];
        while !counts_apart(&want, &runs).is_empty() && runs.len() < COUNT_RUNS {
            runs.push(fresh_run());
        }
        let apart = counts_apart(&want, &runs);
        assert!(
            apart.is_empty(),
            "README.md:{}: the sample's counts are not today's (more than {}% from fresh runs):\n  {}\n\
             re-record it: `sudo target/release/ipivmm run{}` and put its lines in the sample, \
             keeping the sample's `...` elisions",
            sample.line,
            COUNT_TOLERANCE * 100.0,
            apart.join("\n  "),
            flags.iter().map(|f| format!(" {f}")).collect::<String>()
        );
    }
    // The report code, KVM or not.
    let c = config_of(&flags);
    let mode = RunConfig::from(&c);
    assert_eq!(
        text::header_line(&mode, &mode.label(c.apicv)),
        readme_header
    );
    // The README shows the table as it fits 120 columns: its columns and
    // the ones its note names as left out are every column, in order.
    let left_out: Vec<String> = line("  (left out to fit 120 columns", &sample.lines)
        .expect("the README's note of the columns left out")
        .rsplit_once(": ")
        .expect("a list")
        .1
        .trim_end_matches(')')
        .split(", ")
        .map(String::from)
        .collect();
    let fitted: Vec<&str> = text::phase_header()
        .into_iter()
        .filter(|h| !left_out.iter().any(|l| l == h))
        .collect();
    assert_eq!(readme_cells, fitted);
    assert_eq!(fitted.len() + left_out.len(), text::phase_header().len());
}

/// (command, expected output) of every `$ ` line of the ```console blocks.
fn console_examples() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (file, text) in markdown() {
        for b in blocks(&file, &text)
            .into_iter()
            .filter(|b| b.lang == "console")
        {
            let mut cur: Option<(String, Vec<String>)> = None;
            for l in &b.lines {
                if let Some(cmd) = l.strip_prefix("$ ") {
                    if let Some((c, o)) = cur.take() {
                        out.push((format!("{}:{}", b.file, b.line), c, o.join("\n")));
                    }
                    cur = Some((cmd.to_string(), Vec::new()));
                } else if let Some((_, o)) = &mut cur {
                    o.push(l.clone());
                }
            }
            if let Some((c, o)) = cur {
                out.push((format!("{}:{}", b.file, b.line), c, o.join("\n")));
            }
        }
    }
    out
}

#[test]
fn jq_examples_print_what_the_docs_show() {
    let _host = shared_host();
    let examples = console_examples();
    let jq: Vec<_> = examples
        .iter()
        .filter(|(_, c, _)| c.starts_with("jq "))
        .collect();
    assert!(jq.len() >= 8, "{} jq examples found", jq.len());
    if !has("jq") {
        skip(
            "jq_examples_print_what_the_docs_show",
            Need::Setup,
            "jq is not installed (apt-get install jq)",
        );
        return;
    }
    for (at, cmd, expected) in &examples {
        let o = bash(cmd, &repo());
        let got = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{at}: `{cmd}` failed:\n{}", text_of(&o));
        if cmd.starts_with("jq ") {
            assert_eq!(got.trim_end(), expected.trim_end(), "{at}: `{cmd}`");
        } else {
            assert!(
                cmd.starts_with("ipivmm "),
                "{at}: `{cmd}`: teach docs.rs how to check it"
            );
        }
    }
    // The README's table, above the command that makes it.
    let readme = read("README.md");
    let cmd_at = readme
        .find("(`jq -rs -f docs/examples/readme-table.jq")
        .expect("the README's table command");
    let cmd = readme[cmd_at + 2..].split('`').next().unwrap().to_string();
    let table: Vec<&str> = readme[..cmd_at]
        .trim_end()
        .lines()
        .rev()
        .take_while(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    assert!(table.len() >= 3, "{table:?}");
    let o = bash(&cmd, &repo());
    assert!(o.status.success(), "{}", text_of(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim_end(),
        table.join("\n")
    );
}

/// How a ```sh block is checked, by its first command.
enum How {
    /// The README's first block: [`readme_commands_in_their_dry_forms`].
    Dry,
    /// Run as a bash script (`set -e`) in `cwd`.
    Run {
        /// Where: the repo, a fresh temporary directory, or an example.
        cwd: &'static str,
        /// Needs /dev/kvm (runs a VM).
        kvm: bool,
        /// Text replaced before running (placeholders, `cargo run --`).
        subst: &'static [(&'static str, &'static str)],
        /// A script run first (e.g. building what the block inspects).
        setup: &'static str,
        /// What stdout must be, when the block shows it (then the exit
        /// status is not checked).
        expect: Option<&'static str>,
    },
    /// Not run in a test, and why.
    NotHere(&'static str),
}

const TEMP: &str = "<temp>";
const CARGO_RUN: (&str, &str) = ("cargo run --release --", "ipivmm");

/// Every ```sh block of the docs, by its first command.
const SH_BLOCKS: &[(&str, How)] = &[
    ("cargo run --release -- run", How::Dry),
    (
        "(cd examples/exit-roundtrip && cargo build --release)",
        How::Run {
            cwd: ".",
            kvm: true,
            subst: &[CARGO_RUN],
            setup: "",
            expect: None,
        },
    ),
    (
        "ipivmm new-payload my-payload",
        How::Run {
            cwd: TEMP,
            kvm: true,
            subst: &[],
            setup: "",
            expect: None,
        },
    ),
    (
        "objdump -d --no-show-raw-insn target/x86_64-unknown-linux-gnu/release/<name> | grep -cE '%xmm|%ymm|%zmm|%mm|%st'",
        How::Run {
            cwd: "examples/exit-roundtrip",
            kvm: false,
            subst: &[("<name>", "exit-roundtrip")],
            setup: "cargo build --release --quiet",
            expect: Some("0"),
        },
    ),
    (
        "IPIVMM_PROPTEST_CASES=1000000 cargo test --workspace --release --test prop_abi --test prop_control --test prop_lapic --test prop_kvm_stats",
        How::Run {
            cwd: ".",
            kvm: false,
            subst: &[("1000000", "64")],
            setup: "",
            expect: None,
        },
    ),
    (
        "ipivmm sweep --workload broadcast --apic xapic,x2apic --vcpus 2..1024 --target halt --iterations 5 --json scale.json --plot charts/",
        How::Run {
            cwd: TEMP,
            kvm: true,
            // The same commands at 2 and 4 vCPUs, one irqchip: seconds, not minutes.
            subst: &[("2..1024 --target halt", "2..4 --target halt --irqchip kernel")],
            setup: "",
            expect: None,
        },
    ),
    (
        // docs/ci.md's LAVA-style script: its TAP turned into test cases and
        // its exit status, with one short run in place of the kvm-paths plan
        // (30-90 s of 4-vCPU sweeps here, beside this binary's other VMs).
        "results=$(mktemp -d)",
        How::Run {
            cwd: ".",
            kvm: true,
            subst: &[(
                "ipivmm check plans/kvm-paths.toml --junit \"$results/kvm-paths.xml\" --json-dir \"$results/json\"",
                "ipivmm run --iterations 20 --warmup 2 --serial none --expect 'ipis_delivered == ipis_sent' --expect 'vcpu1.guest.ipis_received >= operations' --tap --junit \"$results/kvm-paths.xml\"",
            )],
            setup: "",
            expect: None,
        },
    ),
    (
        "cargo install --path cli",
        How::NotHere("installs into ~/.cargo/bin (another release build of the binary); the tests run the binary cargo built"),
    ),
    (
        "rustup target add x86_64-unknown-none",
        How::NotHere("needs the network and the x86_64-unknown-none target (the docs say it is untested here)"),
    ),
    (
        "ipivmm host --set kvm_amd.avic=1",
        How::NotHere("reloads the KVM vendor module: by hand, as root, on a host you own"),
    ),
    (
        "cargo xtask lab",
        How::NotHere("boots the lab VM (QEMU, root, minutes); CI runs `cargo xtask lab quick`"),
    ),
    (
        "cargo xtask lab seeds",
        How::NotHere("boots the QEMU and Bochs labs, a part per seed (root, tens of minutes); opt-in, not in CI"),
    ),
    (
        "cargo xtask lab avic",
        How::NotHere("builds QEMU with the AVIC series and boots the lab three times (root, tens of minutes); not in CI"),
    ),
    (
        "deb=$(scripts/lab/fetch-kernel.sh trixie)",
        How::NotHere("downloads Debian trixie's kernel package and boots the AVIC lab on it (root, QEMU build, minutes); not in CI"),
    ),
    (
        "scripts/lab/build-selftests.sh scripts/lab/probe-headline.sh target/lab/headline.cpio",
        How::NotHere("builds KVM selftests and boots the lab for 150 runs (root, about 10 minutes); not in CI"),
    ),
    (
        "scripts/lab/build-selftests.sh scripts/lab/probe-apicv.sh target/lab-bochs/probe.cpio",
        How::NotHere("builds KVM selftests and boots kvm_intel under Bochs (root, tens of minutes); not in CI"),
    ),
    (
        "cargo xtask linux-initrd",
        How::NotHere("downloads Debian packages (busybox-static, rt-tests, linux-headers) and builds a kernel module; the Linux guest then boots only on a hardware KVM (the lab), not on kvm_pvm"),
    ),
    (
        "cargo xtask lab linux",
        How::NotHere("boots the lab with a Linux guest nested under kvm_amd (QEMU, root, tens of minutes)"),
    ),
    (
        "ipivmm sweep --kernel K --initrd I --workload linux:ipi-broadcast --apic xapic,x2apic --dry-run",
        How::NotHere("needs a bzImage and ipivmm's initramfs (cargo xtask linux-initrd), and a Linux guest boots only on a hardware KVM (the lab: lab.probe=sweep); the planning is tested in sweep::tests and commands::sweep::tests"),
    ),
    (
        "cargo xtask lab linux --emulator bochs --bochs 3.0 --results target/lab-bochs/results-linux -- lab.vcpus=2 lab.iterations=10",
        How::NotHere("boots kvm_intel under the patched Bochs with a nested Linux guest (root, about an hour); not in CI"),
    ),
    (
        "RUSTFLAGS=\"-Cpasses=sancov-module",
        How::NotHere("needs a nightly toolchain"),
    ),
];

fn how(first: &str) -> Option<&'static How> {
    SH_BLOCKS
        .iter()
        .find(|(k, _)| first == *k || (k.ends_with("sancov-module") && first.starts_with(k)))
        .map(|(_, h)| h)
}

#[test]
fn sh_blocks_run_or_are_listed() {
    let _host = shared_host();
    let mut unknown = Vec::new();
    let mut ran = 0;
    for (file, text) in markdown() {
        for b in blocks(&file, &text).into_iter().filter(|b| b.lang == "sh") {
            let cmds = sh_commands(&b);
            let at = format!("{}:{}", b.file, b.line);
            let Some(first) = cmds.first() else { continue };
            match how(first) {
                None => unknown.push(format!("{at}: {first}")),
                Some(How::Dry) => {}
                Some(How::NotHere(why)) => {
                    eprintln!("docs: not run: {at}: {first} ({why})");
                }
                Some(How::Run {
                    cwd,
                    kvm,
                    subst,
                    setup,
                    expect,
                }) => {
                    let test = format!("sh_blocks_run_or_are_listed ({at})");
                    if cmds
                        .iter()
                        .chain([&setup.to_string()])
                        .any(|c| c.contains("cargo"))
                        && !has("cargo")
                    {
                        skip(&test, Need::Setup, "cargo cannot be run here");
                        continue;
                    }
                    if *kvm && !kvm_available(&test) {
                        continue;
                    }
                    let mut script = cmds.join("\n");
                    for (from, to) in subst.iter() {
                        script = script.replace(from, to);
                    }
                    let dir = if *cwd == TEMP {
                        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                            .join(format!("docs-sh-{}", b.line));
                        let _ = std::fs::remove_dir_all(&d);
                        std::fs::create_dir_all(&d).unwrap();
                        d
                    } else {
                        repo().join(cwd)
                    };
                    if !setup.is_empty() {
                        let o = bash(setup, &dir);
                        assert!(
                            o.status.success(),
                            "{at}: setup `{setup}`:\n{}",
                            text_of(&o)
                        );
                    }
                    let o = bash(&format!("set -e\n{script}"), &dir);
                    match expect {
                        // What it prints is the check (`grep -c` that prints
                        // 0 exits with 1).
                        Some(e) => assert_eq!(
                            String::from_utf8_lossy(&o.stdout).trim(),
                            *e,
                            "{at}:\n{script}\n{}",
                            text_of(&o)
                        ),
                        None => assert!(o.status.success(), "{at}:\n{script}\n{}", text_of(&o)),
                    }
                    ran += 1;
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "```sh blocks that docs.rs neither runs nor lists (add them to SH_BLOCKS): {unknown:#?}"
    );
    eprintln!("docs: {ran} sh blocks ran");
}

#[test]
fn sh_commands_are_parsed_like_a_shell_reads_them() {
    let _host = shared_host();
    let b = Block {
        file: "x".into(),
        line: 1,
        lang: "sh".into(),
        lines: vec![
            "# a comment".into(),
            "objdump -d x \\".into(),
            "    | grep -cE '%xmm|#no'      # must print 0".into(),
            "".into(),
            "echo \"a # b\"".into(),
        ],
    };
    assert_eq!(
        sh_commands(&b),
        ["objdump -d x | grep -cE '%xmm|#no'", "echo \"a # b\""]
    );
}

/// What the fragments of docs/payload-sdk.md may name without defining it:
/// `main`'s arguments, a vector `v`, a logical destination `dest` and a
/// phase `id`, and the SDK's modules.
const SDK_FRAGMENT_PRELUDE: &str = "#![no_std]
#![no_main]
#![allow(unused)]

use ipivmm_guest::ipi::{self, Icr, Ipi};
use ipivmm_guest::{apic, control, idt, percpu, runtime, sync, BootInfo};
";

/// Every ```rust block of docs/payload-sdk.md compiles against this
/// build's SDK, in a crate `ipivmm new-payload` writes: a block with
/// `entry!` as the crate's whole `src/main.rs`, every other block as the
/// body of a function with [`SDK_FRAGMENT_PRELUDE`] in scope (cargo
/// needed: a visible skip without it).
#[test]
fn payload_sdk_rust_blocks_compile() {
    let _host = shared_host();
    const TEST: &str = "payload_sdk_rust_blocks_compile";
    let file = "docs/payload-sdk.md";
    let rust: Vec<Block> = blocks(file, &read(file))
        .into_iter()
        .filter(|b| b.lang == "rust")
        .collect();
    let (programs, fragments): (Vec<&Block>, Vec<&Block>) = rust
        .iter()
        .partition(|b| b.lines.iter().any(|l| l.contains("entry!(")));
    // The minimal payload, and the calls of the SDK's sections.
    assert!(
        programs.len() == 1 && fragments.len() >= 6,
        "{file}: {} whole payloads, {} fragments",
        programs.len(),
        fragments.len()
    );
    if !has("cargo") {
        skip(TEST, Need::Setup, "cargo cannot be run here");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("payload-sdk-blocks");
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(env!("CARGO_BIN_EXE_ipivmm"))
        .args(["new-payload", "sdkdocs"])
        .arg(&dir)
        .output()
        .expect("ipivmm runs");
    assert!(o.status.success(), "new-payload: {}", text_of(&o));

    let mut wrapped = SDK_FRAGMENT_PRELUDE.to_string();
    for (i, b) in fragments.iter().enumerate() {
        wrapped.push_str(&format!(
            "\n// {}:{}\nfn fragment_{i}(boot: &'static BootInfo, vcpu: usize, v: u8, dest: u32, id: u32) {{\n{}\n}}\n",
            b.file,
            b.line,
            b.lines.join("\n")
        ));
    }
    wrapped.push_str("\nfn main(_: &'static BootInfo, _: usize) {}\nipivmm_guest::entry!(main);\n");
    let mut sources = vec![("the fragments".to_string(), wrapped)];
    for b in &programs {
        sources.push((format!("{}:{}", b.file, b.line), b.lines.join("\n")));
    }
    for (what, main_rs) in sources {
        std::fs::write(dir.join("src/main.rs"), &main_rs).unwrap();
        let o = bash("cargo build --release --offline", &dir);
        assert!(
            o.status.success(),
            "{what} of {file} do not build:\n{}\n--- src/main.rs:\n{main_rs}",
            text_of(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/guest-abi.md's `GuestCounters` table is the descriptor table
/// (`GuestCounters::ALL`): offset, field and meaning of every counter, in
/// order, so a counter added to the ABI needs its row, and the row says what
/// the code says.
#[test]
fn guest_abi_counter_table_is_the_descriptor_table() {
    let _host = shared_host();
    let doc = read("docs/guest-abi.md");
    let section = doc
        .split("### GuestCounters")
        .nth(1)
        .expect("docs/guest-abi.md has a GuestCounters section");
    let rows: Vec<(String, String, String)> = section
        .lines()
        .skip_while(|l| !l.starts_with("| offset |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let c: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(c.len(), 3, "a row of offset, field, meaning: {l}");
            (c[0].to_string(), c[1].to_string(), c[2].to_string())
        })
        .collect();
    let want: Vec<(String, String, String)> = ipivmm_abi::GuestCounters::ALL
        .iter()
        .map(|d| {
            (
                d.offset.to_string(),
                format!("`{}`", d.name),
                d.doc.to_string(),
            )
        })
        .collect();
    assert_eq!(rows, want, "docs/guest-abi.md's GuestCounters table");
}

/// Issue 39: the README shows ipivmm's output as ipivmm prints it today,
/// within 120 columns: its sweep excerpt ran to 163 (a table from before
/// tables fitted), its layout to 144.
#[test]
fn readme_samples_fit_120_columns() {
    let _host = shared_host();
    let readme = read("README.md");
    let mut long = Vec::new();
    for b in blocks("README.md", &readme)
        .into_iter()
        .filter(|b| b.lang == "text")
    {
        for (i, l) in b.lines.iter().enumerate() {
            if l.chars().count() > 120 {
                long.push(format!(
                    "README.md:{}: {} columns",
                    b.line + 1 + i,
                    l.chars().count()
                ));
            }
        }
    }
    assert!(long.is_empty(), "{long:#?}");
}

/// Issue 50: the README leads with the seeds' questions, each mapped to the
/// preset that answers it on a hardware host and the lab command that
/// answers it under emulation: the commands of the table `ipivmm host`, the
/// presets and `check` name (`ipivmm_host::lab`), so the README cannot
/// point elsewhere than they do.
#[test]
fn readme_maps_each_question_to_where_it_is_answered() {
    let _host = shared_host();
    use ipivmm_cli::sweep::presets::Preset;
    let readme = read("README.md");
    let section = readme
        .split("\n## What it answers\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README's \"What it answers\" section");
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ")).collect();
    for p in Preset::ALL {
        let preset = format!("`ipivmm sweep --preset {p}`");
        let row = rows
            .iter()
            .find(|r| r.contains(&preset))
            .unwrap_or_else(|| panic!("README's question table has no row running {preset}"));
        let lab = p.hardware().lab_command();
        match lab {
            Some(cmd) => assert!(row.contains(&format!("`{cmd}`")), "{p}: {row}"),
            None => assert!(row.contains("none: "), "{p}: {row}"),
        }
    }
}

/// Issue 50: README said Rust 1.85+, xtask declared 1.89 (and the tests
/// build xtask). One minimum: the workspace's `rust-version`, inherited by
/// every member, the guest payload's workspace the same, README saying it.
#[test]
fn one_rust_version_for_the_workspace() {
    let _host = shared_host();
    let root = read("Cargo.toml");
    let version_of = |manifest: &str| -> Option<String> {
        manifest
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = \""))
            .map(|v| v.trim_end_matches('"').to_string())
    };
    let v = version_of(&root).expect("[workspace.package] rust-version");
    assert_eq!(
        version_of(&read("guest-payload/Cargo.toml")),
        Some(v.clone())
    );
    let members = root
        .split("\nmembers = [")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .expect("the workspace's members");
    let guest = [
        "guest-payload/sdk",
        "guest-payload/payload",
        "guest-payload/hostile",
    ];
    for m in members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .chain(guest)
    {
        let manifest = read(&format!("{m}/Cargo.toml"));
        assert!(
            manifest.contains("\nrust-version.workspace = true\n"),
            "{m}/Cargo.toml does not inherit the workspace's rust-version"
        );
        assert_eq!(
            version_of(&manifest),
            None,
            "{m}/Cargo.toml declares its own"
        );
    }
    let readme = read("README.md");
    assert!(
        readme.contains(&format!("- Rust {v} or newer")),
        "README does not say Rust {v}"
    );
    assert!(
        !readme.contains("1.85+"),
        "README names another Rust version"
    );
}
