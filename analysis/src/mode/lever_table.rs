//! The levers: the knobs beside the mode (exits turned off, halt polling,
//! CPUID hints and PV features, pinning), one row each in the table at the
//! end of this file. A row gives the field (its JSON key too), its type and
//! default, its scope name (`poll=0`, also `compare --by poll` and the
//! configuration key), its label part, its flag, the flag's value name and
//! help. From the rows come [`Levers`] (embedded once in
//! the machine's `VmConfig`, [`crate::results::RunConfig`] and
//! [`crate::results::identity::ConfigId`]), [`Lever`] (a scope's field, a
//! comparison's dimension), each lever's value, label part and "is set",
//! the scope parser's values and the command line's flags.
//!
//! A lever is then its row, its effect (where it touches KVM or CPUID:
//! `vm::vm_wide_setup`, `arch::cpuid::shape`) and its row in docs/modes.md; the
//! tests at the end of this file fail for a row whose flag, scope, label,
//! JSON or documentation is missing.
use crate::mode::levers::{parse_cpu_list, ExitControl, ExitControls};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};

/// What a lever's type must say for its row: its spelling in scopes,
/// columns and keys, how that spelling (or a flag's value) is read back,
/// and its label part.
pub(crate) trait LeverValue: Clone + PartialEq + Sized {
    /// A flag of this type takes no value (`--realtime-hint`).
    const SWITCH: bool = false;

    /// The value as a scope, a column and the key spell it (`hlt+pause`,
    /// `host`, `yes`, `0,1`).
    fn spell(&self) -> String;

    /// A spelled value (or a flag's value) read back; junk is an error
    /// that says what the values are.
    fn read(s: &str) -> Result<Self, String>;

    /// What values there are, for messages (`yes, no`).
    fn values() -> String;

    /// The label part of a set value: the tag and the spelling
    /// (`poll:0`); a switch's is the tag alone (`rt`).
    fn label_part(&self, tag: &str) -> String {
        format!("{tag}{}", self.spell())
    }
}

impl LeverValue for bool {
    const SWITCH: bool = true;

    fn spell(&self) -> String {
        if *self { "yes" } else { "no" }.into()
    }

    fn read(s: &str) -> Result<Self, String> {
        match s {
            "yes" => Ok(true),
            "no" => Ok(false),
            _ => Err(format!("'{s}': one of {}", Self::values())),
        }
    }

    fn values() -> String {
        "yes, no".into()
    }

    fn label_part(&self, tag: &str) -> String {
        tag.into()
    }
}

impl LeverValue for ExitControls {
    fn spell(&self) -> String {
        if self.is_empty() {
            "none".into()
        } else {
            self.names().join("+")
        }
    }

    fn read(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(ExitControls::NONE);
        }
        s.split(['+', ','])
            .map(|n| {
                n.parse::<ExitControl>()
                    .map_err(|_| format!("'{n}' is not an exit: {}", Self::values()))
            })
            .collect()
    }

    fn values() -> String {
        let names: Vec<&str> = ExitControl::ALL.iter().map(|c| c.name()).collect();
        format!("none, or exits joined by '+' ({})", names.join(", "))
    }
}

/// The halt-polling limit: `None` is the host's (`host`).
impl LeverValue for Option<u32> {
    fn spell(&self) -> String {
        self.map_or_else(|| "host".into(), |ns| ns.to_string())
    }

    fn read(s: &str) -> Result<Self, String> {
        match s {
            "host" => Ok(None),
            _ => s
                .parse::<u32>()
                .map(Some)
                .map_err(|_| format!("'{s}': {}", Self::values())),
        }
    }

    fn values() -> String {
        "host, or a limit in ns (0 to 4294967295)".into()
    }
}

/// A CPU per vCPU: empty is not pinned (`none`).
impl LeverValue for Vec<usize> {
    fn spell(&self) -> String {
        if self.is_empty() {
            return "none".into();
        }
        let c: Vec<String> = self.iter().map(|c| c.to_string()).collect();
        c.join(",")
    }

    fn read(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Vec::new()),
            _ => parse_cpu_list(s),
        }
    }

    fn values() -> String {
        "none, or host CPUs (0,2 or 0-3)".into()
    }
}

/// Where a lever takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A bit of KVM's feature leaf, CPUID 0x40000001 EAX (a switch): set
    /// when the lever is on and cleared otherwise, whatever KVM offers
    /// (`arch::cpuid::shape` reads it from the table).
    KvmFeature(u32),
    /// A bit of the same leaf's EDX, the hints (a switch).
    KvmHint(u32),
    /// A per-VM KVM capability (`vm::vm_wide_setup`).
    VmCapability,
    /// The vCPU threads' CPU affinity (`run::spawn`).
    Threads,
}

