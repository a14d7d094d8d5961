//! The gate over a comparison: every gated figure of every row of the
//! baseline, in every other column, becomes an endpoint of one family
//! ([`crate::gate`]). Nothing of the baseline drops out: a configuration
//! the new side lacks, whose runs failed, or that was measured on a busy
//! host is an endpoint with its outcome (failed, or undecided with the
//! reason), never a silent absence.
//!
//! Evidence per endpoint: the completed repeats of each side that have
//! the figure. A repeat run on a busy host (other processes above 25% of
//! the CPU time, or steal above 5%: [`crate::stats::HostLoad::instabilities`])
//! is left out of a latency figure (load slows it) but kept for a count
//! per operation or per IPI (load cannot change what the guest did), and
//! kept for latency too when [`GateOptions::keep_busy`] says so (a
//! permanently busy runner; a caveat says it).
//!
//! A baseline of several recordings (files) is compared as recordings
//! (their spread measures the drift between them); one recording a side
//! with a known drift (a matching host noise profile) adds that drift's
//! variance. Files of one recording a side with no profile carry no
//! evidence of the drift between recordings (log sd 0.07 measured here:
//! identical files would exit 1 on a fifth of pairs, a real +20% exit 0
//! on a tenth), so their latency figures are undecided with the fix;
//! their exact counts are still judged. Rows of one file compared along
//! another dimension ran interleaved and are compared as independent
//! repeats.
use super::{Comparison, Dimension, Repeat, Row};
use crate::gate::{self, Decision, Evidence, Family, Policy, Scale, Verdict};
use crate::results::metrics::Metric;

/// How a comparison is gated.
#[derive(Clone, Debug, PartialEq)]
pub struct GateOptions {
    /// Threshold, count tolerance, α.
    pub policy: Policy,
    /// The figures judged (the rest are reported only).
    pub gated: Vec<Metric>,
    /// The standard deviation of a latency figure's logarithm between
    /// recordings, when a host noise profile that matches the files
    /// measured it ([`crate::gate::profile::NoiseProfile::matches`]): the
    /// caller passes it only for a matching profile (or when told to use
    /// any).
    pub drift: Option<f64>,
    /// Keep repeats run on a busy host for latency figures too (they are
    /// always kept for counts), and say so in the caveats: for a runner
    /// that is never quiet, where leaving them out leaves nothing.
    pub keep_busy: bool,
}

impl GateOptions {
    /// The figures a gate judges unless told otherwise: the headline (cycles
    /// per operation, p50) and the counts per delivered IPI.
    pub const DEFAULT_GATED: [Metric; 3] = [
        Metric::CyclesPerOpP50,
        Metric::ExitsPerIpi,
        Metric::IcrExitsPerIpi,
    ];
}

impl Default for GateOptions {
    fn default() -> Self {
        Self {
            policy: gate::Policy::DEFAULT,
            gated: GateOptions::DEFAULT_GATED.to_vec(),
            drift: None,
            keep_busy: false,
        }
    }
}

/// One endpoint: a figure of a row in a column, against the baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// The row (index in [`Comparison::rows`]).
    pub row: usize,
    /// The column (≥ 1).
    pub column: usize,
    /// The figure.
    pub metric: Metric,
    /// What was left out of the evidence, and why (busy host, repeats
    /// without the figure).
    pub notes: Vec<String>,
}

/// A comparison gated.
#[derive(Clone, Debug, PartialEq)]
pub struct GateReport {
    /// The policy it was judged by.
    pub policy: Policy,
    /// Each endpoint, in row, column, figure order.
    pub endpoints: Vec<Endpoint>,
    /// Their judgements, in the same order, and the verdict.
    pub family: Family,
    /// What the verdict rests on that the data cannot show (drift
    /// assumed absent, a file that did not finish).
    pub caveats: Vec<String>,
}

impl GateReport {
    /// The verdict.
    pub fn verdict(&self) -> Verdict {
        self.family.verdict
    }

    /// The exit status of the verdict ([`Verdict::exit_code`]).
    pub fn exit_code(&self) -> u8 {
        self.family.verdict.exit_code()
    }
}

/// Why a latency figure of one recording a side is not decided.
const NO_DRIFT_EVIDENCE: &str =
    "one recording a side and no noise profile: nothing measures the drift between \
                                 recordings, which alone can make or hide a change of this size";
/// What decides it instead.
const DRIFT_FIX: &str =
    "several recordings (--baseline A --baseline B), a matching noise profile (ipivmm \
                         calibrate), or the live comparison (compare --run)";

/// Why a repeat's figure is left out, if it is.
fn busy(r: &Repeat) -> Option<String> {
    let load = r.load.as_ref()?;
    load.instabilities().first().map(|i| i.to_string())
}

