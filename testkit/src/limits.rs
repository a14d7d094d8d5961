//! Time limits that follow the host's speed. A VM test's watchdog (and any
//! bound on how long something may take) is set for an idle machine; on a
//! shared machine, where other test binaries or a VM sweep load every CPU,
//! the same work takes many times longer, and a fixed limit fails a test
//! that is not broken. [`scaled`] stretches a limit by how much slower the
//! host runs right now ([`slowdown`]): measured from the load average per
//! CPU and from the share of a CPU a spinning thread of this process gets.
//! On an idle machine the factor is 1 and the limits are as written, so a
//! guest that really hangs is still caught as fast as before.
use std::io::Write;
use std::sync::Once;
use std::time::{Duration, Instant};

/// The largest factor a limit is stretched by (a hang is still caught).
pub const MAX_SLOWDOWN: f64 = 50.0;
/// Margin on a measured slowdown above 1: the load can grow during the test.
const HEADROOM: f64 = 1.5;
/// Below this factor the host counts as idle (a probe's own noise).
const IDLE_BELOW: f64 = 1.25;
/// How long the CPU-share probe spins.
const PROBE: Duration = Duration::from_millis(50);
/// Environment variable that sets the factor (a number ≥ 1) instead.
pub const SCALE_VAR: &str = "IPIVMM_TEST_TIME_SCALE";

static SAID: Once = Once::new();
static SAID_SCALE: Once = Once::new();

/// What [`slowdown`] measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Load {
    /// The 1-minute load average over the CPUs this process may use.
    pub per_cpu: f64,
    /// The share of one CPU a spinning thread got over the probe (0..=1).
    pub cpu_share: f64,
}

impl Load {
    /// The slowdown this load means: the larger of the two measures, with
    /// a margin when the host is busy (1 when it is idle), at most
    /// [`MAX_SLOWDOWN`].
    pub fn slowdown(self) -> f64 {
        let share = if self.cpu_share > 0.0 {
            1.0 / self.cpu_share
        } else {
            MAX_SLOWDOWN
        };
        let f = self.per_cpu.max(share);
        if f.is_finite() && f >= IDLE_BELOW {
            (f * HEADROOM).min(MAX_SLOWDOWN)
        } else if f.is_finite() {
            1.0
        } else {
            MAX_SLOWDOWN
        }
    }
}

/// The 1-minute load average per usable CPU, from /proc/loadavg (0 when it
/// cannot be read).
fn load_per_cpu() -> f64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |l| l / cpus)
}

