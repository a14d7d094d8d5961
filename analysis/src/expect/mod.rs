//! Expectations: statements about a run's figures that a kernel CI can gate
//! on (`run --expect`, `sweep --expect`, `check` plans), each evaluated to
//! pass, fail, skip or, for a gate question over repeats (a ratio, a
//! latency bound), undecided ([`Outcome`]), written as TAP or JUnit by
//! the front end's `output::tap` and `output::junit` (`ipivmm-cli`).
//!
//! ```text
//! [SCOPE:] SUBJECT OP NUMBER [± TOL]
//!
//! SCOPE    FIELD=VALUE[|VALUE...] ...: the runs whose configuration has
//!          one of those values in every field named (`ipi=pv`,
//!          `irqchip=kernel|split apic=x2apic`, `vcpus=2`, `workload=broadcast`,
//!          `workload!=linux:idle` (none of them);
//!          `apicv=active|inhibited|unavailable` is the state the run observed,
//!          `apicv=host|inhibit` the request; fields: docs/ci.md); and
//!          `host.VERDICT=available|unavailable`: what the run's host had
//!          (`host.x2avic=available`);
//!          or the older words, which still work where unambiguous:
//!          [WORKLOAD] [Nv | maxv] [MODE [apicv-inhibit] [LEVER...]]: the runs
//!          of that workload, vCPU count (`maxv`: the largest that ran) and
//!          mode (`kernel/x2apic/icr`; `apicv-inhibit` is part of the mode),
//!          with at least those levers, placement or host setting
//!          (`-exits:hlt`, `rt`, `pin:0,1`, `close`, `kvm_amd.avic=1`):
//!          `kernel/x2apic/icr`, `broadcast 4v kernel/xapic/icr apicv-inhibit`
//!          (without a scope: every run)
//! SUBJECT  a headline metric, as in the JSON's runs[].metrics:
//!          exits_per_ipi, icr_write_exits_per_ipi, cycles_per_operation_p50,
//!          ipis_per_operation, operations, ipis_sent, ... ;
//!          a counter of the measured phase, as in the CSV (source.counter):
//!          vcpu1.guest.ipis_received (one vCPU), vcpu*.kvm_stats.halt_exits
//!          (every vCPU), vcpus.exit_reasons.msr (summed over vCPUs), and
//!          the phase's own figures (`phase.icr_write_exits`,
//!          `phase.icr_writes_accelerated`, `phase.apicv_active`);
//!          ratio(METRIC, SCOPE_A, SCOPE_B): METRIC of A over METRIC of B;
//!          unexpected_skips("REASON", ...): the combinations the document
//!          skipped for none of those reasons (one test point);
//!          recorded.METRIC / recorded.*: the run's `metrics` as its
//!          results file records them (against `METRIC` / `*`: what its
//!          counters give once the file is read back)
//! OP       == != < <= > >=
//! NUMBER   a number, or (for a metric or counter subject) another metric of
//!          the same run: `ipis_delivered == ipis_sent`,
//!          `ipis_per_operation == fan_out` (fan_out: the IPIs one operation
//!          of the built-in workload delivers, from its description), or
//!          arithmetic (` + - * / ` between spaces) over numbers, metrics
//!          and counters of the run (`vcpu1@idle.`: of phase idle),
//!          `vcpu*` each vCPU against its own:
//!          `vcpu*.phase.icr_write_exits == vcpu*.guest.icr_writes +
//!          vcpu*.guest.barrier_icr_writes`; the left side may be such
//!          arithmetic too; `run.NAME`: a figure of the run itself
//!          (`run.apicv_sampled`, `run.apicv_at_end:DISABLED`)
//! TOL      with == or !=: `== 1 ± 0.01` (also `+-`)
//! ```
//!
//! A figure the run did not measure (no root for tracepoints, a mode this
//! host skipped) is a skip with the reason, never a pass; a question the
//! repeats could not decide is undecided (exit 4), never a pass either.
//! Arithmetic over numbers alone is folded when parsed (`< 1 + 1` is
//! `< 2`); arithmetic that is no finite number is an error.
mod eval;
mod junit;
mod parse;
mod tap;
#[cfg(test)]
mod tests;

