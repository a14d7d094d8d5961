#!/bin/busybox sh
# PID 1 of the lab's guest (scripts/lab.sh): a Debian kernel under QEMU TCG
# with an emulated SVM (or VMX) CPU. Loads the real kvm_amd/kvm_intel, runs
# the pass named on the kernel command line (lab.pass=quick|full|shell), and
# writes every result as a tar archive onto the raw disk /dev/vda, which
# scripts/lab.sh unpacks on the host. Each step's exit status goes to
# steps.tsv; nothing here decides pass or fail (scripts/lab/verify.sh does).
export PATH=/bin:/lab/bin HOME=/root TERM=dumb OUT=/out
arg() { sed -n "s/.*\blab\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
say() { echo "lab: $*"; }

# Kernel modules in dependency order (scripts/lab.sh resolved them from each
# module's .modinfo and wrote this list).
load_modules() { # $@: extra parameters for the vendor module
    while read -r mod; do
        case $mod in
        kvm-amd | kvm-intel) continue ;;
        esac
        insmod "/lab/modules/$mod.ko" 2>/dev/null || true
    done </lab/modules/order
    if grep -qw svm /proc/cpuinfo; then VENDOR=kvm-amd; else VENDOR=kvm-intel; fi
    insmod "/lab/modules/$VENDOR.ko" "$@"
}

# One step: a name, a timeout in seconds, then the command. Output goes to
# $OUT/<name>.log, the verdict to steps.tsv and a marker line to the console.
# Steps past the pass's deadline (lab.deadline, seconds since boot) are not
# started, and no step runs beyond it: results of finished steps always get out.
step() {
    name=$1 limit=$2
    shift 2
    now=$(cut -d. -f1 /proc/uptime)
    left=$((DEADLINE - now))
    if [ "$left" -le 0 ]; then
        printf '%s\t%s\t%s\n' "$name" deadline 0 >>$OUT/steps.tsv
        say "step $name: not started, past the pass's deadline"
        return 0
    fi
    # A reboot after a wedge resumes after the steps that finished.
    case ",$(arg done)," in
    *",$name,"*)
        say "step $name: done in an earlier boot"
        return 0
        ;;
    esac
    [ "$limit" -gt "$left" ] && limit=$left
    say "step $name: $*"
    start=$(date +%s)
    # Its own session (through /init again, so shell functions can be steps),
    # so a timeout can stop the whole tree after saying where it was stuck.
    setsid /init __fn "$@" >"$OUT/$name.log" 2>&1 &
    pid=$!
    # Wall time from the clock, not from counting sleeps: a loaded emulator
    # stretches every `sleep 1`.
    until=$(($(date +%s) + limit))
    timed_out=0
    while kill -0 $pid 2>/dev/null; do
        if [ "$(date +%s)" -ge $until ]; then
            timed_out=1
            say "step $name: timed out after ${limit}s; stacks in $name.log"
            stacks >>"$OUT/$name.log" 2>&1
            kill -TERM -$pid 2>/dev/null
            sleep 5
            kill -KILL -$pid 2>/dev/null
            break
        fi
        sleep 1
    done
    wait $pid
    rc=$?
    [ $timed_out = 1 ] && rc=124
    secs=$(($(date +%s) - start))
    printf '%s\t%s\t%s\n' "$name" "$rc" "$secs" >>$OUT/steps.tsv
    say "step $name: rc=$rc in ${secs}s"
    save
    return 0
}

# Where every user thread is, for a step that timed out.
stacks() {
    echo "=== lab: threads of every user process at the timeout"
    for t in /proc/[0-9]*/task/[0-9]*; do
        [ -s "${t%/task/*}/cmdline" ] || continue
        echo "--- $(tr '\0' ' ' <"${t%/task/*}/cmdline" | cut -c1-100) [tid ${t##*/} $(cat "$t/comm")] wchan=$(cat "$t/wchan" 2>/dev/null)"
        cat "$t/stack" 2>/dev/null
    done
}

