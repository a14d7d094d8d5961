//! The guest-visible parts of a mode (APIC mode, IPI path, how targets
//! wait) and the built-in workloads, defined once for host and guest: the
//! guest reads their numbers from [`crate::BootInfo`]; with the `host`
//! feature the host's JSON and tables get their one kebab-case spelling
//! from the same enums (serde and strum derive it; clap too, for a command
//! line, with the `clap` feature).
//! [`Workload::spec`] describes each workload once: its name, what one
//! sample times, how many vCPUs it needs and how many IPIs one operation
//! delivers, which the host's metrics, the tests and the lab check.

/// An enum of the guest ABI: `repr(u32)` numbers for [`crate::BootInfo`],
/// `ALL`, `from_raw`, `name`, and with the `host` feature the derives that
/// give it its spelling on the host.
macro_rules! abi_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $v:literal => $n:literal,)+ }) => {
        $(#[$meta])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(
            feature = "host",
            derive(
                serde::Serialize, serde::Deserialize,
                strum::Display, strum::EnumString, strum::IntoStaticStr,
            ),
            serde(rename_all = "kebab-case"),
            strum(serialize_all = "kebab-case")
        )]
        #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
        pub enum $name { $($(#[$vmeta])* $variant = $v,)+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// Decodes the number [`crate::BootInfo`] carries.
            pub fn from_raw(raw: u32) -> Option<Self> {
                Self::ALL.iter().copied().find(|x| *x as u32 == raw)
            }

            /// The one spelling of this value (CLI, JSON, CSV, tables).
            pub const fn name(self) -> &'static str {
                match self { $($name::$variant => $n,)+ }
            }
        }
    };
}

abi_enum! {
    /// The guest's APIC mode.
    pub enum ApicMode {
        /// MMIO registers at 0xFEE00000; the ICR at 0x300/0x310.
        Xapic = 0 => "xapic",
        /// MSRs 0x800..; the ICR is MSR 0x830 (the payload sets IA32_APIC_BASE.EXTD).
        X2apic = 1 => "x2apic",
    }
}

abi_enum! {
    /// How the guest sends an IPI.
    pub enum IpiPath {
        /// Writes to the ICR.
        Icr = 0 => "icr",
        /// The KVM_HC_SEND_IPI hypercall (needs the LAPIC in KVM and KVM_FEATURE_PV_SEND_IPI).
        Pv = 1 => "pv",
    }
}

impl IpiPath {
    /// Whether an IPI is the KVM_HC_SEND_IPI hypercall: then it needs KVM's
    /// LAPIC, KVM_FEATURE_PV_SEND_IPI in CPUID and a backend where a guest
    /// vmcall/vmmcall returns, and no ICR write is made. Every rule about
    /// the path asks this (or [`IpiPath::writes_icr`]), so a new path is a
    /// decision here, not a silent `==` elsewhere.
    pub const fn is_hypercall(self) -> bool {
        match self {
            IpiPath::Icr => false,
            IpiPath::Pv => true,
        }
    }

    /// Whether each IPI is a guest write to the ICR (what ICR-write exits
    /// count, and what APICv/AVIC/IPIv accelerate).
    pub const fn writes_icr(self) -> bool {
        match self {
            IpiPath::Icr => true,
            IpiPath::Pv => false,
        }
    }
}

abi_enum! {
    /// How IPI targets wait between IPIs.
    pub enum TargetWait {
        /// Spin with interrupts enabled: an IPI meets a running vCPU (no VM exit on the target).
        Spin = 0 => "spin",
        /// `sti; hlt`, and each IPI waits until the target is halted (plus `BootInfo::halt_settle_ns`): every IPI wakes a halted vCPU (halt exits, halt polling).
        Halt = 1 => "halt",
        /// `sti; hlt`, next IPI as soon as the last is acked: IPIs often meet a target not yet halted (an interrupt-window exit instead of a wake-up).
        HaltImmediate = 2 => "halt-immediate",
    }
}

abi_enum! {
    /// The built-in payload's workloads ([`Workload::spec`] describes each).
    pub enum Workload {
        /// vCPU 0 sends a unicast IPI to each other vCPU in turn and waits for the ack.
        Pingpong = 1 => "pingpong",
        /// Ping-pong with targets always halted.
        PingpongHalt = 2 => "pingpong-halt",
        /// All-but-self shorthand from vCPU 0; it waits for every ack.
        Broadcast = 3 => "broadcast",
        /// One IPI to an explicit set (params[0]: bitmap of vCPU indices, 0 = all others; logical mode, or a PV bitmap).
        Multicast = 4 => "multicast",
        /// Self-IPIs on every vCPU (one vCPU suffices).
        SelfIpi = 5 => "self-ipi",
        /// Fire-and-forget IPIs from vCPU 0, no ack wait; receivers count.
        Flood = 6 => "flood",
        /// Every vCPU sends to every other.
        AllToAll = 7 => "all-to-all",
    }
}

