//! Decoding `kvm:kvm_apicv_inhibit_changed` (fields `reason`, `set`,
//! `inhibits`).
//!
//! `reason` is a value of `enum kvm_apicv_inhibit`
//! (`arch/x86/include/asm/kvm_host.h`) and `inhibits` the bitmask of all
//! reasons now in effect (`BIT(reason)`). The enum is kernel-internal and its
//! order changed, so decoding needs the table of the running kernel:
//!
//! - [`InhibitTable::Linux5_18`] (5.18–5.19; the tracepoint appeared in 5.18):
//!   DISABLE, HYPERV, NESTED, IRQWIN, PIT_REINJ, X2APIC, BLOCKIRQ, ABSENT, SEV.
//! - [`InhibitTable::Linux6_0`] (6.0–6.2): reordered into common reasons first
//!   ("KVM: x86: document AVIC/APICv inhibit reasons"), APIC_ID_MODIFIED and
//!   APIC_BASE_MODIFIED added, X2APIC removed (hybrid AVIC).
//! - [`InhibitTable::Linux6_3`] (6.3 and later): PHYSICAL_ID_ALIASED inserted
//!   after BLOCKIRQ (shifting everything behind it), LOGICAL_ID_ALIASED
//!   appended; PHYSICAL_ID_TOO_BIG appended later (6.16-era) and DISABLE
//!   renamed DISABLED (6.11-era), neither of which moves earlier values.
//!
//! Newer kernels print the names in the tracepoint's `print fmt`
//! ([`table_from_print_fmt`] recognizes them); otherwise choose by version
//! ([`InhibitTable::for_kernel_release`]).

use serde::Serialize;

/// One `enum kvm_apicv_inhibit` ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum InhibitTable {
    /// Linux 5.18–5.19.
    Linux5_18,
    /// Linux 6.0–6.2.
    Linux6_0,
    /// Linux 6.3 and later.
    Linux6_3,
}

const LINUX_5_18: &[&str] = &[
    "DISABLED",
    "HYPERV",
    "NESTED",
    "IRQWIN",
    "PIT_REINJ",
    "X2APIC",
    "BLOCKIRQ",
    "ABSENT",
    "SEV",
];

const LINUX_6_0: &[&str] = &[
    "DISABLED",
    "HYPERV",
    "ABSENT",
    "BLOCKIRQ",
    "APIC_ID_MODIFIED",
    "APIC_BASE_MODIFIED",
    "NESTED",
    "IRQWIN",
    "PIT_REINJ",
    "SEV",
];

const LINUX_6_3: &[&str] = &[
    "DISABLED",
    "HYPERV",
    "ABSENT",
    "BLOCKIRQ",
    "PHYSICAL_ID_ALIASED",
    "APIC_ID_MODIFIED",
    "APIC_BASE_MODIFIED",
    "NESTED",
    "IRQWIN",
    "PIT_REINJ",
    "SEV",
    "LOGICAL_ID_ALIASED",
    "PHYSICAL_ID_TOO_BIG",
];

/// Parses `major.minor` from a kernel release such as `6.18.44-fc-v782`.
pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(['.', '-', '+', '_']);
    let major = it.next()?.parse().ok()?;
    let minor_str = it.next()?;
    let digits: String = minor_str.chars().take_while(char::is_ascii_digit).collect();
    Some((major, digits.parse().ok()?))
}

