//! The guest counters: what a payload counts itself and sends with every
//! control message ([`GuestCounters`], absolute values; the host takes
//! deltas between a phase's markers).
//!
//! One list below defines them: each entry is a field of [`GuestCounters`]
//! and a row of [`GuestCounters::ALL`] (its name, its offset in the struct,
//! what it counts). From that table the host decodes the message
//! (`ipivmm_devices::control::decode_msg`), takes the window's delta
//! ([`GuestCounters::since`]), names each counter in the CSV, `--expect` and
//! the JSON (`runs[].vcpus[].phases[].guest`, the field names; with the
//! `host` feature serde derives the same struct), and docs/guest-abi.md's
//! table is checked against it (`cli/tests/docs.rs`). The SDK keeps one
//! atomic per counter and fills a [`GuestCounters`] field by field, so a
//! counter it does not fill is a compile error there.

/// A guest counter's descriptor: one row of [`GuestCounters::ALL`].
#[derive(Clone, Copy, Debug)]
pub struct GuestCounter {
    /// Its one name: the [`GuestCounters`] field, the JSON field, the CSV's
    /// `counter` (source `guest`), `--expect`'s `vcpuN.guest.NAME`.
    pub name: &'static str,
    /// Byte offset in [`GuestCounters`] (a little-endian `u64`); the
    /// message's counters start at `ControlMsg::counters`.
    pub offset: usize,
    /// What it counts (the field's rustdoc and docs/guest-abi.md's row).
    pub doc: &'static str,
    /// Reads it from a [`GuestCounters`].
    pub get: fn(&GuestCounters) -> u64,
    /// Its place in a [`GuestCounters`], to fill one.
    pub slot: fn(&mut GuestCounters) -> &mut u64,
}

/// Defines [`GuestCounters`] and its descriptor table from one list.
macro_rules! guest_counters {
    ($($field:ident: $doc:literal,)+) => {
        /// Counters the payload keeps itself, sent with every control
        /// message so the host can window them by phase (absolute values;
        /// the host takes deltas, which have the same fields). The fields
        /// and their meaning: [`GuestCounters::ALL`].
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[cfg_attr(
            feature = "host",
            derive(serde::Serialize, serde::Deserialize),
            serde(default)
        )]
        pub struct GuestCounters {
            $(#[doc = $doc] pub $field: u64,)+
        }

        impl GuestCounters {
            /// Every guest counter, in the order of the ABI (offset 0, 8, ...).
            pub const ALL: [GuestCounter; [$(stringify!($field)),+].len()] = [$(
                GuestCounter {
                    name: stringify!($field),
                    offset: core::mem::offset_of!(GuestCounters, $field),
                    doc: $doc,
                    get: |c| c.$field,
                    slot: |c| &mut c.$field,
                },
            )+];
        }
    };
}

guest_counters! {
    icr_writes: "ICR writes this vCPU issued (an all-but-self broadcast is one write; \
        PV hypercalls are not ICR writes)",
    ipis_sent: "IPIs this vCPU asked to send (a broadcast to N targets counts N)",
    ipis_received: "IPIs of the measured vector this vCPU's handler took",
    handler_entries: "entries into any interrupt handler",
    eois: "EOIs written",
    hypercalls: "PV IPI hypercalls issued",
    spurious: "spurious interrupts taken",
    barrier_icr_writes: "ICR writes of the SDK's halting-barrier wake-ups (all-but-self on \
        the barrier vector; zero without `BOOT_FLAG_HALTING_BARRIERS`; not in `icr_writes`, \
        but KVM's ICR handling sees them like any other write; was `reserved`, zero, so \
        older payloads read as none)",
}

/// The offsets are the table's order, packed: counter `i` at `8 * i`.
const _: () = {
    let mut i = 0;
    while i < GuestCounters::ALL.len() {
        assert!(GuestCounters::ALL[i].offset == 8 * i);
        i += 1;
    }
    assert!(core::mem::size_of::<GuestCounters>() == 8 * GuestCounters::ALL.len());
};

impl GuestCounters {
    /// A value per counter, from its descriptor.
    pub fn from_fn(mut value: impl FnMut(&GuestCounter) -> u64) -> Self {
        let mut c = Self::default();
        for d in &Self::ALL {
            *(d.slot)(&mut c) = value(d);
        }
        c
    }

    /// `self - begin`, counter by counter (saturating: a guest can send
    /// anything): a phase's window.
    pub fn since(&self, begin: &Self) -> Self {
        Self::from_fn(|d| (d.get)(self).saturating_sub((d.get)(begin)))
    }

    /// Every counter with its name, in the order of the ABI.
    pub fn named(&self) -> [(&'static str, u64); GuestCounters::ALL.len()] {
        Self::ALL.map(|d| (d.name, (d.get)(self)))
    }

    /// Every ICR write the vCPU issued: the workload's and the halting
    /// barriers' (what KVM's ICR handling saw).
    pub fn all_icr_writes(&self) -> u64 {
        self.icr_writes.saturating_add(self.barrier_icr_writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_and_fills_each_field_apart() {
        let c = GuestCounters::from_fn(|d| d.offset as u64 + 1);
        for d in &GuestCounters::ALL {
            assert_eq!((d.get)(&c), d.offset as u64 + 1, "{}", d.name);
        }
        assert_eq!(c.barrier_icr_writes, 57);
        let named = c.named();
        assert_eq!(named[0], ("icr_writes", 1));
        assert_eq!(named[7], ("barrier_icr_writes", 57));
    }

    #[test]
    fn since_saturates_on_garbage() {
        let begin = GuestCounters {
            icr_writes: 10,
            ipis_received: 5,
            ..Default::default()
        };
        let end = GuestCounters {
            icr_writes: 15,
            ipis_received: 1,
            ..Default::default()
        };
        let d = end.since(&begin);
        assert_eq!(d.icr_writes, 5);
        assert_eq!(d.ipis_received, 0);
    }
}
