//! The expectation grammar (see the module doc of [`super`]).
use super::{
    inhibit_reasons, metric_keys, CounterRef, Expectation, Expr, FieldScope, HostScope, Op,
    Operand, Rhs, Scope, Sign, Subject, Term, VcpuCount, Vcpus, HOST_VERDICTS, PHASE_FIGURES,
    PHASE_FIGURE_NAMES, RUN_FIGURES,
};
use crate::results::identity::Field;
use crate::results::PhaseResult;

/// An expectation that cannot be read, with what was expected instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--expect '{text}': {problem}")]
pub struct ParseError {
    /// The expectation as given.
    pub text: String,
    /// What is wrong, and the fix.
    pub problem: String,
}

const GRAMMAR: &str = "write [SCOPE: ]SUBJECT OP NUMBER [± TOL], e.g. 'exits_per_ipi < 1.5' or 'kernel/x2apic/icr: icr_write_exits_per_ipi == 1 ± 0.01' (docs/ci.md)";

/// Parses one expectation.
pub fn expectation(text: &str) -> Result<Expectation, ParseError> {
    let bad = |problem: String| ParseError {
        text: text.to_string(),
        problem,
    };
    let t = text.trim();
    // The scope ends at a colon followed by a space: labels hold colons
    // without one (`pin:0,1`, `-exits:hlt`).
    let (scope, rest) = match t.find(": ") {
        Some(i) if !t[..i].starts_with("ratio(") && !t[..i].starts_with("unexpected_skips(") => {
            (scope(t[..i].trim()).map_err(bad)?, t[i + 2..].trim())
        }
        _ => (Scope::default(), t),
    };
    let (op_at, op) =
        find_op(rest).ok_or_else(|| bad(format!("no comparison (== != < <= > >=); {GRAMMAR}")))?;
    let subject_text = rest[..op_at].trim();
    let rhs = rest[op_at + op.symbol().len()..].trim();
    let subject = subject(subject_text).map_err(bad)?;
    let (value, tolerance) = match &subject {
        Subject::Recorded(key) => recorded_rhs(key.as_deref(), op, rhs).map_err(bad)?,
        _ => number_and_tolerance(rhs).map_err(bad)?,
    };
    // Arithmetic over numbers alone is a number (`< 1800000 + 0` is `<
    // 1800000`); one that is no finite number is no bound.
    if let Subject::Expr(x) = &subject {
        if let Some(Err(why)) = x.constant() {
            return Err(bad(why));
        }
    }
    let value = match value {
        Rhs::Expr(x) => match x.constant() {
            Some(v) => Rhs::Number(v.map_err(bad)?),
            None => Rhs::Expr(x),
        },
        v => v,
    };
    // `vcpu*` on the right reads the vCPU judged on the left.
    let left_each = match &subject {
        Subject::Counter { vcpus, .. } => *vcpus == Vcpus::Each,
        Subject::Expr(x) => x.per_vcpu(),
        _ => false,
    };
    if matches!(&value, Rhs::Expr(x) if x.per_vcpu()) && !left_each {
        return Err(bad(format!(
            "vcpu* on the right reads the vCPU judged on the left, which reads {}: e.g. 'vcpu*.phase.icr_write_exits == vcpu*.guest.icr_writes', 'ipis_delivered == vcpus.guest.ipis_received'",
            match &subject {
                Subject::Counter { vcpus, .. } => who(vcpus),
                _ => "no vCPU of its own".into(),
            }
        )));
    }
    let document_wide = matches!(subject, Subject::Ratio { .. } | Subject::UnexpectedSkips(_));
    if document_wide && scope != Scope::default() {
        return Err(bad(format!(
            "{} names its runs itself: drop the 'SCOPE: ' before it",
            subject_text.split('(').next().unwrap_or_default()
        )));
    }
    if matches!(subject, Subject::UnexpectedSkips(_) | Subject::Run(_))
        && !matches!(value, Rhs::Number(_))
    {
        return Err(bad(format!(
            "{} compares with a number",
            subject_text.split('(').next().unwrap_or_default()
        )));
    }
    if matches!(subject, Subject::Recorded(_)) && scope.phase.is_some() {
        return Err(bad(
            "recorded metrics are of the run's headline phase: drop the @PHASE".into(),
        ));
    }
    if tolerance != 0.0 && !matches!(op, Op::Eq | Op::Ne) {
        return Err(bad("a tolerance (± TOL) goes with == or != only".into()));
    }
    if matches!(subject, Subject::Ratio { .. }) && !matches!(value, Rhs::Number(_)) {
        return Err(bad(
            "a ratio compares with a number (or arithmetic over numbers), not the figures of a run: e.g. 'ratio(cycles_per_operation_p50, apic=x2apic, apic=xapic) < 1.1'".into(),
        ));
    }
    let e = Expectation {
        text: t.to_string(),
        scope,
        subject,
        op,
        value,
        tolerance,
    };
    // A latency figure is judged over a configuration's repeats, one
    // figure a run: a vCPU's own has none.
    let rhs_each = matches!(&e.value, Rhs::Expr(x) if x.per_vcpu());
    if e.is_latency_bound() && (left_each || rhs_each) {
        return Err(bad(
            "a latency figure is judged over a configuration's repeats, not per vCPU: read vcpus.… (the sum) or vcpuN.… beside it, or bound the latency on a line of its own".into(),
        ));
    }
    Ok(e)
}