/// One row of the table, as the front end and the tests read it.
#[derive(Clone, Copy, Debug)]
pub struct LeverRow {
    /// The lever.
    pub lever: Lever,
    /// Its field of [`Levers`] and JSON key (`halt_poll_ns`).
    pub field: &'static str,
    /// Its scope name (`poll`): `poll=0`, `compare --by poll`, the key.
    pub scope: &'static str,
    /// Its label part's tag (`poll:`; a switch's whole part, `rt`).
    pub label: &'static str,
    /// Recorded in `runs[].mode` even when unset (the levers that always
    /// were; a new one is recorded only when set, so files without it stay
    /// as they were).
    pub always_recorded: bool,
    /// Its flag, without the dashes (`halt-poll-ns`).
    pub flag: &'static str,
    /// The flag's value name (`NS`; empty for a switch).
    pub value_name: &'static str,
    /// The flag's help.
    pub help: &'static str,
    /// Whether the flag is a switch (takes no value).
    pub switch: bool,
    /// What values the lever has, for messages.
    pub values: fn() -> String,
    /// Where it takes effect.
    pub effect: Effect,
}

impl LeverRow {
    /// Every row, in the order of [`Lever`]'s variants.
    pub const ALL: &'static [LeverRow] = ROWS;
}

macro_rules! lever_table {
    ($(
        $(#[doc = $doc:literal])+
        $field:ident: $ty:ty = $default:expr => $variant:ident {
            scope: $scope:literal,
            label: $label:literal,
            effect: $effect:expr,
            always_recorded: $always:literal,
            flag: $flag:literal,
            value_name: $vname:literal,
            help: $help:literal $(,)?
        }
    )+) => {
        /// The levers of a run: the knobs beside the mode, one field per
        /// row of the table (docs/modes.md, "Levers"). Serialized as the
        /// fields that are set (flattened into the object that holds it).
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
        #[serde(default)]
        pub struct Levers {
            $($(#[doc = $doc])+ pub $field: $ty,)+
        }

        impl Default for Levers {
            fn default() -> Self {
                Self { $($field: $default,)+ }
            }
        }

        /// One lever: what a scope (`poll=0`) or a comparison's dimension
        /// (`--by poll`) names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Lever {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl Lever {
            /// Every lever, in the table's order.
            pub const ALL: &'static [Lever] = &[$(Lever::$variant,)+];

            /// How many there are.
            pub const COUNT: usize = Lever::ALL.len();

            /// Its row of the table.
            pub fn row(self) -> &'static LeverRow {
                &ROWS[self as usize]
            }

            /// Its scope name (`poll`).
            pub fn name(self) -> &'static str {
                self.row().scope
            }
        }

        /// The table, one row per lever, in [`Lever::ALL`]'s order.
        pub(crate) const ROWS: &[LeverRow] = &[$(LeverRow {
            lever: Lever::$variant,
            field: stringify!($field),
            scope: $scope,
            label: $label,
            always_recorded: $always,
            flag: $flag,
            value_name: $vname,
            help: $help,
            switch: <$ty as LeverValue>::SWITCH,
            values: <$ty as LeverValue>::values,
            effect: $effect,
        },)+];

        impl Levers {
            /// The value of `l`, as a scope, a column and the key spell it.
            pub fn value(&self, l: Lever) -> String {
                match l {
                    $(Lever::$variant => LeverValue::spell(&self.$field),)+
                }
            }

            /// Whether `l` differs from its default (and so shows in the
            /// label and the key).
            pub fn is_set(&self, l: Lever) -> bool {
                match l {
                    $(Lever::$variant => self.$field != { let d: $ty = $default; d },)+
                }
            }

            /// `l` back to its default.
            pub fn reset(&mut self, l: Lever) {
                match l {
                    $(Lever::$variant => self.$field = { let d: $ty = $default; d },)+
                }
            }

            /// Set `l` from its spelling (a scope's value, a flag's).
            pub fn set_text(&mut self, l: Lever, text: &str) -> Result<(), String> {
                match l {
                    $(Lever::$variant => self.$field = <$ty as LeverValue>::read(text)?,)+
                }
                Ok(())
            }

            /// The label part of `l` when set (`poll:0`, `rt`).
            pub fn label_part(&self, l: Lever) -> Option<String> {
                match l {
                    $(Lever::$variant => self
                        .is_set(l)
                        .then(|| LeverValue::label_part(&self.$field, $label)),)+
                }
            }

            /// These levers with every lever `other` sets taken from it
            /// (the flags given over a preset's or a plan's levers).
            pub fn overlay(&mut self, other: &Levers) {
                $(if other.$field != { let d: $ty = $default; d } {
                    self.$field = other.$field.clone();
                })+
            }

            fn serialize_fields<M: SerializeMap>(
                &self,
                map: &mut M,
                recorded: bool,
            ) -> Result<(), M::Error> {
                $(if (recorded && $always) || self.$field != { let d: $ty = $default; d } {
                    map.serialize_entry(stringify!($field), &self.$field)?;
                })+
                Ok(())
            }
        }
    };
}

