#!/usr/bin/env bash
# The AVIC table for docs/lab.md: exits per IPI by reason with the emulated
# AVIC on and off (scripts/lab/avic.sh --update-docs).
# Usage: scripts/lab/table-avic.sh RESULTS_DIR DOC   (rewrites DOC between the
# markers <!-- avic-table:begin --> and <!-- avic-table:end -->)
set -euo pipefail
dir=$1
doc=$2
LAB=$(cd "$(dirname "$0")" && pwd)
files=()
for f in "$dir"/runs/avic-on.json "$dir"/runs/avic-on-halt.json "$dir"/runs/avic-off.json "$dir"/runs/avic-off-halt.json; do
    [ -s "$f" ] && files+=("$f")
done
[ ${#files[@]} -gt 0 ] || { echo "table-avic: no runs/avic-*.json in $dir" >&2; exit 1; }
iters=$(jq -r '.runs[0].mode.iterations' "${files[0]}")
table=$(
    echo "Kernel irqchip, \`--apicv host\`, $iters iterations per run (\`scripts/lab/avic.sh --update-docs\`, $(date -u +%Y-%m-%d));"
    echo "guest: $(jq -r '.host.kernel_release' "${files[0]}") on $(jq -r '.host.cpu_model' "${files[0]}") with the emulated AVIC ($(sed -n 's/^qemu //p' "$dir/versions.txt" | cut -d'(' -f1)+ scripts/lab/qemu-7.2-avic-*.patch),"
    echo "kvm_amd avic=1 (on) and avic=0 (off); 2 emulated CPUs. \"Sender\" is vCPU 0, \"receivers\" the other vCPUs together."
    echo
    jq -r -s -f "$LAB/table-avic.jq" "${files[@]}"
)
tmp=$(mktemp "$doc.XXXXXX")
awk -v table="$table" '
    /<!-- avic-table:begin -->/ { print; print table; skip = 1; next }
    /<!-- avic-table:end -->/ { skip = 0 }
    !skip { print }' "$doc" >"$tmp"
grep -q 'avic-table:begin' "$tmp" || { rm -f "$tmp"; echo "table-avic: no markers in $doc" >&2; exit 1; }
mv "$tmp" "$doc"
echo "table-avic: updated $doc"
