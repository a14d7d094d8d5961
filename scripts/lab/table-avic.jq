# Exits per IPI by reason with AVIC on and off, from the AVIC pass's sweeps
# (scripts/lab/probe-avic.sh: runs/avic-{on,off}{,-halt}.json). Markdown out.
# Usage: jq -r -s -f scripts/lab/table-avic.jq FILES...
# (the helpers are those of scripts/lab/table.jq)
def measured: .phases[] | select(.name == "measure");
def fmt: if . == null then "–" else (. * 100 | round / 100 | tostring) end;
def by_reason:
  if .exit_reasons then .exit_reasons.by_reason | to_entries | map({key, value: .value.count})
  else .tracepoints // {} | to_entries | map(select(.key | startswith("kvm_exit:")) | {key: (.key | ltrimstr("kvm_exit:")), value})
  end;
def reasons($ipis):
  [.[] | by_reason[]]
  | group_by(.key) | map({k: .[0].key, v: (map(.value) | add)})
  | map(select(.v > 0)) | sort_by(-.v)
  | if length == 0 then "–" else map("\(.k) \(.v / $ipis | fmt)") | join(", ") end;
def kvm_exits($ipis): (map(.kvm_stats.exits // 0) | add) / $ipis | fmt;

def avic: if .apicv.effective == "active" then "on" elif .apicv.effective == "unavailable" then "off" else .apicv.effective end;
def per($n): if $n > 0 then . / $n | fmt else "–" end;

def row:
  (.vcpus[0] | measured) as $s
  | [.vcpus[1:][] | measured] as $r
  | ($s.guest.ipis_sent) as $ipis
  | select($ipis > 0)
  | "| \(.mode.workload) \(.mode.vcpus)v \(.mode.target) | \(.mode.irqchip)/\(.mode.apic) | \(avic) | \([$s] | kvm_exits($ipis)) | \([$s] | reasons($ipis)) | \($r | kvm_exits($ipis)) | \($r | reasons($ipis)) | \($s.icr_write_exits.exits | per($ipis)) | \($s.icr_write_exits.accelerated | per($ipis)) |";

"| workload | mode | AVIC | sender exits/IPI | sender exits/IPI by reason (kvm_exit) | receivers exits/IPI | receivers exits/IPI by reason | ICR-write exits/IPI | accelerated ICR writes/IPI |",
"| --- | --- | --- | ---: | --- | ---: | --- | ---: | ---: |",
([.[] | .runs[] | select(.apicv.requested == "host" and .mode.irqchip == "kernel" and .mode.ipi == "icr")]
 | sort_by(.mode.workload, .mode.vcpus, .mode.target, .mode.apic, avic) | .[] | row),
""
