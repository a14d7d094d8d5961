//! `cargo xtask lab seeds`: one command for the three seed reports
//! (shared/seeds/), each re-created by an existing lab part, and their
//! tables in the reports' own shapes in docs/seeds.md (docs/lab.md,
//! "The seeds"). Each seed's part boots once and leaves its results tree
//! under target/lab-seeds/SEED ([`Dirs`]) with `seeds-run.txt` (commit,
//! start, command, exit status, wall time); the tables are made from the
//! trees alone (`--no-boot` makes them without booting), so the parts may
//! run one at a time.
use super::cli::{Args, Seed};
use super::host::log;
use super::pass::{LabOutcome, Settings};
use super::{initramfs, seeds_000, seeds_002, seeds_003};
use anyhow::{Context, Result};
use clap::Parser;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where each seed's part leaves its results.
pub struct Dirs {
    pub s000: PathBuf,
    pub s002: PathBuf,
    /// The AVIC pass's results directory: the part's tree is `topology/`.
    pub s003: PathBuf,
}

impl Dirs {
    pub fn under(root: &Path) -> Self {
        let d = root.join("target/lab-seeds");
        Self {
            s000: d.join("000"),
            s002: d.join("002"),
            s003: d.join("003"),
        }
    }

    fn of(&self, seed: Seed) -> &Path {
        match seed {
            Seed::S000 => &self.s000,
            Seed::S002 => &self.s002,
            Seed::S003 => &self.s003,
        }
    }

    /// The results tree a seed's tables read.
    fn tree(&self, seed: Seed) -> PathBuf {
        match seed {
            Seed::S003 => self.s003.join("topology"),
            _ => self.of(seed).to_path_buf(),
        }
    }
}

/// The provenance file each part's results directory gets.
const PROVENANCE: &str = "seeds-run.txt";

/// `cargo xtask lab seeds`.
pub fn main(s: &Settings, args: &Args) -> Result<LabOutcome> {
    let dirs = Dirs::under(&s.root);
    let mut verdict = LabOutcome::Passed;
    if !args.no_boot {
        for seed in args.seeds.clone().unwrap_or_else(|| Seed::ALL.to_vec()) {
            // A part that fails or cannot run leaves its cells `not run`;
            // the others still run and the tables are still written.
            match part(s, args, &dirs, seed) {
                Ok(LabOutcome::Passed) => {}
                Ok(LabOutcome::Failed) => verdict = LabOutcome::Failed,
                Err(e) => {
                    eprintln!("lab: error: seed {}: {e:#}", seed.name());
                    verdict = LabOutcome::Failed;
                }
            }
        }
    }
    let made = format!(
        "Made on {} from the checkout at commit `{}`.",
        chrono::DateTime::from_timestamp(now_s(), 0).map_or_else(
            || "?".into(),
            |d| d.format("%Y-%m-%d %H:%M UTC").to_string()
        ),
        commit(&s.root)
    );
    let doc = document(&dirs, &s.root, &made);
    print!("{doc}");
    fs::write(s.root.join("docs/seeds.md"), &doc).context("docs/seeds.md")?;
    log("wrote docs/seeds.md");
    Ok(verdict)
}

/// The lab command that runs `seed`'s part (the words after `cargo xtask
/// lab`); seed 002's with the IPIv smoke's archive and kvm-unit-tests' (`kut`);
/// the guest arguments `extra` (`seeds -- lab.vcpus=2,4`) after each part's own.
fn command(
    dirs: &Dirs,
    seed: Seed,
    (smoke, kut): (&Path, Option<&Path>),
    extra: &[String],
) -> Vec<String> {
    let mut w = part_words(dirs, seed, smoke, kut);
    if !extra.is_empty() && !w.iter().any(|a| a == "--") {
        w.push("--".into());
    }
    w.extend(extra.iter().cloned());
    w
}

