# Exits per IPI by reason, one row per mode, from ipivmm.results/1 sweep
# documents (the lab's kvm_amd and this machine's kvm_pvm). Markdown out.
# Usage: jq -r -s --arg workload pingpong -f scripts/lab/table.jq LAB.json HOST.json

def backend: (.host.backend // "unknown") | ascii_downcase
  | sub("^kvmamd$"; "kvm_amd") | sub("^kvmintel$"; "kvm_intel") | sub("^kvmpvm$"; "kvm_pvm");
def measured: .phases[] | select(.name == "measure");
def fmt: if . == null then "–" else (. * 100 | round / 100 | tostring) end;
# "reason n.nn" for every kvm_exit reason seen, biggest first.
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

def row($backend):
  (.vcpus[0] | measured) as $s
  | [.vcpus[1:][] | measured] as $r
  | ($s.guest.ipis_sent) as $ipis
  | select($ipis > 0)
  | "| \(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi) | \($backend) | \([$s] | kvm_exits($ipis)) | \([$s] | reasons($ipis)) | \($r | kvm_exits($ipis)) | \($r | reasons($ipis)) | \(($s.icr_write_exits.exits // null) | if . == null then null else . / $ipis end | fmt) | \($s.latency.p50 // "–") |";

"| mode | backend | sender exits/IPI | sender exits/IPI by reason (kvm_exit) | receiver exits/IPI | receiver exits/IPI by reason | ICR-write exits/IPI | p50 cycles |",
"| --- | --- | ---: | --- | ---: | --- | ---: | ---: |",
([.[] | backend as $b | .runs[] | select(.apicv.requested == "host" and .mode.workload == $workload)
  | {key: "\(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi)", b: $b, run: .}]
 | sort_by(.key, .b) | .[] | . as $x | $x.run | row($x.b)),
""