pub use eval::{Outcome, Verdict, Verdicts};
pub use parse::ParseError;

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// `==` (within the tolerance).
    Eq,
    /// `!=` (outside the tolerance).
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl Op {
    /// Whether `v OP x` holds, `tol` apart for `==` and `!=`.
    pub fn holds(self, v: f64, x: f64, tol: f64) -> bool {
        match self {
            Op::Eq => (v - x).abs() <= tol,
            Op::Ne => (v - x).abs() > tol,
            Op::Lt => v < x,
            Op::Le => v <= x,
            Op::Gt => v > x,
            Op::Ge => v >= x,
        }
    }

    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// Which vCPUs a counter subject reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Vcpus {
    /// `vcpuN`: that one.
    One(usize),
    /// `vcpu*`: each must hold.
    Each,
    /// `vcpus`: the sum over all.
    Sum,
}

/// One part of a scope over the configuration's fields: `apic=x2apic`,
/// `irqchip=kernel|split` (any of the values), `apicv=active` (the state
/// the run observed, not the request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldScope {
    /// The field ([`crate::results::identity::Field`]).
    pub field: crate::results::identity::Field,
    /// The values it may have (any of them matches).
    pub values: Vec<String>,
    /// `FIELD!=VALUE`: none of the values matches.
    pub negated: bool,
}

/// Which runs an expectation is about: `workload`, `Nv`, the label and
/// the fields, each optional (None or empty: any).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Scope {
    /// The workload (built-in name or the payload's workload label).
    pub workload: Option<String>,
    /// The vCPU count.
    pub vcpus: Option<VcpuCount>,
    /// The mode and the extras of the run's label (`RunReport::label`).
    pub label: Option<String>,
    /// `@NAME`: the phase the expectation reads instead of the run's
    /// headline phase (`--phase`, else the measured-phase rule).
    pub phase: Option<String>,
    /// `FIELD=VALUE[|VALUE...]` parts: every one must hold.
    pub fields: Vec<FieldScope>,
    /// `host.VERDICT=STATE[|STATE]` parts: the run's host as it recorded
    /// it (`ipivmm host`'s verdicts: `host.x2avic=available`); every one
    /// must hold.
    pub host: Vec<HostScope>,
}

/// One part of a scope over the run's host: `host.x2avic=available`,
/// `host.ipiv=unavailable` (the verdicts of `ipivmm host` the run
/// recorded in its `host_settings`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostScope {
    /// The verdict: one of `HOST_VERDICTS`.
    pub verdict: String,
    /// The states it may have: `available`, `unavailable`.
    pub states: Vec<String>,
}

/// The host verdicts a scope may name (`host.NAME=`).
pub(crate) const HOST_VERDICTS: [&str; 4] = ["apicv", "ipiv", "avic", "x2avic"];

/// A scope's vCPU count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VcpuCount {
    /// `Nv`: exactly N.
    Exactly(usize),
    /// `maxv`: the largest count among the runs the rest of the scope
    /// matches (a preset's N curve ends where this host's KVM stops).
    Max,
}

/// What an expectation reads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Subject {
    /// A key of the JSON's `runs[].metrics`.
    Metric(String),
    /// `source.counter` of the measured phase.
    Counter {
        /// Which vCPUs.
        vcpus: Vcpus,
        /// The source (`guest`, `kvm_stats`, `tracepoints`, `exit_reasons`, ...).
        source: String,
        /// The counter.
        name: String,
    },
    /// A metric of the runs of one scope over that of another.
    Ratio {
        /// The metric key.
        metric: String,
        /// The numerator's runs.
        a: Box<Scope>,
        /// The denominator's runs.
        b: Box<Scope>,
    },
    /// `unexpected_skips("REASON", ...)`: how many combinations the
    /// document skipped for a reason that holds none of these texts.
    UnexpectedSkips(Vec<String>),
    /// `recorded.METRIC` (`recorded.*`: `None`, every one): the run's
    /// `runs[].metrics` as its results file records them, judged against
    /// what the counters of the run read back from that file give.
    Recorded(Option<String>),
    /// A figure of the run itself (`RUN_FIGURES`, `run.NAME`).
    Run(String),
    /// Arithmetic over the run's figures (`vcpu*.phase.exit_reasons_complete
    /// * vcpu*.exit_reasons.lost`).
    Expr(Expr),
}

