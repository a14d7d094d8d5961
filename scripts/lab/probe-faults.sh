#!/bin/sh
# Probe run as step `extra` in the lab's guest (scripts/lab/build-selftests.sh
# packs it as /lab/extra.sh; scripts/lab.sh appends that archive when
# LAB_EXTRA_CPIO names it): the lab's faults (docs/lab.md, "Lab faults"),
# each case again and again with KVM's tracepoints on, beside the KVM
# selftest that does what ipivmm's halted target does (xapic_ipi_test).
#
# A run that fails keeps its output, its JSON and the last KVM events before
# it (faults/CASE-N.trace.gz: every kvm_exit with rip, exit info and
# exit_int_info, every injection). A run still going after its expected time
# is snapshotted while it hangs (faults/CASE-N.stall.txt: its threads' states
# and kernel stacks, KVM's per-VM stats twice 10 s apart, /proc/interrupts).
#
# Kernel arguments: lab.faults=CASE,CASE (default: every case below),
# lab.faults_n=N (runs per case scaled by N, default 1).
# On the console: "lab: faults: begin CASE" / "lab: faults: CASE: F of N failed".
set -o pipefail
export PATH=/bin:/lab/bin
OUT=${OUT:-/out}
T=/sys/kernel/tracing
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
console() { echo "lab: faults: $*" >/dev/console; }

# Many VMs are created and destroyed below: hold one, as init.sh does for the
# steps (scripts/lab/hold-vm.c says why).
hold-vm &
HOLD=$!

mkdir -p "$OUT/faults"
echo 8192 >$T/buffer_size_kb
for e in kvm_exit kvm_entry kvm_inj_exception kvm_inj_virq kvm_userspace_exit kvm_msr \
    kvm_apic_accept_irq kvm_eoi kvm_page_fault kvm_emulate_insn kvm_pio; do
    echo 1 >$T/events/kvm/$e/enable 2>/dev/null || echo "no tracepoint kvm:$e"
done

# What a run that has not ended looks like from the guest's kernel.
snapshot() { # pid
    for t in /proc/"$1"/task/*; do
        echo "--- tid ${t##*/} $(cat "$t/comm") state=$(cut -d' ' -f3 "$t/stat") cpu=$(cut -d' ' -f39 "$t/stat") wchan=$(cat "$t/wchan" 2>/dev/null)"
        cat "$t/stack" 2>/dev/null
    done
    for d in /sys/kernel/debug/kvm/[0-9]*-*; do
        [ -e "$d/exits" ] || continue
        echo "--- $d"
        for s in exits irq_window_exits halt_exits halt_wakeup irq_injections nmi_injections \
            irq_exits io_exits request_irq_exits signal_exits; do
            [ -e "$d/$s" ] && printf '%s=%s ' "$s" "$(cat "$d/$s")"
        done
        echo
    done
    grep -E '^ *(RES|CAL|LOC|TLB):' /proc/interrupts
}

