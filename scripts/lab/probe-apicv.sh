#!/bin/sh
# Probe run as step `extra` in the lab's guest (scripts/lab/build-selftests.sh
# packs it as /lab/extra.sh): kvm_intel's APICv and IPI virtualization
# under the lab's Bochs. KVM selftests (the peer) and ipivmm side by side
# under the booted parameters, then, per kernel argument:
#   lab.ipiv=N    the IPIv sweeps, N iterations, each run under
#                 enable_ipiv=Y and =N (sweep --host-param): the
#                 ipiv-unicast preset (runs/preset-ipiv-unicast.json), unicast
#                 and broadcast to halted targets (runs/sweep-ipiv-halt.json)
#                 and broadcast to spinning ones (runs/sweep-ipiv-broadcast.json);
#   lab.matrix=N  the APICv matrix, N iterations, under enable_apicv=Y
#                 enable_ipiv=Y (runs/sweep-apicv-ipiv.json), enable_apicv=Y
#                 enable_ipiv=N (runs/sweep-apicv-on.json) and enable_apicv=0
#                 (runs/sweep-apicv-off.json);
#   lab.off=1     the selftests again under enable_ipiv=N and enable_apicv=0;
#   lab.faults=1  the guest_faults tests one by one (lab.faults=NAME,NAME: only these);
#   lab.runs=0    without the ten ipivmm runs after the booted selftests;
#   lab.trace=1   KVM's event injections (kvm_inj_virq, kvm_inj_exception) traced
#                 around each selftest, the re-injected ones listed
#                 (trace-NAME.txt): where a spurious event in a guest comes from,
# kvm_intel back to the booted parameters in between.
set -o pipefail
export PATH=/bin:/lab/bin
P=/sys/module/kvm_intel/parameters
OUT=${OUT:-/out}
mkdir -p "$OUT/runs"
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
# What is there so far onto the output disk (init.sh saves only after a step,
# and a step that wedges the guest would take everything with it).
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
params() { echo "== kvm_intel: enable_apicv=$(cat $P/enable_apicv) enable_ipiv=$(cat $P/enable_ipiv 2>/dev/null) dump_invalid_vmcs=$(cat $P/dump_invalid_vmcs)"; }
fails=0
# enable_apicv is kvm.ko's variable (x86.c), only exposed as a kvm_intel
# parameter: reloading kvm_intel without it keeps the last value, so it is
# always given explicitly; enable_ipiv is kvm_intel's own (default Y).
# The lab's held VM (init.sh's hold_vm, scripts/lab/hold-vm.c) keeps
# kvm_intel in use: it is released around the reload, or rmmod fails.
reload() { # enable_apicv enable_ipiv
    /init __fn hold_vm stop
    rmmod kvm_intel && insmod /lab/modules/kvm-intel.ko $(arg kvm | tr ',' ' ') enable_apicv="$1" enable_ipiv="$2" ||
        { echo "== reload kvm_intel enable_apicv=$1 enable_ipiv=$2 FAILED"; fails=$((fails + 1)); }
    /init __fn hold_vm start
    params
}
yn01() { [ "$1" = Y ] && echo 1 || echo 0; }
APICV0=$(yn01 "$(cat $P/enable_apicv)")
IPIV0=$(yn01 "$(cat $P/enable_ipiv 2>/dev/null)")
T=/sys/kernel/tracing
trace_on() {
    [ -n "$(arg trace)" ] && [ -d $T/events/kvm ] || return 0
    echo 0 >$T/tracing_on
    echo >$T/trace
    echo 1 >$T/events/kvm/kvm_inj_virq/enable
    echo 1 >$T/events/kvm/kvm_inj_exception/enable
    echo 1 >$T/tracing_on
}
trace_off() { # name
    [ -n "$(arg trace)" ] && [ -d $T/events/kvm ] || return 0
    echo 0 >$T/tracing_on
    grep -v '^#' $T/trace >"$OUT/trace-$1.txt"
    echo "   injections: $(grep -c 'kvm_inj_' "$OUT/trace-$1.txt"), re-injected: $(grep -c 'reinjected' "$OUT/trace-$1.txt")"
    grep 'reinjected' "$OUT/trace-$1.txt" | sed 's/.*kvm_inj_/kvm_inj_/' | sort | uniq -c | sed 's/^/   /'
    echo 0 >$T/events/kvm/kvm_inj_virq/enable
    echo 0 >$T/events/kvm/kvm_inj_exception/enable
}
# Every selftest packed (build-selftests.sh), each with its own time limit.
selftests() { # label
    for t in /lab/selftests/*; do
        n=${t##*/}
        a=""
        [ "$n" = xapic_ipi_test ] && a="-s 2"
        echo "== selftest $n $a ($1)"
        echo "lab: probe: selftest $n ($1)" >/dev/console
        trace_on
        timeout 600 "$t" $a 2>&1 | tail -n 15
        echo "rc=$?"
        trace_off "$n-$(echo "$1" | tr -c 'a-zA-Z0-9_\n' _)"
    done
}
ipivmm_run() { # flags...
    echo "== ipivmm run $*"
    echo "lab: probe: ipivmm run $*" >/dev/console
    timeout 300 ipivmm run --repeat 1 "$@" --iterations 10 --warmup 2 --timeout 120 --serial none 2>&1 | tail -n 45
    echo "rc=$?"
}

