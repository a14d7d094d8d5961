//! The effective APICv/AVIC state of a run, from the kernel's own events:
//! `kvm:kvm_apicv_inhibit_changed` is sampled for the main thread (CPU-wide,
//! its samples kept) from before KVM_CREATE_VM (creation sets
//! DISABLE/ABSENT, the PIT sets PIT_REINJ...) and on every vCPU thread from its first phase marker (runtime changes
//! such as IRQWIN). The event carries the whole mask after each change, so
//! the state at any time is the last change's mask; each phase is then
//! active or not, and an inhibit lever is seen to take effect or not.
use crate::mode::apicv::InhibitLever;
use crate::results::apicv_observed::{ApicvObserved, InhibitEvent, LeverCheck, PhaseApicv};
use crate::results::VcpuResult;
use ipivmm_counters::sampler::{decode_mask, InhibitChange, InhibitSampler};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Every inhibit change the VM's threads saw.
#[derive(Debug, Default)]
pub struct InhibitLog {
    changes: Mutex<Vec<InhibitChange>>,
    names: Mutex<BTreeMap<u32, String>>,
    lost: AtomicU64,
}

impl InhibitLog {
    /// Data pages of an inhibit sampler's ring: a change is a ~40-byte
    /// record and a run sees a handful.
    pub const RING_PAGES: usize = 1;

    /// CLOCK_MONOTONIC now, ns: the samplers' clock (`use_clockid`), the
    /// clock of the times this log keeps.
    pub fn now_ns() -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
    }

    /// Adds what `sampler` saw since its last drain.
    pub fn drain(&self, sampler: &mut InhibitSampler) {
        let d = sampler.drain();
        self.add(d.changes, d.lost, sampler.names());
    }

    /// Adds `changes` (and `lost` ones), whose reasons are named `names`:
    /// a sampler's drain, or the BPF object's log of the whole run.
    pub fn add(&self, changes: Vec<InhibitChange>, lost: u64, names: &BTreeMap<u32, String>) {
        self.lost.fetch_add(lost, Ordering::Relaxed);
        let mut n = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if n.is_empty() {
            n.clone_from(names);
        }
        let mut c = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        c.extend(changes);
    }

    /// What was observed, relative to `created_ns` (just before
    /// KVM_CREATE_VM), with each vCPU phase's state filled in; None when no
    /// thread could sample the event. `host_has_apicv`: the host's verdict.
    pub fn observed(
        &self,
        created_ns: u64,
        lever: InhibitLever,
        host_has_apicv: bool,
        vcpus: &mut [VcpuResult],
        sampled: bool,
    ) -> Option<ApicvObserved> {
        if !sampled {
            return None;
        }
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut changes = self
            .changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        changes.sort_by_key(|c| c.time_ns);
        for p in vcpus.iter_mut().flat_map(|v| v.phases.iter_mut()) {
            p.apicv = Some(phase_state(&changes, p.window_ns, host_has_apicv, &names));
        }
        let name = |r: u32| names.get(&r).cloned().unwrap_or_else(|| r.to_string());
        let events = changes
            .iter()
            .map(|c| InhibitEvent {
                at_ms: (c.time_ns as f64 - created_ns as f64) / 1e6,
                reason: name(c.reason),
                set: c.set,
                inhibits: decode_mask(c.inhibits, &names),
            })
            .collect::<Vec<_>>();
        // Without APICv on the host (DISABLED) the kernel skips every other
        // reason: a lever has nothing to show.
        let lever = lever_reason(lever)
            .filter(|_| host_has_apicv)
            .map(|reason| LeverCheck {
                observed: events.iter().any(|e| e.set && e.reason == reason)
                    || events
                        .last()
                        .is_some_and(|e| e.inhibits.iter().any(|i| i == reason)),
                reason: reason.to_string(),
            });
        Some(ApicvObserved {
            inhibits_at_end: changes
                .last()
                .map_or_else(Vec::new, |c| decode_mask(c.inhibits, &names)),
            changes: events,
            lever,
            lost: self.lost.load(Ordering::Relaxed),
        })
    }
}

/// The inhibit reason a lever causes, by the kernel's name.
fn lever_reason(lever: InhibitLever) -> Option<&'static str> {
    match lever {
        InhibitLever::None => None,
        InhibitLever::NoIrqchip => Some("ABSENT"),
        InhibitLever::PitReinject => Some("PIT_REINJ"),
        InhibitLever::ApicIdModified => Some("APIC_ID_MODIFIED"),
        InhibitLever::HypervSynic => Some("HYPERV"),
    }
}

