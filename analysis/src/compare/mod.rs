//! Recorded runs lined up along one dimension (`compare --by`): the files
//! (recordings of different hosts, kernels, dates: the default), or one
//! part of the configuration ([`Dimension`]). Each value of the dimension
//! is a column, the baseline first; rows are configurations
//! ([`ConfigId`]) with the dimension's parts taken out, so the runs that
//! differ only there share a row. A cell holds the repeats of its row and
//! column; a cell with no run says why (the file skipped it, or it is
//! missing). [`judge`] gates the comparison; the front end renders it.
//!
//! With `--by file`, the baseline column may hold several files: several
//! recordings of the baseline, whose spread between recordings the gate
//! then measures (drift) instead of assuming none.
pub mod judge;

pub use judge::{Endpoint, GateOptions, GateReport};

use crate::mode::Lever;
use crate::results::identity::{ConfigId, Field};
use crate::results::summary::RunSummary;
use crate::results::{Document, SkippedMode};
use crate::stats::HostLoad;
use crate::Error;
use std::collections::HashMap;

/// What the columns of a comparison are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Dimension {
    /// One column per file: hosts, kernels, dates side by side.
    #[default]
    File,
    /// One column per mode label (levers and host setting included).
    Mode,
    /// One column per vCPU count: how a figure grows with N.
    Vcpus,
    /// One column per target wait (spin, halt, halt-immediate).
    Target,
    /// One column per interrupt controller (kernel, split, user).
    Irqchip,
    /// One column per guest APIC mode (xapic, x2apic).
    Apic,
    /// One column per IPI path (icr, pv).
    Ipi,
    /// One column per APICv request (host, inhibit).
    Apicv,
    /// One column per value of a lever (`--by poll`: poll:host, poll:0).
    Lever(Lever),
    /// One column per host setting of a `sweep --host-param` (e.g. kvm_amd.avic=0, =1).
    HostParam,
}

/// The dimensions before the levers.
const HEAD: [Dimension; 8] = [
    Dimension::File,
    Dimension::Mode,
    Dimension::Vcpus,
    Dimension::Target,
    Dimension::Irqchip,
    Dimension::Apic,
    Dimension::Ipi,
    Dimension::Apicv,
];

/// The field of each lever dimension (a slice of one to return).
static LEVER_FIELDS: [Field; Lever::COUNT] = Field::LEVERS;

impl Dimension {
    /// Every dimension: the mode's parts, every lever, the host setting.
    pub const ALL: [Dimension; 9 + Lever::COUNT] = {
        let mut all = [Dimension::HostParam; 9 + Lever::COUNT];
        let mut i = 0;
        while i < HEAD.len() {
            all[i] = HEAD[i];
            i += 1;
        }
        while i < HEAD.len() + Lever::COUNT {
            all[i] = Dimension::Lever(Lever::ALL[i - HEAD.len()]);
            i += 1;
        }
        all
    };

