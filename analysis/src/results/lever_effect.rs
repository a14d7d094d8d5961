//! Whether a lever acted on what it controls: the one check the text
//! report, the repeats block, the sweep's tables and `compare` print.
//!
//! Halt polling is the lever here. KVM polls a halted vCPU for up to its
//! own window, `vcpu->halt_poll_ns`, which starts at 0 and grows (to
//! `halt_poll_ns_grow_start`, then doubling up to the limit) only after a
//! halt that ended within the limit (`kvm_vcpu_halt` in
//! virt/kvm/kvm_main.c). With the limit on (the VM's KVM_CAP_HALT_POLL or
//! the host's `kvm.halt_poll_ns`) but every halt longer than it, the window
//! never leaves 0 and no poll is attempted (`halt_attempted_poll` 0): the
//! lever had nothing to act on, and a comparison against
//! `--halt-poll-ns 0` compares two runs without polling. A poll also ends
//! as soon as another task is runnable on the CPU (`kvm_vcpu_can_poll`),
//! so on a busy host polls may be attempted and never catch a wake-up.
use super::{saturating_sum as sum, PhaseResult, RunReport};

/// Where a run's halt-polling limit came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// The VM's own (`--halt-poll-ns`, KVM_CAP_HALT_POLL).
    Vm,
    /// The host's `kvm.halt_poll_ns` module parameter.
    Host,
}

/// The halt-polling counters of one phase (summed over its vCPUs), from
/// KVM's binary stats and, where tracepoints were counted, from
/// `kvm_vcpu_wakeup`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HaltPolling {
    /// The limit the run polled under, ns, and where it came from; None
    /// when the run recorded neither (an old file, no host settings).
    pub limit_ns: Option<(u64, LimitSource)>,
    /// HLT exits KVM handled (`halt_exits`).
    pub halts: u64,
    /// Halts that started with a polling window (`halt_attempted_poll`).
    pub attempted: u64,
    /// Polls that caught the wake-up (`halt_successful_poll`).
    pub successful: u64,
    /// Halts that blocked: the vCPU thread slept (`halt_wait_hist`'s
    /// count, else `halt_wakeup`).
    pub blocked: u64,
    /// Time the blocked halts slept, ns (`halt_wait_ns`).
    pub blocked_ns: u64,
    /// `kvm_vcpu_wakeup` with `waited == 0` / `== 1`, when counted.
    pub wakeups_polled_waited: Option<(u64, u64)>,
}

impl HaltPolling {
    /// The counters of `phases` (one phase, every vCPU's) of `run`; None
    /// when KVM's stats did not record halt polling (no binary stats).
    pub fn of(run: &RunReport, phases: &[&PhaseResult]) -> Option<Self> {
        if !phases
            .iter()
            .any(|p| p.kvm_stats.contains_key("halt_attempted_poll"))
        {
            return None;
        }
        let stat = |k: &str| sum(phases.iter().filter_map(|p| p.kvm_stats.get(k).copied()));
        let counted = |k: &str| {
            let v: Vec<u64> = phases
                .iter()
                .filter_map(|p| p.tracepoints.get(k).copied())
                .collect();
            (!v.is_empty()).then(|| sum(v))
        };
        let blocked = match phases
            .iter()
            .any(|p| p.kvm_stats.contains_key("halt_wait_hist"))
        {
            true => stat("halt_wait_hist"),
            false => stat("halt_wakeup"),
        };
        let wakeups = match (
            counted("kvm_vcpu_wakeup:polled"),
            counted("kvm_vcpu_wakeup:waited"),
        ) {
            (Some(p), Some(w)) => Some((p, w)),
            _ => None,
        };
        Some(Self {
            limit_ns: limit(run),
            halts: stat("halt_exits"),
            attempted: stat("halt_attempted_poll"),
            successful: stat("halt_successful_poll"),
            blocked,
            blocked_ns: stat("halt_wait_ns"),
            wakeups_polled_waited: wakeups,
        })
    }

