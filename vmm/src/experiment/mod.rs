//! Experiments: runs of configurations repeated, in rounds, under a
//! budget, that a library user runs with the engine alone. One loop per
//! shape of experiment: [`interleaved`] runs two configurations in
//! alternating random order and stops as soon as the gate decides
//! (`compare --run A --run B`); [`calibrate`] measures a host's noise
//! profile (`ipivmm calibrate`).
pub mod calibrate;
pub mod interleaved;
pub mod rounds;

use crate::config::VmConfig;
use crate::error::RunError;
use crate::host::load::LoadProbe;
use crate::results::RunReport;
use crate::run::{run, RunOptions};
use ipivmm_devices::budget::SharedBudget;
use ipivmm_devices::serial::SerialSink;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A caller that wants no events: the rounds', the live comparison's and
/// the calibration's events all have a default that does nothing.
pub struct Quiet;

/// One VM of a live comparison or a calibration: run quietly under the
/// shared `budget` and `cancel` flag, the host's load during it recorded,
/// its raw samples given back to the budget (the decision reads the
/// summary figures only).
pub(crate) fn measured_run(
    config: &VmConfig,
    cancel: &Arc<AtomicBool>,
    budget: &Arc<SharedBudget>,
) -> Result<RunReport, RunError> {
    let probe = LoadProbe::start();
    let opts = RunOptions {
        serial: SerialSink::Discard,
        started: Instant::now(),
        cancel: Some(cancel.clone()),
        budget: Some(budget.clone()),
    };
    let mut r = run(config, opts)?;
    r.host_load = probe.and_then(|p| p.finish());
    budget.release(r.drop_samples());
    Ok(r)
}

/// How much an experiment may spend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Wall time (from the experiment's start; a round that would not
    /// end within it is not started).
    Time(Duration),
    /// VMs booted.
    Vms(u32),
}

impl Default for Budget {
    /// Five minutes: what a CI job can spend on one comparison.
    fn default() -> Self {
        Budget::Time(Duration::from_secs(300))
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Time(d) if d.as_secs() % 60 == 0 => write!(f, "{}m", d.as_secs() / 60),
            Budget::Time(d) => write!(f, "{}s", d.as_secs()),
            Budget::Vms(n) => write!(f, "{n} VMs"),
        }
    }
}

impl std::str::FromStr for Budget {
    type Err = String;

    /// `5m`, `90s`, `1h` or `40vms` (a bare number is minutes).
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || {
            format!("'{s}' is not a budget: minutes (5m), seconds (300s), hours (1h) or VMs (40vms), above 0")
        };
        let (num, unit) = t
            .find(|c: char| !c.is_ascii_digit())
            .map_or((t.as_str(), ""), |i| t.split_at(i));
        let n: u64 = num.parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(bad());
        }
        let secs = |k: u64| {
            n.checked_mul(k)
                .filter(|s| *s <= 7 * 24 * 3600)
                .map(|s| Budget::Time(Duration::from_secs(s)))
                .ok_or_else(bad)
        };
        match unit.trim() {
            "" | "m" | "min" => secs(60),
            "s" | "sec" => secs(1),
            "h" => secs(3600),
            "vm" | "vms" => u32::try_from(n).map(Budget::Vms).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_and_print() {
        assert_eq!("5m".parse(), Ok(Budget::Time(Duration::from_secs(300))));
        assert_eq!("300s".parse(), Ok(Budget::Time(Duration::from_secs(300))));
        assert_eq!("2".parse(), Ok(Budget::Time(Duration::from_secs(120))));
        assert_eq!("40vms".parse(), Ok(Budget::Vms(40)));
        assert_eq!("1h".parse(), Ok(Budget::Time(Duration::from_secs(3600))));
        for bad in ["0", "5x", "", "-3m", "99999999999h", "m"] {
            assert!(bad.parse::<Budget>().is_err(), "{bad}");
        }
        assert_eq!(Budget::Vms(40).to_string(), "40 VMs");
        assert_eq!(Budget::default().to_string(), "5m");
    }
}