/// [`command`] without the extra guest arguments.
fn part_words(dirs: &Dirs, seed: Seed, smoke: &Path, kut: Option<&Path>) -> Vec<String> {
    let dir = dirs.of(seed).display().to_string();
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    match seed {
        Seed::S000 => words(&["linux", "--results", &dir, "--", "lab.probe=seeds"]),
        Seed::S002 => {
            let mut w = words(&[
                "quick",
                "--emulator",
                "bochs",
                "--bochs",
                "3.0",
                "--steps",
                "host,extra",
                "--no-test-binaries",
                "--iterations",
                "20",
                "--timeout",
                "3600",
                "--results",
                &dir,
                "--cpio",
            ]);
            w.push(smoke.display().to_string());
            if let Some(kut) = kut {
                w.extend(["--cpio".into(), kut.display().to_string()]);
            }
            w.extend(["--".into(), "lab.smoke_apics=xapic,x2apic".into()]);
            w
        }
        Seed::S003 => words(&[
            "avic",
            "--parts",
            "topology",
            "--sockets",
            "2",
            "--smp",
            "4",
            "--results",
            &dir,
        ]),
    }
}

/// kvm-unit-tests' `x86/vmexit.flat` of the built tree `kut` as
/// /lab/kut/vmexit.flat in an archive to append to the Intel lab's initramfs.
fn kut_archive(s: &Settings, kut: &Path) -> Result<PathBuf> {
    let flat = kut.join("x86/vmexit.flat");
    if !flat.is_file() {
        anyhow::bail!(
            "--kut {}: no x86/vmexit.flat there (give a built kvm-unit-tests: ./configure && make)",
            kut.display()
        );
    }
    let work = s.root.join("target/lab-seeds");
    let st = work.join("kut");
    let _ = fs::remove_dir_all(&st);
    fs::create_dir_all(st.join("lab/kut"))?;
    fs::copy(&flat, st.join("lab/kut/vmexit.flat"))?;
    let out = work.join("kut.cpio");
    initramfs::pack(&st, &super::debs::cached_busybox(&s.cache)?, &out)?;
    fs::remove_dir_all(&st)?;
    Ok(out)
}

/// Runs `seed`'s part as its own lab command and records what ran.
fn part(s: &Settings, args: &Args, dirs: &Dirs, seed: Seed) -> Result<LabOutcome> {
    #[derive(Parser)]
    struct Lab {
        #[command(flatten)]
        lab: Args,
    }
    let (mut smoke, mut kut) = (PathBuf::new(), None);
    if seed == Seed::S002 {
        let script = "scripts/lab/build-ipiv-smoke.sh";
        smoke = super::host::built(
            script,
            Command::new(s.root.join(script)).arg(s.root.join("target/lab-seeds/ipiv-smoke.cpio")),
        )?;
        kut = args.kut.as_deref().map(|k| kut_archive(s, k)).transpose()?;
    }
    let words = command(dirs, seed, (&smoke, kut.as_deref()), &args.kernel_args);
    let line = format!("cargo xtask lab {}", words.join(" "));
    log(format!("seed {}: {line}", seed.name()));
    let lab = Lab::try_parse_from(std::iter::once("lab".to_string()).chain(words))
        .with_context(|| format!("seed {}'s command", seed.name()))?
        .lab;
    let started = now_s();
    let commit = commit(&s.root);
    let outcome = super::main(lab);
    let exit = match &outcome {
        Ok(LabOutcome::Passed) => "0".to_string(),
        Ok(LabOutcome::Failed) => "1".to_string(),
        Err(e) => format!("2 ({e:#})"),
    };
    fs::create_dir_all(dirs.of(seed))?;
    fs::write(
        dirs.of(seed).join(PROVENANCE),
        format!(
            "commit {commit}\nstarted {}\ncommand {line}\nexit {exit}\ntook_s {}\n",
            chrono::DateTime::from_timestamp(started, 0).map_or_else(
                || "?".into(),
                |d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string()
            ),
            now_s() - started
        ),
    )?;
    outcome
}

/// Seconds since the epoch.
fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The checkout's commit, `+dirty` when its tracked files differ.
fn commit(root: &Path) -> String {
    let git = |a: &[&str]| {
        Command::new("git")
            .args(a)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if !s.is_empty() => format!("{head}+dirty"),
        _ => head,
    }
}

