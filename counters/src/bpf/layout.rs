//! The maps' layout, mirrored from `bpf/kvm_exits.bpf.c` (the loader checks
//! the sizes against the loaded maps), and the reason slots.

use crate::exit_reasons::Isa;

/// Reason slots per vCPU.
pub const SLOTS: usize = 244;
/// The slot of every code that has no slot of its own.
pub const SLOT_OTHER: usize = 243;

/// Event counters per vCPU.
pub const EVENTS: usize = 8;

/// One event counter the BPF object keeps per vCPU thread, under the name
/// of the tracepoint counter it replaces (`crate::specs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventCounter {
    /// The counter's name (as `crate::specs` names it).
    pub name: &'static str,
    /// Its `kvm:` event (and raw tracepoint).
    pub event: &'static str,
    /// The program counting it.
    pub program: &'static str,
    /// The event's first fields, in order: the raw tracepoint's arguments
    /// the program reads by position (checked against the `format`).
    pub args: &'static [&'static str],
    /// Its index in [`VcpuCounts::events`].
    pub index: usize,
}

/// Every event counter, as `bpf/kvm_exits.bpf.c` numbers them (`EV_*`).
pub const EVENT_COUNTERS: &[EventCounter] = &[
    EventCounter {
        name: crate::specs::names::APIC_ICR_WRITE,
        event: "kvm_apic",
        program: "on_kvm_apic",
        args: &["rw", "reg"],
        index: 0,
    },
    EventCounter {
        name: crate::specs::names::MSR_ICR_WRITE,
        event: "kvm_msr",
        program: "on_kvm_msr",
        args: &["write", "ecx"],
        index: 1,
    },
    EventCounter {
        name: crate::specs::names::HYPERCALL_SEND_IPI,
        event: "kvm_hypercall",
        program: "on_kvm_hypercall",
        args: &["nr"],
        index: 2,
    },
    EventCounter {
        name: crate::specs::names::AVIC_INCOMPLETE,
        event: "kvm_avic_incomplete_ipi",
        program: "on_kvm_avic_incomplete_ipi",
        args: &["vcpu", "icrh", "icrl", "id"],
        index: 3,
    },
    EventCounter {
        name: crate::specs::names::AVIC_INCOMPLETE_BUSY,
        event: "kvm_avic_incomplete_ipi",
        program: "on_kvm_avic_incomplete_ipi",
        args: &["vcpu", "icrh", "icrl", "id"],
        index: 4,
    },
    EventCounter {
        name: crate::specs::names::WAKEUP_WAITED,
        event: "kvm_vcpu_wakeup",
        program: "on_kvm_vcpu_wakeup",
        args: &["ns", "waited"],
        index: 5,
    },
    EventCounter {
        name: crate::specs::names::WAKEUP_POLLED,
        event: "kvm_vcpu_wakeup",
        program: "on_kvm_vcpu_wakeup",
        args: &["ns", "waited"],
        index: 6,
    },
    EventCounter {
        name: "kvm_apic_ipi",
        event: "kvm_apic_ipi",
        program: "on_kvm_apic_ipi",
        args: &["icr_low", "dest_id"],
        index: 7,
    },
];

/// The name the exits total is reported under (the unfiltered `kvm_exit`
/// counter's).
pub const EXITS_COUNTER: &str = "kvm_exit";

/// `CONFIG[0]`: where the exit reason is in `kvm:kvm_exit`'s record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Offset of `exit_reason` (u32).
    pub reason_offset: u32,
    /// Offset of `isa` (u32); 0: the record has none.
    pub isa_offset: u32,
    /// The ISA assumed when the record has none (1 VMX, 2 SVM).
    pub default_isa: u32,
    /// The process whose APICv inhibit changes are logged.
    pub tgid: u32,
    /// `on_exit_raw`: 1, the reason is a u32 at `vcpu + raw_at`; 2, at
    /// `*(vcpu + raw_at) + raw_then`; 0: not used.
    pub raw_hops: u32,
    /// See `raw_hops`.
    pub raw_at: u32,
    /// See `raw_hops`.
    pub raw_then: u32,
    /// Padding (0).
    pub pad: u32,
}

/// `ACTIVE[0]`: how many registered threads are counting (`struct active`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Active {
    /// Threads whose switch is on.
    pub threads: u32,
    /// Zero.
    pub pad: u32,
}

