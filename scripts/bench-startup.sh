#!/usr/bin/env bash
# Start-up and memory benchmark (issue 2 targets, checked here, not in tests):
#   process start -> the payload's first control-port message: target < 10 ms
#   ipivmm's peak resident memory: target < 32 MiB beyond guest RAM
# Usage: scripts/bench-startup.sh [RUNS]   (needs /dev/kvm; builds release)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
cargo build --release -q -p ipivmm-cli
bin=target/release/ipivmm

measure() { # $@: extra flags
    local firsts=() rss=()
    for _ in $(seq "$runs"); do
        line=$("$bin" run -v -q --iterations 10 --warmup 0 --serial none "$@" 2>&1 | grep 'timings:')
        firsts+=("$(sed -E 's/.*first guest message after ([0-9.]+) ms.*/\1/' <<<"$line")")
        rss+=("$(sed -E 's/.*peak RSS ([0-9]+) KiB.*/\1/' <<<"$line")")
    done
    printf '%s\n' "${firsts[@]}" | sort -g | awk -v label="$*" '
        { v[NR] = $1 } END { printf "first message %-22s min %6.2f  p50 %6.2f  max %6.2f ms (n=%d)\n", "[" label "]", v[1], v[int((NR+1)/2)], v[NR], NR }'
    printf '%s\n' "${rss[@]}" | sort -g | awk '{ v[NR] = $1 } END { printf "peak RSS (VmHWM, guest pages touched included): p50 %.1f MiB, max %.1f MiB\n", v[int((NR+1)/2)]/1024, v[NR]/1024 }'
}

measure
measure --no-tracepoints
