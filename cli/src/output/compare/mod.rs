//! Recorded runs lined up along one dimension (`compare --by`): the files
//! (different hosts, kernels, dates: the default), the modes, or the vCPU
//! counts. Each value of that dimension is a column, the baseline first;
//! every other dimension (file, workload and target wait, vCPUs, mode)
//! keys the rows. A cell with no run is explained, not just flagged: a
//! combination the sweep skipped shows its reason as a note; a warning is
//! only for a run that should be there (its column has the row's workload)
//! and is not, or one that did not complete. [`render`] writes the table.
mod render;

pub use render::render;

use ipivmm::results::metrics::Metric;
use ipivmm::results::summary::{summarize, RunSummary};
use ipivmm::results::{Document, SkippedMode};
use ipivmm::stats;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// How much a count per operation or per IPI may rise before
/// `--fail-on-regression` fails (`--count-tolerance`): 5%, relative.
pub const DEFAULT_COUNT_TOLERANCE: f64 = 0.05;

/// What the columns of a comparison are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum, strum::Display)]
#[strum(serialize_all = "kebab-case")]
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
    /// One column per APICv request (apicv-host, apicv-inhibit).
    Apicv,
    /// One column per host setting of a `sweep --host-param` (e.g. kvm_amd.avic=0, =1).
    HostParam,
}

impl Dimension {
    /// Every dimension.
    pub const ALL: [Dimension; 9] = [
        Dimension::File,
        Dimension::Mode,
        Dimension::Vcpus,
        Dimension::Target,
        Dimension::Irqchip,
        Dimension::Apic,
        Dimension::Ipi,
        Dimension::Apicv,
        Dimension::HostParam,
    ];
}

/// What a run is along every dimension but the file, as `compare` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunParts {
    /// The run's label (`RunReport::label`).
    pub label: String,
    /// Workload (or payload) without the target wait.
    pub workload: String,
    /// vCPUs.
    pub vcpus: usize,
    /// Target wait.
    pub target: String,
    /// Interrupt controller.
    pub irqchip: String,
    /// Guest APIC mode.
    pub apic: String,
    /// IPI path.
    pub ipi: String,
    /// `apicv-host` or `apicv-inhibit`.
    pub apicv: String,
    /// The `--host-param` setting, or `host as it is`.
    pub host_param: String,
}

impl RunParts {
    /// The parts of `r`.
    pub fn of(r: &ipivmm::results::RunReport) -> Self {
        let m = &r.mode;
        Self {
            label: r.label(),
            workload: match &m.payload {
                Some(_) => format!("payload {}", m.workload_label()),
                None => m.workload_label(),
            },
            vcpus: m.vcpus,
            target: m.target.name().to_string(),
            irqchip: m.irqchip.name().to_string(),
            apic: m.apic.name().to_string(),
            ipi: m.ipi.name().to_string(),
            apicv: format!("apicv-{}", r.apicv.requested),
            host_param: r
                .host_param
                .clone()
                .unwrap_or_else(|| "host as it is".into()),
        }
    }

    /// The value along `by` (None for the file, which is not a run's).
    pub fn value(&self, by: Dimension) -> Option<String> {
        Some(match by {
            Dimension::File => return None,
            Dimension::Mode => self.label.clone(),
            Dimension::Vcpus => self.vcpus.to_string(),
            Dimension::Target => self.target.clone(),
            Dimension::Irqchip => self.irqchip.clone(),
            Dimension::Apic => self.apic.clone(),
            Dimension::Ipi => self.ipi.clone(),
            Dimension::Apicv => self.apicv.clone(),
            Dimension::HostParam => self.host_param.clone(),
        })
    }