impl InhibitTable {
    /// Reason names in enum order (`names()[i]` is the name of value `i`).
    /// DISABLE is reported as `DISABLED` on every kernel.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Self::Linux5_18 => LINUX_5_18,
            Self::Linux6_0 => LINUX_6_0,
            Self::Linux6_3 => LINUX_6_3,
        }
    }

    /// The table for kernel `major.minor`; `None` before 5.18 (no tracepoint).
    pub fn for_version(major: u32, minor: u32) -> Option<Self> {
        match (major, minor) {
            (0..=4, _) | (5, 0..=17) => None,
            (5, _) => Some(Self::Linux5_18),
            (6, 0..=2) => Some(Self::Linux6_0),
            _ => Some(Self::Linux6_3),
        }
    }

    /// The table for a `uname -r` string.
    pub fn for_kernel_release(release: &str) -> Option<Self> {
        let (maj, min) = parse_kernel_version(release)?;
        Self::for_version(maj, min)
    }

    /// The name of enum value `reason`.
    pub fn reason_name(self, reason: u32) -> Option<&'static str> {
        self.names().get(reason as usize).copied()
    }

    /// The names of the bits set in `inhibits`, plus the bits this table
    /// does not name.
    pub fn decode(self, inhibits: u64) -> DecodedInhibits {
        let names = self.names();
        let mut out = DecodedInhibits::default();
        for bit in 0..64u32 {
            if inhibits & (1u64 << bit) != 0 {
                match names.get(bit as usize) {
                    Some(n) => out.names.push(n),
                    None => out.unknown_bits |= 1u64 << bit,
                }
            }
        }
        out
    }
}

/// A decoded inhibit bitmask.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DecodedInhibits {
    /// Names of the known bits, in bit order.
    pub names: Vec<&'static str>,
    /// Bits the table has no name for.
    pub unknown_bits: u64,
}

/// One decoded `kvm_apicv_inhibit_changed` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InhibitChange {
    /// Name of the reason that changed (`None`: unknown value).
    pub reason: Option<&'static str>,
    /// Raw reason value.
    pub reason_value: u32,
    /// `true`: the reason was set; `false`: cleared.
    pub set: bool,
    /// All reasons in effect after the change.
    pub inhibits: DecodedInhibits,
    /// APICv/AVIC is active for the VM after the change (`inhibits == 0`).
    pub active: bool,
}

/// Decodes the fields of one `kvm_apicv_inhibit_changed` event.
pub fn decode_event(table: InhibitTable, reason: u32, set: bool, inhibits: u64) -> InhibitChange {
    InhibitChange {
        reason: table.reason_name(reason),
        reason_value: reason,
        set,
        inhibits: table.decode(inhibits),
        active: inhibits == 0,
    }
}

