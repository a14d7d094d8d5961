#!/usr/bin/env bash
# The live gate's operating characteristic on real VMs (issue 40,
# docs/statistics.md "Measured here"): COUNT A/A and COUNT injected
# `compare --run` comparisons of the x2APIC ping-pong to a halted target,
# alternated, each with its exit status and wall time.
#
#   scripts/gate-campaign.sh OUTDIR [COUNT] [--busy]
#
# The injected delay is 20% of the configuration's p50, measured first.
# --busy holds one CPU with a `nice -n 10` busy loop during each
# comparison. IPIVMM (default target/release/ipivmm) names the binary;
# IPIVMM_LOCK, when set, is a lock file each comparison holds (a shared
# machine's heavy-job lock). Ends with the tally: exit 0/1/4 per kind.
set -euo pipefail
out=${1:?usage: scripts/gate-campaign.sh OUTDIR [COUNT] [--busy]}
count=${2:-10}
busy=${3:-}
bin=${IPIVMM:-target/release/ipivmm}
base='--apic x2apic --target halt --iterations 200'
mkdir -p "$out"

locked() {
    if [ -n "${IPIVMM_LOCK:-}" ]; then flock "$IPIVMM_LOCK" "$@"; else "$@"; fi
}

if [ ! -e "$out/p50" ]; then
    locked "$bin" run $base --json "$out/p50.json" -q
    jq -r '.configurations[0].figures.cycles_per_operation_p50.median' "$out/p50.json" >"$out/p50"
fi
n=$(awk '{ printf "%d", $1 * 0.2 }' "$out/p50")
echo "p50 $(cat "$out/p50") cycles: injected delay $n cycles"

# One comparison, timed from when it holds the lock; with --busy, the busy
# loop runs only while it does (never while another job holds the lock).
compare_one() { # LOG NEW-FLAGS
    local busy_pid='' start=$SECONDS rc=0
    if [ "$busy" = --busy ]; then
        nice -n 10 sh -c 'while :; do :; done' &
        busy_pid=$!
    fi
    "$bin" compare --run "$base" --run "$2" --fail-on-regression >"$1" 2>&1 || rc=$?
    [ -n "$busy_pid" ] && kill "$busy_pid"
    echo "$rc $((SECONDS - start))"
}
export -f compare_one
export bin base busy

one() { # KIND I
    local kind=$1 i=$2 new=$base result
    [ -e "$out/$kind-$i.rc" ] && return 0
    [ "$kind" = inj ] && new="$base --inject-delay-cycles $n"
    result=$(locked bash -c 'compare_one "$@"' _ "$out/$kind-$i.log" "$new")
    echo "$result" >"$out/$kind-$i.rc"
    echo "$kind $i: exit ${result% *} after ${result#* } s"
}

for i in $(seq 1 "$count"); do
    one aa "$i"
    one inj "$i"
done
for kind in aa inj; do
    cat "$out"/$kind-*.rc | awk -v k="$kind" '
        { n[$1]++; t += $2; if ($2 > max) max = $2 }
        END { printf "%s: exit 0 %d, exit 1 %d, exit 4 %d of %d; mean %.0f s, longest %d s\n",
              k, n[0], n[1], n[4], NR, t / NR, max }'
done