/// The first comparison operator in `s` (two-character ones first).
fn find_op(s: &str) -> Option<(usize, Op)> {
    let mut best: Option<(usize, Op)> = None;
    for (sym, op) in [
        ("==", Op::Eq),
        ("!=", Op::Ne),
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("<", Op::Lt),
        (">", Op::Gt),
    ] {
        if let Some(i) = s.find(sym) {
            // A one-character operator at the start of a two-character one
            // is that one ("<" of "<=").
            let better = match best {
                None => true,
                Some((j, o)) => i < j || (i == j && sym.len() > o.symbol().len()),
            };
            if better {
                best = Some((i, op));
            }
        }
    }
    best
}

fn number(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("'{}' is not a number", s.trim()))
}

fn number_and_tolerance(s: &str) -> Result<(Rhs, f64), String> {
    let (v, tol) = match s.split_once('±').or_else(|| s.split_once("+-")) {
        Some((v, tol)) => (v, Some(tol)),
        None => (s, None),
    };
    let v = v.trim();
    let value = if metric_keys().any(|k| k == v) {
        Rhs::Metric(v.to_string())
    } else if let Ok(x) = number(v) {
        Rhs::Number(x)
    } else if v.contains(char::is_whitespace) || v.starts_with("vcpu") || v.starts_with("run.") {
        Rhs::Expr(expr(v)?)
    } else {
        Rhs::Number(number(v).map_err(|e| format!("{e} (nor a metric or counters)"))?)
    };
    let tolerance = match tol {
        None => 0.0,
        Some(t) => {
            let t = number(t)?;
            if t < 0.0 {
                return Err(format!("a negative tolerance ({t})"));
            }
            t
        }
    };
    Ok((value, tolerance))
}