    /// Its name (`--by NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Dimension::File => "file",
            Dimension::Mode => "mode",
            Dimension::Lever(l) => l.name(),
            d => d.fields()[0].name(),
        }
    }

    /// What its columns are, for `--help`.
    pub fn help(self) -> String {
        match self {
            Dimension::File => "One column per file: hosts, kernels, dates side by side".into(),
            Dimension::Mode => {
                "One column per mode label (levers and host setting included)".into()
            }
            Dimension::Vcpus => "One column per vCPU count: how a figure grows with N".into(),
            Dimension::Target => "One column per target wait (spin, halt, halt-immediate)".into(),
            Dimension::Irqchip => {
                "One column per interrupt controller (kernel, split, user)".into()
            }
            Dimension::Apic => "One column per guest APIC mode (xapic, x2apic)".into(),
            Dimension::Ipi => "One column per IPI path (icr, pv)".into(),
            Dimension::Apicv => "One column per APICv request (host, inhibit)".into(),
            Dimension::Lever(l) => format!("One column per value of a lever: {}", l.row().help),
            Dimension::HostParam => {
                "One column per host setting of a `sweep --host-param` (e.g. kvm_amd.avic=0, =1)"
                    .into()
            }
        }
    }

    /// The configuration fields its columns differ in (none for files).
    pub fn fields(self) -> &'static [Field] {
        match self {
            Dimension::File => &[],
            Dimension::Mode => &Field::MODE,
            Dimension::Vcpus => &[Field::Vcpus],
            Dimension::Target => &[Field::Target],
            Dimension::Irqchip => &[Field::Irqchip],
            Dimension::Apic => &[Field::Apic],
            Dimension::Ipi => &[Field::Ipi],
            Dimension::Apicv => &[Field::Apicv],
            Dimension::Lever(l) => std::slice::from_ref(&LEVER_FIELDS[l as usize]),
            Dimension::HostParam => &[Field::HostParam],
        }
    }

    /// The column value of configuration `id` (None for files).
    pub fn value(self, id: &ConfigId) -> Option<String> {
        match self {
            Dimension::File => None,
            Dimension::Mode => Some(id.label()),
            d => Some(id.value(d.fields()[0])),
        }
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(feature = "clap")]
impl clap::ValueEnum for Dimension {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

/// One run as a comparison keeps it.
#[derive(Clone, Debug)]
pub struct Repeat {
    /// Its summary (figures, configuration).
    pub summary: RunSummary,
    /// What else the host did meanwhile.
    pub load: Option<HostLoad>,
    /// The file (index in [`Comparison::files`]).
    pub file: usize,
    /// Its `repeat` index in that file.
    pub index: Option<u32>,
}

/// The runs of one row in one column.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    /// Every run, in file order.
    pub runs: Vec<Repeat>,
    /// Why the file(s) recorded no run, when they skipped it.
    pub skipped: Option<String>,
}

impl Cell {
    /// The runs that completed.
    pub fn completed(&self) -> impl Iterator<Item = &Repeat> {
        self.runs.iter().filter(|r| r.summary.completed)
    }
}

/// One row: a configuration with the dimension's fields taken out, and
/// (when the columns are not files and runs of several files would share
/// a cell) the file.
#[derive(Clone, Debug)]
pub struct Row {
    /// The configuration (the dimension's fields set to one shared value).
    pub id: ConfigId,
    /// The file, where rows are per file.
    pub file: Option<usize>,
    /// One cell per column, baseline first.
    pub cells: Vec<Cell>,
}

impl Row {
    /// What one operation of the row is (a round trip, a broadcast...).
    pub fn operation(&self) -> &'static str {
        self.cells
            .iter()
            .flat_map(|c| c.runs.first())
            .map(|r| r.summary.operation)
            .next()
            .unwrap_or("op")
    }

    /// The median over column `col`'s completed repeats of `metric`.
    pub fn median(&self, metric: crate::results::metrics::Metric, col: usize) -> Option<f64> {
        let v: Vec<f64> = self
            .summaries(col)
            .filter_map(|s| metric.value(s))
            .collect();
        crate::stats::median(&v)
    }

    /// [`Row::median`] of column `col` over the baseline's (column 0).
    pub fn ratio(&self, metric: crate::results::metrics::Metric, col: usize) -> Option<f64> {
        let base = self.median(metric, 0)?;
        let v = self.median(metric, col)?;
        (base > 0.0).then(|| v / base)
    }

    /// The summaries of the completed runs of column `col`.
    pub fn summaries(&self, col: usize) -> impl Iterator<Item = &RunSummary> {
        self.cells
            .get(col)
            .into_iter()
            .flat_map(|c| c.completed())
            .map(|r| &r.summary)
    }
}

/// One column: its value and the files it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The value (a file name, a mode label, a vCPU count...).
    pub name: String,
    /// With `--by file`: the files of this column (several for a
    /// baseline of several recordings).
    pub files: Vec<usize>,
}

/// A comparison of several documents.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// What the columns are.
    pub by: Dimension,
    /// Baseline first.
    pub columns: Vec<Column>,
    /// Each file's name and one line about its host, in input order.
    pub files: Vec<(String, String)>,
    /// When each file was written (Unix seconds), in input order.
    pub recorded_at: Vec<Option<u64>>,
    /// Files written by a command that did not finish (their `incomplete`).
    pub unfinished: Vec<(usize, String)>,
    /// Rows in order of first appearance.
    pub rows: Vec<Row>,
    /// Warnings: runs that should be there and are not; a hint when no row
    /// has two columns.
    pub flags: Vec<String>,
    /// Cells the files recorded as skipped, grouped by reason.
    pub notes: Vec<String>,
}

