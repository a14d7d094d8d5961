//! One memory budget per run for everything the guest makes the host keep:
//! finished phases, records, latency samples and captured serial output,
//! over all vCPUs together; and [`SharedBudget`], one budget for all the runs
//! of an invocation (repeats, a sweep's rows), whose finished results the
//! caller keeps until it writes them.
//!
//! Every place that stores guest-driven data asks [`GuestBudget::charge`]
//! first; the first charge that does not fit is remembered as the run's
//! [`Excess`] (which vCPU, which kind of data), and the host stops the run
//! with a status that says so, keeping what was measured until then.
//!
//! ```
//! use ipivmm_devices::budget::{DataKind, GuestBudget};
//!
//! let b = GuestBudget::new(1000);
//! b.charge(0, DataKind::Phases, 600)?;
//! let e = b.charge(3, DataKind::Samples, 600).unwrap_err();
//! assert_eq!((e.vcpu, e.kind), (3, DataKind::Samples));
//! assert_eq!(b.excess(), Some(&e)); // the first excess is the run's
//! assert_eq!(b.used(), 600);        // a refused charge holds nothing
//! # Ok::<(), ipivmm_devices::budget::Excess>(())
//! ```
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The default budget: 512 MiB, two orders of magnitude above what a real
/// measurement keeps (a million samples are 8 MiB).
pub const DEFAULT_BUDGET: u64 = 512 << 20;

/// The kinds of guest-driven data the host stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataKind {
    /// Finished phases (their counters, name and maps).
    Phases,
    /// Named values (`Record` messages).
    Records,
    /// Latency samples (`Samples` messages).
    Samples,
    /// Captured serial output ([`crate::serial::SerialSink::Capture`]).
    Serial,
}

impl DataKind {
    /// The kind's name: `phases`, `records`, `samples`, `serial`.
    pub fn name(self) -> &'static str {
        match self {
            DataKind::Phases => "phases",
            DataKind::Records => "records",
            DataKind::Samples => "samples",
            DataKind::Serial => "serial",
        }
    }
}

impl fmt::Display for DataKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A charge that did not fit (or whose allocation failed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excess {
    /// The vCPU whose guest data did not fit.
    pub vcpu: usize,
    /// What it was storing.
    pub kind: DataKind,
    /// Bytes it asked for.
    pub asked: u64,
    /// Bytes held when it asked (the run's, and `earlier`).
    pub used: u64,
    /// Of `used`, what earlier runs of the same [`SharedBudget`] still hold.
    pub earlier: u64,
    /// The budget.
    pub limit: u64,
    /// The allocator refused the memory even though the budget had room.
    pub allocation_failed: bool,
}

impl fmt::Display for Excess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let earlier = match self.earlier {
            0 => String::new(),
            b => format!(", {:.1} MiB of it by earlier runs", mib(b)),
        };
        if self.allocation_failed {
            write!(
                f,
                "vcpu{}: the host could not allocate {} bytes for the guest's {} ({:.1} MiB of guest data held)",
                self.vcpu, self.asked, self.kind, mib(self.used)
            )
        } else {
            write!(
                f,
                "vcpu{}: the guest's {} exceeded the guest memory budget of {:.1} MiB ({:.1} MiB held{earlier}, {} more bytes asked)",
                self.vcpu,
                self.kind,
                mib(self.limit),
                mib(self.used),
                self.asked
            )
        }
    }
}

impl std::error::Error for Excess {}

/// The budget of one run, shared by its vCPU threads and devices.
#[derive(Debug)]
pub struct GuestBudget {
    limit: u64,
    /// Held by earlier runs of the invocation ([`SharedBudget::for_run`]).
    earlier: u64,
    used: AtomicU64,
    excess: OnceLock<Excess>,
}

impl Default for GuestBudget {
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET)
    }
}

