#!/usr/bin/env bash
# Guest floods (issue 14): peak RSS of `ipivmm run` while every vCPU of the
# guest floods the host with phases, records, samples or serial output
# (`ipivmm_tests::floods`, written as ELF files by the tests crate's
# `flood_payloads` example), at each vCPU count asked for. Prints one table
# row per flood and vCPU count: how the run ended, the child's peak RSS
# (/usr/bin/time), wall time, phases kept and the JSON's size.
#
# Usage: scripts/bench-floods.sh [VCPUS...]          (default: 1 64)
# Environment: IPIVMM=binary (default: target/release/ipivmm, built here),
#   TIMEOUT=seconds per run (default 5), BUDGET=MiB (--guest-memory-budget;
#   default: the binary's), EXTRA="more run flags". Needs /dev/kvm, jq.
# Serial output goes nowhere (--serial none), as in most scripted runs: only
# the 16 KiB tail is kept, so that flood ends at the timeout, not the budget
# (a library caller's SerialSink::Capture is what the budget bounds).
set -euo pipefail
cd "$(dirname "$0")/.."
vcpus=${*:-1 64}
timeout=${TIMEOUT:-5}
if [[ -z ${IPIVMM:-} ]]; then
    cargo build --release -q -p ipivmm-cli
    IPIVMM=target/release/ipivmm
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo run --release -q -p ipivmm-tests --example flood_payloads -- "$work" >/dev/null
budget=()
if [[ -n ${BUDGET:-} ]]; then
    budget=(--guest-memory-budget "$BUDGET")
fi
# shellcheck disable=SC2206
extra=(${EXTRA:-})
printf '%-8s %6s  %-12s %12s %8s %10s %10s\n' flood vCPUs status "peak RSS" wall phases "JSON"
for kind in phases records samples serial; do
    for n in $vcpus; do
        rm -f "$work/r.json"
        start=$(date +%s%N)
        /usr/bin/time -f '%M' -o "$work/rss" "$IPIVMM" run --payload "$work/$kind.elf" \
            --vcpus "$n" --timeout "$timeout" --no-tracepoints --serial none --quiet \
            --json "$work/r.json" "${budget[@]}" "${extra[@]}" >/dev/null 2>"$work/err" || true
        wall_ms=$((($(date +%s%N) - start) / 1000000))
        peak_kib=$(grep -E '^[0-9]+$' "$work/rss" | tail -1 || echo 0)
        state=- phases=- size=-
        if [[ -s $work/r.json ]]; then
            state=$(jq -r '.runs[0].status.state' "$work/r.json")
            phases=$(jq '[.runs[0].vcpus[].phases | length] | add' "$work/r.json")
            size=$(stat -c %s "$work/r.json" | awk '{ printf "%.1f MB", $1 / 1e6 }')
        elif [[ -s $work/err ]]; then
            state="error: $(head -c 60 "$work/err" | tr '\n' ' ')"
        fi
        printf '%-8s %6s  %-12s %9.1f MiB %6.1f s %10s %10s\n' "$kind" "$n" "$state" \
            "$(awk -v k="$peak_kib" 'BEGIN { print k / 1024 }')" \
            "$(awk -v m="$wall_ms" 'BEGIN { print m / 1000 }')" "$phases" "$size"
    done
done