    /// The label with the part `by` stands for taken out (`*` in the
    /// mode's `irqchip/apic/ipi`), so the runs that differ only there
    /// share a row.
    fn label_without(&self, by: Dimension) -> String {
        let mut words: Vec<String> = self.label.split_whitespace().map(String::from).collect();
        match by {
            Dimension::Irqchip | Dimension::Apic | Dimension::Ipi => {
                if let Some(first) = words.first_mut() {
                    let mut parts: Vec<&str> = first.split('/').collect();
                    let i = match by {
                        Dimension::Irqchip => 0,
                        Dimension::Apic => 1,
                        _ => 2,
                    };
                    if let Some(p) = parts.get_mut(i) {
                        *p = "*";
                    }
                    *first = parts.join("/");
                }
            }
            Dimension::Apicv => words.retain(|w| w != "apicv-inhibit"),
            Dimension::HostParam => words.retain(|w| *w != self.host_param),
            _ => {}
        }
        words.join(" ")
    }
}

/// The rows' values of the dimensions that are not columns.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    /// Workload (or custom payload) and target wait, e.g. `broadcast, target halt`.
    pub workload: String,
    /// File (when the columns are not files).
    pub file: Option<String>,
    /// vCPUs (when the columns are not vCPU counts).
    pub vcpus: Option<usize>,
    /// Mode label (when the columns are not modes); the repeats of a
    /// combination in one file share it (one cell).
    pub mode: Option<String>,
}

impl std::fmt::Display for RowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.workload)?;
        if let Some(n) = self.vcpus {
            write!(f, ", {n} vCPU{}", if n == 1 { "" } else { "s" })?;
        }
        if let Some(m) = &self.mode {
            write!(f, " / {m}")?;
        }
        if let Some(file) = &self.file {
            write!(f, " ({file})")?;
        }
        Ok(())
    }
}

/// One row: the runs of each column (the repeats of one configuration),
/// if it has any.
#[derive(Clone, Debug)]
pub struct Row {
    /// What the row holds fixed.
    pub key: RowKey,
    /// Per column, in column order (baseline first): its first run.
    pub cells: Vec<Option<RunSummary>>,
    /// Per column: every run of the cell (its repeats), in file order.
    pub repeats: Vec<Vec<RunSummary>>,
    /// Per column: the host load each repeat recorded.
    pub loads: Vec<Vec<stats::HostLoad>>,
    /// Per column: why the cell is empty, when the file recorded a skip.
    pub skipped: Vec<Option<String>>,
}

/// The gate's reading of one figure of one column against the baseline.
#[derive(Clone, Debug, PartialEq)]
pub enum Judged {
    /// A latency figure (or a ratio), judged by the rank test.
    Figure(stats::Judgement),
    /// A count (exits, ICR-write exits per IPI): the medians' ratio, and
    /// whether it went up beyond the count tolerance. `exact` when every
    /// repeat of both columns gave the same count (no test needed);
    /// otherwise the rise must also be significant, and too few repeats
    /// leave it unjudged (`inconclusive`).
    Count {
        /// Median of the column over median of the baseline.
        ratio: f64,
        /// Every repeat agreed on both sides.
        exact: bool,
        /// Higher beyond the tolerance (and significant where not exact).
        regression: bool,
        /// Why it could not be judged, when it could not.
        inconclusive: Option<String>,
    },
}

impl Judged {
    /// Why nothing could be said, if so.
    pub fn inconclusive(&self) -> Option<&str> {
        match self {
            Judged::Figure(j) => (j.verdict == stats::Verdict::Inconclusive)
                .then(|| j.why.as_deref().unwrap_or("inconclusive")),
            Judged::Count { inconclusive, .. } => inconclusive.as_deref(),
        }
    }

    /// One line for the gate's output.
    pub fn line(&self) -> String {
        match self {
            Judged::Figure(j) => j.line(),
            Judged::Count {
                ratio,
                exact,
                inconclusive,
                ..
            } => {
                let how = if *exact {
                    "exact counts"
                } else {
                    "counts that differ between repeats"
                };
                match inconclusive {
                    Some(why) => format!("×{ratio:.2} ({how}): inconclusive ({why})"),
                    None => format!("×{ratio:.2} ({how})"),
                }
            }
        }
    }
}

impl Row {
    /// The run of column `col` when it completed (its first repeat).
    pub fn measured(&self, col: usize) -> Option<&RunSummary> {
        self.cells.get(col)?.as_ref().filter(|s| s.completed)
    }

