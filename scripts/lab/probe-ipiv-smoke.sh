#!/bin/sh
# CI's IPIv smoke (.ci/run; docs/lab-intel.md, "In CI"): the step `extra`
# of one Bochs boot (kvm_intel with enable_apicv=Y enable_ipiv=Y on the
# patched Bochs 3.0), packed as /lab/extra.sh by .ci/run. Seed 002's
# mechanism, twice: an x2APIC unicast ping-pong under IPIv takes no
# ICR-write exit per IPI, and the same after a reload with enable_ipiv=N
# takes one. Each run is its own gate (ipivmm run --expect, TAP in
# ipiv-smoke-*.tap) and its results are runs/ipiv-smoke-{on,off}.json.
set -o pipefail
export PATH=/bin:/lab/bin
P=/sys/module/kvm_intel/parameters
OUT=${OUT:-/out}
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
fails=0
smoke() { # name, ICR-write exits per IPI expected
    echo "== ipiv-smoke-$1: enable_apicv=$(cat $P/enable_apicv) enable_ipiv=$(cat $P/enable_ipiv)"
    echo "lab: probe: ipiv-smoke-$1" >/dev/console
    timeout 900 ipivmm run --repeat 1 --irqchip kernel --apic x2apic --ipi icr --workload pingpong \
        --iterations 5 --warmup 2 --timeout 600 --serial none --json "$OUT/runs/ipiv-smoke-$1.json" \
        --expect "icr_write_exits_per_ipi == $2" --expect 'ipis_delivered == ipis_sent' \
        --tap >"$OUT/ipiv-smoke-$1.tap" 2>"$OUT/tests/ipiv-smoke-$1.log"
    rc=$?
    cat "$OUT/ipiv-smoke-$1.tap"
    tail -n 20 "$OUT/tests/ipiv-smoke-$1.log"
    echo "rc=$rc"
    [ "$rc" = 0 ] || fails=$((fails + 1))
    save_partial
}
ipivmm host 2>&1 | grep -E 'APICv|IPIv'
smoke on 0
/init __fn hold_vm stop
rmmod kvm_intel && insmod /lab/modules/kvm-intel.ko $(arg kvm | tr ',' ' ') enable_apicv=1 enable_ipiv=0 ||
    { echo "reload with enable_ipiv=0 failed"; fails=$((fails + 1)); }
/init __fn hold_vm start
smoke off 1
echo "probe-ipiv-smoke: $fails failures"
[ "$fails" = 0 ]
