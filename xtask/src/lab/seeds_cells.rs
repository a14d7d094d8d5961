//! The cells of docs/seeds.md's tables, read from the results trees the
//! seeds' lab parts leave ([`super::seeds::Dirs`]): one run per cell, its
//! headline figure with ipivmm's exit breakdown beside it, or why there
//! is none. A cell is never filled in: a file that is not there, a run
//! that did not complete, a figure the run did not record, each is
//! [`Cell::NotRun`] with its reason.
use super::tables::{fmt, measured, reasons};
use ipivmm_analysis::mode::apicv::ApicvState;
use ipivmm_analysis::mode::ApicvRequest;
use ipivmm_analysis::results::metrics::RunMetrics;
use ipivmm_analysis::results::{Document, PhaseResult, RunReport, RunStatus};
use std::path::Path;

/// What one cell of a table shows.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// The run's figures.
    Ran(Figures),
    /// Why the cell has none.
    NotRun(String),
}

/// One run's figures, as the tables print them.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// The headline (cycles, records/s), as a number for the claims.
    pub value: Option<f64>,
    /// ICR-write exits per operation (per IPI, per record: the table says).
    pub icr_exits: Option<f64>,
    /// Exits by reason per operation, the biggest first.
    pub exits: String,
    /// The run's wall time, s.
    pub took_s: f64,
}

impl Cell {
    /// The figures, if the cell has them.
    pub fn figures(&self) -> Option<&Figures> {
        match self {
            Cell::Ran(f) => Some(f),
            Cell::NotRun(_) => None,
        }
    }

    /// The cell's columns: headline, ICR-write exits, exits by reason,
    /// wall time; a cell that did not run says so in the first and leaves
    /// the others empty ("–").
    pub fn columns(&self, headline: impl Fn(f64) -> String) -> [String; 4] {
        match self {
            Cell::Ran(f) => [
                f.value.map_or_else(|| "–".into(), headline),
                fmt(f.icr_exits),
                f.exits.clone(),
                if f.took_s < 10.0 {
                    format!("{:.1} s", f.took_s)
                } else {
                    format!("{:.0} s", f.took_s)
                },
            ],
            Cell::NotRun(why) => [
                format!("not run: {why}"),
                "–".into(),
                "–".into(),
                "–".into(),
            ],
        }
    }
}

/// A number with thin groups of three digits, as the docs print cycles.
pub fn grouped(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    if v < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// The runs of `dir/runs/file`, or why there are none.
pub fn runs(dir: &Path, file: &str) -> Result<Vec<RunReport>, String> {
    let path = dir.join("runs").join(file);
    if !path.is_file() {
        return Err(format!("no runs/{file} in {}", dir.display()));
    }
    Document::load(&path)
        .map(|d| d.runs)
        .map_err(|e| format!("runs/{file}: {e}"))
}

/// The one run of `dir/runs/file` that `pick` takes, completed, or why
/// there is none.
pub fn run(
    dir: &Path,
    file: &str,
    what: &str,
    pick: impl Fn(&RunReport) -> bool,
) -> Result<RunReport, String> {
    let r = runs(dir, file)?
        .into_iter()
        .find(|r| pick(r))
        .ok_or_else(|| format!("no {what} run in runs/{file}"))?;
    match &r.status {
        RunStatus::Completed => Ok(r),
        s => Err(format!("the {what} run ended {} (runs/{file})", s.name())),
    }
}

/// `r` if APICv/AVIC was in effect in it as the cell asks (`on`: active;
/// off: inhibited or unavailable), else why not: a cell of the other state
/// is not this cell.
pub fn apicv_was(r: Result<RunReport, String>, on: bool) -> Result<RunReport, String> {
    let r = r?;
    let active = r.apicv.effective == ApicvState::Active;
    if active == on {
        return Ok(r);
    }
    Err(format!(
        "APICv/AVIC was {} in the run (asked: {}), not {}",
        r.apicv.effective,
        r.apicv.requested,
        if on { "active" } else { "off" }
    ))
}

/// `r` if the host's module parameter `module.param` read `want` (Y/N)
/// when it ran, else why not.
pub fn param_was(
    r: Result<RunReport, String>,
    module: &str,
    param: &str,
    want: &str,
) -> Result<RunReport, String> {
    let r = r?;
    let got = r
        .host_settings
        .as_ref()
        .and_then(|h| h.params.get(module)?.get(param))
        .map(String::as_str);
    match got {
        Some(g) if g == want => Ok(r),
        g => Err(format!(
            "the run had {module}.{param}={} (the cell is {want})",
            g.unwrap_or("unrecorded")
        )),
    }
}

/// The wall time of a run, s.
fn took_s(r: &RunReport) -> f64 {
    r.timings.total_ns as f64 / 1e9
}

/// The measured phase of vCPU 0 (the sender).
fn sender(r: &RunReport) -> Option<&PhaseResult> {
    r.vcpus.first().and_then(|v| measured(v).first().copied())
}

/// A payload's or Linux IPI workload's run per operation: `headline` of
/// its metrics (e.g. `cycles_per_ipi_p50`), ICR-write exits per
/// `per` (`ipi` or `operation`), the sender's exits by reason per the same.
pub fn per_operation(r: &Result<RunReport, String>, headline: &str, per: Per) -> Cell {
    let r = match r {
        Ok(r) => r,
        Err(why) => return Cell::NotRun(why.clone()),
    };
    let s = r.summary();
    let m = RunMetrics::of(&s);
    let (icr_key, n) = match per {
        Per::Ipi => ("icr_write_exits_per_ipi", m.ipis_sent),
        Per::Operation => ("icr_write_exits_per_operation", m.operations),
    };
    let Some(phase) = sender(r).filter(|_| n > 0) else {
        return Cell::NotRun(format!(
            "the run has no measured phase with {} on vCPU 0",
            per.name()
        ));
    };
    Cell::Ran(Figures {
        value: m.values.get(headline).copied(),
        icr_exits: m.values.get(icr_key).copied(),
        exits: reasons(&[phase], n),
        took_s: took_s(r),
    })
}

/// What a table's counts are per.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Per {
    Ipi,
    Operation,
}

