//! The AVIC pass's checks, one boot ([`Part`]) at a time: the module
//! parameters it loaded with, the AVIC state `ipivmm host` read, the
//! x2AVIC agreement, the selftests, and the plans of its runs.
use super::report::{host_fact, Part, Report};
use super::tap;
use std::fs;
use std::path::Path;

/// The plans each part runs in the guest (probe-avic.sh's `check NAME`
/// runs plans/lab-NAME.toml, its TAP NAME.tap): part, name, plan.
pub const PLANS: &[(Part, &str, &str)] = &[
    (Part::Matrix, "avic-on", "lab-avic-on.toml"),
    (Part::Matrix, "avic-off", "lab-avic-off.toml"),
    (Part::Preset, "avic-preset", "lab-avic-preset.toml"),
    (Part::HaltPolling, "halt-polling", "lab-halt-polling.toml"),
    (Part::Topology, "apicv-topology", "lab-apicv-topology.toml"),
];

/// The AVIC checks of one part's results tree `dir`, after the lab's own
/// (steps, backend): kvm_amd reads back avic=Y without force_avic, ipivmm
/// calls AVIC usable, and what the part ran: the selftests passed with AVIC
/// on and off; the plans of the runs with AVIC on and off
/// (plans/lab-avic-{on,off,preset}.toml, [`PLANS`]) held, read back from
/// their TAP and JUnit as the quick pass's are.
pub fn verdict(r: &mut Report, part: Part, dir: &Path) {
    let params = fs::read_to_string(dir.join("module-params.txt")).unwrap_or_default();
    let has = |l: &str| params.lines().any(|p| p == l);
    if has("kvm_amd.avic=Y") && has("kvm_amd.force_avic=N") {
        r.ok("kvm_amd loaded with avic=1 reads avic=Y (force_avic=N)");
    } else {
        let seen = params
            .lines()
            .filter(|l| l.contains("avic") || l.contains("npt"))
            .map(str::to_string)
            .collect();
        r.bad("kvm_amd avic=Y without force_avic", seen);
    }
    let state = verdict_state(dir, "avic");
    if state.as_deref() == Some("available") {
        r.ok("ipivmm host: AVIC usable");
    } else {
        let text = fs::read_to_string(dir.join("host-avic.txt")).unwrap_or_default();
        let mut why: Vec<String> = text
            .lines()
            .filter(|l| l.contains("AVIC"))
            .map(str::to_string)
            .collect();
        why.insert(
            0,
            format!("host-avic.json: AVIC {}", state.as_deref().unwrap_or("?")),
        );
        r.bad("ipivmm host: AVIC usable", why);
    }
    x2avic_agrees(r, dir);
    match part {
        Part::Selftests => selftests(r, dir),
        Part::Topology => {
            sockets(r, dir);
            let plans = PLANS.iter().filter(|(p, _, _)| *p == part);
            tap::plans(r, dir, plans.map(|(_, s, p)| (*s, *p)), true, |_| true);
        }
        Part::Matrix | Part::Preset | Part::HaltPolling => {
            let plans = PLANS.iter().filter(|(p, _, _)| *p == part);
            tap::plans(r, dir, plans.map(|(_, s, p)| (*s, *p)), true, |_| true);
        }
    }
}

/// The guest saw two sockets or more, each its own NUMA node
/// (probe-avic.sh's topology.txt: each CPU's `physical_package_id`, then
/// each node's CPU list), as `--sockets 2` makes QEMU's machine.
fn sockets(r: &mut Report, dir: &Path) {
    let text = fs::read_to_string(dir.join("topology.txt")).unwrap_or_default();
    // "package cpuN ID": the IDs; "node nodeN CPUS": the nodes.
    let field = |prefix: &str, word: usize| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|l| l.split_whitespace().nth(word).map(str::to_string))
            .collect()
    };
    let (packages, nodes) = (field("package ", 1), field("node ", 0));
    let name = format!(
        "two sockets or more, each a NUMA node ({} sockets, {} nodes)",
        packages.len(),
        nodes.len()
    );
    if packages.len() >= 2 && nodes.len() == packages.len() {
        r.ok(name);
    } else {
        let mut why: Vec<String> = text.lines().map(str::to_string).collect();
        why.push("boot it with --sockets 2 --smp 4".into());
        r.bad(name, why);
    }
}

/// `ipivmm host --json`'s verdict `name` (`avic`, `x2avic`): its state.
fn verdict_state(dir: &Path, name: &str) -> Option<String> {
    let state = host_fact(dir, "host-avic.json", &format!("/verdicts/{name}/state"))?;
    Some(state.as_str()?.to_string())
}

