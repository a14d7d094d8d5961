//! Expectations against a results document: one [`Verdict`] per
//! expectation and run it is about (a ratio: one per expectation).
use super::{
    CounterRef, Expectation, Expr, Op, Operand, Rhs, Scope, Subject, VcpuCount, Vcpus,
    PHASE_FIGURES,
};
use crate::gate::claim::{self, Claim, Judgement};
use crate::results::identity::{ConfigId, Field};
use crate::results::metrics::RunMetrics;
use crate::results::source::Source;

use crate::results::{Document, PhaseResult, RunReport, VcpuResult};
use crate::stats;
use std::borrow::Cow;

/// How an expectation came out.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It holds; the figure read.
    Pass(f64),
    /// It does not hold, and why (the figure read, or what was missing).
    Fail(String),
    /// It could not be judged here, and why (not measured, not run).
    Skip(String),
    /// A gate question (a `ratio()`, a latency bound over repeats) the
    /// repeats could not decide, and why: never a pass, and the exit is 4
    /// whatever else passed ([`Verdicts::exit_code`]).
    Undecided(String),
}

/// One test point: an expectation about one run (or a ratio).
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The test point's name: the expectation, and the run when it was
    /// about several.
    pub name: String,
    /// The outcome.
    pub outcome: Outcome,
}

/// Every verdict of a set of expectations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdicts(pub Vec<Verdict>);

impl Verdicts {
    /// kselftest's exit codes: 1 when any failed; 4 when a gate question
    /// is undecided (even beside passes: undecided is never a pass) or
    /// none passed (all skipped, or nothing to judge); 0 otherwise (a
    /// plain skip beside passes stays 0).
    pub fn exit_code(&self) -> u8 {
        let any = |f: fn(&Outcome) -> bool| self.0.iter().any(|v| f(&v.outcome));
        let failed = any(|o| matches!(o, Outcome::Fail(_)));
        let undecided = any(|o| matches!(o, Outcome::Undecided(_)));
        let passed = any(|o| matches!(o, Outcome::Pass(_)));
        match (failed, undecided, passed) {
            (true, _, _) => 1,
            (false, true, _) | (false, false, false) => 4,
            (false, false, true) => 0,
        }
    }

    /// (passed, failed, skipped); the undecided are [`Verdicts::undecided`].
    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |f: fn(&Outcome) -> bool| self.0.iter().filter(|v| f(&v.outcome)).count();
        (
            count(|o| matches!(o, Outcome::Pass(_))),
            count(|o| matches!(o, Outcome::Fail(_))),
            count(|o| matches!(o, Outcome::Skip(_))),
        )
    }

    /// How many gate questions are undecided.
    pub fn undecided(&self) -> usize {
        self.0
            .iter()
            .filter(|v| matches!(v.outcome, Outcome::Undecided(_)))
            .count()
    }

    /// `N passed, N failed, N skipped[, N undecided]`.
    pub fn summary(&self) -> String {
        let (passed, failed, skipped) = self.counts();
        let mut s = format!("{passed} passed, {failed} failed, {skipped} skipped");
        match self.undecided() {
            0 => {}
            n => s.push_str(&format!(", {n} undecided")),
        }
        s
    }
}

/// The run's full label: `workload Nv label`.
fn full_label(r: &RunReport) -> String {
    format!(
        "{} {}v {}",
        r.mode.workload_label(),
        r.mode.vcpus,
        r.label()
    )
}

/// A label's mode (its first word, with `apicv-inhibit` when that follows)
/// and the rest of its words (levers, placement, host setting): how the
/// older scopes name a run's label.
fn mode_and_extras(label: &str) -> (String, Vec<&str>) {
    let mut words: Vec<&str> = label.split_whitespace().collect();
    let mut mode = if words.is_empty() {
        String::new()
    } else {
        words.remove(0).to_string()
    };
    if words.first() == Some(&"apicv-inhibit") {
        mode.push_str(" apicv-inhibit");
        words.remove(0);
    }
    (mode, words)
}

/// Whether a label matches a scope's: the same mode, and every extra of
/// the scope among the label's.
fn label_matches(scope: &str, label: &str) -> bool {
    let (want_mode, want) = mode_and_extras(scope);
    let (mode, extras) = mode_and_extras(label);
    want_mode == mode && want.iter().all(|w| extras.contains(w))
}

/// The APICv state run `r` observed: `unavailable` without APICv/AVIC on
/// the host, else `inhibited` when an inhibit was in effect at its end
/// (the kernel's own events), `active` when none was; the plan's state
/// where nothing was observed.
pub(crate) fn observed_apicv(r: &RunReport) -> &'static str {
    use crate::mode::apicv::ApicvState;
    match (r.apicv.effective, &r.apicv_observed) {
        (ApicvState::Unavailable, _) => "unavailable",
        (ApicvState::Unknown, _) => "unknown",
        (_, Some(o)) if o.inhibits_at_end.is_empty() => "active",
        (_, Some(_)) => "inhibited",
        (ApicvState::Active, None) => "active",
        (ApicvState::Inhibited, None) => "inhibited",
    }
}

/// Whether configuration `id` (and, for `apicv=` states, what run `r`
/// observed) has one of the values of every field `scope` names.
fn fields_match(scope: &Scope, id: &ConfigId, r: Option<&RunReport>) -> bool {
    scope.fields.iter().all(|f| {
        let mut have = vec![id.value(f.field)];
        if f.field == Field::Apicv {
            have.push(r.map_or("unknown", observed_apicv).to_string());
        }
        f.values.iter().any(|v| have.contains(v)) != f.negated
    })
}

/// Whether run `r` had what `scope` says of its host (`host.x2avic=...`:
/// the verdicts it recorded); a skipped row (no run) recorded no host, so
/// a scope over the host never matches one (no skip stands in for it).
fn host_matches(scope: &Scope, r: Option<&RunReport>) -> bool {
    if scope.host.is_empty() {
        return true;
    }
    let Some(r) = r else { return false };
    scope.host.iter().all(|h| {
        let v = r.host_settings.as_ref().map(|s| &s.verdicts);
        let support = v.map(|v| match h.verdict.as_str() {
            "apicv" => &v.apicv,
            "ipiv" => &v.ipiv,
            "avic" => &v.avic,
            _ => &v.x2avic,
        });
        let state = match support {
            Some(s) if s.is_available() => "available",
            Some(_) => "unavailable",
            None => "unknown",
        };
        h.states.iter().any(|s| s == state)
    })
}