    /// `metric` of each completed repeat of column `col`.
    pub fn values(&self, metric: Metric, col: usize) -> Vec<f64> {
        self.repeats
            .get(col)
            .map(|runs| {
                runs.iter()
                    .filter(|s| s.completed)
                    .filter_map(|s| metric.value(s))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `metric` of column `col`: the median over its repeats (the one
    /// run's figure when it has one).
    pub fn value(&self, metric: Metric, col: usize) -> Option<f64> {
        stats::median(&self.values(metric, col))
    }

    /// `metric` of column `col` divided by the baseline's (column 0): the
    /// ratio of their medians over repeats.
    pub fn ratio(&self, metric: Metric, col: usize) -> Option<f64> {
        let base = self.value(metric, 0)?;
        let v = self.value(metric, col)?;
        (base > 0.0).then(|| v / base)
    }

    /// Column `col` against the baseline for `metric` (higher is worse):
    /// a latency figure by the rank test at `threshold`, a count against
    /// `count_tolerance` (a fraction). None where either has no figure.
    pub fn judge(
        &self,
        metric: Metric,
        col: usize,
        threshold: f64,
        count_tolerance: f64,
    ) -> Option<Judged> {
        let (base, new) = (self.values(metric, 0), self.values(metric, col));
        if base.is_empty() || new.is_empty() || col == 0 {
            return None;
        }
        if !metric.is_count() {
            let mut j = stats::judge(&base, &new, threshold)?;
            // A difference may be the host's when the side that measured
            // slower did so while other work took the host's CPUs: said,
            // not judged. (Load only slows a run down: the faster side's
            // load cannot explain the difference.)
            let slower = match j.verdict {
                stats::Verdict::Slower => Some(col),
                stats::Verdict::Faster => Some(0),
                _ => None,
            };
            if let Some(c) = slower {
                let busy: Vec<String> = self
                    .loads
                    .get(c)
                    .into_iter()
                    .flatten()
                    .flat_map(stats::load_instabilities)
                    .map(|i| i.to_string())
                    .collect();
                if let Some(first) = busy.first() {
                    j.verdict = stats::Verdict::Inconclusive;
                    j.why = Some(format!(
                        "a difference, but measured on a busy host ({first}); rerun on a quiet host or interleave the two"
                    ));
                }
            }
            return Some(Judged::Figure(j));
        }
        let ratio = self.ratio(metric, col)?;
        let same = |v: &[f64]| v.iter().all(|x| (x - v[0]).abs() <= 1e-9);
        let exact = same(&base) && same(&new);
        let beyond = ratio > 1.0 + count_tolerance + 1e-9;
        if exact {
            return Some(Judged::Count {
                ratio,
                exact,
                regression: beyond,
                inconclusive: None,
            });
        }
        if stats::min_p(base.len(), new.len()) > stats::ALPHA {
            return Some(Judged::Count {
                ratio,
                exact,
                regression: false,
                inconclusive: Some(format!(
                    "the counts differ between repeats and {} vs {} repeats cannot show a change at 95%; at least {} each (--repeat)",
                    base.len(),
                    new.len(),
                    stats::MIN_REPEATS
                )),
            });
        }
        let significant = stats::mann_whitney(&base, &new).is_some_and(|t| t.p < stats::ALPHA);
        Some(Judged::Count {
            ratio,
            exact,
            regression: beyond && significant,
            inconclusive: None,
        })
    }

    /// The metrics the row shows ([`Metric::shown`]).
    ///
    /// [`Metric::shown`]: ipivmm::results::metrics::Metric::shown
    pub fn metrics(&self) -> &'static [ipivmm::results::metrics::Metric] {
        ipivmm::results::metrics::Metric::shown(
            self.cells
                .iter()
                .flatten()
                .filter_map(|s| s.ipis_per_operation()),
        )
    }

    /// What one operation of the row is (a round trip, a broadcast...).
    pub fn operation(&self) -> &'static str {
        self.cells
            .iter()
            .flatten()
            .map(|s| s.operation)
            .next()
            .unwrap_or("op")
    }
}

/// The comparison of several documents.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// What the columns are.
    pub by: Dimension,
    /// Column values (file names, mode labels or vCPU counts), baseline first.
    pub columns: Vec<String>,
    /// Each file and one line describing its host, in input order.
    pub files: Vec<(String, String)>,
    /// Rows in order of first appearance.
    pub rows: Vec<Row>,
    /// Runs that did not complete, `<row> in column <col>`: their cells
    /// show no figure and take part in no ratio (said before the table).
    pub incomplete: Vec<String>,
    /// Warnings: runs that should be there and are not; plus a hint when
    /// no row has two columns to compare.
    pub flags: Vec<String>,
    /// Notes: cells the files recorded as skipped, grouped by reason.
    pub notes: Vec<String>,
}

/// What `compare --fail-on-regression` found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gate {
    /// Figures compared (a column and the baseline both had them).
    pub compared: usize,
    /// Of those, the ones that could be judged.
    pub judged: usize,
    /// Significant regressions beyond the threshold (counts: beyond their
    /// tolerance), one line each.
    pub regressions: Vec<String>,
    /// Figures that could not be judged, one line each with the reason.
    pub inconclusive: Vec<String>,
}