# fault_case NAME RUNS EXPECTED_S COMMAND...: EXPECTED_S is how long a run
# normally takes at most here; one still going after it is snapshotted.
fault_case() {
    fc=$1 runs=$2 expect=$3
    shift 3
    case ",$(arg faults)," in ",," | *",$fc,"*) ;; *) return 0 ;; esac
    console "begin $fc"
    fails=0
    for i in $(seq "$runs"); do
        echo >$T/trace
        echo 1 >$T/tracing_on
        start=$(date +%s)
        json=""
        [ "$1" = ipivmm ] && json="--json $OUT/faults/$fc-$i.json"
        IPIVMM_REQUIRE_KVM=1 IPIVMM_REQUIRE_HW_KVM=1 "$@" $json >"$OUT/faults/$fc-$i.log" 2>&1 &
        pid=$!
        snapped=0
        while kill -0 $pid 2>/dev/null; do
            if [ $snapped = 0 ] && [ $(($(date +%s) - start)) -ge "$expect" ]; then
                snapped=1
                { snapshot $pid; sleep 10; echo "=== 10 s later"; snapshot $pid; } >"$OUT/faults/$fc-$i.stall.txt" 2>&1
                console "$fc #$i still running after ${expect}s: snapshot taken"
            fi
            sleep 1
        done
        wait $pid
        rc=$?
        echo 0 >$T/tracing_on
        echo "$fc #$i: rc=$rc in $(($(date +%s) - start))s"
        if [ $rc = 0 ] && [ $snapped = 0 ]; then
            rm -f "$OUT/faults/$fc-$i.log" "$OUT/faults/$fc-$i.json"
        else
            [ $rc = 0 ] || fails=$((fails + 1))
            tail -n 4 "$OUT/faults/$fc-$i.log"
            gzip -c $T/trace >"$OUT/faults/$fc-$i.trace.gz"
        fi
    done
    echo "$fc: $fails of $runs failed"
    console "$fc: $fails of $runs failed"
    save_partial
}

n=$(arg faults_n)
n=${n:-1}
r="-q --serial none"
# Fault 4's mechanism in the peer: a halter doing sti; hlt; cli and a sender
# that waits for each IPI to be taken and the halter to halt again.
fault_case selftest-xapic-ipi $((4 * n)) 60 /lab/selftests/xapic_ipi_test -s 30
# Fault 4: targets halted with `sti; hlt`, each IPI sent as soon as the target
# published that it is halting (no settle time), and the lab's inhibit repeats.
fault_case halt-settle0-x2apic $((4 * n)) 60 ipivmm run --repeat 1 --apic x2apic --target halt --halt-settle-ns 0 --iterations 2000 --warmup 5 $r --timeout 120
fault_case halt-settle0-xapic $((4 * n)) 60 ipivmm run --repeat 1 --apic xapic --target halt --halt-settle-ns 0 --iterations 2000 --warmup 5 $r --timeout 120
fault_case inhibit-halt-x2apic $((8 * n)) 30 ipivmm run --repeat 1 --apic x2apic --apicv inhibit --target halt --iterations 50 --warmup 5 $r --timeout 60
# Fault 3: the user-irqchip x2APIC ping-pong.
fault_case user-x2apic-pingpong $((20 * n)) 30 ipivmm run --repeat 1 --irqchip user --apic x2apic --iterations 30 --warmup 3 $r --timeout 60
# Fault 1: the flood-lost step's run, and shorter floods.
fault_case flood-lost $((2 * n)) 150 ipivmm run --repeat 1 --workload flood --apic x2apic --iterations 200000 --warmup 10 $r --timeout 300
fault_case flood-short $((12 * n)) 60 ipivmm run --repeat 1 --workload flood --apic x2apic --iterations 2000 --warmup 10 $r --timeout 120
# Fault 5: the AVIC preset's rows that failed (docs/lab.md, "The AVIC rows'
# race, found"); AVIC-active only on the AVIC lab's QEMU with lab.kvm=avic=1.
for apic in xapic x2apic; do
    for v in 4 8; do
        fault_case avic-broadcast-$apic-$v $((5 * n)) 60 ipivmm run --repeat 1 --irqchip kernel --apicv host \
            --workload broadcast --vcpus $v --apic $apic --realtime-hint --iterations 30 --warmup 3 $r --timeout 60
    done
done
# Fault 2: each guest_floods test alone.
if [ -x /lab/tests/guest_floods ]; then
    for t in $(/lab/tests/guest_floods --list 2>/dev/null | sed -n 's/: test$//p'); do
        fault_case "floods-$t" $((3 * n)) 150 /lab/tests/guest_floods --exact "$t" --test-threads=1
    done
fi
echo 0 >$T/tracing_on
kill $HOLD 2>/dev/null
dmesg >"$OUT/dmesg-faults.txt"
save_partial
exit 0
