//! VMX and SVM exit reason names.
//!
//! The tables are the kernel's `VMX_EXIT_REASONS` (basic exit reasons,
//! `arch/x86/include/uapi/asm/vmx.h`) and `SVM_EXIT_REASONS`
//! (`arch/x86/include/uapi/asm/svm.h`) as of Linux 6.18, i.e. exactly the
//! names the `kvm:kvm_exit` tracepoint and `perf kvm stat` print: VMX names
//! upper case (`APIC_ACCESS`), SVM names lower case (`avic_incomplete_ipi`).
//! Codes that are not in a table have no name (`None`), e.g. reserved VMX
//! reasons 5, 6, 11, 17.

use serde::Serialize;

/// Virtualization ISA, numbered like the `isa` field of `kvm:kvm_exit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Isa {
    /// Intel VMX (`KVM_ISA_VMX` = 1).
    Vmx = 1,
    /// AMD SVM (`KVM_ISA_SVM` = 2).
    Svm = 2,
}

impl Isa {
    /// The exit-reason ISA of a KVM backend, if it has one (kvm_pvm and
    /// nested or unknown backends have none: `kvm_exit` does not fire).
    pub fn of_backend(backend: &ipivmm_host::facts::KvmBackend) -> Option<Self> {
        use ipivmm_host::facts::KvmBackend;
        match backend {
            KvmBackend::KvmIntel => Some(Self::Vmx),
            KvmBackend::KvmAmd => Some(Self::Svm),
            _ => None,
        }
    }

    /// The ISA for the `isa` field value of a `kvm_exit` event.
    pub fn from_tracepoint(isa: u32) -> Option<Self> {
        match isa {
            1 => Some(Self::Vmx),
            2 => Some(Self::Svm),
            _ => None,
        }
    }
}

/// Well-known VMX basic exit reasons that matter for IPIs.
pub mod vmx {
    /// VMCALL (PV IPI hypercall).
    pub const VMCALL: u32 = 18;
    /// WRMSR (x2APIC ICR write without IPIv).
    pub const MSR_WRITE: u32 = 32;
    /// Access to the APIC-access page (xAPIC without APICv).
    pub const APIC_ACCESS: u32 = 44;
    /// Trap-like APIC write (xAPIC ICR write with APICv).
    pub const APIC_WRITE: u32 = 56;
    /// HLT.
    pub const HLT: u32 = 12;
}

/// Well-known SVM exit codes that matter for IPIs.
pub mod svm {
    /// VMMCALL (PV IPI hypercall).
    pub const VMMCALL: u32 = 0x81;
    /// MSR access (x2APIC ICR write without x2AVIC).
    pub const MSR: u32 = 0x7c;
    /// HLT.
    pub const HLT: u32 = 0x78;
    /// Nested page fault (xAPIC MMIO without AVIC).
    pub const NPF: u32 = 0x400;
    /// AVIC could not deliver an IPI (target not running, invalid target).
    pub const AVIC_INCOMPLETE_IPI: u32 = 0x401;
    /// Access to an AVIC register that is not accelerated.
    pub const AVIC_UNACCELERATED_ACCESS: u32 = 0x402;
    /// SEV-ES VMGEXIT.
    pub const VMGEXIT: u32 = 0x403;
}

/// The name of exit reason `code` for `isa`, as the kernel prints it.
///
/// For VMX only the basic exit reason (low 16 bits) is looked up, as the
/// kernel does; the `FAILED_VMENTRY` bit and other high bits are ignored.
pub fn exit_reason_name(isa: Isa, code: u32) -> Option<&'static str> {
    let code = match isa {
        Isa::Vmx => code & 0xffff,
        Isa::Svm => code,
    };
    exit_reasons(isa)
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| *n)
}

/// All named exit reasons of `isa`, sorted by code.
pub fn exit_reasons(isa: Isa) -> &'static [(u32, &'static str)] {
    match isa {
        Isa::Vmx => VMX_EXIT_REASONS,
        Isa::Svm => SVM_EXIT_REASONS,
    }
}

/// The code of exit reason `name` for `isa` (exact, case-sensitive match).
pub fn exit_reason_code(isa: Isa, name: &str) -> Option<u32> {
    exit_reasons(isa)
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(c, _)| *c)
}

