//! Expectations: statements about a run's figures that a kernel CI can gate
//! on (`run --expect`, `sweep --expect`, `check` plans), each evaluated to
//! pass, fail or skip ([`Outcome`]), written as TAP or JUnit by
//! the front end's `output::tap` and `output::junit` (`ipivmm-cli`).
//!
//! ```text
//! [SCOPE:] SUBJECT OP NUMBER [± TOL]
//!
//! SCOPE    FIELD=VALUE[|VALUE...] ...: the runs whose configuration has
//!          one of those values in every field named (`ipi=pv`,
//!          `irqchip=kernel|split apic=x2apic`, `vcpus=2`, `workload=broadcast`;
//!          `apicv=active|inhibited|unavailable` is the state the run observed,
//!          `apicv=host|inhibit` the request; fields: docs/ci.md);
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
//!          (every vCPU), vcpus.exit_reasons.msr (summed over vCPUs);
//!          or ratio(METRIC, SCOPE_A, SCOPE_B): METRIC of A over METRIC of B
//! OP       == != < <= > >=
//! NUMBER   a number, or (for a metric or counter subject) another metric of
//!          the same run: `ipis_delivered == ipis_sent`,
//!          `ipis_per_operation == fan_out` (fan_out: the IPIs one operation
//!          of the built-in workload delivers, from its description)
//! TOL      with == or !=: `== 1 ± 0.01` (also `+-`)
//! ```
//!
//! A figure the run did not measure (no root for tracepoints, a mode this
//! host skipped) is a skip with the reason, never a pass.
mod eval;
mod parse;

pub use eval::{evaluate, Outcome, Verdict, Verdicts};
pub use parse::ParseError;

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
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
pub enum Vcpus {
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
pub struct FieldScope {
    /// The field ([`crate::results::identity::Field`]).
    pub field: crate::results::identity::Field,
    /// The values it may have (any of them matches).
    pub values: Vec<String>,
}

/// Which runs an expectation is about: `workload`, `Nv`, the label and
/// the fields, each optional (None or empty: any).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
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
}

/// A scope's vCPU count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VcpuCount {
    /// `Nv`: exactly N.
    Exactly(usize),
    /// `maxv`: the largest count among the runs the rest of the scope
    /// matches (a preset's N curve ends where this host's KVM stops).
    Max,
}

/// What an expectation reads.
#[derive(Clone, Debug, PartialEq)]
pub enum Subject {
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
        a: Scope,
        /// The denominator's runs.
        b: Scope,
    },
}

/// The right-hand side: a number, or a metric of the same run (`ipis_delivered
/// == ipis_sent`, `ipis_per_operation == fan_out`).
#[derive(Clone, Debug, PartialEq)]
pub enum Rhs {
    /// A number.
    Number(f64),
    /// A metric key, read from the same run.
    Metric(String),
}

/// One expectation, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Expectation {
    /// As the user wrote it (the test point's name).
    pub text: String,
    /// The runs it is about (ratios carry their own).
    pub scope: Scope,
    /// What it reads.
    pub subject: Subject,
    /// How it compares.
    pub op: Op,
    /// With what.
    pub value: Rhs,
    /// The tolerance of `==`/`!=` (0 otherwise).
    pub tolerance: f64,
}

impl std::str::FromStr for Expectation {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse::expectation(s)
    }
}

/// What `apicv=` matches in a scope: the request (`host`, `inhibit`) or
/// the state the run observed (`active`, `inhibited`, `unavailable`,
/// `unknown`).
pub const APICV_VALUES: [&str; 6] = [
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
pub const SCALAR_METRICS: [&str; 6] = [
    "operations",
    "ipis_sent",
    "ipis_delivered",
    "wake_ipis",
    "fan_out",
    "vcpus",
];

/// Every metric key an expectation may name.
pub fn metric_keys() -> impl Iterator<Item = &'static str> {
    crate::results::metrics::Metric::ALL
        .iter()
        .map(|m| m.key())
        .chain(SCALAR_METRICS)
}
