//! Per-vCPU and per-phase results. Everything here survives a failing run:
//! phases are pushed as soon as their end marker is handled.
use super::exits::ExitCounts;
use super::latency::LatencyStats;
use super::source::Source;
use ipivmm_abi::GuestCounters;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One measured phase of one vCPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PhaseResult {
    /// Phase id from the payload.
    pub id: u32,
    /// Phase name from the payload.
    pub name: String,
    /// Wall time between the markers, ns.
    pub wall_ns: u64,
    /// Userspace exits in the window (includes this phase's end-marker exit).
    pub exits: ExitCounts,
    /// Guest-kept counters over the phase (end minus begin,
    /// [`GuestCounters::since`]): the ABI's own struct, so each counter is
    /// defined once, in [`GuestCounters::ALL`] (its JSON field, CSV name and
    /// docs row come from there; a field missing in an older file reads 0).
    pub guest: GuestCounters,
    /// KVM binary stats deltas (cumulative stats) by name.
    pub kvm_stats: BTreeMap<String, u64>,
    /// Tracepoint counter deltas by name.
    pub tracepoints: BTreeMap<String, u64>,
    /// The counters of the sources without a field of their own, each
    /// written as a field named after its source's key, absent when empty:
    /// `user_lapic`, ipivmm's LAPIC model (`--irqchip user` only), and any
    /// source added since.
    #[serde(flatten)]
    pub by_source: SourceMaps,
    /// ICR-write exits attributed to this vCPU, and where the figure came from.
    pub icr_write_exits: Option<IcrExits>,
    /// Exits by reason with their host time, from sampled `kvm_exit` and
    /// `kvm_entry` events (`exit_reasons = sampled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_reasons: Option<ExitReasonCounts>,
    /// APICv/AVIC during the phase, from the observed inhibits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apicv: Option<super::apicv_observed::PhaseApicv>,
    /// The uncounted part of a measured phase (`PhaseBegin` flag
    /// `UNCOUNTED`): every per-exit counter was off, so it has no
    /// tracepoints, exit reasons or (outside the user irqchip) ICR-write
    /// exits; its latency is the headline. Its counted part is the phase of
    /// the same id without the flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub uncounted: bool,
    /// The payload sent `Done` with this phase still open: its window
    /// runs from its begin marker to `Done`, not to an end marker, so it
    /// is reported (marked) rather than dropped, and never read as a
    /// finished phase.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unfinished: bool,
    /// In an uncounted part: what the per-exit counters counted although
    /// they were switched off (tracepoint counts plus exits by reason): 0
    /// when the switch worked, so a check of it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub counted_while_off: u64,
    /// Latency of the phase's samples.
    pub latency: Option<LatencyStats>,
    /// Named values the payload recorded.
    pub records: BTreeMap<String, u64>,
    /// Raw samples (TSC cycles); not written to JSON.
    #[serde(skip)]
    pub samples: Vec<u64>,
    /// CLOCK_MONOTONIC ns of the begin and end markers (to place the
    /// observed inhibits); not written to JSON.
    #[serde(skip)]
    pub window_ns: (u64, u64),
}

impl PhaseResult {
    /// The KVM binary stats of this phase that count exits of one kind
    /// (`io_exits`, `halt_exits`...), those not zero, in a fixed order; the
    /// rest of the `exits` stat is of no one kind.
    pub fn kvm_stat_exits(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        super::summary::KVM_STAT_REASONS
            .iter()
            .filter_map(|k| self.kvm_stats.get(*k).filter(|n| **n > 0).map(|n| (*k, *n)))
    }

    /// Whether `name` can name a phase a payload sends: 1 to
    /// [`ipivmm_abi::MAX_NAME_LEN`] bytes, printable, no white space.
    pub fn is_name(name: &str) -> bool {
        !name.is_empty()
            && name.len() as u64 <= ipivmm_abi::MAX_NAME_LEN
            && name.chars().all(|c| !c.is_control() && !c.is_whitespace())
    }

    /// HLT exits of the vCPU in the phase: KVM's `halt_exits` with an
    /// in-kernel LAPIC, userspace HLT exits without one.
    pub fn halt_exits(&self) -> u64 {
        let kvm = self.kvm_stats.get("halt_exits").copied().unwrap_or(0);
        kvm.max(self.exits.get(super::exits::ExitKind::Hlt))
    }

