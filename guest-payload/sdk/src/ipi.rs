//! Counted IPI sends, over the ICR ([`crate::apic`]) or the KVM PV IPI
//! hypercall. Every send updates this vCPU's counters: `icr_writes` +1 per
//! ICR write, `hypercalls` +1 per hypercall (a PV IPI writes no ICR:
//! counting it there made the host report it as an accelerated ICR write),
//! `ipis_sent` + number of target vCPUs.
//!
//! Two levels: [`send`] / [`Ipi`] take any [`Icr`] the builders of
//! `ipivmm_abi` make (every delivery mode, physical or logical destination,
//! any shorthand), check it and count the vCPUs it reaches
//! ([`ipivmm_abi::icr_targets`]); [`Sender`] and `send_physical` /
//! `send_shorthand` / `send_logical` are the fixed-delivery hot paths of
//! the built-in payload, by vCPU index, with the PV path as an alternative.

use crate::apic::{self, Apic};
use crate::percpu::{self, bump};
use crate::settings;
use core::arch::asm;
use core::fmt;
use ipivmm_abi::{
    icr_low, icr_targets, pv_ipi_calls, IpiPath, PvIpiCall, SetBits, KVM_HC_SEND_IPI, MAX_VCPUS,
};
pub use ipivmm_abi::{DeliveryMode, Destination, Icr, IcrError, LogicalModel, Shorthand};

/// A set of vCPU indices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuSet([u64; MAX_VCPUS.div_ceil(64)]);

impl VcpuSet {
    /// No vCPU.
    pub const fn new() -> Self {
        Self([0; MAX_VCPUS.div_ceil(64)])
    }

    /// Every vCPU of the VM but `me`.
    pub fn all_but(me: usize) -> Self {
        let mut s = Self::new();
        for v in 0..percpu::boot_info().vcpu_count as usize {
            if v != me {
                s.insert(v);
            }
        }
        s
    }

    /// Adds vCPU `v` (ignored when out of range).
    pub fn insert(&mut self, v: usize) {
        if v < MAX_VCPUS {
            self.0[v / 64] |= 1 << (v % 64);
        }
    }

    /// True if `v` is in the set.
    pub fn contains(&self, v: usize) -> bool {
        v < MAX_VCPUS && self.0[v / 64] >> (v % 64) & 1 == 1
    }

    /// Number of vCPUs.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vCPU indices, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        SetBits::new(&self.0)
    }
}

/// APIC ID of vCPU `v`.
pub fn apic_id_of(v: usize) -> u32 {
    percpu::boot_info().apic_id(v)
}

fn count(icr_writes: u64, targets: u64) {
    let c = &percpu::current().counters;
    bump(&c.icr_writes, icr_writes);
    bump(&c.ipis_sent, targets);
}

/// Why [`Ipi::new`] refuses a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The SDM's rules refuse it ([`Icr::check`]).
    Icr(IcrError),
    /// A fixed or lowest-priority vector below 32: the SDK's handlers treat
    /// vectors 0..32 as exceptions.
    ExceptionVector(u8),
    /// SMI: nothing in an ipivmm VM handles system management mode.
    Smi,
    /// A start-up IPI runs code of the payload's choosing in real mode:
    /// [`Ipi::new_startup`] (unsafe).
    Startup,
    /// [`Ipi::new_startup`] given another delivery mode.
    NotStartup,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Icr(e) => e.fmt(f),
            SendError::ExceptionVector(v) => {
                write!(
                    f,
                    "vector {v} is an exception vector to the SDK's handlers (use 32..=254)"
                )
            }
            SendError::Smi => f.write_str("the SDK sends no SMI (no SMM handler in the VM)"),
            SendError::Startup => f.write_str("a start-up IPI needs Ipi::new_startup (unsafe)"),
            SendError::NotStartup => f.write_str("Ipi::new_startup takes a start-up IPI only"),
        }
    }
}

