//! CSV for spreadsheets: one row per (mode, workload, vCPU, phase, counter).
//!
//! Every counter of the JSON document becomes a row with its source:
//! `host` (wall_ns), `userspace_exits`, `guest`, `kvm_stats`, `tracepoints`,
//! `records` (values the payload recorded), the ICR-write-exit figures under
//! the source they came from, and `latency` (count, min, p50, p90, p99, max,
//! mean in cycles and, when the TSC rate is known, `*_ns`). Each run ends
//! with its headline metrics (source `metrics`, `vcpu` empty: all vCPUs of
//! the measured phase; [`ipivmm_analysis::results::metrics::Metric`]): per operation
//! and per delivered IPI.
use super::error::OutputError;
use super::sink::{io_error, Command, Docs, Kind, Sink};
use ipivmm_analysis::results::metrics::Metric;
use ipivmm_analysis::results::repeats::ConfigurationStats;

use ipivmm_analysis::results::{Document, PhaseResult, RunReport};
use std::io::Write;

/// The `--csv FILE` sink of `run`, `sweep` and `compare`.
pub static SINK: Sink = Sink {
    flag: "csv",
    help: &[
        (
            &[Command::Run, Command::Sweep],
            "Write every counter as CSV to FILE, one row per vCPU, phase and counter ('-' for stdout)",
        ),
        (
            &[Command::Compare],
            "Also write every run of every file as CSV to FILE ('-' for stdout; the table then goes to stderr)",
        ),
    ],
    kind: Kind::Results(write_sink),
};

/// The CSV of every document of `docs`, streamed document by document
/// (in-memory ones have an empty `origin`).
fn write_sink(docs: &dyn Docs, out: &mut dyn Write) -> std::io::Result<()> {
    let mut w = Writer::new(out).map_err(io_error)?;
    docs.each(&mut |origin, d| w.doc(origin.unwrap_or(""), d).map_err(io_error))?;
    w.finish().map_err(io_error)
}

/// The header row.
pub const HEADER: [&str; 19] = [
    "origin", "run", "workload", "mode", "irqchip", "apic", "ipi", "target", "vcpus", "status",
    "vcpu", "apic_id", "phase_id", "phase", "source", "counter", "value", "unit", "payload",
];

fn unit_of(source: &str, counter: &str) -> &'static str {
    if counter.ends_with("_ns") || source.ends_with("_ns") {
        "ns"
    } else {
        "count"
    }
}

/// Rows of one phase as (source, counter, value, unit): every counter of
/// [`PhaseResult::counters`], then the derived ICR-write figures and the
/// latency statistics.
pub fn phase_counters(p: &PhaseResult) -> Vec<(String, String, String, &'static str)> {
    let mut rows = vec![(
        "host".to_string(),
        "wall_ns".to_string(),
        p.wall_ns.to_string(),
        "ns",
    )];
    for (source, k, v) in p.counters() {
        rows.push((
            source.to_string(),
            k.to_string(),
            v.to_string(),
            unit_of(source, k),
        ));
    }
    if let Some(i) = &p.icr_write_exits {
        rows.push((
            i.source.clone(),
            "icr_write_exits".into(),
            i.exits.to_string(),
            "count",
        ));
        rows.push((
            i.source.clone(),
            "icr_writes_accelerated".into(),
            i.accelerated.to_string(),
            "count",
        ));
    }
    if let Some(l) = &p.latency {
        let lat =
            |c: &str, v: String, u: &'static str| ("latency".to_string(), c.to_string(), v, u);
        rows.push(lat("count", l.count.to_string(), "count"));
        for (c, v) in [
            ("min", l.min),
            ("p50", l.p50),
            ("p90", l.p90),
            ("p99", l.p99),
            ("max", l.max),
        ] {
            rows.push(lat(c, v.to_string(), "cycles"));
        }
        rows.push(lat("mean", l.mean.to_string(), "cycles"));
        if let Some(i) = &l.p50_interval {
            rows.push(lat("p50_lo", i.lo.to_string(), "cycles"));
            rows.push(lat("p50_hi", i.hi.to_string(), "cycles"));
            rows.push(lat("p50_coverage", i.coverage.to_string(), "ratio"));
        }
        if let Some(n) = &l.ns {
            for (c, v) in [
                ("min_ns", n.min),
                ("p50_ns", n.p50),
                ("p90_ns", n.p90),
                ("p99_ns", n.p99),
                ("max_ns", n.max),
                ("mean_ns", n.mean),
            ] {
                rows.push(lat(c, v.to_string(), "ns"));
            }
        }
    }
    rows
}