/// VMX basic exit reasons (`VMX_EXIT_REASONS`, Linux 6.18).
const VMX_EXIT_REASONS: &[(u32, &str)] = &[
    (0, "EXCEPTION_NMI"),
    (1, "EXTERNAL_INTERRUPT"),
    (2, "TRIPLE_FAULT"),
    (3, "INIT_SIGNAL"),
    (4, "SIPI_SIGNAL"),
    (7, "INTERRUPT_WINDOW"),
    (8, "NMI_WINDOW"),
    (9, "TASK_SWITCH"),
    (10, "CPUID"),
    (12, "HLT"),
    (13, "INVD"),
    (14, "INVLPG"),
    (15, "RDPMC"),
    (16, "RDTSC"),
    (18, "VMCALL"),
    (19, "VMCLEAR"),
    (20, "VMLAUNCH"),
    (21, "VMPTRLD"),
    (22, "VMPTRST"),
    (23, "VMREAD"),
    (24, "VMRESUME"),
    (25, "VMWRITE"),
    (26, "VMOFF"),
    (27, "VMON"),
    (28, "CR_ACCESS"),
    (29, "DR_ACCESS"),
    (30, "IO_INSTRUCTION"),
    (31, "MSR_READ"),
    (32, "MSR_WRITE"),
    (33, "INVALID_STATE"),
    (34, "MSR_LOAD_FAIL"),
    (36, "MWAIT_INSTRUCTION"),
    (37, "MONITOR_TRAP_FLAG"),
    (39, "MONITOR_INSTRUCTION"),
    (40, "PAUSE_INSTRUCTION"),
    (41, "MCE_DURING_VMENTRY"),
    (43, "TPR_BELOW_THRESHOLD"),
    (44, "APIC_ACCESS"),
    (45, "EOI_INDUCED"),
    (46, "GDTR_IDTR"),
    (47, "LDTR_TR"),
    (48, "EPT_VIOLATION"),
    (49, "EPT_MISCONFIG"),
    (50, "INVEPT"),
    (51, "RDTSCP"),
    (52, "PREEMPTION_TIMER"),
    (53, "INVVPID"),
    (54, "WBINVD"),
    (55, "XSETBV"),
    (56, "APIC_WRITE"),
    (57, "RDRAND"),
    (58, "INVPCID"),
    (59, "VMFUNC"),
    (60, "ENCLS"),
    (61, "RDSEED"),
    (62, "PML_FULL"),
    (63, "XSAVES"),
    (64, "XRSTORS"),
    (67, "UMWAIT"),
    (68, "TPAUSE"),
    (74, "BUS_LOCK"),
    (75, "NOTIFY"),
    (77, "TDCALL"),
    (84, "MSR_READ_IMM"),
    (85, "MSR_WRITE_IMM"),
];