/// The share of a CPU this thread gets while it spins for [`PROBE`]: its
/// CPU time over the wall time.
fn cpu_share() -> f64 {
    use rustix::time::{clock_gettime, ClockId};
    let cpu = || {
        let t = clock_gettime(ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let (wall0, cpu0) = (Instant::now(), cpu());
    while wall0.elapsed() < PROBE {
        std::hint::spin_loop();
    }
    let wall = wall0.elapsed().as_secs_f64();
    let used = cpu().saturating_sub(cpu0).as_secs_f64();
    (used / wall).clamp(0.0, 1.0)
}

/// Measures the load now.
pub fn measure() -> Load {
    Load {
        per_cpu: load_per_cpu(),
        cpu_share: cpu_share(),
    }
}

/// How many times slower than idle the host runs now (≥ 1): [`SCALE_VAR`]
/// when set, else [`measure`]d. The first factor above 1 is said once on
/// stderr, so that a slow test run explains itself.
pub fn slowdown() -> f64 {
    if let Ok(v) = std::env::var(SCALE_VAR) {
        let (factor, note) = scale_of(&v);
        if let Some(note) = note {
            SAID_SCALE.call_once(|| {
                let _ = std::io::stderr().write_all(format!("ipivmm-testkit: {note}\n").as_bytes());
            });
        }
        if let Some(f) = factor {
            return f;
        }
    }
    let load = measure();
    let f = load.slowdown();
    if f > 1.0 {
        SAID.call_once(|| {
            let line = format!(
                "ipivmm-testkit: host busy (load {:.1} per CPU, {:.0}% of a CPU for a spinning thread): \
                 time limits ×{f:.1} ({SCALE_VAR}=N sets the factor)\n",
                load.per_cpu,
                load.cpu_share * 100.0
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        });
    }
    f
}

/// The factor [`SCALE_VAR`] set to `value` gives, and what to say about
/// it: a number from 1 to [`MAX_SLOWDOWN`] is the factor; a larger one is
/// capped (said); anything else (0, -1, nan, inf, not a number) is no
/// factor, said, and the slowdown is measured instead.
pub fn scale_of(value: &str) -> (Option<f64>, Option<String>) {
    let bad = || {
        format!(
            "{SCALE_VAR}={value:?} is not a factor: give a number from 1 to {MAX_SLOWDOWN} \
             (how many times longer the time limits are); measuring the host's slowdown instead"
        )
    };
    match value.trim().parse::<f64>() {
        Ok(f) if f.is_finite() && f > MAX_SLOWDOWN => (
            Some(MAX_SLOWDOWN),
            Some(format!(
                "{SCALE_VAR}={value} is above the largest factor, {MAX_SLOWDOWN} (a hang must still be \
                 caught): time limits ×{MAX_SLOWDOWN}"
            )),
        ),
        Ok(f) if f.is_finite() && f >= 1.0 => (Some(f), None),
        _ => (None, Some(bad())),
    }
}

/// `limit` (set for an idle machine) stretched by [`slowdown`]: for a VM
/// test's watchdog and for any bound on how long something may take.
pub fn scaled(limit: Duration) -> Duration {
    limit.mul_f64(slowdown())
}

/// [`scaled`] in whole seconds (rounded up), for limits given in seconds.
pub fn scaled_secs(secs: u64) -> u64 {
    scaled(Duration::from_secs(secs)).as_secs_f64().ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_host_keeps_the_limits_and_a_busy_one_stretches_them() {
        let idle = Load {
            per_cpu: 0.2,
            cpu_share: 0.99,
        };
        assert_eq!(idle.slowdown(), 1.0);
        // Two CPUs under 34 spinning threads: each gets ~6% of a CPU.
        let busy = Load {
            per_cpu: 17.0,
            cpu_share: 0.06,
        };
        let f = busy.slowdown();
        assert!((f - 17.0 * HEADROOM).abs() < 1e-9, "{f}");
        // The share can say more than the (lagging) load average.
        let rising = Load {
            per_cpu: 1.0,
            cpu_share: 0.25,
        };
        assert!((rising.slowdown() - 4.0 * HEADROOM).abs() < 1e-9);
        // A thread that got nothing, or a wild load: capped, never infinite.
        let starved = Load {
            per_cpu: 0.5,
            cpu_share: 0.0,
        };
        assert_eq!(starved.slowdown(), MAX_SLOWDOWN);
        let wild = Load {
            per_cpu: f64::INFINITY,
            cpu_share: 1.0,
        };
        assert_eq!(wild.slowdown(), MAX_SLOWDOWN);
    }

    #[test]
    fn the_scale_variable_is_checked_with_a_message() {
        assert_eq!(scale_of("3"), (Some(3.0), None));
        assert_eq!(scale_of(" 1 "), (Some(1.0), None));
        for bad in ["0", "-1", "nan", "NaN", "inf", "0.5", "", "fast"] {
            let (f, note) = scale_of(bad);
            assert_eq!(f, None, "{bad}");
            let note = note.unwrap_or_default();
            assert!(
                note.contains("is not a factor: give a number from 1 to 50"),
                "{bad}: {note}"
            );
        }
        let (f, note) = scale_of("1e9");
        assert_eq!(f, Some(MAX_SLOWDOWN));
        assert!(note.unwrap().contains("above the largest factor, 50"));
    }

    #[test]
    fn a_measured_share_is_a_fraction() {
        let l = measure();
        assert!((0.0..=1.0).contains(&l.cpu_share), "{l:?}");
        assert!(l.per_cpu >= 0.0, "{l:?}");
        assert!(scaled(Duration::from_secs(2)) >= Duration::from_secs(2));
    }
}