/// What ran to make a seed's results: its provenance file's line and the
/// part's wall times (timings.txt), or that they are not there.
fn provenance(dirs: &Dirs, seed: Seed) -> String {
    let text = fs::read_to_string(dirs.of(seed).join(PROVENANCE)).unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(' '))
            .map(str::to_string)
    };
    let timings = fs::read_to_string(dirs.tree(seed).join("timings.txt")).unwrap_or_default();
    let boot: Vec<String> = timings
        .lines()
        .filter(|l| l.starts_with("boot"))
        .map(|l| format!("{l} s"))
        .collect();
    let boot = if boot.is_empty() {
        String::new()
    } else {
        format!(" (of which {})", boot.join(", "))
    };
    match (field("command"), field("commit"), field("started")) {
        (Some(cmd), Some(commit), Some(started)) => format!(
            "`{cmd}`, commit `{}`, started {started}, exit {}, {} s{boot}; results in `{}`.",
            commit.get(..12).unwrap_or(&commit),
            field("exit").unwrap_or_else(|| "unknown".into()),
            field("took_s").unwrap_or_else(|| "?".into()),
            dirs.tree(seed).display()
        ),
        _ => {
            let not_seeds = format!(
                "not run by `cargo xtask lab seeds` here (no {} in `{}`; `cargo xtask lab seeds --seed {}` runs its part)",
                PROVENANCE,
                dirs.of(seed).display(),
                seed.name()
            );
            match recorded(&dirs.tree(seed)) {
                Some(what) => format!(
                    "{not_seeds}: the results in `{}` came from another command, {what}{boot}.",
                    dirs.tree(seed).display()
                ),
                None => format!("{not_seeds}."),
            }
        }
    }
}

/// What a results tree made outside `seeds` says of itself: when its
/// runs were recorded (the latest `recorded_at`) and its emulator
/// (versions.txt); None when it has no runs.
fn recorded(tree: &Path) -> Option<String> {
    let latest = fs::read_dir(tree.join("runs"))
        .ok()?
        .flatten()
        .filter_map(|e| {
            ipivmm_analysis::results::Document::load(&e.path())
                .ok()?
                .recorded_at
        })
        .max()?;
    let when = chrono::DateTime::from_timestamp(latest as i64, 0).map_or_else(
        || "?".into(),
        |d| d.format("%Y-%m-%d %H:%M UTC").to_string(),
    );
    let versions = fs::read_to_string(tree.join("versions.txt")).unwrap_or_default();
    let emulator = versions
        .lines()
        .find(|l| l.starts_with("bochs ") || l.starts_with("qemu QEMU"))
        .map_or_else(String::new, |l| format!(", `{l}`"));
    Some(format!("recorded {when}{emulator}"))
}

