//! Cross-vCPU synchronisation on plain atomics (`lock`-prefixed RMW and
//! `pause`, both emulated by KVM): a sense-reversing barrier, a spin lock, a
//! one-time initialiser and a bounded wait.

use crate::{cpu, percpu, tsc};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Sense-reversing barrier. The "sense" is a generation counter: a waiter
/// records the generation before arriving and spins until the last arrival
/// bumps it, so the barrier is reusable back to back without per-vCPU state.
pub struct Barrier {
    arrived: AtomicU32,
    generation: AtomicU32,
}

impl Barrier {
    /// A barrier with nobody arrived.
    pub const fn new() -> Self {
        Self {
            arrived: AtomicU32::new(0),
            generation: AtomicU32::new(0),
        }
    }

    /// Waits until `parties` vCPUs have called `wait` (interrupts are left as
    /// they are: IPIs keep being handled while spinning).
    pub fn wait(&self, parties: u32) {
        self.wait_with(parties, false)
    }

    /// [`Barrier::wait`]; with `halting`, waiters `hlt` (interrupts on)
    /// instead of spinning and the last arrival wakes them with one
    /// all-but-self IPI on the barrier vector (`ipivmm_abi::barrier_vector`),
    /// for when vCPUs outnumber host CPUs. Only for a barrier of every vCPU
    /// (the wake-up reaches all of them).
    pub fn wait_with(&self, parties: u32, halting: bool) {
        let gen = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == parties {
            // Reset before releasing: a released waiter may re-arrive at once.
            self.arrived.store(0, Ordering::Relaxed);
            self.generation
                .store(gen.wrapping_add(1), Ordering::Release);
            if halting && parties > 1 {
                crate::ipi::wake_barrier_waiters();
            }
        } else if halting && cpu::interrupts_enabled() {
            halt_until("barrier", BARRIER_TIMEOUT_SECS, || {
                self.generation.load(Ordering::Acquire) != gen
            });
        } else {
            wait_until("barrier", BARRIER_TIMEOUT_SECS, || {
                self.generation.load(Ordering::Acquire) != gen
            });
        }
    }
}

impl Default for Barrier {
    fn default() -> Self {
        Self::new()
    }
}

/// Longest a barrier waits before the payload panics (a stuck or dead vCPU).
pub const BARRIER_TIMEOUT_SECS: u64 = 600;

static GLOBAL: Barrier = Barrier::new();

/// The barrier of all `BootInfo::vcpu_count` vCPUs (halting waiters when
/// the host set `BOOT_FLAG_HALTING_BARRIERS`).
pub fn barrier() {
    let boot = percpu::boot_info();
    let halting = boot.flags & ipivmm_abi::BOOT_FLAG_HALTING_BARRIERS != 0;
    GLOBAL.wait_with(boot.vcpu_count, halting);
}

/// Like [`wait_until`], but halts between checks (called with interrupts
/// on; the check runs with them off and `sti; hlt` follows atomically, so
/// a wake-up IPI cannot slip in between). Does not publish the halt
/// (`percpu::halt_until_interrupt` does, for IPI targets).
fn halt_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let start = tsc::now_plain();
    let limit = tsc::cycles_for_secs(percpu::boot_info().tsc_khz, secs);
    loop {
        cpu::disable_interrupts();
        if cond() {
            cpu::enable_interrupts();
            return;
        }
        cpu::enable_interrupts_and_halt();
        if tsc::now_plain().wrapping_sub(start) > limit {
            panic!("timed out after {secs} s waiting for {what}");
        }
    }
}

/// Spins (with `pause`) until `cond` holds; panics naming `what` after
/// `secs` seconds of TSC time, so a lost IPI shows up as a clear failure
/// instead of a watchdog timeout.
#[inline(always)]
pub fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    if cond() {
        return;
    }
    let start = tsc::now_plain();
    let limit = tsc::cycles_for_secs(percpu::boot_info().tsc_khz, secs);
    let mut spins: u32 = 0;
    while !cond() {
        cpu::pause();
        spins = spins.wrapping_add(1);
        // Read the TSC only now and then: every instruction is emulated here.
        if spins & 0xff == 0 && tsc::now_plain().wrapping_sub(start) > limit {
            panic!("timed out after {secs} s waiting for {what}");
        }
    }
}

/// A test-and-set spin lock (serial console lines).
pub struct SpinLock {
    locked: AtomicBool,
}

impl SpinLock {
    /// Unlocked.
    pub const fn new() -> Self {
        Self {
            locked: AtomicBool::new(false),
        }
    }

    /// Takes the lock, giving up after `max_spins` (returns false then).
    pub fn try_lock_for(&self, max_spins: u32) -> bool {
        for _ in 0..max_spins {
            if self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            cpu::pause();
        }
        false
    }

    /// Releases the lock.
    pub fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

impl Default for SpinLock {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs an initialiser exactly once across vCPUs; later callers wait for it.
pub struct Once {
    state: AtomicU32, // 0 = new, 1 = running, 2 = done
}

impl Once {
    /// Not yet run.
    pub const fn new() -> Self {
        Self {
            state: AtomicU32::new(0),
        }
    }

    /// Runs `f` if nobody has, else waits until whoever does has finished.
    pub fn call(&self, f: impl FnOnce()) {
        if self
            .state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
            .is_ok()
        {
            f();
            self.state.store(2, Ordering::Release);
        } else {
            while self.state.load(Ordering::Acquire) != 2 {
                cpu::pause();
            }
        }
    }
}

impl Default for Once {
    fn default() -> Self {
        Self::new()
    }
}