# Every KVM integration-test binary, with every skip turned into a failure.
run_tests() { # $1: label (suffix of the output names)
    for t in /lab/tests/*; do
        n=$(basename "$t")
        IPIVMM_REQUIRE_KVM=1 IPIVMM_REQUIRE_HW_KVM=1 IPIVMM_LIFECYCLE_CYCLES=20 \
            IPIVMM_EXAMPLE_PAYLOAD=$(cat /lab/example-payload) \
            step "test-$n$1" 600 "$t" --test-threads=1 $(cat /lab/tests.skip)
        [ -e "$OUT/test-$n$1.log" ] || continue
        mv "$OUT/test-$n$1.log" "$OUT/tests/$n$1.txt"
        grep -E '^test result:' "$OUT/tests/$n$1.txt" | sed "s/^/lab:   $n: /"
    done
}

host_facts() { ipivmm host >"$OUT/host.txt" && ipivmm host --json >"$OUT/host.json"; }

ipi_sweep() { # $1: name, then extra flags
    name=$1
    shift
    step "$name" 1800 ipivmm sweep --irqchip kernel,split,user --apic xapic,x2apic \
        --ipi icr,pv --apicv host,inhibit --json "$OUT/runs/$name.json" "$@"
}

# Repeats of the configuration that once hung, alone and beside two busy loops.
inhibit_repeats() { # $1: runs per APIC mode
    fails=0
    for apic in x2apic xapic; do
        for i in $(seq "$1"); do
            if ! ipivmm run --apic "$apic" --apicv inhibit --target halt --iterations 50 \
                --warmup 5 --serial none -q --timeout 60 --json "$OUT/runs/inhibit-$apic-$i.json"; then
                echo "run $apic #$i failed"
                fails=$((fails + 1))
            fi
        done
    done
    echo "inhibit repeats: $fails failed of $(($1 * 2))"
    [ $fails -eq 0 ]
}

# The VM test binaries again and again (hunting rare hangs; not in a pass).
stress_tests() { # $1: rounds
    for i in $(seq "$1"); do
        for t in /lab/tests/pingpong /lab/tests/modes /lab/tests/guest_faults; do
            echo "round $i: $t"
            IPIVMM_REQUIRE_KVM=1 "$t" --test-threads=1 -q 2>&1 | tail -n 2 || return 1
        done
    done
}

under_load() { # $@: command, run beside one busy loop per CPU
    pids=""
    for _ in $(seq "$(nproc)"); do
        sh -c 'while :; do :; done' &
        pids="$pids $!"
    done
    "$@"
    rc=$?
    kill $pids
    return $rc
}

reload_vendor() { # $@: module parameters
    rmmod "$VENDOR" && insmod "/lab/modules/$VENDOR.ko" "$@"
}

# The results so far onto the output disk, after every step: a guest that
# hangs later (or a host timeout) still leaves them to the host.
save() { (cd $OUT && tar -cf /dev/vda .) && sync; }

finish() {
    dmesg >$OUT/dmesg.txt
    cp /proc/cpuinfo $OUT/cpuinfo.txt
    say "writing results to /dev/vda"
    save
    say "done"
    poweroff -f
}

main() {
    /bin/busybox --install -s /bin
    mount -t proc proc /proc
    mount -t sysfs sys /sys
    mount -t devtmpfs dev /dev
    mount -t tmpfs tmp /tmp
    mount -t tracefs nodev /sys/kernel/tracing
    mount -t debugfs nodev /sys/kernel/debug
    mkdir -p $OUT $OUT/tests $OUT/runs
    PASS=$(arg pass)
    PASS=${PASS:-quick}

    say "pass $PASS on $(uname -r), $(nproc) CPUs"
    # The host's watchdog: a guest whose user space stops gets no heartbeat out.
    (while sleep 20; do echo "lab: heartbeat $(cut -d' ' -f1 /proc/uptime)"; done) &
    load_modules
    for p in /sys/module/kvm_amd/parameters/* /sys/module/kvm_intel/parameters/*; do
        [ -e "$p" ] && echo "$(basename "$(dirname "$(dirname "$p")")").$(basename "$p")=$(cat "$p")"
    done >$OUT/module-params.txt
    if [ ! -c /dev/kvm ]; then
        say "no /dev/kvm after loading $VENDOR"
        printf 'load-kvm\t1\t0\n' >>$OUT/steps.tsv
        finish
    fi
    say "$VENDOR loaded: $(tr '\n' ' ' <$OUT/module-params.txt)"

    ITER=$(arg iterations)
    DEADLINE=$(arg deadline)
    export DEADLINE=${DEADLINE:-3600}
    STEPS=$(arg steps)
    if [ -n "$STEPS" ]; then
        # lab.steps=a,b: only these steps of the pass (scripts/lab.sh --steps).
        for s in $(echo "$STEPS" | tr ',' ' '); do
            case $s in
            host) step host 60 host_facts ;;
            sweep) ipi_sweep sweep --workload pingpong,broadcast --iterations "${ITER:-30}" --warmup 3 -q ;;
            tests) run_tests "" ;;
            inhibit) step inhibit-repeats 1800 inhibit_repeats "${ITER:-3}" ;;
            inhibit-loaded) step inhibit-repeats-loaded 1800 under_load inhibit_repeats "${ITER:-3}" ;;
        stress) step stress 3000 stress_tests "${ITER:-20}" ;;
            *) say "unknown step $s" ;;
            esac
        done
        PASS=custom
    fi
    case $PASS in
    custom) ;;
    shell)
        say "interactive shell: ipivmm and the test binaries are in /lab; 'poweroff -f' ends"
        setsid cttyhack sh
        finish
        ;;
    quick)
        step host 60 host_facts
        ipi_sweep sweep --workload pingpong,broadcast --iterations "${ITER:-30}" --warmup 3 -q
        run_tests ""
        step inhibit-repeats 900 inhibit_repeats 3
        reload_vendor npt=0
        step sweep-npt0 900 ipivmm sweep --irqchip kernel --apic xapic,x2apic --ipi icr,pv \
            --workload pingpong --iterations "${ITER:-30}" --warmup 3 -q --json $OUT/runs/sweep-npt0.json
        ;;
    full)
        step host 60 host_facts
        ipi_sweep sweep --iterations "${ITER:-100}" --warmup 10 -q
        ipi_sweep sweep-halt --target halt --workload pingpong --iterations "${ITER:-100}" --warmup 10 -q
        for p in avic-broadcast ipiv-unicast apicv-topology; do
            step "preset-$p" 1800 ipivmm sweep --preset "$p" --iterations "${ITER:-100}" --warmup 10 -q \
                --json "$OUT/runs/preset-$p.json"
        done
        run_tests ""
        step inhibit-repeats 1800 inhibit_repeats 20
        step inhibit-repeats-loaded 1800 under_load inhibit_repeats 20
        reload_vendor npt=0
        ipi_sweep sweep-npt0 --workload pingpong,broadcast --iterations "${ITER:-100}" --warmup 10 -q
        run_tests "-npt0"
        ;;
    *)
        say "unknown pass '$PASS'"
        printf 'pass\t1\t0\n' >>$OUT/steps.tsv
        ;;
    esac
    finish
}

if [ "${1:-}" = __fn ]; then
    shift
    "$@"
    exit $?
fi
main