impl Comparison {
    /// The row label of `r`: its configuration with the dimension's fields
    /// shown as `*`, and its file where rows are per file.
    pub fn row_label(&self, r: &Row) -> String {
        let masked = self.by.fields();
        let show = |f: Field, v: String| if masked.contains(&f) { "*".into() } else { v };
        let id = &r.id;
        let workload = if masked.contains(&Field::Target) {
            format!("{}, target *", id.guest.name())
        } else {
            id.workload_label()
        };
        let vcpus = show(Field::Vcpus, id.vcpus.to_string());
        let mode = match self.by {
            Dimension::Mode => "*".to_string(),
            Dimension::Irqchip | Dimension::Apic | Dimension::Ipi => {
                let mut parts = [
                    show(Field::Irqchip, id.irqchip.name().into()),
                    show(Field::Apic, id.apic.name().into()),
                    show(Field::Ipi, id.ipi.name().into()),
                ]
                .join("/");
                let rest = id.label();
                if let Some((_, levers)) = rest.split_once(' ') {
                    parts.push(' ');
                    parts.push_str(levers);
                }
                parts
            }
            _ => id.label(),
        };
        let mut s = format!("{workload}, {vcpus} vCPUs / {mode}");
        if let Some(f) = r.file {
            s.push_str(&format!(" ([{}])", f + 1));
        }
        s
    }

    /// The columns' values, baseline first.
    pub fn names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.name.as_str()).collect()
    }

    /// The runs that did not complete, one line each.
    pub fn not_completed(&self) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.rows {
            for (ci, cell) in r.cells.iter().enumerate() {
                let n = cell.runs.iter().filter(|x| !x.summary.completed).count();
                if n > 0 {
                    out.push(format!(
                        "{} in column {}{}",
                        self.row_label(r),
                        self.column_header(ci),
                        if n > 1 {
                            format!(" ({n} runs)")
                        } else {
                            String::new()
                        }
                    ));
                }
            }
        }
        out
    }

    /// The column's header: `[k]` for files, `N=4` for vCPU counts.
    pub fn column_header(&self, i: usize) -> String {
        match self.by {
            Dimension::File => {
                let files: Vec<String> = self.columns[i]
                    .files
                    .iter()
                    .map(|f| format!("[{}]", f + 1))
                    .collect();
                files.join("+")
            }
            Dimension::Vcpus => format!("N={}", self.columns[i].name),
            _ => self.columns[i].name.clone(),
        }
    }
}

/// What a comparison keeps of one document: its host line, its skips and
/// a summary per run, not the runs themselves, so that `compare` holds one
/// document at a time however many it reads.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The host the document describes, in one line.
    pub host: String,
    /// The combinations it skipped.
    pub skipped: Vec<SkippedMode>,
    /// Each run's summary, in the document's order.
    pub runs: Vec<RunSummary>,
    /// What else the host did during each run, in the same order.
    pub loads: Vec<Option<HostLoad>>,
    /// Each run's repeat index, in the same order.
    pub repeats: Vec<Option<u32>>,
    /// The document's `incomplete`, when the command that wrote it did not
    /// finish.
    pub incomplete: Option<String>,
    /// When it was written (Unix seconds).
    pub recorded_at: Option<u64>,
    /// Each run's content fingerprint (`results::fingerprint`),
    /// in the same order: the same run twice is one recording, whatever
    /// the files' names.
    pub fingerprints: Vec<u64>,
}

impl Recorded {
    /// The parts of `d` a comparison uses.
    pub fn of(d: &Document) -> Self {
        Self {
            host: host_line(d),
            skipped: d.skipped.clone(),
            runs: d
                .runs
                .iter()
                .map(crate::results::RunReport::summary)
                .collect(),
            loads: d.runs.iter().map(|r| r.host_load).collect(),
            repeats: d.runs.iter().map(|r| r.repeat).collect(),
            incomplete: d.incomplete.clone(),
            recorded_at: d.recorded_at,
            fingerprints: d.runs.iter().map(crate::results::fingerprint::of).collect(),
        }
    }
}

