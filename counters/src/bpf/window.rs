//! Snapshots of one vCPU thread's counts, and windows between two.

use super::layout::{code_of, VcpuCounts, EVENT_COUNTERS, EXITS_COUNTER, SLOTS, SLOT_OTHER};
use crate::exit_reasons::Isa;
use crate::sampler::{ExitTally, ReasonTally};
use std::collections::BTreeMap;

/// One vCPU thread's counts at a phase marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfSnapshot {
    counts: Box<VcpuCounts>,
    host_isa: Option<Isa>,
}

impl BpfSnapshot {
    /// A snapshot of `counts` (`host_isa`: the ISA assumed when no exit
    /// said which).
    pub fn new(counts: Box<VcpuCounts>, host_isa: Option<Isa>) -> Self {
        Self { counts, host_isa }
    }

    /// The raw counts.
    pub fn counts(&self) -> &VcpuCounts {
        &self.counts
    }

    /// The totals of the tracepoint counters `names` (as `crate::specs`
    /// names them) this snapshot holds, for windows like the perf
    /// counters' (`later - earlier`).
    pub fn counter_values(&self, names: &[&str]) -> BTreeMap<String, u64> {
        let c = &self.counts;
        names
            .iter()
            .filter_map(|&n| {
                let v = if n == EXITS_COUNTER {
                    c.exits
                } else {
                    c.events[EVENT_COUNTERS.iter().find(|e| e.name == n)?.index]
                };
                Some((n.to_string(), v))
            })
            .collect()
    }

    /// What happened between `earlier` and this snapshot, in the sampler's
    /// terms: by reason code, counted and timed, the exit in progress at
    /// this snapshot as `pending` (counted, not timed), nothing lost (the
    /// kernel counted every exit it ran the program for; KVM's `exits`
    /// stat is the check for the rest), `malformed` = unreadable records.
    pub fn since(&self, earlier: &BpfSnapshot) -> ExitTally {
        let (e, s) = (&*self.counts, &*earlier.counts);
        let isa = u32::try_from(e.isa)
            .ok()
            .and_then(Isa::from_tracepoint)
            .or(self.host_isa);
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let mut t = ExitTally {
            isa,
            exits: d(e.exits, s.exits),
            unmatched: d(e.unmatched, s.unmatched),
            malformed: d(e.unreadable, s.unreadable),
            ..ExitTally::default()
        };
        for slot in 0..SLOTS {
            let r = ReasonTally {
                count: d(e.count[slot], s.count[slot]),
                timed: d(e.timed[slot], s.timed[slot]),
                host_ns: d(e.host_ns[slot], s.host_ns[slot]),
            };
            if r == ReasonTally::default() {
                continue;
            }
            t.entries += r.timed;
            let code = code_of(slot, isa).unwrap_or_else(|| other_code(e, slot));
            let sum = t.by_reason.entry(code).or_default();
            sum.count += r.count;
            sum.timed += r.timed;
            sum.host_ns += r.host_ns;
        }
        t.pending = e.pending.checked_sub(1).map(|slot| {
            code_of(slot as usize, isa).unwrap_or_else(|| other_code(e, slot as usize))
        });
        t
    }
}

/// The code a slot without one of its own is reported under: the last code
/// the program counted in [`SLOT_OTHER`] (named `0x...` when it has no name).
fn other_code(e: &VcpuCounts, slot: usize) -> u32 {
    if slot == SLOT_OTHER {
        u32::try_from(e.other_code).unwrap_or(u32::MAX)
    } else {
        // A slot this ISA does not use: keep it apart, never drop it.
        0xffff_0000 | slot as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::layout::slot_of;

    fn snap(f: impl FnOnce(&mut VcpuCounts)) -> BpfSnapshot {
        let mut c = Box::default();
        f(&mut c);
        BpfSnapshot::new(c, Some(Isa::Svm))
    }

    #[test]
    fn a_window_is_the_difference_by_reason_code() {
        let msr = slot_of(0x7c, 2);
        let npf = slot_of(0x400, 2);
        let io = slot_of(0x7b, 2);
        let begin = snap(|c| {
            c.exits = 10;
            c.count[msr] = 10;
            c.timed[msr] = 10;
            c.host_ns[msr] = 5_000;
        });
        let end = snap(|c| {
            c.isa = 2;
            c.exits = 10 + 30 + 1;
            c.count[msr] = 10 + 20;
            c.timed[msr] = 10 + 20;
            c.host_ns[msr] = 5_000 + 40_000;
            c.count[npf] = 10;
            c.timed[npf] = 10;
            c.host_ns[npf] = 90_000;
            c.count[io] = 1; // the end marker, in progress
            c.pending = io as u32 + 1;
            c.unmatched = 2;
        });
        let t = end.since(&begin);
        assert_eq!(t.isa, Some(Isa::Svm));
        assert_eq!((t.exits, t.entries, t.unmatched, t.lost), (31, 30, 2, 0));
        assert_eq!(
            t.by_reason[&0x7c],
            ReasonTally {
                count: 20,
                timed: 20,
                host_ns: 40_000
            }
        );
        assert_eq!(t.by_reason[&0x400].count, 10);
        assert_eq!(
            t.by_reason[&0x7b],
            ReasonTally {
                count: 1,
                timed: 0,
                host_ns: 0
            }
        );
        assert_eq!(t.pending, Some(0x7b));
        let named = t.named(None);
        assert_eq!(named["msr"].count, 20);
        assert_eq!(named["npf"].host_ns, 90_000);
        assert!(t.is_complete());
    }

    #[test]
    fn codes_without_a_slot_keep_the_last_one_seen() {
        let t = snap(|c| {
            c.exits = 3;
            c.count[SLOT_OTHER] = 3;
            c.other_code = 0x1234_5678;
        })
        .since(&snap(|_| {}));
        assert_eq!(t.by_reason[&0x1234_5678].count, 3);
        assert_eq!(t.named(None).keys().collect::<Vec<_>>(), ["0x12345678"]);
    }

    #[test]
    fn vmx_names_come_from_the_basic_reason() {
        let t = snap(|c| {
            c.isa = 1;
            c.exits = 2;
            c.count[slot_of(32, 1)] = 2;
        })
        .since(&snap(|_| {}));
        assert_eq!(t.named(None)["MSR_WRITE"].count, 2);
    }
}
