//! Seed 002 (IPIv, shared/seeds/002_*.txt) in the report's shape: cycles
//! of IPI, xAPIC and x2APIC, without and with IPI virtualization, from
//! the Intel lab (kvm_intel under the patched Bochs 3.0, enable_ipiv=Y
//! then N: probe-ipiv-smoke.sh). ipivmm's unicast ping-pong
//! (`runs/ipiv-smoke-{on,off}[-xapic].json`) and, where a built
//! kvm-unit-tests was given, the report's own benchmark, `vmexit.flat ipi`
//! (`runs/kut-ipi-{on,off}-APIC.json`).
use super::seeds_cells::{
    apicv_was, grouped, kut_ipi, param_was, per_operation, ratio, run, runs, Cell, Claim, Per,
    Verdict,
};
use super::tables::fmt;
use std::path::Path;

/// The report's columns: APIC mode, IPIv, its average cycles of IPI.
const COLUMNS: [(&str, bool, &str); 4] = [
    ("xapic", false, "6059"),
    ("xapic", true, "4713.1"),
    ("x2apic", false, "4337.85"),
    ("x2apic", true, "3644.8"),
];

/// The cells of every column: ipivmm's ping-pong, kvm-unit-tests' vmexit ipi.
pub struct Seed002 {
    pub pingpong: [Cell; 4],
    pub kut: [Cell; 4],
}

/// The smoke's results file (x2APIC's names are CI's).
fn smoke_file(apic: &str, ipiv: bool) -> String {
    let on = if ipiv { "on" } else { "off" };
    match apic {
        "x2apic" => format!("ipiv-smoke-{on}.json"),
        _ => format!("ipiv-smoke-{on}-{apic}.json"),
    }
}

/// A module parameter's Y or N.
fn yn(on: bool) -> &'static str {
    if on {
        "Y"
    } else {
        "N"
    }
}

/// The cells from the results in `dir`.
pub fn read(dir: &Path) -> Seed002 {
    let no_kut = !std::fs::read_dir(dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("kut-ipi-"));
    Seed002 {
        pingpong: COLUMNS.map(|(apic, ipiv, _)| {
            let r = run(dir, &smoke_file(apic, ipiv), "ping-pong", |_| true);
            let r = param_was(apicv_was(r, true), "kvm_intel", "enable_ipiv", yn(ipiv));
            per_operation(&r, "cycles_per_ipi_p50", Per::Ipi)
        }),
        kut: COLUMNS.map(|(apic, ipiv, _)| {
            let file = format!("kut-ipi-{}-{apic}.json", if ipiv { "on" } else { "off" });
            if no_kut && dir.join("runs").is_dir() {
                return Cell::NotRun(
                    "no kvm-unit-tests given (`--kut DIR`, a built tree; CI cannot fetch it)"
                        .into(),
                );
            }
            // A run that did not complete still has its counts: kut_ipi
            // says what it did before it ended.
            let r = runs(dir, &file).and_then(|r| {
                r.into_iter()
                    .next()
                    .ok_or_else(|| format!("no run in runs/{file}"))
            });
            kut_ipi(param_was(r, "kvm_intel", "enable_ipiv", yn(ipiv)))
        }),
    }
}