    /// `self` and `other` added (the repeats of one configuration); the
    /// limit is `self`'s, or `other`'s where `self` has none.
    pub fn plus(self, other: &Self) -> Self {
        let both = |a: u64, b: u64| a.saturating_add(b);
        Self {
            limit_ns: self.limit_ns.or(other.limit_ns),
            halts: both(self.halts, other.halts),
            attempted: both(self.attempted, other.attempted),
            successful: both(self.successful, other.successful),
            blocked: both(self.blocked, other.blocked),
            blocked_ns: both(self.blocked_ns, other.blocked_ns),
            wakeups_polled_waited: match (self.wakeups_polled_waited, other.wakeups_polled_waited) {
                (Some((p, w)), Some((q, v))) => Some((both(p, q), both(w, v))),
                (a, b) => a.or(b),
            },
        }
    }

    /// The mean sleep of a blocked halt, ns.
    pub fn mean_blocked_ns(&self) -> Option<u64> {
        (self.blocked > 0).then(|| self.blocked_ns / self.blocked)
    }

    /// The counters in one line, e.g. `201 halts: 201 polls attempted,
    /// 195 caught the wake-up, 6 blocked (mean 702 µs); kvm_vcpu_wakeup
    /// polled 196, waited 5`.
    pub fn counts_line(&self) -> String {
        let mut s = format!(
            "{} halts: {} polls attempted, {} caught the wake-up, {} blocked",
            self.halts, self.attempted, self.successful, self.blocked
        );
        if let Some(m) = self.mean_blocked_ns() {
            s.push_str(&format!(" (mean {})", micros(m)));
        }
        if let Some((p, w)) = self.wakeups_polled_waited {
            s.push_str(&format!("; kvm_vcpu_wakeup polled {p}, waited {w}"));
        }
        s
    }
}

/// The halt-polling limit `run` ran under: the VM's, else the host's
/// `kvm.halt_poll_ns` as recorded.
pub(crate) fn limit(run: &RunReport) -> Option<(u64, LimitSource)> {
    if let Some(ns) = run.mode.levers.halt_poll_ns {
        return Some((u64::from(ns), LimitSource::Vm));
    }
    let host = run.host_settings.as_ref()?.param("kvm.halt_poll_ns")?;
    Some((host.trim().parse().ok()?, LimitSource::Host))
}

/// What a lever did not do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Halt polling on, halts, and not one poll attempted: the lever had
    /// nothing to act on.
    NothingToActOn,
    /// Polls attempted, none caught a wake-up.
    NeverCaught,
}

/// A lever that demonstrably did not act, in one line for a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeverNote {
    /// Which way it did not act.
    pub effect: Effect,
    /// The line, starting `halt polling: `.
    pub line: String,
}

impl std::fmt::Display for LeverNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.line)
    }
}

fn micros(ns: u64) -> String {
    format!("{} µs", (ns + 500) / 1000)
}

fn limit_text((ns, from): (u64, LimitSource)) -> String {
    match from {
        LimitSource::Vm => format!("halt_poll_ns {ns} (the VM's, --halt-poll-ns)"),
        LimitSource::Host => format!("halt_poll_ns {ns} (the host's kvm.halt_poll_ns)"),
    }
}

impl HaltPolling {
    /// Whether halt polling acted in `runs` (the completed repeats of one
    /// configuration, their counters added): None where it did, where it was
    /// off (a limit of 0: what was asked), or where nothing says (no halts, no
    /// KVM stats, no recorded limit); else the one line that says so for a
    /// report (`halt polling: ...`).
    pub fn note(runs: &[HaltPolling]) -> Option<String> {
        Self::lever_note(runs).map(|n| n.line)
    }

