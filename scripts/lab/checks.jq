# The lab's checks over ipivmm.results/1 documents (scripts/lab/verify.sh).
# Each yields one line per offence; nothing means the check passed.

def runlabel: "\(.mode.workload) \(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi) apicv=\(.apicv.requested)";
def measured: .phases[] | select(.name == "measure");
def exit_reasons: .tracepoints | to_entries | map(select(.key | startswith("kvm_exit:")));

def failed_runs:
  .runs[] | select(.status.state != "completed")
  | "\(runlabel): \(.status.state) \(.status.reason // .status.stuck // "")";

# Combinations no KVM can run, and rows a host without APICv makes identical.
def unexpected_skips:
  .skipped[]
  | select(.reason | test("LAPIC in KVM|needs an in-kernel PIT|already inhibited|needs at least|identical to") | not)
  | "\(.mode): \(.reason)";

def missing_exit_reasons:
  .runs[] as $r | $r.vcpus[] | measured
  | select((exit_reasons | map(.value) | add // 0) == 0)
  | "\($r | runlabel) vcpu phase \(.name): no kvm_exit reason counted";

def icr_exit_mismatch:
  .runs[] | select(.mode.ipi == "icr") as $r | $r.vcpus[] as $v | $v | measured
  | select(.guest.icr_writes > 0 and (.icr_write_exits.exits // -1) != .guest.icr_writes)
  | "\($r | runlabel) vcpu\($v.index): \(.guest.icr_writes) ICR writes, \(.icr_write_exits.exits // "no") ICR-write exits (\(.icr_write_exits.source // "-"))";

def pv_mismatch:
  .runs[] | select(.mode.ipi == "pv") as $r | $r.vcpus[] as $v | $v | measured
  | select(.guest.hypercalls > 0)
  | ((.tracepoints["kvm_exit:hypercall"] // .tracepoints["kvm_exit:VMCALL"] // -1)) as $hc
  | select($hc != .guest.hypercalls or (.icr_write_exits.exits // 0) != 0 or (.icr_write_exits.accelerated // 0) != 0)
  | "\($r | runlabel) vcpu\($v.index): \(.guest.hypercalls) hypercalls, \($hc) hypercall exits, ICR-write exits \(.icr_write_exits.exits // "-"), accelerated \(.icr_write_exits.accelerated // "-")";

# Flood IPIs may coalesce in the IRR by design; every other workload delivers each one.
def lost_ipis:
  .runs[] | select(.mode.workload != "flood")
  | [.vcpus[].phases[].guest] as $g
  | ($g | map(.ipis_sent) | add // 0) as $sent | ($g | map(.ipis_received) | add // 0) as $recv
  | select($sent != $recv)
  | "\(runlabel): \($sent) IPIs sent, \($recv) received";