/// A sign of a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sign {
    /// `+` (or the first term).
    Plus,
    /// `-`.
    Minus,
}

/// A counter read by an expression: `vcpu1.guest.ipis_received`,
/// `vcpu*.phase.icr_write_exits`, `vcpus.kvm_stats.exits`, or one of
/// another phase than the expectation's (`vcpu1@idle.records.linux_cal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CounterRef {
    /// Which vCPUs.
    pub vcpus: Vcpus,
    /// `@PHASE`: the phase read instead of the expectation's.
    pub phase: Option<String>,
    /// The source (or `PHASE_FIGURES`).
    pub source: String,
    /// The counter.
    pub name: String,
}

/// What an expression reads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Operand {
    /// A number.
    Number(f64),
    /// A metric key of the same run.
    Metric(String),
    /// A counter of the same run.
    Counter(CounterRef),
    /// A figure of the run itself (`RUN_FIGURES`: `run.apicv_sampled`).
    Run(String),
}

/// A product of operands: `(divides, operand)`, the first one multiplied.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Term {
    /// `+` or `-`.
    pub sign: Sign,
    /// The factors, `*` (false) or `/` (true) before each.
    pub factors: Vec<(bool, Operand)>,
}

/// Arithmetic over figures of one run (`*` and `/` before `+` and `-`,
/// every operator between spaces: names hold `-`, `*` and `:`):
/// `vcpu*.guest.icr_writes + vcpu*.guest.barrier_icr_writes`,
/// `1.1 * vcpu0.records.operations + 10`. With `vcpu*` on the left, a
/// `vcpu*` counter reads the vCPU being judged.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Expr {
    /// The terms, added.
    pub terms: Vec<Term>,
}

impl std::fmt::Display for CounterRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match self.vcpus {
            Vcpus::One(n) => format!("vcpu{n}"),
            Vcpus::Each => "vcpu*".into(),
            Vcpus::Sum => "vcpus".into(),
        };
        let phase = self
            .phase
            .as_ref()
            .map(|p| format!("@{p}"))
            .unwrap_or_default();
        write!(f, "{who}{phase}.{}.{}", self.source, self.name)
    }
}

/// A number as people read it: whole numbers whole, the very large or
/// small with an exponent (`1e308`, not its 309 digits).
pub(crate) fn number_text(x: f64) -> String {
    let a = x.abs();
    if a >= 1e15 || (a != 0.0 && a < 1e-4) {
        format!("{x:e}")
    } else if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// An operand as written.
impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Operand::Number(x) => f.write_str(&number_text(*x)),
            Operand::Metric(k) => f.write_str(k),
            Operand::Counter(c) => write!(f, "{c}"),
            Operand::Run(n) => write!(f, "run.{n}"),
        }
    }
}

/// An expression as written (operators between spaces).
impl std::fmt::Display for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            match (i, t.sign) {
                (0, Sign::Plus) => {}
                (0, Sign::Minus) => f.write_str("- ")?,
                (_, Sign::Plus) => f.write_str(" + ")?,
                (_, Sign::Minus) => f.write_str(" - ")?,
            }
            for (j, (divides, o)) in t.factors.iter().enumerate() {
                if j > 0 {
                    f.write_str(if *divides { " / " } else { " * " })?;
                }
                write!(f, "{o}")?;
            }
        }
        Ok(())
    }
}

