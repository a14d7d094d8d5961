//! The per-VM levers of the mode matrix as data: the exit controls
//! (KVM_CAP_X86_DISABLE_EXITS's bits), vCPU placement (CPU lists, the CPUs
//! this process may run on, oversubscription). Their effect on KVM (the
//! capabilities enabled, threads pinned) is the machine's (`ipivmm`).
use serde::{Deserialize, Serialize};

crate::mode::mode_part! {
    /// One VM exit KVM_CAP_X86_DISABLE_EXITS can turn off.
    pub enum ExitControl {
        /// MWAIT/MONITOR run in the guest.
        Mwait,
        /// HLT runs in the guest (the vCPU thread spins in the guest instead of sleeping).
        Hlt,
        /// PAUSE runs in the guest (no pause-loop exits).
        Pause,
        /// C-states (MWAIT/HLT/PAUSE together).
        Cstate,
    }
}

impl ExitControl {
    /// The KVM_X86_DISABLE_EXITS_* bit.
    pub fn bit(self) -> u32 {
        match self {
            // KVM's uapi values (the machine's tests hold them to kvm-bindings').
            ExitControl::Mwait => 1,
            ExitControl::Hlt => 2,
            ExitControl::Pause => 4,
            ExitControl::Cstate => 8,
        }
    }
}

/// A set of exits to turn off, as KVM_CAP_X86_DISABLE_EXITS takes it.
/// Serialized as the list of names (`["hlt", "pause"]`).
///
/// ```
/// use ipivmm_analysis::mode::levers::{ExitControl, ExitControls};
///
/// let c: ExitControls = [ExitControl::Hlt, ExitControl::Pause].into_iter().collect();
/// assert_eq!(c.names(), ["hlt", "pause"]);
/// assert!(c.contains(ExitControl::Hlt) && !c.contains(ExitControl::Mwait));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExitControls(u32);

impl ExitControls {
    /// No exit turned off.
    pub const NONE: ExitControls = ExitControls(0);

    /// The KVM bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The controls set in KVM `bits` (unknown bits dropped).
    pub fn from_bits(bits: u32) -> Self {
        ExitControl::ALL
            .iter()
            .filter(|c| bits & c.bit() != 0)
            .copied()
            .collect()
    }

    /// Whether `c` is in the set.
    pub fn contains(self, c: ExitControl) -> bool {
        self.0 & c.bit() != 0
    }

    /// True if nothing is turned off.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The names of the controls in the set.
    pub fn names(self) -> Vec<&'static str> {
        ExitControl::ALL
            .iter()
            .filter(|c| self.contains(**c))
            .map(|c| c.name())
            .collect()
    }
}

impl FromIterator<ExitControl> for ExitControls {
    fn from_iter<I: IntoIterator<Item = ExitControl>>(iter: I) -> Self {
        ExitControls(iter.into_iter().fold(0, |bits, c| bits | c.bit()))
    }
}

impl Serialize for ExitControls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.names())
    }
}

impl<'de> Deserialize<'de> for ExitControls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<ExitControl>::deserialize(d)?;
        Ok(names.into_iter().collect())
    }
}

/// Parse `0,2,5-7` into a CPU list.
pub(crate) fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("'{t}' in --pin is not a CPU number (use e.g. 0,2,4-7)"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > 4096 {
                    return Err(format!("bad CPU range '{part}' in --pin"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    if cpus.is_empty() {
        return Err("--pin needs at least one CPU".into());
    }
    Ok(cpus)
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_controls_are_kvm_bits_and_names() {
        use std::str::FromStr;
        let c: ExitControls = ["hlt", "pause"]
            .iter()
            .map(|n| ExitControl::from_str(n).unwrap())
            .collect();
        assert_eq!(c.bits(), 2 | 4);
        assert_eq!(
            ExitControls::from_bits(1 | 8 | 0x100).names(),
            ["mwait", "cstate"]
        );
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"["hlt","pause"]"#);
        let back: ExitControls = serde_json::from_str(r#"["hlt","pause"]"#).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0,2,4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("5-3").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    #[test]
    fn this_process_may_run_somewhere() {
        assert!(!allowed_cpus().is_empty());
    }
}