fn host_line(d: &Document) -> String {
    let mut s = match &d.host {
        Some(h) => format!(
            "{} ({}), kernel {}, backend {}",
            h.cpu_model, h.cpu_vendor, h.kernel_release, h.backend
        ),
        None => format!(
            "host unknown ({})",
            d.host_error.as_deref().unwrap_or("not recorded")
        ),
    };
    s.push_str(&format!(", ipivmm {}", d.ipivmm_version));
    s
}

/// Refuses the same run found twice among `docs` (a file given twice
/// under two paths, a copy, a link, a glob that matched both): counted
/// twice, one recording would pass for two, and its zero drift for
/// evidence.
fn check_distinct(docs: &[(String, Recorded)]) -> Result<(), Error> {
    let runs = docs.iter().flat_map(|(name, d)| {
        d.fingerprints
            .iter()
            .enumerate()
            .map(move |(i, fp)| (*fp, format!("{name} run {}", i + 1)))
    });
    match crate::results::fingerprint::first_twice(runs) {
        Some((first, second)) => Err(Error::SameRunTwice { first, second }),
        None => Ok(()),
    }
}

fn check_repeats(name: &str, d: &Recorded) -> Result<(), Error> {
    let mut seen: HashMap<(&ConfigId, u32), usize> = HashMap::new();
    for (i, (s, rep)) in d.runs.iter().zip(&d.repeats).enumerate() {
        let Some(rep) = rep else { continue };
        if let Some(first) = seen.insert((&s.id, *rep), i) {
            return Err(Error::DuplicateRepeat {
                file: name.to_string(),
                id: s.id.to_string(),
                index: rep + 1,
                first: first + 1,
                second: i + 1,
            });
        }
    }
    Ok(())
}

/// Which files form the baseline: those `baselines` names (a file as
/// given or its file name), else the first.
fn baseline_files(docs: &[(String, Recorded)], baselines: &[String]) -> Result<Vec<usize>, Error> {
    if baselines.is_empty() {
        return Ok(vec![0]);
    }
    let names: Vec<String> = docs.iter().map(|(n, _)| n.clone()).collect();
    let mut out = Vec::new();
    for b in baselines {
        // The file itself (by name as given, or the same file by another
        // path), never another file of the same base name.
        let found = names.iter().position(|n| n == b).or_else(|| {
            let want = std::fs::canonicalize(b).ok()?;
            names
                .iter()
                .position(|n| std::fs::canonicalize(n).ok().as_ref() == Some(&want))
        });
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            Some(_) => {}
            None => {
                return Err(Error::NoSuchBaseline {
                    wanted: b.clone(),
                    by: Dimension::File,
                    values: names,
                })
            }
        }
    }
    if out.len() == docs.len() {
        return Err(Error::NothingButBaselines);
    }
    Ok(out)
}

impl Comparison {
    /// Lines up `docs` (name, document) by `by` against `baselines` (files
    /// with `--by file`, else at most one column value; none: the first).
    pub fn by(
        docs: &[(String, Document)],
        by: Dimension,
        baselines: &[String],
    ) -> Result<Comparison, Error> {
        let recorded: Vec<(String, Recorded)> = docs
            .iter()
            .map(|(n, d)| (n.clone(), Recorded::of(d)))
            .collect();
        Comparison::of_recorded(&recorded, by, baselines)
    }
}

impl Comparison {
    /// Lines up `docs` by file, the first the baseline.
    pub fn of(docs: &[(String, Document)]) -> Result<Comparison, Error> {
        Comparison::by(docs, Dimension::File, &[])
    }
}