/// x2AVIC as the guest saw it, on (QEMU's `-cpu max`) or off (`--cpu
/// max,-x2avic`): the CPU flag `x2avic` (host-avic.json), kvm_amd's "x2AVIC
/// enabled" at load (dmesg) and `ipivmm host`'s verdict agree, which says
/// whether the part's x2APIC runs went through the backing page or ran
/// hybrid AVIC.
fn x2avic_agrees(r: &mut Report, dir: &Path) {
    let name = "x2AVIC: the CPU flag, kvm_amd (dmesg) and ipivmm host agree";
    let flag = host_fact(dir, "host-avic.json", "/virt_flags/x2avic").and_then(|f| f.as_bool());
    // The probe's own grep of dmesg at its start (extra.log) and the
    // kernel's log saved later: either keeps kvm_amd's line from the load.
    let logs: Vec<String> = ["extra.log", "dmesg-avic-on.txt", "dmesg.txt"]
        .iter()
        .filter_map(|f| fs::read_to_string(dir.join(f)).ok())
        .collect();
    let dmesg = (!logs.is_empty()).then(|| logs.concat());
    let verdict = verdict_state(dir, "x2avic");
    let (Some(flag), Some(dmesg), Some(verdict)) = (flag, dmesg.as_deref(), verdict.as_deref())
    else {
        r.bad(
            name,
            vec![format!(
                "missing: {}",
                [
                    (flag.is_none(), "host-avic.json virt_flags.x2avic"),
                    (dmesg.is_none(), "extra.log, dmesg-avic-on.txt or dmesg.txt"),
                    (verdict.is_none(), "host-avic.json verdicts.x2avic"),
                ]
                .iter()
                .filter(|(m, _)| *m)
                .map(|(_, w)| *w)
                .collect::<Vec<_>>()
                .join(", ")
            )],
        );
        return;
    };
    // "SVM: x2AVIC enabled" (6.1), "kvm_amd: x2AVIC enabled" (6.12).
    let enabled = dmesg
        .lines()
        .any(|l| l.ends_with("SVM: x2AVIC enabled") || l.ends_with("kvm_amd: x2AVIC enabled"));
    let available = verdict == "available";
    if flag == enabled && flag == available {
        r.ok(name);
        r.info(if flag {
            "  x2AVIC on: x2APIC guests' APIC through the backing page"
        } else {
            "  x2AVIC off: x2APIC guests run hybrid AVIC (x2APIC MSRs intercepted)"
        });
    } else {
        r.bad(
            name,
            vec![format!(
                "CPU flag x2avic {flag}, dmesg \"x2AVIC enabled\" {enabled}, ipivmm host x2AVIC {verdict}"
            )],
        );
    }
}

/// selftests.tsv (name, `on`/`off`, exit status): every selftest ran with
/// AVIC on and with it off, some passed, and each ended the same way both
/// times: one that fails only with AVIC on fails through AVIC (one that
/// fails only with it off, through KVM's other path). One that fails both
/// times (TCG lacks what it needs, e.g. NRIPS; 4 is KSFT_SKIP) is not
/// through AVIC: the verdict lists it as a skip.
fn selftests(r: &mut Report, dir: &Path) {
    let tsv = fs::read_to_string(dir.join("selftests.tsv")).unwrap_or_default();
    // name -> (rc with AVIC on, rc with AVIC off)
    let mut by: std::collections::BTreeMap<&str, (Option<&str>, Option<&str>)> = Default::default();
    for f in tsv.lines().map(|l| l.split('\t').collect::<Vec<_>>()) {
        if let [name, avic, rc, ..] = f[..] {
            let e = by.entry(name).or_default();
            match avic {
                "on" => e.0 = Some(rc),
                _ => e.1 = Some(rc),
            }
        }
    }
    let passed = |on: bool| {
        by.values()
            .filter(|(a, b)| if on { *a } else { *b } == Some("0"))
            .count()
    };
    let mut missing: Vec<String> = by
        .iter()
        .filter_map(|(n, rc)| match rc {
            (Some(_), Some(_)) => None,
            (None, _) => Some(format!("{n}: not run with AVIC on")),
            (_, None) => Some(format!("{n}: not run with AVIC off")),
        })
        .collect();
    if passed(true) == 0 {
        missing.push("none passed with AVIC on".into());
    }
    r.check(
        &format!(
            "KVM selftests ran with AVIC on and off ({} tests)",
            by.len()
        ),
        missing,
    );
    let (mut differ, mut alike) = (Vec::new(), Vec::new());
    for (n, rc) in &by {
        let (Some(on), Some(off)) = *rc else { continue };
        match (on == "0", off == "0") {
            (true, true) => {}
            (false, false) => {
                let skip = if on == "4" { " (4: KSFT_SKIP)" } else { "" };
                alike.push((
                    format!("selftest {n}"),
                    format!("fails with AVIC on and off alike, rc {on} and {off}{skip}: not through AVIC"),
                ));
            }
            _ => differ.push(format!("{n}: rc {on} with AVIC on, {off} with AVIC off")),
        }
    }
    r.check(
        &format!(
            "KVM selftests: the same outcome with AVIC on and off (passed: {} on, {} off, of {})",
            passed(true),
            passed(false),
            by.len()
        ),
        differ,
    );
    for (name, why) in alike {
        r.skip(name, why);
    }
}
