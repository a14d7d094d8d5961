//! A mode: how an IPI travels from one vCPU to another. This is the one home
//! of its parts (irqchip, guest APIC, IPI path, APICv request) and of the
//! workload choices that shape a run (workload, how targets wait); of their
//! names (one kebab-case spelling for the CLI, JSON, CSV and tables, derived
//! once by serde and strum, and by clap with the `clap` feature); of the
//! mode's label; and of the one feasibility check that `run` and `sweep`
//! both use, so they cannot disagree about what can run.
//!
//! The guest-visible parts (APIC mode, IPI path, target wait, workload) are
//! the guest ABI's own enums (`ipivmm_abi`, with its `host` feature for
//! their spelling): one definition for host and guest.
pub mod apicv;
pub mod lever_table;
pub mod levers;

pub use ipivmm_abi::{ApicMode, IpiPath, TargetWait, Workload};
pub use lever_table::{Lever, Levers};

use apicv::ApicvPlan;
use ipivmm_host::facts::{HostInfo, KvmBackend};
use serde::{Deserialize, Serialize};

/// Derives shared by every mode part: serde and strum name it, and with
/// the `clap` feature clap parses it, all as kebab-case.
macro_rules! mode_part {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
            strum::Display, strum::EnumString, strum::IntoStaticStr, strum::VariantArray,
        )]
        #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
        #[serde(rename_all = "kebab-case")]
        #[strum(serialize_all = "kebab-case")]
        pub enum $name { $($(#[$vmeta])* $variant,)+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = <$name as strum::VariantArray>::VARIANTS;

            /// The one spelling of this value (CLI, JSON, CSV, tables).
            pub fn name(self) -> &'static str {
                self.into()
            }
        }
    };
}

pub(crate) use mode_part;

mode_part! {
    /// Which interrupt controller models the local APICs.
    pub enum Irqchip {
        /// KVM_CREATE_IRQCHIP: LAPIC, IOAPIC and PIC in the kernel.
        Kernel,
        /// KVM_CAP_SPLIT_IRQCHIP: LAPIC in the kernel, the rest in userspace.
        Split,
        /// No in-kernel irqchip: ipivmm's own LAPIC model (APICv inhibited: ABSENT).
        User,
    }
}

impl Irqchip {
    /// Whether KVM models the LAPIC (`kernel`, `split`) rather than ipivmm
    /// (`user`): what the mode's rules ask of an irqchip (PV IPIs, APICv
    /// and its levers, KVM_CAP_X2APIC_API). How each one is built and run
    /// is `irqchip`'s.
    pub const fn lapic_in_kernel(self) -> bool {
        match self {
            Irqchip::Kernel | Irqchip::Split => true,
            Irqchip::User => false,
        }
    }

    /// Whether KVM also models the PIT (`kernel` only: `split` leaves the
    /// PIT, IOAPIC and PIC to userspace, and ipivmm has none): what AMD's
    /// PIT-reinjection APICv inhibit needs.
    pub const fn pit_in_kernel(self) -> bool {
        match self {
            Irqchip::Kernel => true,
            Irqchip::Split | Irqchip::User => false,
        }
    }
}

mode_part! {
    /// APICv/AVIC for one VM: left to the host, or inhibited with a lever.
    pub enum ApicvRequest {
        /// Whatever the host's module parameters give.
        Host,
        /// Inhibited for this VM with a lever the vendor honours.
        Inhibit,
    }
}

mode_part! {
    /// How VM exits are counted by reason (with tracepoints on).
    pub enum ExitReasons {
        /// Counted in the kernel by an eBPF program on `kvm_exit`/`kvm_entry`
        /// (per vCPU thread, read at the phase markers): nothing per exit
        /// leaves the kernel, host time per reason. Where it cannot load
        /// (no clang at build time, no BPF or no rights at run time), the
        /// sampler counts instead and `sources` says why.
        Bpf,
        /// `kvm_exit`/`kvm_entry` sampled into a per-vCPU ring buffer and
        /// decoded in userspace: a constant cost per exit, host time per reason.
        Sampled,
        /// One filtered `kvm_exit` counter per reason (the kernel runs every
        /// filter on every exit: kept to measure what that costs).
        Counters,
        /// Not by reason: `kvm_exit` and KVM's `exits` totals only.
        Off,
    }
}