impl Expr {
    /// Its value, each operand's from `value` (`*` and `/` left to right
    /// within a term, then the terms added); Err through `bad` for a
    /// division by 0, and for a step that leaves the range of a number
    /// (inf or NaN, which no bound can be judged against). A product
    /// with a 0 in it overflows too when its other factors do (`0 *
    /// 1e308 * 1e308`): what it gives must not hang on the order of its
    /// factors.
    pub fn value<E>(
        &self,
        mut value: impl FnMut(&Operand) -> Result<f64, E>,
        bad: impl Fn(String) -> E,
    ) -> Result<f64, E> {
        let overflow = || {
            bad(format!(
                "'{self}' is no finite number (a step of it is inf or NaN): keep its figures and products within ±1.8e308"
            ))
        };
        let mut total = 0f64;
        for t in &self.terms {
            // The product, and that of its factors' sizes without the 0s.
            let (mut product, mut size) = (1f64, 1f64);
            for (divides, o) in &t.factors {
                let v = value(o)?;
                if *divides && v == 0.0 {
                    return Err(bad(format!("a division by 0 ('{o}' is 0 in '{self}')")));
                }
                let m = if v == 0.0 { 1.0 } else { v.abs() };
                (product, size) = match divides {
                    true => (product / v, size / m),
                    false => (product * v, size * m),
                };
                if !(product.is_finite() && size.is_finite()) {
                    return Err(overflow());
                }
            }
            total += match t.sign {
                Sign::Plus => product,
                Sign::Minus => -product,
            };
            if !total.is_finite() {
                return Err(overflow());
            }
        }
        Ok(total)
    }

    /// Its value when it reads numbers only (`1 + 1`): Some(Err) when
    /// that is no finite number.
    pub fn constant(&self) -> Option<Result<f64, String>> {
        let numbers = self.operands().all(|o| matches!(o, Operand::Number(_)));
        numbers.then(|| {
            self.value(
                |o| match o {
                    Operand::Number(x) => Ok(*x),
                    o => Err(format!("'{o}' is no number")),
                },
                |why| why,
            )
        })
    }

    /// Whether it reads a latency figure (`is_latency`).
    pub fn reads_latency(&self) -> bool {
        self.operands()
            .any(|o| matches!(o, Operand::Metric(k) if is_latency(k)))
    }

    /// Whether it reads a `vcpu*` counter (judged per vCPU).
    pub fn per_vcpu(&self) -> bool {
        self.operands()
            .any(|o| matches!(o, Operand::Counter(c) if c.vcpus == Vcpus::Each))
    }

    /// Every operand.
    pub fn operands(&self) -> impl Iterator<Item = &Operand> {
        self.terms
            .iter()
            .flat_map(|t| t.factors.iter().map(|(_, o)| o))
    }
}

/// The right-hand side: a number, a metric of the same run (`ipis_delivered
/// == ipis_sent`, `ipis_per_operation == fan_out`), or arithmetic over its
/// figures.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Rhs {
    /// A number.
    Number(f64),
    /// A metric key, read from the same run (`*` after `recorded.*`: each
    /// recorded metric's own key).
    Metric(String),
    /// Arithmetic over figures of the same run (and, for `vcpu*`, of the
    /// same vCPU).
    Expr(Expr),
}

/// One expectation, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    /// As the user wrote it (the test point's name).
    pub text: String,
    /// The runs it is about (ratios carry their own).
    pub(crate) scope: Scope,
    /// What it reads.
    pub(crate) subject: Subject,
    /// How it compares.
    pub(crate) op: Op,
    /// With what.
    pub(crate) value: Rhs,
    /// The tolerance of `==`/`!=` (0 otherwise).
    pub(crate) tolerance: f64,
}