impl Comparison {
    /// [`Comparison::by`] of documents already reduced to what a comparison
    /// keeps ([`Recorded`]): what `ipivmm compare` uses, one document in
    /// memory at a time.
    pub fn of_recorded(
        docs: &[(String, Recorded)],
        by: Dimension,
        baselines: &[String],
    ) -> Result<Comparison, Error> {
        check_distinct(docs)?;
        for (name, d) in docs {
            check_repeats(name, d)?;
        }
        let columns = match by {
            Dimension::File => {
                let base = baseline_files(docs, baselines)?;
                let mut cols = vec![Column {
                    name: base
                        .iter()
                        .map(|i| docs[*i].0.clone())
                        .collect::<Vec<_>>()
                        .join(" + "),
                    files: base.clone(),
                }];
                cols.extend(
                    (0..docs.len())
                        .filter(|i| !base.contains(i))
                        .map(|i| Column {
                            name: docs[i].0.clone(),
                            files: vec![i],
                        }),
                );
                cols
            }
            _ => {
                if baselines.len() > 1 {
                    return Err(Error::SeveralBaselines(by));
                }
                value_columns(docs, by, baselines.first().map(String::as_str))?
            }
        };
        Ok(line_up(docs, by, columns))
    }
}

/// The column values along `by` in order (modes as first seen, vCPU
/// counts ascending), the baseline first.
fn value_columns(
    docs: &[(String, Recorded)],
    by: Dimension,
    baseline: Option<&str>,
) -> Result<Vec<Column>, Error> {
    let mut values: Vec<String> = Vec::new();
    for (_, d) in docs {
        for s in &d.runs {
            let v = by.value(&s.id).unwrap_or_default();
            if !values.contains(&v) {
                values.push(v);
            }
        }
    }
    if by == Dimension::Vcpus {
        values.sort_by_key(|c| c.parse::<usize>().unwrap_or(usize::MAX));
    }
    if let Some(b) = baseline {
        let Some(i) = values.iter().position(|c| c == b) else {
            return Err(Error::NoSuchBaseline {
                wanted: b.to_string(),
                by,
                values,
            });
        };
        let c = values.remove(i);
        values.insert(0, c);
    }
    Ok(values
        .into_iter()
        .map(|name| Column {
            name,
            files: Vec::new(),
        })
        .collect())
}

/// The column a run of file `file` with configuration `id` belongs to.
fn column_of(columns: &[Column], by: Dimension, file: usize, id: &ConfigId) -> Option<usize> {
    match by {
        Dimension::File => columns.iter().position(|c| c.files.contains(&file)),
        _ => {
            let v = by.value(id)?;
            columns.iter().position(|c| c.name == v)
        }
    }
}

