#!/bin/sh
# CI's IPIv smoke (.ci/run; docs/lab-intel.md, "In CI"): the step `extra`
# of one Bochs boot (kvm_intel with enable_apicv=Y enable_ipiv=Y on the
# patched Bochs 3.0), packed as /lab/extra.sh by .ci/run. Seed 002's
# mechanism, twice: an x2APIC unicast ping-pong under IPIv takes no
# ICR-write exit per IPI, and the same after a reload with enable_ipiv=N
# takes one. Each run is its own gate (ipivmm run --expect, TAP in
# ipiv-smoke-*.tap) and its results are runs/ipiv-smoke-{on,off}.json.
# `cargo xtask lab seeds` (seed 002, docs/seeds.md) boots it with
# lab.smoke_apics=xapic,x2apic (default x2apic; an xAPIC run's files end in
# -xapic), lab.iterations=N round trips (default 5) and, with --kut, the
# archive holding kvm-unit-tests' /lab/kut/vmexit.flat: its `ipi` test in
# each APIC mode after the ping-pongs (runs/kut-ipi-{on,off}-APIC.json,
# ipivmm's --timeout lab.kut_timeout=S, default 300), a row of the table,
# not a gate: kut-runs.tsv keeps each one's exit status.
set -o pipefail
export PATH=/bin:/lab/bin
P=/sys/module/kvm_intel/parameters
OUT=${OUT:-/out}
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
fails=0
N=$(arg iterations)
N=${N:-5}
APICS=$(arg smoke_apics)
APICS=$(echo "${APICS:-x2apic}" | tr ',' ' ')
KUT_S=$(arg kut_timeout)
KUT_S=${KUT_S:-300}
smoke1() { # name, APIC mode, ICR-write exits per IPI expected
    name=ipiv-smoke-$1
    [ "$2" = x2apic ] || name=$name-$2
    echo "== $name: enable_apicv=$(cat $P/enable_apicv) enable_ipiv=$(cat $P/enable_ipiv)"
    echo "lab: probe: $name" >/dev/console
    timeout 900 ipivmm run --repeat 1 --irqchip kernel --apic "$2" --ipi icr --workload pingpong \
        --iterations "$N" --warmup 2 --timeout 600 --serial none --json "$OUT/runs/$name.json" \
        --expect "icr_write_exits_per_ipi == $3" --expect 'ipis_delivered == ipis_sent' \
        --tap >"$OUT/$name.tap" 2>"$OUT/tests/$name.log"
    rc=$?
    cat "$OUT/$name.tap"
    tail -n 20 "$OUT/tests/$name.log"
    echo "rc=$rc"
    [ "$rc" = 0 ] || fails=$((fails + 1))
    save_partial
}
kut() { # on|off, APIC mode: kvm-unit-tests' vmexit ipi (not a gate)
    [ -f /lab/kut/vmexit.flat ] || return 0
    echo "== kut-ipi-$1-$2: vmexit.flat ipi"
    echo "lab: probe: kut-ipi-$1-$2" >/dev/console
    timeout $((KUT_S + 120)) ipivmm run --kernel /lab/kut/vmexit.flat --append ipi --vcpus 2 --apic "$2" \
        --memory 256 --repeat 1 --timeout "$KUT_S" --serial none --json "$OUT/runs/kut-ipi-$1-$2.json" \
        >"$OUT/tests/kut-ipi-$1-$2.log" 2>&1
    rc=$?
    printf '%s\t%s\n' "kut-ipi-$1-$2" "$rc" >>"$OUT/kut-runs.tsv"
    tail -n 20 "$OUT/tests/kut-ipi-$1-$2.log"
    echo "rc=$rc"
    save_partial
}
smoke() { # on|off, ICR-write exits per IPI expected: each APIC mode, then kvm-unit-tests
    for a in $APICS; do smoke1 "$1" "$a" "$2"; done
    for a in $APICS; do kut "$1" "$a"; done
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
