#!/usr/bin/env bash
# The cost of counting: cycles per IPI and wall time per run with
#   off       KVM's binary stats only (--no-tracepoints),
#   counters  + one counting tracepoint per event and exit reason (--exit-reasons counters),
#   sampled   + the kvm_exit/kvm_entry sampler ring (--exit-reasons sampled, the default),
# in interleaved runs of one invocation (off, counters, sampled, off, ...) so
# that all three see the same machine noise. Reports medians of the per-run
# p50 and each level's ratio to `off`: a ratio, never an absolute target, as
# these machines are shared.
#
# Usage: scripts/bench-counters.sh [ROUNDS] [ITERATIONS] [-- extra run flags]
#   IPIVMM=path  the binary (default: target/release/ipivmm, built here;
#                in the lab's guest: ipivmm on PATH)
# Example: scripts/bench-counters.sh 10 300 -- --apic xapic --target spin
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
iters=${2:-300}
shift $(($# < 2 ? $# : 2))
[ "${1:-}" = "--" ] && shift
extra=("$@")
[ ${#extra[@]} -gt 0 ] || extra=(--apic x2apic --target halt)
if [ -z "${IPIVMM:-}" ]; then
    cargo build --release -q -p ipivmm-cli
    IPIVMM=target/release/ipivmm
fi
command -v jq >/dev/null || { echo "bench-counters: needs jq (apt-get install jq)" >&2; exit 2; }

levels=(off counters sampled)
declare -A p50s walls
for _ in $(seq "$rounds"); do
    for level in "${levels[@]}"; do
        flags=("${extra[@]}" --iterations "$iters" --warmup 20 --serial none -q --json -)
        case $level in
        off) flags+=(--no-tracepoints) ;;
        counters) flags+=(--exit-reasons counters) ;;
        sampled) flags+=(--exit-reasons sampled) ;;
        esac
        read -r p50 wall < <("$IPIVMM" run "${flags[@]}" |
            jq -r '.runs[0] | [(.vcpus[0].phases[] | select(.name == "measure") | .latency.p50), .timings.total_ns] | @tsv')
        p50s[$level]+="$p50 "
        walls[$level]+="$wall "
    done
done

median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "cost of counting: ${extra[*]}, $iters iterations, median of $rounds interleaved runs per level"
printf '%-9s %14s %9s %14s %9s\n' level "p50 cycles" "vs off" "run wall ms" "vs off"
base_p50=$(median "${p50s[off]}")
base_wall=$(median "${walls[off]}")
for level in "${levels[@]}"; do
    p=$(median "${p50s[$level]}")
    w=$(median "${walls[$level]}")
    awk -v l="$level" -v p="$p" -v w="$w" -v bp="$base_p50" -v bw="$base_wall" \
        'BEGIN { printf "%-9s %14d %9.3f %14.1f %9.3f\n", l, p, p / bp, w / 1e6, w / bw }'
done
