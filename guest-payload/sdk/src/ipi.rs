//! Counted IPI sends by vCPU index, over the ICR ([`crate::apic`]) or the KVM
//! PV IPI hypercall. Every send updates this vCPU's counters: `icr_writes`
//! +1 per ICR write, `hypercalls` +1 per hypercall (a PV IPI writes no ICR:
//! counting it there made the host report it as an accelerated ICR write),
//! `ipis_sent` + number of target vCPUs.

use crate::apic::{self, Apic};
use crate::percpu::{self, bump};
use crate::runtime;
use core::arch::asm;
use ipivmm_abi::{
    icr_low, pv_ipi_calls, IpiPath, PvIpiCall, Shorthand, KVM_HC_SEND_IPI, MAX_VCPUS,
};

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
        (0..MAX_VCPUS).filter(|v| self.contains(*v))
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
    let vector = ipivmm_abi::barrier_vector(runtime::ipi_vector());
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
        if runtime::is_amd() {
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
    /// IDs allow it (x2APIC cluster; xAPIC flat, vCPUs 0..8), physical
    /// writes for the rest. Every target must have run
    /// [`Apic::setup_logical`].
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
            path: runtime::ipi_path(),
            vector: runtime::ipi_vector(),
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
        // Group targets by the high half of their logical ID (x2APIC cluster;
        // always 0 in xAPIC flat mode) and OR the low halves.
        let mut done = VcpuSet::new();
        for first in set.iter() {
            if done.contains(first) {
                continue;
            }
            let Some(lid) = logical_id_of(first) else {
                send_physical(first, self.vector);
                done.insert(first);
                continue;
            };
            let (mut dest, mut n) = (lid, 0u64);
            for v in set.iter() {
                if done.contains(v) {
                    continue;
                }
                if let Some(l) = logical_id_of(v) {
                    if l >> 16 == lid >> 16 {
                        dest |= l;
                        n += 1;
                        done.insert(v);
                    }
                }
            }
            send_logical(dest, self.vector, n);
        }
    }
}

/// Logical ID of vCPU `v` as [`Apic::setup_logical`] programs it.
pub fn logical_id_of(v: usize) -> Option<u32> {
    match apic::mode() {
        ipivmm_abi::ApicMode::X2apic => Some(ipivmm_abi::x2apic_logical_id(apic_id_of(v))),
        ipivmm_abi::ApicMode::Xapic => (v < 8).then_some(1 << v),
    }
}