fn line_up(docs: &[(String, Recorded)], by: Dimension, columns: Vec<Column>) -> Comparison {
    let masked = by.fields();
    let n = columns.len();
    // Rows are per file when two files would put runs in one cell (with
    // --by file, never: each file is its own column).
    let mut first_file: HashMap<(usize, ConfigId), usize> = HashMap::new();
    let mut clash = false;
    for (fi, (_, d)) in docs.iter().enumerate() {
        for s in &d.runs {
            let Some(col) = column_of(&columns, by, fi, &s.id) else {
                continue;
            };
            let key = (col, s.id.without(masked));
            let f = *first_file.entry(key).or_insert(fi);
            clash |= by != Dimension::File && f != fi;
        }
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of: HashMap<(ConfigId, Option<usize>), usize> = HashMap::new();
    for (fi, (_, d)) in docs.iter().enumerate() {
        for ((s, load), index) in d.runs.iter().zip(&d.loads).zip(&d.repeats) {
            let Some(col) = column_of(&columns, by, fi, &s.id) else {
                continue;
            };
            let key = (s.id.without(masked), clash.then_some(fi));
            let i = *row_of.entry(key.clone()).or_insert_with(|| {
                rows.push(Row {
                    id: key.0.clone(),
                    file: key.1,
                    cells: vec![Cell::default(); n],
                });
                rows.len() - 1
            });
            rows[i].cells[col].runs.push(Repeat {
                summary: s.clone(),
                load: *load,
                file: fi,
                index: *index,
            });
        }
    }
    let mut flags = Vec::new();
    let mut notes: Vec<(String, Vec<String>)> = Vec::new();
    let mut c = Comparison {
        by,
        columns,
        files: docs
            .iter()
            .map(|(n, d)| (n.clone(), d.host.clone()))
            .collect(),
        recorded_at: docs.iter().map(|(_, d)| d.recorded_at).collect(),
        unfinished: docs
            .iter()
            .enumerate()
            .filter_map(|(i, (_, d))| d.incomplete.clone().map(|w| (i, w)))
            .collect(),
        rows: Vec::new(),
        flags: Vec::new(),
        notes: Vec::new(),
    };
    for r in &mut rows {
        for ci in 0..n {
            if !r.cells[ci].runs.is_empty() {
                continue;
            }
            let files: Vec<usize> = match (by, r.file) {
                (Dimension::File, _) => c.columns[ci].files.clone(),
                (_, Some(f)) => vec![f],
                (_, None) => (0..docs.len()).collect(),
            };
            let reason = files
                .iter()
                .find_map(|&f| skip_reason(&docs[f].1.skipped, by, &r.id, &c.columns[ci].name));
            let what = format!("{} in column {}", row_text(&c, r), c.column_header(ci));
            match reason {
                Some(reason) => {
                    r.cells[ci].skipped = Some(reason.clone());
                    match notes.iter_mut().find(|(x, _)| *x == reason) {
                        Some((_, v)) => v.push(what),
                        None => notes.push((reason, vec![what])),
                    }
                }
                None => flags.push(format!("{what}: missing")),
            }
        }
    }
    if n > 1
        && rows
            .iter()
            .all(|r| r.cells.iter().filter(|c| !c.runs.is_empty()).count() < 2)
    {
        flags.clear();
        flags.push(no_pairs_hint(docs, by));
    }
    c.rows = rows;
    c.flags = flags;
    c.notes = notes
        .into_iter()
        .map(|(reason, what)| format!("skipped ({reason}): {}", what.join("; ")))
        .collect();
    c
}

fn row_text(c: &Comparison, r: &Row) -> String {
    c.row_label(r)
}

/// Why a file recorded no run for row `id` in the column valued `col`:
/// the skip whose configuration matches (by its typed identity; files
/// written before skips carried one are matched by their label).
fn skip_reason(skipped: &[SkippedMode], by: Dimension, id: &ConfigId, col: &str) -> Option<String> {
    let masked = by.fields();
    skipped.iter().find_map(|s| {
        let matches = match &s.id {
            Some(sid) => {
                sid.without(masked) == *id
                    && (by == Dimension::File || by.value(sid).as_deref() == Some(col))
            }
            // A file written before skips carried their configuration: its
            // skip label is `workload Nv label`, matched whole.
            None => {
                let (vcpus, label) = match by {
                    Dimension::File => (id.vcpus.to_string(), id.label()),
                    Dimension::Vcpus => (col.to_string(), id.label()),
                    Dimension::Mode => (id.vcpus.to_string(), col.to_string()),
                    _ => return None,
                };
                s.mode == format!("{} {vcpus}v {label}", id.guest.name())
            }
        };
        matches.then(|| s.reason.clone())
    })
}

/// Why no row has two columns, and what to compare by instead.
fn no_pairs_hint(docs: &[(String, Recorded)], by: Dimension) -> String {
    let ids: Vec<&ConfigId> = docs
        .iter()
        .flat_map(|(_, d)| &d.runs)
        .map(|s| &s.id)
        .collect();
    let differ: Vec<Dimension> = Dimension::ALL
        .into_iter()
        .filter(|d| *d != by && *d != Dimension::Mode)
        .filter(|d| match d {
            Dimension::File => docs.len() > 1,
            _ => {
                let mut values: Vec<Option<String>> = ids.iter().map(|i| d.value(i)).collect();
                values.sort();
                values.dedup();
                values.len() > 1
            }
        })
        .collect();
    let names: Vec<String> = differ.iter().map(|d| d.to_string()).collect();
    let head = "no row has runs in two columns, so nothing is compared";
    match differ.len() {
        0 => format!("{head}: the runs differ in the {by} only where other parts differ too"),
        1 => format!(
            "{head}: the runs differ in their {0}: try --by {0}",
            names[0]
        ),
        _ => format!(
            "{head}: the runs differ in {} at once (try --by {})",
            names.join(", "),
            names.join(" or --by ")
        ),
    }
}
