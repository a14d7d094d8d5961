#!/bin/sh
# The AVIC pass's step `extra` in the lab's guest (scripts/lab/avic.sh packs
# it as /lab/extra.sh with scripts/lab/build-selftests.sh): kvm_amd runs
# with avic=1 on QEMU's emulated AVIC (scripts/lab/build-qemu.sh).
#   1. the KVM selftests (the peer), with AVIC on, then with avic=0;
#   2. ipivmm's AVIC matrix (kernel and split irqchip, xAPIC and x2APIC,
#      --apicv host and inhibit, ping-pong to spinning and halted targets,
#      broadcast) with AVIC on (runs/avic-on.json) and the same with
#      avic=0 (runs/avic-off.json);
#   3. the avic-broadcast preset (runs/avic-preset.json).
# lab.probe=selftests,matrix,preset: only these parts (default all: more than
# the 3000 s init.sh gives step `extra` under TCG, so scripts/lab/avic.sh
# boots twice); lab.iterations=N: iterations per run (default 30).
# Outcomes go to $OUT/selftests.tsv (name, avic, rc); scripts/lab/avic.sh
# checks everything with scripts/lab/checks-avic.jq.
set -o pipefail
export PATH=/bin:/lab/bin
P=/sys/module/kvm_amd/parameters
OUT=${OUT:-/out}
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
params() { echo "== kvm_amd: avic=$(cat $P/avic) force_avic=$(cat $P/force_avic) npt=$(cat $P/npt)"; }
N=$(arg iterations)
N=${N:-30}
PARTS=$(arg probe)
PARTS=${PARTS:-selftests,matrix,preset}
want() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
fails=0

reload() { # avic value (0|1); the other lab.kvm= parameters stay
    keep=""
    for p in $(arg kvm | tr ',' ' '); do
        case $p in avic=*) ;; *) keep="$keep $p" ;; esac
    done
    rmmod kvm_amd && insmod /lab/modules/kvm-amd.ko $keep avic="$1" ||
        { echo "reload with avic=$1 failed"; fails=$((fails + 1)); }
    params
}

selftests() { # label (on|off)
    for t in /lab/selftests/*; do
        n=$(basename "$t")
        args=""
        [ "$n" = xapic_ipi_test ] && args="-s 5"
        echo "lab: probe: selftest $n (avic $1)" >/dev/console
        echo "== selftest $n $args (avic $1)"
        timeout 600 "$t" $args >/tmp/selftest.log 2>&1
        rc=$?
        tail -n 25 /tmp/selftest.log
        echo "rc=$rc"
        printf '%s\t%s\t%s\n' "$n" "$1" "$rc" >>"$OUT/selftests.tsv"
        cp /tmp/selftest.log "$OUT/tests/selftest-$n-avic-$1.log"
        save_partial
    done
}

matrix() { # label (on|off)
    echo "== sweep, AVIC $1"
    timeout 2400 ipivmm sweep --irqchip kernel,split --apic xapic,x2apic --ipi icr \
        --apicv host,inhibit --workload pingpong,broadcast --vcpus 2,3 --iterations "$N" --warmup 3 \
        -q --json "$OUT/runs/avic-$1.json" 2>&1 | tail -n 60 || fails=$((fails + 1))
    echo "== sweep, AVIC $1, halted targets"
    timeout 2400 ipivmm sweep --irqchip kernel --apic xapic,x2apic --ipi icr \
        --apicv host,inhibit --workload pingpong --target halt --iterations "$N" --warmup 3 \
        -q --json "$OUT/runs/avic-$1-halt.json" 2>&1 | tail -n 40 || fails=$((fails + 1))
    save_partial
}

params
grep -m1 -o 'flags.*' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'svm|npt|avic|x2avic' | tr '\n' ' '
echo
dmesg | grep -E 'SVM: (AVIC|x2AVIC)'
ipivmm host >"$OUT/host-avic.txt" 2>&1
ipivmm host --json >"$OUT/host-avic.json" 2>/dev/null
grep -E 'AVIC|x2AVIC' "$OUT/host-avic.txt"
save_partial

want selftests && selftests on
want matrix && matrix on
if want preset; then
    echo "== preset avic-broadcast"
    timeout 2700 ipivmm sweep --preset avic-broadcast --iterations "$N" --warmup 3 -q \
        --json "$OUT/runs/avic-preset.json" 2>&1 | tail -n 80 || fails=$((fails + 1))
    save_partial
fi
dmesg >"$OUT/dmesg-avic-on.txt"

if want selftests || want matrix; then
    reload 0
    want selftests && selftests off
    want matrix && matrix off
    reload 1
fi

dmesg >"$OUT/dmesg-probe.txt"
save_partial
echo "probe-avic: $fails failures"
[ "$fails" = 0 ]
