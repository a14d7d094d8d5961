#!/bin/sh
# A kernel (or KVM module) change gated on IPI costs across boots
# (docs/ci.md, "Kernels compared across boots"): the same run recorded on
# several boots of the old kernel and of the new one, then every recording
# of the new kernel judged against all of the old one's by `ipivmm compare`,
# the drift between boots in the baseline's spread. POSIX sh (the lab's
# guest runs it under busybox: `cargo xtask lab crossboot`).
#   kernel-gate.sh record DIR          on one boot: RECORDINGS runs, DIR/BOOT_ID-K.json
#   kernel-gate.sh judge BASE NEW OUT  after the boots: NEW/*.json against BASE/*.json;
#                                      OUT.txt the comparison, OUT.gate.txt the decisions
# Exit status: record 0, or ipivmm run's; judge compare --fail-on-regression's
# (0 pass, 1 regressed, 4 undecided, 3 nothing compared, 2 unreadable).
set -eu
IPIVMM=${IPIVMM:-ipivmm}
# The configuration recorded on every boot, the same on each.
RUN=${RUN:---apic x2apic --target spin --iterations ${ITERATIONS:-100} --warmup 10 --repeat 3}
RECORDINGS=${RECORDINGS:-3}
# The gated figures (compare --gate): cycles per round trip p50, exits and
# ICR-write exits per IPI.
GATE=${GATE:-p50,exits,icr-exits}
case ${1:-} in
record)
    dir=$2
    mkdir -p "$dir"
    boot=$(cat /proc/sys/kernel/random/boot_id)
    k=1
    while [ "$k" -le "$RECORDINGS" ]; do
        # shellcheck disable=SC2086 # RUN is a list of flags
        "$IPIVMM" run $RUN --json "$dir/$boot-$k.json" >"$dir/$boot-$k.txt"
        k=$((k + 1))
    done
    ;;
judge)
    base=$2 new=$3 out=$4
    set --
    for f in "$base"/*.json; do set -- "$@" --baseline "$f"; done
    rc=0
    "$IPIVMM" compare "$new"/*.json "$@" --gate "$GATE" --fail-on-regression \
        >"$out.txt" 2>"$out.gate.txt" || rc=$?
    tail -n 1 "$out.gate.txt"
    exit "$rc"
    ;;
*)
    echo "usage: kernel-gate.sh record DIR | judge BASE NEW OUT" >&2
    exit 2
    ;;
esac