mode_part! {
    /// A named workload of ipivmm's guest initramfs (`--workload linux:NAME`),
    /// run by its init between phase markers (docs/linux-guest.md).
    pub enum LinuxWorkload {
        /// Boot, an idle phase, power off: what the kernel sends on its own.
        Idle,
        /// The IPI module: smp_call_function_many to every other CPU, waiting.
        IpiBroadcast,
        /// The IPI module: smp_call_function_many to a set of CPUs (`--param`).
        IpiMulticast,
        /// The IPI module: smp_call_function_single to the next CPU, waiting.
        IpiUnicast,
        /// rt-tests' hackbench: reschedule IPIs between message passers.
        Hackbench,
        /// A thread on every CPU in one address space, munmap in a loop: TLB shootdowns.
        TlbShootdown,
        /// ebizzy -M-like allocation: threads that map, touch and unmap buffers.
        Ebizzy,
    }
}

impl LinuxWorkload {
    /// The prefix that names a Linux workload on the command line and in
    /// results: `linux:ipi-broadcast`.
    pub const PREFIX: &'static str = "linux:";

    /// `linux:NAME`.
    pub fn label(self) -> String {
        format!("{}{}", Self::PREFIX, self.name())
    }

    /// The workload `linux:NAME` names, None for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        s.strip_prefix(Self::PREFIX)?.parse().ok()
    }

    /// Fewest vCPUs the workload can run on (an IPI needs a target).
    pub fn min_vcpus(self) -> usize {
        match self {
            LinuxWorkload::Idle | LinuxWorkload::Hackbench | LinuxWorkload::Ebizzy => 1,
            _ => 2,
        }
    }
}

// mode_part! enums cannot carry `#[default]` on one variant only.
#[allow(clippy::derivable_impls)]
impl Default for ExitReasons {
    fn default() -> Self {
        ExitReasons::Bpf
    }
}

/// The four parts that decide how an IPI travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mode {
    /// Interrupt controller.
    pub irqchip: Irqchip,
    /// Guest APIC mode.
    pub apic: ApicMode,
    /// IPI path.
    pub ipi: IpiPath,
    /// APICv/AVIC request.
    pub apicv: ApicvRequest,
}

impl Mode {
    /// The label of the mode everywhere (tables, charts, comparisons):
    /// `irqchip/apic/ipi`, then ` apicv-inhibit` when APICv was to be inhibited.
    ///
    /// ```
    /// use ipivmm_analysis::mode::{ApicMode, ApicvRequest, IpiPath, Irqchip, Mode};
    ///
    /// let m = Mode { irqchip: Irqchip::Split, apic: ApicMode::X2apic, ipi: IpiPath::Icr, apicv: ApicvRequest::Inhibit };
    /// assert_eq!(m.label(), "split/x2apic/icr apicv-inhibit");
    /// ```
    pub fn label(&self) -> String {
        let mut l = format!("{}/{}/{}", self.irqchip, self.apic, self.ipi);
        if self.apicv == ApicvRequest::Inhibit {
            l.push_str(" apicv-inhibit");
        }
        l
    }
}

/// Why a combination cannot run. Each message names the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Infeasible {
    /// PV IPIs are handled by KVM's LAPIC.
    #[error("--ipi pv (VmConfig::ipi = IpiPath::Pv) needs the LAPIC in KVM (KVM_HC_SEND_IPI is handled there): use --irqchip kernel or split (VmConfig::irqchip)")]
    PvNeedsKernelLapic,
    /// Hypercalls never return on kvm_pvm.
    #[error("--ipi pv cannot run on the kvm_pvm backend: a guest vmcall/vmmcall never returns there (KVM_HC_SEND_IPI included); run it on a hardware KVM host (kvm_intel/kvm_amd, or the lab: scripts/lab.sh) or use --ipi icr (VmConfig::ipi = IpiPath::Icr)")]
    PvOnKvmPvm,
    /// Too few vCPUs for the workload.
    #[error("workload {workload} needs at least {min} vCPUs: use --vcpus {min} or more (VmConfig::vcpus)")]
    TooFewVcpus {
        /// The workload.
        workload: Workload,
        /// Its minimum.
        min: usize,
    },
    /// The APICv lever moves the highest xAPIC ID onto the broadcast ID.
    #[error("--vcpus {vcpus} with --apic xapic and the {lever:?} APICv lever: the last vCPU would get APIC ID {id:#x}, beyond xAPIC's 0xFE; use --vcpus {} or fewer, or --apic x2apic", vcpus - 1)]
    XapicIdSpace {
        /// vCPUs asked for.
        vcpus: usize,
        /// The lever that shifts the IDs.
        lever: apicv::InhibitLever,
        /// The highest APIC ID it would give.
        id: u32,
    },
}

/// What a mode check needs of a run besides its [`Mode`]: its size and
/// what it runs (`VmConfig::shape`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// vCPUs.
    pub vcpus: usize,
    /// The built-in workload, or None for a custom payload (whose needs
    /// are its own).
    pub workload: Option<Workload>,
}