impl Seed002 {
    /// The table: a row per source and figure, the report's columns.
    pub fn table(&self) -> Vec<String> {
        let mut out = vec![
            "Cycles of IPI (the report: kvm-unit-tests `vmexit` `ipi`, 2 vCPUs, average of 20 runs; the lab: the Intel lab's Bochs, whose cycles are its emulated TSC):".into(),
            String::new(),
            "| | xAPIC w/o IPIv | xAPIC w/ IPIv | x2APIC w/o IPIv | x2APIC w/ IPIv |".into(),
            "| --- | ---: | ---: | ---: | ---: |".into(),
            format!(
                "| report: `vmexit` `ipi`, cycles | {} |",
                COLUMNS.map(|c| c.2).join(" | ")
            ),
        ];
        let rows = |cells: &[Cell; 4], names: [&str; 4], headline: fn(f64) -> String| {
            let cols: Vec<[String; 4]> = cells.iter().map(|c| c.columns(headline)).collect();
            (0..4)
                .map(|i| {
                    let row: Vec<&str> = cols.iter().map(|c| c[i].as_str()).collect();
                    format!("| {} | {} |", names[i], row.join(" | "))
                })
                .collect::<Vec<_>>()
        };
        out.extend(rows(
            &self.pingpong,
            [
                "lab: ipivmm's unicast ping-pong, cycles per IPI p50",
                "its ICR-write exits per IPI",
                "its sender's exits per IPI by reason",
                "its run took (the Bochs guest's clock, 25–45× slower than the wall's)",
            ],
            grouped,
        ));
        out.extend(rows(
            &self.kut,
            [
                "lab: `vmexit.flat ipi` under ipivmm, cycles",
                "its ICR-write exits (vCPU 0, the test's phase `ipi`)",
                "its exits by reason (vCPU 0, the test's phase `ipi`)",
                "its run took (the Bochs guest's clock, 25–45× slower than the wall's)",
            ],
            grouped,
        ));
        out
    }

    /// The report's claims: the exit IPIv removes (counts: judged), the
    /// cycles it saves (Bochs's: not judged).
    pub fn claims(&self) -> Vec<Claim> {
        let bochs =
            "Bochs's cycles are its emulated TSC, which counts instructions, not a CPU's cycles";
        let mut claims = vec![self.exits_claim()];
        for (i, text) in [
            (
                0,
                "IPIv cuts the cycles of an IPI by 22.21% in xAPIC mode (6059 to 4713.1):",
            ),
            (
                2,
                "IPIv cuts the cycles of an IPI by 15.98% in x2APIC mode (4337.85 to 3644.8):",
            ),
        ] {
            let kut_ran = self.kut[i].figures().is_some() && self.kut[i + 1].figures().is_some();
            let (cells, what) = if kut_ran {
                (&self.kut, "vmexit ipi")
            } else {
                (&self.pingpong, "the ping-pong")
            };
            claims.push(Claim::timing(
                text,
                bochs,
                &[("with IPIv", &cells[i + 1]), ("without", &cells[i])],
                |v| format!("with/without {} in {what}'s cycles", ratio(v[0], v[1])),
            ));
        }
        claims
    }

    /// "IPIv removes the sender's ICR-write VM exit": per APIC mode, 0
    /// ICR-write exits per IPI with IPIv and at least 1 without, from the
    /// ping-pong's counts.
    fn exits_claim(&self) -> Claim {
        let text = "IPIv removes the VM exit of the sender's ICR write (the premise of the series: \"without causing VM-exits\"), xAPIC and x2APIC:";
        let mut seen = Vec::new();
        let mut missing = Vec::new();
        let mut against = Vec::new();
        for (i, mode) in [(0, "xAPIC"), (2, "x2APIC")] {
            let (off, on) = (&self.pingpong[i], &self.pingpong[i + 1]);
            match (off.figures(), on.figures()) {
                (Some(off), Some(on)) => {
                    let shown = format!(
                        "{mode} {} with IPIv, {} without",
                        fmt(on.icr_exits),
                        fmt(off.icr_exits)
                    );
                    let holds =
                        on.icr_exits == Some(0.0) && off.icr_exits.is_some_and(|x| x >= 1.0);
                    if holds {
                        seen.push(shown);
                    } else {
                        against.push(shown);
                    }
                }
                _ => missing.push(mode),
            }
        }
        let counts = seen
            .iter()
            .chain(&against)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        let (verdict, why) = if !against.is_empty() {
            (
                Verdict::NotReproduced,
                format!("ICR-write exits per IPI: {counts}"),
            )
        } else if seen.is_empty() {
            (
                Verdict::CannotJudge,
                "not run: no ping-pong with and without IPIv".into(),
            )
        } else {
            let also = if missing.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} not run: judged for the other mode only)",
                    missing.join(", ")
                )
            };
            (
                Verdict::Reproduced,
                format!("counts are real KVM behaviour under emulation; ICR-write exits per IPI: {counts}{also}"),
            )
        };
        Claim { text, verdict, why }
    }
}