impl Expectation {
    /// Whether it reads a latency figure on either side (not through
    /// `ratio()` or `recorded.`): a latency bound, judged per
    /// configuration over its repeats whatever its spelling
    /// (`cycles_per_operation_p50 < 1800000 + 0` as `< 1800000`).
    pub fn is_latency_bound(&self) -> bool {
        let subject = match &self.subject {
            Subject::Metric(k) => is_latency(k),
            Subject::Expr(x) => x.reads_latency(),
            Subject::Counter { .. } | Subject::Run(_) => false,
            Subject::Ratio { .. } | Subject::UnexpectedSkips(_) | Subject::Recorded(_) => {
                return false
            }
        };
        subject
            || match &self.value {
                Rhs::Number(_) => false,
                Rhs::Metric(k) => is_latency(k),
                Rhs::Expr(x) => x.reads_latency(),
            }
    }
}

/// Whether metric `key` is a latency figure (judged over repeats, its
/// busy repeats left out), not a count (which load cannot change).
pub(crate) fn is_latency(key: &str) -> bool {
    crate::results::metrics::Metric::ALL
        .iter()
        .any(|m| m.key() == key && !m.is_count())
}

/// The names of KVM's APICv inhibit reasons (`run.apicv_at_end:REASON`):
/// those of every kernel's `enum kvm_apicv_inhibit` ipivmm decodes.
pub(crate) fn inhibit_reasons() -> Vec<&'static str> {
    use ipivmm_counters::apicv_inhibits::InhibitTable;
    let mut out: Vec<&'static str> = Vec::new();
    for t in [
        InhibitTable::Linux6_3,
        InhibitTable::Linux6_0,
        InhibitTable::Linux5_18,
    ] {
        for n in t.names() {
            if !out.contains(n) {
                out.push(n);
            }
        }
    }
    out
}

impl std::str::FromStr for Expectation {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse::expectation(s)
    }
}

/// The pseudo-source of a phase's own figures (`vcpu*.phase.NAME`): what
/// the run derived per phase rather than counted in one source.
pub(crate) const PHASE_FIGURES: &str = "phase";

/// The figures of [`PHASE_FIGURES`]: the ICR-write exits and the ICR
/// writes accelerated (the CSV's ICR-write rows), and whether APICv/AVIC
/// was active for the phase (1) or not (0).
pub(crate) const PHASE_FIGURE_NAMES: [&str; 5] = [
    "icr_write_exits",
    "icr_writes_accelerated",
    "apicv_active",
    "exits_sampled",
    "exit_reasons_complete",
];

/// The figures of a run itself (`run.NAME`), beside its phases': whether
/// it sampled the kernel's APICv inhibit events (1, 0), whether reason
/// REASON was in effect at its end (`apicv_at_end:REASON`, 1 or 0), whether
/// the inhibit lever it pulled went unseen (1) or not (0), whether its
/// `--host-param` setting reads back as asked (1, 0), and how many runs of
/// its `--observer-effect` pairs failed.
pub(crate) const RUN_FIGURES: [&str; 5] = [
    "apicv_sampled",
    "apicv_at_end:REASON",
    "apicv_lever_missed",
    "host_param_as_asked",
    "observer_pairs_failed",
];

/// What `apicv=` matches in a scope: the request (`host`, `inhibit`) or
/// the state the run observed (`active`, `inhibited`, `unavailable`,
/// `unknown`).
pub(crate) const APICV_VALUES: [&str; 6] = [
    "host",
    "inhibit",
    "active",
    "inhibited",
    "unavailable",
    "unknown",
];

/// The scalar keys of `runs[].metrics` besides the [`Metric`]s.
///
/// [`Metric`]: crate::results::metrics::Metric
pub(crate) const SCALAR_METRICS: [&str; 6] = [
    "operations",
    "ipis_sent",
    "ipis_delivered",
    "wake_ipis",
    "fan_out",
    "vcpus",
];

/// Every metric key an expectation may name.
pub(crate) fn metric_keys() -> impl Iterator<Item = &'static str> {
    crate::results::metrics::Metric::ALL
        .iter()
        .map(|m| m.key())
        .chain(SCALAR_METRICS)
}