/// Whether a run of configuration `id` (run `r` where there is one)
/// matches `scope` (its `maxv` taken as matching any count: [`runs_of`]
/// picks the largest).
fn matches_but_count(scope: &Scope, id: &ConfigId, r: Option<&RunReport>) -> bool {
    scope.workload.as_ref().is_none_or(|w| w == id.guest.name())
        && scope
            .label
            .as_ref()
            .is_none_or(|l| label_matches(l, &id.label()))
        && fields_match(scope, id, r)
        && host_matches(scope, r)
}

/// The runs of `doc` that `scope` names, reading the scope's phase when it
/// names one (`@cpuid`).
fn runs_of<'d>(doc: &'d Document, scope: &Scope) -> Vec<Cow<'d, RunReport>> {
    let runs = matching_runs(doc, scope).into_iter();
    match &scope.phase {
        None => runs.map(Cow::Borrowed).collect(),
        Some(phase) => runs
            .map(|r| {
                let mut r = r.clone();
                r.mode.phase = Some(phase.clone());
                Cow::Owned(r)
            })
            .collect(),
    }
}

/// The runs of `doc` whose workload, vCPU count and label `scope` names.
fn matching_runs<'d>(doc: &'d Document, scope: &Scope) -> Vec<&'d RunReport> {
    let candidates: Vec<&RunReport> = doc
        .runs
        .iter()
        .filter(|r| matches_but_count(scope, &r.id(), Some(r)))
        .collect();
    match scope.vcpus {
        None => candidates,
        Some(VcpuCount::Exactly(n)) => candidates
            .into_iter()
            .filter(|r| r.mode.vcpus == n)
            .collect(),
        Some(VcpuCount::Max) => {
            let top = candidates.iter().map(|r| r.mode.vcpus).max();
            candidates
                .into_iter()
                .filter(|r| Some(r.mode.vcpus) == top)
                .collect()
        }
    }
}

fn scope_text(s: &Scope) -> String {
    let mut parts = Vec::new();
    if let Some(w) = &s.workload {
        parts.push(w.clone());
    }
    match s.vcpus {
        Some(VcpuCount::Exactly(n)) => parts.push(format!("{n}v")),
        Some(VcpuCount::Max) => parts.push("maxv".into()),
        None => {}
    }
    if let Some(p) = &s.phase {
        parts.push(format!("@{p}"));
    }
    if let Some(l) = &s.label {
        parts.push(l.clone());
    }
    for f in &s.fields {
        let op = if f.negated { "!=" } else { "=" };
        parts.push(format!("{}{op}{}", f.field, f.values.join("|")));
    }
    for h in &s.host {
        parts.push(format!("host.{}={}", h.verdict, h.states.join("|")));
    }
    parts.join(" ")
}

/// The skip that names `scope`'s runs, if the document recorded one: the
/// sweep did not run them on this host, and said why. A skip carries its
/// configuration; one of an older file is read from its label.
fn skipped_reason(doc: &Document, scope: &Scope) -> Option<String> {
    doc.skipped.iter().find_map(|s| {
        let count_ok = |vcpus: usize| match scope.vcpus {
            Some(VcpuCount::Exactly(n)) => n == vcpus,
            _ => true,
        };
        let matched = match &s.id {
            Some(id) => count_ok(id.vcpus) && matches_but_count(scope, id, None),
            None => {
                let mut words = s.mode.split_whitespace();
                let workload = words.next()?;
                let vcpus = words.next()?.strip_suffix('v')?.parse::<usize>().ok()?;
                let label = words.collect::<Vec<_>>().join(" ");
                count_ok(vcpus)
                    && scope.fields.is_empty()
                    && scope.host.is_empty()
                    && scope.workload.as_ref().is_none_or(|w| w == workload)
                    && scope
                        .label
                        .as_ref()
                        .is_none_or(|l| label_matches(l, &label))
            }
        };
        matched.then(|| format!("not run here: {}", s.reason))
    })
}

/// Why a metric has no value in `r`, in words and with the fix where there
/// is one.
fn missing_metric(key: &str, r: &RunReport) -> String {
    let source = |source: Source| {
        r.vcpus
            .iter()
            .flat_map(|v| &v.sources)
            .find(|s| s.source == source && !s.available)
            .and_then(|s| s.detail.clone())
    };
    if key.starts_with("icr_write_exits") {
        let why =
            source(Source::Tracepoints).unwrap_or_else(|| "no ICR-write exit counter ran".into());
        return format!(
            "ICR-write exits not measured ({why}): they need the kvm_apic/kvm_msr tracepoints, i.e. root or CAP_PERFMON with tracefs readable (docs/ci.md)"
        );
    }
    if key.starts_with("cycles") || key.starts_with("ns_") {
        return "no latency samples in the measured phase".into();
    }
    format!("{key} not measured in this run")
}

/// `key` of `r`. Its callers ([`on_run`], [`ratio_side`]) have failed a
/// run without the phase `--phase`/`@NAME` named: its zeros are no figures.
fn metric_value(key: &str, r: &RunReport) -> Result<f64, String> {
    let m = RunMetrics::of(&r.summary());
    let scalar = match key {
        "operations" => Some(m.operations as f64),
        "ipis_sent" => Some(m.ipis_sent as f64),
        "ipis_delivered" => Some(m.ipis_delivered as f64),
        "wake_ipis" => Some(m.wake_ipis as f64),
        "vcpus" => Some(r.mode.vcpus as f64),
        "fan_out" => m.fan_out.map(|k| k as f64),
        _ => m.values.get(key).copied(),
    };
    scalar.ok_or_else(|| missing_metric(key, r))
}