/// docs/seeds.md: per seed, what ran, the tables and the claims.
pub fn document(dirs: &Dirs, root: &Path, made: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# The seeds, as the labs reproduce them\n\n\
         Generated by `cargo xtask lab seeds` (xtask/src/lab/seeds*.rs; docs/lab.md, \"The seeds\") \
         from the results the seeds' lab parts left: do not edit by hand. Each table has the shape of \
         its report (shared/seeds/), the report's own figures beside the lab's, and ipivmm's exit \
         breakdown beside each cell. The labs are emulators (QEMU TCG for kvm_amd and AVIC, Bochs \
         for kvm_intel and IPIv): their counts are real KVM behaviour, their timings are not a CPU's. \
         So a claim about counts is judged, a claim about timings is printed with what the emulator \
         measured and never judged. A cell the labs did not fill says `not run` and why.\n\n{made}\n"
    );
    let section = |out: &mut String,
                   title: &str,
                   seed: Seed,
                   body: Vec<String>,
                   claims: Vec<super::seeds_cells::Claim>| {
        let _ = writeln!(out, "## {title}\n\nRan: {}\n", provenance(dirs, seed));
        for l in body {
            let _ = writeln!(out, "{l}");
        }
        let _ = writeln!(out, "\nThe report's claims:\n");
        for c in claims {
            let _ = writeln!(out, "{}", c.line());
        }
        out.push('\n');
    };
    let s000 = seeds_000::read(&dirs.tree(Seed::S000));
    let mut body = Vec::new();
    let mut claims = Vec::new();
    for (i, t) in s000.iter().enumerate() {
        if i > 0 {
            body.push(String::new());
        }
        body.extend(t.tables());
        claims.extend(t.claims().into_iter().map(|mut c| {
            if s000.len() > 1 {
                c.why = format!("({} vCPUs) {}", t.vcpus, c.why);
            }
            c
        }));
    }
    section(
        &mut out,
        "Seed 000: AVIC and all-but-self broadcasts (QEMU lab, kvm_amd)",
        Seed::S000,
        body,
        claims,
    );
    let s002 = seeds_002::read(&dirs.tree(Seed::S002));
    section(
        &mut out,
        "Seed 002: IPI virtualization (Intel lab, kvm_intel under Bochs)",
        Seed::S002,
        s002.table(),
        s002.claims(),
    );
    let s003 = seeds_003::read(&dirs.tree(Seed::S003));
    section(
        &mut out,
        "Seed 003: APICv and topology (QEMU lab, two sockets)",
        Seed::S003,
        s003.table(),
        s003.claims(),
    );
    let mut out = out.trim_end().to_string();
    out.push('\n');
    out.replace(&format!("{}/", root.display()), "")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");

    /// A checkout's target/lab-seeds as the parts leave it, from real lab
    /// results: seed 000 two Linux broadcasts of the QEMU lab (fixtures/linux:
    /// x2APIC with AVIC, xAPIC inhibited; the other cells not run), seed 002
    /// the Intel lab's IPIv smoke (fixtures/seeds/002: x2APIC, enable_ipiv=Y
    /// and N under Bochs), seed 003 the quick pass's kvm_amd ping-pongs with
    /// AVIC on and inhibited, placed as the topology preset places them.
    pub struct Tree(pub tempfile::TempDir);

    impl Tree {
        pub fn new() -> Self {
            let t = Tree(tempfile::tempdir().unwrap());
            let d = t.dirs();
            let copy = |from: &str, to: &Path| {
                fs::create_dir_all(to.parent().unwrap()).unwrap();
                fs::copy(format!("{FIXTURES}/{from}"), to).unwrap();
            };
            for (from, to) in [
                (
                    "linux-broadcast-x2apic-2-host",
                    "ipi-broadcast-x2apic-2-host",
                ),
                (
                    "linux-broadcast-xapic-2-inhibit",
                    "ipi-broadcast-xapic-2-inhibit",
                ),
            ] {
                copy(
                    &format!("linux/{from}.json"),
                    &d.s000.join(format!("runs/linux-seed000-{to}.json")),
                );
            }
            for f in ["ipiv-smoke-on.json", "ipiv-smoke-off.json"] {
                copy(&format!("seeds/002/runs/{f}"), &d.s002.join("runs").join(f));
            }
            let sweep: Value = serde_json::from_str(
                &fs::read_to_string(format!("{FIXTURES}/lab-quick/runs/sweep.json")).unwrap(),
            )
            .unwrap();
            // The quick pass ran avic=0: its --apicv host run is made one
            // with AVIC active, as the AVIC pass's tests make theirs.
            let (mut host, inhibit) = (sweep["runs"][0].clone(), sweep["runs"][3].clone());
            host["apicv"]["effective"] = "active".into();
            let mut topo = sweep.clone();
            topo["runs"] = json!([]);
            for (run, place, pin) in [
                (&host, "close", [0, 1]),
                (&host, "spread", [0, 2]),
                (&inhibit, "close", [0, 1]),
                (&inhibit, "spread", [0, 2]),
            ] {
                let mut r = run.clone();
                r["placement"] = place.into();
                r["mode"]["pin"] = json!(pin);
                topo["runs"].as_array_mut().unwrap().push(r);
            }
            t.write(&d.s003.join("topology/runs/apicv-topology.json"), &topo);
            t
        }

        pub fn dirs(&self) -> Dirs {
            Dirs::under(self.0.path())
        }

        pub fn write(&self, path: &Path, v: &Value) {
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, v.to_string()).unwrap();
        }

        /// Edits the JSON of a results file.
        pub fn edit(&self, path: &Path, f: impl FnOnce(&mut Value)) {
            let mut v: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
            f(&mut v);
            self.write(path, &v);
        }

        pub fn document(&self) -> String {
            document(&self.dirs(), self.0.path(), "Made in a test.")
        }
    }

    fn has(doc: &str, line: &str) {
        assert!(doc.lines().any(|l| l == line), "no line\n{line}\nin\n{doc}");
    }

    /// Each seed's table from real lab results: the figures are the
    /// runs' own (cycles p50, ICR-write exits and exits by reason per
    /// operation), the cells they lack say `not run` and why.
    #[test]
    fn a_fixture_of_results_makes_the_reports_tables() {
        let doc = Tree::new().document();
        for line in [
            "| avic0_xapic | 12313907508.50 ns | 3 190 180 | 1.2 | npf 3.26, msr 1.06, interrupt 0.92, cpuid 0.66, vintr 0.62, hlt 0.16, io 0.02 | 39 s |",
            "| avic1_xapic | 19106424733.30 ns | not run: no runs/linux-seed000-ipi-broadcast-xapic-2-host.json in target/lab-seeds/000 | – | – | – |",
            "| avic1_x2apic | not in the report | 12 600 | 0.04 | cpuid 0.66, msr 0.56, interrupt 0.54, hlt 0.18, io 0.02 | 36 s |",
            "| avic0_x2apic | 74507 | not run: no runs/linux-seed000-ebizzy-x2apic-2-inhibit.json in target/lab-seeds/000 | – | – | – |",
            "| report: `vmexit` `ipi`, cycles | 6059 | 4713.1 | 4337.85 | 3644.8 |",
            "| lab: ipivmm's unicast ping-pong, cycles per IPI p50 | not run: no runs/ipiv-smoke-off-xapic.json in target/lab-seeds/002 | not run: no runs/ipiv-smoke-on-xapic.json in target/lab-seeds/002 | 1 477 | 106 |",
            "| its ICR-write exits per IPI | – | – | 1 | 0 |",
            "| its sender's exits per IPI by reason | – | – | MSR_WRITE 1, IO_INSTRUCTION 0.2 | EXTERNAL_INTERRUPT 0.2, IO_INSTRUCTION 0.2 |",
            "| lab: `vmexit.flat ipi` under ipivmm, cycles | not run: no kvm-unit-tests given (`--kut DIR`, a built tree; CI cannot fetch it) | not run: no kvm-unit-tests given (`--kut DIR`, a built tree; CI cannot fetch it) | not run: no kvm-unit-tests given (`--kut DIR`, a built tree; CI cannot fetch it) | not run: no kvm-unit-tests given (`--kut DIR`, a built tree; CI cannot fetch it) |",
            "| 1 | apicv=1 (AVIC on) | packed | 989 | 16 777 906 | 1 | interrupt 1.9, msr 1, io 0.03 | 0,1 | 1.1 s |",
            "| 4 | apicv=0 (AVIC inhibited) | spread | 1130 | 889 818 | 1 | msr 1, interrupt 0.83, io 0.03 | 0,2 | 1.1 s |",
            "- IPIv removes the VM exit of the sender's ICR write (the premise of the series: \"without causing VM-exits\"), xAPIC and x2APIC: **reproduced**: counts are real KVM behaviour under emulation; ICR-write exits per IPI: x2APIC 0 with IPIv, 1 without (xAPIC not run: judged for the other mode only)",
            "- IPIv cuts the cycles of an IPI by 22.21% in xAPIC mode (6059 to 4713.1): **cannot be judged**: not run: with IPIv: no runs/ipiv-smoke-on-xapic.json in target/lab-seeds/002",
            "- IPIv cuts the cycles of an IPI by 15.98% in x2APIC mode (4337.85 to 3644.8): **cannot be judged**: under emulation: Bochs's cycles are its emulated TSC, which counts instructions, not a CPU's cycles; the emulator measured with/without ×0.07 in the ping-pong's cycles (not evidence)",
            "- The IPI microbenchmark is slower with AVIC than without, xAPIC (19.1 s against 12.3 s, +55%): **cannot be judged**: not run: avic1_xapic: no runs/linux-seed000-ipi-broadcast-xapic-2-host.json in target/lab-seeds/000",
        ] {
            has(&doc, line);
        }
        has(&doc, "Ran: not run by `cargo xtask lab seeds` here (no seeds-run.txt in `target/lab-seeds/002`; `cargo xtask lab seeds --seed 002` runs its part): the results in `target/lab-seeds/002` came from another command, recorded 2026-12-06 22:52 UTC.");
        // A part `seeds` ran says what, when, at which commit, and its boot.
        let t = Tree::new();
        let d = t.dirs();
        fs::write(d.s003.join(PROVENANCE), "commit 0123456789abcdef\nstarted 2026-12-07T01:14:08Z\ncommand cargo xtask lab avic --parts topology\nexit 0\ntook_s 239\n").unwrap();
        fs::write(
            d.s003.join("topology/timings.txt"),
            "build 205\nboot-avic-topology 33\ntotal 239\n",
        )
        .unwrap();
        has(&t.document(), "Ran: `cargo xtask lab avic --parts topology`, commit `0123456789ab`, started 2026-12-07T01:14:08Z, exit 0, 239 s (of which boot-avic-topology 33 s); results in `target/lab-seeds/003/topology`.");
        // No claim is judged from timings, and every seed says what ran.
        assert!(!doc.contains("**reproduced**: under emulation"), "{doc}");
        assert_eq!(
            doc.matches("Ran: not run by `cargo xtask lab seeds` here")
                .count(),
            3
        );
        assert!(!doc.contains(&self::Tree::new().0.path().display().to_string()));
    }

    /// A cell without its run, or with a run that is not the cell's (AVIC
    /// in the other state, IPIv off where it should be on, a run that
    /// failed) is `not run` with the reason, never a figure.
    #[test]
    fn a_missing_cell_is_not_run_with_its_reason_never_filled_in() {
        let t = Tree::new();
        let d = t.dirs();
        let runs = d.s000.join("runs");
        fs::remove_file(runs.join("linux-seed000-ipi-broadcast-x2apic-2-host.json")).unwrap();
        // The avic0 run given as the avic1 one.
        fs::copy(
            runs.join("linux-seed000-ipi-broadcast-xapic-2-inhibit.json"),
            runs.join("linux-seed000-ipi-broadcast-xapic-2-host.json"),
        )
        .unwrap();
        t.edit(
            &runs.join("linux-seed000-ipi-broadcast-xapic-2-inhibit.json"),
            |v| {
                v["runs"][0]["status"] = json!({"state": "failed", "reason": "vcpu0: guest panic"});
            },
        );
        t.edit(&d.s002.join("runs/ipiv-smoke-off.json"), |v| {
            v["runs"][0]["host_settings"]["params"]["kvm_intel"]["enable_ipiv"] = "Y".into();
        });
        let doc = t.document();
        for line in [
            "| avic0_xapic | 12313907508.50 ns | not run: the linux:ipi-broadcast run ended failed (runs/linux-seed000-ipi-broadcast-xapic-2-inhibit.json) | – | – | – |",
            "| avic1_xapic | 19106424733.30 ns | not run: APICv/AVIC was inhibited in the run (asked: inhibit), not active | – | – | – |",
            "| avic1_x2apic | not in the report | not run: no runs/linux-seed000-ipi-broadcast-x2apic-2-host.json in target/lab-seeds/000 | – | – | – |",
            "| lab: ipivmm's unicast ping-pong, cycles per IPI p50 | not run: no runs/ipiv-smoke-off-xapic.json in target/lab-seeds/002 | not run: no runs/ipiv-smoke-on-xapic.json in target/lab-seeds/002 | not run: the run had kvm_intel.enable_ipiv=Y (the cell is N) | 106 |",
            "| its ICR-write exits per IPI | – | – | – | 0 |",
            "- IPIv removes the VM exit of the sender's ICR write (the premise of the series: \"without causing VM-exits\"), xAPIC and x2APIC: **cannot be judged**: not run: no ping-pong with and without IPIv",
        ] {
            has(&doc, line);
        }
        // The failed run's p50 (3 190 180) is nowhere.
        assert!(!doc.contains("3 190 180"), "{doc}");
        // Nothing at all: every cell of every table says why.
        let empty = tempfile::tempdir().unwrap();
        let doc = document(&Dirs::under(empty.path()), empty.path(), "");
        let rows = |doc: &str| {
            doc.lines()
                .filter(|l| l.starts_with("| ") && l.contains("not run: no runs/"))
                .count()
        };
        // Seed 000's 8 cells, 002's ping-pong and kvm-unit-tests rows, 003's 4 cases.
        assert_eq!(rows(&doc), 8 + 2 + 4, "{doc}");
        assert!(!doc.contains("**reproduced**") && !doc.contains("**not reproduced**"));
    }

    /// kvm-unit-tests' vmexit ipi as ipivmm boots it: the cycles its own
    /// `ipi N` line printed, vCPU 0's ICR-write exits (a one-phase run: the whole run);
    /// a run that ended before the line is not run, with what it counted.
    /// The fixture is a real run on this machine's kvm_pvm (2026-12-07,
    /// `ipivmm run --kernel x86/vmexit.flat --append ipi --vcpus 2 --apic
    /// x2apic`), given the Intel lab's `kvm_intel.enable_ipiv` to be a cell.
    /// With per-test phases (the Intel lab's Bochs, 2026-12-07, the seeds'
    /// part 002): the cells read the test's own phase `ipi`, not the boot
    /// before it (3 and 2 ICR-write exits there), so IPIv's removed exit
    /// shows in kvm-unit-tests' own benchmark: 1 048 514 against 0.
    #[test]
    fn a_kut_run_with_test_phases_reads_the_tests_phase() {
        let t = Tree::new();
        let d = t.dirs();
        for (from, to) in [
            ("kut-ipi-bochs-off-x2apic.json", "kut-ipi-off-x2apic.json"),
            ("kut-ipi-bochs-on-x2apic.json", "kut-ipi-on-x2apic.json"),
        ] {
            fs::copy(
                format!("{FIXTURES}/seeds/{from}"),
                d.s002.join("runs").join(to),
            )
            .unwrap();
        }
        let doc = t.document();
        has(
            &doc,
            "| its ICR-write exits (vCPU 0, the test's phase `ipi`) | – | – | 1048514 | 0 |",
        );
    }

    #[test]
    fn a_kut_run_gives_the_tests_own_cycles() {
        let t = Tree::new();
        let d = t.dirs();
        let kut = |ipiv: &str, file: &str| {
            let to = d.s002.join("runs").join(file);
            fs::copy(format!("{FIXTURES}/seeds/kut-ipi-kvm-pvm.json"), &to).unwrap();
            t.edit(&to, |v| {
                v["runs"][0]["host_settings"]["params"]["kvm_intel"] =
                    json!({ "enable_ipiv": ipiv });
            });
            to
        };
        kut("Y", "kut-ipi-on-x2apic.json");
        let off = kut("N", "kut-ipi-off-x2apic.json");
        let doc = t.document();
        has(&doc, "| lab: `vmexit.flat ipi` under ipivmm, cycles | not run: no runs/kut-ipi-off-xapic.json in target/lab-seeds/002 | not run: no runs/kut-ipi-on-xapic.json in target/lab-seeds/002 | 580 601 | 580 601 |");
        has(
            &doc,
            "| its ICR-write exits (vCPU 0, the test's phase `ipi`) | – | – | 4037 | 4037 |",
        );
        // The x2APIC cycles claim reads the test's own figures when both ran.
        assert!(
            doc.contains("with/without ×1.00 in vmexit ipi's cycles"),
            "{doc}"
        );
        t.edit(&off, |v| {
            v["runs"][0]["status"] =
                json!({"state": "timed_out", "after_s": 120, "stuck": "vcpu0"});
            v["runs"][0]["serial_tail"] = "enabling apic\r\n".into();
        });
        has(&t.document(), "| lab: `vmexit.flat ipi` under ipivmm, cycles | not run: no runs/kut-ipi-off-xapic.json in target/lab-seeds/002 | not run: no runs/kut-ipi-on-xapic.json in target/lab-seeds/002 | not run: ended timed_out after 2 s without the test's `ipi N` line (4037 ICR-write exits on vCPU 0 by then) | 580 601 |");
    }

    /// The one claim counts decide: IPIv's exit, from the ping-pong's
    /// ICR-write exits with and without it.
    #[test]
    fn the_ipiv_claim_is_judged_by_the_counts() {
        let t = Tree::new();
        let on = t.dirs().s002.join("runs/ipiv-smoke-on.json");
        t.edit(&on, |v| {
            for p in v["runs"][0]["vcpus"][0]["phases"].as_array_mut().unwrap() {
                if p["name"] == "measure" {
                    p["icr_write_exits"]["exits"] = 5.into();
                }
            }
        });
        let c = seeds_002::read(&t.dirs().s002).claims().remove(0);
        assert_eq!(
            c.verdict,
            super::super::seeds_cells::Verdict::NotReproduced,
            "{}",
            c.line()
        );
        assert!(c.why.contains("x2APIC 1 with IPIv, 1 without"), "{}", c.why);
    }

    #[test]
    fn each_seed_is_its_lab_parts_own_command() {
        #[derive(Parser)]
        struct Lab {
            #[command(flatten)]
            lab: Args,
        }
        let d = Dirs::under(Path::new("/c"));
        let parse = |w: Vec<String>| {
            Lab::try_parse_from(std::iter::once("lab".to_string()).chain(w))
                .unwrap()
                .lab
        };
        let none = (Path::new(""), None);
        let a = parse(command(&d, Seed::S003, none, &[]));
        assert_eq!(a.action, super::super::cli::Action::Avic);
        assert_eq!(
            (a.parts.as_deref(), a.sockets, a.smp),
            (
                Some(&[super::super::report::Part::Topology][..]),
                Some(2),
                Some(4)
            )
        );
        assert_eq!(
            a.results.as_deref(),
            Some(Path::new("/c/target/lab-seeds/003"))
        );
        let a = parse(command(&d, Seed::S000, none, &["lab.vcpus=2,4".into()]));
        assert_eq!(a.action, super::super::cli::Action::Linux);
        assert_eq!(a.kernel_args, ["lab.probe=seeds", "lab.vcpus=2,4"]);
        let a = parse(command(&d, Seed::S003, none, &["lab.iterations=5".into()]));
        assert_eq!(a.kernel_args, ["lab.iterations=5"]);
        let kut = (Path::new("/s.cpio"), Some(Path::new("/k.cpio")));
        let a = parse(command(&d, Seed::S002, kut, &[]));
        assert_eq!(
            (a.emulator, a.cpio.len(), a.no_test_binaries),
            (super::super::cli::EmulatorKind::Bochs, 2, true)
        );
        assert_eq!(a.kernel_args, ["lab.smoke_apics=xapic,x2apic"]);
        // `seeds` itself.
        let a = parse(
            [
                "seeds",
                "--seed",
                "003,000",
                "--no-boot",
                "--kut",
                "/tmp/kut",
            ]
            .map(String::from)
            .to_vec(),
        );
        assert_eq!(a.seeds, Some(vec![Seed::S003, Seed::S000]));
        assert!(a.no_boot && a.kut.is_some());
    }
}
