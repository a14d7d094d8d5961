//! The lab's tables in the docs, from results documents: exits per IPI by
//! reason for every mode on the lab's kvm_amd beside this machine's own KVM
//! (docs/lab.md), the same with the emulated AVIC on and off (the AVIC
//! pass, docs/lab.md), and the Intel lab's APICv matrix under
//! enable_apicv=Y and =N (docs/lab-intel.md). Markdown, rewritten between
//! the doc's markers.
use anyhow::{bail, Context, Result};
use ipivmm_analysis::mode::apicv::ApicvState;
use ipivmm_analysis::mode::{ApicMode, ApicvRequest, Irqchip, Workload};
use ipivmm_analysis::results::{Document, PhaseResult, RunReport};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// A ratio as the tables show it: two places at most, no trailing zeros.
pub fn fmt(v: Option<f64>) -> String {
    match v {
        Some(v) => format!("{}", (v * 100.0).round() / 100.0),
        None => "–".into(),
    }
}

/// `irqchip/apic/ipi` of a run.
fn mode(r: &RunReport) -> String {
    format!(
        "{}/{}/{}",
        r.mode.irqchip.name(),
        r.mode.apic.name(),
        r.mode.ipi.name()
    )
}

/// The phases named `measure` of a vCPU.
pub(super) fn measured(v: &ipivmm_analysis::results::VcpuResult) -> Vec<&PhaseResult> {
    v.phases.iter().filter(|p| p.name == "measure").collect()
}

/// The measured phase of vCPU 0 (the sender) and the run's cells per IPI
/// it sent: its exits (KVM's `exits` stat) and exits by reason, the same of
/// every other vCPU (the receivers) together, its ICR-write exits and its
/// accelerated ICR writes. None without the phase or an IPI sent.
fn per_ipi(r: &RunReport) -> Option<(&PhaseResult, [String; 6])> {
    let (first, rest) = r.vcpus.split_first()?;
    let s = *measured(first).first()?;
    let recv: Vec<&PhaseResult> = rest.iter().flat_map(measured).collect();
    let ipis = s.guest.ipis_sent;
    if ipis == 0 {
        return None;
    }
    let per = |n: Option<u64>| fmt(n.map(|n| n as f64 / ipis as f64));
    let kvm = |ps: &[&PhaseResult]| {
        per(Some(
            ps.iter()
                .map(|p| p.kvm_stats.get("exits").copied().unwrap_or(0))
                .sum(),
        ))
    };
    let icr = s.icr_write_exits.as_ref();
    Some((
        s,
        [
            kvm(&[s]),
            reasons(&[s], ipis),
            kvm(&recv),
            reasons(&recv, ipis),
            per(icr.map(|e| e.exits)),
            per(icr.map(|e| e.accelerated)),
        ],
    ))
}

