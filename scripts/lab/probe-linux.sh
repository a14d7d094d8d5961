#!/bin/sh
# The Linux pass's step `extra` in the lab's guest (`cargo xtask lab linux`
# packs it as /lab/extra.sh with the L2 kernel and ipivmm's guest
# initramfs: xtask/src/lab/linux_guest.rs). ipivmm boots a Linux guest
# nested under the lab's kvm_amd (booted with avic=1 on the AVIC QEMU) and
# runs its workloads between phase markers (docs/linux-guest.md). Parts,
# chosen with lab.probe= (default boot,broadcast):
#   boot       linux:idle at 2 vCPUs, x2APIC: the nested boot's time
#   broadcast  linux:ipi-broadcast at 2 and 4 vCPUs, xAPIC and x2APIC,
#              --apicv host (AVIC on) and inhibit (AVIC off: the PIT lever)
#   workloads  the other workloads at 2 vCPUs, x2APIC, AVIC on and off
#   modes      linux:ipi-broadcast in the other modes a Linux guest runs
#              in: the split irqchip (no IOAPIC) in both APIC modes, PV IPIs
#              advertised (x2APIC, 2 and 4 vCPUs)
#   ci         linux:ipi-broadcast at 2 vCPUs, x2APIC, AVIC on and off (the
#              two runs whose checks matter most: accelerated writes, and
#              one exit per broadcast)
#   sweep      `ipivmm sweep` of linux:ipi-broadcast at 2 vCPUs, xAPIC and
#              x2APIC (its dry run, then the 2 rows, 2 repeats each): a
#              Linux workload planned, repeated and cross-checked like a
#              payload's, one results file (runs/linux-sweep.json)
#   pv         the PV levers (docs/modes.md, "Levers"), each with and
#              without its flag, AVIC inhibited, 4 vCPUs on one host CPU
#              (targets preempted: what sched-yield and TLB flush act on;
#              the sched-yield runs boot with nopvspin, so that a PV
#              spinlock's kick is not counted as a yield); judged by
#              plans/lab-pv-features.toml too
#   seeds      seed 000's table (`cargo xtask lab seeds`, docs/seeds.md):
#              linux:ipi-broadcast and linux:ebizzy at the vCPU counts of
#              lab.vcpus= (default 2), xAPIC and x2APIC, AVIC on (--apicv
#              host) and off (inhibit): the report's avic0/avic1 x
#              xAPIC/x2APIC
#   intel      the Intel lab (kvm_intel under Bochs, docs/lab-intel.md):
#              linux:ipi-unicast and linux:ipi-broadcast, x2APIC, at the
#              vCPU counts of lab.vcpus= (default 2,4), APICv host and
#              inhibit, under enable_ipiv=Y, then kvm_intel reloaded with
#              enable_ipiv=0 and the same again; each run gated by
#              --expect: the target's CAL counts every operation, and the
#              sender's ICR-write exits are 0 under IPIv with APICv active
#              (Linux sends the 2-vCPU broadcast as a virtualized unicast;
#              measured 2026-12-06; from 3 vCPUs on it is an all-but-self
#              shorthand, which IPIv does not virtualize: >= 1 there), >= 1
#              per operation otherwise; lab.ipiv_order=off,on runs the
#              IPIv-off half first (a boot cut short keeps those runs)
# lab.iterations=N: operations per measured phase (default 50).
# Results: $OUT/runs/linux-*.json (one run each), judged by the host with
# plans/lab-linux.toml (xtask/src/lab/recorded.rs).
set -o pipefail
export PATH=/bin:/lab/bin
OUT=${OUT:-/out}
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
save_partial() { [ -b "${DISK:-}" ] && (cd "$OUT" && tar -cf "$DISK" .) && sync; }
N=$(arg iterations)
N=${N:-50}
PARTS=$(arg probe)
PARTS=${PARTS:-boot,broadcast}
want() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
K=/lab/linux/vmlinuz
I=/lab/linux/initrd.cpio.gz
fails=0

P=/sys/module/kvm_intel/parameters
run() { # name, then ipivmm run flags
    name=$1
    shift
    echo "== linux $name: $*"
    echo "lab: probe: linux $name" >/dev/console
    start=$(cut -d' ' -f1 /proc/uptime)
    timeout 1500 ipivmm run --kernel $K --initrd $I --repeat 1 --timeout 1200 \
        --iterations "$N" --warmup 5 --context-events --json "$OUT/runs/linux-$name.json" \
        "$@" >"$OUT/tests/linux-$name.log" 2>&1
    rc=$?
    end=$(cut -d' ' -f1 /proc/uptime)
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$start" "$end" >>"$OUT/linux-runs.tsv"
    tail -n 40 "$OUT/tests/linux-$name.log"
    echo "rc=$rc"
    [ "$rc" = 0 ] || fails=$((fails + 1))
    save_partial
}

grep -m1 -o 'flags.*' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'svm|npt|avic|x2avic|vmx|ept|ipi_virt' | tr '\n' ' '
echo
echo "kvm_amd: avic=$(cat /sys/module/kvm_amd/parameters/avic 2>/dev/null)"
echo "kvm_intel: enable_apicv=$(cat $P/enable_apicv 2>/dev/null) enable_ipiv=$(cat $P/enable_ipiv 2>/dev/null)"
ipivmm host >"$OUT/host-linux.txt" 2>&1
save_partial

want boot && run boot-x2apic-2 --workload linux:idle --vcpus 2 --apic x2apic
if want broadcast; then
    for v in 2 4; do
        for a in x2apic xapic; do
            for m in host inhibit; do
                run "broadcast-$a-$v-$m" --workload linux:ipi-broadcast --vcpus $v --apic $a --apicv $m
            done
        done
    done