/// Counter `source.name` of `r`'s measured phase on each vCPU (index,
/// value), or on vCPU `only` alone; Err with the verdict where it cannot
/// be read (a skip where the source did not run or is reported
/// unavailable: its zeros would not be counts).
fn counter_values(
    r: &RunReport,
    source: &str,
    name: &str,
    only: Option<usize>,
) -> Result<Vec<(usize, u64)>, Outcome> {
    let Some((id, phase_name)) = r.measured_phase() else {
        return Err(Outcome::Skip("the run has no measured phase".into()));
    };
    counter_values_of(r, (id, &phase_name), source, name, only)
}

/// Phase `(id, name)` of vCPU `v`.
fn phase_of<'v>(v: &'v VcpuResult, id: u32, name: &str) -> Option<&'v PhaseResult> {
    v.phases.iter().find(|p| p.id == id && p.name == name)
}

/// [`counter_values`] of phase `(id, name)`. Over every vCPU (`only`
/// None: `vcpus.`, `vcpu*.`), one without the phase fails it (a sum
/// without it would be a part passed off as the whole); so does one
/// without a counter of a source another vCPU has, or without the
/// payload's records (a vCPU that recorded nothing has no 0 to read).
fn counter_values_of(
    r: &RunReport,
    (id, phase_name): (u32, &str),
    source: &str,
    name: &str,
    only: Option<usize>,
) -> Result<Vec<(usize, u64)>, Outcome> {
    let missing: Vec<String> = r
        .vcpus
        .iter()
        .filter(|v| only.is_none() && phase_of(v, id, phase_name).is_none())
        .map(|v| format!("vcpu{}", v.index))
        .collect();
    if !missing.is_empty() {
        return Err(Outcome::Fail(format!(
            "{} did not finish the phase '{phase_name}' (every vCPU's is read)",
            missing.join(", ")
        )));
    }
    // Whether any vCPU has counters of `source` in the phase.
    let source_ran = r.vcpus.iter().any(|v| {
        phase_of(v, id, phase_name).is_some_and(|p| p.counters().any(|(s, _, _)| s == source))
    });
    let mut out = Vec::new();
    for v in r.vcpus.iter().filter(|v| only.is_none_or(|i| v.index == i)) {
        let Some(p) = phase_of(v, id, phase_name) else {
            continue;
        };
        if source == PHASE_FIGURES {
            out.push((
                v.index,
                phase_figure(p, name, v.index).map_err(Outcome::Skip)?,
            ));
            continue;
        }
        if let Some(s) = v
            .sources
            .iter()
            .find(|s| source.starts_with(s.source.key()) && !s.available)
        {
            let why = s.detail.as_deref().unwrap_or("unavailable");
            return Err(Outcome::Skip(format!(
                "vcpu{}: '{source}' is unavailable ({why})",
                v.index
            )));
        }
        let counters: Vec<(&str, &str, u64)> =
            p.counters().filter(|(s, _, _)| *s == source).collect();
        let value = counters.iter().find(|(_, n, _)| *n == name).map(|c| c.2);
        // Sources that list only what is non-zero: a missing name is 0.
        let sparse = matches!(
            Source::of_key(source),
            Some(Source::ExitReasons | Source::ExitReasonsHostNs | Source::UserspaceExits)
        );
        let value = match value {
            Some(x) => x,
            None if sparse
                && PhaseResult::is_counter_name(source, name) == Some(true)
                && (!source.starts_with(Source::ExitReasons.key()) || p.exit_reasons.is_some()) =>
            {
                0
            }
            None if counters.is_empty()
                && (source_ran || Source::of_key(source) == Some(Source::Records)) =>
            {
                return Err(Outcome::Fail(format!(
                    "vcpu{} has no '{source}' counters in phase '{phase_name}'{}",
                    v.index,
                    match source_ran {
                        true => " where another vCPU has",
                        false =>
                            " (the payload records them: a vCPU that recorded none has no figure)",
                    }
                )));
            }
            None if counters.is_empty() => {
                let why = v
                    .sources
                    .iter()
                    .find(|s| source.starts_with(s.source.key()) && !s.available)
                    .and_then(|s| s.detail.clone())
                    .unwrap_or_else(|| "nothing recorded".into());
                return Err(Outcome::Skip(format!(
                    "vcpu{}: no '{source}' counters ({why})",
                    v.index
                )));
            }
            None => {
                return Err(Outcome::Fail(format!(
                    "vcpu{}: '{source}' has no counter '{name}' (it has {})",
                    v.index,
                    counters
                        .iter()
                        .map(|c| c.1)
                        .take(12)
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        out.push((v.index, value));
    }
    Ok(out)
}

/// Figure `name` of the phase's own ([`super::PHASE_FIGURE_NAMES`]) on
/// vCPU `vcpu`; Err (a skip) where the run did not measure it.
fn phase_figure(p: &PhaseResult, name: &str, vcpu: usize) -> Result<u64, String> {
    let icr = || {
        p.icr_write_exits.as_ref().ok_or_else(|| {
            format!("vcpu{vcpu}: ICR-write exits not measured (no tracepoint counters and no LAPIC model of ipivmm's)")
        })
    };
    let sampled = || {
        p.exit_reasons
            .as_ref()
            .ok_or_else(|| format!("vcpu{vcpu}: exits by reason not counted"))
    };
    match name {
        "icr_write_exits" => icr().map(|i| i.exits),
        "icr_writes_accelerated" => icr().map(|i| i.accelerated),
        "exits_sampled" => sampled().map(|e| e.exits),
        "exit_reasons_complete" => sampled().map(|e| u64::from(e.complete)),
        _ => p
            .apicv
            .as_ref()
            .map(|a| u64::from(a.active))
            .ok_or_else(|| format!("vcpu{vcpu}: no APICv state sampled in the phase")),
    }
}

/// Counter `c` on vCPU `at` (None: summed over every vCPU, or the one
/// `vcpuN` names), as a figure; Err with the verdict where it cannot be read.
fn counter_ref(r: &RunReport, c: &CounterRef, at: Option<usize>) -> Result<f64, Outcome> {
    let only = match c.vcpus {
        Vcpus::One(i) => Some(i),
        Vcpus::Each => at,
        Vcpus::Sum => None,
    };
    let phase = match &c.phase {
        None => r.measured_phase(),
        Some(p) => {
            let mut named = r.clone();
            named.mode.phase = Some(p.clone());
            match named.measured_phase() {
                Some(x) => Some(x),
                None => return Err(Outcome::Fail(format!("the run has no phase '{p}'"))),
            }
        }
    };
    let Some((id, name)) = phase else {
        return Err(Outcome::Skip("the run has no measured phase".into()));
    };
    let values = counter_values_of(r, (id, &name), &c.source, &c.name, only)?;
    if only.is_some() && values.is_empty() {
        return Err(Outcome::Fail(format!(
            "the run has no vcpu{} with that phase",
            only.unwrap_or_default()
        )));
    }
    Ok(values.iter().map(|(_, v)| *v as f64).sum())
}

/// A figure of run `r` itself (`run.NAME`, [`super::RUN_FIGURES`]).
fn run_figure(r: &RunReport, name: &str) -> Result<f64, Outcome> {
    let observed = || {
        r.apicv_observed
            .as_ref()
            .ok_or_else(|| Outcome::Skip("no APICv inhibit events sampled".into()))
    };
    let truth = |v: bool| f64::from(u8::from(v));
    if let Some(reason) = name.strip_prefix("apicv_at_end:") {
        return observed().map(|o| truth(o.inhibits_at_end.iter().any(|i| i == reason)));
    }
    match name {
        "apicv_sampled" => Ok(truth(r.apicv_observed.is_some())),
        "apicv_lever_missed" => {
            observed().map(|o| truth(o.lever.as_ref().is_some_and(|l| !l.observed)))
        }
        "host_param_as_asked" => {
            let Some(hp) = &r.host_param else {
                return Err(Outcome::Skip("made under no --host-param".into()));
            };
            let Some((key, want)) = hp.split_once('=').filter(|(k, _)| k.contains('.')) else {
                return Err(Outcome::Fail(format!(
                    "--host-param {hp} is not module.param=value"
                )));
            };
            let Some(settings) = &r.host_settings else {
                return Err(Outcome::Fail("no host settings recorded".into()));
            };
            // Y and 1, N and 0 are the same setting as a module reads it back.
            let norm = |v: &str| match v {
                "Y" | "y" | "1" => "Y".to_string(),
                "N" | "n" | "0" => "N".to_string(),
                v => v.to_string(),
            };
            Ok(truth(settings.param(key).map(norm) == Some(norm(want))))
        }
        _ => r
            .observer_effect
            .as_ref()
            .map(|o| o.failed.len() as f64)
            .ok_or_else(|| Outcome::Skip("no observer effect measured".into())),
    }
}

/// Operand `o` of run `r`, on vCPU `at` for a `vcpu*` counter.
fn operand(r: &RunReport, o: &Operand, at: Option<usize>) -> Result<f64, Outcome> {
    match o {
        Operand::Number(x) => Ok(*x),
        Operand::Metric(key) => metric_value(key, r).map_err(Outcome::Skip),
        Operand::Counter(c) => counter_ref(r, c, at),
        Operand::Run(name) => run_figure(r, name),
    }
}

/// Expression `x` on run `r` (vCPU `at` for its `vcpu*` counters): a
/// division by 0 or a step past the range of a number fails.
fn expr_value(r: &RunReport, x: &Expr, at: Option<usize>) -> Result<f64, Outcome> {
    x.value(|o| operand(r, o, at), Outcome::Fail)
}

/// `e`'s right-hand side on run `r`, for vCPU `at` where it reads counters
/// of one vCPU (`vcpu*`: each in turn).
fn rhs_value(e: &Expectation, r: &RunReport, at: Option<usize>) -> Result<f64, Outcome> {
    match &e.value {
        Rhs::Number(x) => Ok(*x),
        Rhs::Metric(key) => metric_value(key, r).map_err(Outcome::Skip),
        Rhs::Expr(x) => expr_value(r, x, at),
    }
}

/// `e` on one run.
fn on_run(e: &Expectation, r: &RunReport) -> Outcome {
    if !r.succeeded() {
        return Outcome::Fail(format!("the run did not complete: {}", r.status.line()));
    }
    // A phase named (`--phase`, `@NAME`) that the run never finished: a
    // failure, not a skip (the name is the user's, the run is there).
    if let Some(why) = r.missing_phase() {
        return Outcome::Fail(why);
    }
    // A right-hand side over `vcpu*` is judged per vCPU below.
    let per_vcpu = matches!(&e.value, Rhs::Expr(x) if x.per_vcpu());
    let want = match per_vcpu {
        true => f64::NAN,
        false => match rhs_value(e, r, None) {
            Ok(x) => x,
            Err(o) => return o,
        },
    };
    let judge = |v: f64| {
        if e.op.holds(v, want, e.tolerance) {
            Outcome::Pass(v)
        } else {
            Outcome::Fail(format!(
                "got {}, want {} {}",
                fmt(v),
                e.op.symbol(),
                fmt(want)
            ))
        }
    };
    match &e.subject {
        Subject::Counter {
            vcpus: Vcpus::Each,
            source,
            name,
        } => {
            // Every vCPU's (one without the phase fails it).
            let values = match counter_values(r, source, name, None) {
                Ok(v) => v,
                Err(o) => return o,
            };
            let mut bad: Vec<String> = Vec::new();
            for (i, v) in &values {
                let want = match per_vcpu {
                    true => match rhs_value(e, r, Some(*i)) {
                        Ok(x) => x,
                        Err(o) => return o,
                    },
                    false => want,
                };
                if !e.op.holds(*v as f64, want, e.tolerance) {
                    bad.push(match per_vcpu {
                        true => {
                            format!("vcpu{i} got {v}, want {} {}", e.op.symbol(), fmt(want))
                        }
                        false => format!("vcpu{i} got {v}"),
                    });
                }
            }
            match (bad.is_empty(), values.first()) {
                (_, None) => Outcome::Fail("no vCPU ran the measured phase".into()),
                (true, Some((_, v))) => Outcome::Pass(*v as f64),
                (false, _) => Outcome::Fail(bad.join(", ")),
            }
        }
        Subject::Expr(x) if x.per_vcpu() => {
            let mut bad: Vec<String> = Vec::new();
            let mut first = None;
            for v in &r.vcpus {
                let i = v.index;
                let got = match expr_value(r, x, Some(i)) {
                    Ok(got) => got,
                    Err(o) => return o,
                };
                let want = match per_vcpu {
                    true => match rhs_value(e, r, Some(i)) {
                        Ok(x) => x,
                        Err(o) => return o,
                    },
                    false => want,
                };
                first.get_or_insert(got);
                if !e.op.holds(got, want, e.tolerance) {
                    bad.push(format!(
                        "vcpu{i} got {}, want {} {}",
                        fmt(got),
                        e.op.symbol(),
                        fmt(want)
                    ));
                }
            }
            match (bad.is_empty(), first) {
                (_, None) => Outcome::Fail("the run has no vCPU".into()),
                (true, Some(v)) => Outcome::Pass(v),
                (false, _) => Outcome::Fail(bad.join(", ")),
            }
        }
        _ => match left_value(e, r) {
            Ok(v) => judge(v),
            Err(o) => o,
        },
    }
}

/// The left-hand side of `e` on run `r` where it is one figure of the run
/// (a metric, `vcpuN.`/`vcpus.` counters, `run.NAME`, arithmetic over
/// them); `vcpu*` is judged per vCPU ([`on_run`]).
fn left_value(e: &Expectation, r: &RunReport) -> Result<f64, Outcome> {
    match &e.subject {
        Subject::Metric(key) => metric_value(key, r).map_err(Outcome::Skip),
        Subject::Counter {
            vcpus,
            source,
            name,
        } => {
            let c = CounterRef {
                vcpus: vcpus.clone(),
                phase: None,
                source: source.clone(),
                name: name.clone(),
            };
            counter_ref(r, &c, None)
        }
        Subject::Run(name) => run_figure(r, name),
        Subject::Expr(x) => expr_value(r, x, None),
        Subject::Ratio { .. } | Subject::UnexpectedSkips(_) | Subject::Recorded(_) => {
            Err(Outcome::Fail(format!(
                "'{}' reads the whole document, not one run",
                e.text
            )))
        }
    }
}

fn fmt(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.is_finite() && (v.abs() >= 1e15 || (v != 0.0 && v.abs() < 1e-4)) {
        format!("{v:e}")
    } else {
        format!("{v:.4}")
    }
}

/// Why run `r`'s latency figures are left out, if they are: it was
/// measured on a busy host (other jobs' CPU share or steal past the
/// bounds `compare` leaves such a repeat out at, [`stats::HostLoad::instabilities`]).
fn busy(r: &RunReport) -> Option<String> {
    let load = r.host_load.as_ref()?;
    load.instabilities().first().map(|i| i.to_string())
}

/// The repeats a latency judgement left out as measured on a busy host:
/// how many of how many, and the first one's reason.
#[derive(Default)]
struct Busy {
    left_out: usize,
    of: usize,
    why: Option<String>,
}

impl Busy {
    /// Counts run `r`: true when it is left out.
    fn leaves_out(&mut self, r: &RunReport) -> bool {
        self.of += 1;
        match busy(r) {
            Some(why) => {
                self.left_out += 1;
                self.why.get_or_insert(why);
                true
            }
            None => false,
        }
    }

    /// What is said of them, if any was left out.
    fn note(&self) -> Option<String> {
        self.why.as_ref().map(|why| {
            format!(
                "{} of {} repeats left out as measured on a busy host ({why})",
                self.left_out, self.of
            )
        })
    }

    /// Every repeat left out: nothing to judge.
    fn all(&self) -> bool {
        self.of > 0 && self.left_out == self.of
    }
}

/// The figure of every completed repeat of `scope` a ratio reads (the
/// runs of the first configuration that matches, when several do), by the
/// rules `compare` judges by: the busy repeats left out for a latency
/// figure (never for a count, which load cannot change), a repeat that did
/// not complete or lacks the figure left out; none left is a failure for
/// the `new` side (its runs failed) and undecided otherwise (a gate
/// question without its figure is never a skip, so never a pass).
fn ratio_side(
    doc: &Document,
    scope: &Scope,
    metric: &str,
    new: bool,
    busy: &mut Busy,
) -> Result<Vec<f64>, Outcome> {
    let runs = runs_of(doc, scope);
    let Some(first) = runs.first() else {
        return Err(match skipped_reason(doc, scope) {
            Some(why) => Outcome::Skip(format!("{}: {why}", scope_text(scope))),
            None => Outcome::Fail(format!("no run of {}", scope_text(scope))),
        });
    };
    // Its repeats are the runs of its configuration (the identity, not
    // the label that names it in messages).
    let (id, key) = (first.id(), full_label(first));
    let mut values = Vec::new();
    let mut side = Busy::default();
    let (mut completed, mut failed, mut missing) = (0usize, None, None);
    for r in runs.iter().filter(|r| r.id() == id) {
        if !r.succeeded() {
            failed.get_or_insert_with(|| r.status.line());
            continue;
        }
        completed += 1;
        if let Some(why) = r.missing_phase() {
            return Err(Outcome::Fail(format!("{}: {why}", full_label(r))));
        }
        if super::is_latency(metric) && side.leaves_out(r) {
            continue;
        }
        match metric_value(metric, r) {
            Ok(v) => values.push(v),
            Err(why) => {
                missing.get_or_insert(why);
            }
        }
    }
    if completed == 0 {
        let status = failed.unwrap_or_default();
        return Err(if new {
            Outcome::Fail(format!("no repeat of {key} completed: {status}"))
        } else {
            Outcome::Undecided(format!(
                "no repeat of the baseline {key} completed: {status}"
            ))
        });
    }
    if side.all() {
        return Err(Outcome::Undecided(format!(
            "{key}: every repeat was measured on a busy host ({}): none is left to judge; run it again on a quiet host",
            side.why.unwrap_or_default()
        )));
    }
    if values.is_empty() {
        return Err(Outcome::Undecided(format!(
            "{key}: no repeat has the figure ({}): nothing to judge",
            missing.unwrap_or_default()
        )));
    }
    busy.left_out += side.left_out;
    busy.of += side.of;
    if busy.why.is_none() {
        busy.why = side.why;
    }
    Ok(values)
}

/// The verdict of an expectation whose scope matches no run: a skip where
/// the document skipped those runs (or ran nothing), else a failure.
fn no_run(doc: &Document, scope: &Scope) -> Outcome {
    // A host part no run's host had (each having recorded its verdicts):
    // those runs are another host's to make.
    let host_only = Scope {
        host: scope.host.clone(),
        ..Scope::default()
    };
    let hosts_known = doc.runs.iter().all(|r| r.host_settings.is_some());
    let other_host = !scope.host.is_empty()
        && hosts_known
        && !doc.runs.iter().any(|r| host_matches(&host_only, Some(r)));
    match skipped_reason(doc, scope) {
        Some(why) => Outcome::Skip(why),
        None if doc.runs.is_empty() => Outcome::Skip("nothing ran".into()),
        None if other_host => Outcome::Skip(format!(
            "not run here: no run's host had {}",
            scope_text(&host_only)
        )),
        None => Outcome::Fail(format!(
            "no run matches '{}' (the runs: {})",
            scope_text(scope),
            doc.runs
                .iter()
                .map(full_label)
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

/// `unexpected_skips(allowed...) OP X`: the combinations `doc` skipped for
/// a reason holding none of the `allowed` texts, counted; a failure names
/// them.
fn unexpected_skips(doc: &Document, allowed: &[String], e: &Expectation) -> Outcome {
    let unexpected: Vec<String> = doc
        .skipped
        .iter()
        .filter(|s| !allowed.iter().any(|a| s.reason.contains(a.as_str())))
        .map(|s| format!("{}: {}", s.mode, s.reason))
        .collect();
    let n = unexpected.len() as f64;
    // The parser gives it a number (arithmetic over numbers folded).
    let Rhs::Number(want) = e.value else {
        return Outcome::Fail("unexpected_skips(...) compares with a number".into());
    };
    if e.op.holds(n, want, e.tolerance) {
        Outcome::Pass(n)
    } else {
        Outcome::Fail(format!(
            "got {}, want {} {}: {}",
            fmt(n),
            e.op.symbol(),
            fmt(want),
            unexpected.join("; ")
        ))
    }
}

/// `doc` as its results file reads back.
fn written(doc: &Document) -> Result<Document, String> {
    let text =
        serde_json::to_string(doc).map_err(|e| format!("the document does not serialize: {e}"))?;
    Document::from_json(&text, "the results written").map_err(|e| e.to_string())
}

/// Whether a recorded JSON value is what the counters give: numbers
/// within `tol`, or 1e-9 of the larger (a figure written and read back
/// may differ in its last bit), objects key by key, the rest equal.
fn same(got: &serde_json::Value, want: &serde_json::Value, tol: f64) -> bool {
    use serde_json::Value;
    match (got, want) {
        (Value::Number(g), Value::Number(w)) => match (g.as_f64(), w.as_f64()) {
            (Some(g), Some(w)) => (g - w).abs() <= tol.max(1e-9 * g.abs().max(w.abs()).max(1.0)),
            _ => g == w,
        },
        (Value::Object(g), Value::Object(w)) => {
            g.len() == w.len()
                && g.iter()
                    .all(|(k, v)| w.get(k).is_some_and(|x| same(v, x, tol)))
        }
        _ => got == want,
    }
}

/// `recorded.KEY == KEY` (`key` None: every recorded key) on run `r` as
/// read from a results file: the metrics the file records against what
/// the counters read back with them give. A key the file records but the
/// counters do not give fails; one it lacks (an older ipivmm's file) is
/// not judged.
fn recorded(e: &Expectation, r: &RunReport, key: Option<&str>) -> Outcome {
    if !r.succeeded() {
        return Outcome::Fail(format!("the run did not complete: {}", r.status.line()));
    }
    let Some(recorded) = &r.recorded_metrics else {
        return Outcome::Fail("no metrics recorded".into());
    };
    // A results file always records its metrics: none at all is a file
    // stripped of them, whose figures are not recorded, not to be derived
    // anew from its own counters and called equal.
    if recorded.is_empty() {
        return Outcome::Fail(
            "the file records no metrics (stripped?): nothing recorded to check against its counters"
                .into(),
        );
    }
    let given = serde_json::to_value(RunMetrics::of(&r.summary())).unwrap_or_default();
    let mut compared = 0usize;
    let mut diffs = Vec::new();
    for (k, got) in recorded
        .iter()
        .filter(|(k, _)| key.is_none_or(|want| want == k.as_str()))
    {
        compared += 1;
        let want = given.get(k);
        if !want.is_some_and(|w| same(got, w, e.tolerance)) {
            let want = want.map_or_else(|| "nothing".into(), |w| w.to_string());
            diffs.push(format!("{k} recorded {got}, its counters give {want}"));
        }
    }
    match (compared, diffs.is_empty()) {
        (0, _) => Outcome::Skip(format!("{} not recorded", key.unwrap_or("no metric"))),
        (n, true) => Outcome::Pass(n as f64),
        (_, false) => Outcome::Fail(diffs.join("; ")),
    }
}

/// The gate's claim of `op want ± tol`, on the log scale for a ratio
/// (Err: decided by the sign of a ratio alone, e.g. `ratio < 0`).
fn claim(op: Op, want: f64, tol: f64, log: bool) -> Result<Claim, bool> {
    let at = |v: f64| {
        if !log {
            v
        } else if v > 0.0 {
            v.ln()
        } else {
            f64::NEG_INFINITY
        }
    };
    if log && want + tol <= 0.0 {
        // A ratio is positive: above any bound at or below 0.
        return Err(matches!(op, Op::Gt | Op::Ge | Op::Ne));
    }
    Ok(match op {
        Op::Lt | Op::Le => Claim::AtMost(at(want)),
        Op::Gt | Op::Ge => Claim::AtLeast(at(want)),
        Op::Eq => Claim::Within(at(want - tol), at(want + tol)),
        Op::Ne => Claim::Outside(at(want - tol), at(want + tol)),
    })
}

/// A judgement that waits for its Holm level: a ratio over two
/// configurations' repeats, or a latency figure's median over one
/// configuration's; `note`: what was left out (busy repeats), said with
/// any verdict but a pass.
enum Statistical {
    Ratio {
        a: Vec<f64>,
        b: Vec<f64>,
        claim: Claim,
        want: String,
        note: Option<String>,
    },
    Median {
        /// What is judged: the left side, or the left side less the right
        /// where the right reads the run (`p50 < 0.5 * p99`).
        values: Vec<f64>,
        /// The left side's figures (the value of a pass).
        left: Vec<f64>,
        /// What `values` are, where not the left side's figure.
        of: Option<String>,
        claim: Claim,
        want: String,
        note: Option<String>,
    },
}

impl Statistical {
    fn fail_p(&self) -> f64 {
        match self {
            Statistical::Ratio { a, b, claim, .. } => claim::ratio_fail_p(a, b, *claim),
            Statistical::Median { values, claim, .. } => claim::median_fail_p(values, *claim),
        }
    }

    fn outcome(&self, level: f64) -> Outcome {
        let policy = crate::gate::Policy::DEFAULT;
        let (j, said, value, note) = match self {
            Statistical::Ratio {
                a,
                b,
                claim,
                want,
                note,
            } => (
                claim::ratio(a, b, *claim, &policy, level),
                format!("{} against {want}", claim::ratio_text(a, b, &policy)),
                stats::median(a).zip(stats::median(b)).map(|(x, y)| x / y),
                note,
            ),
            Statistical::Median {
                values,
                left,
                of,
                claim,
                want,
                note,
            } => (
                claim::median_of(values, *claim, &policy, level),
                format!(
                    "{}{} against {want}",
                    of.as_ref().map(|o| format!("{o}: ")).unwrap_or_default(),
                    claim::median_text(values)
                ),
                stats::median(left),
                note,
            ),
        };
        let note = note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default();
        match j {
            Judgement::Holds => Outcome::Pass(value.unwrap_or(f64::NAN)),
            Judgement::Fails => Outcome::Fail(format!("got {said}{note}")),
            Judgement::Undecided(why) => Outcome::Undecided(format!("{said}: {why}{note}")),
        }
    }
}

/// A verdict, or one that waits for the family's Holm levels.
enum Pending {
    Done(Verdict),
    Judge(String, Statistical),
}

/// The right-hand side as written (`want < THIS`).
fn rhs_text(r: &Rhs) -> String {
    match r {
        Rhs::Number(x) => fmt(*x),
        Rhs::Metric(k) => k.clone(),
        Rhs::Expr(x) => x.to_string(),
    }
}

/// The left-hand side as written.
fn subject_text(s: &Subject) -> String {
    match s {
        Subject::Metric(k) => k.clone(),
        Subject::Counter {
            vcpus,
            source,
            name,
        } => CounterRef {
            vcpus: vcpus.clone(),
            phase: None,
            source: source.clone(),
            name: name.clone(),
        }
        .to_string(),
        Subject::Run(n) => format!("run.{n}"),
        Subject::Expr(x) => x.to_string(),
        Subject::Ratio { metric, .. } => format!("ratio({metric}, ...)"),
        Subject::UnexpectedSkips(_) => "unexpected_skips(...)".into(),
        Subject::Recorded(k) => format!("recorded.{}", k.as_deref().unwrap_or("*")),
    }
}

/// A latency bound ([`Expectation::is_latency_bound`]) over the repeats
/// of one configuration (`members`): the median over the repeats not
/// measured on a busy host, by the gate's rule; a right-hand side that
/// reads the run is judged as the left less the right against 0.
///
/// [`Expectation::is_latency_bound`]: super::Expectation::is_latency_bound
fn latency_bound(e: &Expectation, members: &[&RunReport]) -> Result<Statistical, Outcome> {
    let mut busy = Busy::default();
    let (mut values, mut left) = (Vec::new(), Vec::new());
    let mut skipped = None;
    for r in members {
        if !r.succeeded() || r.missing_phase().is_some() {
            return Err(on_run(e, r));
        }
        if busy.leaves_out(r) {
            continue;
        }
        let figure = left_value(e, r).and_then(|l| match &e.value {
            Rhs::Number(_) => Ok((l, l)),
            _ => rhs_value(e, r, None).map(|w| (l, l - w)),
        });
        match figure {
            Ok((l, v)) if v.is_finite() => {
                left.push(l);
                values.push(v);
            }
            Ok(_) => {
                let what = match &e.value {
                    Rhs::Number(_) => subject_text(&e.subject),
                    rhs => format!("{} less {}", subject_text(&e.subject), rhs_text(rhs)),
                };
                return Err(Outcome::Fail(format!("'{what}' is no finite number")));
            }
            // A repeat without the figure is left out; one that fails fails.
            Err(o @ Outcome::Fail(_)) => return Err(o),
            Err(o) => {
                skipped.get_or_insert(o);
            }
        }
    }
    if values.is_empty() {
        if let Some(o) = skipped {
            return Err(o);
        }
        if busy.all() {
            return Err(Outcome::Undecided(format!(
                "every repeat was measured on a busy host ({}): none is left to judge; run it again on a quiet host",
                busy.why.unwrap_or_default()
            )));
        }
    }
    let (claim_at, want, of) = match &e.value {
        Rhs::Number(x) => (*x, format!("{} {}", e.op.symbol(), fmt(*x)), None),
        rhs => (
            0.0,
            format!("{} 0", e.op.symbol()),
            Some(format!(
                "{} less {}",
                subject_text(&e.subject),
                rhs_text(rhs)
            )),
        ),
    };
    let claim = claim(e.op, claim_at, e.tolerance, false).unwrap_or(Claim::AtMost(f64::INFINITY));
    Ok(Statistical::Median {
        values,
        left,
        of,
        claim,
        want,
        note: busy.note(),
    })
}

impl Verdicts {
    /// Every expectation against `doc`: counts per run (an invariant holds in
    /// every run), latency bounds per configuration over its repeats and
    /// ratios over two configurations' repeats by the gate's rule (busy
    /// repeats of a latency figure left out, as `compare` does), the failing
    /// side of those held to Holm's levels over all of them
    /// (`gate::claim`).
    pub fn of(doc: &Document, expectations: &[Expectation]) -> Verdicts {
        let mut pending: Vec<Pending> = Vec::new();
        // The document as its results file reads back, for `recorded.`.
        let mut read_back: Option<Result<Document, String>> = None;
        for e in expectations {
            if let Subject::UnexpectedSkips(allowed) = &e.subject {
                pending.push(Pending::Done(Verdict {
                    name: e.text.clone(),
                    outcome: unexpected_skips(doc, allowed, e),
                }));
                continue;
            }
            if let Subject::Recorded(key) = &e.subject {
                let runs = matching_runs(doc, &e.scope);
                if runs.is_empty() {
                    pending.push(Pending::Done(Verdict {
                        name: e.text.clone(),
                        outcome: no_run(doc, &e.scope),
                    }));
                }
                let several = runs.len() > 1;
                for r in runs {
                    // A run in memory records its metrics when written: judge
                    // them as its results file reads back.
                    let outcome = match r.recorded_metrics {
                        Some(_) => recorded(e, r, key.as_deref()),
                        None => match read_back.get_or_insert_with(|| written(doc)) {
                            Err(why) => Outcome::Fail(why.clone()),
                            Ok(back) => match doc.runs.iter().position(|x| std::ptr::eq(x, r)) {
                                Some(i) => recorded(e, &back.runs[i], key.as_deref()),
                                None => Outcome::Fail("the run is not the document's".into()),
                            },
                        },
                    };
                    pending.push(Pending::Done(Verdict {
                        name: if several {
                            format!("{} [{}]", e.text, full_label(r))
                        } else {
                            e.text.clone()
                        },
                        outcome,
                    }));
                }
                continue;
            }
            let want = |x: f64| format!("{} {}", e.op.symbol(), fmt(x));
            if let Subject::Ratio { metric, a, b } = &e.subject {
                let mut busy = Busy::default();
                let outcome = match (
                    e.value.clone(),
                    ratio_side(doc, a, metric, true, &mut busy),
                    ratio_side(doc, b, metric, false, &mut busy),
                ) {
                    // The parser gives a ratio a number (arithmetic over
                    // numbers folded).
                    (Rhs::Metric(_) | Rhs::Expr(_), _, _) => {
                        Some(Outcome::Fail("a ratio compares with a number".into()))
                    }
                    (_, Err(o), _) | (_, _, Err(o)) => Some(o),
                    (Rhs::Number(x), Ok(n), Ok(d)) => match claim(e.op, x, e.tolerance, true) {
                        Err(true) => Some(Outcome::Pass(f64::NAN)),
                        Err(false) => Some(Outcome::Fail("a ratio is positive".into())),
                        Ok(claim) => {
                            pending.push(Pending::Judge(
                                e.text.clone(),
                                Statistical::Ratio {
                                    a: n,
                                    b: d,
                                    claim,
                                    want: want(x),
                                    note: busy.note(),
                                },
                            ));
                            None
                        }
                    },
                };
                if let Some(outcome) = outcome {
                    pending.push(Pending::Done(Verdict {
                        name: e.text.clone(),
                        outcome,
                    }));
                }
                continue;
            }
            let runs = runs_of(doc, &e.scope);
            if runs.is_empty() {
                pending.push(Pending::Done(Verdict {
                    name: e.text.clone(),
                    outcome: no_run(doc, &e.scope),
                }));
                continue;
            }
            // A latency bound, however written: one verdict per configuration,
            // on the median over its repeats with its interval.
            if e.is_latency_bound() {
                let mut configs: Vec<(ConfigId, Vec<&RunReport>)> = Vec::new();
                for r in &runs {
                    let id = r.id();
                    match configs.iter_mut().find(|(c, _)| *c == id) {
                        Some((_, v)) => v.push(r),
                        None => configs.push((id, vec![r])),
                    }
                }
                let several = configs.len() > 1;
                for (_, members) in configs {
                    let name = if several {
                        format!("{} [{}]", e.text, full_label(members[0]))
                    } else {
                        e.text.clone()
                    };
                    pending.push(match latency_bound(e, &members) {
                        Ok(s) => Pending::Judge(name, s),
                        Err(outcome) => Pending::Done(Verdict { name, outcome }),
                    });
                }
                continue;
            }
            let several = runs.len() > 1;
            for r in runs {
                // A repeat (`--repeat`) is named by its index: one test point each.
                let repeat = r
                    .repeat
                    .map(|i| format!(" repeat {}", i + 1))
                    .unwrap_or_default();
                pending.push(Pending::Done(Verdict {
                    name: if several {
                        format!("{} [{}{repeat}]", e.text, full_label(&r))
                    } else {
                        e.text.clone()
                    },
                    outcome: on_run(e, &r),
                }));
            }
        }
        let p: Vec<f64> = pending
            .iter()
            .filter_map(|x| match x {
                Pending::Judge(_, s) => Some(s.fail_p()),
                Pending::Done(_) => None,
            })
            .collect();
        let mut levels =
            crate::gate::family::holm_levels(&p, crate::gate::Policy::DEFAULT.alpha).into_iter();
        Verdicts(
            pending
                .into_iter()
                .map(|x| match x {
                    Pending::Judge(name, s) => Verdict {
                        name,
                        outcome: s.outcome(levels.next().unwrap_or(0.0)),
                    },
                    Pending::Done(v) => v,
                })
                .collect(),
        )
    }
}
