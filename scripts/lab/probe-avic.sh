#!/bin/sh
# The AVIC pass's step `extra` in the lab's guest (`cargo xtask lab avic`
# packs it as /lab/extra.sh with scripts/lab/build-selftests.sh): kvm_amd runs
# with avic=1 on QEMU's emulated AVIC (scripts/lab/build-qemu.sh). Parts,
# chosen with lab.probe= (one boot each: step `extra` has 3000 s):
#   selftests  the KVM selftests (the peer) with AVIC on, AVIC's exits traced
#              (kvm_avic_incomplete_ipi by ID code, kvm_avic_unaccelerated_access
#              by register: avic-trace.txt), then the same with avic=0;
#   matrix     ipivmm's AVIC matrix with AVIC on (`ipivmm check
#              plans/lab-avic-on.toml`: runs/avic-on*.json, avic-on.tap) and
#              the same with avic=0 (plans/lab-avic-off.toml: avic-off*):
#              kernel and split irqchip, xAPIC and x2APIC, --apicv host and
#              inhibit, ping-pong, broadcast, logical multicast and self-IPIs
#              to spinning targets, ping-pong to halted targets, PV IPIs;
#   preset     sweep --preset avic-broadcast at 2, 4 and 8 vCPUs
#              (plans/lab-avic-preset.toml: runs/avic-preset.json,
#              avic-preset.tap; 180 does not finish on 2 emulated CPUs);
#   halt-polling  sweep --preset halt-polling: the host's kvm.halt_poll_ns
#              against --halt-poll-ns 0, a halted target
#              (plans/lab-halt-polling.toml: runs/halt-polling.json,
#              halt-polling.tap): kvm_amd polls where kvm_pvm does not.
#              Asked for by name only;
#   topology   sweep --preset apicv-topology on a machine of two sockets
#              (`--sockets 2 --smp 4`: plans/lab-apicv-topology.toml,
#              runs/apicv-topology.json, apicv-topology.tap; topology.txt
#              each CPU's package and each NUMA node's CPUs). Asked for by
#              name only.
# lab.iterations=N: iterations per run (default 30).
# Outcomes: $OUT/selftests.tsv (name, avic, rc), each plan's TAP and JUnit
# and the JSON documents, the trace summaries; the xtask reads them back
# (xtask/src/lab/avic.rs).
set -o pipefail
export PATH=/bin:/lab/bin
P=/sys/module/kvm_amd/parameters
T=/sys/kernel/tracing
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

# The lab's held VM (init.sh's hold_vm, scripts/lab/hold-vm.c) stays for the
# whole probe: selftests and sweeps create and destroy VMs, and each time the
# VM count would touch zero KVM flips a static key, patching __schedule
# under the other CPU, which now and then froze both emulated CPUs
# (docs/lab.md, "Hangs"). It is released only around the module reload.
reload() { # avic value (0|1); the other lab.kvm= parameters stay
    keep=""
    for p in $(arg kvm | tr ',' ' '); do
        case $p in avic=*) ;; *) keep="$keep $p" ;; esac
    done
    /init __fn hold_vm stop
    rmmod kvm_amd && insmod /lab/modules/kvm-amd.ko $keep avic="$1" ||
        { echo "reload with avic=$1 failed"; fails=$((fails + 1)); }
    /init __fn hold_vm start
    params
}

# AVIC's two exit tracepoints, for the selftests: which ID codes
# (AVIC_INCOMPLETE_IPI, docs/kernel-paths.md A8-A10) and which registers
# (AVIC_NOACCEL, A11) each test made the emulated AVIC report.
trace_start() {
    echo 0 >$T/tracing_on
    echo 8192 >$T/buffer_size_kb
    : >$T/trace
    for e in kvm_avic_incomplete_ipi kvm_avic_unaccelerated_access; do
        echo 1 >$T/events/kvm/$e/enable
    done
    echo 1 >$T/tracing_on
}
trace_stop() { # test name
    echo 0 >$T/tracing_on
    for e in kvm_avic_incomplete_ipi kvm_avic_unaccelerated_access; do
        echo 0 >$T/events/kvm/$e/enable
    done
    # 6.1's formats: "vcpu=%u, icrh:icrl=%#010x:%08x, id=%u, index=%u" and
    # "vcpu=%u, offset=%#x(%s), %s, %s, vec=%#x" (trap|fault, write|read).
    sed -n -e 's/.*kvm_avic_incomplete_ipi: .* id=\([0-9]*\), .*/incomplete_ipi id=\1/p' \
        -e 's/.*kvm_avic_unaccelerated_access: vcpu=[0-9]*, offset=\([^,]*\), \([a-z]*\), \([a-z]*\),.*/unaccelerated_access \1 \2 \3/p' \
        $T/trace | sort | uniq -c | while read -r n what; do
        printf '%s\t%s\t%s\n' "$1" "$what" "$n"
    done >>"$OUT/avic-trace.tsv"
    grep -c 'kvm_avic_' $T/trace | sed "s/^/$1: events traced: /" >>"$OUT/avic-trace.txt"
    grep -m 5 'kvm_avic_incomplete_ipi' $T/trace >>"$OUT/avic-trace.txt"
    : >$T/trace
}