impl GuestBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            earlier: 0,
            used: AtomicU64::new(0),
            excess: OnceLock::new(),
        }
    }

    /// No limit (for callers that do not run a VM, such as unit tests).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX)
    }

    /// The limit, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held by earlier runs when this one began (0 for a run alone).
    pub fn earlier(&self) -> u64 {
        self.earlier
    }

    /// Bytes held now (earlier runs' included).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The run's first excess, if any charge was refused.
    pub fn excess(&self) -> Option<&Excess> {
        self.excess.get()
    }

    /// Take `bytes` for `kind` of vCPU `vcpu`, or refuse (remembering the
    /// first refusal). Once a charge was refused every later one is too: the
    /// run is stopping.
    pub fn charge(&self, vcpu: usize, kind: DataKind, bytes: u64) -> Result<(), Excess> {
        let refuse = |used: u64| {
            let e = Excess {
                vcpu,
                kind,
                asked: bytes,
                used,
                earlier: self.earlier,
                limit: self.limit,
                allocation_failed: false,
            };
            self.excess.get_or_init(|| e.clone());
            Err(e)
        };
        if self.excess.get().is_some() {
            return refuse(self.used());
        }
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let next = match used.checked_add(bytes) {
                Some(n) if n <= self.limit => n,
                _ => return refuse(used),
            };
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Give back `bytes` charged earlier (data handed on or freed).
    pub fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }

    /// Record that the allocator refused `bytes` for `kind` of vCPU `vcpu`
    /// (a `try_reserve` failed): the run stops as for an excess.
    pub fn allocation_failed(&self, vcpu: usize, kind: DataKind, bytes: u64) -> Excess {
        let e = Excess {
            vcpu,
            kind,
            asked: bytes,
            used: self.used(),
            earlier: self.earlier,
            limit: self.limit,
            allocation_failed: true,
        };
        self.excess.get_or_init(|| e.clone());
        e
    }
}

/// One guest memory budget for every run of an invocation (`run --repeat`,
/// a sweep's rows, a `check` experiment): the results of a finished run
/// stay in the caller's memory until its outputs are written, so what they
/// hold ([`SharedBudget::keep`]) counts against the runs after it. However
/// many runs, the guests' data of the whole process stays within one limit.
///
/// ```
/// use ipivmm_devices::budget::{DataKind, SharedBudget};
///
/// let shared = SharedBudget::new(1000);
/// let first = shared.for_run();
/// first.charge(0, DataKind::Phases, 700)?;
/// shared.keep(first.used()); // the caller keeps the first run's results
/// let second = shared.for_run();
/// let e = second.charge(0, DataKind::Phases, 400).unwrap_err();
/// assert_eq!((e.used, e.earlier), (700, 700));
/// # Ok::<(), ipivmm_devices::budget::Excess>(())
/// ```
#[derive(Debug)]
pub struct SharedBudget {
    limit: u64,
    held: AtomicU64,
}

impl SharedBudget {
    /// A budget of `limit` bytes for all the runs of an invocation.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            held: AtomicU64::new(0),
        }
    }

    /// The limit, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes the finished runs' results hold.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The budget of the next run: the same limit, what the finished runs
    /// hold already used.
    pub fn for_run(&self) -> GuestBudget {
        let earlier = self.held().min(self.limit);
        GuestBudget {
            earlier,
            used: AtomicU64::new(earlier),
            ..GuestBudget::new(self.limit)
        }
    }

    /// A finished run's results, `bytes`, kept by the caller.
    pub fn keep(&self, bytes: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_add(bytes))
            });
    }

    /// Part of what was kept, `bytes`, freed by the caller.
    pub fn release(&self, bytes: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(bytes))
            });
    }
}