/// Slots of `TIDS`, the direct-mapped cache of `THREADS` (by tid modulo).
pub const TID_SLOTS: usize = 4096;

/// One `TIDS` slot (`struct tid_slot`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TidSlot {
    /// The thread (0: free).
    pub tid: u32,
    /// Its `VCPUS` element.
    pub index: u32,
}

/// Changes [`InhibitLog`] holds; later ones are counted, not kept.
pub const INHIBIT_LOG: usize = 255;

/// One APICv inhibit change (`struct inhibit_change`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InhibitEntry {
    /// CLOCK_MONOTONIC ns.
    pub time_ns: u64,
    /// Every reason in effect after the change (bit = enum value).
    pub inhibits: u64,
    /// The reason that changed.
    pub reason: u32,
    /// 1: set, 0: cleared.
    pub set: u32,
    /// The thread that changed it.
    pub tid: u32,
    /// Zero.
    pub pad: u32,
}

/// `INHIBITS[0]`: every inhibit change of the process (`struct inhibit_log`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct InhibitLog {
    /// Changes seen (those past [`INHIBIT_LOG`] are lost).
    pub next: u64,
    /// Zero.
    pub pad: u64,
    /// The first [`INHIBIT_LOG`] changes.
    pub entries: [InhibitEntry; INHIBIT_LOG],
}

/// The arguments `on_inhibit_changed` reads, in order.
pub const INHIBIT_ARGS: &[&str] = &["reason", "set", "inhibits"];

// SAFETY: Config is repr(C), eight u32 without padding: every bit pattern is
// valid and it has no pointers (aya copies it into the map as bytes).
unsafe impl aya::Pod for Config {}

/// One element of `VCPUS`: the counts of one vCPU thread (`struct vcpu`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuCounts {
    /// The switch: counted only while non-zero (set by the vCPU thread).
    pub counting: u32,
    /// Slot + 1 of the exit in progress (0: none).
    pub pending: u32,
    /// When that exit happened, CLOCK_MONOTONIC ns.
    pub exit_ns: u64,
    /// Exits counted.
    pub exits: u64,
    /// Exits that got no entry before the next exit.
    pub unmatched: u64,
    /// Records whose reason could not be read (not counted).
    pub unreadable: u64,
    /// The last code counted in [`SLOT_OTHER`].
    pub other_code: u64,
    /// The last `isa` seen (1 VMX, 2 SVM).
    pub isa: u64,
    /// Zero.
    pub reserved: u64,
    /// The event counters ([`EVENT_COUNTERS`]).
    pub events: [u64; EVENTS],
    /// Exits per slot.
    pub count: [u64; SLOTS],
    /// Of those, the exits whose next entry was seen.
    pub timed: [u64; SLOTS],
    /// Their host time (exit to next entry), ns.
    pub host_ns: [u64; SLOTS],
}

impl Default for VcpuCounts {
    fn default() -> Self {
        Self {
            counting: 0,
            pending: 0,
            exit_ns: 0,
            exits: 0,
            unmatched: 0,
            unreadable: 0,
            other_code: 0,
            isa: 0,
            reserved: 0,
            events: [0; EVENTS],
            count: [0; SLOTS],
            timed: [0; SLOTS],
            host_ns: [0; SLOTS],
        }
    }
}

/// Bytes of one `VCPUS` element (the map's value size).
pub const VCPU_BYTES: usize = std::mem::size_of::<VcpuCounts>();

const SVM: u32 = 2;

/// The slot of exit `code` under `isa` (as the BPF program computes it):
/// 0x00-0xbf as they are (VMX: the basic reason), SVM 0x400-0x40f from
/// 0xc0, SVM 0x80000000-0x8000001f (VMGEXIT) from 0xd0, SVM_EXIT_ERR at
/// 0xf0, 0x8000fffd at 0xf1, anything else [`SLOT_OTHER`].
pub fn slot_of(code: u32, isa: u32) -> usize {
    let code = if isa == SVM { code } else { code & 0xffff };
    let slot = match code {
        0..=0xbf => code,
        _ if isa != SVM => SLOT_OTHER as u32,
        0x400..=0x40f => 0xc0 + (code - 0x400),
        0x8000_0000..=0x8000_001f => 0xd0 + (code - 0x8000_0000),
        0xffff_ffff => 0xf0,
        0x8000_fffd => 0xf1,
        _ => SLOT_OTHER as u32,
    };
    slot as usize
}