impl Levers {
    /// The label parts of the levers that are set, in the table's order
    /// (`-exits:hlt poll:0 rt pin:0,1`).
    pub fn label_parts(&self) -> Vec<String> {
        Lever::ALL
            .iter()
            .filter_map(|l| self.label_part(*l))
            .collect()
    }

    /// Serializes like [`Serialize`], but with the levers recorded even
    /// unset ([`LeverRow::always_recorded`]): the `mode` object of a run
    /// (`#[serde(flatten, serialize_with = "Levers::serialize_recorded")]`).
    pub fn serialize_recorded<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.serialize_fields(&mut map, true)?;
        map.end()
    }
}

impl Levers {
    /// The bits of CPUID 0x40000001 the levers decide: every [`Effect::KvmFeature`] and
    /// [`Effect::KvmHint`] row's bit in the mask, and in the bits when its
    /// lever is on.
    pub fn kvm_cpuid_bits(&self) -> KvmCpuidBits {
        let mut b = KvmCpuidBits::default();
        for row in ROWS {
            let on = self.is_set(row.lever);
            match row.effect {
                Effect::KvmFeature(bit) => {
                    b.eax_mask |= 1 << bit;
                    b.eax |= u32::from(on) << bit;
                }
                Effect::KvmHint(bit) => {
                    b.edx_mask |= 1 << bit;
                    b.edx |= u32::from(on) << bit;
                }
                Effect::VmCapability | Effect::Threads => {}
            }
        }
        b
    }
}

/// The bits of KVM's CPUID leaf 0x40000001 the levers decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvmCpuidBits {
    /// EAX (KVM_FEATURE_*) bits the levers own.
    pub eax_mask: u32,
    /// Of those, the ones to set.
    pub eax: u32,
    /// EDX (KVM_HINTS_*) bits the levers own.
    pub edx_mask: u32,
    /// Of those, the ones to set.
    pub edx: u32,
}

/// The levers that are set (the configuration identity's form).
impl Serialize for Levers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.serialize_fields(&mut map, false)?;
        map.end()
    }
}

impl std::fmt::Display for Lever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Lever {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Lever::ALL
            .iter()
            .copied()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("no lever '{s}'"))
    }
}