/// Append `src` to `dst`, charging the growth of `dst`'s capacity to
/// `budget` and giving back `src`'s (which was charged when it was made),
/// with a fallible allocation.
pub fn append_charged<T>(
    budget: &GuestBudget,
    vcpu: usize,
    kind: DataKind,
    dst: &mut Vec<T>,
    mut src: Vec<T>,
) -> Result<(), Excess> {
    let item = std::mem::size_of::<T>() as u64;
    let src_bytes = src.capacity() as u64 * item;
    if dst.capacity() == 0 {
        *dst = src;
        return Ok(());
    }
    let needed = dst.len().saturating_add(src.len());
    if needed > dst.capacity() {
        let new_cap = needed.max(dst.capacity().saturating_mul(2));
        let grow = (new_cap - dst.capacity()) as u64 * item;
        budget.charge(vcpu, kind, grow)?;
        if dst.try_reserve_exact(new_cap - dst.len()).is_err() {
            budget.release(grow);
            return Err(budget.allocation_failed(vcpu, kind, grow));
        }
    }
    dst.append(&mut src);
    drop(src);
    budget.release(src_bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_to_the_limit_and_the_first_excess_is_kept() {
        let b = GuestBudget::new(100);
        b.charge(0, DataKind::Phases, 60).unwrap();
        b.charge(1, DataKind::Records, 40).unwrap();
        assert_eq!(b.used(), 100);
        let e = b.charge(2, DataKind::Serial, 1).unwrap_err();
        assert_eq!(
            (e.vcpu, e.kind, e.asked, e.used),
            (2, DataKind::Serial, 1, 100)
        );
        // After the first excess everything is refused, and it stays the run's.
        b.release(100);
        let later = b.charge(0, DataKind::Samples, 1).unwrap_err();
        assert_eq!(later.vcpu, 0);
        assert_eq!(
            b.excess().map(|e| (e.vcpu, e.kind)),
            Some((2, DataKind::Serial))
        );
        let text = b.excess().unwrap().to_string();
        assert!(
            text.starts_with("vcpu2: the guest's serial exceeded the guest memory budget"),
            "{text}"
        );
    }

    #[test]
    fn overflowing_charges_are_refused() {
        let b = GuestBudget::new(u64::MAX);
        b.charge(0, DataKind::Samples, u64::MAX - 1).unwrap();
        assert!(b.charge(0, DataKind::Samples, 2).is_err());
        assert_eq!(b.used(), u64::MAX - 1);
    }

    #[test]
    fn appending_charges_the_growth_and_gives_back_the_source() {
        let b = GuestBudget::new(1 << 20);
        let mut dst: Vec<u64> = Vec::new();
        b.charge(0, DataKind::Samples, 8 * 4).unwrap();
        append_charged(&b, 0, DataKind::Samples, &mut dst, vec![1, 2, 3, 4]).unwrap();
        assert_eq!(b.used(), 32, "the first vector is moved, not copied");
        b.charge(0, DataKind::Samples, 8 * 2).unwrap();
        let mut src = Vec::with_capacity(2);
        src.extend([5, 6]);
        append_charged(&b, 0, DataKind::Samples, &mut dst, src).unwrap();
        assert_eq!(dst, [1, 2, 3, 4, 5, 6]);
        assert_eq!(b.used(), dst.capacity() as u64 * 8);
        // Growth that does not fit is refused and dst is unchanged.
        let small = GuestBudget::new(32);
        let mut d: Vec<u64> = vec![0; 8];
        let e = append_charged(&small, 5, DataKind::Samples, &mut d, vec![1]).unwrap_err();
        assert_eq!((e.vcpu, e.kind), (5, DataKind::Samples));
        assert_eq!(d.len(), 8);
    }

    #[test]
    fn a_shared_budget_counts_what_finished_runs_keep() {
        let shared = SharedBudget::new(100);
        let a = shared.for_run();
        a.charge(0, DataKind::Phases, 60).unwrap();
        shared.keep(a.used());
        // The next run starts with the first one's 60 bytes used, and its
        // own excess; the first run's excess would not be its.
        let b = shared.for_run();
        assert_eq!((b.earlier(), b.used()), (60, 60));
        b.charge(1, DataKind::Samples, 40).unwrap();
        let e = b.charge(1, DataKind::Samples, 1).unwrap_err();
        assert_eq!((e.used, e.earlier, e.limit), (100, 60, 100));
        assert!(e.to_string().contains("MiB of it by earlier runs"), "{e}");
        shared.keep(b.used() - b.earlier());
        // Over the limit, a run starts full: its first charge is refused.
        shared.keep(50);
        let c = shared.for_run();
        assert_eq!(c.used(), 100);
        assert!(c.charge(0, DataKind::Records, 1).is_err());
        assert!(b.excess().is_some() && a.excess().is_none());
    }

    #[test]
    fn an_allocation_failure_is_the_runs_excess() {
        let b = GuestBudget::new(10);
        let e = b.allocation_failed(4, DataKind::Records, 99);
        assert!(e.allocation_failed && b.excess() == Some(&e));
        assert!(e.to_string().contains("could not allocate 99 bytes"), "{e}");
    }
}