impl Per {
    fn name(self) -> &'static str {
        match self {
            Per::Ipi => "IPIs sent",
            Per::Operation => "operations",
        }
    }
}

/// linux:ebizzy's run: records per second of the guest's own clock (the
/// records vCPU 0 wrote, `operations`, over its `guest_ns`), ICR-write
/// exits and exits by reason of every vCPU per record (every CPU
/// allocates and unmaps, so every vCPU sends).
pub fn ebizzy(r: &Result<RunReport, String>) -> Cell {
    let r = match r {
        Ok(r) => r,
        Err(why) => return Cell::NotRun(why.clone()),
    };
    let Some(s) = sender(r) else {
        return Cell::NotRun("the run has no measured phase on vCPU 0".into());
    };
    let (records, ns) = (s.records.get("operations"), s.records.get("guest_ns"));
    let (Some(&records), Some(&ns)) = (records, ns) else {
        return Cell::NotRun("vCPU 0 recorded no operations or guest_ns".into());
    };
    if records == 0 || ns == 0 {
        return Cell::NotRun("vCPU 0 recorded 0 operations or 0 ns".into());
    }
    let all: Vec<&PhaseResult> = r.vcpus.iter().flat_map(measured).collect();
    let icr: Option<u64> = all
        .iter()
        .map(|p| p.icr_write_exits.as_ref().map(|e| e.exits))
        .sum();
    Cell::Ran(Figures {
        value: Some(records as f64 / (ns as f64 / 1e9)),
        icr_exits: icr.map(|n| n as f64 / records as f64),
        exits: reasons(&all, records),
        took_s: took_s(r),
    })
}

