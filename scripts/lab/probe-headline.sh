#!/bin/sh
# The headline against --no-tracepoints (docs/counters.md, "In the lab: the
# headline against --no-tracepoints"): 25 interleaved rounds of
# default (bpf) / --no-tracepoints / --exit-reasons off, x2APIC ping-pong,
# halted and spinning targets, 400 iterations.
export PATH=/bin:/lab/bin
OUT=${OUT:-/out}
mkdir -p "$OUT/runs/headline"
# The extra step runs without init.sh's held VM (it may reload modules;
# this probe does not): hold one here, so that 150 VM creations and
# destructions never flip KVM's preempt-notifier static key, whose text
# patching under multi-threaded TCG is the lab's known wedge (docs/lab.md).
hold-vm &
HOLD=$!
trap 'kill $HOLD 2>/dev/null' EXIT
# TARGETS and HOWS narrow it (e.g. TARGETS=halt HOWS="default notp": the
# 25 pairs of issue 29's bar, 50 runs).
for i in $(seq 1 25); do
    for target in ${TARGETS:-halt spin}; do
        for how in ${HOWS:-default notp off}; do
            case $how in
                default) extra="" ;;
                notp) extra="--no-tracepoints" ;;
                off) extra="--exit-reasons off" ;;
            esac
            ipivmm run --repeat 1 --apic x2apic --target $target --iterations 400 --warmup 20 -q --serial none \
                --timeout 120 $extra --json "$OUT/runs/headline/$target-$how-$i.json"
        done
    done
    echo "lab: headline: round $i" >/dev/console
done