/// The code of `slot` (the inverse of [`slot_of`]; [`SLOT_OTHER`] gives
/// None: its codes are mixed).
pub fn code_of(slot: usize, isa: Option<Isa>) -> Option<u32> {
    let s = u32::try_from(slot).ok()?;
    match (s, isa) {
        (0..=0xbf, _) => Some(s),
        (_, Some(Isa::Vmx) | None) => None,
        (0xc0..=0xcf, Some(Isa::Svm)) => Some(0x400 + s - 0xc0),
        (0xd0..=0xef, Some(Isa::Svm)) => Some(0x8000_0000 + s - 0xd0),
        (0xf0, Some(Isa::Svm)) => Some(0xffff_ffff),
        (0xf1, Some(Isa::Svm)) => Some(0x8000_fffd),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_reasons::exit_reasons;

    #[test]
    fn the_layout_is_the_c_structs() {
        // struct config: 4 u32; struct vcpu: 2 u32, 7 u64, 3 x SLOTS u64.
        assert_eq!(std::mem::size_of::<Config>(), 32);
        assert_eq!(std::mem::size_of::<Active>(), 8);
        assert_eq!(std::mem::size_of::<TidSlot>(), 8);
        assert!(TID_SLOTS.is_power_of_two());
        assert_eq!(std::mem::size_of::<InhibitEntry>(), 32);
        assert_eq!(std::mem::size_of::<InhibitLog>(), 16 + 32 * INHIBIT_LOG);
        assert_eq!(VCPU_BYTES, 8 + 7 * 8 + EVENTS * 8 + 3 * SLOTS * 8);
        assert_eq!(std::mem::offset_of!(VcpuCounts, exits), 16);
        assert_eq!(std::mem::offset_of!(VcpuCounts, events), 64);
        assert_eq!(std::mem::offset_of!(VcpuCounts, count), 64 + EVENTS * 8);
        // Every slot of `events` is one counter, and every counter has a spec.
        let mut idx: Vec<usize> = EVENT_COUNTERS.iter().map(|e| e.index).collect();
        idx.sort_unstable();
        assert_eq!(idx, (0..EVENTS).collect::<Vec<_>>());
        let specs = crate::specs::kvm_specs(None, &crate::specs::ExitReasonSelection::None);
        for e in EVENT_COUNTERS {
            let spec = specs.iter().find(|s| s.name == e.name).expect(e.name);
            assert_eq!(spec.event, e.event, "{}", e.name);
        }
        assert!(specs.iter().any(|s| s.name == EXITS_COUNTER));
        assert_eq!(VCPU_BYTES % 8, 0, "array elements are 8-byte aligned");
    }

    #[test]
    fn every_named_reason_has_its_own_slot_and_comes_back() {
        for (isa, n) in [(Isa::Vmx, 1), (Isa::Svm, 2)] {
            let mut seen = std::collections::BTreeMap::new();
            for &(code, name) in exit_reasons(isa) {
                let slot = slot_of(code, n);
                assert!(slot < SLOTS);
                assert_ne!(slot, SLOT_OTHER, "{isa:?} {name} {code:#x}");
                assert_eq!(code_of(slot, Some(isa)), Some(code), "{isa:?} {name}");
                if let Some(other) = seen.insert(slot, name) {
                    panic!("{isa:?}: {name} and {other} share slot {slot}");
                }
            }
        }
    }

    #[test]
    fn vmx_high_bits_share_the_basic_reason_and_strays_go_to_other() {
        // VM-entry failure (bit 31) with invalid guest state (33).
        assert_eq!(slot_of(0x8000_0021, 1), 0x21);
        assert_eq!(slot_of(0x8000_0021, 2), SLOT_OTHER, "SVM has no such code");
        assert_eq!(slot_of(0x1234, 1), SLOT_OTHER);
        assert_eq!(slot_of(0x410, 2), SLOT_OTHER);
        assert_eq!(slot_of(0xf000_0000, 2), SLOT_OTHER, "SVM_EXIT_SW");
        assert_eq!(code_of(SLOT_OTHER, Some(Isa::Svm)), None);
        assert_eq!(code_of(0xc5, Some(Isa::Vmx)), None);
        assert_eq!(code_of(SLOTS, Some(Isa::Svm)), None);
    }
}
