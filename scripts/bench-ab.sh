#!/usr/bin/env bash
# A/B of two ipivmm builds on one workload: runs A and B alternately (A, B,
# A, B, ...) so both see the same machine noise, then reports the medians of
# the measured phase's p50 cycles per IPI, userspace exits per IPI and run
# wall time of each, and B/A. Use it to show what a change does to the
# numbers (e.g. an old binary saved before the change against a new build).
#
# Usage: scripts/bench-ab.sh BIN_A BIN_B [ROUNDS] [-- run flags]
# Example: scripts/bench-ab.sh /tmp/ipivmm-old target/release/ipivmm 10 -- --irqchip user --apic x2apic
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
a=$1 b=$2
shift 2
rounds=10
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--irqchip user --apic x2apic)
command -v jq >/dev/null || { echo "bench-ab: needs jq (apt-get install jq)" >&2; exit 2; }

declare -A vals
for _ in $(seq "$rounds"); do
    for side in a b; do
        bin=$a
        [ $side = b ] && bin=$b
        # p50 of vCPU 0's measured phase; user exits of every vCPU over IPIs sent.
        read -r p50 upi wall < <("$bin" run "${flags[@]}" --iterations 300 --warmup 20 --serial none -q --json - |
            jq -r '.runs[0] | [.vcpus[].phases[] | select(.name == "measure")] as $m
                | [$m[0].latency.p50,
                   (($m | map(.exits | add // 0) | add) / ([$m[].guest.ipis_sent] | add)),
                   .timings.total_ns] | @tsv')
        vals[$side.p50]+="$p50 "
        vals[$side.upi]+="$upi "
        vals[$side.wall]+="$wall "
    done
done

median() { printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "A: $a"
echo "B: $b"
echo "flags: ${flags[*]}; median of $rounds alternating runs each"
printf '%-22s %14s %14s %8s\n' "" A B B/A
for k in p50 upi wall; do
    va=$(median "${vals[a.$k]}")
    vb=$(median "${vals[b.$k]}")
    name=$k
    case $k in p50) name="p50 cycles/IPI" ;; upi) name="user exits/IPI" ;; wall) name="run wall ns" ;; esac
    awk -v n="$name" -v x="$va" -v y="$vb" 'BEGIN { printf "%-22s %14.2f %14.2f %8.3f\n", n, x, y, (x ? y / x : 0) }'
done