    /// Exits by reason, from whichever source counted them: the exit sampler,
    /// else the per-reason `kvm_exit:<reason>` counters. Empty when neither
    /// ran (no tracepoints, or a KVM where `kvm_exit` never fires).
    pub fn exits_by_reason(&self) -> BTreeMap<String, u64> {
        if let Some(e) = &self.exit_reasons {
            return e
                .by_reason
                .iter()
                .map(|(k, r)| (k.clone(), r.count))
                .collect();
        }
        self.tracepoints
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("kvm_exit:")?.to_string(), *v)))
            .filter(|(_, v)| *v > 0)
            .collect()
    }

    /// Every source [`PhaseResult::counters`] names, in its order (the
    /// CSV's `source` column, an expectation's `SOURCE`): the keys of
    /// [`Source::ALL`].
    pub const SOURCES: [&'static str; Source::ALL.len()] = {
        let mut keys = [""; Source::ALL.len()];
        let mut i = 0;
        while i < keys.len() {
            keys[i] = Source::ALL[i].key();
            i += 1;
        }
        keys
    };

    /// Whether `name` can be a counter of `source`, where ipivmm or the
    /// hardware fixes the names (the guest's counters, userspace exit kinds,
    /// VMX/SVM exit reasons); `None` where only the run knows them (KVM's
    /// stats, tracepoints, the LAPIC model's, the payload's records). The
    /// sources that list only their non-zero counters read a missing name
    /// as 0 only when this says it is a name at all.
    pub fn is_counter_name(source: &str, name: &str) -> Option<bool> {
        use ipivmm_counters::exit_reasons::{exit_reasons, Isa};
        let reason = |n: &str| {
            // Codes without a name are keyed `0x..` (`ExitTally::named`).
            n.strip_prefix("0x")
                .is_some_and(|h| u32::from_str_radix(h, 16).is_ok())
                || [Isa::Vmx, Isa::Svm]
                    .iter()
                    .any(|&isa| exit_reasons(isa).iter().any(|(_, r)| *r == n))
        };
        Some(match Source::of_key(source)? {
            Source::Guest => GuestCounters::ALL.iter().any(|c| c.name == name),
            Source::UserspaceExits => super::exits::ExitKind::ALL.iter().any(|k| k.name() == name),
            Source::ExitReasons => reason(name) || matches!(name, "lost" | "missing"),
            Source::ExitReasonsHostNs => reason(name),
            // KVM's stats, tracepoints, the LAPIC model's, the payload's
            // records and any source added since.
            _ => return None,
        })
    }

    /// Every counter of the phase as (source, name, value): the guest's,
    /// userspace exits, KVM stats, tracepoints, the payload's records and
    /// every source in [`PhaseResult::by_source`] (the LAPIC model's...),
    /// each under the source that produced it. A counter added to any
    /// source, or a source added, shows up here (and in the CSV) as is.
    pub fn counters(&self) -> impl Iterator<Item = (&str, &str, u64)> + '_ {
        let guest = self
            .guest
            .named()
            .into_iter()
            .map(|(k, v)| (Source::Guest.key(), k, v));
        let exits = self
            .exits
            .nonzero()
            .map(|(k, v)| (Source::UserspaceExits.key(), k.name(), v));
        let maps = [
            (Source::KvmStats, &self.kvm_stats),
            (Source::Tracepoints, &self.tracepoints),
        ];
        let records = [(Source::Records, &self.records)];
        let maps = maps
            .into_iter()
            .chain(self.by_source.iter())
            .chain(records)
            .flat_map(|(s, m)| m.iter().map(move |(k, v)| (s.key(), k.as_str(), *v)));
        guest
            .chain(exits)
            .chain(maps)
            .chain(self.sampled_counters())
    }

    /// The exit sampler's figures as counters: per reason its count
    /// (`<reason>`) and host time (`<reason>:host_ns`), then `lost` and
    /// `missing` (KVM's exits stat minus the exits counted by reason, where
    /// known).
    fn sampled_counters(&self) -> impl Iterator<Item = (&str, &str, u64)> + '_ {
        let e = self.exit_reasons.as_ref();
        let reasons = e.into_iter().flat_map(|e| {
            e.by_reason.iter().flat_map(|(k, r)| {
                [
                    (Source::ExitReasons.key(), k.as_str(), r.count),
                    (Source::ExitReasonsHostNs.key(), k.as_str(), r.host_ns),
                ]
            })
        });
        let totals = e.into_iter().flat_map(|e| {
            [
                (Source::ExitReasons.key(), "lost", Some(e.lost)),
                (Source::ExitReasons.key(), "missing", e.missing),
            ]
            .into_iter()
            .filter_map(|(s, n, v)| Some((s, n, v?)))
        });
        reasons.chain(totals)
    }
}

