//! Which mechanism counted a run's exits by reason, read from what its
//! vCPUs' sources say (the `exit_reasons` source's detail starts with the
//! mechanism: `bpf:`, `sampled:`, `counters:`, `off:`), so recorded runs
//! say it too. The report's header and the counting-cost line name it.
use super::source::Source;
use super::{RunReport, SourceStatus};
use std::fmt;

/// How exits were counted by reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// The BPF object's raw `kvm_exit` program (no record built).
    BpfRaw,
    /// The BPF object's program on `kvm:kvm_exit`'s record.
    BpfRecord,
    /// The exit sampler: `kvm_exit`/`kvm_entry` records into a ring.
    Sampler,
    /// One filtered perf counter per reason (`--exit-reasons counters`).
    Counters,
    /// Not by reason.
    None,
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::BpfRaw => "bpf raw",
            Mechanism::BpfRecord => "bpf record",
            Mechanism::Sampler => "sampler",
            Mechanism::Counters => "per-reason counters",
            Mechanism::None => "none",
        })
    }
}

/// The mechanism of a run and why that one (None: nothing to add).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitCounting {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// Why this one, in a few words.
    pub why: Option<String>,
}

impl fmt::Display for ExitCounting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            Some(why) => write!(f, "{} ({why})", self.mechanism),
            None => write!(f, "{}", self.mechanism),
        }
    }
}

/// The text of `detail` from `key` to the next `)` or `;` (or its end).
fn clause<'a>(detail: &'a str, key: &str) -> Option<&'a str> {
    let start = detail.find(key)? + key.len();
    let rest = &detail[start..];
    let end = rest.find([')', ';']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The first clause of `detail`: up to ` (`, `,` or `;`.
fn first_clause(detail: &str) -> &str {
    let end = [" (", ",", ";"]
        .iter()
        .filter_map(|p| detail.find(p))
        .min()
        .unwrap_or(detail.len());
    detail[..end].trim()
}

/// What one vCPU's sources say.
pub(crate) fn of_sources(sources: &[SourceStatus]) -> ExitCounting {
    let counting = |mechanism, why: Option<&str>| ExitCounting {
        mechanism,
        why: why.map(str::to_string),
    };
    let off = sources.iter().any(|s| {
        s.source == Source::Tracepoints
            && s.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("disabled"))
    });
    if off {
        return counting(Mechanism::None, Some("tracepoints off: --no-tracepoints"));
    }
    let Some(s) = sources.iter().find(|s| s.source == Source::ExitReasons) else {
        let why = sources
            .iter()
            .find(|s| s.source == Source::Tracepoints && !s.available)
            .and_then(|s| s.detail.as_deref())
            .map_or("no counted phase began", first_clause);
        return counting(Mechanism::None, Some(why));
    };
    let detail = s.detail.as_deref().unwrap_or_default();
    if !s.available {
        // A KVM whose kvm_exit never fires (kvm_pvm): whatever was attached.
        let mechanism = match detail {
            d if d.starts_with("counters:") => Mechanism::Counters,
            _ => Mechanism::None,
        };
        let attached = match detail {
            d if d.contains("(bpf: ") => "; the bpf object attached",
            d if d.contains("(sampled: ") => "; the sampler attached",
            _ => "",
        };
        let why = format!("{}{attached}", first_clause(detail));
        return counting(mechanism, Some(&why));
    }
    if detail.starts_with("bpf:") {
        if detail.contains("exits on the raw ") {
            return counting(Mechanism::BpfRaw, Some("in the kernel, no record built"));
        }
        if let Some(why) = clause(detail, "(not raw: ") {
            return counting(Mechanism::BpfRecord, Some(&format!("not raw: {why}")));
        }
        return counting(Mechanism::None, clause(detail, "no program attached ("));
    }
    if detail.starts_with("sampled:") {
        let why = clause(detail, "(bpf unavailable: ")
            .map(|w| format!("bpf unavailable: {w}"))
            .unwrap_or_else(|| "asked for: --exit-reasons sampled".into());
        return counting(Mechanism::Sampler, Some(&why));
    }
    counting(Mechanism::None, Some(first_clause(detail)))
}

impl RunReport {
    /// How this run counted exits by reason (vCPU 0's sources; every vCPU
    /// opens the same).
    pub fn exit_counting(&self) -> ExitCounting {
        self.vcpus
            .first()
            .map_or_else(|| of_sources(&[]), |v| of_sources(&v.sources))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(source: Source, available: bool, detail: &str) -> SourceStatus {
        SourceStatus::new(source, available, Some(detail.into()))
    }

    #[test]
    fn each_detail_names_its_mechanism() {
        let cases = [
            (src(Source::ExitReasons, true, "bpf: counted in the kernel per vCPU thread, host time to raw kvm_entry; exits on the raw kvm_exit (reason read from vcpu_svm's vmcb->control.exit_code: no record built), attached throughout and idle while no vCPU counts"), "bpf raw (in the kernel, no record built)"),
            (src(Source::ExitReasons, true, "bpf: counted in the kernel per vCPU thread, host time to raw kvm_entry; exits on the kvm:kvm_exit read from its record (not raw: no BTF for kvm_amd); its program detached while no vCPU counts"), "bpf record (not raw: no BTF for kvm_amd)"),
            (src(Source::ExitReasons, true, "sampled: kvm_exit/kvm_entry into a 256 KiB ring (bpf unavailable: loading the BPF exit counter failed: EPERM)"), "sampler (bpf unavailable: loading the BPF exit counter failed: EPERM)"),
            (src(Source::ExitReasons, true, "sampled: kvm_exit/kvm_entry into a 256 KiB ring"), "sampler (asked for: --exit-reasons sampled)"),
            (src(Source::ExitReasons, false, "off: not by reason (exit_reasons is `off`)"), "none (off: not by reason)"),
            (src(Source::ExitReasons, false, "counters: not by reason (exit_reasons is `counters`)"), "per-reason counters (counters: not by reason)"),
            (src(Source::ExitReasons, false, "kvm_pvm backend: kvm:kvm_exit never fires (software KVM without VMX/SVM exits), so no exit is counted by reason (bpf: ...: every exit counts as missing)"), "none (kvm_pvm backend: kvm:kvm_exit never fires; the bpf object attached)"),
            (src(Source::Tracepoints, false, "disabled (--no-tracepoints, VmConfig::tracepoints = false)"), "none (tracepoints off: --no-tracepoints)"),
        ];
        // --no-tracepoints: the exit source says `off`, the tracepoints why.
        let notp = [
            src(
                Source::Tracepoints,
                false,
                "disabled (--no-tracepoints, VmConfig::tracepoints = false)",
            ),
            src(
                Source::ExitReasons,
                false,
                "off: not by reason (exit_reasons is `off`)",
            ),
        ];
        assert_eq!(
            of_sources(&notp).to_string(),
            "none (tracepoints off: --no-tracepoints)"
        );
        for (s, want) in cases {
            assert_eq!(
                of_sources(std::slice::from_ref(&s)).to_string(),
                want,
                "{s:?}"
            );
        }
        assert_eq!(of_sources(&[]).to_string(), "none (no counted phase began)");
    }
}