fi
if want modes; then
    for a in x2apic xapic; do
        run "broadcast-$a-2-split" --workload linux:ipi-broadcast --vcpus 2 --apic $a --irqchip split
    done
    for v in 2 4; do
        run "broadcast-x2apic-$v-pv" --workload linux:ipi-broadcast --vcpus $v --apic x2apic --ipi pv
    done
fi
if want ci; then
    for m in host inhibit; do
        run "broadcast-x2apic-2-$m" --workload linux:ipi-broadcast --vcpus 2 --apic x2apic --apicv $m
    done
fi
if want sweep; then
    echo "== linux sweep"
    echo "lab: probe: linux sweep" >/dev/console
    set -- --kernel $K --initrd $I --workload linux:ipi-broadcast --apic xapic,x2apic --vcpus 2 \
        --iterations "$N" --warmup 5 --timeout 1200 --repeat 2 --context-events
    ipivmm sweep "$@" --dry-run >"$OUT/tests/linux-sweep-plan.log" 2>&1
    echo "dry run rc=$?"
    cat "$OUT/tests/linux-sweep-plan.log"
    start=$(cut -d' ' -f1 /proc/uptime)
    timeout 3000 ipivmm sweep "$@" --observer-effect 0 --wide --json "$OUT/runs/linux-sweep.json" \
        >"$OUT/tests/linux-sweep.log" 2>&1
    rc=$?
    end=$(cut -d' ' -f1 /proc/uptime)
    printf '%s\t%s\t%s\t%s\n' sweep "$rc" "$start" "$end" >>"$OUT/linux-runs.tsv"
    tail -n 60 "$OUT/tests/linux-sweep.log"
    echo "rc=$rc"
    [ "$rc" = 0 ] || fails=$((fails + 1))
    save_partial
fi
if want workloads; then
    for w in ipi-unicast ipi-multicast hackbench tlb-shootdown ebizzy; do
        for m in host inhibit; do
            p=""
            [ $w = ipi-multicast ] && p="--param 0x2"
            run "$w-x2apic-2-$m" --workload linux:$w --vcpus 2 --apic x2apic --apicv $m $p
        done
    done
fi
if want pv; then
    one="--vcpus 4 --apic x2apic --apicv inhibit --pin 0,0,0,0"
    for on in on off; do
        f() { [ $on = on ] && echo "$1"; }
        run "pv-eoi-$on" --workload linux:ipi-broadcast --vcpus 2 --apic x2apic --apicv inhibit $(f --pv-eoi)
        # nopvspin: KVM counts a PV spinlock's kick (KVM_HC_KICK_CPU, under
        # KVM_FEATURE_PV_UNHALT, which ipivmm leaves as KVM offers it) as a
        # directed yield too; without PV spinlocks the count is
        # KVM_HC_SCHED_YIELD's alone.
        run "pv-sched-yield-$on" --workload linux:ipi-broadcast $one --cmdline nopvspin $(f --pv-sched-yield)
        run "pv-tlb-flush-$on" --workload linux:tlb-shootdown $one $(f --pv-tlb-flush)
    done
fi
if want seeds; then
    vcpus=$(arg vcpus)
    for v in $(echo "${vcpus:-2}" | tr ',' ' '); do
        for w in ipi-broadcast ebizzy; do
            for a in xapic x2apic; do
                for m in inhibit host; do
                    run "seed000-$w-$a-$v-$m" --workload linux:$w --vcpus $v --apic $a --apicv $m
                done
            done
        done
    done
fi
intel_pass() { # ipiv on|off: every unicast and broadcast run of the Intel part
    vcpus=$(arg vcpus)
    for v in $(echo "${vcpus:-2,4}" | tr ',' ' '); do
        for w in unicast broadcast; do
            for m in host inhibit; do
                exits="vcpu0.phase.icr_write_exits >= vcpu0.records.operations"
                # IPIv virtualizes unicasts only (SDM "IPI Virtualization"):
                # Linux's broadcast to more than one target is a shorthand.
                [ "$1-$m" = on-host ] && { [ $w = unicast ] || [ $v = 2 ]; } &&
                    exits="vcpu0.phase.icr_write_exits == 0"
                run "ipiv-$1-$w-x2apic-$v-$m" --workload linux:ipi-$w --vcpus $v --apic x2apic --apicv $m \
                    --expect "vcpu1.records.linux_cal >= vcpu0.records.operations" --expect "$exits"
            done
        done
    done
}
ipiv_load() { # Y|N: kvm_intel reloaded with enable_ipiv=$1 unless it has it
    [ "$(cat $P/enable_ipiv)" = "$1" ] && return 0
    /init __fn hold_vm stop
    rmmod kvm_intel && insmod /lab/modules/kvm-intel.ko $(arg kvm | tr ',' ' ') enable_apicv=1 enable_ipiv=$1 ||
        { echo "reload with enable_ipiv=$1 failed"; fails=$((fails + 1)); }
    /init __fn hold_vm start
    echo "kvm_intel: enable_apicv=$(cat $P/enable_apicv) enable_ipiv=$(cat $P/enable_ipiv)"
}
if want intel; then
    order=$(arg ipiv_order)
    for ipiv in $(echo "${order:-on,off}" | tr ',' ' '); do
        case $ipiv in
        on) ipiv_load Y ;;
        off) ipiv_load N ;;
        *) echo "lab.ipiv_order: '$ipiv' is not on or off" && fails=$((fails + 1)) && continue ;;
        esac
        intel_pass $ipiv
    done
fi
save_partial
echo "probe-linux: $fails failures"
[ "$fails" = 0 ]
