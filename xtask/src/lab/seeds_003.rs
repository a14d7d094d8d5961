//! Seed 003 (APICv and topology, shared/seeds/003_*.txt) in the report's
//! shape: its four cases, vCPUs packed on one socket or spread over
//! sockets, APICv on and off; from the QEMU lab's two-socket L1
//! (`cargo xtask lab avic --parts topology --sockets 2 --smp 4`: `sweep
//! --preset apicv-topology`, `runs/apicv-topology.json`), AVIC standing
//! in for APICv.
use super::seeds_cells::{apicv_was, grouped, per_operation, requested, run, Cell, Claim, Per};
use super::tables::fmt;
use ipivmm_analysis::mode::ApicvRequest;
use std::path::Path;

/// The report's cases: number, APICv, placement (the preset's name for
/// it), the report's result (lower is better).
const CASES: [(u8, ApicvRequest, &str, &str); 4] = [
    (1, ApicvRequest::Host, "close", "989"),
    (2, ApicvRequest::Host, "spread", "2209"),
    (3, ApicvRequest::Inhibit, "close", "978"),
    (4, ApicvRequest::Inhibit, "spread", "1130"),
];

/// The results file of the topology part.
const FILE: &str = "apicv-topology.json";

/// The four cases' cells and the CPUs each ran on.
pub struct Seed003 {
    pub cases: Vec<(Cell, String)>,
}

/// The cells from the topology part's results in `dir`.
pub fn read(dir: &Path) -> Seed003 {
    Seed003 {
        cases: CASES
            .iter()
            .map(|&(_, apicv, place, _)| {
                let apicv_is = requested(apicv);
                let r = run(dir, FILE, &format!("{place} {apicv}"), |r| {
                    apicv_is(r) && r.placement.as_deref() == Some(place)
                });
                let r = apicv_was(r, apicv == ApicvRequest::Host);
                let cpus = r.as_ref().map_or_else(
                    |_| "–".into(),
                    |r| {
                        r.mode
                            .levers
                            .pin
                            .iter()
                            .map(usize::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                );
                (
                    per_operation(&r, "cycles_per_operation_p50", Per::Ipi),
                    cpus,
                )
            })
            .collect(),
    }
}

impl Seed003 {
    /// The table: the report's cases as its rows.
    pub fn table(&self) -> Vec<String> {
        let mut out = vec![
            "x2APIC ping-pong, 2 vCPUs pinned packed (one socket) or spread (one per socket), AVIC on and inhibited: the report's result for its database test (lower is better), the lab's cycles per round trip (p50, TCG's), ICR-write exits and the sender's exits by reason per IPI:".into(),
            String::new(),
            "| case | APICv | vCPUs | report | lab: cycles per round trip p50 | ICR-write exits per IPI | sender's exits per IPI by reason | host CPUs | run took |".into(),
            "| ---: | --- | --- | ---: | ---: | ---: | --- | --- | ---: |".into(),
        ];
        for ((n, apicv, place, report), (cell, cpus)) in CASES.iter().zip(&self.cases) {
            let [c, icr, by, took] = cell.columns(grouped);
            let on = match apicv {
                ApicvRequest::Host => "apicv=1 (AVIC on)",
                ApicvRequest::Inhibit => "apicv=0 (AVIC inhibited)",
            };
            let packed = if *place == "close" {
                "packed"
            } else {
                "spread"
            };
            out.push(format!(
                "| {n} | {on} | {packed} | {report} | {c} | {icr} | {by} | {cpus} | {took} |"
            ));
        }
        out
    }

    /// The report's claims, each a direction of timings: none can be
    /// judged under emulation, where a socket is a number.
    pub fn claims(&self) -> Vec<Claim> {
        let why = "under TCG a socket is a number in CPUID and ACPI: every emulated CPU is a thread on the same host cores, no cache is shared or not, no interconnect, no memory distance, and TCG's timings are not hardware timings";
        let c = |i: usize| &self.cases[i].0;
        let counts = |a: usize, b: usize| {
            match (c(a).figures(), c(b).figures()) {
            (Some(x), Some(y)) => format!(
                "; the counts: ICR-write exits per IPI {} packed, {} spread (what KVM does per IPI does not depend on where the vCPUs sit)",
                fmt(x.icr_exits),
                fmt(y.icr_exits)
            ),
            _ => String::new(),
        }
        };
        let ratio = |v: &[f64]| super::seeds_cells::ratio(v[0], v[1]);
        let mut with = Claim::timing(
            "With APICv, vCPUs spread over sockets are much slower than packed (2209 against 989):",
            why,
            &[("case 2", c(1)), ("case 1", c(0))],
            |v| format!("spread/packed {} with AVIC", ratio(v)),
        );
        with.why += &counts(0, 1);
        let mut without = Claim::timing(
            "Without APICv, spread is only a little slower than packed (1130 against 978):",
            why,
            &[("case 4", c(3)), ("case 3", c(2))],
            |v| format!("spread/packed {} without AVIC", ratio(v)),
        );
        without.why += &counts(2, 3);
        vec![
            with,
            without,
            Claim::timing(
                "APICv is what makes spread slow: spread with APICv against spread without (2209 against 1130):",
                why,
                &[("case 2", c(1)), ("case 4", c(3))],
                |v| format!("AVIC on/off {} spread", ratio(v)),
            ),
        ]
    }
}