selftests() { # label (on|off)
    for t in /lab/selftests/*; do
        n=$(basename "$t")
        args=""
        [ "$n" = xapic_ipi_test ] && args="-s 5"
        echo "lab: probe: selftest $n (avic $1)" >/dev/console
        echo "== selftest $n $args (avic $1)"
        [ "$1" = on ] && trace_start
        timeout 600 "$t" $args >/tmp/selftest.log 2>&1
        rc=$?
        [ "$1" = on ] && trace_stop "$n"
        tail -n 25 /tmp/selftest.log
        echo "rc=$rc"
        printf '%s\t%s\t%s\n' "$n" "$1" "$rc" >>"$OUT/selftests.tsv"
        cp /tmp/selftest.log "$OUT/tests/selftest-$n-avic-$1.log"
        save_partial
    done
}

# A plan of plans/ (the sweeps and what they must satisfy: docs/lab.md,
# "AVIC") with `ipivmm check`: TAP into $OUT/NAME.tap, JUnit beside it, each
# experiment's results runs/EXPERIMENT.json. Each sweep rewrites its JSON
# after every run (durable rows); the results go onto the disk every SAVE_S
# seconds while it runs, so the rows a sweep finished before a freeze reach
# the host too (kept beside the resumed boot's as NAME.before-bootN.json).
# An expectation that fails is the TAP's to report (exit 1); anything else
# (no verdict at all) is a failure of the probe.
SAVE_S=15
check() { # name (avic-on, avic-off, avic-preset, halt-polling): plans/lab-NAME.toml
    name=$1 plan=/lab/plans/lab-$1.toml
    echo "== check $name: $plan"
    echo "lab: probe: check $name" >/dev/console
    sed "s/--iterations [0-9]*/--iterations $N/" "$plan" >"/tmp/lab-$name.toml"
    timeout 2400 ipivmm check "/tmp/lab-$name.toml" --json-dir "$OUT/runs" \
        --junit "$OUT/$name.junit.xml" >"$OUT/$name.tap" 2>/tmp/check.log &
    pid=$!
    while kill -0 $pid 2>/dev/null; do
        sleep $SAVE_S
        kill -0 $pid 2>/dev/null && save_partial
    done
    wait $pid
    case $? in 0 | 1) ;; *) fails=$((fails + 1)) ;; esac
    tail -n 60 /tmp/check.log
    grep '^not ok\|^# ' "$OUT/$name.tap"
    save_partial
}

params
[ -s /run/hold-vm.pid ] && echo "held VM: hold-vm pid $(cat /run/hold-vm.pid)"
grep -m1 -o 'flags.*' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'svm|npt|avic|x2avic' | tr '\n' ' '
echo
dmesg | grep -E '(SVM|kvm_amd): (AVIC|x2AVIC)' # SVM: on 6.1, kvm_amd: on 6.12
ipivmm host >"$OUT/host-avic.txt" 2>&1
ipivmm host --json >"$OUT/host-avic.json" 2>/dev/null
grep -E 'AVIC|x2AVIC' "$OUT/host-avic.txt"
save_partial

want selftests && selftests on
want matrix && check avic-on
want preset && check avic-preset
if want halt-polling; then
    # lab.halt_poll_ns=NS: kvm's polling limit for the part (default 20 ms).
    # Under TCG a halted round trip takes milliseconds, past the module's
    # 200 µs, so its window never grows and no poll catches a wake-up; a
    # limit scaled to the emulator's pace is the hardware's 200 µs at
    # hardware speed (docs/lab.md, "Halt polling").
    hp=$(arg halt_poll_ns)
    echo "${hp:-20000000}" >/sys/module/kvm/parameters/halt_poll_ns
    echo "kvm.halt_poll_ns=$(cat /sys/module/kvm/parameters/halt_poll_ns)"
    check halt-polling
fi
if want topology; then
    for c in /sys/devices/system/cpu/cpu[0-9]*; do
        echo "package ${c##*/} $(cat "$c/topology/physical_package_id")"
    done >"$OUT/topology.txt"
    for n in /sys/devices/system/node/node[0-9]*; do
        echo "node ${n##*/} $(cat "$n/cpulist")"
    done >>"$OUT/topology.txt"
    cat "$OUT/topology.txt"
    check apicv-topology
fi
dmesg >"$OUT/dmesg-avic-on.txt"

if want selftests || want matrix; then
    reload 0
    want selftests && selftests off
    want matrix && check avic-off
    reload 1
fi

dmesg >"$OUT/dmesg-probe.txt"
save_partial
echo "probe-avic: $fails failures"
[ "$fails" = 0 ]
