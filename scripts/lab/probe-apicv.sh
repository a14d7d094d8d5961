#!/bin/sh
# Probe run as step `extra` in the lab's guest (scripts/lab/build-selftests.sh
# packs it as /lab/extra.sh): do VMs with an in-kernel LAPIC enter under
# kvm_intel's APICv? KVM selftests (the peer) and ipivmm side by side, then,
# when lab.matrix=N is on the command line, the APICv matrix with N
# iterations under enable_apicv=Y and again after reloading kvm_intel with
# enable_apicv=0 (JSON in runs/sweep-apicv-on.json and runs/sweep-apicv-off.json),
# and kvm_intel is then reloaded as it was (lab.off=1: without a matrix, only
# the selftests again under enable_apicv=0); with lab.faults=1 the guest_faults
# tests one by one (lab.faults=NAME,NAME: only these).
set -o pipefail
export PATH=/bin:/lab/bin
P=/sys/module/kvm_intel/parameters
OUT=${OUT:-/out}
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
# What is there so far onto the output disk (init.sh saves only after a step,
# and a step that wedges the guest would take everything with it).
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
params() { echo "== kvm_intel: enable_apicv=$(cat $P/enable_apicv) enable_ipiv=$(cat $P/enable_ipiv 2>/dev/null) dump_invalid_vmcs=$(cat $P/dump_invalid_vmcs)"; }

params
grep -m1 -o 'vmx flags.*' /proc/cpuinfo
for t in sync_regs_test userspace_io_test xapic_state_test; do
    echo "== selftest $t"
    timeout 300 /lab/selftests/$t 2>&1 | tail -n 12
    echo "rc=$?"
done
echo "== selftest xapic_ipi_test -s 2"
timeout 600 /lab/selftests/xapic_ipi_test -s 2 2>&1 | tail -n 20
echo "rc=$?"
for m in "--irqchip user" "--irqchip kernel --apic xapic" "--irqchip kernel --apic x2apic" \
    "--irqchip split --apic x2apic" "--irqchip kernel --apic x2apic --ipi pv" \
    "--irqchip kernel --apic xapic --apicv inhibit"; do
    echo "== ipivmm run $m"
    timeout 300 ipivmm run $m --iterations 10 --warmup 2 --timeout 120 --serial none 2>&1 | tail -n 45
    echo "rc=$?"
done

save_partial

# enable_apicv is kvm.ko's variable (x86.c), only exposed as a kvm_intel
# parameter: reloading kvm_intel without it keeps the last value, so it is
# always given explicitly.
APICV0=$(cat $P/enable_apicv)
N=$(arg matrix)
fails=0
if [ -n "$N" ] || [ -n "$(arg off)" ]; then
    for pass in on off; do
        if [ $pass = off ]; then
            rmmod kvm_intel && insmod /lab/modules/kvm-intel.ko $(arg kvm | tr ',' ' ') enable_apicv=0 || fails=$((fails + 1))
            params
            # lab.off=1: the peers again without APICv.
            for t in "xapic_state_test" "xapic_ipi_test -s 2"; do
                echo "== selftest $t (enable_apicv=0)"
                timeout 600 /lab/selftests/$t 2>&1 | tail -n 20
                echo "rc=$?"
            done
            save_partial
        fi
        [ -n "$N" ] || continue
        params
        echo "== sweep, enable_apicv $pass"
        timeout 2400 ipivmm sweep --irqchip kernel,split --apic xapic,x2apic --ipi icr,pv \
            --apicv host,inhibit --workload pingpong --iterations "$N" --warmup 3 \
            --json "$OUT/runs/sweep-apicv-$pass.json" 2>&1 | tail -n 80 || fails=$((fails + 1))
        save_partial
    done
    # Back to the parameters the guest booted with, for the steps after this one.
    rmmod kvm_intel && insmod /lab/modules/kvm-intel.ko $(arg kvm | tr ',' ' ') \
        enable_apicv=$([ "$APICV0" = Y ] && echo 1 || echo 0) || fails=$((fails + 1))
    params
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
