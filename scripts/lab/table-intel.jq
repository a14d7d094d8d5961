# The Intel lab's table (docs/lab-intel.md): exits per IPI by reason for
# every run of the results files given, with kvm_intel's enable_apicv and
# enable_ipiv as each run read them back (runs[].host_settings.params), so
# any mix of files works: scripts/lab/probe-apicv.sh's APICv matrix passes
# (runs/sweep-apicv-*.json) and its IPIv sweeps (runs/preset-ipiv-unicast.json,
# runs/sweep-ipiv-*.json).
# Usage: jq -r -n -f scripts/lab/table-intel.jq DIR/runs/*.json
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
def modelabel: "\(.mode.irqchip)/\(.mode.apic)/\(.mode.ipi)";
def load: "\(.mode.workload) \(.mode.target // "spin")";
def state: .status | if type == "object" then .state else . end;
def yn: if . == null then "?" elif test("^(Y|y|1)$") then "Y" elif test("^(N|n|0)$") then "N" else . end;
def param($p): .host_settings.params.kvm_intel[$p] | yn;
def apicv_phase:
  if . == null then "–"
  elif .active then "active"
  elif (.inhibits | length) == 0 then "not active"
  else "inhibited (\(.inhibits | join(", ")))" end;
def cells: "| \(modelabel) | \(load) | \(param("enable_apicv")) | \(param("enable_ipiv")) | \(.apicv.requested)";
def row:
  if state != "completed" and ((.vcpus // []) | length) == 0 then
    "\(cells) | \(state) | – | – | – | – |"
  else
    (.vcpus[0] | measured) as $s
    | [.vcpus[1:][] | measured] as $r
    | ($s.guest.ipis_sent) as $ipis
    | if ($ipis // 0) == 0 then
        "\(cells) | \(state), no IPI measured | – | – | – | – |"
      else
        "\(cells) | \($s.apicv | apicv_phase) | \([$s] | reasons($ipis)) | \($r | reasons($ipis)) | \(($s.icr_write_exits.exits // null) | if . == null then null else . / $ipis end | fmt) | \(($s.icr_write_exits.accelerated // null) | if . == null then null else . / $ipis end | fmt) |"
      end
  end;

# One row per combination (a later file's duplicate of a row is left out),
# enable_apicv and enable_ipiv Y before N.
def key: [.mode.workload, (.mode.target // "spin"), .mode.irqchip, .mode.apic, .mode.ipi,
  (param("enable_apicv") | if . == "Y" then 0 else 1 end), (param("enable_ipiv") | if . == "Y" then 0 else 1 end), .apicv.requested];

"| mode | workload, target | enable_apicv | enable_ipiv | --apicv | APICv in the measure phase | sender exits/IPI by reason | receiver exits/IPI by reason | ICR-write exits/IPI | accelerated ICR writes/IPI |",
"| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: |",
([inputs | .runs[]] | unique_by(key) | .[] | row)