/// `reason n.nn` per IPI for every exit reason the phases counted, the
/// biggest first ("–" when none).
pub(super) fn reasons(phases: &[&PhaseResult], ipis: u64) -> String {
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    for p in phases {
        for (k, v) in p.exits_by_reason() {
            *sum.entry(k).or_default() += v;
        }
    }
    let mut v: Vec<(String, u64)> = sum.into_iter().filter(|(_, n)| *n > 0).collect();
    if v.is_empty() {
        return "–".into();
    }
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.iter()
        .map(|(k, n)| format!("{k} {}", fmt(Some(*n as f64 / ipis as f64))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a document's host was (its kernel release, CPU model, backend:
/// `kvm_amd`...), `unknown` where it does not say.
fn host(d: &Document, what: fn(&ipivmm::host::HostInfo) -> String) -> String {
    d.host.as_ref().map_or_else(|| "unknown".into(), what)
}

/// docs/lab.md's table: one row per mode and backend of the `--apicv host`
/// runs of `workload` in `docs` (the lab's and this machine's sweeps).
pub fn lab_table(docs: &[&Document], workload: Workload) -> Vec<String> {
    let mut rows: Vec<(String, String, String)> = Vec::new();
    for d in docs {
        let b = host(d, |h| h.backend.to_string());
        for r in d
            .runs
            .iter()
            .filter(|r| r.apicv.requested == ApicvRequest::Host && r.mode.workload == workload)
        {
            let Some((s, [se, sr, re, rr, icr, _])) = per_ipi(r) else {
                continue;
            };
            let row = format!(
                "| {} | {b} | {se} | {sr} | {re} | {rr} | {icr} | {} |",
                mode(r),
                s.latency
                    .as_ref()
                    .map_or_else(|| "–".into(), |l| l.p50.to_string()),
            );
            rows.push((mode(r), b.clone(), row));
        }
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut out = vec![
        "| mode | backend | sender exits/IPI | sender exits/IPI by reason (kvm_exit) | receiver exits/IPI | receiver exits/IPI by reason | ICR-write exits/IPI | p50 cycles |".to_string(),
        "| --- | --- | ---: | --- | ---: | --- | ---: | ---: |".to_string(),
    ];
    out.extend(rows.into_iter().map(|(_, _, r)| r));
    out
}

/// AVIC in a run as the AVIC table says it: `on` (active), `off`
/// (unavailable: avic=0), else the state.
fn avic_state(r: &RunReport) -> String {
    let x2avic = r
        .host_settings
        .as_ref()
        .is_some_and(|h| h.verdicts.x2avic.is_available());
    match r.apicv.effective {
        // x2APIC: through the backing page (x2AVIC) or its MSRs intercepted.
        ApicvState::Active if r.mode.apic == ApicMode::X2apic && x2avic => "on (x2AVIC)".into(),
        ApicvState::Active if r.mode.apic == ApicMode::X2apic => "on (hybrid)".into(),
        ApicvState::Active => "on".into(),
        ApicvState::Unavailable => "off".into(),
        other => other.to_string(),
    }
}

/// docs/lab.md's AVIC table: a row per kernel-irqchip `--apicv host` run
/// on the ICR path of `docs` (the AVIC pass's matrix with AVIC on and off),
/// by workload, vCPUs, target, APIC mode and AVIC.
pub fn avic_table(docs: &[&Document]) -> Vec<String> {
    let mut runs: Vec<&RunReport> = docs
        .iter()
        .flat_map(|d| &d.runs)
        .filter(|r| {
            r.apicv.requested == ApicvRequest::Host
                && r.mode.irqchip == Irqchip::Kernel
                && r.mode.ipi.writes_icr()
        })
        .collect();
    runs.sort_by_key(|r| {
        (
            r.mode.workload.name(),
            r.mode.vcpus,
            r.mode.target.name(),
            r.mode.apic.name(),
            avic_state(r),
        )
    });
    let mut out = vec![
        "| workload | mode | AVIC | sender exits/IPI | sender exits/IPI by reason (kvm_exit) | receivers exits/IPI | receivers exits/IPI by reason | ICR-write exits/IPI | accelerated ICR writes/IPI |".to_string(),
        "| --- | --- | --- | ---: | --- | ---: | --- | ---: | ---: |".to_string(),
    ];
    for r in runs {
        let Some((_, cells)) = per_ipi(r) else {
            continue;
        };
        out.push(format!(
            "| {} {}v {} | {}/{} | {} | {} |",
            r.mode.workload.name(),
            r.mode.vcpus,
            r.mode.target.name(),
            r.mode.irqchip.name(),
            r.mode.apic.name(),
            avic_state(r),
            cells.join(" | ")
        ));
    }
    out
}

/// The AVIC pass's sweeps the AVIC table is made of, as probe-avic.sh names them.
const AVIC_TABLE_FILES: &[&str] = &[
    "avic-on.json",
    "avic-on-halt.json",
    "avic-off.json",
    "avic-off-halt.json",
];

/// docs/lab.md's AVIC table with its header, from the matrix part's results
/// tree `dir` (`date`: the day it was made).
pub fn avic_doc_lines(dir: &Path, date: &str) -> Result<Vec<String>> {
    let mut docs = Vec::new();
    for f in AVIC_TABLE_FILES {
        let p = dir.join("runs").join(f);
        if p.is_file() {
            docs.push(Document::load(&p).map_err(anyhow::Error::msg)?);
        }
    }
    let Some(first) = docs.first() else {
        bail!("no runs/avic-*.json in {}", dir.display());
    };
    let iterations = first.runs.first().map_or(0, |r| r.mode.iterations);
    let (kernel, cpu) = (
        host(first, |h| h.kernel_release.clone()),
        host(first, |h| h.cpu_model.clone()),
    );
    let versions = std::fs::read_to_string(dir.join("versions.txt")).unwrap_or_default();
    let qemu = versions
        .lines()
        .find_map(|l| l.strip_prefix("qemu "))
        .map_or("QEMU", |v| v.split('(').next().unwrap_or(v).trim());
    let mut lines = vec![
        format!("Kernel irqchip, `--apicv host`, {iterations} iterations per run (`cargo xtask lab avic --update-docs`, {date});"),
        format!("guest: {kernel} on {cpu} with the emulated AVIC ({qemu} + scripts/lab/qemu-7.2.series),"),
        "kvm_amd avic=1 (on; x2APIC: x2AVIC, or hybrid AVIC without it) and avic=0 (off); 2 emulated CPUs. \"Sender\" is vCPU 0, \"receivers\" the other vCPUs together.".to_string(),
        String::new(),
    ];
    let refs: Vec<&Document> = docs.iter().collect();
    lines.extend(avic_table(&refs));
    lines.push(String::new());
    Ok(lines)
}

/// Rewrites docs/lab.md's AVIC table from the matrix part's results `dir`.
pub fn update_avic_doc(root: &Path, dir: &Path) -> Result<()> {
    let doc = root.join("docs/lab.md");
    update_doc(&doc, "avic-table", &avic_doc_lines(dir, &today())?)?;
    super::host::log(format!("table: updated {} (AVIC)", doc.display()));
    Ok(())
}

/// APICv in a measured phase, in words.
fn apicv_phase(p: &PhaseResult) -> String {
    match &p.apicv {
        None => "–".into(),
        Some(a) if a.active => "active".into(),
        Some(a) if a.inhibits.is_empty() => "not active".into(),
        Some(a) => format!("inhibited ({})", a.inhibits.join(", ")),
    }
}

/// A kvm_intel parameter as the run read it back: `Y`, `N`, `?` when not
/// recorded, or the value itself.
fn intel_param(r: &RunReport, p: &str) -> String {
    match r
        .host_settings
        .as_ref()
        .and_then(|h| h.param(&format!("kvm_intel.{p}")))
    {
        None => "?".into(),
        Some("Y" | "y" | "1") => "Y".into(),
        Some("N" | "n" | "0") => "N".into(),
        Some(v) => v.into(),
    }
}

/// docs/lab-intel.md's table: one row per combination of the runs in
/// `docs` (a later file's duplicate of a row left out), with kvm_intel's
/// enable_apicv and enable_ipiv as each run read them back, so any mix of
/// results files works (scripts/lab/probe-apicv.sh's APICv matrix passes,
/// its IPIv sweeps); enable_apicv and enable_ipiv Y before N.
pub fn intel_table(docs: &[&Document]) -> Vec<String> {
    type Key = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        bool,
        bool,
        &'static str,
    );
    let key = |r: &RunReport| -> Key {
        (
            r.mode.workload.name(),
            r.mode.target.name(),
            r.mode.irqchip.name(),
            r.mode.apic.name(),
            r.mode.ipi.name(),
            intel_param(r, "enable_apicv") != "Y",
            intel_param(r, "enable_ipiv") != "Y",
            r.apicv.requested.name(),
        )
    };
    let mut runs: Vec<&RunReport> = docs.iter().flat_map(|d| &d.runs).collect();
    runs.sort_by_key(|r| key(r));
    runs.dedup_by_key(|r| key(r));
    let mut out = vec![
        "| mode | workload, target | enable_apicv | enable_ipiv | --apicv | APICv in the measure phase | sender exits/IPI by reason | receiver exits/IPI by reason | ICR-write exits/IPI | accelerated ICR writes/IPI |".to_string(),
        "| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: |".to_string(),
    ];
    for r in runs {
        let cells = format!(
            "| {} | {} {} | {} | {} | {}",
            mode(r),
            r.mode.workload.name(),
            r.mode.target.name(),
            intel_param(r, "enable_apicv"),
            intel_param(r, "enable_ipiv"),
            r.apicv.requested.name()
        );
        let Some((s, [_, sr, _, rr, icr, acc])) = per_ipi(r) else {
            let state = r.status.name();
            out.push(format!(
                "{cells} | {state}, no IPI measured | – | – | – | – |"
            ));
            continue;
        };
        let apicv = apicv_phase(s);
        out.push(format!("{cells} | {apicv} | {sr} | {rr} | {icr} | {acc} |"));
    }
    out
}

/// `doc` with the lines between `<!-- NAME:begin -->` and `<!-- NAME:end -->` replaced.
pub fn replace_between(doc: &str, name: &str, lines: &[String]) -> Result<String> {
    let (begin, end) = (
        format!("<!-- {name}:begin -->"),
        format!("<!-- {name}:end -->"),
    );
    let mut out = Vec::new();
    let mut skipping = false;
    let mut found = false;
    for l in doc.lines() {
        if l.contains(&begin) {
            out.push(l.to_string());
            out.extend(lines.iter().cloned());
            skipping = true;
            found = true;
        } else if l.contains(&end) {
            skipping = false;
            out.push(l.to_string());
        } else if !skipping {
            out.push(l.to_string());
        }
    }
    if !found {
        bail!("no {begin} marker");
    }
    if skipping {
        bail!("no {end} marker");
    }
    Ok(out.join("\n") + "\n")
}

/// Rewrites the table `name` of the doc at `path`.
pub fn update_doc(path: &Path, name: &str, lines: &[String]) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let new = replace_between(&text, name, lines).with_context(|| path.display().to_string())?;
    let tmp = path.with_extension("md.new");
    std::fs::write(&tmp, new)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Today's date, `YYYY-MM-DD` (UTC).
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    date(secs as i64)
}

/// `YYYY-MM-DD` of `secs` since the epoch (UTC).
fn date(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map_or_else(|| "?".into(), |d| d.date_naive().to_string())
}

/// The docs' table from `results`: docs/lab.md for QEMU (beside the same
/// sweep on this machine), docs/lab-intel.md for Bochs.
pub fn update_docs(root: &Path, emulator: super::cli::EmulatorKind, results: &Path) -> Result<()> {
    use super::cli::EmulatorKind;
    let load = |p: &Path| ipivmm_analysis::results::Document::load(p).map_err(anyhow::Error::msg);
    match emulator {
        EmulatorKind::Qemu => {
            // The sweep step's plan writes runs/sweep/sweep.json; a pass
            // from before the plans wrote runs/sweep.json.
            let sweep = ["runs/sweep/sweep.json", "runs/sweep.json"]
                .map(|f| results.join(f))
                .into_iter()
                .find(|p| p.exists())
                .unwrap_or_else(|| results.join("runs/sweep/sweep.json"));
            let lab = load(&sweep)?;
            let host_json = results.join("host-sweep.json");
            // The same matrix on this machine (PV is skipped where hypercalls cannot run).
            let ok = Command::new(root.join("target/release/ipivmm"))
                .args([
                    "sweep",
                    "--irqchip",
                    "kernel,split,user",
                    "--apic",
                    "xapic,x2apic",
                ])
                .args([
                    "--ipi",
                    "icr,pv",
                    "--workload",
                    "pingpong",
                    "--iterations",
                    "30",
                ])
                .args(["--warmup", "3", "-q", "--json"])
                .arg(&host_json)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|st| st.success());
            if !ok {
                super::host::log(format!(
                    "table: the host sweep reported failures (see {})",
                    host_json.display()
                ));
            }
            let here = load(&host_json)?;
            let params =
                std::fs::read_to_string(results.join("module-params.txt")).unwrap_or_default();
            let npt = params
                .lines()
                .find(|l| l.starts_with("kvm_amd.npt="))
                .map(|l| l.chars().take("kvm_amd.npt=".len() + 1).collect::<String>())
                .unwrap_or_default();
            let mut lines = vec![
                format!(
                    "Ping-pong, 2 vCPUs, spinning target, 30 round trips (`cargo xtask lab quick --update-docs`, {});",
                    today()
                ),
                format!(
                    "guest: {} on {}, {npt};",
                    host(&lab, |h| h.kernel_release.clone()),
                    host(&lab, |h| h.cpu_model.clone())
                ),
                format!(
                    "host: {}, {}.",
                    host(&here, |h| h.kernel_release.clone()),
                    host(&here, |h| h.backend.to_string())
                ),
                String::new(),
            ];
            lines.extend(lab_table(
                &[&lab, &here],
                ipivmm_analysis::mode::Workload::Pingpong,
            ));
            let doc = root.join("docs/lab.md");
            update_doc(&doc, "lab-table", &lines)?;
            super::host::log(format!("table: updated {}", doc.display()));
        }
        EmulatorKind::Bochs => {
            let files = super::host::files(&results.join("runs"), "", ".json");
            if files.is_empty() {
                bail!("no runs/*.json in {}", results.display());
            }
            let docs = files.iter().map(|f| load(f)).collect::<Result<Vec<_>>>()?;
            let docs: Vec<&ipivmm_analysis::results::Document> = docs.iter().collect();
            let doc = root.join("docs/lab-intel.md");
            update_doc(&doc, "intel-table", &intel_table(&docs))?;
            super::host::log(format!("table: updated {}", doc.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_dates_print_as_the_docs_have_them() {
        assert_eq!(fmt(Some(1.0)), "1");
        assert_eq!(fmt(Some(2.5333)), "2.53");
        assert_eq!(fmt(Some(0.0333)), "0.03");
        assert_eq!(fmt(Some(1.1)), "1.1");
        assert_eq!(fmt(None), "–");
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(20_454 * 86_400 + 86_399), "2026-01-01");
        assert_eq!(date(11_016 * 86_400), "2000-02-29");
    }

    /// The quick pass fixture's sweep, as kvm_intel with enable_apicv=`apicv`.
    fn fixture(apicv: &str) -> Document {
        let mut v = super::super::avic::tests::avic_off();
        for r in v["runs"].as_array_mut().unwrap() {
            r["host_settings"]["params"]["kvm_intel"] =
                serde_json::json!({"enable_apicv": apicv, "enable_ipiv": "N"});
        }
        Document::from_json(&v.to_string(), "fixture").unwrap()
    }

    #[test]
    fn the_lab_table_has_a_row_per_mode_and_backend() {
        let d = fixture("Y");
        let t = lab_table(&[&d], Workload::Pingpong);
        assert_eq!(t.len(), 2 + 2, "{t:#?}");
        assert_eq!(
            t[2],
            "| kernel/x2apic/icr | kvm_amd | 2.93 | interrupt 1.9, msr 1, io 0.03 | 2.77 | interrupt 1.73, msr 1, io 0.03 | 1 | 16777906 |"
        );
        assert!(
            t[3].starts_with("| kernel/xapic/pv | kvm_amd | "),
            "{}",
            t[3]
        );
    }

    #[test]
    fn the_intel_table_has_a_row_per_combination_apicv_on_first() {
        let (on, off) = (fixture("Y"), fixture("0"));
        let t = intel_table(&[&off, &on, &on]);
        assert_eq!(t.len(), 2 + 8, "duplicates left out: {t:#?}");
        assert!(
            t[2].starts_with("| user/xapic/icr | broadcast spin | Y | N | host | "),
            "{}",
            t[2]
        );
        assert!(
            t[3].starts_with("| user/xapic/icr | broadcast spin | N | N | host | "),
            "{}",
            t[3]
        );
        assert!(
            t[4].starts_with("| kernel/x2apic/icr | pingpong spin | Y | N | host | "),
            "{}",
            t[4]
        );
        assert!(t[4].ends_with(" | 1 | 0 |"), "{}", t[4]);
    }

    #[test]
    fn the_avic_table_has_a_row_per_host_run_avic_on_and_off() {
        use super::super::avic::tests::{avic_off, avic_on};
        let load = |v: serde_json::Value| Document::from_json(&v.to_string(), "avic").unwrap();
        let (on, off) = (load(avic_on()), load(avic_off()));
        let t = avic_table(&[&off, &on]);
        // On: xAPIC spin and halt, x2APIC hybrid and x2AVIC (the inhibit
        // run is not --apicv host); off: x2APIC (the PV and user-irqchip
        // runs are left out).
        assert_eq!(t.len(), 2 + 5, "{t:#?}");
        assert_eq!(
            t[2],
            "| pingpong 2v halt | kernel/xapic | on | 2.93 | interrupt 1.9, avic_incomplete_ipi 1, io 0.03 | 2.77 | interrupt 1.73, io 0.03 | 1 | 0 |"
        );
        assert_eq!(
            t[3],
            "| pingpong 2v spin | kernel/x2apic | off | 2.93 | interrupt 1.9, msr 1, io 0.03 | 2.77 | interrupt 1.73, msr 1, io 0.03 | 1 | 0 |"
        );
        assert!(
            t[4].starts_with("| pingpong 2v spin | kernel/x2apic | on (hybrid) | ")
                && t[4].ends_with(" | 1 | 0 |"),
            "{}",
            t[4]
        );
        assert_eq!(
            t[5],
            "| pingpong 2v spin | kernel/x2apic | on (x2AVIC) | 2.93 | interrupt 1.9, io 0.03 | 2.77 | interrupt 1.73, io 0.03 | 0 | 1 |"
        );
        assert_eq!(
            t[6],
            "| pingpong 2v spin | kernel/xapic | on | 2.93 | interrupt 1.9, io 0.03 | 2.77 | interrupt 1.73, io 0.03 | 0 | 1 |"
        );
    }

    #[test]
    fn the_avic_doc_lines_name_the_guest_and_the_qemu() {
        use super::super::avic::tests::{avic_off, avic_on};
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("runs")).unwrap();
        assert!(avic_doc_lines(dir, "2026-12-01").is_err(), "no runs");
        std::fs::write(dir.join("runs/avic-on.json"), avic_on().to_string()).unwrap();
        std::fs::write(dir.join("runs/avic-off.json"), avic_off().to_string()).unwrap();
        std::fs::write(
            dir.join("versions.txt"),
            "kernel linux-image.deb\nqemu QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)\n",
        )
        .unwrap();
        let lines = avic_doc_lines(dir, "2026-12-01").unwrap();
        assert_eq!(
            lines[..3],
            [
                "Kernel irqchip, `--apicv host`, 30 iterations per run (`cargo xtask lab avic --update-docs`, 2026-12-01);",
                "guest: 6.1.0-50-amd64 on QEMU TCG CPU version 2.5+ with the emulated AVIC (QEMU emulator version 7.2.19 + scripts/lab/qemu-7.2.series),",
                "kvm_amd avic=1 (on; x2APIC: x2AVIC, or hybrid AVIC without it) and avic=0 (off); 2 emulated CPUs. \"Sender\" is vCPU 0, \"receivers\" the other vCPUs together.",
            ]
        );
        assert_eq!(lines.len(), 4 + 2 + 5 + 1);
        let doc = "x\n<!-- avic-table:begin -->\nNot generated yet\n<!-- avic-table:end -->\n";
        let new = replace_between(doc, "avic-table", &lines).unwrap();
        assert!(
            new.contains("| pingpong 2v halt | kernel/xapic | on |")
                && !new.contains("Not generated")
        );
    }

    #[test]
    fn tables_replace_what_is_between_their_markers() {
        let doc = "a\n<!-- t:begin -->\nold\nold\n<!-- t:end -->\nb\n";
        let new = replace_between(doc, "t", &["x".into(), "y".into()]).unwrap();
        assert_eq!(new, "a\n<!-- t:begin -->\nx\ny\n<!-- t:end -->\nb\n");
        assert!(replace_between("a\n", "t", &[]).is_err());
        assert!(replace_between("<!-- t:begin -->\n", "t", &[]).is_err());
    }
}
