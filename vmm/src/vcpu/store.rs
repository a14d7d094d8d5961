//! Storing what a guest hands over (finished phases, records, latency
//! samples) in its vCPU's result, each charged to the run's guest memory
//! budget ([`GuestBudget`]) with a fallible allocation: a guest that sends
//! more than the budget, or an allocator that refuses, ends the vCPU with an
//! [`Excess`] instead of growing the host without limit or aborting it.
use crate::results::{PhaseResult, VcpuResult};
use ipivmm_devices::budget::{append_charged, DataKind, Excess, GuestBudget};
use std::collections::BTreeMap;
use std::mem::size_of;

/// Bookkeeping of one map entry beyond its key and value (B-tree node
/// share), for the estimate of what an entry holds.
const ENTRY_OVERHEAD: u64 = 16;

/// Host bytes one map entry keyed by `key` with a `V` value holds.
fn entry_bytes<V>(key: &str) -> u64 {
    (size_of::<String>() + size_of::<V>() + key.len()) as u64 + ENTRY_OVERHEAD
}

/// Host bytes a finished phase holds (samples excluded: they are charged
/// when they arrive).
pub(crate) fn phase_bytes(p: &PhaseResult) -> u64 {
    let maps = [&p.kvm_stats, &p.tracepoints, &p.records];
    let counters: u64 = maps
        .into_iter()
        .chain(p.by_source.iter().map(|(_, m)| m))
        .flat_map(|m| m.keys())
        .map(|k| entry_bytes::<u64>(k))
        .sum();
    let reasons: u64 = p.exit_reasons.as_ref().map_or(0, |e| {
        e.by_reason
            .keys()
            .map(|k| entry_bytes::<crate::results::ReasonCount>(k))
            .sum()
    });
    size_of::<PhaseResult>() as u64 + p.name.len() as u64 + counters + reasons
}

/// Host bytes the guest-driven data of a finished run holds, counted as
/// `Store` charged it: each phase (`phase_bytes`), the vector that
/// holds the phases (its capacity) and the samples' buffers; for a budget
/// shared by several runs ([`ipivmm_devices::budget::SharedBudget`]).
pub fn report_bytes(r: &crate::results::RunReport) -> u64 {
    r.vcpus
        .iter()
        .map(|v| {
            let vector = (v.phases.capacity() * size_of::<PhaseResult>()) as u64;
            v.phases
                .iter()
                .map(|p| {
                    phase_bytes(p).saturating_add((p.samples.capacity() * size_of::<u64>()) as u64)
                })
                .fold(vector, u64::saturating_add)
        })
        .fold(0, u64::saturating_add)
}

/// What one vCPU's guest stored, charged to the run's budget.
pub struct Store<'a> {
    /// The run's budget.
    pub budget: &'a GuestBudget,
    /// The vCPU.
    pub vcpu: usize,
}