/// A checked [`Icr`] and the number of vCPUs it reaches: built once, sent
/// (and counted: `icr_writes` +1, `ipis_sent` + [`Ipi::targets`]) as often
/// as needed.
///
/// ```ignore
/// use ipivmm_guest::ipi::{self, Icr, Ipi};
/// let lp = Ipi::new(Icr::lowest_priority(vector).logical(0b1110))?;
/// lp.send(); // one of vCPUs 1..4 takes it (xAPIC flat, after apic::setup_logical)
/// ipi::send(Icr::nmi().all_but_self()); // check, count and send at once
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipi {
    icr: Icr,
    targets: u64,
}

impl Ipi {
    /// Checks `icr` ([`Icr::check`] in this VM's APIC mode, a vector of
    /// 32..=255 for fixed and lowest-priority delivery, no SMI, no start-up
    /// IPI) and counts the vCPUs it reaches now ([`targets_of`]: logical
    /// destinations as the targets' `apic::setup_logical` programmed them).
    ///
    /// What each delivery mode does on KVM: fixed and lowest-priority raise
    /// the vector (lowest priority on one of the addressed vCPUs, picked by
    /// KVM); an NMI runs the targets' NMI hook (`idt::set_nmi_hook`), or
    /// fails the run where none is set; an INIT stops the targets: they wait
    /// for a start-up IPI in the INIT state (real mode at `F000:FFF0`) and
    /// run no payload code until one comes ([`Ipi::new_startup`]); an INIT
    /// level de-assert ([`Icr::init_deassert`]) does nothing (0 targets).
    pub fn new(icr: Icr) -> Result<Ipi, SendError> {
        match icr.delivery_mode() {
            Some(DeliveryMode::StartUp) => Err(SendError::Startup),
            _ => Self::checked(icr),
        }
    }

    /// As [`Ipi::new`] for a start-up IPI ([`Icr::startup`]): a target
    /// waiting for SIPI (after an INIT) starts in real mode at
    /// `CS:IP = (page << 8):0`, physical address `page << 12`.
    ///
    /// # Safety
    /// The page at `page << 12` must hold real-mode code the payload put
    /// there (free RAM below the payload, above the host's tables: see
    /// docs/guest-abi.md), and what that code does (it runs outside the SDK,
    /// with its own stack) must not break memory the payload still uses.
    pub unsafe fn new_startup(icr: Icr) -> Result<Ipi, SendError> {
        match icr.delivery_mode() {
            Some(DeliveryMode::StartUp) => Self::checked(icr),
            _ => Err(SendError::NotStartup),
        }
    }

    fn checked(icr: Icr) -> Result<Ipi, SendError> {
        icr.check(apic::mode()).map_err(SendError::Icr)?;
        match icr.delivery_mode() {
            Some(DeliveryMode::Smi) => return Err(SendError::Smi),
            Some(DeliveryMode::Fixed | DeliveryMode::LowestPriority) if icr.vector() < 32 => {
                return Err(SendError::ExceptionVector(icr.vector()))
            }
            _ => {}
        }
        Ok(Ipi {
            icr,
            targets: targets_of(icr),
        })
    }

    /// The command.
    pub fn icr(&self) -> Icr {
        self.icr
    }

    /// vCPUs it reaches (what each send adds to `ipis_sent`).
    pub fn targets(&self) -> u64 {
        self.targets
    }

    /// Writes the ICR once, counted. x2APIC writes are fenced first, as
    /// every SDK ICR write (`apic::X2Apic::write_icr`).
    #[inline(always)]
    pub fn send(&self) {
        count(1, self.targets);
        apic::current().write_icr(self.icr.dest(), self.icr.low());
    }
}

/// Checks, counts and sends `icr` once ([`Ipi::new`], then [`Ipi::send`]);
/// panics, naming the rule, if `icr` is refused. Counting a physical or
/// logical destination looks at every vCPU: in a loop, build the [`Ipi`]
/// once.
pub fn send(icr: Icr) {
    match Ipi::new(icr) {
        Ok(ipi) => ipi.send(),
        Err(e) => panic!("ipi::send({:#x}, dest {:#x}): {e}", icr.low(), icr.dest()),
    }
}