lever_table! {
    /// Exits turned off (KVM_CAP_X86_DISABLE_EXITS).
    disabled_exits: ExitControls = ExitControls::NONE => Exits {
        scope: "exits",
        label: "-exits:",
        effect: Effect::VmCapability,
        always_recorded: true,
        flag: "disable-exits",
        value_name: "LIST",
        help: "Turn off these VM exits (KVM_CAP_X86_DISABLE_EXITS), comma-separated: mwait, hlt, pause, cstate.",
    }
    /// Per-VM halt-polling limit, ns (KVM_CAP_HALT_POLL; None: the host's
    /// `kvm.halt_poll_ns`).
    halt_poll_ns: Option<u32> = None => Poll {
        scope: "poll",
        label: "poll:",
        effect: Effect::VmCapability,
        always_recorded: true,
        flag: "halt-poll-ns",
        value_name: "NS",
        help: "Per-VM halt-polling limit in ns (KVM_CAP_HALT_POLL); default: the host's kvm.halt_poll_ns.",
    }
    /// KVM_HINTS_REALTIME advertised in CPUID 0x40000001 EDX ("dedicated"
    /// vCPUs).
    realtime_hint: bool = false => Rt {
        scope: "rt",
        label: "rt",
        effect: Effect::KvmHint(0),
        always_recorded: true,
        flag: "realtime-hint",
        value_name: "",
        help: "Advertise KVM_HINTS_REALTIME (dedicated, never-preempted vCPUs) in CPUID 0x40000001.",
    }
    /// Host CPU of each vCPU (empty: not pinned).
    pin: Vec<usize> = Vec::new() => Pin {
        scope: "pin",
        label: "pin:",
        effect: Effect::Threads,
        always_recorded: true,
        flag: "pin",
        value_name: "CPUS",
        help: "Pin vCPU i to the i-th host CPU of this list (e.g. 0,2 or 0-3).",
    }
    /// KVM_FEATURE_PV_TLB_FLUSH advertised (CPUID 0x40000001 EAX bit 9):
    /// a guest may flush a preempted vCPU's TLB through its steal-time
    /// record instead of an IPI.
    pv_tlb_flush: bool = false => PvTlbFlush {
        scope: "pv-tlb-flush",
        label: "pv-tlb-flush",
        effect: Effect::KvmFeature(9),
        always_recorded: false,
        flag: "pv-tlb-flush",
        value_name: "",
        help: "Advertise KVM_FEATURE_PV_TLB_FLUSH (CPUID 0x40000001 EAX bit 9): a guest flushes a preempted vCPU's TLB without an IPI.",
    }
    /// KVM_FEATURE_PV_SCHED_YIELD advertised (CPUID 0x40000001 EAX bit
    /// 13): a guest whose IPI targets a preempted vCPU may yield to it
    /// (KVM_HC_SCHED_YIELD).
    pv_sched_yield: bool = false => PvSchedYield {
        scope: "pv-sched-yield",
        label: "pv-sched-yield",
        effect: Effect::KvmFeature(13),
        always_recorded: false,
        flag: "pv-sched-yield",
        value_name: "",
        help: "Advertise KVM_FEATURE_PV_SCHED_YIELD (CPUID 0x40000001 EAX bit 13): a guest's IPI to a preempted vCPU yields to it.",
    }
    /// KVM_FEATURE_PV_EOI advertised (CPUID 0x40000001 EAX bit 6): a
    /// guest may end an interrupt by clearing a flag in memory instead of
    /// writing the EOI register (MSR_KVM_PV_EOI_EN).
    pv_eoi: bool = false => PvEoi {
        scope: "pv-eoi",
        label: "pv-eoi",
        effect: Effect::KvmFeature(6),
        always_recorded: false,
        flag: "pv-eoi",
        value_name: "",
        help: "Advertise KVM_FEATURE_PV_EOI (CPUID 0x40000001 EAX bit 6): a guest ends an interrupt by a flag in memory instead of an EOI write.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of each lever that is not its default.
    fn set_value(l: Lever) -> &'static str {
        let row = l.row();
        if row.switch {
            return "yes";
        }
        match l {
            Lever::Exits => "hlt+pause",
            Lever::Poll => "0",
            Lever::Pin => "0,1",
            // A new lever with a value: add one here.
            _ => panic!("no example value for lever {l}: add one to set_value"),
        }
    }

    fn all_set() -> Levers {
        let mut v = Levers::default();
        for &l in Lever::ALL {
            v.set_text(l, set_value(l)).unwrap();
        }
        v
    }

    #[test]
    fn every_row_is_whole_and_its_names_are_unique() {
        for (i, row) in ROWS.iter().enumerate() {
            assert_eq!(row.lever as usize, i, "{}", row.field);
            assert_eq!(Lever::ALL[i], row.lever);
            assert!(!row.help.is_empty() && !row.label.is_empty(), "{row:?}");
            assert_eq!(
                row.switch,
                row.value_name.is_empty(),
                "a switch has no value name, a valued flag has one: {row:?}"
            );
            assert_eq!(row.scope.parse::<Lever>(), Ok(row.lever));
            for other in &ROWS[..i] {
                for (a, b) in [
                    (row.scope, other.scope),
                    (row.flag, other.flag),
                    (row.field, other.field),
                    (row.label, other.label),
                ] {
                    assert_ne!(a, b, "two levers share '{a}'");
                }
            }
        }
    }

    #[test]
    fn a_cpuid_lever_is_a_switch_that_owns_its_bit() {
        let mut seen = Vec::new();
        for row in ROWS {
            if let Effect::KvmFeature(bit) | Effect::KvmHint(bit) = row.effect {
                assert!(row.switch, "{}: a CPUID bit is on or off", row.field);
                assert!(bit < 32 && !seen.contains(&row.effect), "{}", row.field);
                seen.push(row.effect);
                let mut on = Levers::default();
                on.set_text(row.lever, "yes").unwrap();
                let b = on.kvm_cpuid_bits();
                assert_eq!(b.eax | b.edx, 1 << bit, "{}", row.field);
            }
        }
        let b = Levers::default().kvm_cpuid_bits();
        assert_eq!((b.eax, b.edx), (0, 0));
    }

    /// Each CPUID lever's bit as the kernel's uapi asm/kvm_para.h defines
    /// it (checked there by hand, once per lever).
    #[test]
    fn cpuid_bits_are_the_kernels() {
        const UAPI: &[(&str, Effect)] = &[
            ("realtime_hint", Effect::KvmHint(0)),   // KVM_HINTS_REALTIME
            ("pv_eoi", Effect::KvmFeature(6)),       // KVM_FEATURE_PV_EOI
            ("pv_tlb_flush", Effect::KvmFeature(9)), // KVM_FEATURE_PV_TLB_FLUSH
            ("pv_sched_yield", Effect::KvmFeature(13)), // KVM_FEATURE_PV_SCHED_YIELD
        ];
        for row in ROWS {
            if let Effect::KvmFeature(_) | Effect::KvmHint(_) = row.effect {
                let uapi = UAPI.iter().find(|(f, _)| *f == row.field);
                assert_eq!(
                    uapi.map(|(_, e)| *e),
                    Some(row.effect),
                    "{}'s CPUID bit is not checked against kvm_para.h: add it to UAPI",
                    row.field
                );
            }
        }
    }

    #[test]
    fn every_lever_is_unset_by_default_and_set_by_its_value() {
        let d = Levers::default();
        let all = all_set();
        for &l in Lever::ALL {
            assert!(!d.is_set(l), "{l}");
            assert_eq!(d.label_part(l), None, "{l}");
            let mut one = Levers::default();
            one.set_text(l, set_value(l)).unwrap();
            assert!(one.is_set(l), "{l}");
            // Set only this one: the others stay unset.
            for &o in Lever::ALL.iter().filter(|o| **o != l) {
                assert!(!one.is_set(o), "setting {l} set {o}");
            }
            // Its spelling reads back to the same value, set and unset.
            for v in [&d, &one] {
                let mut back = Levers::default();
                back.set_text(l, &v.value(l)).unwrap();
                assert_eq!(back.value(l), v.value(l), "{l}");
                assert_eq!(back.is_set(l), v.is_set(l), "{l}");
            }
            let part = one.label_part(l).unwrap();
            assert!(part.starts_with(l.row().label), "{l}: {part}");
            assert!(all.label_parts().contains(&part), "{l}: {part}");
            let mut reset = all.clone();
            reset.reset(l);
            assert!(!reset.is_set(l), "{l}");
        }
    }

    #[test]
    fn junk_is_not_a_value_of_any_lever() {
        for &l in Lever::ALL {
            for junk in ["maybe", "", "-1", "hlt+maybe", "0x"] {
                let mut v = Levers::default();
                let e = v.set_text(l, junk);
                assert!(e.is_err(), "{l}={junk} was read as {}", v.value(l));
            }
            assert!(!(l.row().values)().is_empty(), "{l}");
        }
    }

    #[test]
    fn every_lever_round_trips_through_json_and_only_set_ones_show() {
        let d = Levers::default();
        assert_eq!(serde_json::to_string(&d).unwrap(), "{}");
        let all = all_set();
        let json = serde_json::to_value(&all).unwrap();
        for row in ROWS {
            assert!(
                json.get(row.field).is_some(),
                "{} missing: {json}",
                row.field
            );
        }
        assert_eq!(serde_json::from_value::<Levers>(json).unwrap(), all);
        // A run's record keeps the old levers even unset, and no new one.
        let mut s = serde_json::Serializer::new(Vec::new());
        d.serialize_recorded(&mut s).unwrap();
        let rec: serde_json::Value = serde_json::from_slice(&s.into_inner()).unwrap();
        for row in ROWS {
            assert_eq!(
                rec.get(row.field).is_some(),
                row.always_recorded,
                "{}: {rec}",
                row.field
            );
        }
    }

    #[test]
    fn overlay_takes_what_is_set() {
        let mut base = Levers {
            halt_poll_ns: Some(5),
            realtime_hint: true,
            ..Levers::default()
        };
        let flags = Levers {
            pv_eoi: true,
            halt_poll_ns: Some(0),
            ..Levers::default()
        };
        base.overlay(&flags);
        assert_eq!(base.label_parts(), ["poll:0", "rt", "pv-eoi"], "{base:?}");
        base.overlay(&all_set());
        assert_eq!(base, all_set());
    }

    #[test]
    fn every_lever_is_documented() {
        let modes = include_str!("../../../docs/modes.md");
        for row in ROWS {
            for needle in [format!("`--{}", row.flag), format!("`{}=", row.scope)] {
                assert!(
                    modes.contains(&needle),
                    "docs/modes.md does not show {needle} (lever {})",
                    row.field
                );
            }
        }
    }
}
