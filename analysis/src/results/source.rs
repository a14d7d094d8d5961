//! The counter sources: where a phase's counters come from, each named
//! once. Its key is the JSON field and `sources[].source` value, the CSV's
//! `source` column and an expectation's `SOURCE` (`vcpu0.exit_reasons.hlt`);
//! its name is what people read (charts, tables). A new source is one row
//! here and the code that fills it, on the vCPU side its own file in
//! `vcpu::sources` (a `PhaseCounter`).

/// Declares [`Source`] with each source's key and name, one row each.
macro_rules! sources {
    ($($(#[$doc:meta])* $variant:ident = $key:literal, $name:literal;)*) => {
        /// One counter source.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, strum::VariantArray)]
        pub enum Source {
            $($(#[$doc])* $variant,)*
        }

        impl Source {
            /// The key: JSON, CSV and `--expect` spelling.
            pub const fn key(self) -> &'static str {
                match self {
                    $(Source::$variant => $key,)*
                }
            }

            /// The name people read.
            pub const fn human(self) -> &'static str {
                match self {
                    $(Source::$variant => $name,)*
                }
            }
        }
    };
}

sources! {
    /// The payload's own counters, sent with each control message.
    Guest = "guest", "guest counters";
    /// Exits ipivmm handled in userspace, by kind.
    UserspaceExits = "userspace_exits", "userspace exits";
    /// KVM's binary stats of the vCPU.
    KvmStats = "kvm_stats", "KVM binary stats";
    /// kvm:* tracepoint counters of the vCPU thread.
    Tracepoints = "tracepoints", "kvm_exit tracepoints";
    /// VM exits by reason (BPF or the exit sampler).
    ExitReasons = "exit_reasons", "exits by reason";
    /// Host time per exit reason, ns (with [`Source::ExitReasons`]).
    ExitReasonsHostNs = "exit_reasons_host_ns", "host time by exit reason";
    /// ipivmm's userspace LAPIC model (`--irqchip user`).
    UserLapic = "user_lapic", "userspace LAPIC model";
    /// Named values the payload recorded.
    Records = "records", "payload records";
}

impl Source {
    /// Every source, in the order a phase lists its counters (the order
    /// of declaration: a new variant is in it by being declared).
    pub const ALL: &'static [Source] = <Source as strum::VariantArray>::VARIANTS;

    /// The source keyed `key`, if any.
    pub fn of_key(key: &str) -> Option<Source> {
        Source::ALL.iter().copied().find(|s| s.key() == key)
    }

    /// Every key, in [`Source::ALL`] order.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        Source::ALL.iter().map(|s| s.key())
    }
}

/// A source is written as its key (`sources[].source` of the JSON).
impl serde::Serialize for Source {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.key())
    }
}

/// A source is read from its key; one that names none is refused with the
/// keys there are (a file written by another ipivmm says so in one line).
impl<'de> serde::Deserialize<'de> for Source {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let key = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Source::of_key(&key).ok_or_else(|| {
            let keys: Vec<&str> = Source::keys().collect();
            serde::de::Error::custom(format!(
                "no counter source '{key}' (sources: {})",
                keys.join(", ")
            ))
        })
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

    #[test]
    fn a_source_is_written_and_read_as_its_key() {
        for &s in Source::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.key()));
            assert_eq!(serde_json::from_str::<Source>(&json).unwrap(), s);
        }
        let e = serde_json::from_str::<Source>("\"exit-reasons\"").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no counter source 'exit-reasons' (sources: guest, "),
            "{e}"
        );
    }
}