/// `[WORKLOAD] [Nv] [@PHASE] [LABEL]`: the label starts at the first word
/// with a '/' (`kernel/x2apic/icr`); `@cpuid` reads phase `cpuid` (a bare
/// word names a workload).
pub(super) fn scope(s: &str) -> Result<Scope, String> {
    let mut phase = None;
    let mut words: Vec<&str> = Vec::new();
    let mut fields: Vec<FieldScope> = Vec::new();
    let mut host: Vec<HostScope> = Vec::new();
    for w in s.split_whitespace() {
        if let Some((verdict, states)) = w.strip_prefix("host.").and_then(|h| h.split_once('=')) {
            host.push(host_scope(verdict, states)?);
            continue;
        }
        // `name!=value`: none of those values.
        if let Some((name, values)) = w.split_once("!=").filter(|(n, _)| !n.contains('/')) {
            let mut f = field_scope(name, values)?;
            f.negated = true;
            fields.push(f);
            continue;
        }
        // `name=value`: a field (a label's words hold no '=' before a '/').
        if let Some((name, values)) = w.split_once('=').filter(|(n, _)| !n.contains('/')) {
            fields.push(field_scope(name, values)?);
            continue;
        }
        match w.strip_prefix('@') {
            Some(name) if phase.is_none() && crate::results::PhaseResult::is_name(name) => {
                phase = Some(name.to_string())
            }
            Some(_) => {
                return Err(format!(
                    "cannot read the scope '{s}': one @PHASE, a phase name after the '@' (e.g. '@cpuid: exits_per_ipi < 2')"
                ))
            }
            None => words.push(w),
        }
    }
    if words.is_empty() && phase.is_none() && fields.is_empty() && host.is_empty() {
        return Err("an empty scope before ': '".into());
    }
    let label_at = words
        .iter()
        .position(|w| w.contains('/'))
        .unwrap_or(words.len());
    let mut scope = Scope {
        label: (label_at < words.len()).then(|| words[label_at..].join(" ")),
        phase,
        fields,
        host,
        ..Scope::default()
    };
    for w in &words[..label_at] {
        let count = match *w {
            "maxv" => Some(VcpuCount::Max),
            _ => w
                .strip_suffix('v')
                .and_then(|n| n.parse::<usize>().ok())
                .map(VcpuCount::Exactly),
        };
        match count {
            Some(n) if scope.vcpus.is_none() => scope.vcpus = Some(n),
            _ if scope.workload.is_none() && scope.vcpus.is_none() => scope.workload = Some((*w).to_string()),
            _ => {
                return Err(format!(
                    "cannot read the scope '{s}': write [WORKLOAD] [Nv] [@PHASE] LABEL, e.g. 'broadcast 4v kernel/x2apic/icr'"
                ))
            }
        }
    }
    Ok(scope)
}

/// The values a field may be given in a scope (None: any text).
fn field_values(f: Field) -> Option<Vec<&'static str>> {
    use crate::mode::{ApicMode, IpiPath, Irqchip, TargetWait};
    Some(match f {
        Field::Target => TargetWait::ALL.iter().map(|v| v.name()).collect(),
        Field::Irqchip => Irqchip::ALL.iter().map(|v| v.name()).collect(),
        Field::Apic => ApicMode::ALL.iter().map(|v| v.name()).collect(),
        Field::Ipi => IpiPath::ALL.iter().map(|v| v.name()).collect(),
        Field::Apicv => super::APICV_VALUES.to_vec(),
        _ => return None,
    })
}

/// `host.VERDICT=s1|s2`, checked like a field.
fn host_scope(verdict: &str, states: &str) -> Result<HostScope, String> {
    if !HOST_VERDICTS.contains(&verdict) {
        return Err(format!(
            "no host verdict '{verdict}' to scope by; they are {}",
            HOST_VERDICTS.join(", ")
        ));
    }
    let states: Vec<String> = states.split('|').map(str::to_string).collect();
    if let Some(bad) = states
        .iter()
        .find(|s| !["available", "unavailable"].contains(&s.as_str()))
    {
        return Err(format!(
            "'host.{verdict}={bad}': a verdict is available or unavailable"
        ));
    }
    Ok(HostScope {
        verdict: verdict.to_string(),
        states,
    })
}