/// The sources with a field of their own in [`PhaseResult`] (or, for
/// `exit_reasons_host_ns`, a part of one): every other source's counters
/// are kept in [`PhaseResult::by_source`]. Closed: a new source needs no
/// field (nor a line here).
pub(crate) const OWN_FIELDS: [Source; 7] = [
    Source::Guest,
    Source::UserspaceExits,
    Source::KvmStats,
    Source::Tracepoints,
    Source::ExitReasons,
    Source::ExitReasonsHostNs,
    Source::Records,
];

/// Named counters by source, for the sources without a field of their own
/// in [`PhaseResult`] ([`OWN_FIELDS`]): each written as a field named
/// after its source's key, in [`Source::ALL`] order, absent when empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMaps(BTreeMap<Source, BTreeMap<String, u64>>);

impl SourceMaps {
    /// The phase's counters of `source` (None: it counted nothing).
    pub fn get(&self, source: Source) -> Option<&BTreeMap<String, u64>> {
        self.0.get(&source).filter(|m| !m.is_empty())
    }

    /// Set the counters of `source`, which has no field of its own.
    pub fn set(&mut self, source: Source, counters: BTreeMap<String, u64>) {
        assert!(
            !OWN_FIELDS.contains(&source),
            "{source} has a field of its own in PhaseResult"
        );
        self.0.insert(source, counters);
    }

    /// Every source's non-empty counters, in [`Source::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Source, &BTreeMap<String, u64>)> + '_ {
        self.0
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(s, m)| (*s, m))
    }
}

impl Serialize for SourceMaps {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (source, counters) in self.iter() {
            map.serialize_entry(source.key(), counters)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for SourceMaps {
    /// Reads the fields a [`PhaseResult`]'s own fields left (it is
    /// flattened): those named after a source without a field of its own;
    /// any other is skipped, as serde skips unknown fields.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = SourceMaps;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("counters by source")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<SourceMaps, A::Error> {
                let mut maps = SourceMaps::default();
                while let Some(key) = a.next_key::<String>()? {
                    match Source::of_key(&key).filter(|s| !OWN_FIELDS.contains(s)) {
                        Some(s) => {
                            maps.0.insert(s, a.next_value()?);
                        }
                        None => {
                            a.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(maps)
            }
        }
        d.deserialize_map(Visitor)
    }
}

/// Exits of one reason in a phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonCount {
    /// Exits (their `kvm_exit` seen).
    pub count: u64,
    /// Of those, exits whose return to the guest was seen too.
    pub timed: u64,
    /// Host time of the timed exits (exit to entry), ns.
    pub host_ns: u64,
}

impl ReasonCount {
    /// Mean host time per timed exit, ns.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.timed > 0).then(|| self.host_ns as f64 / self.timed as f64)
    }
}

/// Exits of a phase by reason, from the exit sampler, with what it could
/// not see: `lost` records the kernel dropped, exits it could not pair
/// (`unmatched`), and whether the figures are complete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReasonCounts {
    /// By reason name (the ISA's: SVM `msr`, VMX `MSR_WRITE`...).
    pub by_reason: BTreeMap<String, ReasonCount>,
    /// Exits sampled.
    pub exits: u64,
    /// Records the kernel dropped (ring buffer full): exits not counted.
    pub lost: u64,
    /// Exits without a matching entry (or entries without an exit).
    pub unmatched: u64,
    /// Exits in KVM's `exits` stat over the same window that were not
    /// sampled (lost, or overwritten in a full ring before the kernel could
    /// report them); None without the stat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<u64>,
    /// No record was lost, throttled or undecodable.
    pub complete: bool,
}

impl ExitReasonCounts {
    /// The figures of the sampler's merged drains over a phase.
    pub fn of(t: &ipivmm_counters::sampler::ExitTally) -> Self {
        let by_reason = t
            .named(None)
            .into_iter()
            .map(|(k, r)| {
                (
                    k,
                    ReasonCount {
                        count: r.count,
                        timed: r.timed,
                        host_ns: r.host_ns,
                    },
                )
            })
            .collect();
        Self {
            by_reason,
            exits: t.exits,
            lost: t.lost + t.throttled,
            unmatched: t.unmatched,
            missing: None,
            complete: t.is_complete(),
        }
    }
}

