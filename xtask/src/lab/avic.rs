//! `cargo xtask lab avic`: the AVIC pass of the AMD lab (docs/lab.md,
//! "AVIC"). kvm_amd loads with `avic=1` (no force_avic) on QEMU TCG's
//! emulated AVIC: Debian bookworm's QEMU 7.2 with the patches of
//! scripts/lab/qemu-7.2.series, built once by scripts/lab/build-qemu.sh
//! (LAB_QEMU names a binary instead). One boot per [`Part`], each running
//! the guest steps `host` and `extra`, with scripts/lab/probe-avic.sh as
//! `extra` (packed with the KVM selftests by scripts/lab/build-selftests.sh);
//! each part's results tree is checked on its own
//! ([`super::avic_verdict::verdict`]).
use super::cli::Args;
use super::host;
use super::pass::{self, Image, LabOutcome, Settings};
use super::report::{Expect, Part};
use super::{initramfs, tables};
use anyhow::Result;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Iterations per run unless `--iterations` says otherwise.
pub const ITERATIONS: u32 = 20;
/// Each boot's limit unless `--timeout` says otherwise, s.
pub const TIMEOUT_S: u64 = 3600;

/// The tests of tools/testing/selftests/kvm/x86_64 (Linux 6.1) that touch
/// the local APIC: IPIs and ICR writes of every kind (xapic_state_test
/// sends every delivery mode to absent vCPUs: AVIC's ID codes 0, 2 and 4),
/// APIC state save and restore, SMIs and NMIs sent through the ICR, the
/// nested paths (AVIC inhibited), the CMCI LVT (an unaccelerated
/// register), guest debug (an inhibit); and two without the APIC as controls.
const SELFTESTS: &[&str] = &[
    "x86_64/xapic_ipi_test",
    "x86_64/xapic_state_test",
    "x86_64/set_boot_cpu_id",
    "x86_64/smm_test",
    "x86_64/state_test",
    "x86_64/kvm_pv_test",
    "x86_64/debug_regs",
    "x86_64/svm_int_ctl_test",
    "x86_64/svm_nested_soft_inject_test",
    "x86_64/ucna_injection_test",
    "x86_64/sync_regs_test",
    "x86_64/userspace_io_test",
];

/// The pass's work directory.
pub fn work_dir(root: &Path) -> PathBuf {
    root.join("target/lab-avic")
}

/// probe-avic.sh as /lab/extra.sh in an archive to append to the
/// initramfs, with the KVM selftests when a part runs them: building those
/// needs Linux's source (scripts/lab/build-selftests.sh), which the other
/// parts (CI's `preset`) do without.
fn probe_archive(s: &Settings, image: &Image, work: &Path, parts: &[Part]) -> Result<PathBuf> {
    if parts.contains(&Part::Selftests) {
        return selftests_archive(s, work);
    }
    let st = work.join("probe");
    let _ = fs::remove_dir_all(&st);
    fs::create_dir_all(st.join("lab"))?;
    let extra = st.join("lab/extra.sh");
    fs::copy(s.root.join("scripts/lab/probe-avic.sh"), &extra)?;
    fs::set_permissions(&extra, fs::Permissions::from_mode(0o755))?;
    let out = work.join("probe.cpio");
    initramfs::pack(&st, &image.busybox, &out)?;
    fs::remove_dir_all(&st)?;
    Ok(out)
}

/// The selftests and probe-avic.sh as an archive to append to the initramfs.
fn selftests_archive(s: &Settings, work: &Path) -> Result<PathBuf> {
    let script = "scripts/lab/build-selftests.sh";
    host::built(
        script,
        Command::new(s.root.join(script))
            .arg(s.root.join("scripts/lab/probe-avic.sh"))
            .arg(work.join("probe.cpio"))
            .env("IPIVMM_LAB_CACHE", &s.cache)
            .env("SELFTESTS", SELFTESTS.join(" ")),
    )
}