/// kvm-unit-tests' `vmexit` `ipi` booted by ipivmm (docs/kvm-unit-tests.md):
/// the cycles the test printed (`ipi N` on its console), vCPU 0's
/// ICR-write exits and exits by reason in the test's own phase (`ipi`:
/// the console's test line ends it), or over the whole run where the run
/// has one phase (an ipivmm before per-test phases: the boot's handful of
/// IPIs included). A run that ended before the test printed is not run,
/// with its counts in the reason: they are what it did, not the test's
/// figure.
pub fn kut_ipi(r: Result<RunReport, String>) -> Cell {
    let r = match r {
        Ok(r) => r,
        Err(why) => return Cell::NotRun(why),
    };
    let Some(v) = r.vcpus.first() else {
        return Cell::NotRun("the run has no vCPU".into());
    };
    let test_phase = v.phases.iter().find(|p| p.name == "ipi");
    let whole = match v.phases.as_slice() {
        [one] => Some(one),
        _ => None,
    };
    let Some(p) = test_phase.or(whole) else {
        return Cell::NotRun(format!(
            "vCPU 0 has no `ipi` phase (phases: {})",
            v.phases
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let icr = p.icr_write_exits.as_ref().map(|e| e.exits as f64);
    let cycles = kut_cycles(&r.serial_tail, "ipi");
    match (&r.status, cycles) {
        (RunStatus::Completed, Some(c)) => Cell::Ran(Figures {
            value: Some(c),
            icr_exits: icr,
            exits: reasons(&[p], 1),
            took_s: took_s(&r),
        }),
        (status, _) => Cell::NotRun(format!(
            "ended {} after {:.0} s without the test's `ipi N` line ({} ICR-write exits on vCPU 0 by then)",
            status.name(),
            took_s(&r),
            fmt(icr)
        )),
    }
}

/// The cycles kvm-unit-tests' vmexit printed for `test` (`ipi 4713`).
pub fn kut_cycles(console: &str, test: &str) -> Option<f64> {
    console.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some(t), Some(n), None) if t == test => n.parse().ok(),
            _ => None,
        }
    })
}

/// A run of the Linux workload `name` (`linux:ebizzy`).
pub fn linux(name: &str) -> impl Fn(&RunReport) -> bool + '_ {
    move |r| r.mode.payload.as_deref() == Some(name)
}

/// A run whose `--apicv` was `req`.
pub fn requested(req: ApicvRequest) -> impl Fn(&RunReport) -> bool {
    move |r| r.apicv.requested == req
}

/// Whether the lab reproduced a direction a report claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Reproduced,
    NotReproduced,
    /// Timings under emulation, or the cells are not there.
    CannotJudge,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::NotReproduced => "not reproduced",
            Verdict::CannotJudge => "cannot be judged",
        }
    }
}

/// A claim of a report and the lab's verdict on its direction.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// The claim, with the report's figures.
    pub text: &'static str,
    pub verdict: Verdict,
    /// Why: the counts that decide it, or what emulation cannot say.
    pub why: String,
}

impl Claim {
    /// Its line in docs/seeds.md.
    pub fn line(&self) -> String {
        format!("- {} **{}**: {}", self.text, self.verdict.name(), self.why)
    }

    /// A claim about timings: never judged under emulation (`emulation`
    /// says why), with what the emulator measured (`measured`, from the
    /// cells' headlines in order) for the record; "not run" instead when
    /// a cell it needs has no figures.
    pub fn timing(
        text: &'static str,
        emulation: &str,
        cells: &[(&str, &Cell)],
        measured: impl FnOnce(&[f64]) -> String,
    ) -> Claim {
        let mut values = Vec::new();
        for (name, c) in cells {
            match c {
                Cell::Ran(Figures { value: Some(v), .. }) => values.push(*v),
                Cell::Ran(_) => {
                    return Self::unjudged(text, format!("{name} recorded no figure"));
                }
                Cell::NotRun(why) => {
                    return Self::unjudged(text, format!("not run: {name}: {why}"));
                }
            }
        }
        Claim {
            text,
            verdict: Verdict::CannotJudge,
            why: format!(
                "under emulation: {emulation}; the emulator measured {} (not evidence)",
                measured(&values)
            ),
        }
    }

    /// A claim the cells it needs cannot judge: `why`.
    pub fn unjudged(text: &'static str, why: String) -> Claim {
        Claim {
            text,
            verdict: Verdict::CannotJudge,
            why,
        }
    }
}

/// `a` over `b` as a factor, `×1.13`.
pub fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        return "an undefined ratio (0 below)".into();
    }
    format!("×{:.2}", a / b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kut_cycles_are_the_tests_own_line() {
        let console = "enabling apic\nipi 4713\n  ipi ipi 4800\ncr0 123\n";
        assert_eq!(kut_cycles(console, "ipi"), Some(4713.0));
        assert_eq!(kut_cycles("enabling apic\n", "ipi"), None);
        assert_eq!(kut_cycles("ipi many\n", "ipi"), None);
    }

    #[test]
    fn numbers_are_grouped_by_three() {
        assert_eq!(grouped(31333090.0), "31 333 090");
        assert_eq!(grouped(989.0), "989");
        assert_eq!(grouped(1000.4), "1 000");
    }
}
