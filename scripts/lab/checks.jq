# The lab's checks over ipivmm.results/1 documents (scripts/lab/verify.sh).
# Each yields one line per offence; nothing means the check passed.

def runlabel: "\(.mode.workload) \(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi) apicv=\(.apicv.requested)";
def measured: .phases[] | select(.name == "measure");
# Exits by reason: the exit sampler's, else the per-reason kvm_exit counters.
def exit_reasons:
  if .exit_reasons then .exit_reasons.by_reason | to_entries | map({key, value: .value.count})
  else .tracepoints | to_entries | map(select(.key | startswith("kvm_exit:")) | {key: (.key | ltrimstr("kvm_exit:")), value})
  end;
def reason_count($names): [exit_reasons[] | select(.key as $k | $names | index($k)) | .value] | add // 0;

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
  | (.guest.icr_writes + (.guest.barrier_icr_writes // 0)) as $writes
  | select(.guest.icr_writes > 0 and (.icr_write_exits.exits // -1) != $writes)
  | "\($r | runlabel) vcpu\($v.index): \($writes) ICR writes (halting barriers included), \(.icr_write_exits.exits // "no") ICR-write exits (\(.icr_write_exits.source // "-"))";

def pv_mismatch:
  .runs[] | select(.mode.ipi == "pv") as $r | $r.vcpus[] as $v | $v | measured
  | select(.guest.hypercalls > 0)
  | reason_count(["hypercall", "VMCALL"]) as $hc
  | select($hc != .guest.hypercalls or (.icr_write_exits.exits // 0) != 0 or (.icr_write_exits.accelerated // 0) != 0)
  | "\($r | runlabel) vcpu\($v.index): \(.guest.hypercalls) hypercalls, \($hc) hypercall exits, ICR-write exits \(.icr_write_exits.exits // "-"), accelerated \(.icr_write_exits.accelerated // "-")";

# The headline metrics (runs[].metrics) against what the workload must
# give: a broadcast delivers N-1 IPIs per operation, a round trip one; one
# ICR-write exit per operation on the ICR path unless APICv is active,
# none on the PV path; exits per operation = exits per IPI x the fan-out.
def metrics_mismatch:
  .runs[] | select(.mode.workload == "broadcast" or .mode.workload == "pingpong") as $r
  | select($r.status.state == "completed")
  | (if $r.mode.workload == "broadcast" then $r.mode.vcpus - 1 else 1 end) as $fan
  | (if $r.mode.ipi == "pv" then 0 elif $r.apicv.effective == "active" then null else 1 end) as $icr
  | $r.metrics as $m
  | select(($m.ipis_per_operation // -1) != $fan
      or ($icr != null and (($m.icr_write_exits_per_operation // $icr) - $icr | fabs) > 1e-9)
      or ((($m.exits_per_operation // 0) - ($m.exits_per_ipi // 0) * $fan) | fabs) > 1e-6)
  | "\($r | runlabel): \($m.ipis_per_operation) IPIs per \($m.operation) (want \($fan)), \($m.icr_write_exits_per_operation) ICR-write exits per operation (want \($icr)), exits/op \($m.exits_per_operation) vs exits/IPI \($m.exits_per_ipi)";

# Flood IPIs may coalesce in the IRR by design; every other workload delivers each one.
def lost_ipis:
  .runs[] | select(.mode.workload != "flood")
  | [.vcpus[].phases[].guest] as $g
  | ($g | map(.ipis_sent) | add // 0) as $sent | ($g | map(.ipis_received) | add // 0) as $recv
  | select($sent != $recv)
  | "\(runlabel): \($sent) IPIs sent, \($recv) received";

# Three counts of the same exits over the same window: the sampler's
# (plus what it reported lost), the kvm_exit counter and KVM's exits stat.
def sampled_exit_mismatch:
  .runs[] as $r | $r.vcpus[] as $v | $v | measured
  | select(.exit_reasons)
  | (.exit_reasons.exits + .exit_reasons.lost) as $sampled
  | select($sampled != .kvm_stats.exits or (.tracepoints.kvm_exit // $sampled) != .kvm_stats.exits)
  | "\($r | runlabel) vcpu\($v.index): sampled \(.exit_reasons.exits) (+\(.exit_reasons.lost) lost), kvm_exit \(.tracepoints.kvm_exit // "-"), KVM exits \(.kvm_stats.exits)";

# sweep --host-param kvm_amd.npt=1,0: both settings ran, every run records
# the host as it was, and the parameter reads back as the stage asked.
def truth: if test("^(Y|y|1)$") then true elif test("^(N|n|0)$") then false else . end;
def host_param_sweep:
  ([.runs[].host_param] | unique) as $p
  | if $p != ["kvm_amd.npt=0", "kvm_amd.npt=1"] then "settings swept: \($p)" else empty end,
    (.runs[] | select(.host_settings == null) | "\(runlabel): no host_settings"),
    (.runs[] | select(.host_param != null)
     | (.host_param | capture("^(?<m>[^.]+)\\.(?<p>[^=]+)=(?<v>.*)$")) as $s
     | (.host_settings.params[$s.m][$s.p] // "missing") as $got
     | select(($s.v | truth) != ($got | truth))
     | "\(runlabel) under \(.host_param): reads back \($got)");

# The kernel's own inhibit events agree with the host verdict: without
# APICv/AVIC every run is DISABLED from creation and no phase is active; with
# it, an inhibit lever shows its reason set and its phases are not active.
def apicv_observed_mismatch:
  .runs[] | . as $r
  | if .apicv_observed == null then "\(runlabel): no APICv inhibit events sampled"
    elif .apicv.effective == "unavailable" then
      (select(.apicv_observed.inhibits_at_end | index("DISABLED") | not)
       | "\(runlabel): APICv unavailable but not DISABLED at the end (\(.apicv_observed.inhibits_at_end))"),
      (.vcpus[].phases[] | select(.apicv.active) | "\($r | runlabel) phase \(.name): APICv active without APICv")
    else
      (select(.apicv_observed.lever != null and (.apicv_observed.lever.observed | not))
       | "\(runlabel): lever \(.apicv_observed.lever.reason) never set")
    end;

# An exit flood: what the sampler lost is reported (complete: false when
# any), and its count never exceeds KVM's exits stat.
def flood_lost_mismatch:
  .runs[] as $r | $r.vcpus[] as $v | $v | measured
  | select(.exit_reasons)
  | select(((.exit_reasons.lost > 0 or .exit_reasons.missing > 0) and .exit_reasons.complete)
      or .exit_reasons.exits + .exit_reasons.missing != .kvm_stats.exits)
  | "\($r | runlabel) vcpu\($v.index): sampled \(.exit_reasons.exits), lost \(.exit_reasons.lost), missing \(.exit_reasons.missing), complete \(.exit_reasons.complete), KVM exits \(.kvm_stats.exits)";

# One line per vCPU: what the flood's sampler saw and lost.
def flood_summary:
  .runs[] | .vcpus[] as $v | $v | measured | select(.exit_reasons)
  | "vcpu\($v.index): \(.kvm_stats.exits) exits, \(.exit_reasons.exits) sampled, \(.exit_reasons.lost) records reported lost, \(.exit_reasons.missing) missing by KVM's stat, complete=\(.exit_reasons.complete)";

# Overhead runs that did not complete, and runs of their pairs that failed.
def overhead_failures:
  (.runs[] | select(.status.state != "completed") | "\(runlabel): \(.status.state) \(.status.reason // .status.stuck // "")"),
  (.runs[] as $r | ($r.observer_effect.failed // [])[] | "\($r | runlabel) --exit-reasons \($r.observer_effect.exit_reasons): \(.)");

# One line per overhead run: mode, mechanism, counted / detached p50, exits
# per round trip (the counted run's measured phase, KVM's stat) and the host
# ns each exit gained, plus any run of the pairs that failed.
def overhead_summary:
  .runs[0] as $r | $r.observer_effect as $o
  | ($r.metrics.exits_per_operation // 0) as $e
  | if $o == null then "\($r.mode.apic) \($r.mode.target): no observer effect (run \($r.status.state))"
    else
      (($o.with_counters_p50 - $o.without_counters_p50) * 1000000 / $r.tsc_khz) as $dns
      | "\($r.mode.apic) \($r.mode.target) exit reasons \($o.exit_reasons): p50 \($o.with_counters_p50 | floor) vs \($o.without_counters_p50 | floor) cycles detached, ratio \($o.ratio * 1000 | round / 1000) (\($o.pairs) pairs), \($e * 100 | round / 100) exits per round trip, \(if $e > 0 then ($dns / $e | round) else "-" end) ns more per exit"
        + (if ($o.failed // []) | length > 0 then "; failed: \($o.failed | join("; "))" else "" end)
    end;