impl Store<'_> {
    fn charge(&self, kind: DataKind, bytes: u64) -> Result<(), Excess> {
        self.budget.charge(self.vcpu, kind, bytes)
    }

    /// Room for one more element in `v` (charged to `kind` when it grows).
    fn reserve_one<T>(&self, kind: DataKind, v: &mut Vec<T>) -> Result<(), Excess> {
        if v.len() < v.capacity() {
            return Ok(());
        }
        let more = v.capacity().max(4);
        let bytes = (more * size_of::<T>()) as u64;
        self.charge(kind, bytes)?;
        v.try_reserve_exact(more).map_err(|_| {
            self.budget.release(bytes);
            self.budget.allocation_failed(self.vcpu, kind, bytes)
        })
    }

    /// Push finished phase `phase` with the samples that arrived for it
    /// before it ended.
    pub fn phase(
        &self,
        r: &mut VcpuResult,
        mut phase: PhaseResult,
        early: Option<Vec<u64>>,
    ) -> Result<(), Excess> {
        self.charge(DataKind::Phases, phase_bytes(&phase))?;
        self.reserve_one(DataKind::Phases, &mut r.phases)?;
        if let Some(samples) = early {
            // Charged when they arrived; moved, not copied.
            phase.samples = samples;
        }
        r.phases.push(phase);
        Ok(())
    }

    /// Keep `samples` (charged when they were read) in `pending` until
    /// phase `phase` ends when it is the `open` one (or has not begun),
    /// else add them to the last finished phase of that id (a phase that
    /// ended before its samples were sent).
    pub fn samples(
        &self,
        r: &mut VcpuResult,
        pending: &mut BTreeMap<u32, Vec<u64>>,
        phase: u32,
        open: bool,
        samples: Vec<u64>,
    ) -> Result<(), Excess> {
        let freed = (samples.capacity() * size_of::<u64>()) as u64;
        if samples.is_empty() {
            self.budget.release(freed);
            return Ok(());
        }
        let ended = (!open)
            .then(|| r.phases.iter_mut().rev().find(|p| p.id == phase))
            .flatten();
        if let Some(p) = ended {
            return append_charged(
                self.budget,
                self.vcpu,
                DataKind::Samples,
                &mut p.samples,
                samples,
            );
        }
        if !pending.contains_key(&phase) {
            self.charge(DataKind::Samples, entry_bytes::<Vec<u64>>(""))?;
        }
        let dst = pending.entry(phase).or_default();
        append_charged(self.budget, self.vcpu, DataKind::Samples, dst, samples)
    }

    /// Set record `name` of `p` to `value` (a new name is charged).
    pub fn record(&self, p: &mut PhaseResult, name: String, value: u64) -> Result<(), Excess> {
        if let Some(v) = p.records.get_mut(&name) {
            *v = value;
            return Ok(());
        }
        self.charge(DataKind::Records, entry_bytes::<u64>(&name))?;
        p.records.insert(name, value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(id: u32) -> PhaseResult {
        PhaseResult {
            id,
            name: format!("p{id}"),
            kvm_stats: (0..50).map(|i| (format!("stat{i}"), i)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn phases_are_charged_until_the_budget_refuses_and_then_kept() {
        let one = phase_bytes(&phase(0));
        assert!(one > 50 * 40, "maps count: {one}");
        let budget = GuestBudget::new(10 * one + 64 * 8);
        let store = Store {
            budget: &budget,
            vcpu: 3,
        };
        let mut r = VcpuResult::new(3, 3);
        let mut stored = 0;
        let err = loop {
            match store.phase(&mut r, phase(stored), None) {
                Ok(()) => stored += 1,
                Err(e) => break e,
            }
        };
        assert!((8..=10).contains(&stored), "{stored} phases fit");
        assert_eq!(r.phases.len(), stored as usize, "what fit is kept");
        assert_eq!((err.vcpu, err.kind), (3, DataKind::Phases));
        assert!(budget.used() <= budget.limit());
    }

    #[test]
    fn records_charge_new_names_only() {
        let budget = GuestBudget::new(1000);
        let store = Store {
            budget: &budget,
            vcpu: 0,
        };
        let mut p = phase(0);
        store.record(&mut p, "a".into(), 1).unwrap();
        let used = budget.used();
        store.record(&mut p, "a".into(), 2).unwrap();
        assert_eq!((budget.used(), p.records["a"]), (used, 2));
        let mut n = 0;
        let e = loop {
            match store.record(&mut p, format!("r{n}"), n) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind, DataKind::Records);
        assert!(n > 5 && budget.used() <= 1000, "{n} records");
    }

    #[test]
    fn samples_wait_for_their_phase_and_empty_ones_hold_nothing() {
        let budget = GuestBudget::new(1 << 20);
        let store = Store {
            budget: &budget,
            vcpu: 1,
        };
        let mut r = VcpuResult::new(1, 1);
        let mut pending = BTreeMap::new();
        // As the control port does: charged when read.
        budget.charge(1, DataKind::Samples, 8 * 3).unwrap();
        store
            .samples(&mut r, &mut pending, 7, true, vec![1, 2, 3])
            .unwrap();
        for phase in 0..1000 {
            store
                .samples(&mut r, &mut pending, phase + 100, false, Vec::new())
                .unwrap();
        }
        assert_eq!(pending.len(), 1, "empty messages leave nothing behind");
        let early = pending.remove(&7);
        store.phase(&mut r, phase(7), early).unwrap();
        assert_eq!(r.phases[0].samples, [1, 2, 3]);
        budget.charge(1, DataKind::Samples, 8).unwrap();
        store
            .samples(&mut r, &mut pending, 7, false, vec![4])
            .unwrap();
        assert_eq!(r.phases[0].samples, [1, 2, 3, 4]);
        // Phase 7 runs again: its samples wait for this run's end instead
        // of joining the first run's.
        budget.charge(1, DataKind::Samples, 8).unwrap();
        store
            .samples(&mut r, &mut pending, 7, true, vec![9])
            .unwrap();
        assert_eq!(r.phases[0].samples, [1, 2, 3, 4]);
        let early = pending.remove(&7);
        store.phase(&mut r, phase(7), early).unwrap();
        assert_eq!(r.phases[1].samples, [9]);
    }
}