/// `name=v1|v2`, checked: a field that does not exist or a value it
/// cannot have would match nothing, silently.
fn field_scope(name: &str, values: &str) -> Result<FieldScope, String> {
    let field: Field = name.parse().map_err(|_| {
        let all: Vec<String> = Field::ALL.iter().map(|f| f.to_string()).collect();
        format!(
            "no field '{name}' to scope by; the fields are {}",
            all.join(", ")
        )
    })?;
    let mut values: Vec<String> = values.split('|').map(str::to_string).collect();
    for v in &mut values {
        if let Field::Lever(l) = field {
            // Read as the lever reads it, and spelled as its value is
            // (`exits=pause+hlt` is `hlt+pause`).
            let mut levers = crate::mode::Levers::default();
            levers
                .set_text(l, v)
                .map_err(|e| format!("'{name}={v}': not a value of {field}: {e}"))?;
            *v = levers.value(l);
            continue;
        }
        let known = match field_values(field) {
            Some(ok) => ok.contains(&v.as_str()),
            None => match field {
                Field::Vcpus => v.parse::<usize>().is_ok(),
                _ => !v.is_empty(),
            },
        };
        if !known {
            let hint = match field_values(field) {
                Some(ok) => format!(": one of {}", ok.join(", ")),
                None => String::new(),
            };
            return Err(format!("'{name}={v}': not a value of {field}{hint}"));
        }
    }
    Ok(FieldScope {
        field,
        values,
        negated: false,
    })
}

fn metric(s: &str) -> Result<String, String> {
    if metric_keys().any(|k| k == s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "no metric '{s}'; the metrics are {}, or a counter vcpuN.SOURCE.COUNTER / vcpu*.… / vcpus.…, or ratio(METRIC, SCOPE_A, SCOPE_B)",
            metric_keys().collect::<Vec<_>>().join(", ")
        ))
    }
}

fn subject(s: &str) -> Result<Subject, String> {
    if let Some(args) = s.strip_prefix("ratio(").and_then(|a| a.strip_suffix(')')) {
        // Arguments are separated by a comma and a space: labels hold
        // commas without one (`pin:0,1`).
        let parts: Vec<&str> = args.split(", ").map(str::trim).collect();
        let [m, a, b] = parts[..] else {
            return Err(format!(
                "ratio takes three arguments separated by ', ': ratio(METRIC, SCOPE_A, SCOPE_B), got '{s}'"
            ));
        };
        return Ok(Subject::Ratio {
            metric: metric(m)?,
            a: Box::new(scope(a)?),
            b: Box::new(scope(b)?),
        });
    }
    if let Some(args) = s
        .strip_prefix("unexpected_skips(")
        .and_then(|a| a.strip_suffix(')'))
    {
        return quoted_list(args).map(Subject::UnexpectedSkips);
    }
    if let Some(key) = s.strip_prefix("recorded.") {
        return match key {
            "*" => Ok(Subject::Recorded(None)),
            k => metric(k).map(|k| Subject::Recorded(Some(k))),
        };
    }
    if s.contains(char::is_whitespace) {
        return expr(s).map(Subject::Expr);
    }
    if let Some(name) = s.strip_prefix("run.") {
        return run_figure(name).map(Subject::Run);
    }
    match counter(s)? {
        Some(c) if c.phase.is_some() => Ok(Subject::Expr(Expr {
            terms: vec![Term {
                sign: Sign::Plus,
                factors: vec![(false, Operand::Counter(c))],
            }],
        })),
        Some(c) => Ok(Subject::Counter {
            vcpus: c.vcpus,
            source: c.source,
            name: c.name,
        }),
        None => metric(s).map(Subject::Metric),
    }
}