/// ICR-write exits of a phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IcrExits {
    /// Writes to the ICR that left guest mode.
    pub exits: u64,
    /// Guest-issued ICR writes minus exits (hardware-accelerated writes).
    pub accelerated: u64,
    /// Which counter the figure comes from.
    pub source: String,
}

impl IcrExits {
    /// Where [`IcrExits::source`] says `icr_write_exits` comes from with an
    /// in-kernel LAPIC.
    pub const SOURCE: &'static str =
        "tracepoints kvm_apic:icr_write + kvm_avic_incomplete_ipi - kvm_avic_incomplete_ipi:busy";
}

/// Why a vCPU stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum VcpuEnd {
    /// The payload sent Done with this status.
    Done {
        /// Payload status (0 = success).
        status: u64,
        /// Payload message.
        message: String,
    },
    /// The vCPU faulted or the payload reported an error.
    Fault {
        /// What happened.
        reason: String,
        /// Register dump.
        registers: Option<Registers>,
    },
    /// Stopped by the host (watchdog, another vCPU's failure, Ctrl-C).
    Stopped {
        /// Register dump at the stop.
        registers: Option<Registers>,
        /// The phase the vCPU had begun and not ended when it was stopped.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        /// It was waiting for a start-up IPI (an INIT had reset it and no
        /// SIPI followed): it could not have finished, whatever the
        /// timeout; false in older files.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        wait_for_sipi: bool,
    },
}

/// A register dump for fault reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registers {
    /// Instruction pointer.
    pub rip: u64,
    /// Stack pointer.
    pub rsp: u64,
    /// Flags.
    pub rflags: u64,
    /// General purpose registers.
    pub rax: u64,
    /// rbx.
    pub rbx: u64,
    /// rcx.
    pub rcx: u64,
    /// rdx.
    pub rdx: u64,
    /// rsi.
    pub rsi: u64,
    /// rdi.
    pub rdi: u64,
    /// rbp.
    pub rbp: u64,
    /// Control registers.
    pub cr0: u64,
    /// Faulting address of the last page fault.
    pub cr2: u64,
    /// Page table root.
    pub cr3: u64,
    /// cr4.
    pub cr4: u64,
    /// EFER.
    pub efer: u64,
}

impl Registers {
    /// The architectural reset state (rip 0xfff0, protection off): what a
    /// vCPU that KVM re-initialised reads back, never a payload's state
    /// (payloads run in long mode).
    pub fn is_reset_state(&self) -> bool {
        self.rip == 0xfff0 && self.cr0 & 1 == 0
    }
}

impl std::fmt::Display for Registers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rip={:#x} rsp={:#x} rflags={:#x} rax={:#x} rbx={:#x} rcx={:#x} rdx={:#x} rsi={:#x} rdi={:#x} rbp={:#x} cr0={:#x} cr2={:#x} cr3={:#x} cr4={:#x} efer={:#x}",
            self.rip, self.rsp, self.rflags, self.rax, self.rbx, self.rcx, self.rdx, self.rsi,
            self.rdi, self.rbp, self.cr0, self.cr2, self.cr3, self.cr4, self.efer
        )
    }
}

/// Availability of one counter source on one vCPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// The source (written as its key, [`Source::key`]).
    pub source: Source,
    /// Whether it produced figures.
    pub available: bool,
    /// Why not (or caveats).
    pub detail: Option<String>,
}

impl SourceStatus {
    /// `source`'s status.
    pub fn new(source: Source, available: bool, detail: Option<String>) -> Self {
        SourceStatus {
            source,
            available,
            detail,
        }
    }
}

/// Everything one vCPU produced.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VcpuResult {
    /// vCPU index.
    pub index: usize,
    /// APIC ID.
    pub apic_id: u32,
    /// Finished phases in the order they ended.
    pub phases: Vec<PhaseResult>,
    /// All userspace exits of the run.
    pub exits: ExitCounts,
    /// Counter sources and their availability.
    pub sources: Vec<SourceStatus>,
    /// How the vCPU ended (None while running).
    pub end: Option<VcpuEnd>,
    /// Control-port messages the host rejected, with the reason.
    pub rejected_messages: Vec<String>,
    /// Guest accesses to ports/MMIO no device claims (ignored).
    pub unclaimed_accesses: u64,
    /// Latency samples the guest sent for a phase that never ended on this
    /// vCPU (it never began, or was still open when the vCPU stopped), by
    /// phase id: kept by no phase, so counted here (empty in older files).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub samples_without_phase: BTreeMap<u32, u64>,
}

