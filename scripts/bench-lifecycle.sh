#!/usr/bin/env bash
# Long-suite benchmark (issue 6): N VM create/run/destroy cycles in one
# process through the library (`ipivmm::run::run`, 1 vCPU, a payload that
# sends Done at once). Reports open fds, threads and resident memory (VmRSS)
# after a warm-up and every N/10 cycles, and the RSS growth over the run.
# The same test runs with 1,000 cycles in the normal suite, where it fails on
# any fd or thread growth; RSS is only reported, here.
# Usage: scripts/bench-lifecycle.sh [CYCLES]   (default 10000; needs /dev/kvm)
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-10000}
out=$(IPIVMM_LIFECYCLE_CYCLES=$cycles IPIVMM_LIFECYCLE_REPORT=1 \
    cargo test --release -q -p ipivmm-tests --test lifecycle -- --nocapture 2>&1) || {
    echo "$out" >&2
    exit 1
}
grep -E '^(lifecycle|SKIP)' <<<"$out"
summary=$(grep -E '^lifecycle: [0-9]+ cycles' <<<"$out" || true)
if [[ -n $summary ]]; then
    growth=$(sed -E 's/.*\(([+-]?[0-9]+) KiB\).*/\1/' <<<"$summary")
    awk -v g="$growth" -v n="$cycles" 'BEGIN { printf "RSS growth: %+d KiB over %d cycles (%+.3f KiB per cycle)\n", g, n, g / n }'
fi