/// `run.NAME`'s name, checked against [`RUN_FIGURES`]; the argument of
/// `run.NAME:ARG` against what that figure reads (`apicv_at_end:REASON`:
/// one of KVM's inhibit reasons; a misspelt one would read 0).
fn run_figure(name: &str) -> Result<String, String> {
    let unknown = || {
        format!(
            "no figure 'run.{name}'; a run's own figures are run.{}",
            RUN_FIGURES.join(", run.")
        )
    };
    let Some((figure, arg)) = name.split_once(':') else {
        return match RUN_FIGURES.contains(&name) {
            true => Ok(name.to_string()),
            false => Err(unknown()),
        };
    };
    let Some(form) = RUN_FIGURES
        .iter()
        .find(|f| f.split_once(':').is_some_and(|(n, _)| n == figure))
    else {
        return Err(unknown());
    };
    let valid = match *form {
        "apicv_at_end:REASON" => inhibit_reasons(),
        _ => Vec::new(),
    };
    if !valid.contains(&arg) {
        return Err(format!(
            "'run.{name}': no {} '{arg}' (a misspelt one would read 0); KVM's are {}",
            match *form {
                "apicv_at_end:REASON" => "APICv inhibit reason",
                _ => "argument",
            },
            valid.join(", ")
        ));
    }
    Ok(name.to_string())
}

/// How a counter's vCPUs are written.
fn who(v: &Vcpus) -> String {
    match v {
        Vcpus::One(n) => format!("vcpu{n}"),
        Vcpus::Each => "vcpu*".into(),
        Vcpus::Sum => "vcpus".into(),
    }
}

/// `WHO[@PHASE].SOURCE.COUNTER`, checked (None: not a counter, perhaps a
/// metric).
fn counter(s: &str) -> Result<Option<CounterRef>, String> {
    let Some((who, rest)) = s.split_once('.') else {
        return Ok(None);
    };
    let (who, phase) = match who.split_once('@') {
        Some((w, p)) if crate::results::PhaseResult::is_name(p) => (w, Some(p.to_string())),
        Some(_) => {
            return Err(format!(
                "'{s}': a phase name after the '@' (vcpu1@idle.records.x)"
            ))
        }
        None => (who, None),
    };
    let vcpus = match who {
        "vcpu*" => Vcpus::Each,
        "vcpus" => Vcpus::Sum,
        w => match w.strip_prefix("vcpu").and_then(|n| n.parse().ok()) {
            Some(n) => Vcpus::One(n),
            None => return Ok(None),
        },
    };
    let Some((source, name)) = rest.split_once('.') else {
        return Err(format!(
            "'{s}': a counter is vcpuN.SOURCE.COUNTER, e.g. vcpu1.guest.ipis_received or vcpus.kvm_stats.exits"
        ));
    };
    if source == PHASE_FIGURES {
        if !PHASE_FIGURE_NAMES.contains(&name) {
            return Err(format!(
                "'{s}': the phase's figures are {}",
                PHASE_FIGURE_NAMES.join(", ")
            ));
        }
        return Ok(Some(CounterRef {
            vcpus,
            phase,
            source: source.to_string(),
            name: name.to_string(),
        }));
    }
    if !COUNTER_SOURCES.contains(&source) {
        return Err(format!(
            "'{s}': no counter source '{source}' (sources: {}, and the phase's own figures: {PHASE_FIGURES})",
            COUNTER_SOURCES.join(", ")
        ));
    }
    if PhaseResult::is_counter_name(source, name) == Some(false) {
        return Err(format!(
            "'{s}': '{source}' has no counter '{name}' (a misspelling would read 0): see docs/counters.md for its names"
        ));
    }
    Ok(Some(CounterRef {
        vcpus,
        phase,
        source: source.to_string(),
        name: name.to_string(),
    }))
}

