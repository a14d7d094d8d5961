//! What else the host did during a run: its CPU time from /proc/stat and
//! this process's own from /proc/self/stat, read before and after, so a
//! figure measured while other work (or the hypervisor below) took the
//! CPUs says so ([`crate::stats::Instability`]).
use crate::stats::HostLoad;
use procfs::process::Process;
use procfs::{CpuTime, CurrentSI, KernelStats};

/// The readings at the start of a run.
pub struct LoadProbe {
    host: CpuTime,
    cpus: usize,
    own: u64,
}

/// This process's user and system time so far, in clock ticks (guest time
/// of the vCPU threads included: it is counted as user time).
fn own_ticks() -> Option<u64> {
    let st = Process::myself().ok()?.stat().ok()?;
    Some(st.utime + st.stime)
}

/// (busy, all, steal) ticks of `c`; guest time is already in user time.
fn ticks(c: &CpuTime) -> (u64, u64, u64) {
    let busy = c.user + c.nice + c.system + c.irq.unwrap_or(0) + c.softirq.unwrap_or(0);
    let steal = c.steal.unwrap_or(0);
    (busy, busy + c.idle + c.iowait.unwrap_or(0) + steal, steal)
}

impl LoadProbe {
    /// Reads the host's and the process's CPU time now; None where /proc
    /// cannot be read (then no load is reported, and none is flagged).
    pub fn start() -> Option<Self> {
        let k = KernelStats::current().ok()?;
        Some(Self {
            cpus: k.cpu_time.len().max(1),
            host: k.total,
            own: own_ticks()?,
        })
    }

    /// The host's load since [`LoadProbe::start`].
    pub fn finish(&self) -> Option<HostLoad> {
        let now = KernelStats::current().ok()?.total;
        let own = own_ticks()?.saturating_sub(self.own);
        let (b0, a0, s0) = ticks(&self.host);
        let (b1, a1, s1) = ticks(&now);
        let all = a1.saturating_sub(a0);
        if all == 0 {
            return None;
        }
        let frac = |x: u64| (x as f64 / all as f64).min(1.0);
        Some(HostLoad {
            cpus: self.cpus,
            busy: frac(b1.saturating_sub(b0)),
            own: frac(own),
            steal: frac(s1.saturating_sub(s0)),
        })
    }
}