impl Mode {
    /// The one feasibility check: whether this mode of a run of `shape` can run
    /// on `host` (None: not fingerprinted; only host-independent rules apply),
    /// and the APICv plan it runs with. `run` refuses what fails it; `sweep`
    /// skips it with the reason (both through `VmConfig::check_mode`).
    pub fn check(self, shape: Shape, host: Option<&HostInfo>) -> Result<ApicvPlan, Infeasible> {
        if self.ipi.is_hypercall() && !self.irqchip.lapic_in_kernel() {
            return Err(Infeasible::PvNeedsKernelLapic);
        }
        if self.ipi.is_hypercall() && host.is_some_and(|h| h.backend == KvmBackend::KvmPvm) {
            return Err(Infeasible::PvOnKvmPvm);
        }
        if let Some(workload) = shape.workload {
            let min = workload.min_vcpus();
            if shape.vcpus < min {
                return Err(Infeasible::TooFewVcpus { workload, min });
            }
        }
        let plan = ApicvPlan::of(host, self);
        let last = plan.lever.apic_id(shape.vcpus.saturating_sub(1));
        if self.apic == ApicMode::Xapic && last > ipivmm_abi::MAX_XAPIC_ID {
            return Err(Infeasible::XapicIdSpace {
                vcpus: shape.vcpus,
                lever: plan.lever,
                id: last,
            });
        }
        Ok(plan)
    }
}

impl Mode {
    /// Why a feasible combination would measure the same VM as another one on
    /// this host, if it would: sweeps skip such duplicates instead of running
    /// them twice (presets always; explicit lists keep them unless asked).
    pub fn duplicate_of(self, plan: &ApicvPlan) -> Option<String> {
        if self.apicv != ApicvRequest::Inhibit {
            return None;
        }
        if !self.irqchip.lapic_in_kernel() {
            return Some("identical to the apicv=host row: APICv is already inhibited without an in-kernel irqchip (ABSENT)".into());
        }
        (plan.effective != apicv::ApicvState::Active
            && plan.effective != apicv::ApicvState::Inhibited)
            .then(|| {
                format!(
                    "identical to the apicv=host row on this host: {}",
                    plan.detail
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// Every value's `name()` (the ABI's, used by the guest too) is the
    /// spelling strum parses and displays and serde writes (clap's, with
    /// the `clap` feature, is checked by the ipivmm-cli crate).
    fn one_spelling<T>(all: &[T], name: impl Fn(T) -> &'static str)
    where
        T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display + FromStr + serde::Serialize,
        <T as FromStr>::Err: std::fmt::Debug,
    {
        for v in all {
            let n = name(*v);
            assert_eq!(<T as FromStr>::from_str(n).ok(), Some(*v), "{n}");
            assert_eq!(serde_json::to_string(v).unwrap(), format!("\"{n}\""));
            assert_eq!(v.to_string(), n);
        }
    }

    #[test]
    fn one_spelling_for_cli_json_and_tables() {
        one_spelling(Workload::ALL, Workload::name);
        one_spelling(ApicMode::ALL, ApicMode::name);
        one_spelling(IpiPath::ALL, IpiPath::name);
        one_spelling(TargetWait::ALL, TargetWait::name);
        one_spelling(Irqchip::ALL, Irqchip::name);
        one_spelling(ApicvRequest::ALL, ApicvRequest::name);
        assert_eq!(Workload::AllToAll.name(), "all-to-all");
        assert_eq!(ApicMode::X2apic.name(), "x2apic");
        assert_eq!(Irqchip::ALL.len(), 3);
    }

    #[test]
    fn pv_rules_and_minimum_vcpus() {
        let icr = Mode {
            irqchip: Irqchip::Kernel,
            apic: ApicMode::Xapic,
            ipi: IpiPath::Icr,
            apicv: ApicvRequest::Host,
        };
        let pv_user = Mode {
            ipi: IpiPath::Pv,
            irqchip: Irqchip::User,
            ..icr
        };
        let two = Shape {
            vcpus: 2,
            workload: Some(Workload::Pingpong),
        };
        assert_eq!(
            pv_user.check(two, None),
            Err(Infeasible::PvNeedsKernelLapic)
        );
        let one = Shape { vcpus: 1, ..two };
        assert!(matches!(
            icr.check(one, None),
            Err(Infeasible::TooFewVcpus { min: 2, .. })
        ));
        let selfipi = Shape {
            workload: Some(Workload::SelfIpi),
            ..one
        };
        assert!(icr.check(selfipi, None).is_ok());
        // A custom payload's needs are its own.
        let custom = Shape {
            workload: None,
            ..one
        };
        assert!(icr.check(custom, None).is_ok());
    }
}