/// `OPERAND [OP OPERAND]...`, OP one of `+ - * /` between spaces
/// (counter names hold `-`, `*` and `:`), `*` and `/` first.
fn expr(s: &str) -> Result<Expr, String> {
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.len().is_multiple_of(2) {
        return Err(format!(
            "'{s}': arithmetic ends with a figure, e.g. 'vcpu0.guest.icr_writes + 1'"
        ));
    }
    let mut terms = vec![Term {
        sign: Sign::Plus,
        factors: Vec::new(),
    }];
    let mut next = (Sign::Plus, false);
    for (i, word) in words.iter().enumerate() {
        if i % 2 == 1 {
            next = match *word {
                "+" => (Sign::Plus, false),
                "-" => (Sign::Minus, false),
                "*" => (Sign::Plus, false),
                "/" => (Sign::Plus, true),
                _ => {
                    return Err(format!(
                        "'{s}': figures are joined by ' + ', ' - ', ' * ' or ' / ', got '{word}'"
                    ))
                }
            };
            if matches!(*word, "+" | "-") {
                terms.push(Term {
                    sign: next.0,
                    factors: Vec::new(),
                });
            }
            continue;
        }
        let operand = operand(word).map_err(|e| format!("{e} (in '{s}')"))?;
        if let Some(t) = terms.last_mut() {
            t.factors.push((next.1, operand));
        }
        next = (Sign::Plus, false);
    }
    Ok(Expr { terms })
}

/// One figure of an expression: a number, a metric, a counter, `run.NAME`.
fn operand(w: &str) -> Result<Operand, String> {
    if let Ok(x) = number(w) {
        return Ok(Operand::Number(x));
    }
    if let Some(name) = w.strip_prefix("run.") {
        return run_figure(name).map(Operand::Run);
    }
    match counter(w)? {
        Some(c) => Ok(Operand::Counter(c)),
        None => metric(w).map(Operand::Metric),
    }
}

