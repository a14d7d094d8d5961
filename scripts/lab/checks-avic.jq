# The AVIC pass's checks (scripts/lab/verify-avic.sh) over ipivmm.results/1
# sweep documents, beside scripts/lab/checks.jq (included for its helpers).
# Each yields one line per offence; nothing means the check passed.
include "checks";

def in_kernel_lapic: .mode.irqchip == "kernel" or .mode.irqchip == "split";
def sender_phases: .vcpus[0] | measured;
def writes: .guest.icr_writes + (.guest.barrier_icr_writes // 0);
def tp($name): .tracepoints[$name] // 0;

# With avic=1 every in-kernel-LAPIC run asking for the host's setting has
# AVIC active for the whole measured phase; --apicv inhibit runs are inhibited.
def avic_on_mismatch:
  .runs[] | select(in_kernel_lapic) as $r
  | if $r.apicv.requested == "host" then
      (select($r.apicv.effective != "active") | "\($r | runlabel): AVIC \($r.apicv.effective) (\($r.apicv.detail // ""))"),
      ($r.vcpus[] as $v | $v | measured | select((.apicv.active // false) | not)
       | "\($r | runlabel) vcpu\($v.index): AVIC not active in the measured phase (\(.apicv.inhibits // "-"))")
    else
      select($r.apicv.effective != "inhibited") | "\($r | runlabel): --apicv inhibit gave \($r.apicv.effective)"
    end;

# With avic=0 nothing is active.
def avic_off_mismatch:
  .runs[] | select(.apicv.effective != "unavailable") | "\(runlabel): APICv \(.apicv.effective) with avic=0";

# ipivmm's ICR-write exits (kvm_apic:icr_write + kvm_avic_incomplete_ipi -
# kvm_avic_incomplete_ipi:busy) against the exits KVM took by reason: with
# AVIC, xAPIC ICR writes exit only as AVIC_INCOMPLETE_IPI (0x401), the rest
# are accelerated; x2APIC ICR writes are intercepted WRMSRs (hybrid AVIC: no
# x2AVIC), every one an exit.
def icr_accounting_mismatch:
  .runs[] | select(.apicv.effective == "active" and .mode.ipi == "icr") as $r
  | $r.vcpus[] as $v | $v | measured | select(.guest.icr_writes > 0)
  | writes as $w | (.icr_write_exits.exits // -1) as $x | (.icr_write_exits.accelerated // -1) as $a
  | reason_count(["avic_incomplete_ipi"]) as $b
  | if $r.mode.apic == "xapic" then
      select($x != $b or $a != $w - $x or tp("kvm_avic_incomplete_ipi") != $b)
      | "\($r | runlabel) vcpu\($v.index): \($w) ICR writes, ICR-write exits \($x), accelerated \($a), avic_incomplete_ipi exits \($b) (tracepoint \(tp("kvm_avic_incomplete_ipi")))"
    else
      select($x != $w or $a != 0 or reason_count(["msr"]) < $w)
      | "\($r | runlabel) vcpu\($v.index): \($w) ICR writes, ICR-write exits \($x), accelerated \($a), msr exits \(reason_count(["msr"]))"
    end;

# docs/kernel-paths.md A7: a fixed IPI to a running target (2 vCPUs on the 2
# emulated CPUs, spinning) is delivered by the emulated AVIC without an exit.
def a7_mismatch:
  .runs[] | select(.apicv.effective == "active" and .mode.apic == "xapic" and .mode.ipi == "icr"
                   and .mode.workload == "pingpong" and .mode.target == "spin") as $r
  | $r | sender_phases | select(.icr_write_exits.accelerated == 0)
  | "\($r | runlabel): no ICR write accelerated (\(.icr_write_exits.exits) exits of \(writes))";

# A8: an IPI to a halted (IsRunning=0) target exits as AVIC_INCOMPLETE_IPI
# after the IRR is set: KVM only wakes the target, so the sender traces
# neither kvm_apic (no ICR emulation) nor kvm_apic_ipi.
def a8_mismatch:
  .runs[] | select(.apicv.effective == "active" and .mode.apic == "xapic" and .mode.ipi == "icr"
                   and .mode.workload == "pingpong" and .mode.target == "halt") as $r
  | $r | sender_phases
  | select(reason_count(["avic_incomplete_ipi"]) < .guest.icr_writes or tp("kvm_apic_ipi") != 0
           or tp("kvm_apic:icr_write") != 0)
  | "\($r | runlabel): \(.guest.icr_writes) ICR writes to a halted target, \(reason_count(["avic_incomplete_ipi"])) avic_incomplete_ipi exits, kvm_apic_ipi \(tp("kvm_apic_ipi")), kvm_apic:icr_write \(tp("kvm_apic:icr_write"))";

# A5: hybrid AVIC (x2APIC without x2AVIC): the ICR WRMSR exits, KVM delivers
# every IPI through the backing page (kvm_apicv_accept_irq).
def a5_mismatch:
  .runs[] | select(.apicv.effective == "active" and .mode.apic == "x2apic" and .mode.ipi == "icr") as $r
  | $r | sender_phases
  # only where the run traced it (--context-events; the preset does not)
  | select(.tracepoints | has("kvm_apicv_accept_irq"))
  | select(tp("kvm_apicv_accept_irq") < .guest.ipis_sent)
  | "\($r | runlabel): \(.guest.ipis_sent) IPIs sent, kvm_apicv_accept_irq \(tp("kvm_apicv_accept_irq"))";

# One line per AVIC-active xAPIC run: how its ICR writes went.
def avic_summary:
  .runs[] | select(.apicv.effective == "active" and .mode.ipi == "icr") as $r
  | $r | sender_phases
  | "\($r | runlabel) \($r.mode.vcpus)v \($r.mode.target): \(writes) ICR writes, \(.icr_write_exits.exits) exits, \(.icr_write_exits.accelerated) accelerated; avic_incomplete_ipi \(reason_count(["avic_incomplete_ipi"])), avic_unaccelerated_access \(reason_count(["avic_unaccelerated_access"])), doorbells \(tp("kvm_avic_doorbell")), kvm_apicv_accept_irq \(tp("kvm_apicv_accept_irq"))";