/// Picks the table from the tracepoint's `print fmt`, if it names reasons
/// (kernels that print `__print_flags(... APICV_INHIBIT_REASON_*)`): the
/// newest table whose names include every name printed.
pub fn table_from_print_fmt(print_fmt: &str) -> Option<InhibitTable> {
    let printed: Vec<&str> = print_fmt
        .split("APICV_INHIBIT_REASON_")
        .skip(1)
        .filter_map(|s| {
            let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            Some(&s[..end])
        })
        .map(|n| if n == "DISABLE" { "DISABLED" } else { n })
        .collect();
    if printed.is_empty() {
        return None;
    }
    [
        InhibitTable::Linux6_3,
        InhibitTable::Linux6_0,
        InhibitTable::Linux5_18,
    ]
    .into_iter()
    .find(|t| printed.iter().all(|p| t.names().contains(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FMT_6_18: &str = include_str!("../testdata/kvm_apicv_inhibit_changed.format");

    #[test]
    fn versions() {
        assert_eq!(parse_kernel_version("6.18.44-fc-v782"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.19.0-rc1"), Some((5, 19)));
        assert_eq!(parse_kernel_version("6.2"), Some((6, 2)));
        assert_eq!(parse_kernel_version("6"), None);
        assert_eq!(parse_kernel_version("x.y"), None);
        assert_eq!(InhibitTable::for_kernel_release("5.15.0"), None);
        assert_eq!(
            InhibitTable::for_kernel_release("5.18.1"),
            Some(InhibitTable::Linux5_18)
        );
        assert_eq!(
            InhibitTable::for_kernel_release("6.1.0-13-amd64"),
            Some(InhibitTable::Linux6_0)
        );
        assert_eq!(
            InhibitTable::for_kernel_release("6.5.0"),
            Some(InhibitTable::Linux6_3)
        );
        assert_eq!(
            InhibitTable::for_kernel_release("7.0"),
            Some(InhibitTable::Linux6_3)
        );
    }

    #[test]
    fn same_value_different_names_across_eras() {
        // ABSENT (no in-kernel irqchip) is what ipivmm's `user` irqchip causes.
        assert_eq!(InhibitTable::Linux5_18.reason_name(7), Some("ABSENT"));
        assert_eq!(InhibitTable::Linux6_0.reason_name(2), Some("ABSENT"));
        assert_eq!(InhibitTable::Linux6_3.reason_name(2), Some("ABSENT"));
        // APIC_ID_MODIFIED moved by one when PHYSICAL_ID_ALIASED was inserted.
        assert_eq!(
            InhibitTable::Linux6_0.reason_name(4),
            Some("APIC_ID_MODIFIED")
        );
        assert_eq!(
            InhibitTable::Linux6_3.reason_name(4),
            Some("PHYSICAL_ID_ALIASED")
        );
        assert_eq!(
            InhibitTable::Linux6_3.reason_name(5),
            Some("APIC_ID_MODIFIED")
        );
        // PIT_REINJ: 4, 8, 9.
        assert_eq!(InhibitTable::Linux5_18.reason_name(4), Some("PIT_REINJ"));
        assert_eq!(InhibitTable::Linux6_0.reason_name(8), Some("PIT_REINJ"));
        assert_eq!(InhibitTable::Linux6_3.reason_name(9), Some("PIT_REINJ"));
        assert_eq!(InhibitTable::Linux6_3.reason_name(13), None);
    }

    #[test]
    fn decodes_bitmasks() {
        // DISABLED | ABSENT on 6.3+.
        let d = InhibitTable::Linux6_3.decode(0b101);
        assert_eq!(d.names, ["DISABLED", "ABSENT"]);
        assert_eq!(d.unknown_bits, 0);
        // Same bits on 5.18: DISABLED | NESTED.
        assert_eq!(
            InhibitTable::Linux5_18.decode(0b101).names,
            ["DISABLED", "NESTED"]
        );
        let d = InhibitTable::Linux6_0.decode((1 << 9) | (1 << 12) | (1 << 63));
        assert_eq!(d.names, ["SEV"]);
        assert_eq!(d.unknown_bits, (1 << 12) | (1 << 63));
        assert!(InhibitTable::Linux6_3.decode(0).names.is_empty());
    }

    #[test]
    fn decodes_events() {
        let e = decode_event(InhibitTable::Linux6_3, 2, true, 1 << 2);
        assert_eq!(e.reason, Some("ABSENT"));
        assert!(e.set);
        assert!(!e.active);
        assert_eq!(e.inhibits.names, ["ABSENT"]);
        let e = decode_event(InhibitTable::Linux6_3, 9, false, 0);
        assert_eq!(e.reason, Some("PIT_REINJ"));
        assert!(e.active);
        assert_eq!(
            decode_event(InhibitTable::Linux6_0, 40, true, 0).reason,
            None
        );
    }

    #[test]
    fn table_from_the_running_kernels_format() {
        let f = crate::tracefs::parse_format(FMT_6_18).unwrap();
        assert_eq!(
            table_from_print_fmt(&f.print_fmt),
            Some(InhibitTable::Linux6_3)
        );
        assert_eq!(
            table_from_print_fmt("\"%s reason=%u, inhibits=0x%lx\", REC->set"),
            None
        );
        let old = "{ BIT(APICV_INHIBIT_REASON_DISABLE), \"DISABLE\" }, \
                   { BIT(APICV_INHIBIT_REASON_X2APIC), \"X2APIC\" }";
        assert_eq!(table_from_print_fmt(old), Some(InhibitTable::Linux5_18));
        let mid = "BIT(APICV_INHIBIT_REASON_APIC_ID_MODIFIED) BIT(APICV_INHIBIT_REASON_SEV)";
        assert_eq!(table_from_print_fmt(mid), Some(InhibitTable::Linux6_3));
        assert_eq!(
            table_from_print_fmt("APICV_INHIBIT_REASON_FUTURE_THING"),
            None
        );
    }

    #[test]
    fn tables_have_unique_names() {
        for t in [
            InhibitTable::Linux5_18,
            InhibitTable::Linux6_0,
            InhibitTable::Linux6_3,
        ] {
            let mut n = t.names().to_vec();
            n.sort_unstable();
            n.dedup();
            assert_eq!(n.len(), t.names().len());
        }
    }
}
