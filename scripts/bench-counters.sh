#!/usr/bin/env bash
# Counter overhead (issue 3): cycles per IPI with every counter on versus
# tracepoints off, in alternating runs of one invocation so both see the same
# machine noise. Reports the ratio of medians of the per-run p50 (target: the
# counters cost under 3%).
# Usage: scripts/bench-counters.sh [PAIRS] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-10}
iters=${2:-300}
cargo build --release -q -p ipivmm
on=() off=()
for _ in $(seq "$pairs"); do
    for mode in on off; do
        flags=(--apic x2apic --target halt --iterations "$iters" --warmup 20 --serial none -q --json -)
        [ "$mode" = off ] && flags+=(--no-tracepoints)
        p50=$(target/release/ipivmm run "${flags[@]}" | jq '.runs[0].vcpus[0].phases[] | select(.name=="measure") | .latency.p50')
        if [ "$mode" = on ]; then on+=("$p50"); else off+=("$p50"); fi
    done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
m_on=$(median "${on[@]}")
m_off=$(median "${off[@]}")
awk -v a="$m_on" -v b="$m_off" -v n="$pairs" 'BEGIN {
    printf "p50 cycles per IPI (x2apic, halted target), median of %d runs each:\n", n
    printf "  counters on  (stats + tracepoints): %d\n  counters off (stats only):          %d\n  ratio on/off: %.3f (%+.1f%%)\n", a, b, a / b, (a / b - 1) * 100
}'
