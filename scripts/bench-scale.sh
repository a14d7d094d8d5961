#!/usr/bin/env bash
# The VMM's own cost as the vCPU count grows: for N = 2, 4, ... MAX (x2APIC
# broadcast, halting targets, a few iterations), the time to a ready VM, to
# the guest's first message, the whole run, and the peak RSS beyond guest
# RAM, with the tracepoint counters off and on (fds and rings per vCPU).
# "RSS-RAM" is peak RSS minus --memory (guest RAM is mapped lazily, so it
# can be negative); "own" is peak RSS minus the guest RAM actually resident
# (timings.guest_resident_kib), the VMM's own cost; "tp fds" the tracepoint
# fds vCPU 0 opened (counters, plus 2 for the exit sampler; the APICv
# inhibit sampler's one fd is not in the report).
#
# Usage: scripts/bench-scale.sh [MAX] [ITERATIONS]   (defaults 1024, 3)
#   IPIVMM=path  the binary (default: target/release/ipivmm, built here)
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-1024}
iters=${2:-3}
if [ -z "${IPIVMM:-}" ]; then
    cargo build --release -q -p ipivmm-cli
    IPIVMM=target/release/ipivmm
fi
command -v jq >/dev/null || { echo "bench-scale: needs jq (apt-get install jq)" >&2; exit 2; }

printf '%6s %-9s %9s %11s %8s %12s %9s %7s %10s\n' N counters "ready ms" "1st msg ms" "run s" "RSS-RAM MiB" "own MiB" "tp fds" status
n=2
while [ "$n" -le "$max" ]; do
    for counters in off on; do
        flags=(--vcpus "$n" --apic x2apic --workload broadcast --target halt
            --iterations "$iters" --warmup 1 --timeout 600 --serial none -q --json -)
        [ $counters = off ] && flags+=(--no-tracepoints)
        "$IPIVMM" run "${flags[@]}" 2>/dev/null |
            jq -r --arg n "$n" --arg c "$counters" '.runs[0] |
                [$n, $c, (.timings.setup_ns / 1e6), ((.timings.first_message_ns // 0) / 1e6),
                 (.timings.total_ns / 1e9), ((.timings.peak_rss_kib / 1024) - (.mode.memory_mib // 0)),
                 ((.timings.peak_rss_kib - (.timings.guest_resident_kib // 0)) / 1024),
                 (((.vcpus[0].phases[-1].tracepoints // {}) | length)
                  + (if any(.vcpus[0].sources[]; .source == "exit_reasons" and .available) then 2 else 0 end)),
                 .status.state] | @tsv' |
            awk -F'\t' '{ printf "%6s %-9s %9.1f %11.1f %8.2f %12.1f %9.1f %7s %10s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9 }'
    done
    [ "$n" -eq "$max" ] && break
    n=$((n * 2))
    [ "$n" -gt "$max" ] && n=$max
done