/// SVM exit codes (`SVM_EXIT_REASONS`, Linux 6.18).
const SVM_EXIT_REASONS: &[(u32, &str)] = &[
    (0x0, "read_cr0"),
    (0x2, "read_cr2"),
    (0x3, "read_cr3"),
    (0x4, "read_cr4"),
    (0x8, "read_cr8"),
    (0x10, "write_cr0"),
    (0x12, "write_cr2"),
    (0x13, "write_cr3"),
    (0x14, "write_cr4"),
    (0x18, "write_cr8"),
    (0x20, "read_dr0"),
    (0x21, "read_dr1"),
    (0x22, "read_dr2"),
    (0x23, "read_dr3"),
    (0x24, "read_dr4"),
    (0x25, "read_dr5"),
    (0x26, "read_dr6"),
    (0x27, "read_dr7"),
    (0x30, "write_dr0"),
    (0x31, "write_dr1"),
    (0x32, "write_dr2"),
    (0x33, "write_dr3"),
    (0x34, "write_dr4"),
    (0x35, "write_dr5"),
    (0x36, "write_dr6"),
    (0x37, "write_dr7"),
    (0x40, "DE excp"),
    (0x41, "DB excp"),
    (0x43, "BP excp"),
    (0x44, "OF excp"),
    (0x45, "BR excp"),
    (0x46, "UD excp"),
    (0x47, "NM excp"),
    (0x48, "DF excp"),
    (0x4a, "TS excp"),
    (0x4b, "NP excp"),
    (0x4c, "SS excp"),
    (0x4d, "GP excp"),
    (0x4e, "PF excp"),
    (0x50, "MF excp"),
    (0x51, "AC excp"),
    (0x52, "MC excp"),
    (0x53, "XF excp"),
    (0x60, "interrupt"),
    (0x61, "nmi"),
    (0x62, "smi"),
    (0x63, "init"),
    (0x64, "vintr"),
    (0x65, "cr0_sel_write"),
    (0x66, "read_idtr"),
    (0x67, "read_gdtr"),
    (0x68, "read_ldtr"),
    (0x69, "read_rt"),
    (0x6a, "write_idtr"),
    (0x6b, "write_gdtr"),
    (0x6c, "write_ldtr"),
    (0x6d, "write_rt"),
    (0x6e, "rdtsc"),
    (0x6f, "rdpmc"),
    (0x70, "pushf"),
    (0x71, "popf"),
    (0x72, "cpuid"),
    (0x73, "rsm"),
    (0x74, "iret"),
    (0x75, "swint"),
    (0x76, "invd"),
    (0x77, "pause"),
    (0x78, "hlt"),
    (0x79, "invlpg"),
    (0x7a, "invlpga"),
    (0x7b, "io"),
    (0x7c, "msr"),
    (0x7d, "task_switch"),
    (0x7e, "ferr_freeze"),
    (0x7f, "shutdown"),
    (0x80, "vmrun"),
    (0x81, "hypercall"),
    (0x82, "vmload"),
    (0x83, "vmsave"),
    (0x84, "stgi"),
    (0x85, "clgi"),
    (0x86, "skinit"),
    (0x87, "rdtscp"),
    (0x88, "icebp"),
    (0x89, "wbinvd"),
    (0x8a, "monitor"),
    (0x8b, "mwait"),
    (0x8d, "xsetbv"),
    (0x8f, "write_efer_trap"),
    (0x90, "write_cr0_trap"),
    (0x94, "write_cr4_trap"),
    (0x98, "write_cr8_trap"),
    (0xa2, "invpcid"),
    (0xa5, "buslock"),
    (0xa6, "idle-halt"),
    (0x400, "npf"),
    (0x401, "avic_incomplete_ipi"),
    (0x402, "avic_unaccelerated_access"),
    (0x403, "vmgexit"),
    (0x80000001, "vmgexit_mmio_read"),
    (0x80000002, "vmgexit_mmio_write"),
    (0x80000003, "vmgexit_nmi_complete"),
    (0x80000004, "vmgexit_ap_hlt_loop"),
    (0x80000005, "vmgexit_ap_jump_table"),
    (0x80000010, "vmgexit_page_state_change"),
    (0x80000011, "vmgexit_guest_request"),
    (0x80000012, "vmgexit_ext_guest_request"),
    (0x80000013, "vmgexit_ap_creation"),
    (0x8000fffd, "vmgexit_hypervisor_feature"),
    (0xffffffff, "invalid_guest_state"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipi_relevant_vmx_names() {
        assert_eq!(
            exit_reason_name(Isa::Vmx, vmx::APIC_ACCESS),
            Some("APIC_ACCESS")
        );
        assert_eq!(
            exit_reason_name(Isa::Vmx, vmx::APIC_WRITE),
            Some("APIC_WRITE")
        );
        assert_eq!(
            exit_reason_name(Isa::Vmx, vmx::MSR_WRITE),
            Some("MSR_WRITE")
        );
        assert_eq!(exit_reason_name(Isa::Vmx, vmx::VMCALL), Some("VMCALL"));
        assert_eq!(exit_reason_name(Isa::Vmx, vmx::HLT), Some("HLT"));
        assert_eq!(exit_reason_name(Isa::Vmx, 48), Some("EPT_VIOLATION"));
        assert_eq!(exit_reason_name(Isa::Vmx, 77), Some("TDCALL"));
        // Failed VM-entry bit is ignored, reserved codes have no name.
        assert_eq!(
            exit_reason_name(Isa::Vmx, 0x8000_0021),
            Some("INVALID_STATE")
        );
        assert_eq!(exit_reason_name(Isa::Vmx, 5), None);
        assert_eq!(exit_reason_name(Isa::Vmx, 11), None);
        assert_eq!(exit_reason_name(Isa::Vmx, 1000), None);
    }

    #[test]
    fn ipi_relevant_svm_names() {
        assert_eq!(exit_reason_name(Isa::Svm, svm::NPF), Some("npf"));
        assert_eq!(
            exit_reason_name(Isa::Svm, svm::AVIC_INCOMPLETE_IPI),
            Some("avic_incomplete_ipi")
        );
        assert_eq!(
            exit_reason_name(Isa::Svm, svm::AVIC_UNACCELERATED_ACCESS),
            Some("avic_unaccelerated_access")
        );
        assert_eq!(exit_reason_name(Isa::Svm, svm::VMGEXIT), Some("vmgexit"));
        assert_eq!(exit_reason_name(Isa::Svm, svm::VMMCALL), Some("hypercall"));
        assert_eq!(exit_reason_name(Isa::Svm, svm::MSR), Some("msr"));
        assert_eq!(exit_reason_name(Isa::Svm, svm::HLT), Some("hlt"));
        assert_eq!(exit_reason_name(Isa::Svm, 0x40 + 14), Some("PF excp"));
        assert_eq!(
            exit_reason_name(Isa::Svm, u32::MAX),
            Some("invalid_guest_state")
        );
        // SVM codes are not masked: 0x10400 is not npf.
        assert_eq!(exit_reason_name(Isa::Svm, 0x1_0400), None);
    }

    #[test]
    fn tables_are_sorted_unique_and_round_trip() {
        for isa in [Isa::Vmx, Isa::Svm] {
            let t = exit_reasons(isa);
            assert!(t.windows(2).all(|w| w[0].0 < w[1].0), "{isa:?} not sorted");
            let mut names: Vec<_> = t.iter().map(|(_, n)| *n).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), t.len(), "{isa:?} has duplicate names");
            for (c, n) in t {
                assert_eq!(exit_reason_code(isa, n), Some(*c));
            }
        }
        assert_eq!(exit_reasons(Isa::Vmx).len(), 65);
        assert_eq!(exit_reasons(Isa::Svm).len(), 110);
    }

    #[test]
    fn isa_matches_tracepoint_numbering() {
        assert_eq!(Isa::from_tracepoint(1), Some(Isa::Vmx));
        assert_eq!(Isa::from_tracepoint(2), Some(Isa::Svm));
        assert_eq!(Isa::from_tracepoint(0), None);
        assert_eq!(Isa::Vmx as u32, 1);
        assert_eq!(Isa::Svm as u32, 2);
    }
}