/// The vCPUs `icr` reaches if this vCPU writes it now
/// ([`ipivmm_abi::icr_targets`] with the VM's APIC IDs and the logical IDs
/// the vCPUs' `apic::setup_logical` programmed).
pub fn targets_of(icr: Icr) -> u64 {
    icr_targets(
        icr,
        apic::mode(),
        percpu::boot_info().vcpu_count as usize,
        percpu::current().vcpu as usize,
        apic_id_of,
        percpu::logical_of,
    )
}

/// Fixed IPI of `vector` to vCPU `v`, physical destination.
#[inline(always)]
pub fn send_physical(v: usize, vector: u8) {
    count(1, 1);
    apic::current().write_icr(apic_id_of(v), icr_low(vector, false, Shorthand::None));
}

/// Fixed IPI of `vector` with a destination shorthand (`targets` = number of
/// vCPUs it reaches, for the counters).
pub fn send_shorthand(shorthand: Shorthand, vector: u8, targets: u64) {
    count(1, targets);
    apic::current().write_icr(0, icr_low(vector, false, shorthand));
}

/// Wakes every other vCPU from a halting barrier: one all-but-self IPI on
/// the barrier vector, counted apart (`barrier_icr_writes`: it is not one
/// of the workload's IPIs, but the host sees its ICR write).
pub fn wake_barrier_waiters() {
    crate::percpu::bump(&crate::percpu::current().counters.barrier_icr_writes, 1);
    let vector = ipivmm_abi::barrier_vector(settings::ipi_vector());
    apic::current().write_icr(0, icr_low(vector, false, Shorthand::AllButSelf));
}

/// Fixed IPI of `vector` to logical destination `dest` (`targets` vCPUs).
pub fn send_logical(dest: u32, vector: u8, targets: u64) {
    count(1, targets);
    apic::current().write_icr(dest, icr_low(vector, true, Shorthand::None));
}

/// One `KVM_HC_SEND_IPI`. Returns the hypercall's result (IPIs delivered, or
/// a negative errno). `vmcall` on Intel, `vmmcall` on AMD/Hygon.
///
/// Never returns under the software `kvm_pvm` backend (the host refuses the
/// PV path there); only for hardware KVM hosts.
pub fn hypercall_send_ipi(call: &PvIpiCall, vector: u8) -> i64 {
    let icr = icr_low(vector, false, Shorthand::None) as u64;
    let ret: i64;
    // rbx is reserved by LLVM: swap the low bitmap half in and out around the
    // call. SAFETY: KVM_HC_SEND_IPI only reads rbx/rcx/rdx/rsi, writes rax,
    // and touches no guest memory.
    unsafe {
        if settings::is_amd() {
            asm!("xchg {lo}, rbx", "vmmcall", "xchg {lo}, rbx",
                lo = inout(reg) call.bitmap[0] => _,
                inout("rax") KVM_HC_SEND_IPI as i64 => ret,
                in("rcx") call.bitmap[1], in("rdx") call.min_apic_id as u64, in("rsi") icr,
                options(nostack));
        } else {
            asm!("xchg {lo}, rbx", "vmcall", "xchg {lo}, rbx",
                lo = inout(reg) call.bitmap[0] => _,
                inout("rax") KVM_HC_SEND_IPI as i64 => ret,
                in("rcx") call.bitmap[1], in("rdx") call.min_apic_id as u64, in("rsi") icr,
                options(nostack));
        }
    }
    ret
}

/// PV IPI of `vector` to `set`: one hypercall per 128-APIC-ID window.
/// Panics if KVM rejects a call.
pub fn send_pv(set: &VcpuSet, vector: u8) {
    let c = &percpu::current().counters;
    pv_ipi_calls(set.iter().map(apic_id_of), |call| {
        bump(&c.hypercalls, 1);
        bump(&c.ipis_sent, call.targets() as u64);
        let r = hypercall_send_ipi(&call, vector);
        assert!(
            r >= 0,
            "KVM_HC_SEND_IPI failed: {r} (min APIC ID {})",
            call.min_apic_id
        );
    });
}

