//! `format` files of `kvm_exit`, `kvm_entry` and `kvm_apicv_inhibit_changed`
//! as Linux 6.1, 6.12 and 6.18 show them.
//!
//! 6.18: read from this host's tracefs (`counters/testdata/*.format`).
//!
//! 6.1 and 6.12: no pristine tree was at hand, so these are constructed from
//! the `TRACE_EVENT` definitions in `arch/x86/kvm/trace.h` the way ftrace
//! lays them out (`struct trace_entry` = 8 bytes of `common_*` fields, then
//! the `TP_STRUCT__entry` fields at their natural alignment), and cross-checked
//! against the 6.18 files, whose shared fields sit at the same offsets:
//! - `kvm_exit` (`TRACE_EVENT_KVM_EXIT`): exit_reason, guest_rip, isa, info1,
//!   info2, intr_info, error_code, vcpu_id in both 6.1 and 6.12; `requests`
//!   (offset 64) was added by "KVM: x86: add information about pending
//!   requests to kvm_exit tracepoint" (Maxim Levitsky, v5 2024-09-10, applied
//!   by Sean Christopherson to kvm-x86 misc on 2024-12-18, i.e. 6.14).
//! - `kvm_entry`: 6.1 has vcpu_id, rip; `immediate_exit` (bool, offset 24)
//!   came with "KVM: x86: Plumb force_immediate_exit into kvm_entry()
//!   tracepoint" (posted 2023-12, merged for 6.9; already in the base of the
//!   2024-12 patch below), so 6.12 has it; `intr_info` and
//!   `error_code` (offsets 28, 32) came in 6.14 with the patch above's 1/3.
//! - `kvm_apicv_inhibit_changed`: `int reason; bool set; unsigned long
//!   inhibits` since 5.18. 6.1 prints `"%s reason=%u, inhibits=0x%lx"`;
//!   "KVM: x86: Print names of apicv inhibit reasons in traces" (Alejandro
//!   Jimenez, v2 2024-05-06, 6.11) appends `__print_flags(inhibits, "|",
//!   APICV_INHIBIT_REASONS)`; the 6.12 list below is that patch's list with
//!   the later DISABLE→DISABLED spelling (entry 0's exact 6.12 spelling is
//!   not verified; decoding does not depend on it).
//!
//! The print fmt of `kvm_exit` is abbreviated: decoding never reads it.
//! IDs are per boot; these are arbitrary but distinct.

/// 6.1 `kvm:kvm_exit` (constructed, see above).
pub const KVM_EXIT_6_1: &str = "name: kvm_exit
ID: 1201
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned long guest_rip;\toffset:16;\tsize:8;\tsigned:0;
\tfield:u32 isa;\toffset:24;\tsize:4;\tsigned:0;
\tfield:u64 info1;\toffset:32;\tsize:8;\tsigned:0;
\tfield:u64 info2;\toffset:40;\tsize:8;\tsigned:0;
\tfield:u32 intr_info;\toffset:48;\tsize:4;\tsigned:0;
\tfield:u32 error_code;\toffset:52;\tsize:4;\tsigned:0;
\tfield:unsigned int vcpu_id;\toffset:56;\tsize:4;\tsigned:0;

print fmt: \"vcpu %u reason %s%s%s rip 0x%lx info1 0x%016llx info2 0x%016llx intr_info 0x%08x error_code 0x%08x\", REC->vcpu_id, (abbreviated)
";

/// 6.12 `kvm:kvm_exit`: same fields and offsets as 6.1 (constructed).
pub const KVM_EXIT_6_12: &str = "name: kvm_exit
ID: 1301
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned int exit_reason;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned long guest_rip;\toffset:16;\tsize:8;\tsigned:0;
\tfield:u32 isa;\toffset:24;\tsize:4;\tsigned:0;
\tfield:u64 info1;\toffset:32;\tsize:8;\tsigned:0;
\tfield:u64 info2;\toffset:40;\tsize:8;\tsigned:0;
\tfield:u32 intr_info;\toffset:48;\tsize:4;\tsigned:0;
\tfield:u32 error_code;\toffset:52;\tsize:4;\tsigned:0;
\tfield:unsigned int vcpu_id;\toffset:56;\tsize:4;\tsigned:0;

