//! Seed 000 (AVIC broadcast, shared/seeds/000_*.txt) in the report's
//! shape: its IPI microbenchmark (all-but-self broadcasts) and `ebizzy -M`
//! for avic0/avic1 × xAPIC/x2APIC, from the QEMU lab's Linux guest
//! (probe-linux.sh's part `seeds`: `runs/linux-seed000-WORKLOAD-APIC-V-AVIC.json`,
//! kvm_amd under QEMU TCG with AVIC emulated).
use super::seeds_cells::{
    apicv_was, ebizzy, grouped, linux, per_operation, ratio, run, Cell, Claim, Per,
};
use ipivmm_analysis::mode::ApicvRequest;
use std::path::Path;

/// A row of the report: its name, `--apicv` (AVIC on: host; off: the
/// inhibit lever), the APIC mode, its IPI benchmark (ns) and ebizzy
/// (records/s) figures (none for avic1_x2apic: not in the report).
type Row = (
    &'static str,
    ApicvRequest,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

/// The report's rows.
const ROWS: [Row; 4] = [
    (
        "avic0_xapic",
        ApicvRequest::Inhibit,
        "xapic",
        Some("12313907508.50 ns"),
        Some("9416"),
    ),
    (
        "avic1_xapic",
        ApicvRequest::Host,
        "xapic",
        Some("19106424733.30 ns"),
        Some("18157"),
    ),
    (
        "avic0_x2apic",
        ApicvRequest::Inhibit,
        "x2apic",
        Some("13073988486.00 ns"),
        Some("74507"),
    ),
    ("avic1_x2apic", ApicvRequest::Host, "x2apic", None, None),
];

/// vCPU counts of the tables when the results hold none (so that the
/// table says what is missing).
const DEFAULT_VCPUS: u32 = 2;

/// One vCPU count's cells: per row, the broadcast and ebizzy.
pub struct Seed000 {
    pub vcpus: u32,
    pub rows: Vec<(&'static str, Cell, Cell)>,
}

/// The results file of a cell.
fn file(workload: &str, apic: &str, vcpus: u32, apicv: ApicvRequest) -> String {
    let m = match apicv {
        ApicvRequest::Host => "host",
        ApicvRequest::Inhibit => "inhibit",
    };
    format!("linux-seed000-{workload}-{apic}-{vcpus}-{m}.json")
}

/// The vCPU counts `dir` has runs of, ascending ([`DEFAULT_VCPUS`] when none).
fn vcpu_counts(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix("linux-seed000-")?;
            rest.rsplit('-').nth(1)?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        v.push(DEFAULT_VCPUS);
    }
    v
}

/// The cells of every vCPU count the results in `dir` hold.
pub fn read(dir: &Path) -> Vec<Seed000> {
    vcpu_counts(dir)
        .into_iter()
        .map(|vcpus| Seed000 {
            vcpus,
            rows: ROWS
                .iter()
                .map(|&(name, apicv, apic, _, _)| {
                    let cell = |w: &str, what: &str| {
                        let r = run(dir, &file(w, apic, vcpus, apicv), what, linux(what));
                        apicv_was(r, apicv == ApicvRequest::Host)
                    };
                    (
                        name,
                        per_operation(
                            &cell("ipi-broadcast", "linux:ipi-broadcast"),
                            "cycles_per_operation_p50",
                            Per::Operation,
                        ),
                        ebizzy(&cell("ebizzy", "linux:ebizzy")),
                    )
                })
                .collect(),
        })
        .collect()
}

impl Seed000 {
    /// The two tables, the report's benchmark and ebizzy.
    pub fn tables(&self) -> Vec<String> {
        let v = self.vcpus;
        let mut out = vec![
            format!("IPI microbenchmark, all-but-self broadcast (`linux:ipi-broadcast`, {v} vCPUs): the report's time for its run, the lab's cycles per broadcast (p50, TCG's), the sender's ICR-write exits and exits by reason per broadcast:"),
            String::new(),
            "| row | report | lab: cycles per broadcast p50 | ICR-write exits per broadcast | sender's exits per broadcast by reason | run took |".into(),
            "| --- | ---: | ---: | ---: | --- | ---: |".into(),
        ];
        for ((name, b, _), row) in self.rows.iter().zip(ROWS) {
            let [c, icr, by, took] = b.columns(grouped);
            out.push(format!(
                "| {name} | {} | {c} | {icr} | {by} | {took} |",
                row.3.unwrap_or("not in the report")
            ));
        }
        out.extend([
            String::new(),
            format!("`ebizzy -M` (`linux:ebizzy`, ipivmm's ebizzy-like allocation, {v} vCPUs): records per second of the guest's clock, ICR-write exits and exits by reason of every vCPU per record:"),
            String::new(),
            "| row | report: records/s | lab: records/s | ICR-write exits per record | exits per record by reason | run took |".into(),
            "| --- | ---: | ---: | ---: | --- | ---: |".into(),
        ]);
        for ((name, _, e), row) in self.rows.iter().zip(ROWS) {
            let [r, icr, by, took] = e.columns(grouped);
            out.push(format!(
                "| {name} | {} | {r} | {icr} | {by} | {took} |",
                row.4.unwrap_or("not in the report")
            ));
        }
        out
    }

    fn cells(&self, name: &str) -> (&Cell, &Cell) {
        let (_, b, e) = self
            .rows
            .iter()
            .find(|(n, _, _)| *n == name)
            .expect("ROWS names every row");
        (b, e)
    }

    /// The report's claims, each a direction of timings: none can be
    /// judged under TCG; the counts say what KVM did per operation.
    pub fn claims(&self) -> Vec<Claim> {
        let tcg = "TCG's timings are not hardware timings (the emulated AVIC's IRR writes and doorbells cost next to nothing, where Rome's microcode is what the report measured; 2 emulated CPUs, not 180 dedicated ones)";
        let (b0x, e0x) = self.cells("avic0_xapic");
        let (b1x, e1x) = self.cells("avic1_xapic");
        let (b02, e02) = self.cells("avic0_x2apic");
        let counts = |a: &Cell, b: &Cell| match (a.figures(), b.figures()) {
            (Some(a), Some(b)) => format!(
                "; the counts: ICR-write exits per operation {} with AVIC against {} without",
                super::tables::fmt(a.icr_exits),
                super::tables::fmt(b.icr_exits)
            ),
            _ => String::new(),
        };
        let mut c1 = Claim::timing(
            "The IPI microbenchmark is slower with AVIC than without, xAPIC (19.1 s against 12.3 s, +55%):",
            tcg,
            &[("avic1_xapic", b1x), ("avic0_xapic", b0x)],
            |v| format!("avic1/avic0 {} in cycles per broadcast", ratio(v[0], v[1])),
        );
        c1.why += &counts(b1x, b0x);
        let mut c3 = Claim::timing(
            "`ebizzy -M` makes more records/s with AVIC than without, xAPIC (18157 against 9416):",
            tcg,
            &[("avic1_xapic", e1x), ("avic0_xapic", e0x)],
            |v| format!("avic1/avic0 {} in records/s", ratio(v[0], v[1])),
        );
        c3.why += &counts(e1x, e0x);
        vec![
            c1,
            Claim::timing(
                "Without AVIC, x2APIC broadcasts about as fast as xAPIC (13.1 s against 12.3 s):",
                tcg,
                &[("avic0_x2apic", b02), ("avic0_xapic", b0x)],
                |v| format!("x2APIC/xAPIC {} in cycles per broadcast", ratio(v[0], v[1])),
            ),
            c3,
            Claim::timing(
                "Without AVIC, x2APIC makes far more `ebizzy -M` records/s than xAPIC (74507 against 9416, ×7.9):",
                tcg,
                &[("avic0_x2apic", e02), ("avic0_xapic", e0x)],
                |v| format!("x2APIC/xAPIC {} in records/s", ratio(v[0], v[1])),
            ),
            Claim::unjudged(
                "hackbench (unicast IPIs) about the same with and without AVIC (117.8 s against 121.3 s):",
                "not in this table (`cargo xtask lab linux -- lab.probe=workloads` runs `linux:hackbench`, x2APIC, AVIC on and off; docs/linux-guest.md), and a time under TCG besides".into(),
            ),
        ]
    }
}