/// The cells every row of a run starts with (the first ten of [`HEADER`])
/// and ends with (its payload): one place for the run's columns, shared by
/// its counter rows, its metrics rows and its configuration's rows.
struct RunCells {
    first: [String; 10],
    payload: String,
}

impl RunCells {
    /// The cells of run `r` of `origin`, numbered `run`.
    fn of(origin: &str, run: String, r: &RunReport) -> Self {
        let m = &r.mode;
        RunCells {
            first: [
                origin.to_string(),
                run,
                m.workload_label(),
                r.label(),
                m.irqchip.name().to_string(),
                m.apic.name().to_string(),
                m.ipi.name().to_string(),
                m.target.name().to_string(),
                m.vcpus.to_string(),
                r.status.name().to_string(),
            ],
            payload: m.payload.clone().unwrap_or_default(),
        }
    }

    /// One row: these cells around `[vcpu, apic_id, phase_id, phase,
    /// source, counter, value, unit]`.
    fn write<W: Write>(&self, w: &mut csv::Writer<W>, row: [&str; 8]) -> Result<(), csv::Error> {
        let first = self.first.iter().map(String::as_str);
        w.write_record(first.chain(row).chain([self.payload.as_str()]))
    }
}

fn write_run<W: Write>(
    w: &mut csv::Writer<W>,
    origin: &str,
    index: usize,
    r: &RunReport,
) -> Result<(), csv::Error> {
    let cells = RunCells::of(origin, index.to_string(), r);
    for v in &r.vcpus {
        let (vcpu, apic_id) = (v.index.to_string(), v.apic_id.to_string());
        for p in &v.phases {
            let phase_id = p.id.to_string();
            for (source, counter, value, unit) in phase_counters(p) {
                cells.write(
                    w,
                    [
                        &vcpu, &apic_id, &phase_id, &p.name, &source, &counter, &value, unit,
                    ],
                )?;
            }
        }
    }
    if let Some((id, name)) = r.measured_phase() {
        let s = r.summary();
        for metric in Metric::ALL {
            if let Some(v) = metric.value(&s) {
                let id = id.to_string();
                let value = v.to_string();
                // Latency rows name the part they came from.
                let phase = metric.phase(&s).unwrap_or(&name);
                cells.write(
                    w,
                    [
                        "",
                        "",
                        &id,
                        phase,
                        "metrics",
                        metric.key(),
                        &value,
                        metric.unit(),
                    ],
                )?;
            }
        }
    }
    Ok(())
}