print fmt: \"vcpu %u reason %s%s%s rip 0x%lx info1 0x%016llx info2 0x%016llx intr_info 0x%08x error_code 0x%08x\", REC->vcpu_id, (abbreviated)
";

/// 6.18 `kvm:kvm_exit` (this host).
pub const KVM_EXIT_6_18: &str = include_str!("../../../testdata/kvm_exit.format");

/// 6.1 `kvm:kvm_entry` (constructed).
pub const KVM_ENTRY_6_1: &str = "name: kvm_entry
ID: 1202
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned int vcpu_id;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned long rip;\toffset:16;\tsize:8;\tsigned:0;

print fmt: \"vcpu %u, rip 0x%lx\", REC->vcpu_id, REC->rip
";

/// 6.12 `kvm:kvm_entry` (constructed).
pub const KVM_ENTRY_6_12: &str = "name: kvm_entry
ID: 1302
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned int vcpu_id;\toffset:8;\tsize:4;\tsigned:0;
\tfield:unsigned long rip;\toffset:16;\tsize:8;\tsigned:0;
\tfield:bool immediate_exit;\toffset:24;\tsize:1;\tsigned:0;

print fmt: \"vcpu %u, rip 0x%lx%s\", REC->vcpu_id, REC->rip, REC->immediate_exit ? \"[immediate exit]\" : \"\"
";

/// 6.18 `kvm:kvm_entry` (this host).
pub const KVM_ENTRY_6_18: &str = include_str!("../../../testdata/kvm_entry.format");

/// 6.1 `kvm:kvm_apicv_inhibit_changed` (constructed).
pub const INHIBIT_6_1: &str = "name: kvm_apicv_inhibit_changed
ID: 1203
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;
\tfield:bool set;\toffset:12;\tsize:1;\tsigned:0;
\tfield:unsigned long inhibits;\toffset:16;\tsize:8;\tsigned:0;

print fmt: \"%s reason=%u, inhibits=0x%lx\", REC->set ? \"set\" : \"cleared\", REC->reason, REC->inhibits
";

/// 6.12 `kvm:kvm_apicv_inhibit_changed` (constructed).
pub const INHIBIT_6_12: &str = "name: kvm_apicv_inhibit_changed
ID: 1303
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int reason;\toffset:8;\tsize:4;\tsigned:1;
\tfield:bool set;\toffset:12;\tsize:1;\tsigned:0;
\tfield:unsigned long inhibits;\toffset:16;\tsize:8;\tsigned:0;

print fmt: \"%s reason=%u, inhibits=0x%lx%s%s\", REC->set ? \"set\" : \"cleared\", REC->reason, (REC->inhibits), (REC->inhibits) ? \" \" : \"\", (REC->inhibits) ? __print_flags(REC->inhibits, \"|\", { ((((1UL))) << (APICV_INHIBIT_REASON_DISABLED)), \"DISABLED\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_HYPERV)), \"HYPERV\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_ABSENT)), \"ABSENT\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_BLOCKIRQ)), \"BLOCKIRQ\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_PHYSICAL_ID_ALIASED)), \"PHYSICAL_ID_ALIASED\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_APIC_ID_MODIFIED)), \"APIC_ID_MODIFIED\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_APIC_BASE_MODIFIED)), \"APIC_BASE_MODIFIED\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_NESTED)), \"NESTED\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_IRQWIN)), \"IRQWIN\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_PIT_REINJ)), \"PIT_REINJ\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_SEV)), \"SEV\" }, { ((((1UL))) << (APICV_INHIBIT_REASON_LOGICAL_ID_ALIASED)), \"LOGICAL_ID_ALIASED\" }) : \"\"
";

/// 6.18 `kvm:kvm_apicv_inhibit_changed` (this host).
pub const INHIBIT_6_18: &str = include_str!("../../../testdata/kvm_apicv_inhibit_changed.format");
