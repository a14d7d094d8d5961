#!/usr/bin/env bash
# The lab's table for docs/lab.md: exits per IPI by reason for every mode on
# the lab's kvm_amd beside this machine's own KVM, from the same sweep.
# Usage: scripts/lab/table.sh RESULTS_DIR DOC   (rewrites DOC between the
# markers <!-- lab-table:begin --> and <!-- lab-table:end -->)
set -euo pipefail
dir=$1
doc=$2
LAB=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$LAB/../.." && pwd)
lab_json=$dir/runs/sweep.json
[ -s "$lab_json" ] || { echo "table: no $lab_json" >&2; exit 1; }
host_json=$dir/host-sweep.json
# The same matrix on this machine (PV is skipped where hypercalls cannot run).
"$ROOT/target/release/ipivmm" sweep --irqchip kernel,split,user --apic xapic,x2apic --ipi icr,pv \
    --workload pingpong --iterations 30 --warmup 3 -q --json "$host_json" >/dev/null 2>&1 ||
    echo "table: the host sweep reported failures (see $host_json)" >&2
table=$(
    echo "Ping-pong, 2 vCPUs, spinning target, 30 round trips (\`scripts/lab.sh quick --update-docs\`, $(date -u +%Y-%m-%d));"
    echo "guest: $(jq -r '.host.kernel_release' "$lab_json") on $(jq -r '.host.cpu_model' "$lab_json"), $(grep -o 'kvm_amd.npt=.' "$dir/module-params.txt" || true);"
    echo "host: $(jq -r '.host.kernel_release' "$host_json"), $(jq -r '.host.backend' "$host_json")."
    echo
    jq -r -s --arg workload pingpong -f "$LAB/table.jq" "$lab_json" "$host_json"
)
tmp=$(mktemp "$doc.XXXXXX")
awk -v table="$table" '
    /<!-- lab-table:begin -->/ { print; print table; skip = 1; next }
    /<!-- lab-table:end -->/ { skip = 0 }
    !skip { print }' "$doc" >"$tmp"
grep -q 'lab-table:begin' "$tmp" || { rm -f "$tmp"; echo "table: no markers in $doc" >&2; exit 1; }
mv "$tmp" "$doc"
echo "table: updated $doc"