/// The pass: QEMU and the guest's image built once, then a boot per part,
/// each part's results checked; `--update-docs` rewrites docs/lab.md's
/// AVIC table from the matrix part.
pub fn pass(s: &Settings, args: &Args) -> Result<LabOutcome> {
    let parts = args.parts.clone().unwrap_or_else(|| Part::ALL.to_vec());
    let boots = parts.iter().map(|part| {
        let mut extra = s.kernel_args.clone();
        extra.push("lab.kvm=avic=1".into());
        extra.push(format!("lab.probe={}", part.name()));
        (Expect::Avic(*part), extra, part.name().to_string())
    });
    let (mut verdict, results) = pass::probe_pass(
        s,
        args,
        (work_dir(&s.root), true, (ITERATIONS, TIMEOUT_S)),
        ("probe", |image, dir| probe_archive(s, image, dir, &parts)),
        boots.collect(),
    )?;
    if args.update_docs {
        if let Err(e) = tables::update_avic_doc(&s.root, &results.join(Part::Matrix.name())) {
            eprintln!("lab: error: {e:#}");
            verdict = LabOutcome::Failed;
        }
    }
    Ok(verdict)
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::avic_verdict::PLANS;
    use super::super::verify::tests::Tree;
    use super::*;
    /// The phase field (and counter source) of exits by reason.
    const EXIT_REASONS: &str = ipivmm_analysis::results::source::Source::ExitReasons.key();
    use serde_json::{json, Value};

    const SWEEP: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/lab-quick/runs/sweep.json"
    );

    /// The quick pass fixture's sweep: real runs of kvm_amd with avic=N
    /// under QEMU TCG (ping-pong kernel/x2apic/icr `--apicv host` and
    /// `inhibit`, a PV ping-pong, a user-irqchip broadcast), each counted
    /// by the exit sampler and the tracepoints. It is what the AVIC pass's
    /// avic=0 sweeps record.
    pub fn avic_off() -> Value {
        serde_json::from_str(&std::fs::read_to_string(SWEEP).unwrap()).unwrap()
    }

    /// runs[run].vcpus[vcpu]'s measure phase.
    pub fn measure(v: &mut Value, run: usize, vcpu: usize) -> &mut Value {
        v["runs"][run]["vcpus"][vcpu]["phases"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["name"] == "measure")
            .unwrap()
    }

    /// A run as kvm_amd records it with AVIC active: the plan says so and
    /// every phase of every vCPU ran with no inhibit.
    fn active(r: &mut Value) {
        r["apicv"]["effective"] = "active".into();
        r["apicv"]["detail"] = "AVIC active".into();
        for v in r["vcpus"].as_array_mut().unwrap() {
            for p in v["phases"].as_array_mut().unwrap() {
                p["apicv"] = json!({"active": true, "inhibits": []});
            }
        }
    }

    /// An exit reason of a phase, `n` exits.
    fn set_reason(p: &mut Value, name: &str, n: u64) {
        let by = p[EXIT_REASONS]["by_reason"].as_object_mut().unwrap();
        if n == 0 {
            by.remove(name);
        } else {
            by.insert(
                name.into(),
                json!({"count": n, "timed": n, "host_ns": 1000 * n}),
            );
        }
    }

    /// The AVIC matrix's `--apicv host` and `inhibit` runs as kvm_amd with
    /// avic=1 records them on QEMU's emulated AVIC, made from the real
    /// avic=N runs of [`avic_off`] (30 ICR writes each) with the figures
    /// docs/kernel-paths.md gives and docs/lab.md's AVIC boots showed:
    /// 0. xAPIC ping-pong to a spinning target: every ICR write and EOI
    ///    accelerated, no exit (A7), a doorbell each;
    /// 1. the same to a halted target: every ICR write an
    ///    AVIC_INCOMPLETE_IPI exit after delivery, no ICR emulation (A8);
    /// 2. x2APIC (hybrid AVIC, A5): the ICR WRMSR exits, every IPI through
    ///    `kvm_apicv_accept_irq` (`--context-events`);
    /// 3. x2APIC `--apicv inhibit`: inhibited by the PIT's reinjection;
    /// 4. x2APIC ping-pong to a spinning target on a host with x2AVIC: every
    ///    ICR WRMSR accelerated, no `msr` exit (A7).
    pub fn avic_on() -> Value {
        let mut v = avic_off();
        let (host, inhibit) = (v["runs"][0].clone(), v["runs"][3].clone());
        v["runs"] = json!([host.clone(), host.clone(), host.clone(), inhibit, host]);
        v["skipped"] = json!([]);
        for run in [0, 1, 2, 4] {
            active(&mut v["runs"][run]);
        }
        // Runs 0 and 1 (xAPIC) and 4 (x2AVIC): no ICR write leaves the
        // guest; vCPU 0 of runs 0 and 4 has its 30 writes accelerated.
        for run in [0, 1, 4] {
            for vcpu in 0..2 {
                let p = measure(&mut v, run, vcpu);
                set_reason(p, "msr", 0);
                p["tracepoints"]["kvm_msr:icr_write"] = 0.into();
                p["tracepoints"]["kvm_apic:icr_write"] = 0.into();
                p["tracepoints"]["kvm_apic_ipi"] = 0.into();
            }
        }
        for run in [0, 4] {
            let a7 = measure(&mut v, run, 0);
            a7["icr_write_exits"]["exits"] = 0.into();
            a7["icr_write_exits"]["accelerated"] = 30.into();
        }
        for run in 0..2 {
            v["runs"][run]["mode"]["apic"] = "xapic".into();
        }
        measure(&mut v, 0, 0)["tracepoints"]["kvm_avic_doorbell"] = 30.into();
        v["runs"][1]["mode"]["target"] = "halt".into();
        measure(&mut v, 1, 1)["kvm_stats"]["halt_wakeup"] = 30.into();
        let a8 = measure(&mut v, 1, 0);
        set_reason(a8, "avic_incomplete_ipi", 30);
        a8["tracepoints"]["kvm_avic_incomplete_ipi"] = 30.into();
        measure(&mut v, 2, 0)["tracepoints"]["kvm_apicv_accept_irq"] = 30.into();
        let r = &mut v["runs"][3];
        r["apicv"]["effective"] = "inhibited".into();
        for vcpu in r["vcpus"].as_array_mut().unwrap() {
            for p in vcpu["phases"].as_array_mut().unwrap() {
                p["apicv"] = json!({"active": false, "inhibits": ["PIT_REINJ"]});
            }
        }
        v["runs"][4]["host_settings"]["verdicts"]["x2avic"] = json!({"state": "available"});
        // Made, not recorded: the figures a file would record are derived
        // when it is written (`recorded.*` judges them as it reads back).
        for r in v["runs"].as_array_mut().unwrap() {
            r.as_object_mut().unwrap().remove("metrics");
        }
        v
    }

    /// A results tree of one AVIC part, from the quick pass fixture (a real
    /// kvm_amd guest under QEMU TCG: its host facts and module parameters)
    /// as the AVIC pass leaves one: steps host and extra, kvm_amd loaded
    /// with avic=1, `ipivmm host` calling AVIC available, and what the part ran.
    fn tree(name: &str, part: Part) -> Tree {
        let t = Tree::new(&format!("avic-{name}"));
        for d in ["runs", "tests"] {
            fs::remove_dir_all(t.0.join(d)).unwrap();
        }
        fs::remove_file(t.0.join("test-binaries.txt")).unwrap();
        fs::create_dir(t.0.join("runs")).unwrap();
        let mut host: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(t.0.join("host.json")).unwrap()).unwrap();
        host["host"]["verdicts"]["avic"] = serde_json::json!({"state": "available"});
        t.edit("host-avic.json", |_| host.to_string())
            .edit("module-params.txt", |p| {
                p.replace("kvm_amd.avic=N", "kvm_amd.avic=Y")
            })
            .edit("steps.tsv", |_| "host\t0\t2\nextra\t0\t880\n".into())
            .edit("dmesg-avic-on.txt", |_| {
                "[    2.101] SVM: AVIC enabled\n".into()
            })
            .edit("pass.txt", |_| format!("{}\n", Expect::Avic(part).name()));
        match part {
            Part::Selftests => {
                let rows: String = ["on", "off"]
                    .iter()
                    .flat_map(|a| {
                        SELFTESTS
                            .iter()
                            .map(move |s| format!("{}\t{a}\t0\n", &s["x86_64/".len()..]))
                    })
                    .collect();
                t.edit("selftests.tsv", |_| rows);
            }
            Part::Matrix => {
                t.edit("runs/avic-on.json", |_| avic_on().to_string())
                    .edit("runs/avic-off.json", |_| avic_off().to_string());
            }
            Part::Preset => {
                t.edit("runs/avic-preset.json", |_| avic_on().to_string());
            }
            Part::HaltPolling => {
                t.edit("runs/halt-polling.json", |_| avic_on().to_string());
            }
            Part::Topology => {
                t.edit("runs/apicv-topology.json", |_| avic_on().to_string());
            }
        }
        let plans: Vec<&str> = PLANS.iter().map(|(_, _, p)| *p).collect();
        t.edit("plans.txt", |_| plans.join("\n") + "\n");
        for (_, name, _) in PLANS.iter().filter(|(p, _, _)| *p == part) {
            held(&t, name, &["operations > 0", "ipis_delivered == ipis_sent"]);
        }
        t
    }

    /// `ipivmm check`'s TAP and JUnit of plan step `name` in `t` (its own
    /// writers'), each expectation held.
    fn held(t: &Tree, name: &str, points: &[&str]) {
        use ipivmm_analysis::expect::{Outcome, Verdict, Verdicts};
        let v = Verdicts(
            points
                .iter()
                .map(|p| Verdict {
                    name: format!("{name}: {p}"),
                    outcome: Outcome::Pass(1.0),
                })
                .collect(),
        );
        t.edit(&format!("{name}.tap"), |_| v.tap(name))
            .edit(&format!("{name}.junit.xml"), |_| v.junit(name).unwrap());
    }

    #[test]
    fn the_parts_are_named_as_the_guest_and_pass_txt_name_them() {
        for p in Part::ALL.iter().chain(Part::ON_REQUEST) {
            let pass = Expect::Avic(*p).name();
            assert_eq!(pass, format!("avic-{}", p.name()));
            assert_eq!(Expect::named(pass), Some(Expect::Avic(*p)));
        }
        assert_eq!(Expect::named("avic-bogus"), None);
        // probe-avic.sh's lab.probe= parts are these.
        let probe = include_str!("../../../scripts/lab/probe-avic.sh");
        let default = probe
            .lines()
            .find_map(|l| l.strip_prefix("PARTS=${PARTS:-"))
            .and_then(|l| l.strip_suffix('}'))
            .expect("probe-avic.sh's default parts");
        let ours: Vec<&str> = Part::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(default, ours.join(","));
    }

    #[test]
    fn a_matrix_part_passes_every_check() {
        let t = tree("matrix", Part::Matrix);
        let r = t.report(Expect::Avic(Part::Matrix));
        let text = r.text();
        assert!(r.passed(), "{text}");
        // Two steps, the backend, params, host, x2AVIC, and each of the two
        // plans' TAP and JUnit.
        assert_eq!(r.counts(), (2 + 1 + 2 + 1 + 2 * 2, 0), "{text}");
        assert!(text.contains("\n  PASS  ipivmm check plans/lab-avic-on.toml: 2 held, 0 failed, 0 skipped\n  PASS  ipivmm check plans/lab-avic-on.toml: its JUnit (avic-on.junit.xml) says the same\n"), "{text}");
        assert!(text.starts_with("lab avic-matrix pass: "), "{text}");
        assert!(text.contains("\n  PASS  kvm_amd loaded with avic=1 reads avic=Y (force_avic=N)\n  PASS  ipivmm host: AVIC usable\n"), "{text}");
    }

    /// x2AVIC on needs all three: the CPU flag, kvm_amd's "x2AVIC enabled"
    /// and ipivmm host's verdict; off, none of them.
    #[test]
    fn x2avic_is_on_or_off_by_every_account() {
        let name = "x2AVIC: the CPU flag, kvm_amd (dmesg) and ipivmm host agree";
        let t = tree("x2avic", Part::Preset);
        let text = t.report(Expect::Avic(Part::Preset)).text();
        assert!(
            text.contains(&format!(
                "  PASS  {name}\n  x2AVIC off: x2APIC guests run hybrid AVIC"
            )),
            "{text}"
        );
        let host = |flag: bool, state: &str| {
            let mut h: serde_json::Value =
                serde_json::from_str(&fs::read_to_string(t.0.join("host-avic.json")).unwrap())
                    .unwrap();
            h["host"]["virt_flags"]["x2avic"] = flag.into();
            h["host"]["verdicts"]["x2avic"] = serde_json::json!({"state": state});
            h.to_string()
        };
        let on = host(true, "available");
        t.edit("host-avic.json", |_| on)
            .edit("dmesg-avic-on.txt", |d| {
                d + "[    2.102] SVM: x2AVIC enabled\n"
            });
        let r = t.report(Expect::Avic(Part::Preset));
        assert!(r.passed(), "{}", r.text());
        assert!(r
            .text()
            .contains("  x2AVIC on: x2APIC guests' APIC through the backing page"));
        // kvm_amd did not enable what the CPU offers.
        t.edit("dmesg-avic-on.txt", |d| {
            d.replace("SVM: x2AVIC enabled", "x")
        });
        assert_eq!(t.failures(Expect::Avic(Part::Preset)), [name]);
        assert!(t.report(Expect::Avic(Part::Preset)).text().contains(
            "        CPU flag x2avic true, dmesg \"x2AVIC enabled\" false, ipivmm host x2AVIC available\n"
        ));
        // No dmesg saved at all.
        fs::remove_file(t.0.join("dmesg-avic-on.txt")).unwrap();
        assert!(t
            .report(Expect::Avic(Part::Preset))
            .text()
            .contains("        missing: extra.log, dmesg-avic-on.txt or dmesg.txt\n"));
    }

    #[test]
    fn what_a_part_lacks_fails_it() {
        let t = tree("lacks", Part::Matrix);
        t.edit("module-params.txt", |p| {
            p.replace("kvm_amd.force_avic=N", "kvm_amd.force_avic=Y")
        });
        let mut host: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(t.0.join("host-avic.json")).unwrap()).unwrap();
        host["host"]["verdicts"]["avic"]["state"] = "unavailable".into();
        t.edit("host-avic.json", |_| host.to_string());
        fs::remove_file(t.0.join("avic-off.tap")).unwrap();
        assert_eq!(
            t.failures(Expect::Avic(Part::Matrix)),
            [
                "kvm_amd avic=Y without force_avic",
                "ipivmm host: AVIC usable",
                "ipivmm check plans/lab-avic-off.toml"
            ]
        );
        assert!(t.report(Expect::Avic(Part::Matrix))
            .text()
            .contains("  FAIL  kvm_amd avic=Y without force_avic\n        kvm_amd.avic=Y\n        kvm_amd.force_avic=Y\n        kvm_amd.npt=Y\n"));

        // An expectation of the plan that failed fails the part, and a
        // skip where the lab measures everything too.
        let t = tree("bad-run", Part::Preset);
        t.edit("avic-preset.tap", |s| {
            s.replacen("ok 2 - ", "not ok 2 - ", 1)
        });
        assert_eq!(
            t.failures(Expect::Avic(Part::Preset)),
            ["ipivmm check plans/lab-avic-preset.toml: 1 held, 1 failed, 0 skipped"]
        );
        let t = tree("skipped", Part::Preset);
        t.edit("avic-preset.tap", |s| {
            s.replacen(
                "ok 2 - avic-preset: ipis_delivered == ipis_sent\n",
                "ok 2 - avic-preset: ipis_delivered == ipis_sent # SKIP vcpu0: 'tracepoints' is unavailable\n",
                1,
            )
        });
        let text = t.report(Expect::Avic(Part::Preset)).text();
        assert!(text.contains("  FAIL  ipivmm check plans/lab-avic-preset.toml: 1 held, 0 failed, 1 skipped\n        ok 2 - avic-preset: ipis_delivered == ipis_sent # SKIP vcpu0: 'tracepoints' is unavailable: not measured in the lab\n"), "{text}");
        // The guest's step extra failed.
        t.edit("steps.tsv", |s| s.replace("extra\t0", "extra\t1"))
            .edit("extra.log", |_| "probe-avic: 1 failures\n".into());
        assert!(t
            .failures(Expect::Avic(Part::Preset))
            .contains(&"step extra: exit 1 (880s)".to_string()));
    }

    /// The halt-polling part is judged by its plan's TAP and JUnit: an
    /// expectation of polling that failed fails the part.
    #[test]
    fn a_halt_polling_part_is_its_plans_verdict() {
        let part = Part::HaltPolling;
        let t = tree("halt-polling", part);
        let r = t.report(Expect::Avic(part));
        assert!(r.passed(), "{}", r.text());
        assert!(r.text().contains(
            "\n  PASS  ipivmm check plans/lab-halt-polling.toml: 2 held, 0 failed, 0 skipped\n"
        ));
        t.edit("halt-polling.tap", |s| {
            s.replacen("ok 2 - ", "not ok 2 - ", 1)
        });
        assert_eq!(
            t.failures(Expect::Avic(part)),
            ["ipivmm check plans/lab-halt-polling.toml: 1 held, 1 failed, 0 skipped"]
        );
        // The plan it names is the one the guest runs.
        assert!(Path::new(super::super::recorded::PLANS)
            .join("lab-halt-polling.toml")
            .is_file());
    }

    /// The topology part needs the guest to have seen two sockets, each a
    /// NUMA node (probe-avic.sh's topology.txt), besides its plan.
    #[test]
    fn a_topology_part_needs_two_sockets() {
        let part = Part::Topology;
        let t = tree("topology", part);
        let two = "package cpu0 0\npackage cpu1 0\npackage cpu2 1\npackage cpu3 1\nnode node0 0-1\nnode node1 2-3\n";
        t.edit("topology.txt", |_| two.into());
        let r = t.report(Expect::Avic(part));
        assert!(r.passed(), "{}", r.text());
        assert!(r
            .text()
            .contains("  PASS  two sockets or more, each a NUMA node (2 sockets, 2 nodes)\n"));
        // Booted without --sockets: one socket, no NUMA node but node0.
        t.edit("topology.txt", |_| {
            "package cpu0 0\npackage cpu1 0\nnode node0 0-1\n".into()
        });
        assert_eq!(
            t.failures(Expect::Avic(part)),
            ["two sockets or more, each a NUMA node (1 sockets, 1 nodes)"]
        );
        assert!(t
            .report(Expect::Avic(part))
            .text()
            .contains("        boot it with --sockets 2 --smp 4\n"));
    }

    #[test]
    fn the_selftests_end_the_same_with_avic_on_and_off() {
        let t = tree("selftests", Part::Selftests);
        let r = t.report(Expect::Avic(Part::Selftests));
        assert!(r.passed(), "{}", r.text());
        assert!(r.text().contains("\n  PASS  KVM selftests ran with AVIC on and off (12 tests)\n  PASS  KVM selftests: the same outcome with AVIC on and off (passed: 12 on, 12 off, of 12)\n"), "{}", r.text());
        // What the AVIC pass's selftests boot gave on QEMU TCG: three fail
        // with AVIC off as well, each listed as a skip.
        t.edit("selftests.tsv", |s| {
            s.replace("debug_regs\ton\t0", "debug_regs\ton\t254")
                .replace("debug_regs\toff\t0", "debug_regs\toff\t254")
                .replace("ucna_injection_test\ton\t0", "ucna_injection_test\ton\t4")
                .replace("ucna_injection_test\toff\t0", "ucna_injection_test\toff\t4")
        });
        let r = t.report(Expect::Avic(Part::Selftests));
        assert!(r.passed(), "{}", r.text());
        assert_eq!(r.skipped(), 2);
        assert!(r.text().contains("\n  PASS  KVM selftests: the same outcome with AVIC on and off (passed: 10 on, 10 off, of 12)\n  SKIP  selftest debug_regs: fails with AVIC on and off alike, rc 254 and 254: not through AVIC\n  SKIP  selftest ucna_injection_test: fails with AVIC on and off alike, rc 4 and 4 (4: KSFT_SKIP): not through AVIC\n"), "{}", r.text());
        // A selftest that fails with AVIC on only fails the part.
        t.edit("selftests.tsv", |s| {
            s.replacen("xapic_state_test\ton\t0", "xapic_state_test\ton\t254", 1)
        });
        assert_eq!(
            t.failures(Expect::Avic(Part::Selftests)),
            ["KVM selftests: the same outcome with AVIC on and off (passed: 9 on, 10 off, of 12)"]
        );
        assert!(t
            .report(Expect::Avic(Part::Selftests))
            .text()
            .contains("        xapic_state_test: rc 254 with AVIC on, 0 with AVIC off\n"));
        // None ran with AVIC off (the reload failed), or none at all.
        t.edit("selftests.tsv", |s| {
            s.lines()
                .filter(|l| l.contains("\ton\t"))
                .map(|l| format!("{l}\n"))
                .collect()
        });
        assert_eq!(
            t.failures(Expect::Avic(Part::Selftests)),
            ["KVM selftests ran with AVIC on and off (12 tests)"]
        );
        fs::remove_file(t.0.join("selftests.tsv")).unwrap();
        assert_eq!(
            t.failures(Expect::Avic(Part::Selftests)),
            ["KVM selftests ran with AVIC on and off (0 tests)"]
        );
    }
}