/// The state over `(begin, end)`: the mask in effect at `begin` (the last
/// change before it) and every mask set during the window.
fn phase_state(
    changes: &[InhibitChange],
    (begin, end): (u64, u64),
    host_has_apicv: bool,
    names: &BTreeMap<u32, String>,
) -> PhaseApicv {
    let at_begin = changes
        .iter()
        .rev()
        .find(|c| c.time_ns <= begin)
        .map_or(0, |c| c.inhibits);
    let during = changes
        .iter()
        .filter(|c| c.time_ns > begin && c.time_ns <= end)
        .fold(at_begin, |m, c| m | c.inhibits);
    PhaseApicv {
        active: host_has_apicv && during == 0,
        inhibits: decode_mask(during, names),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::PhaseResult;

    fn change(time_ns: u64, reason: u32, set: bool, inhibits: u64) -> InhibitChange {
        InhibitChange {
            time_ns,
            reason,
            set,
            inhibits,
        }
    }

    fn names() -> BTreeMap<u32, String> {
        [(0, "DISABLED"), (2, "ABSENT"), (9, "PIT_REINJ")]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect()
    }

    #[test]
    fn phases_see_the_mask_of_their_window() {
        // AVIC on: ABSENT at creation, cleared by the irqchip, PIT_REINJ set
        // by the PIT (the lever) and cleared again before phase 2.
        let c = [
            change(10, 2, true, 1 << 2),
            change(20, 2, false, 0),
            change(30, 9, true, 1 << 9),
            change(150, 9, false, 0),
        ];
        let p1 = phase_state(&c, (100, 140), true, &names());
        assert_eq!(
            (p1.active, p1.inhibits),
            (false, vec!["PIT_REINJ".to_string()])
        );
        let p2 = phase_state(&c, (200, 300), true, &names());
        assert_eq!((p2.active, p2.inhibits.len()), (true, 0));
        // No APICv on the host: never active, whatever the mask.
        assert!(!phase_state(&c, (200, 300), false, &names()).active);
    }

    #[test]
    fn the_lever_is_seen_or_reported_missing() {
        let log = InhibitLog::default();
        *log.names.lock().unwrap() = names();
        log.changes
            .lock()
            .unwrap()
            .extend([change(5, 0, true, 1), change(7, 9, true, 1 | 1 << 9)]);
        let mut v = vec![VcpuResult::new(0, 0)];
        v[0].phases.push(PhaseResult {
            window_ns: (8, 9),
            ..Default::default()
        });
        let o = log
            .observed(6, InhibitLever::PitReinject, true, &mut v, true)
            .unwrap();
        assert_eq!(o.lever.as_ref().map(|l| l.observed), Some(true));
        assert_eq!(o.inhibits_at_end, ["DISABLED", "PIT_REINJ"]);
        assert!(o.changes[0].at_ms < 0.0, "during creation");
        assert_eq!(v[0].phases[0].apicv.as_ref().unwrap().inhibits.len(), 2);
        let o = log
            .observed(6, InhibitLever::ApicIdModified, true, &mut v, true)
            .unwrap();
        assert_eq!(o.lever.map(|l| l.observed), Some(false));
        let o = log
            .observed(6, InhibitLever::PitReinject, false, &mut v, true)
            .unwrap();
        assert_eq!(o.lever, None, "moot without APICv on the host");
        assert!(log
            .observed(6, InhibitLever::None, true, &mut v, false)
            .is_none());
    }

    #[test]
    fn the_synic_lever_shows_as_hyperv() {
        // 6.1's bit 1 is HYPERV; the SynIC lever's SINT write sets it.
        let log = InhibitLog::default();
        *log.names.lock().unwrap() = [(1, "HYPERV"), (2, "ABSENT")]
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        log.changes.lock().unwrap().extend([
            change(5, 2, true, 1 << 2),
            change(6, 2, false, 0),
            change(7, 1, true, 1 << 1),
        ]);
        let mut v = vec![VcpuResult::new(0, 0)];
        let o = log
            .observed(4, InhibitLever::HypervSynic, true, &mut v, true)
            .unwrap();
        let lever = o.lever.unwrap();
        assert_eq!((lever.reason.as_str(), lever.observed), ("HYPERV", true));
        assert_eq!(o.inhibits_at_end, ["HYPERV"]);
    }
}