/// How a [`Sender`] reaches a set of several targets over the ICR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Multicast {
    /// One physical ICR write per target.
    Physical,
    /// One logical ICR write per logical group where the targets' logical
    /// IDs allow it ([`for_each_logical_group`]: x2APIC, one per cluster;
    /// xAPIC flat, one for vCPUs 0..8; xAPIC cluster, one per cluster of
    /// 4), physical writes for the rest. Every target must have run
    /// [`Apic::setup_logical`] or [`apic::setup_logical`] (then a barrier).
    Logical,
}

/// Sends `vector` along the VM's IPI path (`BootInfo::ipi_path`).
#[derive(Clone, Copy, Debug)]
pub struct Sender {
    /// ICR or PV hypercall.
    pub path: IpiPath,
    /// The vector.
    pub vector: u8,
}

impl Sender {
    /// The VM's path and measured vector.
    pub fn from_boot() -> Self {
        Self {
            path: settings::ipi_path(),
            vector: settings::ipi_vector(),
        }
    }

    /// To vCPU `v`.
    #[inline(always)]
    pub fn unicast(&self, v: usize) {
        match self.path {
            IpiPath::Icr => send_physical(v, self.vector),
            IpiPath::Pv => {
                let mut s = VcpuSet::new();
                s.insert(v);
                send_pv(&s, self.vector);
            }
        }
    }

    /// To this vCPU (ICR shorthand "self").
    pub fn to_self(&self) {
        match self.path {
            IpiPath::Icr => send_shorthand(Shorthand::SelfOnly, self.vector, 1),
            IpiPath::Pv => self.unicast(percpu::current().vcpu as usize),
        }
    }

    /// To every other vCPU (ICR shorthand "all but self"; PV: bitmap).
    pub fn all_but_self(&self) {
        let me = percpu::current().vcpu as usize;
        let others = VcpuSet::all_but(me);
        match self.path {
            IpiPath::Icr => send_shorthand(Shorthand::AllButSelf, self.vector, others.len() as u64),
            IpiPath::Pv => send_pv(&others, self.vector),
        }
    }

    /// To an explicit set.
    pub fn multicast(&self, set: &VcpuSet, how: Multicast) {
        match (self.path, how) {
            (IpiPath::Pv, _) => send_pv(set, self.vector),
            (IpiPath::Icr, Multicast::Physical) => {
                set.iter().for_each(|v| send_physical(v, self.vector))
            }
            (IpiPath::Icr, Multicast::Logical) => self.multicast_logical(set),
        }
    }

    fn multicast_logical(&self, set: &VcpuSet) {
        let vector = self.vector;
        for_each_logical_group(
            set,
            |dest, n| send_logical(dest, vector, n),
            |v| send_physical(v, vector),
        );
    }
}

/// Splits `set` into the ICRs that reach it by logical destination: one
/// `logical(dest, members)` call per group of targets one ICR can address
/// (xAPIC flat: all of them; cluster models: one per cluster), with the OR
/// of their logical IDs; `physical(v)` for each target without a logical
/// ID (xAPIC: not set up, or no room in the model).
pub fn for_each_logical_group(
    set: &VcpuSet,
    mut logical: impl FnMut(u32, u64),
    mut physical: impl FnMut(usize),
) {
    let mut done = VcpuSet::new();
    for first in set.iter() {
        if done.contains(first) {
            continue;
        }
        let Some((model, lid)) = logical_model_id_of(first) else {
            physical(first);
            done.insert(first);
            continue;
        };
        let (mut dest, mut n) = (0u32, 0u64);
        for v in set.iter() {
            if done.contains(v) {
                continue;
            }
            if let Some((m, l)) = logical_model_id_of(v) {
                if m == model && m.group(l) == model.group(lid) {
                    dest |= l;
                    n += 1;
                    done.insert(v);
                }
            }
        }
        logical(dest, n);
    }
}

fn logical_model_id_of(v: usize) -> Option<(LogicalModel, u32)> {
    percpu::logical_of(v).filter(|&(_, id)| id != 0)
}

/// Logical ID of vCPU `v` as its `apic::setup_logical` programmed it
/// (x2APIC: always, from the APIC ID), or None.
pub fn logical_id_of(v: usize) -> Option<u32> {
    logical_model_id_of(v).map(|(_, id)| id)
}