/// `"A", "B"`: texts in double quotes, separated by commas.
fn quoted_list(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let Some(body) = rest.strip_prefix('"') else {
            return Err(format!(
                "unexpected_skips takes reasons in double quotes, e.g. unexpected_skips(\"needs at least\", \"identical to\"), got '{s}'"
            ));
        };
        let Some(end) = body.find('"') else {
            return Err(format!("an unclosed quote in '{s}'"));
        };
        out.push(body[..end].to_string());
        rest = body[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    if out.iter().any(String::is_empty) {
        return Err("an empty reason would allow every skip".into());
    }
    Ok(out)
}

/// The right-hand side of `recorded.KEY` (the same KEY, recomputed) or of
/// `recorded.*` (`*`), with `==` and an optional tolerance.
fn recorded_rhs(key: Option<&str>, op: Op, rhs: &str) -> Result<(Rhs, f64), String> {
    let (v, tol) = match rhs.split_once('±').or_else(|| rhs.split_once("+-")) {
        Some((v, t)) => (v.trim(), Some(number(t)?)),
        None => (rhs.trim(), None),
    };
    let want = key.unwrap_or("*");
    if op != Op::Eq || v != want {
        return Err(format!(
            "recorded.{want} is compared with what the counters give: write 'recorded.{want} == {want}'"
        ));
    }
    match tol {
        Some(t) if t < 0.0 => Err(format!("a negative tolerance ({t})")),
        t => Ok((Rhs::Metric(want.to_string()), t.unwrap_or(0.0))),
    }
}

/// The sources a phase's counters come from: [`PhaseResult::SOURCES`].
pub(crate) const COUNTER_SOURCES: [&str; PhaseResult::SOURCES.len()] = PhaseResult::SOURCES;

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Expectation {
        expectation(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn metrics_counters_scopes_and_tolerances() {
        let e = ok("icr_write_exits_per_ipi == 1");
        assert_eq!(e.subject, Subject::Metric("icr_write_exits_per_ipi".into()));
        assert_eq!(
            (e.op, e.value, e.tolerance),
            (Op::Eq, Rhs::Number(1.0), 0.0)
        );
        let e = ok("exits_per_ipi < 1.5");
        assert_eq!((e.op, e.value), (Op::Lt, Rhs::Number(1.5)));
        let e = ok("ipis_per_operation == fan_out ± 0.001");
        assert_eq!(e.value, Rhs::Metric("fan_out".into()));
        let e = ok("kernel/x2apic/icr: icr_write_exits_per_ipi == 1 ± 0.01");
        assert_eq!(e.scope.label.as_deref(), Some("kernel/x2apic/icr"));
        assert_eq!(e.tolerance, 0.01);
        let e = ok("broadcast 4v kernel/xapic/icr pin:0,1: exits_per_ipi <= 3 ");
        assert_eq!(
            e.scope,
            Scope {
                workload: Some("broadcast".into()),
                vcpus: Some(VcpuCount::Exactly(4)),
                label: Some("kernel/xapic/icr pin:0,1".into()),
                phase: None,
                fields: Vec::new(),
                host: Vec::new(),
            }
        );
        assert_eq!(e.op, Op::Le);
        let e = ok("@cpuid: vcpus.guest.ipis_sent == 0");
        assert_eq!(e.scope.phase.as_deref(), Some("cpuid"));
        assert_eq!(
            (e.scope.workload.as_ref(), e.scope.label.as_ref()),
            (None, None)
        );
        let e = ok("scaffold 2v @measure-uncounted kernel/x2apic/icr: operations > 0");
        assert_eq!(
            e.scope,
            Scope {
                workload: Some("scaffold".into()),
                vcpus: Some(VcpuCount::Exactly(2)),
                label: Some("kernel/x2apic/icr".into()),
                phase: Some("measure-uncounted".into()),
                fields: Vec::new(),
                host: Vec::new(),
            }
        );
        let e = ok("vcpu1.guest.ipis_received >= 1000");
        assert_eq!(
            e.subject,
            Subject::Counter {
                vcpus: Vcpus::One(1),
                source: "guest".into(),
                name: "ipis_received".into()
            }
        );
        assert!(matches!(
            ok("vcpu*.kvm_stats.halt_exits > 0").subject,
            Subject::Counter {
                vcpus: Vcpus::Each,
                ..
            }
        ));
        assert!(matches!(
            ok("vcpus.exit_reasons.msr != 0 +- 0.5").subject,
            Subject::Counter {
                vcpus: Vcpus::Sum,
                ..
            }
        ));
        let e = ok("ratio(cycles_per_operation_p50, kernel/x2apic/icr, kernel/xapic/icr) < 1");
        assert!(
            matches!(e.subject, Subject::Ratio { ref metric, ref a, ref b }
            if metric == "cycles_per_operation_p50" && a.label.as_deref() == Some("kernel/x2apic/icr") && b.label.as_deref() == Some("kernel/xapic/icr"))
        );
    }

    #[test]
    fn scopes_over_fields() {
        let e = ok("ipi=pv: icr_write_exits_per_ipi == 0");
        assert_eq!(
            e.scope.fields,
            vec![FieldScope {
                field: Field::Ipi,
                values: vec!["pv".into()],
                negated: false,
            }]
        );
        let e = ok("workload!=linux:idle apic=x2apic: exits_per_ipi < 3");
        assert!(e.scope.fields[0].negated && !e.scope.fields[1].negated);
        assert_eq!(e.scope.fields[0].values, ["linux:idle"]);
        let e = ok("irqchip=kernel|split apic=x2apic vcpus=2 apicv=active: exits_per_ipi < 3");
        assert_eq!(e.scope.fields.len(), 4);
        assert_eq!(e.scope.fields[0].values, ["kernel", "split"]);
        // A host setting holds '=' itself.
        let e = ok("host-param=kvm_amd.avic=1: exits_per_ipi < 3");
        assert_eq!(e.scope.fields[0].values, ["kvm_amd.avic=1"]);
        // Every lever is a field whose junk is refused, not a scope that
        // matches nothing.
        for l in crate::mode::Lever::ALL {
            let e = expectation(&format!("{l}=maybe: exits_per_ipi < 1")).unwrap_err();
            assert!(e.problem.contains("not a value of"), "{l}: {}", e.problem);
        }
        // A lever's value is spelled as the configuration spells it.
        let e = ok("exits=pause+hlt poll=0 pv-eoi=yes: exits_per_ipi < 3");
        assert_eq!(e.scope.fields[0].values, ["hlt+pause"]);
        assert_eq!(e.scope.fields[2].field.to_string(), "pv-eoi");
        // Fields mix with the older words.
        let e = ok("broadcast 4v ipi=icr: exits_per_ipi < 3");
        assert_eq!(e.scope.workload.as_deref(), Some("broadcast"));
        for (s, needle) in [
            (
                "ipi=pvv: exits_per_ipi < 1",
                "not a value of ipi: one of icr, pv",
            ),
            ("irq=kernel: exits_per_ipi < 1", "no field 'irq'"),
            ("vcpus=two: exits_per_ipi < 1", "not a value of vcpus"),
            (
                "apicv=on: exits_per_ipi < 1",
                "one of host, inhibit, active",
            ),
            ("pv-tlb-flush=maybe: exits_per_ipi < 1", "one of yes, no"),
            ("exits=hlt+nap: exits_per_ipi < 1", "'nap' is not an exit"),
            ("poll=soon: exits_per_ipi < 1", "not a value of poll"),
            ("pin=x: exits_per_ipi < 1", "not a value of pin"),
        ] {
            let e = expectation(s).unwrap_err();
            assert!(e.problem.contains(needle), "{s}: {}", e.problem);
        }
    }

    #[test]
    fn real_counter_names_of_fixed_sources_parse() {
        for s in [
            "vcpus.userspace_exits.io_out == 0",
            "vcpu0.exit_reasons.msr > 0",
            "vcpu0.exit_reasons.EXTERNAL_INTERRUPT > 0",
            "vcpu0.exit_reasons.0x1234 == 0",
            "vcpus.exit_reasons.missing == 0",
            "vcpu1.guest.ipis_received > 0",
            "vcpus.kvm_stats.anything_the_kernel_has == 0",
            "vcpus.records.my_payload_record == 0",
        ] {
            ok(s);
        }
    }

    #[test]
    fn bad_expectations_name_the_fix() {
        for (s, needle) in [
            ("exits_per_ipi 1", "no comparison"),
            ("exits_per_ip < 1", "no metric 'exits_per_ip'"),
            ("exits_per_ipi < one", "'one' is not a number"),
            ("exits_per_ipi < 1 ± 0.1", "with == or != only"),
            ("exits_per_ipi == 1 ± -1", "negative tolerance"),
            ("vcpu0.guest < 1", "vcpuN.SOURCE.COUNTER"),
            ("ratio(exits_per_ipi, a/b) < 1", "three arguments"),
            (
                "kernel/x2apic/icr: ratio(exits_per_ipi, a/b, c/d) < 1",
                "drop the 'SCOPE: '",
            ),
            ("x y z/w: exits_per_ipi < 1", "cannot read the scope"),
            ("@a @b: exits_per_ipi < 1", "one @PHASE"),
            ("@: exits_per_ipi < 1", "one @PHASE"),
            ("exits_per_ipi < inf", "not a number"),
            // Sparse sources list only non-zero counters: a misspelling
            // must not read 0 (it used to pass `== 0`).
            (
                "vcpus.userspace_exits.io_outt == 0",
                "has no counter 'io_outt'",
            ),
            (
                "vcpus.userspace_exits.totally_made_up < 1",
                "has no counter 'totally_made_up'",
            ),
            ("vcpu0.exit_reasons.msrr == 0", "has no counter 'msrr'"),
            (
                "vcpu0.guest.ipis_recieved == 0",
                "has no counter 'ipis_recieved'",
            ),
        ] {
            let e = expectation(s).unwrap_err().to_string();
            assert!(
                e.contains(needle) && e.starts_with("--expect '"),
                "{s}: {e}"
            );
        }
    }
}
