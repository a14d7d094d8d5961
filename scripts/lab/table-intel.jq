# The Intel lab's table (docs/lab-intel.md): exits per IPI by reason for
# every run of scripts/lab/probe-apicv.sh's APICv matrix, kvm_intel loaded with
# enable_apicv=Y (runs/sweep-apicv-on.json) and =N (runs/sweep-apicv-off.json).
# Usage: jq -r -n -f scripts/lab/table-intel.jq DIR/runs/sweep-apicv-on.json DIR/runs/sweep-apicv-off.json
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
def modelabel: "\(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi)\(if .mode.workload == "pingpong" then "" else " \(.mode.workload)" end)";
def state: .status | if type == "object" then .state else . end;
def apicv_phase:
  if . == null then "–"
  elif .active then "active"
  elif (.inhibits | length) == 0 then "not active"
  else "inhibited (\(.inhibits | join(", ")))" end;
def row($param):
  if state != "completed" and ((.vcpus // []) | length) == 0 then
    "| \(modelabel) | \($param) | \(.apicv.requested) | \(state) | – | – | – |"
  else
    (.vcpus[0] | measured) as $s
    | [.vcpus[1:][] | measured] as $r
    | ($s.guest.ipis_sent) as $ipis
    | if ($ipis // 0) == 0 then
        "| \(modelabel) | \($param) | \(.apicv.requested) | \(state), no IPI measured | – | – | – |"
      else
        "| \(modelabel) | \($param) | \(.apicv.requested) | \($s.apicv | apicv_phase) | \([$s] | reasons($ipis)) | \($r | reasons($ipis)) | \(($s.icr_write_exits.exits // null) | if . == null then null else . / $ipis end | fmt) |"
      end
  end;

"| mode | enable_apicv | --apicv | APICv in the measure phase | sender exits/IPI by reason | receiver exits/IPI by reason | ICR-write exits/IPI |",
"| --- | --- | --- | --- | --- | --- | ---: |",
([inputs | (input_filename | if test("apicv-off") then "N" else "Y" end) as $p | .runs[] | {p: $p, run: .}]
 | sort_by(.run.mode.workload, .run.mode.irqchip, .run.mode.apic, .run.mode.ipi, (if .p == "Y" then 0 else 1 end), .run.apicv.requested)
 | .[] | . as $x | $x.run | row($x.p))