impl Comparison {
    /// Every figure where higher is worse, each column against the
    /// baseline: latency figures regress when significantly higher
    /// (p < 0.05) **and** by `threshold` or more; counts when higher by
    /// more than `count_tolerance` (exactly, where every repeat agrees;
    /// else significantly too). What `compare --fail-on-regression` reads.
    pub fn gate(&self, threshold: f64, count_tolerance: f64) -> Gate {
        let mut g = Gate::default();
        for r in &self.rows {
            for &m in r.metrics().iter().filter(|m| m.higher_is_worse()) {
                for col in 1..self.columns.len() {
                    let Some(j) = r.judge(m, col, threshold, count_tolerance) else {
                        continue;
                    };
                    g.compared += 1;
                    let what = format!(
                        "{} {}: {} against {}",
                        r.key,
                        m.name(r.operation()),
                        render::column_header(self, col),
                        render::column_header(self, 0),
                    );
                    if let Some(why) = j.inconclusive() {
                        g.inconclusive.push(format!("{what}: {why}"));
                        continue;
                    }
                    g.judged += 1;
                    let regression = match &j {
                        Judged::Figure(f) => f
                            .is_regression(threshold)
                            .then(|| format!("{} (threshold {:.0}%)", f.line(), threshold * 100.0)),
                        Judged::Count {
                            regression: true, ..
                        } => Some(format!(
                            "{} (count tolerance {:.0}%)",
                            j.line(),
                            count_tolerance * 100.0
                        )),
                        Judged::Count { .. } => None,
                    };
                    if let Some(line) = regression {
                        g.regressions.push(format!("{what}: {line}"));
                    }
                }
            }
        }
        g
    }

    /// The regressions of [`Comparison::gate`], one line each.
    pub fn regressions(&self, threshold: f64, count_tolerance: f64) -> Vec<String> {
        self.gate(threshold, count_tolerance).regressions
    }
}

/// A baseline that names no column.
#[derive(Debug, thiserror::Error)]
#[error("--baseline {wanted}: no {by} of that name; the {by} values are: {}", .values.join(", "))]
pub struct BaselineError {
    wanted: String,
    by: Dimension,
    values: Vec<String>,
}

/// What a comparison keeps of one document: its host line, its skips and
/// a summary per run, not the runs themselves, so that `compare` holds one
/// document at a time however many it reads (issue 20, case 17).
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The host the document describes, in one line.
    pub host: String,
    /// The combinations it skipped.
    pub skipped: Vec<SkippedMode>,
    /// Each run's summary, in the document's order.
    pub runs: Vec<RunSummary>,
    /// Each run's parts, in the same order.
    pub parts: Vec<RunParts>,
    /// What else the host did during each run, in the same order.
    pub loads: Vec<Option<stats::HostLoad>>,
}