/// One side of an endpoint: its usable figures per file, what was left
/// out and why, and how many of its repeats completed.
struct Side {
    by_file: Vec<(usize, Vec<f64>)>,
    notes: Vec<String>,
    completed: usize,
    /// Repeats run on a busy host (left out or kept).
    busy: usize,
}

/// The usable figures of `metric` in column `col` of `row`, per file,
/// with what was left out (busy repeats of a latency figure unless
/// `keep_busy`) or kept despite the load, and why.
fn side(row: &Row, col: usize, metric: Metric, keep_busy: bool) -> Side {
    let mut by_file: Vec<(usize, Vec<f64>)> = Vec::new();
    let (mut busy_n, mut missing, mut first_busy) = (0, 0, None);
    // Load slows a latency; it cannot change a count of what the guest did.
    let keep = keep_busy || metric.is_count();
    let cell = &row.cells[col];
    for r in cell.completed() {
        if let Some(why) = busy(r) {
            busy_n += 1;
            first_busy.get_or_insert(why);
            if !keep {
                continue;
            }
        }
        let v = metric
            .value(&r.summary)
            .filter(|v| v.is_finite() && (metric.is_count() || *v > 0.0));
        let Some(v) = v else {
            missing += 1;
            continue;
        };
        match by_file.iter_mut().find(|(f, _)| *f == r.file) {
            Some((_, vs)) => vs.push(v),
            None => by_file.push((r.file, vec![v])),
        }
    }
    let mut notes = Vec::new();
    let completed = cell.completed().count();
    if busy_n > 0 {
        let why = first_busy.unwrap_or_default();
        notes.push(if metric.is_count() {
            format!(
                "{busy_n} of {completed} repeats ran on a busy host ({why}), kept: load cannot change a count"
            )
        } else if keep_busy {
            format!("{busy_n} of {completed} repeats ran on a busy host ({why}), kept (keep busy repeats)")
        } else {
            format!("{busy_n} of {completed} repeats left out: run on a busy host ({why})")
        });
    }
    if missing > 0 {
        notes.push(format!(
            "{missing} of {completed} repeats left out: no {} (not measured, or 0)",
            metric.key()
        ));
    }
    Side {
        by_file,
        notes,
        completed,
        busy: busy_n,
    }
}

/// The outcome of an endpoint whose new side has nothing to compare, or
/// None when it does.
fn accounted(
    c: &Comparison,
    row: &Row,
    col: usize,
    usable: bool,
    total: usize,
) -> Option<Decision> {
    let cell = &row.cells[col];
    let name = c.column_header(col);
    if cell.runs.is_empty() {
        return Some(match &cell.skipped {
            Some(why) if why.starts_with("could not start") => Decision::Failed {
                why: format!("{name}: {why}"),
            },
            Some(why) => Decision::Undecided {
                why: format!("not run in {name}: {why}"),
                needs: None,
            },
            None => {
                let unfinished = cell_files(c, row, col)
                    .iter()
                    .find_map(|f| c.unfinished.iter().find(|(u, _)| u == f));
                Decision::Undecided {
                    why: match unfinished {
                        Some((_, w)) => {
                            format!("missing in {name}, a file that did not finish ({w})")
                        }
                        None => format!("missing in {name}"),
                    },
                    needs: None,
                }
            }
        });
    }
    if total == 0 {
        let status = cell
            .runs
            .first()
            .map_or_else(String::new, |r| format!(" ({})", r.summary.mode));
        return Some(Decision::Failed {
            why: format!("no repeat of {name} completed{status}"),
        });
    }
    (!usable).then(|| Decision::Undecided {
        why: format!("no usable repeat in {name}"),
        needs: None,
    })
}

fn cell_files(c: &Comparison, row: &Row, col: usize) -> Vec<usize> {
    match (c.by, row.file) {
        (Dimension::File, _) => c.columns[col].files.clone(),
        (_, Some(f)) => vec![f],
        (_, None) => (0..c.files.len()).collect(),
    }
}

impl Evidence {
    /// The evidence of one gated figure between a baseline (its repeats per
    /// recording) and a new side, by the one rule every surface that judges
    /// recordings uses (`compare` of files, `calibrate`'s controls):
    /// counts every repeat of each side agrees on are exact, compared as they
    /// are; several baseline recordings measure the drift between recordings
    /// by their spread; one recording a side between files (`between_files`)
    /// decides a latency figure only with a known drift (a matching noise
    /// profile, `drift`), else it is undecided with the fix — its difference is
    /// the change plus a drift nothing measured. Rows of one file (other
    /// dimensions) ran interleaved: independent repeats.
    pub fn recorded(
        base: Vec<Vec<f64>>,
        new: Vec<f64>,
        scale: Scale,
        between_files: bool,
        drift: Option<f64>,
    ) -> Result<Evidence, Decision> {
        let agree = |v: &[f64]| v.iter().all(|x| *x == v[0]);
        let exact = scale == Scale::Count
            && agree(&base.iter().flatten().copied().collect::<Vec<_>>())
            && agree(&new);
        if exact {
            return Ok(Evidence::Independent {
                base: base.into_iter().flatten().collect(),
                new,
            });
        }
        if base.len() > 1 {
            return Ok(Evidence::Recordings { base, new });
        }
        let base: Vec<f64> = base.into_iter().flatten().collect();
        match drift.filter(|_| scale == Scale::Ratio) {
            Some(between) => Ok(Evidence::Drift { base, new, between }),
            None if between_files && scale == Scale::Ratio => Err(Decision::Undecided {
                why: format!("{NO_DRIFT_EVIDENCE}; give {DRIFT_FIX}"),
                needs: None,
            }),
            None => Ok(Evidence::Independent { base, new }),
        }
    }
}