params
grep -m1 -o 'vmx flags.*' /proc/cpuinfo
echo "== ipivmm host"
ipivmm host 2>&1 | tail -n 40
selftests "booted"
save_partial
# lab.runs=0: the selftests alone (a peer's check of a new Bochs series).
[ "$(arg runs)" = 0 ] || for m in "--irqchip user" "--irqchip kernel --apic xapic" "--irqchip kernel --apic x2apic" \
    "--irqchip split --apic x2apic" "--irqchip kernel --apic x2apic --ipi pv" \
    "--irqchip kernel --apic xapic --apicv inhibit" "--irqchip kernel --apic x2apic --apicv inhibit" \
    "--irqchip kernel --apic xapic --workload broadcast" "--irqchip kernel --apic x2apic --workload broadcast" \
    "--irqchip kernel --apic x2apic --target halt"; do
    ipivmm_run $m
done
save_partial

N=$(arg ipiv)
if [ -n "$N" ]; then
    sweep() { # name, flags...
        n=$1
        shift
        echo "== sweep $n"
        echo "lab: probe: sweep $n" >/dev/console
        timeout 1500 ipivmm sweep --repeat 1 "$@" --host-param kvm_intel.enable_ipiv=Y,N --iterations "$N" --warmup 3 \
            --json "$OUT/runs/$n.json" 2>&1 | tail -n 60 || fails=$((fails + 1))
        params
        save_partial
    }
    sweep preset-ipiv-unicast --preset ipiv-unicast
    sweep sweep-ipiv-halt --irqchip kernel --apic xapic,x2apic --ipi icr --apicv host \
        --workload pingpong,broadcast --target halt
    sweep sweep-ipiv-broadcast --irqchip kernel --apic xapic,x2apic --ipi icr --apicv host \
        --workload broadcast
fi

N=$(arg matrix)
if [ -n "$N" ]; then
    for pass in ipiv:1:1 on:1:0 off:0:0; do
        name=${pass%%:*}
        v=${pass#*:}
        reload "${v%:*}" "${v#*:}"
        echo "== sweep, APICv matrix $name"
        echo "lab: probe: APICv matrix $name" >/dev/console
        timeout 2400 ipivmm sweep --repeat 1 --irqchip kernel,split --apic xapic,x2apic --ipi icr,pv \
            --apicv host,inhibit --workload pingpong --iterations "$N" --warmup 3 \
            --json "$OUT/runs/sweep-apicv-$name.json" 2>&1 | tail -n 80 || fails=$((fails + 1))
        save_partial
    done
    reload "$APICV0" "$IPIV0"
fi

if [ -n "$(arg off)" ]; then
    reload 1 0
    selftests "enable_ipiv=N"
    save_partial
    reload 0 0
    selftests "enable_apicv=0"
    save_partial
    reload "$APICV0" "$IPIV0"
fi

dmesg >"$OUT/dmesg-probe.txt"
save_partial

# lab.faults=1: the guest_faults tests one at a time, each announced on the
# console first (a test that stops the whole guest is then still named);
# lab.faults=NAME,NAME: only these.
F=$(arg faults)
if [ -n "$F" ] && [ -x /lab/tests/guest_faults ]; then
    if [ "$F" = 1 ]; then
        F=$(/lab/tests/guest_faults --list 2>/dev/null | sed -n 's/: test$//p')
    else
        F=$(echo "$F" | tr ',' ' ')
    fi
    for t in $F; do
        echo "lab: probe: guest_faults $t" >/dev/console
        echo "== guest_faults $t"
        IPIVMM_REQUIRE_KVM=1 timeout 300 /lab/tests/guest_faults --exact "$t" --test-threads=1 2>&1 | tail -n 15
        echo "rc=$?"
        echo "lab: probe: guest_faults $t done" >/dev/console
        save_partial
    done
fi
echo "== dmesg (last 200 lines)"
dmesg | tail -n 200
[ "${fails:-0}" = 0 ]