impl Recorded {
    /// The parts of `d` a comparison uses.
    pub fn of(d: &Document) -> Self {
        Self {
            host: host_line(d),
            skipped: d.skipped.clone(),
            runs: d.runs.iter().map(summarize).collect(),
            parts: d.runs.iter().map(RunParts::of).collect(),
            loads: d.runs.iter().map(|r| r.host_load).collect(),
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
    let _ = write!(s, ", ipivmm {}", d.ipivmm_version);
    if let Some(t) = d.recorded_at {
        let _ = write!(s, ", recorded at {}", crate::output::iso_time(t));
    }
    s
}

/// A summarized run placed in the comparison.
struct Placed {
    key: RowKey,
    column: String,
    file: usize,
    summary: RunSummary,
    load: Option<stats::HostLoad>,
}

fn workload_of(s: &RunSummary) -> String {
    if s.group.payload {
        format!("payload {}", s.group.workload)
    } else {
        format!("{}, target {}", s.group.workload, s.group.target)
    }
}

/// Every run of every document with its row key and column value; the
/// runs of a combination repeated in one file (`--repeat`) share them:
/// they are the repeats of one cell.
fn place(docs: &[(String, Recorded)], by: Dimension) -> Vec<Placed> {
    let mut out: Vec<Placed> = Vec::new();
    for (fi, (name, d)) in docs.iter().enumerate() {
        for ((s, parts), load) in d.runs.iter().zip(&d.parts).zip(&d.loads) {
            let s = s.clone();
            let (workload, vcpus, label) = (workload_of(&s), s.group.vcpus, s.mode.clone());
            let (column, key) = match by {
                Dimension::File => (
                    name.clone(),
                    RowKey {
                        workload,
                        file: None,
                        vcpus: Some(vcpus),
                        mode: Some(label),
                    },
                ),
                Dimension::Mode => (
                    label,
                    RowKey {
                        workload,
                        file: Some(name.clone()),
                        vcpus: Some(vcpus),
                        mode: None,
                    },
                ),
                Dimension::Vcpus => (
                    vcpus.to_string(),
                    RowKey {
                        workload,
                        file: Some(name.clone()),
                        vcpus: None,
                        mode: Some(label),
                    },
                ),
                Dimension::Target => (
                    parts.target.clone(),
                    RowKey {
                        workload: parts.workload.clone(),
                        file: Some(name.clone()),
                        vcpus: Some(vcpus),
                        mode: Some(label),
                    },
                ),
                part => (
                    parts.value(part).unwrap_or_default(),
                    RowKey {
                        workload,
                        file: Some(name.clone()),
                        vcpus: Some(vcpus),
                        mode: Some(parts.label_without(part)),
                    },
                ),
            };
            out.push(Placed {
                key,
                column,
                file: fi,
                summary: s,
                load: *load,
            });
        }
    }
    merge_files(&mut out);
    out
}

/// Drops the file from the row keys when no cell would hold runs of two
/// files: then modes (or vCPU counts) recorded in separate files line up.
fn merge_files(placed: &mut [Placed]) {
    let bare = |p: &Placed| RowKey {
        file: None,
        ..p.key.clone()
    };
    // The file of the first run of each (column, bare key): a second file
    // in one such cell is a clash.
    let mut first_file: HashMap<(&str, RowKey), usize> = HashMap::new();
    let clash = placed.iter().any(|a| {
        let f = *first_file
            .entry((a.column.as_str(), bare(a)))
            .or_insert(a.file);
        f != a.file
    });
    if !clash {
        for p in placed.iter_mut() {
            p.key.file = None;
        }
    }
}

/// The column values in order: files as given, modes as first seen, vCPU
/// counts ascending.
fn columns(docs: &[(String, Recorded)], placed: &[Placed], by: Dimension) -> Vec<String> {
    let mut cols: Vec<String> = match by {
        Dimension::File => docs.iter().map(|(n, _)| n.clone()).collect(),
        _ => {
            let mut c: Vec<String> = Vec::new();
            let mut seen = HashSet::new();
            for p in placed {
                if seen.insert(p.column.as_str()) {
                    c.push(p.column.clone());
                }
            }
            c
        }
    };
    if by == Dimension::Vcpus {
        cols.sort_by_key(|c| c.parse::<usize>().unwrap_or(usize::MAX));
    }
    cols
}

/// Why `file` recorded no run for `key` in column `col`, if it skipped it
/// (skips are labelled `workload Nv mode-label [setting]`).
fn skip_reason(
    skipped: &[SkippedMode],
    by: Dimension,
    key: &RowKey,
    col: &str,
    workload: &str,
) -> Option<String> {
    let vcpus = match by {
        Dimension::Vcpus => col.parse().ok()?,
        _ => key.vcpus?,
    };
    let mode = match by {
        Dimension::Mode => col,
        _ => key.mode.as_deref()?,
    };
    let prefix = format!("{workload} {vcpus}v ");
    skipped.iter().find_map(|s| {
        let rest = s.mode.strip_prefix(&prefix)?;
        (rest == mode || mode.starts_with(rest) || rest.starts_with(mode)).then(|| s.reason.clone())
    })
}

/// Lines up `docs` (name, document) by `by`; the baseline column is
/// `baseline` when given (a file name, mode label or vCPU count), else the
/// first.
pub fn compare_by(
    docs: &[(String, Document)],
    by: Dimension,
    baseline: Option<&str>,
) -> Result<Comparison, BaselineError> {
    let recorded: Vec<(String, Recorded)> = docs
        .iter()
        .map(|(n, d)| (n.clone(), Recorded::of(d)))
        .collect();
    compare_recorded(&recorded, by, baseline)
}

/// [`compare_by`] of documents already reduced to what a comparison keeps
/// ([`Recorded`]): what `ipivmm compare` uses, one document in memory at a
/// time.
pub fn compare_recorded(
    docs: &[(String, Recorded)],
    by: Dimension,
    baseline: Option<&str>,
) -> Result<Comparison, BaselineError> {
    let placed = place(docs, by);
    let mut cols = columns(docs, &placed, by);
    if let Some(b) = baseline {
        let Some(i) = cols.iter().position(|c| c == b) else {
            return Err(BaselineError {
                wanted: b.to_string(),
                by,
                values: cols,
            });
        };
        let c = cols.remove(i);
        cols.insert(0, c);
    }
    Ok(line_up(docs, by, &placed, cols))
}

/// Lines up `docs` by file, the first the baseline.
pub fn compare(docs: &[(String, Document)]) -> Comparison {
    // The file columns always exist, so no baseline can be missing.
    compare_by(docs, Dimension::File, None).unwrap_or_else(|_| unreachable!())
}

/// The column of a placed run: its file's (a file given twice is two
/// columns), else the one of its value.
fn column_of(p: &Placed, by: Dimension, columns: &[String]) -> usize {
    match by {
        Dimension::File => p.file,
        _ => columns.iter().position(|c| *c == p.column).unwrap_or(0),
    }
}

/// Why no row has two columns, and what to compare by instead: the
/// dimensions along which the runs do differ (besides `by`).
fn no_pairs_hint(docs: &[(String, Recorded)], by: Dimension) -> String {
    let parts: Vec<&RunParts> = docs.iter().flat_map(|(_, d)| &d.parts).collect();
    let differ: Vec<Dimension> = Dimension::ALL
        .into_iter()
        .filter(|d| *d != by && *d != Dimension::Mode)
        .filter(|d| match d {
            Dimension::File => docs.len() > 1,
            _ => {
                let mut values: Vec<Option<String>> = parts.iter().map(|p| p.value(*d)).collect();
                values.sort();
                values.dedup();
                values.len() > 1
            }
        })
        .collect();
    let names: Vec<String> = differ.iter().map(|d| d.to_string()).collect();
    match differ.len() {
        0 => format!("no row has runs in two columns, so nothing is compared: the runs differ in the {by} only where their other dimensions differ too"),
        1 => format!(
            "no row has runs in two columns, so nothing is compared: the runs differ in their {}: try --by {}",
            names[0], names[0]
        ),
        _ => format!(
            "no row has runs in two columns, so nothing is compared: the runs differ in {} at once, so no single --by lines them up (try --by {} to see each)",
            names.join(", "),
            names.join(" or --by ")
        ),
    }
}

/// The rows of `placed` in `columns`, with the flags and notes of the empty cells.
fn line_up(
    docs: &[(String, Recorded)],
    by: Dimension,
    placed: &[Placed],
    columns: Vec<String>,
) -> Comparison {
    let n = columns.len();
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of: HashMap<RowKey, usize> = HashMap::new();
    let mut flags = Vec::new();
    let mut incomplete = Vec::new();
    // (column, workload) and (column, workload, file) of every placed run:
    // whether a column measured a workload at all.
    let file_index: HashMap<&str, usize> = docs
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.as_str(), i))
        .collect();
    let mut measured: HashSet<(usize, &str)> = HashSet::new();
    let mut measured_in: HashSet<(usize, &str, &str)> = HashSet::new();
    for p in placed {
        let col = column_of(p, by, &columns);
        measured.insert((col, p.key.workload.as_str()));
        measured_in.insert((col, p.key.workload.as_str(), docs[p.file].0.as_str()));
    }
    for p in placed {
        let col = column_of(p, by, &columns);
        if !p.summary.completed {
            incomplete.push(format!("{} in column {}", p.key, columns[col]));
        }
        let i = *row_of.entry(p.key.clone()).or_insert_with(|| {
            rows.push(Row {
                key: p.key.clone(),
                cells: vec![None; n],
                repeats: vec![Vec::new(); n],
                loads: vec![Vec::new(); n],
                skipped: vec![None; n],
            });
            rows.len() - 1
        });
        if rows[i].cells[col].is_none() {
            rows[i].cells[col] = Some(p.summary.clone());
        }
        rows[i].repeats[col].push(p.summary.clone());
        rows[i].loads[col].extend(p.load);
    }
    let mut notes: Vec<(String, Vec<String>)> = Vec::new();
    let mut whole: Vec<String> = Vec::new();
    for r in &mut rows {
        let workload = r
            .cells
            .iter()
            .flatten()
            .next()
            .map(|s| s.group.workload.clone());
        for (ci, col) in columns.iter().enumerate() {
            if r.cells[ci].is_some() {
                continue;
            }
            // The files that could hold this cell.
            let files: Vec<usize> = match (by, &r.key.file) {
                (Dimension::File, _) => vec![ci],
                (_, Some(f)) => file_index.get(f.as_str()).copied().into_iter().collect(),
                (_, None) => (0..docs.len()).collect(),
            };
            let reason = workload.as_deref().and_then(|w| {
                files
                    .iter()
                    .find_map(|&f| skip_reason(&docs[f].1.skipped, by, &r.key, col, w))
            });
            if let Some(reason) = reason {
                r.skipped[ci] = Some(reason.clone());
                let what = format!("{} in column {col}", r.key);
                match notes.iter_mut().find(|(x, _)| *x == reason) {
                    Some((_, v)) => v.push(what),
                    None => notes.push((reason, vec![what])),
                }
                continue;
            }
            // Whether the column measured this workload at all (same file
            // when the rows are per file).
            let has_workload = match &r.key.file {
                Some(f) => measured_in.contains(&(ci, r.key.workload.as_str(), f.as_str())),
                None => measured.contains(&(ci, r.key.workload.as_str())),
            };
            if has_workload {
                flags.push(format!("{}: missing in column {col}", r.key));
            } else {
                let w = format!("{} not in column {col}", r.key.workload);
                if !whole.contains(&w) {
                    whole.push(w);
                }
            }
        }
    }
    flags.extend(whole);
    if n > 1 && rows.iter().all(|r| r.cells.iter().flatten().count() < 2) {
        // Every cell would be flagged: say why once instead.
        flags.clear();
        flags.push(no_pairs_hint(docs, by));
    }
    Comparison {
        by,
        columns,
        files: docs
            .iter()
            .map(|(n, d)| (n.clone(), d.host.clone()))
            .collect(),
        rows,
        incomplete,
        flags,
        notes: notes
            .into_iter()
            .map(|(reason, what)| format!("skipped ({reason}): {}", what.join("; ")))
            .collect(),
    }
}