/// How many IPIs one operation of a workload delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanOut {
    /// One (a unicast round trip, a self-IPI, a send).
    One,
    /// One to every other vCPU (N-1).
    AllButSelf,
    /// One to each vCPU of `params[0]`'s bitmap (bit 0 and vCPUs past 63
    /// ignored), every other vCPU when it is 0.
    Params0Set,
}

impl FanOut {
    /// The IPIs one operation delivers in a VM of `vcpus` vCPUs run with
    /// `params`.
    pub fn ipis(self, vcpus: usize, params: &[u64; 8]) -> u64 {
        let others = vcpus.saturating_sub(1) as u64;
        match self {
            FanOut::One => 1,
            FanOut::AllButSelf => others,
            FanOut::Params0Set if params[0] == 0 => others,
            FanOut::Params0Set => {
                let in_vm = if vcpus >= 64 {
                    u64::MAX
                } else {
                    (1u64 << vcpus) - 1
                };
                u64::from((params[0] & in_vm & !1).count_ones())
            }
        }
    }
}

/// What a built-in workload is, in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadSpec {
    /// What one latency sample times: the `operation` of the metrics.
    pub operation: &'static str,
    /// Fewest vCPUs it runs on.
    pub min_vcpus: usize,
    /// IPIs one operation delivers.
    pub fan_out: FanOut,
    /// Operations per measured iteration, all vCPUs together, as a
    /// function of N: 1 (vCPU 0's), N (every vCPU's), N(N-1) (each pair's).
    pub operations_per_iteration: OperationsPerIteration,
}

/// How many operations one measured iteration makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationsPerIteration {
    /// vCPU 0's one.
    One,
    /// One per vCPU.
    PerVcpu,
    /// One per ordered pair of vCPUs.
    PerPair,
}

impl OperationsPerIteration {
    /// The operations of one iteration with `vcpus` vCPUs.
    pub fn of(self, vcpus: usize) -> u64 {
        let n = vcpus as u64;
        match self {
            OperationsPerIteration::One => 1,
            OperationsPerIteration::PerVcpu => n,
            OperationsPerIteration::PerPair => n * n.saturating_sub(1),
        }
    }
}

impl Workload {
    /// The workload's description.
    pub const fn spec(self) -> WorkloadSpec {
        use FanOut::{AllButSelf, Params0Set};
        use OperationsPerIteration::{PerPair, PerVcpu};
        const ONE: FanOut = FanOut::One;
        const ONCE: OperationsPerIteration = OperationsPerIteration::One;
        let (operation, min_vcpus, fan_out, operations_per_iteration) = match self {
            Workload::Pingpong | Workload::PingpongHalt => ("round trip", 2, ONE, ONCE),
            Workload::Broadcast => ("broadcast", 2, AllButSelf, ONCE),
            Workload::Multicast => ("multicast", 2, Params0Set, ONCE),
            Workload::SelfIpi => ("self-IPI", 1, ONE, PerVcpu),
            Workload::Flood => ("send", 2, ONE, ONCE),
            Workload::AllToAll => ("round trip", 2, ONE, PerPair),
        };
        WorkloadSpec {
            operation,
            min_vcpus,
            fan_out,
            operations_per_iteration,
        }
    }

    /// What one latency sample times (`round trip`, `broadcast`, ...).
    pub const fn operation(self) -> &'static str {
        self.spec().operation
    }

    /// Fewest vCPUs the workload runs on.
    pub const fn min_vcpus(self) -> usize {
        self.spec().min_vcpus
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_names_and_fan_outs() {
        for w in Workload::ALL {
            assert_eq!(Workload::from_raw(*w as u32), Some(*w));
        }
        assert_eq!(Workload::from_raw(0), None);
        assert_eq!(TargetWait::HaltImmediate.name(), "halt-immediate");
        assert_eq!(ApicMode::X2apic as u32, 1);
        let p = |p0: u64| {
            let mut a = [0u64; 8];
            a[0] = p0;
            a
        };
        assert_eq!(Workload::Broadcast.spec().fan_out.ipis(4, &p(0)), 3);
        assert_eq!(Workload::Multicast.spec().fan_out.ipis(4, &p(0)), 3);
        // Bit 0 (the sender) and vCPUs the VM does not have do not count.
        assert_eq!(Workload::Multicast.spec().fan_out.ipis(4, &p(0b1_0111)), 2);
        assert_eq!(Workload::Pingpong.spec().fan_out.ipis(300, &p(0)), 1);
        assert_eq!(Workload::AllToAll.spec().operations_per_iteration.of(4), 12);
        assert_eq!(Workload::SelfIpi.min_vcpus(), 1);
    }
}