impl Comparison {
    /// Gates this comparison: every gated figure the baseline has, of every row the
    /// baseline has, in every other column.
    pub fn gate(&self, opts: &GateOptions) -> GateReport {
        let mut endpoints = Vec::new();
        let mut items = Vec::new();
        let mut caveats = Vec::new();
        let mut no_drift_evidence = 0;
        let mut busy_kept = 0;
        for (ri, row) in self.rows.iter().enumerate() {
            if row.cells.first().is_none_or(|b| b.runs.is_empty()) {
                // Not a configuration of the baseline: reported, not gated.
                continue;
            }
            let base_failed = row.cells[0].completed().next().is_none();
            for col in 1..self.columns.len() {
                for &m in &opts.gated {
                    let Side {
                        by_file: base,
                        mut notes,
                        busy: base_busy,
                        ..
                    } = side(row, 0, m, opts.keep_busy);
                    if base_failed {
                        endpoints.push(Endpoint {
                            row: ri,
                            column: col,
                            metric: m,
                            notes,
                        });
                        items.push(Err(Decision::Undecided {
                            why: format!(
                                "no repeat of the baseline {} completed",
                                self.column_header(0)
                            ),
                            needs: None,
                        }));
                        continue;
                    }
                    let base_total: usize = base.iter().map(|(_, v)| v.len()).sum();
                    if base_total == 0 && notes.is_empty() {
                        // The baseline never measured this figure: not gated.
                        continue;
                    }
                    let Side {
                        by_file: new,
                        notes: new_notes,
                        completed: new_completed,
                        busy: new_busy,
                    } = side(row, col, m, opts.keep_busy);
                    if opts.keep_busy && !m.is_count() {
                        busy_kept += base_busy + new_busy;
                    }
                    notes.extend(
                        new_notes
                            .into_iter()
                            .map(|n| format!("{}: {n}", self.column_header(col))),
                    );
                    let new_values: Vec<f64> = new.into_iter().flat_map(|(_, v)| v).collect();
                    let scale = if m.is_count() {
                        Scale::Count
                    } else {
                        Scale::Ratio
                    };
                    let item = if let Some(o) =
                        accounted(self, row, col, !new_values.is_empty(), new_completed)
                    {
                        Err(o)
                    } else if base_total == 0 {
                        Err(Decision::Undecided {
                            why: format!(
                                "no usable repeat in the baseline {} ({})",
                                self.column_header(0),
                                notes.join("; ")
                            ),
                            needs: None,
                        })
                    } else {
                        let between_files = self.by == Dimension::File;
                        let item = Evidence::recorded(
                            base.into_iter().map(|(_, v)| v).collect(),
                            new_values,
                            scale,
                            between_files,
                            opts.drift,
                        )
                        .and_then(|evidence| {
                            evidence
                                .examine(scale, &opts.policy)
                                .map_err(|why| Decision::Undecided { why, needs: None })
                        });
                        no_drift_evidence += usize::from(matches!(&item,
                            Err(Decision::Undecided { why, .. }) if why.starts_with(NO_DRIFT_EVIDENCE)));
                        item
                    };
                    endpoints.push(Endpoint {
                        row: ri,
                        column: col,
                        metric: m,
                        notes,
                    });
                    items.push(item);
                }
            }
        }
        if no_drift_evidence > 0 {
            caveats.push(format!(
                "{no_drift_evidence} latency figure{} left undecided: {NO_DRIFT_EVIDENCE} (files of one configuration \
                 recorded minutes apart drifted ×1.4 on this project's hosts); exact counts are judged; give {DRIFT_FIX}",
                if no_drift_evidence == 1 { "" } else { "s" }
            ));
        }
        if busy_kept > 0 {
            caveats.push(
                "repeats run on a busy host were kept for latency figures (keep busy repeats): the load may have \
                 slowed either side, so a latency verdict here is about this host under its load"
                    .into(),
            );
        }
        for (f, why) in &self.unfinished {
            caveats.push(format!("{} did not finish: {why}", self.files[*f].0));
        }
        GateReport {
            policy: opts.policy,
            endpoints,
            family: gate::Family::judge(items, &opts.policy),
            caveats,
        }
    }
}