impl VcpuResult {
    /// An empty result for vCPU `index`.
    pub fn new(index: usize, apic_id: u32) -> Self {
        Self {
            index,
            apic_id,
            phases: Vec::new(),
            exits: ExitCounts::default(),
            sources: Vec::new(),
            end: None,
            rejected_messages: Vec::new(),
            unclaimed_accesses: 0,
            samples_without_phase: BTreeMap::new(),
        }
    }

    /// The finished phase with this id, if any (the first, whatever its
    /// name: see [`VcpuResult::phase_of`]).
    pub fn phase(&self, id: u32) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.id == id)
    }

    /// Every finished phase with this id and name, in the order they ended
    /// (a payload may run the same phase several times).
    pub fn phases_of<'a>(
        &'a self,
        id: u32,
        name: &'a str,
    ) -> impl Iterator<Item = &'a PhaseResult> + 'a {
        self.phases
            .iter()
            .filter(move |p| p.id == id && p.name == name)
    }

    /// The first finished phase with this id and name, if any.
    pub fn phase_of(&self, id: u32, name: &str) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.id == id && p.name == name)
    }

    /// Samples this vCPU's guest sent for phases that never ended.
    pub fn samples_without_phase_total(&self) -> u64 {
        super::saturating_sum(self.samples_without_phase.values().copied())
    }

    /// The finished phase with this name, if any.
    ///
    /// ```
    /// use ipivmm_analysis::results::VcpuResult;
    ///
    /// let v = VcpuResult::new(0, 0); // what a vCPU that never ran reports
    /// assert!(v.phase_named("measure").is_none() && v.phase(2).is_none());
    /// ```
    pub fn phase_named(&self, name: &str) -> Option<&PhaseResult> {
        self.phases.iter().find(|p| p.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_a_phase_lists_is_a_declared_source() {
        let mut p = PhaseResult {
            kvm_stats: [("exits".to_string(), 1)].into(),
            tracepoints: [("kvm_apic_ipi".to_string(), 1)].into(),
            records: [("r".to_string(), 1)].into(),
            ..Default::default()
        };
        for s in Source::ALL.iter().filter(|s| !OWN_FIELDS.contains(s)) {
            p.by_source.set(*s, [("c".to_string(), 1)].into());
        }
        p.exits.bump(super::super::exits::ExitKind::Hlt);
        p.exit_reasons = Some(ExitReasonCounts {
            by_reason: [("msr".to_string(), ReasonCount::default())].into(),
            ..Default::default()
        });
        let mut seen: Vec<&str> = p
            .counters()
            .map(|(s, n, _)| {
                if let Some(known) = PhaseResult::is_counter_name(s, n) {
                    assert!(known, "{s}.{n} is listed but not a name of {s}");
                }
                s
            })
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for s in &seen {
            assert!(PhaseResult::SOURCES.contains(s), "{s} is not in SOURCES");
        }
        assert_eq!(seen.len(), PhaseResult::SOURCES.len(), "{seen:?}");
    }

    #[test]
    fn sources_without_a_field_are_written_as_fields_of_their_own() {
        let mut p = PhaseResult::default();
        let keys = |p: &PhaseResult| -> Vec<String> {
            let v = serde_json::to_value(p).unwrap();
            v.as_object().unwrap().keys().cloned().collect()
        };
        assert!(
            !keys(&p).contains(&"user_lapic".to_string()),
            "absent when empty"
        );
        p.by_source
            .set(Source::UserLapic, [("eois".to_string(), 3)].into());
        let text = serde_json::to_string(&p).unwrap();
        // Where the field was before it moved into `by_source`.
        let at = |k: &str| text.find(&format!("\"{k}\":")).unwrap();
        assert!(at("tracepoints") < at("user_lapic") && at("user_lapic") < at("icr_write_exits"));
        let back: PhaseResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back.by_source, p.by_source);
        assert_eq!(back.by_source.get(Source::UserLapic).unwrap()["eois"], 3);
        // Other fields the struct does not know are skipped, as before.
        let mut v = serde_json::to_value(&p).unwrap();
        v["a_field_of_later"] = serde_json::json!({"x": "y"});
        let back: PhaseResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.by_source, p.by_source);
    }

    #[test]
    fn reset_state_is_told_from_a_payload_state() {
        let reset = Registers {
            rip: 0xfff0,
            cr0: 0x6000_0010,
            ..Default::default()
        };
        assert!(reset.is_reset_state());
        let long_mode = Registers {
            rip: 0xfff0,
            cr0: 0x8000_0011,
            ..Default::default()
        };
        assert!(!long_mode.is_reset_state());
    }
}
