//! The counter sources: where a phase's counters come from, each named
//! once. Its key is the JSON field and `sources[].source` value, the CSV's
//! `source` column and an expectation's `SOURCE` (`vcpu0.exit_reasons.hlt`);
//! its name is what people read (charts, tables). A new source is one row
//! here and the code that fills it.

/// One counter source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, strum::VariantArray)]
pub enum Source {
    /// The payload's own counters, sent with each control message.
    Guest,
    /// Exits ipivmm handled in userspace, by kind.
    UserspaceExits,
    /// KVM's binary stats of the vCPU.
    KvmStats,
    /// kvm:* tracepoint counters of the vCPU thread.
    Tracepoints,
    /// VM exits by reason (BPF or the exit sampler).
    ExitReasons,
    /// Host time per exit reason, ns (with [`Source::ExitReasons`]).
    ExitReasonsHostNs,
    /// ipivmm's userspace LAPIC model (`--irqchip user`).
    UserLapic,
    /// Named values the payload recorded.
    Records,
}

impl Source {
    /// Every source, in the order a phase lists its counters (the order
    /// of declaration: a new variant is in it by being declared).
    pub const ALL: &'static [Source] = <Source as strum::VariantArray>::VARIANTS;

    /// The key: JSON, CSV and `--expect` spelling.
    pub const fn key(self) -> &'static str {
        match self {
            Source::Guest => "guest",
            Source::UserspaceExits => "userspace_exits",
            Source::KvmStats => "kvm_stats",
            Source::Tracepoints => "tracepoints",
            Source::ExitReasons => "exit_reasons",
            Source::ExitReasonsHostNs => "exit_reasons_host_ns",
            Source::UserLapic => "user_lapic",
            Source::Records => "records",
        }
    }

    /// The name people read.
    pub const fn human(self) -> &'static str {
        match self {
            Source::Guest => "guest counters",
            Source::UserspaceExits => "userspace exits",
            Source::KvmStats => "KVM binary stats",
            Source::Tracepoints => "kvm_exit tracepoints",
            Source::ExitReasons => "exits by reason",
            Source::ExitReasonsHostNs => "host time by exit reason",
            Source::UserLapic => "userspace LAPIC model",
            Source::Records => "payload records",
        }
    }

    /// The source keyed `key`, if any.
    pub fn of_key(key: &str) -> Option<Source> {
        Source::ALL.iter().copied().find(|s| s.key() == key)
    }

    /// Every key, in [`Source::ALL`] order.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        Source::ALL.iter().map(|s| s.key())
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names_are_unique_and_round_trip() {
        let mut keys: Vec<_> = Source::keys().collect();
        let mut names: Vec<_> = Source::ALL.iter().map(|s| s.human()).collect();
        keys.sort_unstable();
        keys.dedup();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            (keys.len(), names.len()),
            (Source::ALL.len(), Source::ALL.len())
        );
        for &s in Source::ALL {
            assert_eq!(Source::of_key(s.key()), Some(s));
        }
        assert_eq!(Source::of_key("exit-reasons"), None);
    }
}