    /// [`HaltPolling::note`] with which way the lever did not act.
    pub(crate) fn lever_note(runs: &[HaltPolling]) -> Option<LeverNote> {
        let total = runs
            .iter()
            .fold(HaltPolling::default(), |acc, r| acc.plus(r));
        let limit = total.limit_ns?;
        if limit.0 == 0 || total.halts == 0 {
            return None;
        }
        let repeats = match runs.len() {
            0 | 1 => String::new(),
            n => format!(" ({n} repeats)"),
        };
        if total.attempted == 0 {
            // KVM grows the vCPU's window from 0 only after a halt within the
            // limit: say whether these halts were longer.
            let why = match total.mean_blocked_ns() {
                Some(m) if m >= limit.0 => format!(
                    "KVM starts polling only after a halt shorter than {}; these halts slept {} on average",
                    micros(limit.0),
                    micros(m)
                ),
                Some(m) => format!(
                    "these halts slept {} on average, within {}: the guest may have turned polling off (MSR_KVM_POLL_CONTROL)",
                    micros(m),
                    micros(limit.0)
                ),
                None => format!(
                    "KVM starts polling only after a halt shorter than {}",
                    micros(limit.0)
                ),
            };
            return Some(LeverNote {
                effect: Effect::NothingToActOn,
                line: format!(
                    "halt polling: 0 polls attempted in {} halts{repeats} with {}: the lever had nothing to act on here ({why})",
                    total.halts,
                    limit_text(limit)
                ),
            });
        }
        if total.successful == 0 {
            return Some(LeverNote {
                effect: Effect::NeverCaught,
                line: format!(
                    "halt polling: {} polls attempted in {} halts{repeats} with {}, none caught the wake-up: polling ran but saved no wake-up here (a poll stops when another task is runnable on the CPU, or when its window ends)",
                    total.attempted,
                    total.halts,
                    limit_text(limit)
                ),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{HostSettings, VcpuResult};

    /// A halted-target run's target phase with these KVM stats (the
    /// counts of `ipivmm run --apic x2apic --target halt --iterations 200`
    /// on kvm_pvm, 2026-12-06).
    fn run(vm_limit: Option<u32>, host_limit: Option<&str>, stats: &[(&str, u64)]) -> RunReport {
        let mut r = RunReport::not_started(
            crate::results::RunConfig {
                levers: crate::mode::Levers {
                    halt_poll_ns: vm_limit,
                    ..Default::default()
                },
                ..Default::default()
            },
            crate::mode::ApicvRequest::Host,
            "fixture",
        );
        if let Some(v) = host_limit {
            let mut s = HostSettings::of(&ipivmm_host::facts::HostInfo::synthetic(
                ipivmm_host::facts::KvmBackend::KvmPvm,
                false,
            ));
            s.params
                .entry("kvm".into())
                .or_default()
                .insert("halt_poll_ns".into(), v.into());
            r.host_settings = Some(s);
        }
        let mut v = VcpuResult::new(1, 1);
        let mut p = PhaseResult {
            id: 2,
            name: "measure".into(),
            ..Default::default()
        };
        for (k, n) in stats {
            match k.starts_with("kvm_vcpu_wakeup") {
                true => p.tracepoints.insert(k.to_string(), *n),
                false => p.kvm_stats.insert(k.to_string(), *n),
            };
        }
        v.phases.push(p);
        r.vcpus.push(v);
        r
    }

    fn counters(r: &RunReport) -> Option<HaltPolling> {
        let phases: Vec<&PhaseResult> = r.vcpus.iter().flat_map(|v| &v.phases).collect();
        HaltPolling::of(r, &phases)
    }

    /// The issue-50 run: the host's 200 µs, 200 halts, none polled.
    fn never_polled(limit: Option<u32>) -> RunReport {
        run(
            limit,
            Some("200000"),
            &[
                ("halt_exits", 200),
                ("halt_attempted_poll", 0),
                ("halt_successful_poll", 0),
                ("halt_wakeup", 200),
                ("halt_wait_hist", 200),
                ("halt_wait_ns", 200 * 236_443),
                ("kvm_vcpu_wakeup:polled", 0),
                ("kvm_vcpu_wakeup:waited", 200),
            ],
        )
    }

    /// Polling on by the host's default, 0 attempts in 200 halts: the
    /// note says the lever had nothing to act on, with the halts' mean
    /// sleep against the window (the report said nothing before).
    #[test]
    fn zero_polls_with_polling_on_is_a_lever_with_nothing_to_act_on() {
        let h = counters(&never_polled(None)).unwrap();
        assert_eq!(h.limit_ns, Some((200_000, LimitSource::Host)));
        assert_eq!(h.wakeups_polled_waited, Some((0, 200)));
        let n = HaltPolling::lever_note(&[h]).unwrap();
        assert_eq!(n.effect, Effect::NothingToActOn);
        assert_eq!(
            n.line,
            "halt polling: 0 polls attempted in 200 halts with halt_poll_ns 200000 (the host's kvm.halt_poll_ns): \
             the lever had nothing to act on here (KVM starts polling only after a halt shorter than 200 µs; \
             these halts slept 236 µs on average)"
        );
        // The VM's own limit is named as such, and repeats are counted.
        let vm = counters(&never_polled(Some(200_000))).unwrap();
        let n = HaltPolling::lever_note(&[vm, vm]).unwrap();
        assert!(
            n.line.starts_with("halt polling: 0 polls attempted in 400 halts (2 repeats) with halt_poll_ns 200000 (the VM's, --halt-poll-ns)"),
            "{n}"
        );
    }

    /// `--halt-poll-ns 0` asked for no polling: nothing to note. Neither
    /// where polling caught wake-ups, nor without halts or stats.
    #[test]
    fn polling_off_or_working_or_unknown_says_nothing() {
        let off = counters(&never_polled(Some(0))).unwrap();
        assert_eq!(off.limit_ns, Some((0, LimitSource::Vm)));
        assert_eq!(HaltPolling::lever_note(&[off]), None);
        let worked = counters(&run(
            None,
            Some("200000"),
            &[
                ("halt_exits", 201),
                ("halt_attempted_poll", 201),
                ("halt_successful_poll", 195),
                ("halt_wakeup", 6),
                ("halt_wait_ns", 6 * 700_000),
            ],
        ))
        .unwrap();
        assert_eq!(HaltPolling::lever_note(&[worked]), None);
        assert_eq!(
            worked.counts_line(),
            "201 halts: 201 polls attempted, 195 caught the wake-up, 6 blocked (mean 700 µs)"
        );
        let spinning = counters(&run(
            None,
            Some("200000"),
            &[("halt_exits", 0), ("halt_attempted_poll", 0)],
        ))
        .unwrap();
        assert_eq!(HaltPolling::lever_note(&[spinning]), None);
        // No recorded limit (an old file): nothing is claimed.
        let unknown = counters(&run(
            None,
            None,
            &[("halt_exits", 200), ("halt_attempted_poll", 0)],
        ))
        .unwrap();
        assert_eq!(HaltPolling::lever_note(&[unknown]), None);
        // No KVM binary stats: no counters at all.
        assert_eq!(counters(&run(None, Some("200000"), &[])), None);
        assert_eq!(HaltPolling::lever_note(&[]), None);
    }

    /// Polls attempted but none caught a wake-up (a busy host: another
    /// task runnable on the CPU ends every poll at once).
    #[test]
    fn polls_that_never_caught_a_wake_up_are_said() {
        let h = counters(&run(
            None,
            Some("200000"),
            &[
                ("halt_exits", 101),
                ("halt_attempted_poll", 101),
                ("halt_successful_poll", 0),
                ("halt_wakeup", 101),
            ],
        ))
        .unwrap();
        let n = HaltPolling::lever_note(&[h]).unwrap();
        assert_eq!(n.effect, Effect::NeverCaught);
        assert!(
            n.line.starts_with(
                "halt polling: 101 polls attempted in 101 halts with halt_poll_ns 200000 (the host's kvm.halt_poll_ns), none caught the wake-up"
            ),
            "{n}"
        );
    }

    /// Halts within the window and still no poll: not the window's doing,
    /// and the note does not say it is.
    #[test]
    fn short_halts_without_polls_point_at_the_guest() {
        let h = counters(&run(
            Some(200_000),
            None,
            &[
                ("halt_exits", 10),
                ("halt_attempted_poll", 0),
                ("halt_wakeup", 10),
                ("halt_wait_ns", 10 * 50_000),
            ],
        ))
        .unwrap();
        let n = HaltPolling::lever_note(&[h]).unwrap();
        assert!(
            n.line.contains("slept 50 µs on average, within 200 µs"),
            "{n}"
        );
        assert!(n.line.contains("MSR_KVM_POLL_CONTROL"), "{n}");
    }
}