/// The rows of one configuration's repeats: source `repeats`, `run` the
/// indices of its runs, the other columns from its first run.
fn write_configuration<W: Write>(
    w: &mut csv::Writer<W>,
    origin: &str,
    runs: &[RunReport],
    c: &ConfigurationStats,
) -> Result<(), csv::Error> {
    let Some(first) = c.runs.first().and_then(|&i| runs.get(i)) else {
        return Ok(());
    };
    let indices: Vec<String> = c.runs.iter().map(ToString::to_string).collect();
    let cells = RunCells::of(origin, indices.join(" "), first);
    let mut row = |counter: &str, value: f64, unit: &str| {
        let value = value.to_string();
        cells.write(w, ["", "", "", "", "repeats", counter, &value, unit])
    };
    row("completed", c.completed as f64, "count")?;
    row("repeats", c.repeats as f64, "count")?;
    for metric in Metric::ALL {
        let (k, unit) = (metric.key(), metric.unit());
        if let Some(f) = c.figures.get(k) {
            row(&format!("{k}_median"), f.median, unit)?;
            if let Some(i) = &f.interval {
                row(&format!("{k}_lo"), i.lo, unit)?;
                row(&format!("{k}_hi"), i.hi, unit)?;
                row(&format!("{k}_coverage"), i.coverage, "ratio")?;
            }
            if let Some(v) = f.cov {
                row(&format!("{k}_cov"), v, "ratio")?;
            }
        }
        if let Some(n) = c.counts.get(k) {
            row(&format!("{k}_median"), n.median, unit)?;
            row(&format!("{k}_min"), n.min, unit)?;
            row(&format!("{k}_max"), n.max, unit)?;
        }
    }
    if let Some(e) = c.min_detectable_effect {
        row("min_detectable_effect", e, "ratio")?;
    }
    if let Some(n) = c.repeats_for_target {
        row("repeats_for_target", n as f64, "count")?;
    }
    Ok(())
}

fn csv_error(e: csv::Error) -> OutputError {
    let problem = e.to_string();
    match e.into_kind() {
        csv::ErrorKind::Io(io) => OutputError::Io(io),
        _ => OutputError::Write {
            what: "CSV".into(),
            problem,
        },
    }
}

/// A CSV written run by run: the header first, then the rows of each
/// document as it comes, so that a caller reading many files holds one at
/// a time (`ipivmm compare`).
pub struct Writer<W: Write> {
    w: csv::Writer<W>,
}

impl<W: Write> Writer<W> {
    /// A CSV on `out`, its header written.
    pub fn new(out: W) -> Result<Self, OutputError> {
        let mut w = csv::Writer::from_writer(out);
        w.write_record(HEADER).map_err(csv_error)?;
        Ok(Self { w })
    }

    /// The rows of run `index` of `origin`.
    pub fn run(&mut self, origin: &str, index: usize, r: &RunReport) -> Result<(), OutputError> {
        write_run(&mut self.w, origin, index, r).map_err(csv_error)
    }

    /// The rows of every run of recorded document `d`, named by `origin`,
    /// then those of its configurations (`configurations[]`).
    pub fn doc(&mut self, origin: &str, d: &Document) -> Result<(), OutputError> {
        d.runs
            .iter()
            .enumerate()
            .try_for_each(|(i, r)| self.run(origin, i, r))?;
        for c in ConfigurationStats::of(&d.runs) {
            write_configuration(&mut self.w, origin, &d.runs, &c).map_err(csv_error)?;
        }
        Ok(())
    }

    /// Flushes what is buffered.
    pub fn finish(mut self) -> Result<(), OutputError> {
        self.w.flush().map_err(|e| csv_error(e.into()))
    }
}

fn write_all<'a, W: Write>(
    runs: impl IntoIterator<Item = (&'a str, usize, &'a RunReport)>,
    out: W,
) -> Result<(), OutputError> {
    let mut w = Writer::new(out)?;
    for (origin, index, r) in runs {
        w.run(origin, index, r)?;
    }
    w.finish()
}

/// Writes the CSV of in-memory reports (`origin` column empty, `run` = index).
pub fn write_runs<W: Write>(runs: &[&RunReport], out: W) -> Result<(), OutputError> {
    write_all(runs.iter().enumerate().map(|(i, r)| ("", i, *r)), out)
}

/// Writes the CSV of recorded documents, each named by its origin (file name).
pub fn write_docs<W: Write>(docs: &[(String, Document)], out: W) -> Result<(), OutputError> {
    write_all(
        docs.iter().flat_map(|(o, d)| {
            d.runs
                .iter()
                .enumerate()
                .map(move |(i, r)| (o.as_str(), i, r))
        }),
        out,
    )
}
